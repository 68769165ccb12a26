"""What each GPU of a pipeline stage does for one micro-batch, priced by the analytical models:
the steps of every block (``block_steps``: kernels, and the collectives after or beside them),
the pipeline sends, the data-parallel gradient and parameter collectives, the optimizer.

The prices are the training estimate's (``sim.parallel``): kernels from ``compute`` (one GPU, one
micro-batch), collectives from ``collectives`` on the cluster's hierarchy (``comm``: as fixed and
busy seconds), TP/SP, CP and EP volumes from ``step_time``. Only their arrangement in time is
new; the embedding runs on the first virtual stage, the LM head and loss on the last.

Gradients are reduced in buckets of ``max(40M, 1M x dp)`` parameters, Megatron-Core's default for
its overlapped gradient reduction (``DistributedDataParallelConfig.bucket_size``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuplan.hwmodels.efficiency import queued
from gpuplan.hwmodels.launch import launch_cost
from gpuplan.sim.estimate.breakdown import Item
from gpuplan.sim.parallel.step_time import (
    GRAD_BYTES,
    PARAM_BYTES,
    accumulate_s,
    optimizer_s,
    pp_comm_s,
)
from gpuplan.sim.parallel.strategy import Strategy
from gpuplan.sim.parallel.topology import Cluster
from gpuplan.sim.runtime.timeline.block_steps import (
    EMBEDDING,
    HEAD,
    OTHER,
    BlockWork,
    Step,
    StepBuilder,
    items_s,
    micro_batch_costs,
)
from gpuplan.sim.runtime.timeline.comm import Comm, comm_from, send_from

BUCKET_PARAMS = 40_000_000  # Megatron-Core DistributedDataParallelConfig default


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """Everything the engine plays out: per (kind, stage, chunk) the blocks' work of one
    micro-batch, and the communication and optimizer around them."""

    p: int
    v: int
    m: int
    dp: int
    schedule: str
    zero: int
    overlap_dp: bool
    overlap_pp: bool
    recompute: str
    tasks: dict  # (kind, stage, chunk) -> tuple[BlockWork, ...]
    send: Comm | None  # one micro-batch's activation or gradient between stages
    optimizer: tuple[Step, ...]  # per stage
    embedding_sync: Comm | None  # tied embeddings across the end stages
    reduce: object  # params -> Comm (gradient bucket or ZeRO reduce-scatter)
    gather: object  # params -> Comm (ZeRO parameter all-gather)
    bucket_params: float
    n_blocks: int

    def blocks(self, stage: int) -> list[tuple[int, float]]:
        """(block, params) of every block a stage holds, in forward order."""
        seen: dict[int, float] = {}
        for c in range(self.v):
            for bw in self.tasks[("F", stage, c)]:
                if bw.block != OTHER:
                    seen.setdefault(bw.block, bw.params)
        return list(seen.items())


def build_plan(cfg, st: Strategy, *, cluster: Cluster, seq: int, eff, acc,
               impl: str = "fused") -> Plan:  # fmt: skip
    """The work of every stage of ``st`` for one micro-batch, priced."""
    mbc = micro_batch_costs(cfg, st, seq, acc, eff, impl)
    b = StepBuilder(cfg, st, cluster, seq, eff, mbc, impl)
    p, v = st.pp, st.chunks
    per_chunk = cfg.n_layers // (p * v)
    tasks: dict = {}
    stage_params = [0.0] * p
    for s in range(p):
        for c in range(v):
            vs = c * p + s
            layers = range(vs * per_chunk, (vs + 1) * per_chunk)
            fwd, bwd = _task_blocks(b, layers, vs == 0, vs == p * v - 1)
            tasks[("F", s, c)] = _with_host(b, fwd, "fwd")
            tasks[("B", s, c)] = _with_host(b, bwd + _accumulate(b, bwd), "bwd")
            stage_params[s] += sum(bw.params for bw in fwd)
    group = st.dp * st.cp
    local = [p_ / group if st.zero >= 1 else p_ for p_ in stage_params]
    optimizer = tuple(
        Step("optimizer step", "optimizer", OTHER, (_optimizer_item(t),), t)
        for t in (float(optimizer_s(lp, st.state_precision, acc, eff)) for lp in local)
    )
    return Plan(
        p=p, v=v, m=st.micro_batches, dp=st.dp, schedule=st.schedule, zero=st.zero,
        overlap_dp=st.overlap_dp, overlap_pp=st.overlap_pp, recompute=st.recompute,
        tasks=tasks, send=_send(b) if p > 1 else None, optimizer=optimizer,
        embedding_sync=_embedding_sync(b) if p > 1 and cfg.tied_embeddings else None,
        reduce=_dp_comm(b, "reduce"), gather=_dp_comm(b, "gather"),
        bucket_params=max(BUCKET_PARAMS, 1_000_000 * st.dp), n_blocks=cfg.n_layers,
    )  # fmt: skip


def _task_blocks(b: StepBuilder, layers, first: bool, last: bool):
    fwd: list[BlockWork] = []
    bwd: list[BlockWork] = []
    if first:
        fwd.append(BlockWork(EMBEDDING, (b.end_step(b.mbc.embedding, EMBEDDING, "fwd"),),
                             b.end_params(EMBEDDING)))  # fmt: skip
    for layer in layers:
        fwd.append(BlockWork(layer, tuple(b.block_forward(layer)), b.block_params(layer)))
    if last:
        head = b.end_params(HEAD)
        fwd.append(BlockWork(HEAD, (b.end_step(b.mbc.head, HEAD, "fwd"),), head))
        bwd.append(BlockWork(HEAD, (b.end_step(b.mbc.head, HEAD, "bwd"),), head))
    for layer in reversed(layers):
        bwd.append(BlockWork(layer, tuple(b.block_backward(layer)), b.block_params(layer)))
    if first:
        bwd.append(BlockWork(EMBEDDING, (b.end_step(b.mbc.embedding, EMBEDDING, "bwd"),),
                             b.end_params(EMBEDDING)))  # fmt: skip
    return fwd, bwd


def _accumulate(b: StepBuilder, bwd: list[BlockWork]) -> list[BlockWork]:
    """Unfused gradient accumulation: one bandwidth-bound kernel over the task's gradients."""
    if b.st.fused_grad_accumulation:
        return []
    params = sum(bw.params for bw in bwd)
    t = float(accumulate_s(params, b.st.state_precision, b.lk.acc, b.eff))
    item = Item(layer="compile", category="elementwise", op="gradient accumulation",
                phase="bwd", time_s=t, kernels=1, bound="memory")  # fmt: skip
    return [BlockWork(OTHER, (Step("gradient accumulation", "bwd", OTHER, (item,), t),), 0.0)]


