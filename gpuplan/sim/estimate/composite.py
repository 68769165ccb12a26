"""One-GPU predictions of composite work: a decoder layer, a tensor-parallel MLP, a training step
and a decode step, each as a ``Breakdown`` whose items sum to the predicted time.

Execution assumptions, named:
- kernels of one stream run back to back; the CPU issues them asynchronously, so its cost shows
  only where it exceeds the GPU's (``hwmodels.launch``);
- ``compiled`` means torch.compile's default mode: elementwise runs fused (``sim.estimate.compilation``),
  no CUDA graph;
- a training step under ``bf16-mixed`` is torch autocast over fp32 weights: each forward casts
  every weight to bf16 once (cached for the pass), each weight gradient is cast back to fp32, and
  fused AdamW reads parameter, gradient and both moments and writes parameter and moments
  (28 bytes per parameter);
- full recomputation re-runs each block's forward inside the backward (Chen et al. 2016;
  Korthikanti et al. 2022 sec. 4.1);
- a tensor-parallel MLP all-reduces its output in the forward and its input gradient in the
  backward, not overlapped with compute (Shoeybi et al. 2019, fig. 3).
"""

from __future__ import annotations

from dataclasses import replace

from gpuplan.errors import check_choice, check_positive, expects
from gpuplan.hwmodels.collectives import collective_time
from gpuplan.hwmodels.efficiency import queued
from gpuplan.hwmodels.launch import launch_cost
from gpuplan.sim.estimate.breakdown import Breakdown, Item, priced_items
from gpuplan.sim.estimate.compilation import IMPLS, eager, fuse_elementwise
from gpuplan.sim.estimate.inputs import check_params
from gpuplan.sim.estimate.kernels import latency_item
from gpuplan.workloads.dtypes import dtype_bytes
from gpuplan.workloads.feed_forward import mlp_block
from gpuplan.workloads.memory import layer_activation_bytes
from gpuplan.workloads.model import ModelConfig
from gpuplan.workloads.operators import (
    backward_of,
    embedding_forward,
    head_forward,
    layer_forward,
    logit_softcap,
)


def _as_run(ops, impl: str):
    """Ops as they run: ``fused`` (ideal kernels), ``eager`` (ATen pieces) or ``compiled``."""
    return {"fused": list, "eager": eager, "compiled": fuse_elementwise}[impl](ops)


def _launch_item(
    items: list[Item], eff, *, cuda_graph: bool, headstart: bool = False, extra_host_s: float = 0.0
) -> Item:
    backward_passes = int(any(i.phase == "bwd" for i in items))
    cost = launch_cost(
        sum(i.kernels for i in items),
        sum(i.time_s for i in items),
        eff,
        cuda_graph=cuda_graph,
        backward_passes=backward_passes,
        headstart=headstart,
        collectives=sum(i.kernels for i in items if i.category == "communication"),
        host_calls=sum(i.host_calls for i in items),
        backward_calls=sum(i.host_calls for i in items if i.phase == "bwd"),
        extra_host_s=extra_host_s,
    )
    what = "graph replay gaps" if cuda_graph else "host issue time not hidden"
    return Item(
        layer="runtime",
        category="launch",
        op=what,
        phase="step",
        time_s=cost.total_s,
        bound="launch",
    )


def _with_launch(
    items: list[Item],
    eff,
    *,
    cuda_graph: bool = False,
    headstart: bool = False,
    extra_host_s: float = 0.0,
    **kw,
) -> Breakdown:
    launch = _launch_item(
        items, eff, cuda_graph=cuda_graph, headstart=headstart, extra_host_s=extra_host_s
    )
    return Breakdown(items=(*items, launch, latency_item(eff)), **kw)


def layer_breakdown(
    acc,
    eff,
    cfg: ModelConfig,
    *,
    micro_batch: int,
    seq: int,
    pass_: str,
    compiled: bool,
    dtype: str = "bf16",
    tp: int = 1,
) -> Breakdown:
    """One decoder block, forward or forward+backward, eager or compiled; under tensor
    parallelism with its two all-reduces each way (Shoeybi et al. 2019, fig. 4)."""
    eff = queued(eff)
    fwd = layer_forward(cfg, batch=micro_batch, seq=seq, dtype=dtype, tp=tp)
    impl = "compiled" if compiled else "eager"
    comm = _tp_all_reduce(acc, eff, cfg, tokens=micro_batch * seq, tp=tp, dtype=dtype)
    items = priced_items(_as_run(fwd, impl), acc, eff, phase="fwd") + 2 * _all_reduce_items(
        comm, tp, "fwd"
    )
    if pass_ == "fwd_bwd":
        items += priced_items(_as_run(backward_of(fwd), impl), acc, eff, phase="bwd")
        items += 2 * _all_reduce_items(comm, tp, "bwd")
    acts = layer_activation_bytes(
        cfg,
        tokens=micro_batch * seq,
        dtype=dtype,
        tp=tp,
        impl="eager" if impl == "eager" else "fused",
    )
    return _with_launch(items, eff, memory_bytes={"activations": acts.total_bytes})


