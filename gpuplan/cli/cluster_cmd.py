"""``gpuplan cluster SCENARIO``: a cluster over weeks — queueing, placement, failures, checkpoints.

SCENARIO is a YAML file or a built-in name (``gpuplan cluster --list``): ``llama3-405b`` (Llama 3
405B on 16,384 H100s for 54 days, against the interruptions Dubey et al. 2024 report) and
``thousand-gpu`` (a 1,024-GPU cluster under four scheduling and placement policies). Prints, for
each run of the scenario, utilization, goodput, lost work, job completion and queueing
percentiles, energy, interruptions by cause, the published figures where the scenario has them,
and the number of simulated events; ``--repeat N`` runs N seeds and prints means and spreads.
"""

from __future__ import annotations

import argparse
import math
import sys
from functools import partial
from pathlib import Path
from typing import Any

from gpuplan.cli.argtypes import positive_float, random_seed, repeat_count, word
from gpuplan.cli.calibration import add_calibration_option, efficiency_line
from gpuplan.cli.dask_workers import (
    add_sweep_options,
    add_timing_option,
    open_pool,
    pool_label,
    timed,
    with_timing,
)
from gpuplan.cli.device_args import add_gpu_argument
from gpuplan.errors import GpuplanError
from gpuplan.outputs import check_output, figure_suffixes, write_csv
from gpuplan.tables import dump_json, render_table

