"""Wide expert parallelism with data-parallel attention: one replica group of ``ep`` GPUs.

This is SGLang's ``--enable-dp-attention --dp N --ep N`` (``python/sglang/srt/server_args.py``),
vLLM's ``--data-parallel-size N --enable-expert-parallel`` (docs "Data Parallel Deployment",
"Expert Parallel Deployment") and TensorRT-LLM's ``enable_attention_dp``: DeepSeek's own
inference system (``deepseek-ai/open-infra-index``, "Day 6: DeepSeek-V3/R1 Inference System
Overview": EP32 prefill, EP144 decode).

How the simulator represents it (``Deployment.dp_attention``):

- A *group* of ``ep`` GPUs is one simulated replica. Its ``dp = ep / tp`` attention ranks each
  hold their own sequences and KV cache on ``tp`` GPUs (attention TP, often 1); the routed
  experts are sharded over all ``ep`` GPUs, whole (``(n_experts + redundant) / ep`` expert
  slots a GPU, no TP slicing). Several groups are several replicas behind the router.
- The group's scheduler admits work for all its ranks (``group_scheduler``: the per-rank limits
  times ``dp``); its sequences are spread over the ranks as evenly as they go. The iteration
  runs in lockstep (every MoE layer waits for every rank; a rank with no work still runs a
  dummy step, as SGLang's and vLLM's DP ranks do), so its time is the busiest rank's:
  ``ceil(T / dp)`` tokens, or the largest prefill chunk if that is more (one sequence's chunk is
  not split); ``ceil(D / dp)`` decode sequences with their share of the cached tokens; the
  prefill attention of ``max(sum / dp, largest piece)``; ``ceil(S / dp)`` sampled sequences.
- The experts of the busiest GPU run ``T * top_k / ep * imbalance`` routed rows
  (``expert_imbalance``): the given ratio (``--expert-imbalance``: busiest EP rank over the
  mean), or the expectation of the busiest of ``ep`` ranks under uniform top-k routing of the
  batch (Gaussian approximation of the multinomial: ``1 + sqrt(2 ln(ep) * rho / mean)``, rho the
  variance-to-mean ratio, ``1 - r / (2 n)`` with ``r`` redundant copies of ``n`` experts, each
  copy taking half of its expert's rows as EPLB splits them; capped at ``ep``). As grouped
  GEMMs they read the weights of the experts that receive rows only (``local_experts_hit``: at
  a decode batch of a few tokens, a few of the GPU's expert slots), not every slot's.
- Dispatch and combine (``dispatch_combine_ops``): DeepEP (``deepseek-ai/DeepEP`` docs/legacy.md).
  Each GPU sends its ``ceil(t / tp)`` tokens (the rank's tokens scattered over its tp GPUs)
  ``top_k`` times: dispatch in FP8 with one fp32 scale per 128 values when the weights are FP8
  (DeepEP's "FP8 dispatching and BF16 combining"), combine in the activations' dtype. Experts
  are spread evenly, so of each token's copies ``1/ep`` stay on the GPU, ``(m-1)/ep`` cross the
  scale-up domain of ``m`` GPUs (a node of 8, 72 on an NVL72 rack) and ``(ep-m)/ep`` the
  scale-out NIC. Decode-only iterations use the *low-latency* kernels (CUDA-graph compatible):
  every copy sent directly, NVLink within the domain, RDMA across. Iterations with prefill use
  the *normal* kernels: a token crosses the NIC once per remote node it has experts on
  (``(N-1)(1-(1-1/N)^k)`` of ``N`` nodes expected), then NVLink forwards it (``(m-1)/m`` of
  its copies). Both links run at once: the slower sets the time (each priced by
  ``hwmodels.collectives`` on its own link). ``benchmarks/wide_ep.py`` sets these against
  DeepEP's published H800 latencies.
- Two-batch overlap (``two_batch_overlap``; SGLang ``--enable-two-batch-overlap``): the batch is
  two micro-batches, each block's compute of one hiding the all-to-alls of the other: a block
  costs its kernels at half the tokens twice, the all-to-alls only where they outlast that
  compute (``overlap_factor``).
- Memory per GPU (``dp_weights_bytes``): attention, dense and shared-expert weights replicated
  on every rank and split over its ``tp``; routed experts ``(n + r) / n`` of them over ``ep``;
  the KV cache per rank, pooled over the group's ranks (``dp`` times one rank's blocks; one
  max-length request must fit on one rank).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from gpuplan.errors import GpuplanError
from gpuplan.sim.runtime.serving.pipeline import NODE_GPUS, expert_parallel_ops
from gpuplan.sim.runtime.serving.quantization import (
    block_weights_bytes,
    expert_weight_dtype,
    routed_expert_params,
    weight_bytes_per_param,
)
from gpuplan.workloads.dtypes import dtype_bytes
from gpuplan.workloads.feed_forward import expert_hit_share
from gpuplan.workloads.ops import Collective, Elementwise, Gemm, Op
from gpuplan.workloads.params import count_params

# GPUs of one NVLink domain where it is wider than a node: "NVIDIA GB200 NVL72" page (72
# Blackwell GPUs in one NVLink domain), the same for GB300 NVL72
SCALEUP_DOMAIN = {"gb200": 72, "gb300": 72}
# DeepEP FP8 dispatch: per-token, per-128-channel fp32 scales (DeepSeek-V3 tech report sec. 3.3.2,
# "1x128 tile-wise" activation quantization; DeepEP tests/test_low_latency.py ``per_token_cast_to_fp8``)
FP8_GROUP = 128
FP8_SCALE_BYTES = 4
A2A = ("ep dispatch", "ep combine")


def dp_ranks(dep) -> int:
    """Attention data-parallel ranks of a group (1 without ``dp_attention``)."""
    return dep.ep // dep.tp if dep.dp_attention else 1


def check_dp_attention(dep) -> None:
    """The rules of a wide-EP group, each refusal naming the field, value and what is valid."""
    cfg, tp, ep = dep.model, dep.tp, dep.ep
    if not cfg.is_moe:
        raise GpuplanError(f"dp_attention is invalid for {cfg.name}: it shards MoE experts over "
                           "the data-parallel ranks; this model is dense (drop --dp-attention)")
    if dep.pp > 1:
        raise GpuplanError(f"pp={dep.pp} is invalid with dp_attention: a wide-EP group runs "
                           "every block on every GPU (use pp=1)")
    if ep % tp or ep == tp:
        raise GpuplanError(f"ep={ep} is invalid with dp_attention at tp={tp}: the group is ep "
                           f"GPUs of ep/tp attention ranks, so ep must be a multiple of tp, at "
                           f"least 2 ranks (e.g. {tp * 8})")
    slots = cfg.n_experts + dep.redundant_experts
    if slots % ep:
        valid = [d for d in range(2, slots + 1) if slots % d == 0 and d % tp == 0]
        raise GpuplanError(
            f"ep={ep} does not divide {cfg.name}'s {cfg.n_experts} experts + "
            f"{dep.redundant_experts} redundant = {slots} expert slots; valid ep: "
            f"{', '.join(map(str, valid[:12]))}, or keep ep={ep} with --redundant-experts "
            f"{dep.redundant_experts + ep - slots % ep} (a second copy of that many experts)"
        )


def check_wide_ep_fields(dep) -> None:
    """``expert_imbalance``, ``redundant_experts`` and ``two_batch_overlap`` need a group."""
    if dep.redundant_experts < 0:
        raise GpuplanError(f"redundant_experts={dep.redundant_experts} is invalid: give 0 or more")
    if dep.expert_imbalance is not None and not 1 <= dep.expert_imbalance <= max(dep.ep, 1):
        raise GpuplanError(
            f"expert_imbalance={dep.expert_imbalance} is invalid: the busiest EP rank's routed "
            f"tokens over the mean lies in [1, ep={dep.ep}]"
        )
    if dep.dp_attention:
        check_dp_attention(dep)
        return
    for name, unset in (("redundant_experts", 0), ("expert_imbalance", None),
                        ("two_batch_overlap", False)):  # fmt: skip
        if getattr(dep, name) != unset:
            raise GpuplanError(f"{name}={getattr(dep, name)} needs dp_attention (wide expert "
                               "parallelism): add --dp-attention")


def domain_gpus(dep) -> int:
    """GPUs of the group joined by the scale-up link: a node, or a rack's NVLink domain."""
    return min(dep.ep, SCALEUP_DOMAIN.get(dep.acc.key, NODE_GPUS))


