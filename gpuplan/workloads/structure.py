"""Checks of the structural fields that the Hugging Face reader fills (``ModelConfig``'s last
block): q/k norms, norms per block, biases, sinks, soft-capping, MTP modules, expert weight
format. Each bad value is one ``GpuplanError`` naming the field, the value and what is valid.

The functions take the ``ModelConfig`` as ``cfg`` untyped: ``model.py`` imports this module.
"""

from __future__ import annotations

from gpuplan.errors import GpuplanError, check_choice, check_positive
from gpuplan.workloads.layer_kinds import require_unset

QK_NORMS = ("", "head", "all")  # none; RMSNorm over each head; over all heads at once (OLMo 2)
EXPERT_WEIGHT_DTYPES = ("", "mxfp4")  # "": the model's weight dtype; OCP MX FP4 (gpt-oss)
# a checkpoint's own format: "" 16-bit, fp8 (quant_method fp8), int8/int4 (AWQ, GPTQ bits)
CHECKPOINT_WEIGHT_DTYPES = ("", "fp8", "int8", "int4")
# the norms a block can hold: one (Mamba-2, Nemotron-H: one pre-norm before each mixer), two
# (pre-norms or post-norms), four (Gemma 2/3: a pre- and a post-norm around each half)
NORMS_PER_BLOCK = (1, 2, 4)
_MOE_ONLY = ("router_bias", "expert_bias", "shared_expert_gate", "expert_weight_dtype")
_ATTENTION_ONLY = ("attention_sinks", "attn_output_gate")


def check_structure(cfg) -> None:
    """Every structural field valid, and set only where its part of the model exists."""
    name = cfg.name
    check_choice(f"{name}: qk_norm", cfg.qk_norm, QK_NORMS)
    check_choice(f"{name}: expert_weight_dtype", cfg.expert_weight_dtype, EXPERT_WEIGHT_DTYPES)
    check_choice(f"{name}: checkpoint_weight_dtype", cfg.checkpoint_weight_dtype,
                 CHECKPOINT_WEIGHT_DTYPES)  # fmt: skip
    if cfg.norms_per_block not in NORMS_PER_BLOCK:
        raise GpuplanError(f"{name}: norms_per_block={cfg.norms_per_block!r} is invalid: choose "
                           f"one of {', '.join(map(str, NORMS_PER_BLOCK))}")
    for field in ("attn_logit_softcap", "final_logit_softcap", "mtp_layers"):
        check_positive(f"{name}: {field}", getattr(cfg, field), allow_zero=True)
    check_positive(f"{name}: embedding_scale", cfg.embedding_scale)
    if not cfg.is_moe:
        require_unset(cfg, "n_experts=0 (dense)", _MOE_ONLY)
    if cfg.is_mla:
        require_unset(cfg, "MLA attention has its own norms", (*_ATTENTION_ONLY, "qk_norm"))
    if cfg.ssm is None:
        require_unset(cfg, "ssm is None (no Mamba-2 layer)", ("ssm_conv_bias", "ssm_proj_bias"))
