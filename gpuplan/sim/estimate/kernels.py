"""One-kernel predictions with their breakdowns: GEMM, attention, elementwise, collective."""

from __future__ import annotations

from gpuplan.hwmodels.collectives import collective_time
from gpuplan.hwmodels.gemm import GROUPED_CUTLASS_DTYPES, gemm_time, grouped_gemm_time
from gpuplan.hwmodels.launch import launch_cost
from gpuplan.sim.estimate.breakdown import Breakdown, Item, priced_items
from gpuplan.workloads.dtypes import dtype_bytes
from gpuplan.workloads.operators import backward_of as backward_ops
from gpuplan.workloads.ops import Attention, Elementwise, Gemm


def gemm_breakdown(acc, eff, *, m: int, n: int, k: int, dtype: str) -> Breakdown:
    op = Gemm(name="gemm", m=m, n=n, k=k, dtype=dtype)
    if dtype in LOW_PRECISION_GEMM:
        kt, moved = low_precision_gemm(acc, eff, m=m, n=n, k=k, dtype=dtype)
    else:
        kt, moved = gemm_time(acc, m, n, k, dtype, eff), op.bytes
    item = Item(
        layer="model",
        category="gemm",
        op=f"gemm {m}x{n}x{k} {dtype}",
        phase="fwd",
        time_s=kt.total_s,
        flops=op.flops,
        bytes=moved,
        kernels=1,
        bound=kt.bound,
    )
    return Breakdown(items=(item, latency_item(eff)))


LOW_PRECISION_GEMM = ("fp4", "nvfp4", "mxfp4", "mxfp8", "int4")
_PLAIN = ("bf16", "fp16", "fp32", "tf32", "fp8", "int8")


def low_precision_gemm(acc, eff, *, m: int, n: int, k: int, dtype: str):
    """(time, bytes moved) of a GEMM in a block-scaled format (both operands in it, at the
    device's rate for it: ``quantization.block_gemm_time``, the cost ``serve`` puts on NVFP4
    weights) or, for int4, the weight-only W4A16 GEMM ``serve --weight-dtype int4`` prices. A
    device without the format's tensor cores is a one-line error naming what it computes in."""
    from gpuplan.hwmodels.formats import block_format, check_format
    from gpuplan.sim.runtime.serving.quantization import (
        block_gemm_time,
        quantized_gemm_time,
        weight_bytes_per_param,
    )

    op = Gemm(name="gemm", m=m, n=n, k=k, dtype="bf16")
    act = dtype_bytes("bf16")  # activations and the output stay bf16
    if dtype == "int4":
        moved = (m * k + m * n) * act + k * n * weight_bytes_per_param("int4")
        return quantized_gemm_time(acc, op, eff, weight_dtype="int4"), moved
    plain = [d for d in _PLAIN if acc.supports(d)]
    check_format(acc, dtype, field="estimate gemm: --dtype", others=(*plain, "int4 (W4A16)"))
    fmt = block_format(dtype)
    moved = fmt.tensor_bytes(m * k) + fmt.tensor_bytes(k * n) + m * n * act
    return block_gemm_time(acc, op, eff, fmt.name), moved


def grouped_gemm_breakdown(acc, eff, *, groups: int, m: int, n: int, k: int,
                           dtype: str) -> Breakdown:
    """One ``torch._grouped_mm`` call: ``groups`` GEMMs of ``m`` rows against their own [n, k]
    weights (``hwmodels.gemm.grouped_gemm_time``, the price the MoE blocks' experts take)."""
    kt = grouped_gemm_time(acc, groups, m, n, k, dtype, eff)
    op = Gemm(name="grouped_gemm", m=m, n=n, k=k, dtype=dtype, count=groups, launches=1)
    item = Item(layer="model", category="gemm", op=f"grouped_gemm {groups}x{m}x{n}x{k} {dtype}",
                phase="fwd", time_s=kt.total_s, flops=op.flops, bytes=op.bytes,
                kernels=1 if dtype in GROUPED_CUTLASS_DTYPES else groups, bound=kt.bound)
    return Breakdown(items=(item, latency_item(eff)))


