"""``gpuplan estimate``'s feasibility check and its headline figures.

A whole model's step that does not fit on the one GPU ``estimate`` prices raises ``Infeasible``
(``cli.feasibility``) naming the nearest change that fits: for a training step, full
recomputation and a micro-batch of one on the same GPU, else the fewest GPUs ``gpuplan train``
lays it out on (``feasibility.training_infeasible``); for a decode or prefill step, the largest
batch (halving) whose KV cache fits, else the tensor parallelism ``gpuplan serve`` would need for
the weights alone.

The headline of a case: step time, tokens per second, MFU and peak memory. MFU is the model's
FLOPs (no recomputation; an attention backward counted as twice its forward, Chowdhery et al.
2022, appendix B, as ``workloads.ops`` counts them) over the step time and the device's dense
peak in the case's GEMM format (``Accelerator.peak``; datasheets in accelerators.csv).
"""

from __future__ import annotations

import argparse
from typing import Any

from gpuplan.cli.feasibility import flags_text, training_infeasible
from gpuplan.errors import Infeasible
from gpuplan.tables import format_value
from gpuplan.workloads.ops import FLASH_BWD_FLOPS, MODEL_BWD_FLOPS

FLASH_BWD_RATIO = MODEL_BWD_FLOPS / FLASH_BWD_FLOPS  # model / executed FLOPs of a flash backward
MAX_HALVINGS = 12  # batches tried below the given: halving 12 times takes 4,096 sequences to one


def tokens_per_step(kind: str, params: dict[str, Any]) -> float | None:
    """Tokens one step processes: a training or prefill step's batch x sequence, a decode
    step's one new token per sequence."""
    if kind == "train_step":
        return params.get("micro_batch", 1) * params.get("seq", 0)
    if kind == "prefill_step":
        return params.get("batch", 1) * params.get("seq", 0)
    if kind == "decode_step":
        return params.get("batch", 1)
    return None


def model_flops(items) -> float:
    """The step's model FLOPs from its priced items: recomputation left out, a flash attention
    backward at twice its forward (module docstring)."""
    kept = items[items["phase"] != "recompute"]
    bwd_att = (kept["phase"] == "bwd") & (kept["category"] == "attention")
    return float(kept["flops"].sum() - (1 - FLASH_BWD_RATIO) * kept.loc[bwd_att, "flops"].sum())


def headline(out: dict[str, Any], kind: str, acc) -> dict[str, Any]:
    """``tokens_per_s`` and ``mfu`` of a whole model's case (None where they do not apply)."""
    tokens = tokens_per_step(kind, out["params"])
    time_s = out["time_s"]
    dtype = "fp8" if out["params"].get("dtype") == "fp8" else "bf16"
    peak = acc.peak(dtype)
    flops = model_flops(out["items"])
    return {
        "tokens_per_s": tokens / time_s if tokens and time_s > 0 else None,
        "mfu": flops / (time_s * peak) if time_s > 0 and peak else None,
        "model_flops": flops,
    }


def check_fits(kind: str, args: argparse.Namespace, out: dict[str, Any], estimate) -> None:
    """Raise ``Infeasible`` where a whole model's case does not fit and the user did not ask for
    the what-if; ``estimate(args)`` prices the case again with changed flags."""
    if out.get("fits") is not False or getattr(args, "allow_infeasible", False):
        return
    need, have = out["peak_bytes"], out["device_memory_bytes"]
    what = (f"{out['model']}'s {kind.replace('_', '-')} needs {format_value('bytes', need)} on "
            f"one {out['device']}, which has {format_value('bytes', have)}")  # fmt: skip
    tail = " (--allow-infeasible prices it as given, as a what-if)"
    for edits in _candidates(kind, out["params"]):
        trial = estimate(_with(args, edits))
        if trial["fits"]:
            fix = {f"--{k.replace('_', '-')}": str(v) for k, v in edits.items()}
            raise Infeasible(
                f"{what}; nearest change that fits: {flags_text(fix)} "
                f"({format_value('bytes', trial['peak_bytes'])})" + tail, fix=fix)
    if kind == "train_step":
        raise _training_elsewhere(args, out, what)
    if kind in ("decode_step", "prefill_step"):
        raise _tensor_parallel(out, what, tail)
    raise Infeasible(what + tail)


