"""Predict the measured serving run with gpuplan and tabulate the errors.

``python3 -m gpuplan.validate.serving.compare DIR [--device-key h200] [--no-host-gap]``

The same model shapes, policy (``continuous``: prefill-only iterations first), ``max_seqs``,
token budget, prompt and output lengths and the same measured arrival times are replayed in
``gpuplan.sim.serving`` with the eager launch model (``impl="eager"``, no CUDA graph: the server
runs eagerly). The server's own CPU time between iterations (settling the last iteration,
admitting, building index tensors: ``host_gap_s`` in its iteration log) is a measured input,
``Deployment.iteration_overhead_s``, unless ``--no-host-gap``. Predicted against measured:
median and p90 of TTFT and TPOT per rate (the issue's target: within 15%), and the median error
of single iterations (measured from the first launch to the synchronization after the last).
Writes ``comparison.json`` and ``comparison.md`` into DIR.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import numpy as np
import pandas as pd

from gpuplan.hwmodels.accelerators import get_accelerator
from gpuplan.hwmodels.efficiency import efficiency_for
from gpuplan.sim.serving.deployment import Deployment, SchedulerConfig
from gpuplan.sim.serving.engine import simulate
from gpuplan.sim.serving.requests import Workload
from gpuplan.sim.serving.step_model import Batch, StepModel
from gpuplan.workloads.model import ModelConfig

TARGET_PCT = 15.0


def load_run(folder: Path) -> tuple[dict, pd.DataFrame, pd.DataFrame]:
    settings = json.loads((folder / "settings.json").read_text())
    requests = pd.read_json(folder / "requests.jsonl", lines=True)
    iterations = pd.read_json(folder / "iterations.jsonl", lines=True)
    return settings, requests, iterations


def server_model(settings: dict) -> ModelConfig:
    s = settings["shape"]
    longest = settings["prompt_tokens"] + settings["output_tokens"]
    return ModelConfig(
        name=f"server-{settings['model'].split(' ')[0]}",
        n_layers=s["layers"],
        d_model=s["hidden"],
        n_heads=s["heads_q"],
        n_kv_heads=s["heads_kv"],
        d_ff=s["ffn"],
        vocab_size=s["vocab"],
        max_seq_len=max(longest, 4096),
        source="gpuplan.validate.serving.server (random weights)",
    )


def deployment_of(settings: dict, iterations: pd.DataFrame, *, device_key: str | None,
                  host_gap: bool) -> Deployment:  # fmt: skip
    acc = get_accelerator(device_key or settings.get("device_key") or settings["device_name"])
    gap = float(iterations["host_gap_s"].mean()) if host_gap else 0.0
    return Deployment(model=server_model(settings), acc=acc, eff=efficiency_for(acc.key),
                      impl="eager", cuda_graph=False, iteration_overhead_s=gap)  # fmt: skip


def scheduler_of(settings: dict) -> SchedulerConfig:
    return SchedulerConfig(
        policy="continuous",
        max_seqs=settings["max_seqs"],
        max_batched_tokens=settings["max_batched_tokens"],
        max_model_len=settings["prompt_tokens"] + settings["output_tokens"],
    )


def latencies(frame: pd.DataFrame) -> pd.DataFrame:
    done = frame.dropna(subset=["finish_s"])
    out = pd.DataFrame({"ttft_s": done["first_token_s"] - done["arrival_s"]})
    steps = (done["output_tokens"] - 1).where(done["output_tokens"] > 1)
    out["tpot_s"] = (done["finish_s"] - done["first_token_s"]) / steps
    return out


def compare_rate(dep, sched, measured: pd.DataFrame) -> list[dict]:
    measured = measured.sort_values("arrival_s")
    load = Workload(
        arrival_s=measured["arrival_s"].to_numpy(float) - measured["arrival_s"].min(),
        prompt_tokens=measured["prompt_tokens"].to_numpy(np.int64),
        output_tokens=measured["output_tokens"].to_numpy(np.int64),
    )
    predicted = simulate(dep, sched, load, timeline=False).requests
    got, want = latencies(measured), latencies(predicted)
    rows = []
    for metric in ("ttft_s", "tpot_s"):
        for q in (50, 90):
            m = float(np.nanpercentile(got[metric], q))
            p = float(np.nanpercentile(want[metric], q))
            rows.append({"metric": metric, "stat": f"p{q}", "measured": m, "predicted": p,
                         "abs_pct_error": 100 * abs(p - m) / m})  # fmt: skip
    return rows


def iteration_errors(dep, iterations: pd.DataFrame) -> dict[str, float]:
    """Median |predicted - measured| / measured of single iterations, by kind (%)."""
    step = StepModel(dep)
    out = {}
    for kind, group in iterations.groupby("kind"):
        errors = []
        for it in group.itertuples():
            if kind == "prefill":
                counts = pd.Series(it.prompts).value_counts()
                batch = Batch(prefill=tuple((int(p), 0, int(n)) for p, n in counts.items()))
            else:
                batch = Batch(decode_seqs=int(it.seqs), decode_kv_tokens=int(it.kv_tokens))
            predicted = step.iteration_s(batch) - dep.iteration_overhead_s
            measured = it.end_s - it.start_s
            errors.append(100 * abs(predicted - measured) / measured)
        out[str(kind)] = statistics.median(errors)
    return out


def compare(folder: Path, *, device_key: str | None = None, host_gap: bool = True) -> dict:
    settings, requests, iterations = load_run(folder)
    dep = deployment_of(settings, iterations, device_key=device_key, host_gap=host_gap)
    sched = scheduler_of(settings)
    rows = []
    for rate, measured in requests.groupby("rate_per_s"):
        rows += [{"rate_per_s": float(rate), **r} for r in compare_rate(dep, sched, measured)]
    return {
        "device": dep.acc.key,
        "efficiency_source": dep.eff.source,
        "iteration_overhead_s": dep.iteration_overhead_s,
        "rows": rows,
        "iteration_median_abs_pct_error": iteration_errors(dep, iterations),
        "within_target": all(r["abs_pct_error"] <= TARGET_PCT for r in rows),
    }


def markdown(doc: dict) -> str:
    lines = [
        f"Serving validation on {doc['device']} (hardware fit: {doc['efficiency_source']}; "
        f"host time between iterations given: {1e3 * doc['iteration_overhead_s']:.3f} ms)",
        "",
        "| rate (req/s) | metric | stat | measured (ms) | predicted (ms) | error |",
        "|---:|---|---|---:|---:|---:|",
    ]
    for r in doc["rows"]:
        lines.append(
            f"| {r['rate_per_s']:g} | {r['metric']} | {r['stat']} | {1e3 * r['measured']:.2f} | "
            f"{1e3 * r['predicted']:.2f} | {r['abs_pct_error']:.1f}% |"
        )
    iters = ", ".join(f"{k} {v:.1f}%" for k, v in doc["iteration_median_abs_pct_error"].items())
    lines += ["", f"single iterations, median abs error: {iters}"]
    verdict = "all within" if doc["within_target"] else "NOT all within"
    lines.append(f"{verdict} the {TARGET_PCT:g}% target")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python3 -m gpuplan.validate.serving.compare")
    ap.add_argument("folder", help="the server's output folder")
    ap.add_argument("--device-key", help="catalogue key (default: from the run's device name)")
    ap.add_argument("--no-host-gap", action="store_true", help="predict with no per-iteration "
                    "CPU time of the server's own")  # fmt: skip
    args = ap.parse_args(argv)
    folder = Path(args.folder)
    doc = compare(folder, device_key=args.device_key, host_gap=not args.no_host_gap)
    (folder / "comparison.json").write_text(json.dumps(doc, indent=2) + "\n")
    text = markdown(doc)
    (folder / "comparison.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
