"""What each GPU of a pipeline stage does for one micro-batch, priced by the analytical models:
the steps of every block (kernels, and the collectives after or beside them), the pipeline sends,
the data-parallel gradient and parameter collectives, the optimizer.

The prices are the training estimate's (``sim.parallel``): kernels from ``kernel_lists`` (one GPU, one
micro-batch), collectives from ``collectives`` on the cluster's hierarchy, TP/SP, CP and EP
volumes from ``step_time``. Only their arrangement in time is new:

- a block's forward is two halves (attention, MLP), each followed by its half of the block's
  TP/SP collectives (Megatron: an all-reduce after the attention output projection and one after
  the MLP down projection; Shoeybi et al. 2019, Fig. 3); an MoE block's MLP half also runs the
  dispatch and combine all-to-alls; the backward runs the halves in reverse order;
- ``overlap_tp``: a half's TP collectives run beside its GEMMs; CP's ring exchange always runs
  beside the attention kernel (Liu et al. 2023); where a collective overlaps, the kernels it hides
  behind are drawn as one group after the others;
- full recomputation re-runs each block's forward (and its collectives) just before the block's
  backward; selective re-runs the unfused attention core;
- the embedding runs on the first virtual stage, the LM head and loss on the last;
- a collective is ``fixed_s`` (launch, per-step latencies) plus busy seconds on the scale-up link
  and on the NIC (its bytes sent per rank over the achievable bandwidth, ring terms of Thakur,
  Rabenseifner and Gropp 2005); alone it takes exactly the analytical time.

Gradients are reduced in buckets of ``max(40M, 1M x dp)`` parameters, Megatron-Core's default for
its overlapped gradient reduction (``DistributedDataParallelConfig.bucket_size``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuplan.hwmodels.efficiency import queued
from gpuplan.hwmodels.launch import launch_cost
from gpuplan.sim.estimate.breakdown import Item, priced_items
from gpuplan.sim.estimate.compilation import eager
from gpuplan.sim.parallel import collectives as co
from gpuplan.sim.parallel.compute import CostCache
from gpuplan.sim.parallel.estimate import shape_of
from gpuplan.sim.parallel.kernel_costs import Cost, MicroBatchCosts
from gpuplan.sim.parallel.kernel_lists import CORE, embedding_ops, head_ops, layer_ops
from gpuplan.sim.parallel.model_facts import ACT_BYTES, model_facts
from gpuplan.sim.parallel.step_time import (
    GRAD_BYTES,
    PARAM_BYTES,
    accumulate_s,
    optimizer_s,
    pp_comm_s,
    tp_comm_phases,
)
from gpuplan.sim.parallel.strategy import Strategy
from gpuplan.sim.parallel.topology import Cluster, spans

BUCKET_PARAMS = 40_000_000  # Megatron-Core DistributedDataParallelConfig default
EMBEDDING, HEAD, OTHER = -1, -2, -3  # block ids of the end-stage work


@dataclass(frozen=True, slots=True)
class Comm:
    """A collective or send: fixed seconds, then busy seconds on each link level."""

    name: str
    stream: str  # tp, cp, ep, pp, dp, dp-gather
    fixed_s: float
    intra_s: float = 0.0  # on the scale-up (NVLink) port
    inter_s: float = 0.0  # on the NIC
    group: str = ""  # "dp": spans data-parallel replicas (they meet before it starts)

    @property
    def total_s(self) -> float:
        return self.fixed_s + self.intra_s + self.inter_s


@dataclass(frozen=True, slots=True)
class Step:
    """Kernels a compute stream runs back to back, the collectives that run beside them
    (``overlap``) and those it then waits for (``after``)."""

    name: str
    phase: str  # fwd, bwd, recompute, optimizer, launch
    block: int
    items: tuple[Item, ...]
    compute_s: float
    overlap: tuple[Comm, ...] = ()
    after: tuple[Comm, ...] = ()


@dataclass(frozen=True, slots=True)
class BlockWork:
    """One block's steps in one task, and the parameters this GPU holds for it."""

    block: int
    steps: tuple[Step, ...]
    params: float


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


