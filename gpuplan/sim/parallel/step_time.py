"""The step time of a parallel strategy as closed forms of its degrees (numpy arrays or numbers).

Inputs are per-GPU, per-micro-batch compute times (``sim.parallel.compute``, priced by the one-GPU
kernel models) and the degrees; outputs are named, exposed times whose sum is the step. One
micro-batch on the slowest pipeline stage takes its compute plus the exposed communication of its
blocks; the step is (Narayanan et al. 2021, sec. 2.2):

    step = m * T_max + (sum_i T_i - T_max) / v + DP reduction + optimizer + parameter all-gather

with ``T_i`` stage i's micro-batch time (its blocks, its ends and their exposed communication) and
``T_max`` the slowest stage's: the steady state runs at the slowest stage's pace, and filling and
draining the pipeline passes every other stage once per chunk (the bubble: with p balanced
stages (p-1)/v T, (p-1)/m of the ideal time for 1F1B and GPipe, divided by v interleaved
chunks, and (p-1)/(m+p-1) of the pipeline's time). Stages come as ``stage.StageKinds``: uneven
splits and the ends price each kind once. Communication per block and micro-batch (Megatron-LM):

- TP: 2 all-reduces of the b s h activation forward, 2 backward, 2 more when a full recompute
  re-runs the forward (Shoeybi et al. 2019, Fig. 3); with SP each all-reduce becomes an all-gather
  and a reduce-scatter, and the backward re-gathers the inputs of the two column-parallel GEMMs
  (Korthikanti et al. 2022, sec. 4.2.2). ``overlap_tp``: hidden behind the block's GEMMs.
- CP: ring attention passes each chunk's keys and values cp-1 times forward and keys, values and
  their gradients backward (Liu et al. 2023), overlapped with the attention kernels by design.
- EP: an all-to-all dispatch and combine per MoE block, forward and backward (and recompute), of
  tokens x top_k x h, scaled by the load factor. ``overlap_ep``: hidden behind an MoE block's
  forward and backward compute of another micro-batch (DeepSeek-V3's DualPipe).
- PP: each micro-batch sends its activation forward and its gradient backward at every chunk
  boundary, 2 v sends; with TP and without SP, Megatron's scatter/gather sends 1/tp over the NIC and
  all-gathers over NVLink (Narayanan et al. 2021, sec. 4.1). ``overlap_pp``: hidden.
- DP (gradients reduced in 16 bits over dp x cp): ZeRO 0 all-reduce, 1 reduce-scatter + parameter
  all-gather, once per step (bucketed: one collective's latency); ZeRO 2 reduce-scatters every
  micro-batch, block by block; ZeRO 3 also all-gathers each block's parameters for every forward,
  recompute and backward (an FSDP unit per block: Zhao et al. 2023). These are bandwidth-optimal
  hierarchical collectives: DeepSpeed's ZeRO-3 of 2021 measured up to 70% slower than PTD-P when
  the GPUs doubled at a fixed batch (Narayanan et al. 2021, sec. 5.2, Fig. 10); a stack's runtime (``stacks.training``) reproduces its
  mechanism: DeepSpeed gathers each weight matrix on its own (``gathers_per_block`` calls, each
  paying the collective's latency over the group), reduces in ``grad_bytes`` per element (fp32 in
  FSDP2 and Megatron with bf16), and its last gradient bucket reduces after the backward
  (``bucket_fraction``: never hidden). ``overlap_dp``: the reduction hides
  behind one micro-batch's backward, parameter gathers behind the compute they precede.
- tied embeddings with pp > 1: the two copies' gradients are all-reduced between the end stages.
- unfused gradient accumulation: every micro-batch reads the new 16-bit gradients and reads and
  writes the main-gradient buffer (``ACCUMULATE_BYTES`` per local parameter).
- optimizer: AdamW streams ``OPTIMIZER_BYTES`` per local parameter through HBM.
- DeepSpeed's BF16_Optimizer (state precision ``bf16-deepspeed``, Megatron-DeepSpeed's bf16 with
  ZeRO stage 0): an unfused fp32 accumulation after every micro-batch, the fp32 gradients
  all-reduced whole (and the tied embedding's in fp32), the bf16 partitions all-gathered.
- ``launch_blocking`` (CUDA_LAUNCH_BLOCKING=1): each launch waits for the kernel before it, so the
  CPU's issue time adds to the GPU's instead of hiding behind it.
"""

