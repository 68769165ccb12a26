"""The steps of one block for one micro-batch: its priced kernels (the estimate's fused ones,
``compute``, or eager PyTorch's) and the TP/SP, CP and EP collectives after or beside them.

- a block's forward is two halves (attention, MLP), each followed by its half of the block's
  TP/SP collectives (Megatron: an all-reduce after the attention output projection and one after
  the MLP down projection; Shoeybi et al. 2019, Fig. 3); an MoE block's MLP half also runs the
  dispatch and combine all-to-alls; the backward runs the halves in reverse order;
- ``overlap_tp``: a half's TP collectives run beside its GEMMs; CP's ring exchange always runs
  beside the attention kernel (Liu et al. 2023); where a collective overlaps, the kernels it hides
  behind are drawn as one group after the others;
- full recomputation re-runs each block's forward (and its collectives) just before the block's
  backward; selective re-runs the unfused attention core.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuplan.hwmodels.efficiency import queued
from gpuplan.sim.estimate.breakdown import Item, priced_items
from gpuplan.sim.estimate.compilation import eager
from gpuplan.sim.parallel import collectives as co
from gpuplan.sim.parallel.compute import CostCache
from gpuplan.sim.parallel.estimate import shape_of
from gpuplan.sim.parallel.kernel_costs import Cost, MicroBatchCosts
from gpuplan.sim.parallel.kernel_lists import CORE, embedding_ops, head_ops, layer_ops
from gpuplan.sim.parallel.model_facts import ACT_BYTES, model_facts
from gpuplan.sim.parallel.step_time import tp_comm_phases
from gpuplan.sim.parallel.strategy import Strategy
from gpuplan.sim.parallel.topology import Cluster, spans
from gpuplan.sim.runtime.timeline.comm import Comm, comm_from, send_from, split_comm

EMBEDDING, HEAD, OTHER = -1, -2, -3  # block ids of the end-stage work


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


class StepBuilder:
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
        return (split_comm(f"{name} ({what})", "tp", seconds, busy, 0.0),)

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
            return [Step(name, phase, block, items, items_s(items), after=ep + tp)]
        attn = tuple(
            i for i in items if cp and (i.op.startswith("attention") or i.op.startswith(CORE))
        )
        gemm = tuple(i for i in items if overlap_tp and i.category == "gemm" and i not in attn)
        rest = tuple(i for i in items if i not in attn and i not in gemm)
        steps = [Step(name, phase, block, rest, items_s(rest))]
        if attn:
            steps.append(Step(f"{name} attention", phase, block, attn, items_s(attn), overlap=cp))
        if gemm:
            steps.append(Step(f"{name} gemm", phase, block, gemm, items_s(gemm), overlap=tp))
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
                steps.append(Step(f"L{layer} core recompute", "recompute", layer, core, items_s(core)))
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
        return Step(name, phase, block, tuple(items), items_s(items))

    # -- parameters --------------------------------------------------------------------------
    def block_params(self, layer: int) -> float:
        f, st = self.facts, self.st
        if self.cfg.is_moe_layer(layer):
            return f.moe_shared_params / st.tp + f.moe_expert_params / (st.tp * st.ep)
        return f.dense_layer_params / st.tp

    def end_params(self, block: int) -> float:
        f = self.facts
        return (f.embedding_params if block == EMBEDDING else f.head_params) / self.st.tp


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


def items_s(items) -> float:
    return sum(i.time_s for i in items)
