"""Checks of the structural fields that the Hugging Face reader fills (``ModelConfig``'s last
block): q/k norms, norms per block, biases, sinks, soft-capping, MTP modules, expert weight
format. Each bad value is one ``GpuplanError`` naming the field, the value and what is valid.

The functions take the ``ModelConfig`` as ``cfg`` untyped: ``model.py`` imports this module.
"""

from __future__ import annotations

from dataclasses import fields

from gpuplan.errors import (
    GpuplanError,
    check_choice,
    check_kind,
    check_number,
    check_positive,
    check_switch,
    check_whole,
)
from gpuplan.limits import MAX_DIM, MAX_LAYERS
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


def check_field_types(cfg) -> None:
    """Each field of ``cfg`` of its annotated kind: a switch True or False, a size a whole
    number from 0, a factor a finite number, a word a string, a part (``ssm``, ...) its class
    or None (a NaN or a list there would otherwise price a model silently)."""
    check_kind("name", cfg.name, str)  # every other message starts with it
    for f in fields(cfg):
        value, field = getattr(cfg, f.name), f"{cfg.name}: {f.name}"
        if f.type == "bool":
            check_switch(field, value)
        elif f.type == "int" or f.type == "int | None" and value is not None:
            top = MAX_LAYERS if f.name == "n_layers" else MAX_DIM
            check_whole(field, value, low=0, high=top)
        elif f.type == "float":
            check_number(field, value)
        elif f.type == "str" or f.type.startswith("tuple["):
            check_kind(field, value, str if f.type == "str" else (tuple, list))
        elif f.type.endswith(" | None"):
            check_kind(field, value, (f.type.removesuffix(" | None"), None))
