"""gpuplan's side of ``vs_aiconfigurator.py``: its capacity plan for a question (``plan_answer``,
the one place the plan is invoked, so it can be re-run as the plan changes) and aiconfigurator's
picks replayed in gpuplan's serving simulator (``replay``).

How a question is put to gpuplan. aiconfigurator answers "the most tokens/s per GPU on N GPUs
within TTFT and TPOT"; ``serve plan`` answers "the fewest GPUs that serve R requests/s within
TTFT and TPOT". Both are asked at the same load: R is the request rate aiconfigurator's chosen
deployment claims for the N GPUs (its tokens/s/GPU x N / OSL), and gpuplan's tokens/s/GPU is R x
OSL over the GPUs it needs (up to ``MAX_GPUS_FACTOR`` x N: more than N means gpuplan thinks
aiconfigurator's claim needs more GPUs). Both use the checkpoint's format (FP8 weights and KV
cache); every request is ISL prompt and OSL output tokens, Poisson arrivals; gpuplan judges the
SLO at a percentile of its simulated requests (p50 and p99 are both reported), aiconfigurator
against its steady-state batch latencies.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np

from gpuplan.errors import GpuplanError

MODELS_DIR = Path(__file__).resolve().parent / "data" / "vs_aiconfigurator_models"
FORMAT = ("fp8", "fp8")  # (weights, KV cache): aiconfigurator's gemm fp8 and kvcache fp8
MAX_GPUS_FACTOR = 4  # the plan may use up to 4 x the question's GPUs
REQUESTS = 600  # simulated requests per probe (the first 10% are the warm-up)
PERCENTILES = (50.0, 99.0)


def model_ref(key: str) -> str:
    """gpuplan's model for a question's key: the catalogue's, or the Hugging Face config.json
    committed under ``MODELS_DIR`` (copied from aiconfigurator-core 0.12.0's model_configs, which
    are the models' Hugging Face configs) for models the catalogue lacks."""
    local = MODELS_DIR / key
    return str(local) if (local / "config.json").exists() else key


def _lengths(q, requests: int) -> tuple[np.ndarray, np.ndarray]:
    return np.full(requests, q.isl), np.full(requests, q.osl)


def _stack(name: str):
    from gpuplan.sim.stacks import get_stack

    return get_stack(name)


def plan_answer(q, rate_per_s: float, percentile: float, requests: int = REQUESTS) -> dict:
    """``serve plan`` for ``q`` at ``rate_per_s``: the cheapest configuration meeting the SLO
    at ``percentile``, as a row (layout, tp, replicas, gpus, latencies), with its search time;
    ``error`` (one line) where no configuration meets it."""
    from gpuplan.sim.runtime.serving.plan import plan
    from gpuplan.sim.runtime.serving.plan_space import SearchSpace, Slo

    space = SearchSpace(formats=(FORMAT,), max_gpus=MAX_GPUS_FACTOR * q.gpus,
                        stack=_stack(q.stack))  # fmt: skip
    slo = Slo(ttft_s=q.ttft_ms / 1e3, tpot_s=q.tpot_ms / 1e3, percentile=percentile)
    started = time.perf_counter()
    try:
        result = plan(model_ref(q.model), q.gpu, rate_per_s=rate_per_s, slo=slo,
                      lengths=_lengths(q, requests), requests=requests, space=space, top=1)  # fmt: skip
    except GpuplanError as err:
        return {"error": str(err), "search_s": time.perf_counter() - started}
    row = result.best_rows[0]
    pct = f"p{percentile:g}"
    return {
        "layout": row["layout"], "tp": row["tp"], "pp": row["pp"], "replicas": row["replicas"],
        "max_seqs": row["max_seqs"], "gpus": row["gpus"],
        "ttft_s": row[f"ttft_{pct}_s"], "tpot_s": row[f"tpot_{pct}_s"],
        "tokens_per_s_per_gpu": rate_per_s * q.osl / row["gpus"],
        "evaluated": len(result.rows), "search_s": time.perf_counter() - started,
    }  # fmt: skip


def _replay_candidate(best: dict, mode: str):
    """(gpuplan's candidate for aiconfigurator's ``mode`` pick, its expert parallelism), or
    the reason there is none. Experts over ``moe_ep`` GPUs of a TP group replay as gpuplan's
    ``ep`` (``pipeline.check_ep``: ep divides tp); attention DP does not replay."""
    from gpuplan.sim.runtime.serving.plan_space import Candidate

    pools = [best] if mode == "agg" else [best["p"], best["d"]]
    for pool in pools:
        if pool["dp"] != 1 or pool["tp"] % pool["moe_ep"]:
            return f"attention DP {pool['dp']} / expert parallel {pool['moe_ep']}: not in gpuplan"
        if pool["pp"] != 1:
            return f"pipeline parallel {pool['pp']}: not replayed"
    if mode == "agg":
        return Candidate(tp=best["tp"], weight_dtype=FORMAT[0], kv_dtype=FORMAT[1],
                         max_seqs=best["bs"], policy="chunked"), best["moe_ep"]  # fmt: skip
    p, d = best["p"], best["d"]
    if (p["tp"], p["moe_ep"]) != (d["tp"], d["moe_ep"]):
        return (f"prefill TP{p['tp']} and decode TP{d['tp']}: gpuplan's pools share one TP"
                if p["tp"] != d["tp"] else "pools of different EP: gpuplan's share one")  # fmt: skip
    return Candidate(tp=d["tp"], weight_dtype=FORMAT[0], kv_dtype=FORMAT[1], max_seqs=d["bs"],
                     policy="chunked", prefill=p["workers"], decode=d["workers"]), d["moe_ep"]  # fmt: skip


def replay(q, best: dict, mode: str, rate_per_s: float, requests: int = REQUESTS) -> dict:
    """aiconfigurator's ``mode`` pick simulated in gpuplan at ``rate_per_s`` over the question's
    GPUs: TTFT and TPOT at each of ``PERCENTILES`` and whether they meet the SLO; ``skipped``
    (one line) where gpuplan cannot run that deployment."""
    from gpuplan.hwmodels.accelerators import get_accelerator
    from gpuplan.sim.runtime.serving.on_stack import stack_serving_efficiency
    from gpuplan.sim.runtime.serving.plan_probe import Probe
    from gpuplan.sim.runtime.serving.plan_space import SearchSpace, Slo, _deployment
    from gpuplan.sim.runtime.serving.step_model import StepModel
    from gpuplan.workloads.presets import get_model

    picked = _replay_candidate(best, mode)
    if isinstance(picked, str):
        return {"skipped": picked}
    c, ep = picked
    units = q.gpus // c.unit_gpus
    if units < 1:
        return {"skipped": f"one unit takes {c.unit_gpus} GPUs, more than {q.gpus}"}
    acc, stack = get_accelerator(q.gpu), _stack(q.stack)
    space = SearchSpace(formats=(FORMAT,), stack=stack)
    try:  # a TP wider than a node, say: one line, as gpuplan refuses it
        dep = _deployment(get_model(model_ref(q.model)), acc,
                          stack_serving_efficiency(stack, acc), space, tp=c.tp, ep=ep,
                          weight_dtype=c.weight_dtype, kv_dtype=c.kv_dtype)  # fmt: skip
    except GpuplanError as err:
        return {"skipped": str(err)}
    step, out = StepModel(dep), {"units": units, "gpus": units * c.unit_gpus}
    started = time.perf_counter()
    for pct in PERCENTILES:
        slo = Slo(ttft_s=q.ttft_ms / 1e3, tpot_s=q.tpot_ms / 1e3, percentile=pct)
        try:
            probe = Probe(c, dep, step, rate_per_s=rate_per_s, lengths=_lengths(q, requests),
                          slo=slo, n_requests=requests, seed=0, settle=False)  # fmt: skip
            meets, ttft, tpot = probe.exact(units)
        except GpuplanError as err:  # the deployment does not hold the model, say
            return {"skipped": str(err)}
        out[f"p{pct:g}"] = {"meets": meets, "ttft_s": ttft, "tpot_s": tpot}
    out["sim_s"] = time.perf_counter() - started
    return out


def cluster_rate(answer: dict, q) -> float | None:
    """Requests per second aiconfigurator's chosen deployment claims for the question's GPUs."""
    best = answer.get("best", {}).get(answer.get("chosen"))
    if not best:
        return None
    rate = best["tokens/s/gpu_cluster"] * q.gpus / q.osl
    return rate if math.isfinite(rate) and rate > 0 else None
