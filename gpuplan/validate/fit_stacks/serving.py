"""Fit the serving stacks' parameters that no source gives, on the fit part of the published rows.

    python3 -m gpuplan.validate.fit_stacks.serving [--seed 0] [--out gpuplan/sim/runtime/serving/data/stack_fit.json]

Fitted (``stacks.serving``): TensorRT-LLM's host cost per kernel call against eager PyTorch
(``call_factor``) and its CPU time per iteration; the Splitwise profiles' engine's host cost per
call and its CPU time per iteration, per tensor-parallel rank and per running sequence, and then,
in a second round with those held (``SECOND_ROUND``), the CPU cost factor of its A100 machine
against its H100 machine.
Each stack is fitted on the rows of the sources it prices, only those ``split_by_source`` puts
in the fit part (seed 0), by a grid search that minimises the mean over metric kinds of the
median absolute % error. Held-out rows are never read. The output file records the grid, the seed, the rows used and the fitted values.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
from pathlib import Path

import numpy as np

from gpuplan.sim.stacks import get_stack, register
from gpuplan.sim.stacks.serving import FIT_PATH
from gpuplan.validate.published import serving as published

GRIDS = {
    "trt-llm": {
        "call_factor": (0.1, 0.3, 0.5, 0.7, 1.0, 1.5),
        "iteration_overhead_s": (0.0, 5e-4, 1e-3, 2e-3, 3e-3),
    },
    "eager-2023": {
        "call_factor": (0.2, 0.4),
        "iteration_overhead_s": (6e-3, 9e-3, 12e-3),
        "overhead_per_rank_s": (0.0, 5e-4, 1e-3),
        "seq_overhead_s": (1e-4, 2e-4, 3e-4),
    },
}
# fitted after GRIDS, the values found there held: the Splitwise A100 machine's CPU against its
# H100 machine's (DGX A100: two AMD EPYC 7742, Zen 2; DGX H100: two Xeon Platinum 8480C,
# Sapphire Rapids; NVIDIA DGX A100 and DGX H100 user guides, "Hardware Overview")
SECOND_ROUND = {
    "eager-2023": {
        "host_factors": tuple((("a100-sxm-80gb", f),) for f in (1.0, 1.25, 1.5, 1.75, 2.0)),
    },
}
NEUTRAL = {"eager-2023": {"host_factors": ()}}  # the second round's fields before it runs
OUT = FIT_PATH


def with_values(name: str, values: dict):
    """The registered stack ``name`` with ``values`` set (host call factor, runtime fields)."""
    stack = get_stack(name)
    run = stack.serving
    host = stack.host
    if "call_factor" in values:
        host = dataclasses.replace(host, call_factor=values["call_factor"])
    fields = {k: v for k, v in values.items() if k != "call_factor"}
    return dataclasses.replace(stack, host=host, serving=dataclasses.replace(run, **fields))


def score(rows) -> float:
    """Mean over metric kinds of the median absolute % error (rows not run count as 100%)."""
    err = rows["abs_error_pct"].fillna(100.0)
    return float(np.mean([g.median() for _, g in err.groupby(rows["kind"])]))


def fit_stack(name: str, fit_rows, grid: dict) -> tuple[dict, float]:
    original = get_stack(name)
    best, best_score = None, np.inf
    try:
        for combo in itertools.product(*grid.values()):
            values = dict(zip(grid, combo, strict=True))
            register(with_values(name, values))
            s = score(published.reproduce(fit_rows))
            if s < best_score:
                best, best_score = values, s
    finally:
        register(original)
    return best, best_score


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--only", choices=tuple(GRIDS), help="refit one stack, keep the others' fit")
    args = ap.parse_args(argv)
    rows = published.load_rows()
    split = published.split_by_source(rows, seed=args.seed)
    fit = rows[split == "fit"]
    out = {"about": __doc__.strip().splitlines()[0], "seed": args.seed, "stacks": {},
           "grids": GRIDS, "second_round": SECOND_ROUND, "rows": {}, "fit_score_pct": {}}  # fmt: skip
    if args.only and args.out.exists():
        kept = json.loads(args.out.read_text())
        out |= {k: kept[k] for k in ("stacks", "rows", "fit_score_pct")}
        if kept.get("seed") != args.seed:
            ap.error(f"--only: {args.out} was fitted with seed {kept.get('seed')}")
    for name, grid in GRIDS.items():
        if args.only and name != args.only:
            continue
        mine = fit[fit["engine"].map(published.ENGINE_STACK) == name]
        if name in SECOND_ROUND:  # round one without the committed second-round values
            register(with_values(name, NEUTRAL[name]))
        values, s = fit_stack(name, mine, grid)
        if name in SECOND_ROUND:
            original = get_stack(name)
            register(with_values(name, values))
            try:
                more, s = fit_stack(name, mine, SECOND_ROUND[name])
            finally:
                register(original)
            values |= more
        out["stacks"][name] = values
        out["rows"][name] = len(mine)
        out["fit_score_pct"][name] = round(s, 3)
        print(f"{name}: {values} on {len(mine)} fit rows, score {s:.2f}%", flush=True)
    args.out.write_text(json.dumps(out, indent=2, sort_keys=True) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