def _with_host(b: StepBuilder, blocks: list[BlockWork], phase: str) -> tuple[BlockWork, ...]:
    """Eager PyTorch: the CPU's issue time not hidden behind the task's kernels."""
    if b.impl != "eager":
        return tuple(blocks)
    items = [i for bw in blocks for s in bw.steps for i in s.items]
    comms = sum(len(s.after) + len(s.overlap) for bw in blocks for s in bw.steps)
    cost = launch_cost(
        sum(i.kernels for i in items),
        items_s(items),
        queued(b.eff),
        cuda_graph=False,
        backward_passes=int(phase == "bwd"),
        collectives=comms,
        backward_calls=sum(i.kernels for i in items) if phase == "bwd" else 0,
    )
    if cost.total_s <= 0:
        return tuple(blocks)
    item = Item(layer="runtime", category="launch", op="host issue time not hidden",
                phase=phase, time_s=cost.total_s, bound="launch")  # fmt: skip
    host = Step("host issue", "launch", OTHER, (item,), cost.total_s)
    return tuple(blocks) + (BlockWork(OTHER, (host,), 0.0),)


def _send(b: StepBuilder) -> Comm:
    """One micro-batch's activation (or gradient) to the next stage: the estimate's
    ``pp_comm_s`` per send, as a message and Megatron's NVLink re-gather."""
    st = b.st
    one = (
        float(
            pp_comm_s(
                b.lk,
                np.asarray(b.pp_cross),
                b.span["tp"],
                b.act,
                np.asarray(st.tp),
                np.asarray(b.sp),
                np.asarray(st.pp),
                np.asarray(1),
            )  # fmt: skip
        )
        / 2
    )
    scatter = st.tp > 1 and not b.sp and b.pp_cross
    wire = b.act / st.tp if (b.sp or scatter) else b.act
    msg = send_from(b.lk, "pp send", b.pp_cross, wire)
    return Comm("pp send", "pp", max(one - msg.intra_s - msg.inter_s, 0.0), msg.intra_s,
                msg.inter_s)  # fmt: skip


