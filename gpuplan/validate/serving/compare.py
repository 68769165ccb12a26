"""Predict the measured serving run with gpuplan and tabulate the errors.

``python3 -m gpuplan.validate.serving.compare DIR [--device-key h200] [--no-host-gap]``

The same model shapes, policy (``continuous``: prefill-only iterations first), ``max_seqs``,
token budget, prompt and output lengths and the same measured arrival times are replayed in
``gpuplan.sim.runtime.serving`` with unfused elementwise kernels (``impl="eager"``) and the server's
decode: when its settings say ``cuda_graph``, decode-only iterations replay a graph
(``Deployment.cuda_graph``), and its ``decode_padding`` (batch buckets, fixed attention span)
becomes ``Deployment.decode_buckets`` and ``decode_context_tokens``, so a predicted decode
iteration is the padded work the graph runs; prefill iterations are eager in both. Runs
without those settings are the eager server (no graph, no padding).

The server's own CPU time is a measured input, ``Deployment.iteration_overhead_s``, unless
``--no-host-gap``: the mean time between iterations (settling the last iteration, admitting:
``host_gap_s`` in its iteration log) plus, with padded decode, the mean time a decode iteration
spends on the host before its kernels can start (building and copying the token and position
buffers: ``prep_s``). Predicted against measured: median and p90 of TTFT and TPOT per rate (the
issue's target: within 15%), and the median error of single iterations (measured from the
iteration's start to the synchronization after its last kernel).
Writes ``comparison.json`` and ``comparison.md`` into DIR.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

from gpuplan.hwmodels.accelerators import get_accelerator
from gpuplan.sim.runtime.serving.deployment import Deployment, SchedulerConfig, serving_efficiency
from gpuplan.sim.runtime.serving.engine import simulate
from gpuplan.sim.runtime.serving.requests import Workload
from gpuplan.sim.runtime.serving.step_model import Batch, StepModel
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


def host_terms(iterations: pd.DataFrame) -> tuple[float, float]:
    """(mean host gap between iterations, mean host time of a decode iteration before its
    kernels start; 0 when the log has none)."""
    gap = float(iterations["host_gap_s"].mean())
    if "prep_s" not in iterations:
        return gap, 0.0
    prep = iterations.loc[iterations["kind"] == "decode", "prep_s"].dropna()
    return gap, float(prep.mean()) if len(prep) else 0.0


def padding_of(settings: dict) -> dict:
    """Deployment keywords for the server's decode padding (none for the eager server)."""
    pad = settings.get("decode_padding")
    if not pad:
        return {}
    return {"decode_buckets": tuple(int(b) for b in pad["buckets"]),
            "decode_context_tokens": int(pad["context_tokens"])}  # fmt: skip


def attention_kernel_of(settings: dict) -> str:
    """The attention kernels the server ran: FlashAttention-2 where it left cuDNN out of SDPA's
    dispatch (``--no-cudnn-attention``), else cuDNN's (PyTorch's default dispatch picks it for
    one-query decode on an H200 with torch 2.11: docs/serving_validation.md). Runs recorded
    before the setting existed used the default dispatch."""
    on_gpu = settings.get("device") == "cuda"
    return "cudnn" if on_gpu and settings.get("cudnn_attention", True) else "flash2"


def deployment_of(settings: dict, iterations: pd.DataFrame, *, device_key: str | None,
                  host_gap: bool) -> Deployment:  # fmt: skip
    acc = get_accelerator(device_key or settings.get("device_key") or settings["device_name"])
    overhead = sum(host_terms(iterations)) if host_gap else 0.0
    eff = serving_efficiency(acc.key, attention_kernel_of(settings))
    return Deployment(model=server_model(settings), acc=acc, eff=eff,
                      impl="eager", cuda_graph=bool(settings.get("cuda_graph", False)),
                      iteration_overhead_s=overhead, **padding_of(settings))  # fmt: skip