from __future__ import annotations

import numpy as np

from gpuplan.sim.parallel import collectives as co
from gpuplan.sim.parallel.state_passes import (  # noqa: F401 - re-exported: step_time's names
    ACCUMULATE_BYTES,
    BF16_OPTIMIZER,
    CAST_ADD_BYTES,
    CAST_BYTES,
    FOREACH_OPTIMIZER_BYTES,
    FP32_GRAD_BYTES,
    OPTIMIZER_BYTES,
    accumulate_s,
    cast_add_s,
    cast_bytes,
    cast_s,
    gradient_pass_s,
    optimizer_bytes,
    optimizer_s,
    pass_bytes_per_s,
)

GRAD_BYTES = 2  # gradients reduced in 16 bits (Megatron's default without fp32 all-reduce)
PARAM_BYTES = 2  # parameters gathered in 16 bits (ZeRO-1/2 after the step, ZeRO-3 per use)
def on_rows(rows, fn, lk, *arrays):
    """``fn(lk, *arrays)`` evaluated once per distinct row of the degrees: ``rows`` is (one
    strategy of each distinct row, each strategy's row) or None (evaluate every strategy).
    Collective times depend on the degrees and the micro-batch only, not on recomputation,
    ZeRO, SP or precision, so a search has many strategies per row."""
    if rows is None:
        return fn(lk, *arrays)
    rep, inverse = rows
    n = len(inverse)
    taken = [a[..., rep] if np.ndim(a) and np.shape(a)[-1] == n else a for a in arrays]
    out = np.asarray(fn(lk, *taken))
    return out[..., inverse] if out.ndim else out


def tp_primitives(lk, tp_span, act_bytes, tp, rows=None):
    """(all-reduce, all-gather, reduce-scatter) of a block's activation over the TP group."""
    local, nodes = tp_span
    return (
        on_rows(rows, co.all_reduce_s, lk, local, nodes, act_bytes),
        on_rows(rows, co.all_gather_s, lk, local, nodes, act_bytes / tp),
        on_rows(rows, co.reduce_scatter_s, lk, local, nodes, act_bytes),
    )


def tp_comm_phases(lk, tp_span, act_bytes, tp, sp, rows=None):
    """TP/SP collectives of one block and micro-batch: (forward, backward, one recompute)."""
    ar, ag, rs = tp_primitives(lk, tp_span, act_bytes, tp, rows)
    on = np.asarray(tp) > 1
    fwd = np.where(on, np.where(sp, 2 * (ag + rs), 2 * ar), 0.0)
    bwd = np.where(on, np.where(sp, 2 * (ag + rs) + 2 * ag, 2 * ar), 0.0)
    return fwd, bwd, fwd


def tp_comm_s(lk, tp_span, act_bytes, tp, rc, sp, rows=None):
    """TP/SP collectives of one block and micro-batch, forward + backward (+ recompute)."""
    fwd, bwd, rec = tp_comm_phases(lk, tp_span, act_bytes, tp, sp, rows)
    return fwd + bwd + np.where(rc == 2, rec, 0.0)


def cp_comm_s(lk, cp_span, kv_bytes, cp, rc, rows=None):
    """Ring-attention exchanges of one block and micro-batch (fwd, bwd, recompute)."""
    local, nodes = cp_span
    send = on_rows(rows, co.send_recv_s, lk, np.asarray(nodes) > 1, kv_bytes)
    sends = (cp - 1) * (1 + 2 + np.where(rc == 2, 1, 0))
    return np.where(cp > 1, sends * send, 0.0)


def ep_comm_s(lk, ep_span, dispatch_bytes, ep, rc, rows=None):
    """All-to-all dispatch and combine of one MoE block and micro-batch."""
    local, nodes = ep_span
    a2a = on_rows(rows, co.all_to_all_s, lk, local, nodes, dispatch_bytes)
    calls = 4 + 2 * np.where(rc == 2, 1, 0)
    return np.where(ep > 1, calls * a2a, 0.0)


