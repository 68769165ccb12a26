"""Whole-model estimates on one GPU from a model preset or config.json (dense, MoE or MLA).

The record contract describes its layer by a few numbers (hidden, heads, ffn); a user asks about
a named model. This module prices that model's own operators (``workloads.operators``), with its
own attention kind, experts and vocabulary, through the same step functions.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gpuplan.errors import check_choice
from gpuplan.sim import step
from gpuplan.sim.breakdown import Breakdown
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
            precision=params["precision"],
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
        with_head=True,
        tp=params.get("tp", 1),
    )