def _embedding_sync(b: StepBuilder) -> Comm:
    nbytes = b.facts.vocab * b.facts.d_model / b.st.tp * GRAD_BYTES
    return comm_from(b.lk, "tied-embedding all_reduce", "dp", "all_reduce", 1, 2, nbytes)


def _dp_comm(b: StepBuilder, what: str):
    """params -> the data-parallel collective of that many parameters (memoized)."""
    st = b.st
    local, nodes = b.span["dpcp"]
    group = st.dp * st.cp
    memo: dict[float, Comm | None] = {}

    def make(params: float) -> Comm | None:
        if group == 1 or params <= 0:
            return None
        if params not in memo:
            if what == "gather":
                memo[params] = comm_from(b.lk, "dp param all_gather", "dp-gather", "all_gather",
                                         local, nodes, params * PARAM_BYTES / group, "dp")  # fmt: skip
            else:
                op = "all_reduce" if st.zero == 0 else "reduce_scatter"
                memo[params] = comm_from(b.lk, f"dp grad {op}", "dp", op, local, nodes,
                                         params * GRAD_BYTES, "dp")  # fmt: skip
        return memo[params]

    return make


def _optimizer_item(t: float) -> Item:
    return Item(layer="model", category="adamw", op="optimizer step", phase="optimizer",
                time_s=t, kernels=1, bound="memory")  # fmt: skip


def uniform_plan(*, p: int, m: int, v: int = 1, schedule: str = "1f1b", fwd_s: float,
                 bwd_s: float, send_s: float = 0.0, overlap_pp: bool = True) -> Plan:  # fmt: skip
    """A balanced pipeline of fixed times (one block per chunk, no data parallelism): the
    engine without the cost models, for checking schedules against their closed forms."""

    def work(kind: str, s: int, c: int) -> tuple[BlockWork, ...]:
        t = fwd_s if kind == "F" else bwd_s
        item = Item(layer="model", category="gemm", op=f"{kind} block", phase=kind, time_s=t)
        return (BlockWork(c * p + s, (Step(f"{kind}", kind, c * p + s, (item,), t),), 1.0),)

    tasks = {(k, s, c): work(k, s, c) for k in "FB" for s in range(p) for c in range(v)}
    idle = Step("optimizer step", "optimizer", OTHER, (), 0.0)
    return Plan(
        p=p, v=v, m=m, dp=1, schedule=schedule, zero=0, overlap_dp=True, overlap_pp=overlap_pp,
        recompute="none", tasks=tasks, send=Comm("pp send", "pp", send_s) if p > 1 else None,
        optimizer=(idle,) * p, embedding_sync=None, reduce=lambda _p: None,
        gather=lambda _p: None, bucket_params=BUCKET_PARAMS, n_blocks=p * v,
    )  # fmt: skip