def comm_from(lk, name: str, stream: str, op: str, local: int, nodes: int, nbytes: float,
              group: str = "") -> Comm:  # fmt: skip
    """A hierarchical collective of ``nbytes`` per rank as fixed and busy seconds."""
    fn = {
        "all_reduce": co.all_reduce_s,
        "all_gather": co.all_gather_s,
        "reduce_scatter": co.reduce_scatter_s,
        "all_to_all": co.all_to_all_s,
    }[op]
    total = float(fn(lk, local, nodes, nbytes)) if local * nodes > 1 else 0.0
    intra, inter = _bytes_sent(op, local, nodes, nbytes)
    inter_bw = lk.inter_bytes_per_s / (lk.oversubscription if nodes > lk.nodes_per_leaf else 1)
    return _split(name, stream, total, intra / lk.intra_bytes_per_s, inter / inter_bw, group)


def send_from(lk, name: str, cross: bool, nbytes: float, extra_s: float = 0.0) -> Comm:
    """A point-to-point message (and ``extra_s`` of NVLink all-gather after it)."""
    total = float(co.send_recv_s(lk, cross, nbytes)) + extra_s
    if cross:
        return _split(name, "pp", total, 0.0, nbytes / lk.inter_bytes_per_s)
    return _split(name, "pp", total, nbytes / lk.intra_bytes_per_s, 0.0)


def _split(name, stream, total, intra_s, inter_s, group="") -> Comm:
    busy = intra_s + inter_s
    if busy > total > 0:  # a latency-bound protocol: the bandwidth terms are an upper bound
        intra_s, inter_s = intra_s * total / busy, inter_s * total / busy
    if total <= 0:
        intra_s = inter_s = 0.0
    return Comm(name, stream, max(total - intra_s - inter_s, 0.0), intra_s, inter_s, group)


def _bytes_sent(op: str, local: int, nodes: int, b: float) -> tuple[float, float]:
    """(bytes over NVLink, bytes over the NIC) one rank sends in the hierarchical ``op``."""
    lo, n = local, nodes
    if op == "all_reduce":
        if n == 1:
            return 2 * (lo - 1) / lo * b, 0.0
        shard = b / lo
        return (lo - 1) / lo * b + (lo - 1) * shard, 2 * (n - 1) / n * shard
    if op == "all_gather":
        return ((lo - 1) * b, 0.0) if n == 1 else ((lo - 1) * b * n, (n - 1) * b)
    if op == "reduce_scatter":
        return ((lo - 1) / lo * b, 0.0) if n == 1 else ((lo - 1) / lo * b, (n - 1) / n * b / lo)
    g = lo * n  # all_to_all: both levels at once; the larger share sets the time
    return ((lo - 1) / lo * b, 0.0) if n == 1 else (0.0, (g - lo) / g * b)


def micro_batch_costs(cfg, strategy: Strategy, seq: int, acc, eff, impl: str) -> MicroBatchCosts:
    """One micro-batch's priced kernels: the estimate's (``fused``) or eager PyTorch's."""
    shape = shape_of(strategy, cfg, seq)
    if impl == "fused":
        return CostCache(cfg, acc, eff)(shape)
    q = queued(eff)

    def cost(ops) -> Cost:
        fwd, bwd = ops
        return Cost(
            tuple(priced_items(eager(fwd), acc, q, phase="fwd")),
            tuple(priced_items(eager(bwd), acc, q, phase="bwd")),
        )

    kinds = {}
    for layer in range(cfg.n_layers):
        kind = "moe" if cfg.is_moe_layer(layer) else "dense"
        if kind not in kinds:
            kinds[kind] = cost(layer_ops(cfg, shape, layer))
    return MicroBatchCosts(
        dense=kinds.get("dense"),
        moe=kinds.get("moe"),
        head=cost(head_ops(cfg, shape)),
        embedding=cost(embedding_ops(cfg, shape)),
    )