def scheduler_of(settings: dict) -> SchedulerConfig:
    pad = settings.get("decode_padding") or {}
    longest = settings["prompt_tokens"] + settings["output_tokens"]
    return SchedulerConfig(
        policy="continuous",
        max_seqs=settings["max_seqs"],
        max_batched_tokens=settings["max_batched_tokens"],
        max_model_len=max(longest, pad.get("context_tokens", 0)),
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


def iteration_table(dep, iterations: pd.DataFrame, *, gap_s: float) -> pd.DataFrame:
    """Every measured iteration beside its prediction (``kind``, ``bucket``, ``measured_s``,
    ``predicted_s``, ``abs_pct_error``); the host gap between iterations (``gap_s``, part of the
    deployment's overhead) is outside both."""
    step = StepModel(dep)
    rows = []
    for it in iterations.itertuples():
        if it.kind == "prefill":
            counts = pd.Series(it.prompts).value_counts()
            batch = Batch(prefill=tuple((int(p), 0, int(n)) for p, n in counts.items()))
            bucket = int(it.seqs)
        else:
            batch = Batch(decode_seqs=int(it.seqs), decode_kv_tokens=int(it.kv_tokens))
            bucket = dep.decode_bucket(int(it.seqs))
        predicted = step.iteration_s(batch) - gap_s
        measured = it.end_s - it.start_s
        rows.append({"kind": str(it.kind), "bucket": bucket, "measured_s": measured,
                     "predicted_s": predicted,
                     "abs_pct_error": 100 * abs(predicted - measured) / measured})  # fmt: skip
    return pd.DataFrame(rows)


def iteration_errors(table: pd.DataFrame) -> dict[str, float]:
    """Median |predicted - measured| / measured of single iterations (``iteration_table``),
    by kind (%)."""
    return {str(k): float(g.median()) for k, g in table.groupby("kind")["abs_pct_error"]}


def bucket_errors(table: pd.DataFrame) -> list[dict]:
    """Decode iterations (``iteration_table``) by the batch they run: count, median measured
    and predicted time, and the median error."""
    out = []
    for bucket, g in table[table["kind"] == "decode"].groupby("bucket"):
        out.append({"bucket": int(bucket), "n": len(g),
                    "measured_s": float(g["measured_s"].median()),
                    "predicted_s": float(g["predicted_s"].median()),
                    "median_abs_pct_error": float(g["abs_pct_error"].median())})  # fmt: skip
    return out


def compare(folder: Path, *, device_key: str | None = None, host_gap: bool = True) -> dict:
    settings, requests, iterations = load_run(folder)
    dep = deployment_of(settings, iterations, device_key=device_key, host_gap=host_gap)
    sched = scheduler_of(settings)
    gap_s, prep_s = host_terms(iterations) if host_gap else (0.0, 0.0)
    table = iteration_table(dep, iterations, gap_s=gap_s)
    rows = []
    for rate, measured in requests.groupby("rate_per_s"):
        rows += [{"rate_per_s": float(rate), **r} for r in compare_rate(dep, sched, measured)]
    return {
        "device": dep.acc.key,
        "efficiency_source": dep.eff.source,
        "attention_kernel": dep.eff.attention_kernel,
        "cuda_graph": dep.cuda_graph,
        "decode_buckets": list(dep.decode_buckets),
        "decode_context_tokens": dep.decode_context_tokens,
        "iteration_overhead_s": dep.iteration_overhead_s,
        "host_gap_s": gap_s,
        "decode_prep_s": prep_s,
        "rows": rows,
        "iteration_median_abs_pct_error": iteration_errors(table),
        "iteration_errors_by_bucket": bucket_errors(table),
        "within_target": all(r["abs_pct_error"] <= TARGET_PCT for r in rows),
    }


def markdown(doc: dict) -> str:
    decode = "eager, over the longest running context"
    if doc.get("cuda_graph") or doc.get("decode_buckets") or doc.get("decode_context_tokens"):
        how = "CUDA graph replay" if doc.get("cuda_graph") else "eager"
        decode = (f"{how}, batch padded to {doc.get('decode_buckets')}, attention span "
                  f"{doc.get('decode_context_tokens')}")  # fmt: skip
    lines = [
        f"Serving validation on {doc['device']} (hardware fit: {doc['efficiency_source']}; "
        f"host time per iteration given: {1e3 * doc['iteration_overhead_s']:.3f} ms; "
        f"attention kernels: {doc.get('attention_kernel', 'flash2')})",
        "",
        f"decode iterations: {decode}; prefill iterations: eager",
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
    if doc.get("iteration_errors_by_bucket"):
        lines += [
            "",
            "| decode rows | iterations | measured (ms) | predicted (ms) | median error |",
            "|---:|---:|---:|---:|---:|",
        ]
        for b in doc["iteration_errors_by_bucket"]:
            lines.append(
                f"| {b['bucket']} | {b['n']} | {1e3 * b['measured_s']:.3f} | "
                f"{1e3 * b['predicted_s']:.3f} | {b['median_abs_pct_error']:.1f}% |"
            )
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