def attention_breakdown(
    acc,
    eff,
    *,
    batch: int,
    heads_q: int,
    heads_kv: int,
    seq_q: int,
    seq_kv: int,
    head_dim: int,
    causal: bool,
    pass_: str,
    dtype: str,
    window: int = 0,
) -> Breakdown:
    """One attention call; ``window`` > 0: a sliding window of that many keys per query."""
    op = Attention(
        name="attention",
        batch=batch,
        heads_q=heads_q,
        heads_kv=heads_kv,
        seq_q=seq_q,
        seq_kv=seq_kv,
        head_dim=head_dim,
        v_head_dim=head_dim,
        causal=causal,
        pass_="fwd",
        dtype=dtype,
        window=window,
    )
    ops = [op] + (backward_ops([op]) if pass_ == "fwd_bwd" else [])
    return Breakdown(items=(*_items_by_pass(ops, acc, eff), latency_item(eff)))


def elementwise_breakdown(
    acc, eff, *, op: str, tokens: int, hidden: int, pass_: str, dtype: str, impl: str = "fused"
) -> Breakdown:
    fwd = Elementwise(
        name=op, op=op, tokens=tokens, hidden=hidden, pass_="fwd", dtype=dtype, impl=impl
    )
    ops = [fwd] + (backward_ops([fwd]) if pass_ == "fwd_bwd" else [])
    return Breakdown(items=(*_items_by_pass(ops, acc, eff), latency_item(eff)))


def collective_breakdown(acc, eff, *, op: str, world: int, bytes_per_rank: float) -> Breakdown:
    kt = collective_time(acc, op, world, bytes_per_rank, eff)
    # A point-to-point call's own setup (p2p_launch_s: NCCL schedules the group's p2p tasks and
    # proxy operations on the CPU before the kernel is enqueued) is host time: a call timed
    # alone pays it, a profiler's kernel duration does not (device timing drops "launch" items).
    # vidur's H100/A100 DGX send_recv kernels (data/vidur_*/collective.jsonl): 5-8 us at 2 KB,
    # against the 19 us the whole fixed cost gives.
    setup_s = eff.p2p_launch_s if op == "send_recv" and world > 1 else 0.0
    item = Item(
        layer="parallel",
        category="communication",
        op=op,
        phase="fwd",
        time_s=kt.total_s - setup_s,
        bytes=bytes_per_rank,
        kernels=int(world > 1),
        bound="latency" if kt.launch_s > kt.memory_s else "bandwidth",
    )
    if not setup_s:
        return Breakdown(items=(item,))
    setup = Item(layer="runtime", category="launch", op="p2p setup", phase="step", time_s=setup_s,
                 bound="launch")  # fmt: skip
    return Breakdown(items=(item, setup))


def latency_item(eff) -> Item:
    """The launch latency a timed call pays once, before its first kernel starts."""
    return Item(
        layer="runtime",
        category="launch",
        op="launch latency",
        phase="step",
        time_s=eff.launch_latency_s,
        bound="launch",
    )


def _items_by_pass(ops, acc, eff) -> list[Item]:
    """Each op priced in its pass, timed as an isolated call: the CPU's issue time (and the
    autograd engine's start for a backward) shows where the device time and the timer's head
    start do not hide it."""
    items = []
    for op in ops:
        items += priced_items([op], acc, eff, phase=getattr(op, "pass_", "fwd"))
    cost = launch_cost(
        sum(i.kernels for i in items),
        sum(i.time_s for i in items),
        eff,
        cuda_graph=False,
        backward_passes=int(len(ops) > 1),
        headstart=eff.l2_flushed,
        host_calls=sum(i.host_calls for i in items),
        backward_calls=sum(i.host_calls for i in items if i.phase == "bwd"),
    )
    items.append(
        Item(
            layer="runtime",
            category="launch",
            op="host issue time not hidden",
            phase="step",
            time_s=cost.host_exposed_s,
            bound="launch",
        )
    )
    return items