def pp_comm_s(lk, pp_cross, tp_span, act_bytes, tp, sp, pp, chunks, rows=None):
    """Point-to-point sends of one micro-batch at every chunk boundary (fwd and bwd)."""
    local, nodes = tp_span
    sliced = act_bytes / tp
    scatter_gather = (tp > 1) & ~np.asarray(sp, dtype=bool)
    ag = on_rows(rows, co.all_gather_s, lk, local, nodes, sliced)
    gather = np.where(scatter_gather & pp_cross, ag, 0.0)
    slice_s = on_rows(rows, co.send_recv_s, lk, pp_cross, sliced)
    full_s = on_rows(rows, co.send_recv_s, lk, pp_cross, act_bytes)
    send = np.where(np.asarray(sp, dtype=bool) | (scatter_gather & pp_cross), slice_s, full_s)
    return np.where(pp > 1, 2 * chunks * (send + gather), 0.0)


def exposed(comm, window, overlap, interference=0.0):
    """Communication left after hiding it behind ``window`` seconds of compute when ``overlap``;
    ``interference``: the share of the hidden part the compute loses to it anyway (the
    communication kernels hold SMs and HBM bandwidth while the GEMMs run)."""
    left = np.where(overlap, np.maximum(comm - window, 0.0), comm)
    return left + interference * (comm - left)


def step_terms(*, lk, sp_, s, c, k, bytes_, params) -> dict:
    """Named exposed seconds of one step; their sum is the step time.

    ``sp_``: spans (from ``topology.spans``); ``s``: degrees and options as arrays; ``c``: compute
    per micro-batch of each kind of stage (stage_fwd, stage_bwd, recompute: (K, ...)) and of a
    block (gemm_layer, attn_layer); ``k``: the ``StageKinds``; ``bytes_``: act, kv, dispatch;
    ``params``: stage (per kind), max_stage, embedding, with the optimizer and accumulation
    times as ``optimizer_s`` and ``accumulate_s``.
    """
    m = s["m"]
    rows = s.get("comm_rows")  # (representatives, inverse) of the distinct degree rows
    x_tp_layer, x_cp_layer, x_ep_layer, x_pp = _block_comm(lk, sp_, s, c, bytes_, params, rows)
    compute_k = c["stage_fwd"] + c["stage_bwd"] + c["recompute"]
    x_z = _zero_block_comm(lk, sp_, s, k, params, compute_k, rows)
    x_tp, x_cp, x_ep = k.layers * x_tp_layer, k.layers * x_cp_layer, k.moe * x_ep_layer
    gpu_k = compute_k + x_tp + x_cp + x_ep + x_pp + x_z  # one micro-batch on each kind of stage
    cast_mb = params.get("cast_s", 0.0)
    host_k = _exposed_host(c, params, gpu_k, cast_mb)
    t_k = gpu_k + host_k
    kinds = len(k.count)
    slow = np.argmax(np.where(k.count > 0, t_k, -np.inf), axis=0)

    def at_slowest(values):
        return _at_kind(values, slow, kinds)

    t_mb = at_slowest(t_k)
    bubble = np.where(s["pp"] > 1, (np.sum(k.count * t_k, axis=0) - t_mb) / s["chunks"], 0.0)
    stage_fwd, stage_bwd = at_slowest(c["stage_fwd"]), at_slowest(c["stage_bwd"])
    x_dp, x_ag = _dp_comm(lk, sp_, s, params, stage_fwd, stage_bwd, rows)
    return {
        "compute_fwd": m * stage_fwd,
        "compute_bwd": m * stage_bwd,
        "recompute": m * at_slowest(c["recompute"]),
        "tp_comm": m * at_slowest(x_tp),
        "cp_comm": m * at_slowest(x_cp),
        "ep_comm": m * at_slowest(x_ep),
        "pp_comm": m * np.broadcast_to(x_pp, np.shape(t_mb)),
        "zero_comm": m * at_slowest(x_z),
        "bubble": bubble,
        "dp_comm": x_dp,
        "param_allgather": x_ag,
        "embedding_sync": _embedding_sync(lk, s, params),
        "grad_accumulation": _grad_accumulation(s, params),
        "host_overhead": m * at_slowest(host_k),
        "weight_casts": m * cast_mb,
        "optimizer": params["optimizer_s"],
        "optimizer_bytes": params.get("optimizer_bytes", 0.0),  # not a time: the items' bytes
        "cast_bytes": m * params.get("cast_bytes", 0.0),
        "stage_s": t_mb,
        "slowest_kind": slow,
    }