def tp_mlp_breakdown(
    acc,
    eff,
    cfg: ModelConfig,
    *,
    tokens: int,
    tp: int,
    pass_: str,
    dtype: str = "bf16",
    impl: str = "fused",
) -> Breakdown:
    """Megatron column/row-parallel MLP on one of ``tp`` ranks, with its all-reduces."""
    eff = queued(eff)
    fwd = _as_run(mlp_block(cfg, tokens=tokens, dtype=dtype, tp=tp), impl)
    reduce_bytes = tokens * cfg.d_model * dtype_bytes(dtype)
    comm = collective_time(acc, "all_reduce", tp, reduce_bytes, eff)
    items = priced_items(fwd, acc, eff, phase="fwd") + _all_reduce_items(comm, tp, "fwd")
    if pass_ == "fwd_bwd":
        items += priced_items(backward_of(fwd), acc, eff, phase="bwd")
        items += _all_reduce_items(comm, tp, "bwd")
    return _with_launch(items, eff)


def _tp_all_reduce(acc, eff, cfg: ModelConfig, *, tokens: int, tp: int, dtype: str):
    """One all-reduce of the block's output activations among ``tp`` ranks of one host."""
    return collective_time(acc, "all_reduce", tp, tokens * cfg.d_model * dtype_bytes(dtype), eff)


def _all_reduce_items(comm, tp: int, phase: str) -> list[Item]:
    if tp == 1:
        return []
    return [
        Item(
            layer="parallel",
            category="communication",
            op="tp all_reduce",
            phase=phase,
            time_s=comm.total_s,
            kernels=1,
            bound="bandwidth",
        )
    ]


def layer_groups(cfg: ModelConfig) -> list[tuple[int, int]]:
    """(a representative block index, how many blocks share its shape): dense, then MoE; under
    a sliding window, windowed and full-attention blocks apart (the first of each kind); with
    explicit layer kinds (``layer_types``, ``ffn_types``), every (FFN, mixer) kind apart."""
    if cfg.layer_types or cfg.ffn_types:
        mixers = cfg.layer_kinds
        groups: dict[tuple[str, str], tuple[int, int]] = {}
        for i in range(cfg.n_layers):
            first, n = groups.get((cfg.ffn_kind(i), mixers[i]), (i, 0))
            groups[(cfg.ffn_kind(i), mixers[i])] = (first, n + 1)
        return sorted(groups.values())
    if cfg.sliding_window:
        kinds: dict[tuple[bool, bool], tuple[int, int]] = {}
        for i in range(cfg.n_layers):
            key = (cfg.is_moe_layer(i), not cfg.is_windowed_layer(i))
            first, n = kinds.get(key, (i, 0))
            kinds[key] = (first, n + 1)
        return [kinds[k] for k in sorted(kinds)]
    moe = cfg.n_moe_layers
    groups = [(0 if not cfg.is_moe_layer(0) else _first_dense(cfg), cfg.n_layers - moe)]
    if moe:
        groups.append((next(i for i in range(cfg.n_layers) if cfg.is_moe_layer(i)), moe))
    return [(layer, count) for layer, count in groups if count]


def _first_dense(cfg: ModelConfig) -> int:
    return next((i for i in range(cfg.n_layers) if not cfg.is_moe_layer(i)), 0)


@expects(acc="Accelerator", eff="Efficiency", cfg="ModelConfig", dtype=str,
         extra_ops=(list, tuple))
def decode_step_breakdown(
    acc,
    eff,
    cfg: ModelConfig,
    *,
    batch: int,
    context: int,
    cuda_graph: bool,
    dtype: str = "bf16",
    tp: int = 1,
    impl: str = "fused",
    with_head: bool = False,
    isolated: bool = False,
    extra_ops=(),
    extra_host_s: float = 0.0,
) -> Breakdown:
    """One new token for each of ``batch`` sequences through ``cfg.n_layers`` blocks; with
    ``with_head`` also the embedding lookup, final norm and LM head (a whole model's step).
    ``isolated``: timed alone (after an L2 flush when ``eff.l2_flushed``, as the record
    contract's harness does). ``extra_ops``: per-block work a stack adds (a KV cache's copy);
    ``extra_host_s``: CPU time a framework adds beyond its torch calls."""
    check_params({"batch": batch, "context": context, "tp": tp, "cuda_graph": cuda_graph})
    check_choice("impl", impl, IMPLS)
    check_positive("extra_host_s", extra_host_s, allow_zero=True)
    eff = queued(eff)
    items = []
    if with_head:
        items += priced_items(
            embedding_forward(cfg, tokens=batch, dtype=dtype), acc, eff, phase="fwd"
        )
    for layer, count in layer_groups(cfg):
        ops = layer_forward(
            cfg, batch=batch, seq=1, dtype=dtype, context=context, tp=tp, layer=layer
        )
        items += priced_items(_as_run(ops, impl), acc, eff, phase="fwd", repeat=count)
    if extra_ops:
        items += priced_items(extra_ops, acc, eff, phase="fwd", repeat=cfg.n_layers)
    if tp > 1:  # two all-reduces per block (after attention and after the MLP)
        comm = _tp_all_reduce(acc, eff, cfg, tokens=batch, tp=tp, dtype=dtype)
        reduce = _all_reduce_items(comm, tp, "fwd")[0]
        items.append(
            replace(reduce, time_s=reduce.time_s * 2 * cfg.n_layers, kernels=2 * cfg.n_layers)
        )
    if with_head:  # final norm and LM head; sampling from the logits is left out
        head = head_forward(cfg, tokens=batch, dtype=dtype)[:2] + logit_softcap(
            cfg, tokens=batch, dtype=dtype)
        items += priced_items(_as_run(head, impl), acc, eff, phase="fwd")
    return _with_launch(
        items,
        eff,
        cuda_graph=cuda_graph,
        headstart=isolated and eff.l2_flushed,
        extra_host_s=extra_host_s,
    )
