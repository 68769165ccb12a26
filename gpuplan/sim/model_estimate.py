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
from gpuplan.workloads.model import ModelConfig
from gpuplan.workloads.presets import get_model

MODEL_KINDS = ("layer", "train_step", "decode_step")


def model_breakdown(
    kind: str, acc, eff, model: str, params: dict[str, Any], *, impl: str = "fused"
) -> Breakdown:
    """Predicted breakdown of ``kind`` for the named model; ``params`` sets batch, seq, ..."""
    check_choice("kind", kind, MODEL_KINDS)
    cfg = get_model(model)
    if "layers" in params:
        cfg = replace(cfg, n_layers=params["layers"])
    return config_breakdown(kind, acc, eff, cfg, params, impl=impl, with_head=True)


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