def _at_kind(values, index, kinds: int):
    """``values`` (K, ...) at kind ``index`` (...) of each strategy."""
    values = np.broadcast_to(values, (kinds, *np.shape(index)))
    return np.take_along_axis(values, np.asarray(index)[None], axis=0)[0]


def _block_comm(lk, sp_, s, c, bytes_, params, rows):
    """Exposed TP/SP, CP and EP communication of one block and micro-batch, and the exposed
    pipeline sends of one micro-batch: (tp, cp, ep, pp)."""
    tp, pp, cp, ep, rc = s["tp"], s["pp"], s["cp"], s["ep"], s["rc"]
    tp_layer = tp_comm_s(lk, sp_["tp"], bytes_["act"], tp, rc, s["sp"], rows)
    shared = params.get("interference", 0.0)  # a stack's runtime (stacks.training)
    x_tp_layer = exposed(tp_layer, c["gemm_layer"], s["overlap_tp"], shared)
    cp_layer = cp_comm_s(lk, sp_["cp"], bytes_["kv"], cp, rc, rows)
    x_cp_layer = np.maximum(cp_layer - c["attn_layer"], 0.0)
    x_ep_layer = exposed(
        ep_comm_s(lk, sp_["ep"], bytes_["dispatch"], ep, rc, rows), c["moe_layer"],
        s["overlap_ep"],
    )  # fmt: skip
    pp_one = pp_comm_s(lk, sp_["pp_cross"], sp_["tp"], bytes_["act"], tp, s["sp"], pp,
                       s["chunks"], rows)  # fmt: skip
    # a runtime whose pipeline sends and receives block one by one (DeepSpeed) has more
    # transfers on each stage's path than Megatron's paired exchanges (stacks.training)
    pp_one = pp_one * params.get("pp_transfers", 2) / 2
    x_pp = np.where(s["overlap_pp"], 0.0, pp_one)
    return x_tp_layer, x_cp_layer, x_ep_layer, x_pp


def _zero_block_comm(lk, sp_, s, k, params, compute_k, rows):
    """Exposed ZeRO-2/3 traffic of one micro-batch on each kind of stage: the reduce-scatter of
    each block's gradients (ZeRO 2, 3) and the gathers of its parameters (ZeRO 3)."""
    zero, group, rc = s["zero"], s["dp"] * s["cp"], s["rc"]
    dl, dn = sp_["dpcp"]
    z3_calls = 2 + np.where(rc == 2, 1, 0)
    # ZeRO-2/3 work block by block (an FSDP unit is a block): one gather / reduce-scatter each
    block = params["stage"] / np.maximum(k.layers, 1)
    # a stack's runtime (stacks.training): gradient bytes on the wire, ZeRO-3 gather calls per
    # block (DeepSpeed gathers each weight matrix on its own, paying a latency each)
    grad_bytes = params.get("grad_bytes", GRAD_BYTES)
    gathers = params.get("gathers_per_block", 1)
    ag_block = gathers * on_rows(
        rows, co.all_gather_s, lk, dl, dn, block * PARAM_BYTES / group / gathers
    )
    rs_block = on_rows(rows, co.reduce_scatter_s, lk, dl, dn, block * grad_bytes)
    z3_mb = k.layers * (
        np.where(zero >= 3, z3_calls * ag_block, 0.0) + np.where(zero >= 2, rs_block, 0.0)
    )
    # a runtime may prefetch ZeRO-3 gathers where it does not overlap other DP traffic (DeepSpeed)
    z_overlap = np.asarray(s["overlap_dp"]) | ((zero >= 3) & params.get("overlap_zero3", False))
    shared = params.get("interference", 0.0)
    return np.where(zero >= 2, exposed(z3_mb, compute_k, z_overlap, shared), 0.0)