def _candidates(kind: str, params: dict[str, Any]):
    """Flag edits tried in order, nearest first."""
    if kind == "train_step":
        if params.get("recompute") != "full":
            yield {"recompute": "full"}
        if params.get("micro_batch", 1) > 1:
            yield {"recompute": "full", "micro_batch": 1}
        return
    if kind in ("decode_step", "prefill_step"):
        batch = params.get("batch", 1)
        for _ in range(MAX_HALVINGS):
            batch //= 2
            if batch < 1:
                return
            yield {"batch": batch}


def _with(args: argparse.Namespace, edits: dict[str, Any]) -> argparse.Namespace:
    new = argparse.Namespace(**vars(args))
    new.allow_infeasible = True  # a trial is priced whether or not it fits
    for k, v in edits.items():
        setattr(new, k, v)
    return new


def _training_elsewhere(args, out: dict[str, Any], what: str) -> Infeasible:
    """One GPU cannot hold the training state: the fewest GPUs ``gpuplan train`` fits it on."""
    from gpuplan.cli.calibration import efficiency_from_args
    from gpuplan.cli.train_cmd import DEFAULT_TRAINING_STACK
    from gpuplan.sim.parallel.topology import cluster_for
    from gpuplan.workloads.presets import get_model

    params = out["params"]
    cluster = cluster_for(out["device"])
    err = training_infeasible(get_model(out["model"]), cluster, DEFAULT_TRAINING_STACK, gpus=1,
                              global_batch=params.get("micro_batch", 1), seq=params["seq"],
                              eff=efficiency_from_args(args, out["device"]),
                              peak_bytes=out["peak_bytes"], label="one GPU")  # fmt: skip
    if not err.fix:
        return Infeasible(f"{what}; {err}")
    return Infeasible(
        f"{what}; one GPU cannot hold its training state: it fits as `gpuplan train --model "
        f"{out['model']} --gpu {out['device']} {flags_text(err.fix)}` (--allow-infeasible prices the one-GPU "
        "step as a what-if)", fix=err.fix)  # fmt: skip


def _tensor_parallel(out: dict[str, Any], what: str, tail: str) -> Infeasible:
    """The weights alone do not fit one GPU: the tensor parallelism ``gpuplan serve`` would need
    for one request of the case's context (``kv_cache.fitting_tp``, serve's own rule)."""
    from gpuplan.sim.runtime.serving.deployment import SchedulerConfig, deployment
    from gpuplan.sim.runtime.serving.kv_cache import fitting_tp

    weights = out["memory_bytes"].get("weights", 0.0)
    serve = f"gpuplan serve --model {out['model']} --gpu {out['device']}"
    if weights <= out["device_memory_bytes"]:
        return Infeasible(f"{what}; even --batch 1 does not fit: shorten --context, or share "
                          f"the cache over GPUs with `{serve} --tp 2`{tail}", fix={"--batch": "1"})  # fmt: skip
    params = out["params"]
    dep = deployment(out["model"], out["device"], weight_dtype=params.get("dtype", "bf16"))
    context = params.get("context") or params.get("seq")
    tp = fitting_tp(dep, SchedulerConfig(max_model_len=context, max_seqs=1))
    if tp is None:
        return Infeasible(f"{what}; its weights alone ({format_value('bytes', weights)}) need "
                          f"more than one node: `gpuplan serve plan --model {out['model']} --gpu "
                          f"{out['device']} ...` finds a pipeline or a wide-EP layout{tail}")  # fmt: skip
    return Infeasible(
        f"{what}; its weights alone ({format_value('bytes', weights)}) need at least tp={tp}: "
        f"`{serve} --tp {tp}` prices it served" + tail, fix={"--tp": str(tp)})  # fmt: skip
