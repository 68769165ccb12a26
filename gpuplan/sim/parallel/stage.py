"""From one micro-batch's priced kernels to a pipeline stage's compute inputs of the step model.

``shape_times`` reduces a ``MicroBatchCosts`` to the few numbers the closed forms need;
``stage_compute`` combines them with the stage layout (numpy arrays or numbers). The slowest stage
carries its blocks plus the heavier of the two ends (the embedding on the first stage, the LM head
and loss on the last; both when pp == 1); a middle stage, its blocks only, sets the bubble.
Recomputation (Korthikanti et al. 2022): full re-runs each block's forward in the backward;
selective re-runs the attention core, which a flash kernel never stores, so it costs nothing
extra there and re-runs QK^T, softmax, dropout and PV for the unfused attention.
"""

from __future__ import annotations

import numpy as np

from gpuplan.sim.parallel.compute import CORE, Cost, MicroBatchCosts

TIME_FIELDS = (
    "dense_fwd",
    "dense_bwd",
    "moe_fwd",
    "moe_bwd",
    "dense_core",
    "moe_core",
    "head_fwd",
    "head_bwd",
    "emb_fwd",
    "emb_bwd",
    "gemm_layer",
    "attn_layer",
)


def _or_zero(cost: Cost | None, attr: str, **kw) -> float:
    if cost is None:
        return 0.0
    value = getattr(cost, attr)
    return value(**kw) if callable(value) else value


def shape_times(mbc: MicroBatchCosts) -> dict[str, float]:
    """The scalar times (seconds, one GPU, one micro-batch) of a shape's kernels."""
    layer = mbc.dense or mbc.moe
    return {
        "dense_fwd": _or_zero(mbc.dense, "fwd_s"),
        "dense_bwd": _or_zero(mbc.dense, "bwd_s"),
        "moe_fwd": _or_zero(mbc.moe, "fwd_s"),
        "moe_bwd": _or_zero(mbc.moe, "bwd_s"),
        "dense_core": _or_zero(mbc.dense, "fwd_time_s", prefix=CORE),
        "moe_core": _or_zero(mbc.moe, "fwd_time_s", prefix=CORE),
        "head_fwd": mbc.head.fwd_s,
        "head_bwd": mbc.head.bwd_s,
        "emb_fwd": mbc.embedding.fwd_s,
        "emb_bwd": mbc.embedding.bwd_s,
        "gemm_layer": layer.time_s(category="gemm"),
        "attn_layer": layer.time_s(category="attention") + layer.time_s(prefix=CORE),
    }


def end_is_head(t) -> np.ndarray:
    """Whether the LM-head stage (not the embedding stage) is the heavier end."""
    return (t["head_fwd"] + t["head_bwd"]) >= (t["emb_fwd"] + t["emb_bwd"])


def stage_compute(t, *, layers, moe_layers, pp, rc) -> dict:
    """Per-micro-batch compute of the slowest stage and of a middle stage."""
    dense = layers - moe_layers
    blk_fwd = dense * t["dense_fwd"] + moe_layers * t["moe_fwd"]
    blk_bwd = dense * t["dense_bwd"] + moe_layers * t["moe_bwd"]
    core = dense * t["dense_core"] + moe_layers * t["moe_core"]
    recompute = np.where(rc == 2, blk_fwd, np.where(rc == 1, core, 0.0))
    single = np.asarray(pp) == 1
    head = end_is_head(t)
    end_fwd = np.where(
        single, t["head_fwd"] + t["emb_fwd"], np.where(head, t["head_fwd"], t["emb_fwd"])
    )
    end_bwd = np.where(
        single, t["head_bwd"] + t["emb_bwd"], np.where(head, t["head_bwd"], t["emb_bwd"])
    )
    return {
        "stage_fwd": blk_fwd + end_fwd,
        "stage_bwd": blk_bwd + end_bwd,
        "recompute": recompute,
        "typical": blk_fwd + blk_bwd + recompute,
        "gemm_layer": t["gemm_layer"],
        "attn_layer": t["attn_layer"],
        "layers": layers,
        "moe_layers": moe_layers,
    }