HEADLINE = (
    ("utilization", "utilization", "pct"),
    ("goodput", "goodput", "pct"),
    ("effective utilization", "effective_utilization", "pct"),
    ("placement efficiency", "placement_efficiency", "pct"),
    ("effective training time", "effective_training_time", "pct"),
    ("interruptions", "interruptions", "int"),
    ("unexpected interruptions", "unexpected_interruptions", "int"),
    ("planned interruptions", "planned_interruptions", "int"),
    ("preemptions", "preemptions", "int"),
    ("lost work (GPU-hours)", "lost_gpu_hours", "int"),
    ("checkpoints (GPU-hours)", "checkpoint_gpu_hours", "int"),
    ("restarts (GPU-hours)", "recovery_gpu_hours", "int"),
    ("energy (MWh)", "energy_kwh", "mwh"),
    ("jobs finished", "finished", "int"),
    ("jobs running", "running", "int"),
    ("jobs queued", "queued", "int"),
    ("jobs rejected", "rejected", "int"),
    ("JCT p50 / p90 / p99 (h)", ("jct_p50_s", "jct_p90_s", "jct_p99_s"), "hours"),
    ("queueing p50 / p90 / p99 (h)", ("queue_p50_s", "queue_p90_s", "queue_p99_s"), "hours"),
    ("checkpoint interval (median of jobs)", "checkpoint_interval_s", "interval"),
)
COMPARE = ("policy", "placement", "utilization", "goodput", "placement_efficiency",
           "effective_utilization", "finished", "queue_p50_s", "jct_p50_s", "interruptions")  # fmt: skip


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "cluster",
        help="simulate a GPU cluster over weeks: scheduling, placement, failures, checkpoints",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("scenario", nargs="?", help="scenario YAML file or built-in name")
    p.add_argument("--seed", type=random_seed,
                   help="random seed, 0 to 2^64 - 1 (default: the scenario's)")  # fmt: skip
    p.add_argument("--repeat", type=repeat_count, default=1,
                   help="run this many seeds, print means")  # fmt: skip
    p.add_argument("--plot", metavar="PNG", type=word,
                   help="write the cluster timeline plot of each run")  # fmt: skip
    p.add_argument("--jobs", metavar="CSV", type=word, help="write the per-job table (all runs)")
    p.add_argument("--events", metavar="CSV", type=word, help="write the per-event table (all runs)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.add_argument("--list", action="store_true", help="list the built-in scenarios")
    p.add_argument("--check", action="store_true",
                   help="check the scenario file against its schema and stop (exit 0 valid, "
                        "2 invalid: one line per problem)")  # fmt: skip
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    add_sweep_options(p)
    add_timing_option(p)
    add_calibration_option(p)
    add_gpu_argument(p, "build the scenario's nodes of this accelerator instead of its preset's "
                     "(the preset's node size and domains, the accelerator's links)")  # fmt: skip
    p.add_argument("--electricity-price", dest="electricity_price", type=positive_float,
                   default=None, help="USD per kWh: each run's energy priced (given by the user)")
    p.set_defaults(func=run)


def run(args) -> int:
    from gpuplan.sim.runtime.cluster.scenario import builtin_scenarios, load_scenario

    if args.list:
        return _list(builtin_scenarios(), args.json)
    if args.check:
        return _check(args)
    if not args.scenario:
        raise GpuplanError("gpuplan cluster needs a SCENARIO (a YAML file, or see --list)")
    _check_outputs(args)
    doc, path = load_scenario(args.scenario)
    seed = int(doc.get("seed", 0)) if args.seed is None else args.seed
    progress = not args.no_progress and not args.json and sys.stderr.isatty()
    with open_pool(args) as pool:
        # one piece per seed, merged in seed order; a bar only when the runs are here
        here = not (args.workers or args.scheduler)
        run_seed = partial(_run_seed, path=path.resolve(), progress=progress and here,
                           calibration=_calibration(args), gpu=args.gpu)  # fmt: skip
        batches = pool.map(run_seed, [seed + k for k in range(args.repeat)])
    results = batches[0]
    _write_tables(args, batches, seed)
    if args.plot:
        _plots(args.plot, results)
    expect = doc.get("expect") or {}
    if args.json:
        doc_out = _with_electricity(_document(batches, expect, seed), args.electricity_price)
        print(dump_json(with_timing(doc_out, args, _timing(args, batches))))
        return 0
    print(render(results, doc, seed, batches if args.repeat > 1 else None, timing=timed(args)))
    if args.electricity_price is not None:
        for r in results:
            usd = r.summary["energy_kwh"] * args.electricity_price
            print(f"electricity of {r.name}: ${usd:,.0f} at ${args.electricity_price:g}/kWh")
    return 0


def _with_electricity(doc: dict, price: float | None) -> dict:
    """Each run's energy priced at ``price`` USD per kWh, where given."""
    if price is not None:
        for run in doc["runs"]:
            run["summary"]["electricity_usd"] = run["summary"]["energy_kwh"] * price
    return doc


def _check_outputs(args) -> None:
    """``--plot``, ``--jobs`` and ``--events`` checked before any work."""
    if args.plot:
        check_output(args.plot, "--plot", suffixes=figure_suffixes())
    for flag in ("jobs", "events"):
        if getattr(args, flag):
            check_output(getattr(args, flag), "--" + flag)


def _list(scenarios: dict, as_json: bool) -> int:
    if as_json:
        print(dump_json({"scenarios": [{"name": n, "path": str(p)}
                                       for n, p in sorted(scenarios.items())]}))  # fmt: skip
        return 0
    for name, path in sorted(scenarios.items()):
        print(f"{name:16s} {path}")
    return 0


def _check(args) -> int:
    """``--check``: every problem of the file, one line each on stderr; exit 2 if any."""
    from gpuplan.sim.runtime.cluster.scenario import check_scenario

    if not args.scenario:
        raise GpuplanError("gpuplan cluster --check needs a SCENARIO (a YAML file)")
    found = check_scenario(args.scenario)
    if args.json:
        print(dump_json({"scenario": args.scenario, "valid": not found, "problems": found}))
    elif not found:
        print(f"{args.scenario}: valid")
    for problem in found:
        print(f"gpuplan: error: {problem}", file=sys.stderr)
    return 2 if found else 0


def _calibration(args) -> str | None:
    """``--calibration``: the fit file's path, checked as the workers will read it."""
    path = getattr(args, "calibration", None)
    if path is not None and not str(path).strip():
        raise GpuplanError("--calibration '' is empty: give a fit file written by "
                           "`gpuplan validate calibrate --out FILE`, or leave the flag out")  # fmt: skip
    return None if path is None else str(Path(path).resolve())


def _run_seed(seed: int, *, path, progress: bool, calibration: str | None = None,
              gpu: str | None = None):  # fmt: skip
    """Every run of the scenario at one seed: one piece of ``--repeat``."""
    from gpuplan.sim.runtime.cluster.scenario import run_scenario

    return run_scenario(path, seed=seed, progress=progress, calibration=calibration, gpu=gpu)


def _untimed(summary: dict) -> dict:
    """A run's summary without its wall-clock figure (that goes to ``timing``)."""
    return {k: v for k, v in summary.items() if k != "wall_s"}


def _timing(args, batches) -> dict[str, Any]:
    runs = [{"name": r.name, "wall_s": [b[k].summary["wall_s"] for b in batches]}
            for k, r in enumerate(batches[0])]  # fmt: skip
    return {"runs": runs, "ran_on": pool_label(args)}


def _document(batches, expect, seed) -> dict[str, Any]:
    runs = []
    for k, result in enumerate(batches[0]):
        entry = result.to_dict() | {"summary": _untimed(result.summary), "seed": seed}
        if len(batches) > 1:
            entry["repeats"] = [_untimed(b[k].summary) for b in batches]
            entry["mean"] = _mean([b[k].summary for b in batches])
        runs.append(entry)
    return {"runs": runs, "expect": expect}


def _mean(summaries: list[dict]) -> dict[str, float]:
    import numpy as np

    keys = [k for k, v in summaries[0].items() if isinstance(v, int | float) and k != "wall_s"]
    out = {}
    for k in keys:
        values = np.array([s[k] for s in summaries], float)
        if np.isfinite(values).all():
            out[k], out[f"{k}_std"] = float(values.mean()), float(values.std())
        else:  # inf (no checkpoints) or NaN (nothing finished): a mean only where all agree
            same = bool((values == values[0]).all())
            out[k], out[f"{k}_std"] = (float(values[0]), 0.0) if same else (math.nan, math.nan)
    return out


def _write_tables(args, batches, seed: int) -> None:
    import pandas as pd

    for flag, attr in (("jobs", "jobs"), ("events", "events")):
        target = getattr(args, flag)
        if target:
            frames = [
                getattr(r, attr).assign(run=r.name, seed=seed + k)  # the seed each run used
                for k, b in enumerate(batches)
                for r in b
            ]
            write_csv(target, pd.concat(frames, ignore_index=True))


def _plots(target: str, results) -> None:
    from pathlib import Path

    from gpuplan.sim.runtime.cluster.plot import plot_timeline

    base = Path(target)
    for k, result in enumerate(results):
        path = base if k == 0 else base.with_name(f"{base.stem}-{k}{base.suffix}")
        plot_timeline(result, path)


def _fmt(kind: str, value) -> str:
    if isinstance(value, tuple):
        return " / ".join(_fmt(kind, v) for v in value)
    if value is None or value != value:  # NaN
        return "-"
    return {
        "pct": lambda v: f"{100 * v:.1f}%",
        "int": lambda v: f"{v:,.0f}",
        "mwh": lambda v: f"{v / 1000:,.1f}",
        "hours": lambda v: f"{v / 3600:.1f}",
        "interval": _interval,
    }[kind](value)


def _interval(seconds: float) -> str:
    """A checkpoint interval in the unit that reads best (inf: no checkpoints)."""
    if seconds == float("inf"):
        return "none"
    return f"{seconds / 60:.1f} min" if seconds < 3600 else f"{seconds / 3600:.1f} h"


def _expected(key, expect: dict, kind: str) -> str:
    if isinstance(key, tuple) or key not in expect:
        return ""
    value = expect[key]
    text = _fmt(kind, value)
    return f"> {text}" if key == "effective_training_time" else text


NO_BAND = ("band: none - the cluster simulation was never validated against a cluster's own "
           "accounting; where a scenario has published figures they are printed beside it")


def render(results, doc: dict, seed: int, batches=None, *, timing: bool = True) -> str:
    expect = doc.get("expect") or {}
    lines = [f"{doc.get('name', 'scenario')}: {doc.get('description', '')}".rstrip(": "),
             NO_BAND, ""]
    for k, result in enumerate(results):
        s = result.summary
        means = _mean([b[k].summary for b in batches]) if batches else None
        lines.append(
            f"== {result.name}: {s['nodes']:,} nodes + {s['spare_nodes']} spares "
            f"({s['capacity_gpus']:,} GPUs), {s['policy']} + {s['placement']} placement, "
            f"{s['simulated_s'] / 86400:.1f} days, seed {seed}"
            + (f" (+{len(batches) - 1} more seeds)" if batches else "")
        )
        took = f" in {s['wall_s']:.2f} s" if timing else ""
        lines.append(f"   simulated {s['events']:,} events{took}")
        if "efficiency_source" in s:
            lines.append(f"   {efficiency_line(s['efficiency_source'])}")
        rows = []
        for label, key, kind in HEADLINE:
            value = tuple(s[x] for x in key) if isinstance(key, tuple) else s[key]
            row = {"metric": label, "simulated": _fmt(kind, value)}
            if kind == "interval" and s["checkpoint_policy"] != "none":  # the policy that chose it
                row["simulated"] += f" ({s['checkpoint_policy']})"
            if means is not None and not isinstance(key, tuple):
                row["mean over seeds"] = (f"{_fmt(kind, means[key])} "
                                          f"± {_fmt(kind, means[key + '_std'])}")  # fmt: skip
            if expect:
                row["published"] = _expected(key, expect, kind)
            rows.append(row)
        cols = ["metric", "simulated"] + (["mean over seeds"] if means else []) + (
            ["published"] if expect else [])  # fmt: skip
        lines += ["", render_table(rows, cols), ""]
        lines += _causes(s, expect.get("interruptions_by_cause") or {})
        lines.append(
            f"   conservation checks: {'ok' if result.conservation.get('ok') else 'FAILED'}"
        )
        lines.append("")
    if len(results) > 1:
        lines += ["== comparison" + (f" (seed {seed})" if batches else ""), "",
                  _comparison(results), ""]  # fmt: skip
        if batches:
            lines += [f"== comparison, mean ± spread over {len(batches)} seeds", "",
                      _comparison_means(batches), ""]  # fmt: skip
    return "\n".join(lines)


def _causes(s: dict, published: dict) -> list[str]:
    causes = s["interruptions_by_cause"]
    if not causes and not published:
        return []
    names = list(dict.fromkeys([*published, *causes]))
    rows = [{"cause": n, "simulated": causes.get(n, 0), "published": published.get(n, "")}
            for n in names]  # fmt: skip
    cols = ["cause", "simulated"] + (["published"] if published else [])
    return [render_table(rows, cols), ""]


def _comparison_means(batches) -> str:
    rows = []
    for k, r in enumerate(batches[0]):
        m = _mean([b[k].summary for b in batches])
        row = {"run": r.name}
        for key in ("utilization", "goodput", "placement_efficiency", "effective_utilization"):
            row[key] = f"{100 * m[key]:.1f}% ± {100 * m[key + '_std']:.1f}"
        rows.append(row)
    return render_table(rows, ["run", "utilization", "goodput", "placement_efficiency",
                               "effective_utilization"])  # fmt: skip


def _comparison(results) -> str:
    rows = []
    for r in results:
        s = r.summary
        row = {"run": r.name}
        for key in COMPARE:
            value = s[key]
            if key in ("utilization", "goodput", "placement_efficiency", "effective_utilization"):
                value = f"{100 * value:.1f}%"
            elif key.endswith("_s"):
                value = f"{value / 3600:.1f} h" if value == value else "-"
            row[key] = value
        rows.append(row)
    return render_table(rows, ["run", *COMPARE],
                        headers={"queue_p50_s": "queue p50", "jct_p50_s": "JCT p50"})  # fmt: skip