class _Builder:
    """Turns priced kernels and collectives into the steps of every block."""

    def __init__(self, cfg, st: Strategy, cluster: Cluster, seq: int, eff, mbc, impl: str):
        self.cfg, self.st, self.mbc, self.impl, self.eff = cfg, st, mbc, impl, eff
        self.lk = co.links(cluster, eff)
        sp_ = spans(cluster, st.tp, st.cp, st.dp, st.pp, st.ep)
        self.span = {k: tuple(int(x) for x in v) for k, v in sp_.items() if k != "pp_cross"}
        self.pp_cross = bool(sp_["pp_cross"])
        tokens = st.micro_batch * seq / st.cp
        f = self.facts = model_facts(cfg)
        self.act = tokens * f.d_model * ACT_BYTES
        kv_heads = max(1, f.n_kv_heads // st.tp)
        self.kv = tokens * kv_heads * f.kv_dim * ACT_BYTES
        load = (st.capacity_factor or st.expert_imbalance) if cfg.is_moe else 1.0
        self.dispatch = tokens * f.top_k * f.d_model * ACT_BYTES * load
        self.sp = st.sp and st.tp > 1
        self.tp_fwd, self.tp_bwd, _ = (
            float(x)
            for x in tp_comm_phases(self.lk, self.span["tp"], self.act, np.asarray(st.tp), self.sp)
        )

    # -- communication of one block --------------------------------------------------------
    def _tp(self, seconds: float, what: str) -> tuple[Comm, ...]:
        if self.st.tp == 1 or seconds <= 0:
            return ()
        local, nodes = self.span["tp"]
        name = "tp all_gather+reduce_scatter" if self.sp else "tp all_reduce"
        # per half block: an all-reduce (2 (l-1)/l of the activation sent), or with SP an
        # all-gather and a reduce-scatter ((l-1)/l each) plus the backward's re-gather
        shares = 3 if (self.sp and what == "bwd") else 2
        busy = self.act * shares * (local - 1) / local / self.lk.intra_bytes_per_s
        if nodes > 1:
            busy = 0.0  # a TP group across domains: leave it all fixed (rare, slow anyway)
        return (_split(f"{name} ({what})", "tp", seconds, busy, 0.0),)

    def _ep(self, calls: int) -> tuple[Comm, ...]:
        if self.st.ep == 1:
            return ()
        local, nodes = self.span["ep"]
        a2a = comm_from(self.lk, "ep all_to_all", "ep", "all_to_all", local, nodes, self.dispatch)
        return (a2a,) * calls

    def _cp(self, sends: int) -> tuple[Comm, ...]:
        if self.st.cp == 1:
            return ()
        _local, nodes = self.span["cp"]
        one = send_from(self.lk, "cp ring send", nodes > 1, self.kv)
        return (Comm("cp ring exchange", "cp", one.fixed_s * sends, one.intra_s * sends,
                     one.inter_s * sends),)  # fmt: skip

    # -- steps ------------------------------------------------------------------------------
    def _half(self, items, phase, block, tp: tuple, ep: tuple, cp: tuple, name) -> list[Step]:
        """A half block: its kernels, then its collectives (or beside them)."""
        items = tuple(items)
        overlap_tp = self.st.overlap_tp and tp
        if not cp and not overlap_tp:
            return [Step(name, phase, block, items, _sum(items), after=ep + tp)]
        attn = tuple(
            i for i in items if cp and (i.op.startswith("attention") or i.op.startswith(CORE))
        )
        gemm = tuple(i for i in items if overlap_tp and i.category == "gemm" and i not in attn)
        rest = tuple(i for i in items if i not in attn and i not in gemm)
        steps = [Step(name, phase, block, rest, _sum(rest))]
        if attn:
            steps.append(Step(f"{name} attention", phase, block, attn, _sum(attn), overlap=cp))
        if gemm:
            steps.append(Step(f"{name} gemm", phase, block, gemm, _sum(gemm), overlap=tp))
        last = steps[-1]
        tail = ep + (() if overlap_tp else tp)
        steps[-1] = Step(last.name, last.phase, block, last.items, last.compute_s, last.overlap,
                         last.after + tail)  # fmt: skip
        return steps

    def block_forward(self, layer: int, phase: str = "fwd") -> list[Step]:
        cost = self._cost(layer)
        fwd = cost.fwd
        cut = _index(fwd, "mlp_norm")
        moe = self.cfg.is_moe_layer(layer)
        cp = self._cp(self.st.cp - 1)
        tp = self.tp_fwd / 2
        return self._half(
            fwd[:cut], phase, layer, self._tp(tp, phase), (), cp, f"L{layer} attn"
        ) + (
            self._half(
                fwd[cut:],
                phase,
                layer,
                self._tp(tp, phase),
                self._ep(2) if moe else (),
                (),
                f"L{layer} mlp",
            )  # fmt: skip
        )

    def block_backward(self, layer: int) -> list[Step]:
        cost = self._cost(layer)
        steps: list[Step] = []
        if self.st.recompute == "full":
            steps += [_relabel(s, "recompute") for s in self.block_forward(layer, "recompute")]
        elif self.st.recompute == "selective":
            core = tuple(_relabel_item(i, "recompute") for i in cost.fwd if i.op.startswith(CORE))
            if core:
                steps.append(Step(f"L{layer} core recompute", "recompute", layer, core, _sum(core)))
        bwd = cost.bwd
        cut = _index(bwd, "attn_residual")
        moe = self.cfg.is_moe_layer(layer)
        tp = self.tp_bwd / 2
        steps += self._half(bwd[:cut], "bwd", layer, self._tp(tp, "bwd"),
                            self._ep(2) if moe else (), (), f"L{layer} mlp")  # fmt: skip
        steps += self._half(bwd[cut:], "bwd", layer, self._tp(tp, "bwd"), (),
                            self._cp(2 * (self.st.cp - 1)), f"L{layer} attn")  # fmt: skip
        return steps

    def _cost(self, layer: int) -> Cost:
        return self.mbc.moe if self.cfg.is_moe_layer(layer) else self.mbc.dense

    def end_step(self, cost: Cost, block: int, phase: str) -> Step:
        items = cost.fwd if phase == "fwd" else cost.bwd
        name = {EMBEDDING: "embedding", HEAD: "lm head + loss"}[block]
        return Step(name, phase, block, tuple(items), _sum(items))

    # -- parameters --------------------------------------------------------------------------
    def block_params(self, layer: int) -> float:
        f, st = self.facts, self.st
        if self.cfg.is_moe_layer(layer):
            return f.moe_shared_params / st.tp + f.moe_expert_params / (st.tp * st.ep)
        return f.dense_layer_params / st.tp

    def end_params(self, block: int) -> float:
        f = self.facts
        return (f.embedding_params if block == EMBEDDING else f.head_params) / self.st.tp


def build_plan(cfg, st: Strategy, *, cluster: Cluster, seq: int, eff, acc,
               impl: str = "fused") -> Plan:  # fmt: skip
    """The work of every stage of ``st`` for one micro-batch, priced."""
    mbc = micro_batch_costs(cfg, st, seq, acc, eff, impl)
    b = _Builder(cfg, st, cluster, seq, eff, mbc, impl)
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


def _task_blocks(b: _Builder, layers, first: bool, last: bool):
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


def _accumulate(b: _Builder, bwd: list[BlockWork]) -> list[BlockWork]:
    """Unfused gradient accumulation: one bandwidth-bound kernel over the task's gradients."""
    if b.st.fused_grad_accumulation:
        return []
    params = sum(bw.params for bw in bwd)
    t = float(accumulate_s(params, b.st.state_precision, b.lk.acc, b.eff))
    item = Item(layer="compile", category="elementwise", op="gradient accumulation",
                phase="bwd", time_s=t, kernels=1, bound="memory")  # fmt: skip
    return [BlockWork(OTHER, (Step("gradient accumulation", "bwd", OTHER, (item,), t),), 0.0)]


def _with_host(b: _Builder, blocks: list[BlockWork], phase: str) -> tuple[BlockWork, ...]:
    """Eager PyTorch: the CPU's issue time not hidden behind the task's kernels."""
    if b.impl != "eager":
        return tuple(blocks)
    items = [i for bw in blocks for s in bw.steps for i in s.items]
    comms = sum(len(s.after) + len(s.overlap) for bw in blocks for s in bw.steps)
    cost = launch_cost(
        sum(i.kernels for i in items),
        _sum(items),
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


def _send(b: _Builder) -> Comm:
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


def _embedding_sync(b: _Builder) -> Comm:
    nbytes = b.facts.vocab * b.facts.d_model / b.st.tp * GRAD_BYTES
    return comm_from(b.lk, "tied-embedding all_reduce", "dp", "all_reduce", 1, 2, nbytes)


def _dp_comm(b: _Builder, what: str):
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


def _relabel(step: Step, phase: str) -> Step:
    items = tuple(_relabel_item(i, phase) for i in step.items)
    return Step(f"{step.name} (recompute)", phase, step.block, items, step.compute_s,
                step.overlap, step.after)  # fmt: skip


def _relabel_item(item: Item, phase: str) -> Item:
    return Item(layer="compile", category=item.category, op=item.op, phase=phase,
                time_s=item.time_s, flops=item.flops, bytes=item.bytes, kernels=item.kernels,
                bound=item.bound)  # fmt: skip


def _index(items, prefix: str) -> int:
    return next((k for k, i in enumerate(items) if i.op.startswith(prefix)), len(items))


def _sum(items) -> float:
    return sum(i.time_s for i in items)


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