def _exposed_host(c, params, gpu_k, cast_mb):
    """The CPU time of issuing one micro-batch's calls that its GPU work does not cover."""
    # the CPU issues a micro-batch's calls (and starts its backward) while the GPU runs the
    # earlier ones: only the issue time its kernels and casts do not cover shows (hwmodels.launch)
    host = c.get("host", 0.0) + params.get("autograd_s", 0.0)
    host_k = np.maximum(host - (gpu_k + cast_mb), 0.0)
    if params.get("launch_blocking", False):  # CUDA_LAUNCH_BLOCKING=1: nothing runs ahead
        host_k = np.broadcast_to(host, np.shape(gpu_k)).astype(float)
    return host_k


def _dp_comm(lk, sp_, s, params, stage_fwd, stage_bwd, rows):
    """Exposed data-parallel gradient reduction and parameter all-gather of one step, over the
    dp x cp group of the largest stage: (reduction, all-gather)."""
    zero, group = s["zero"], s["dp"] * s["cp"]
    dl, dn = sp_["dpcp"]
    shared = params.get("interference", 0.0)
    grad_bytes = params.get("grad_bytes", GRAD_BYTES)
    stage_p = params["max_stage"]
    ag_stage = on_rows(rows, co.all_gather_s, lk, dl, dn, stage_p * PARAM_BYTES / group)
    rs_stage = on_rows(rows, co.reduce_scatter_s, lk, dl, dn, stage_p * grad_bytes)
    dp_reduce = np.where(
        zero == 0,
        on_rows(rows, co.all_reduce_s, lk, dl, dn, stage_p * grad_bytes),
        np.where(zero == 1, rs_stage, 0.0),
    )
    # DeepSpeed's BF16_Optimizer all-reduces its whole fp32 gradient buffer (FP32_GRAD_BYTES)
    if _bf16_optimizer(params):
        whole = on_rows(rows, co.all_reduce_s, lk, dl, dn, stage_p * FP32_GRAD_BYTES)
        dp_reduce = np.where(zero <= 1, whole, dp_reduce)  # it runs with ZeRO 0 (its own 1)
    # the last gradient bucket is reduced after the backward ends: it never hides
    tail = dp_reduce * params.get("bucket_fraction", 0.0)
    x_dp = np.where(
        group > 1,
        np.where(s["overlap_dp"], exposed(np.maximum(dp_reduce - tail, 0.0), stage_bwd, True,
                                          shared) + tail, dp_reduce),  # fmt: skip
        0.0,
    )
    param_ag = np.where((zero == 1) | (zero == 2), ag_stage, 0.0)
    x_ag = np.where(group > 1, exposed(param_ag, stage_fwd, s["overlap_dp"], shared), 0.0)
    return x_dp, x_ag


def _bf16_optimizer(params) -> bool:
    """Whether the state precision is DeepSpeed's BF16_Optimizer's (``BF16_OPTIMIZER``)."""
    return params.get("state_precision") in BF16_OPTIMIZER


def _embedding_sync(lk, s, params):
    """The all-reduce of a tied embedding's gradients between the end stages (pp > 1)."""
    per_param = FP32_GRAD_BYTES if _bf16_optimizer(params) else GRAD_BYTES
    emb = co.all_reduce_s(lk, 1, 2, params["embedding"] * per_param)
    return np.where((s["pp"] > 1) & s["tied"], emb, 0.0)


def _grad_accumulation(s, params):
    """The step's separate gradient-accumulation kernels: none where the weight-gradient GEMMs
    accumulate (fused), except under BF16_Optimizer or unsynced whole-gradient accumulation."""
    return np.where(
        np.asarray(s["fused_accum"]) & (not _bf16_optimizer(params))
        & ~np.asarray(params.get("unsynced_accumulation", False)),
        0.0, s["m"] * params["accumulate_s"],
    )  # fmt: skip


TIME_TERMS = (
    "compute_fwd",
    "compute_bwd",
    "recompute",
    "tp_comm",
    "cp_comm",
    "ep_comm",
    "pp_comm",
    "zero_comm",
    "bubble",
    "dp_comm",
    "param_allgather",
    "embedding_sync",
    "grad_accumulation",
    "host_overhead",
    "weight_casts",
    "optimizer",
)


def step_total(terms: dict):
    """The step time: the sum of the exposed terms."""
    return sum(terms[k] for k in TIME_TERMS)
