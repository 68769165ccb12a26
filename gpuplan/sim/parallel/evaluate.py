"""Evaluate strategies given as arrays of degrees: step-time terms and memory terms per strategy.

One function serves both the scalar estimate (0-d arrays: one strategy, itemized afterwards by
``estimate``) and the search (arrays of a million strategies at once). Compute comes in as the
per-shape kernel times of ``stage.shape_times`` (gathered per strategy); everything else is a
closed form of the degrees (``step_time``, ``memory``, ``collectives``).
"""

from __future__ import annotations

import numpy as np

from gpuplan.sim.parallel import step_time
from gpuplan.sim.parallel.collectives import links
from gpuplan.sim.parallel.memory import memory_terms, stage_params
from gpuplan.sim.parallel.model_facts import ACT_BYTES
from gpuplan.sim.parallel.stage import StageKinds, stage_compute
from gpuplan.sim.parallel.topology import Cluster, spans
from gpuplan.sim.stacks.training import pipeline_unsharded, pipeline_zero

# degrees and options every evaluation needs, as arrays (codes: memory.SCHEDULE_CODES, ...)
ARRAY_FIELDS = (
    "tp",
    "pp",
    "dp",
    "cp",
    "ep",
    "sp",
    "zero",
    "mb",
    "m",
    "chunks",
    "sched",
    "rc",
    "fp8",
    "overlap_dp",
    "overlap_tp",
    "overlap_pp",
    "overlap_ep",
    "fused_accum",
    "load",
)


ROW_FIELDS = ("tp", "cp", "pp", "dp", "ep", "mb")  # what every collective's size depends on


def comm_rows(s: dict):
    """(one strategy per distinct row of ``ROW_FIELDS``, each strategy's row) for many
    strategies, so each collective is priced once per row (``step_time.on_rows``); None for
    one strategy."""
    columns = [np.asarray(s[f]) for f in ROW_FIELDS]
    if columns[0].ndim != 1 or len(columns[0]) < 2:
        return None
    key = np.zeros(len(columns[0]), dtype=np.int64)
    for col in columns:  # a mixed-radix number: one int64 sort instead of a row-wise one
        col = col.astype(np.int64)
        base = int(col.max()) + 1
        if int(key.max()) >= (2**62) // base:
            return None
        key = key * base + col
    _keys, rep, inverse = np.unique(key, return_index=True, return_inverse=True)
    return rep, inverse.ravel()


def evaluate(
    facts,
    s: dict,
    t: dict,
    *,
    kinds: StageKinds,
    cluster: Cluster,
    acc,
    eff,
    seq: int,
    state_precision: str,
    attention: str,
    optimizer: str = "fused",
    grads_persist: bool = True,
    runtime=None,
) -> tuple[dict, dict, dict]:
    """(stage compute, step-time terms, memory terms) of the strategies in ``s``, whose pipeline
    stages are ``kinds`` ((K,) for one strategy, (K, N) for N). ``optimizer``: the AdamW
    implementation (fused or foreach); ``grads_persist``: gradients live in a buffer kept
    between steps (Megatron's and DDP's) rather than freed by ``zero_grad(set_to_none=True)``;
    ``runtime``: the stack's ``stacks.training.TrainingRuntime`` (None: 2-byte reductions, one
    gather per block, fully hidden buckets, attention-core selective recomputation)."""
    c, terms = time_terms(facts, s, t, kinds=kinds, cluster=cluster, acc=acc, eff=eff, seq=seq,
                          state_precision=state_precision, optimizer=optimizer,
                          runtime=runtime)  # fmt: skip
    mem = memory_of(facts, s, kinds=kinds, seq=seq, state_precision=state_precision,
                    attention=attention, optimizer=optimizer, grads_persist=grads_persist,
                    runtime=runtime)  # fmt: skip
    return c, terms, mem


def _selective(runtime) -> str:
    return runtime.selective if runtime is not None else "attention-core"


