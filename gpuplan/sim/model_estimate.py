"""Whole-model estimates on one GPU from a model preset or config.json (dense, MoE or MLA).

The record contract describes its layer by a few numbers (hidden, heads, ffn); a user asks about
a named model. This module prices that model's own operators (``workloads.operators``), with its
own attention kind, experts and vocabulary, through the same step functions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from gpuplan.errors import check_choice
from gpuplan.sim import step
from gpuplan.sim.breakdown import Breakdown
from gpuplan.sim.inference_step import decode_breakdown, prefill_breakdown
from gpuplan.sim.stacks import Stack, get_stack, stack_efficiency
from gpuplan.workloads.model import ModelConfig
from gpuplan.workloads.presets import get_model

MODEL_KINDS = ("layer", "prefill_step", "train_step", "decode_step")
_PHASE = {"prefill_step": "prefill", "decode_step": "decode", "train_step": "train"}


def model_breakdown(
    kind: str,
    acc,
    eff,
    model: str | ModelConfig,
    params: Mapping[str, Any],
    *,
    impl: str | None = None,
    stack: str | Stack = "pytorch",
) -> Breakdown:
    """Predicted breakdown of ``kind`` for the named model (or config) on ``stack``;
    ``params`` sets batch, seq, ... (``impl`` overrides the stack's elementwise kernels)."""
    check_choice("kind", kind, MODEL_KINDS)
    cfg = model if isinstance(model, ModelConfig) else get_model(model)
    if "layers" in params:
        cfg = replace(cfg, n_layers=params["layers"])
    stack = get_stack(stack)
    if impl is not None:
        stack = replace(stack, elementwise=impl)
    phase = _PHASE.get(kind, "train" if params.get("pass") == "fwd_bwd" else "prefill")
    eff = stack_efficiency(stack, eff, acc, phase=phase)
    if kind == "prefill_step":
        return prefill_breakdown(acc, eff, cfg, stack, batch=params["batch"], seq=params["seq"],
                                 tp=params.get("tp", 1))
    if kind == "decode_step":
        return decode_breakdown(
            acc, eff, cfg, stack, batch=params["batch"], context=params["context"],
            dtype=params.get("dtype", "bf16"), cuda_graph=params.get("cuda_graph"),
            kv_cache=params.get("kv_cache"), max_cache_len=params.get("max_cache_len"),
            tp=params.get("tp", 1),
        )
    return config_breakdown(kind, acc, eff, cfg, params, impl=stack.elementwise, with_head=True)


def config_breakdown(
    kind: str,
    acc,
    eff,
    cfg: ModelConfig,
    params: Mapping[str, Any],
    *,
    impl: str,
    with_head: bool = False,
    isolated: bool = False,
) -> Breakdown:
    """``kind`` (layer, train_step, decode_step) of ``cfg``, as ``impl`` runs its kernels.
    ``with_head``: a decode step includes embedding and LM head; ``isolated``: it is timed
    alone after an L2 flush (the record contract's harness)."""
    if kind == "layer":
        return step.layer_breakdown(
            acc,
            eff,
            cfg,
            micro_batch=params["micro_batch"],
            seq=params["seq"],
            pass_=params["pass"],
            compiled=impl == "compiled",
            dtype=params["dtype"],
            tp=params.get("tp", 1),
        )
    if kind == "train_step":
        return step.train_step_breakdown(
            acc,
            eff,
            cfg,
            micro_batch=params["micro_batch"],
            seq=params["seq"],
            recompute=params["recompute"],
            precision=params.get("precision", "bf16-mixed"),
            impl=impl,
        )
    return step.decode_step_breakdown(
        acc,
        eff,
        cfg,
        batch=params["batch"],
        context=params["context"],
        cuda_graph=params["cuda_graph"],
        dtype=params["dtype"],
        impl=impl,
        with_head=with_head,
        isolated=isolated,
        tp=params.get("tp", 1),
    )