def busiest_rank_tokens(dep, tokens: int, largest_piece: int = 0) -> int:
    """Tokens (or sequences) of the busiest attention rank of an iteration of ``tokens`` in all
    (module docstring): an even spread, ``ceil(tokens / dp)``, or the largest prefill chunk when
    that is more."""
    return max(-(-tokens // dp_ranks(dep)), largest_piece) if tokens else 0


def expert_imbalance(dep, group_tokens: int) -> float:
    """Busiest EP rank's routed rows over the mean (module docstring)."""
    if dep.expert_imbalance is not None:
        return dep.expert_imbalance
    cfg, ep = dep.model, dep.ep
    mean = group_tokens * cfg.top_k / ep
    if mean <= 0:
        return 1.0
    rho = 1 - min(dep.redundant_experts, cfg.n_experts) / (2 * cfg.n_experts)
    return min(float(ep), 1 + math.sqrt(2 * math.log(ep) * rho / mean))


def expert_rows(dep, group_tokens: int) -> float:
    """Routed rows the busiest GPU's experts run in one MoE block."""
    return group_tokens * dep.model.top_k / dep.ep * expert_imbalance(dep, group_tokens)


def moe_ops(ops: list[Op], dep, *, tokens: int, group_tokens: int | None,
            low_latency: bool) -> list[Op]:  # fmt: skip
    """A MoE block's kernels (``ops``, built at ``tokens`` and ``tp``) under expert parallelism:
    a wide-EP group's busiest GPU (``tokens`` its rank's, ``group_tokens`` the group's, default
    ``dp`` times as many; DeepEP's ``low_latency`` or normal kernels), or experts over ``ep``
    GPUs of a stage (``pipeline.expert_parallel_ops``)."""
    if not dep.dp_attention:
        return expert_parallel_ops(ops, ep=dep.ep)
    group = tokens * dep.dp if group_tokens is None else group_tokens
    return wide_expert_ops(ops, dep, group_tokens=group) + dispatch_combine_ops(
        dep, rank_tokens=tokens, low_latency=low_latency)


def gpu_expert_slots(dep) -> int:
    """Expert slots on each GPU of a group: the experts and their redundant copies over ``ep``."""
    return (dep.model.n_experts + dep.redundant_experts) // dep.ep


def local_experts_hit(dep, group_tokens: int) -> int:
    """Expert slots of the busiest GPU that receive a routed row in one MoE block: each of its
    ``slots`` is picked by a token with chance ``top_k / n_experts`` under uniform routing, so
    ``slots (1 - (1 - k/n)^T)`` of them (``feed_forward.expert_hit_share``) over the ``T`` tokens
    whose rows the busiest GPU runs (the group's times ``expert_imbalance``); at least one, at
    most its rows. The grouped MoE kernels of the engines read the weights of these experts
    only (TensorRT-LLM's CUTLASS MoE and vLLM's fused_moe skip an expert with no rows)."""
    slots = gpu_expert_slots(dep)
    rows = expert_rows(dep, group_tokens)
    share = expert_hit_share(dep.model, group_tokens * expert_imbalance(dep, group_tokens))
    return max(1, min(slots, math.ceil(rows), round(slots * share)))


def wide_expert_ops(ops: list[Op], dep, *, group_tokens: int) -> list[Op]:
    """One MoE block's kernels (``ops``, built at the rank's tokens and ``tp``) on the busiest
    GPU of a group: its experts whole (not sliced over tp) over ``expert_rows`` rows: as grouped
    GEMMs (``dep.grouped_experts``), the ``local_experts_hit`` experts that receive rows and one
    activation kernel over every row, as ``moe_block(grouped=True)`` runs them; else every
    expert slot its own GEMMs and activation."""
    slots = gpu_expert_slots(dep)
    rows = expert_rows(dep, group_tokens)
    run = local_experts_hit(dep, group_tokens) if dep.grouped_experts else slots
    per_slot = max(1, round(rows / run)) if rows else 0
    wide = {"gate_up_proj": "n", "fc1": "n", "down_proj": "k", "fc2": "k"}
    out: list[Op] = []
    for op in ops:
        name = op.name
        if name in ("permute", "unpermute") and isinstance(op, Elementwise):
            out.append(replace(op, tokens=max(1, math.ceil(rows))))
        elif not name.startswith("expert_") or name.startswith("expert_grouping"):
            out.append(op)
        elif isinstance(op, Gemm):
            dim = wide.get(name.removeprefix("expert_"))
            grown = {dim: getattr(op, dim) * dep.tp} if dim else {}
            out.append(replace(op, count=run, m=max(1, per_slot), **grown))
        elif dep.grouped_experts:  # the activation between the projections: one kernel
            out.append(replace(op, hidden=op.hidden * dep.tp, count=1,
                               tokens=max(1, math.ceil(rows))))  # fmt: skip
        else:  # per slot
            out.append(replace(op, hidden=op.hidden * dep.tp, count=run,
                               tokens=max(1, per_slot)))  # fmt: skip
    return out


def dispatch_bytes_per_value(dep) -> float:
    """Bytes a dispatched activation value takes: FP8 with its scales under FP8 weights."""
    if dep.weight_dtype.startswith("fp8"):
        return dtype_bytes("fp8") + FP8_SCALE_BYTES / FP8_GROUP
    return dtype_bytes(dep.act_dtype)


def link_bytes(dep, gpu_tokens: int, value_bytes: float, *, low_latency: bool) -> tuple[float, float]:
    """(scale-up, scale-out) bytes one GPU sends in one dispatch or combine (module docstring)."""
    k, ep, m, d = dep.model.top_k, dep.ep, domain_gpus(dep), dep.model.d_model
    token_bytes = gpu_tokens * d * value_bytes
    if low_latency:
        return token_bytes * k * (m - 1) / ep, token_bytes * k * (ep - m) / ep
    nodes = ep // m
    remote = (nodes - 1) * (1 - (1 - 1 / nodes) ** k) if nodes > 1 else 0.0
    return token_bytes * k * (m - 1) / m, token_bytes * remote


def dispatch_combine_ops(dep, *, rank_tokens: int, low_latency: bool) -> list[Op]:
    """The dispatch and the combine of one MoE block on one GPU: each on NVLink and, where
    the group spans domains, on the NIC (concurrent: ``a2a_time`` keeps the slower)."""
    gpu_tokens = -(-rank_tokens // dep.tp)
    ops: list[Op] = []
    for name, value_bytes in ((A2A[0], dispatch_bytes_per_value(dep)),
                              (A2A[1], dtype_bytes(dep.act_dtype))):  # fmt: skip
        up, out = link_bytes(dep, gpu_tokens, value_bytes, low_latency=low_latency)
        mode = "low-latency" if low_latency else "normal"
        for link, sent, world in (("scaleup", up, domain_gpus(dep)), ("scaleout", out, dep.ep)):
            if sent and world > 1:  # all_to_all sends (n-1)/n of its buffer: give it all
                ops.append(Collective(name=f"{name} {mode} {link}", op="all_to_all", world=world,
                                      bytes_per_rank=sent * world / (world - 1), link=link))  # fmt: skip
    return ops


def micro_batch_tokens(dep, tokens: int, group_tokens: int | None) -> tuple[int, int, int | None]:
    """(micro-batches, tokens, group tokens) of each: two halves under two-batch overlap."""
    if not dep.two_batch_overlap:
        return 1, tokens, group_tokens
    return 2, -(-tokens // 2), None if group_tokens is None else -(-group_tokens // 2)


def priced_together(dep, ops: list[Op], times: list) -> dict:
    """``times`` (``KernelTime`` of each of ``ops``) by ``id(op)``, as a wide-EP group runs
    them: a dispatch's (combine's) two links at once (``concurrent_links``), and under two-batch
    overlap the all-to-alls' exposed share only (``overlap_factor``)."""
    if dep.dp_attention:
        kept = concurrent_links(ops, [t.total_s for t in times])
        times = [t.scaled(k / t.total_s) if t.total_s else t for t, k in zip(times, kept, strict=True)]
        if dep.two_batch_overlap:
            f = overlap_factor(ops, [t.total_s for t in times])
            times = [t.scaled(f) if is_a2a(op) else t for op, t in zip(ops, times, strict=True)]
    return {id(op): t for op, t in zip(ops, times, strict=True)}


@dataclass(frozen=True, slots=True)
class RankShare:
    """The busiest attention rank's share of an iteration of a wide-EP group (``wide_ep``); the
    whole iteration otherwise."""

    tokens: int
    decode_seqs: int
    kv_tokens: float
    samples: int


def rank_share(dep, batch) -> RankShare:
    """``batch`` (already padded) as its busiest attention rank runs it (``wide_ep``)."""
    n = dep.dp
    if n == 1:
        return RankShare(batch.tokens, batch.decode_seqs, batch.decode_kv_tokens, batch.samples)
    largest = max((c for c, _, _ in batch.prefill), default=0)
    seqs = busiest_rank_tokens(dep, batch.decode_seqs)
    kv = batch.decode_kv_tokens * seqs / batch.decode_seqs if batch.decode_seqs else 0.0
    return RankShare(busiest_rank_tokens(dep, batch.tokens, largest), seqs, kv,
                     busiest_rank_tokens(dep, batch.samples))  # fmt: skip


def prefill_share(dep, piece_s: list[float]) -> float:
    """The busiest rank's share of the prefill pieces' attention (``piece_s``: each piece's
    time, all blocks): all of it on one rank, else the larger of an even split and the longest
    piece (a piece is not split)."""
    total = sum(piece_s)
    if dep.dp == 1 or not total:
        return 1.0
    return max(total / dep.dp, max(piece_s)) / total


def busiest_rank_pieces(dep, pieces: list[list]) -> list:
    """The prefill pieces' attention items (one list a piece) at the busiest rank's share."""
    share = prefill_share(dep, [sum(i.time_s for i in p) for p in pieces])
    return [replace(i, time_s=i.time_s * share) for p in pieces for i in p]


def is_a2a(op: Op) -> bool:
    return isinstance(op, Collective) and op.name.startswith(A2A)


def concurrent_links(ops: list[Op], times: list[float]) -> list[float]:
    """Times of ``ops`` with each dispatch's (combine's) two links run at once: the faster
    link's time is hidden behind the slower's (set to 0)."""
    out = list(times)
    for name in A2A:
        idx = [i for i, op in enumerate(ops) if is_a2a(op) and op.name.startswith(name)]
        if len(idx) > 1:
            keep = max(idx, key=lambda i: times[i])
            for i in idx:
                out[i] = times[i] if i == keep else 0.0
    return out


def overlap_factor(ops: list[Op], times: list[float]) -> float:
    """Share of the all-to-alls' time left exposed under two-batch overlap: what outlasts the
    other micro-batch's compute."""
    comm = sum(t for op, t in zip(ops, times, strict=True) if is_a2a(op))
    compute = sum(t for op, t in zip(ops, times, strict=True) if not is_a2a(op))
    return max(0.0, comm - compute) / comm if comm else 1.0


def dp_weights_bytes(dep) -> float:
    """Weight bytes on each GPU of a group (module docstring)."""
    cfg = dep.model
    pc = count_params(cfg)
    blocks = sum(pc.per_layer)
    fmt = expert_weight_dtype(cfg, dep.weight_dtype)
    per_expert = routed_expert_params(cfg) / cfg.n_experts * weight_bytes_per_param(fmt)
    expert_bytes = per_expert * cfg.n_experts
    rest = block_weights_bytes(cfg, blocks, dep.weight_dtype) - expert_bytes
    slots = cfg.n_experts + dep.redundant_experts
    vocab = (pc.embedding + pc.lm_head + pc.vision) * dtype_bytes("bf16")
    return (rest + vocab) / dep.tp + per_expert * slots / dep.ep


def group_scheduler(sched, dep):
    """The group's scheduler: each rank's sequence and token limits, ``dp`` times over."""
    n = dp_ranks(dep)
    if n == 1:
        return sched
    budget = sched.batched_tokens(dep.model)
    return replace(sched, max_seqs=sched.max_seqs * n,
                   max_batched_tokens=None if budget is None else budget * n)  # fmt: skip