def time_terms(facts, s: dict, t: dict, *, kinds: StageKinds, cluster: Cluster, acc, eff,
               seq: int, state_precision: str, optimizer: str = "fused",
               runtime=None) -> tuple[dict, dict]:  # fmt: skip
    """(stage compute, step-time terms) of ``evaluate``: each strategy's from its own inputs
    only, so a search may take them for the strategies that fit alone."""
    # a runtime that keeps ZeRO-2/3 blocks whole under PP has ZeRO-1's traffic (stacks.training)
    unsharded = pipeline_unsharded(runtime, s["pp"], s["zero"])
    s = dict(s, zero=pipeline_zero(runtime, s["pp"], s["zero"]))
    tp, cp, ep = s["tp"], s["cp"], s["ep"]
    c = stage_compute(t, kinds, rc=s["rc"], selective=_selective(runtime))
    sp_ = spans(cluster, tp, cp, s["dp"], s["pp"], ep)
    tokens = s["mb"] * seq / cp
    kv_heads = np.maximum(1, facts.n_kv_heads // tp)
    nbytes = {
        "act": tokens * facts.d_model * ACT_BYTES,
        "kv": tokens * kv_heads * facts.kv_dim * ACT_BYTES,
        "dispatch": tokens * facts.top_k * facts.d_model * ACT_BYTES * s["load"],
    }
    stage_p, _blocks, _expert = stage_params(facts, kinds, tp, ep)
    max_p = np.max(np.where(kinds.count > 0, stage_p, 0.0), axis=0)
    group = s["dp"] * cp
    local_p = np.where(s["zero"] >= 1, max_p / group, max_p)
    # whole blocks: their shard is cast once a step
    cast_p = np.where(unsharded, local_p / s["m"], np.where(s["zero"] >= 3, local_p, max_p))
    params = {
        "stage": stage_p,
        "max_stage": max_p,
        "embedding": facts.vocab * facts.d_model / tp,
        "optimizer_s": step_time.optimizer_s(local_p, state_precision, acc, eff, optimizer),
        "accumulate_s": np.where(unsharded, step_time.cast_add_s(max_p, acc, eff),
                                 step_time.accumulate_s(max_p, state_precision, acc, eff)),
        "autograd_s": eff.autograd_s,  # the autograd engine's start of each backward
        "cast_s": step_time.cast_s(cast_p, state_precision, s["rc"], acc, eff),
        "cast_bytes": step_time.cast_bytes(cast_p, state_precision, s["rc"]),
        "optimizer_bytes": step_time.optimizer_bytes(local_p, state_precision, optimizer),
        "unsynced_accumulation": unsharded,
    }
    if runtime is not None:
        params["grad_bytes"] = runtime.grad_reduce_bytes
        params["gathers_per_block"] = runtime.gathers_per_block
        params["bucket_fraction"] = runtime.bucket_fraction(max_p, group)
        params["overlap_zero3"] = runtime.overlap_zero3
        params["interference"] = runtime.comm_interference
        params["pp_transfers"] = runtime.pp_transfers
        params["launch_blocking"] = runtime.launch_blocking
    params["state_precision"] = state_precision
    s_full = dict(s, tied=facts.tied, comm_rows=comm_rows(s))
    terms = step_time.step_terms(
        lk=links(cluster, eff), sp_=sp_, s=s_full, c=c, k=kinds, bytes_=nbytes, params=params
    )
    if runtime is not None:
        _pytorch_grad_passes(terms, runtime, s, max_p, group, unsharded, acc, eff)
    return c, terms


# DDP with gradient_as_bucket_view=False copies each gradient into its bucket, divided by the
# world size on the way (reducer.cpp mark_variable_ready_dense: ``at::mul_out(bucket_view,
# grad, 1 / div_factor)``, read 4 + write 4 bytes), and back into param.grad after the
# all-reduce (finalize_bucket_dense, copy_bucket_to_grad: 4 + 4), on the compute stream, once a
# step (the micro-batches before the last run under no_sync())
DDP_BUCKET_COPY_BYTES = 16
AUTOGRAD_ACCUMULATE_BYTES = 12  # fp32 grad += new: read 4 + 4, write 4 (TrainingRuntime)
# TrainingRuntime.fsdp2_copies: copy-in of a local bf16 shard, copy-out of a gathered bf16
# parameter, the backward re-gather's fp32 -> bf16 cast of the shard, a one-rank reduce-scatter
FSDP2_COPY_IN_BYTES, FSDP2_COPY_OUT_BYTES, FSDP2_RECAST_BYTES, FSDP2_ONE_RANK_RS_BYTES = 4, 4, 6, 8


def _pytorch_grad_passes(terms, runtime, s, max_p, group, unsharded, acc, eff) -> None:
    """PyTorch's own gradient passes, in place in ``terms``: DDP's bucket copies (in the
    data-parallel reduction, ``dp_comm``) and the added gradients of the later micro-batches
    (``grad_accumulation``), each a bandwidth-bound pass over the local gradients."""
    zero, m = np.asarray(s["zero"]), np.asarray(s["m"])
    copied = _bucket_copy(runtime, group, zero)
    terms["dp_comm"] = terms["dp_comm"] + np.where(
        copied, step_time.gradient_pass_s(max_p, DDP_BUCKET_COPY_BYTES, acc, eff), 0.0)
    if runtime.fsdp2_copies:  # TrainingRuntime.fsdp2_copies, per micro-batch
        gathers = np.where(zero >= 3, 2, 1)
        per_mb = (gathers * (FSDP2_COPY_IN_BYTES * max_p / group + FSDP2_COPY_OUT_BYTES * max_p)
                  + (gathers - 1) * FSDP2_RECAST_BYTES * max_p / group
                  + np.where(np.asarray(group) == 1, FSDP2_ONE_RANK_RS_BYTES * max_p, 0.0))
        terms["zero_comm"] = terms["zero_comm"] + np.where(
            (zero >= 2) & ~unsharded, m * per_mb / step_time.pass_bytes_per_s(acc, eff), 0.0)
    if runtime.autograd_accumulation:
        local = np.where(zero >= 2, max_p / group, max_p)
        add = (m - 1) * step_time.gradient_pass_s(local, AUTOGRAD_ACCUMULATE_BYTES, acc, eff)
        terms["grad_accumulation"] = np.where(
            unsharded | ~np.asarray(s["fused_accum"]), terms["grad_accumulation"], add)


def memory_of(facts, s: dict, *, kinds: StageKinds, seq: int, state_precision: str,
              attention: str, optimizer: str = "fused", grads_persist: bool = True,
              runtime=None) -> dict:  # fmt: skip
    """The memory terms of ``evaluate`` (what a search needs to know what fits)."""
    tp, cp, ep = s["tp"], s["cp"], s["ep"]
    unsharded = pipeline_unsharded(runtime, s["pp"], s["zero"])
    zero = pipeline_zero(runtime, s["pp"], s["zero"])
    return memory_terms(
        facts,
        kinds,
        tp=tp,
        pp=s["pp"],
        dp=s["dp"],
        cp=cp,
        ep=ep,
        sp=s["sp"],
        zero=zero,
        pp_unsharded=unsharded,
        mb=s["mb"],
        m=s["m"],
        v=s["chunks"],
        sched=s["sched"],
        rc=s["rc"],
        seq=seq,
        precision_fp8=s["fp8"],  # the GEMM recipe's code (sim.parallel.fp8)
        state_precision=state_precision,
        attention=attention,
        load=s["load"],
        optimizer=optimizer,
        grads_persist=grads_persist,
        selective=_selective(runtime),
        grad_bucket_copy=_bucket_copy(runtime, s["dp"] * cp, zero),
        root_unsharded=runtime is not None and runtime.fsdp2_root_unsharded,
        fp8_saved_inputs=runtime is not None and runtime.fp8_saved_inputs,
    )


def _bucket_copy(runtime, group, zero):
    """Whether DDP's buckets copy the gradients (``TrainingRuntime.ddp_bucket_copy``): a
    wrapped model whose gradients are replicated (ZeRO below 2), over more than one replica or
    on one rank that wraps it anyway."""
    if runtime is None or not runtime.ddp_bucket_copy:
        return False
    return ((np.asarray(group) > 1) | runtime.wrapped_one_rank) & (np.asarray(zero) < 2)
