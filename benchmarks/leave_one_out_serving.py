"""What leaving each fitted serving-stack parameter out does to the errors of the published rows:
for each parameter of ``fit_stacks.serving``'s grids, hold it at the value that means "no such
cost" (``NEUTRAL``), refit the others with the same grids on the fit part only, and score the fit
and held-out rows per metric (median absolute % error). The first line of each stack is the
committed fit with every parameter in. ``docs/fits.md`` quotes the table this prints.

    python3 benchmarks/leave_one_out_serving.py [--stack eager-2023]
"""

from __future__ import annotations

import argparse

from gpuplan.sim.stacks import get_stack, register
from gpuplan.validate.fit_stacks.serving import GRIDS, SECOND_ROUND, fit_stack, with_values
from gpuplan.validate.published import serving as published

# the value of each parameter that prices no such cost
NEUTRAL = {"call_factor": 1.0, "iteration_overhead_s": 0.0, "overhead_per_rank_s": 0.0,
           "seq_overhead_s": 0.0, "host_factors": ()}  # fmt: skip


def refit_without(name: str, left_out: str | None, fit_rows) -> dict:
    """The stack's values refitted on ``fit_rows`` with ``left_out`` held neutral (None: all in)."""
    grid = dict(GRIDS[name])
    second = dict(SECOND_ROUND.get(name, {}))
    for g in (grid, second):
        if left_out in g:
            g[left_out] = (NEUTRAL[left_out],)
    base = {k: NEUTRAL[k] for k in second}
    original = get_stack(name)
    try:
        register(with_values(name, base))
        values, _ = fit_stack(name, fit_rows, grid)
        if second:
            register(with_values(name, base | values))
            more, _ = fit_stack(name, fit_rows, second)
            values |= more
    finally:
        register(original)
    return values


def scores(name: str, values: dict, rows) -> dict[str, dict[str, float]]:
    """Median absolute % error per split and metric with ``values`` set."""
    original = get_stack(name)
    try:
        register(with_values(name, values))
        out = published.reproduce(rows)
    finally:
        register(original)
    return {split: {m: round(float(g["abs_error_pct"].median()), 2)
                    for m, g in part.groupby("metric")}
            for split, part in out.groupby("split")}  # fmt: skip


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stack", choices=tuple(GRIDS), default=None)
    args = ap.parse_args(argv)
    rows = published.load_rows()
    split = published.split_by_source(rows)
    for name in [args.stack] if args.stack else list(GRIDS):
        mine = rows[rows["engine"].map(published.ENGINE_STACK) == name]
        fit_rows = mine[split[mine.index] == "fit"]
        params = [*GRIDS[name], *SECOND_ROUND.get(name, {})]
        for left_out in [None, *params]:
            values = refit_without(name, left_out, fit_rows)
            s = scores(name, values, mine)
            print(f"{name} without {left_out or '(none)'}: {values}")
            for part in ("fit", "holdout"):
                print(f"    {part:8s} {s[part]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
