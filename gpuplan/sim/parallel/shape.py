"""The shape of one micro-batch on one GPU (``Shape``: everything its kernel list depends on),
and the fields a training stack sets on it (its experts' and residual stream's dtypes, its norms).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuplan.sim.stacks.training_defaults import layout_defaults_of


@dataclass(frozen=True, slots=True, kw_only=True)
class Shape:
    """What one GPU runs for one micro-batch (everything the kernel list depends on)."""

    micro_batch: int
    seq: int  # full sequence length
    tp: int = 1
    cp: int = 1
    sp: bool = False
    ep: int = 1
    load: float = 1.0  # busiest expert GPU's tokens over the mean
    precision: str = "bf16"
    attention: str = "flash"
    # the dtype the routed experts' GEMMs and activation run in (``Stack.moe_autocast_dtype``
    # under autocast over fp32 weights; bf16 otherwise): see ``expert_dtype_of``
    expert_dtype: str = "bf16"
    # the routed experts as grouped GEMMs over the experts that receive tokens (``Stack.moe``;
    # ``workloads.feed_forward.moe_block(grouped=True)``), else one GEMM per expert
    grouped_experts: bool = False
    # the dtype of the residual stream, norms and RoPE (``Stack.residual_dtype`` under autocast
    # over fp32 weights; bf16 otherwise): see ``kernel_lists._stream_dtype``
    residual_dtype: str = "bf16"
    # the RMSNorms as transformers' eager code runs them (``transformers_norm_of``): eight ATen
    # kernels forward and autograd's over them backward (``workloads.eager_rmsnorm``)
    transformers_norm: bool = False

    @property
    def tokens(self) -> int:
        return self.micro_batch * self.seq // self.cp


def expert_dtype_of(stack, precision: str) -> str:
    """The dtype ``stack``'s routed experts run in when training at ``precision``: its
    ``moe_autocast_dtype`` where it trains under autocast over fp32 weights in bf16 (the experts'
    inputs and weights stay fp32: autocast_mode.cpp casts no ``_grouped_mm``), else bf16."""
    return stack.moe_autocast_dtype if _autocast_over_fp32(stack, precision) else "bf16"


def transformers_norm_of(stack) -> bool:
    """Whether ``stack`` runs its RMSNorms as transformers' eager ``LlamaRMSNorm`` does
    (``workloads.eager_rmsnorm.eager_rmsnorm``): stacks that run transformers' modelling code
    (``repeat_kv_masked``, hf-transformers and torch-compile) with eager elementwise kernels
    (Inductor fuses the norm into one kernel). Prefill, decode and training all ask this."""
    return (stack is not None and getattr(stack, "repeat_kv_masked", False)
            and stack.elementwise == "eager")


def residual_dtype_of(stack, precision: str) -> str:
    """The dtype of ``stack``'s residual stream when training at ``precision``: its
    ``residual_dtype`` under autocast over fp32 weights in bf16, else bf16."""
    return stack.residual_dtype if _autocast_over_fp32(stack, precision) else "bf16"


def _autocast_over_fp32(stack, precision: str) -> bool:
    """Whether ``stack`` trains at ``precision`` under autocast over fp32 weights in bf16 (where
    its ``moe_autocast_dtype`` and ``residual_dtype`` apply)."""
    return stack is not None and precision == "bf16" and stack.mixed_precision == "autocast"


def stack_shape_fields(stack, precision: str, is_moe: bool) -> dict:
    """The ``Shape`` fields ``stack`` sets for a training micro-batch at ``precision``: its
    experts' dtype and grouping (MoE models only), its residual stream's dtype, its norms."""
    return dict(expert_dtype=expert_dtype_of(stack, precision) if is_moe else "bf16",
                grouped_experts=is_moe and grouped_experts_of(stack, precision),
                residual_dtype=residual_dtype_of(stack, precision),
                transformers_norm=transformers_norm_of(stack))  # fmt: skip



def grouped_experts_of(stack, precision: str) -> bool:
    """Whether a training step on ``stack`` at ``precision`` lists its routed experts as
    grouped GEMMs (``Stack.moe``): as ``Stack.expert_gemms`` says where set
    (``--expert-gemms``); else where its framework groups them (``LayoutDefaults.
    grouped_experts``: Megatron-Core's TEGroupedMLP under NeMo's recipes, torchtitan's
    torch._grouped_mm), one kernel and host call per projection; and
    where they are ``_grouped_mm`` calls over autocast's fp32 inputs (``expert_dtype_of``), as
    transformers' ``grouped_mm_experts_forward`` runs them eagerly: the experts that receive
    tokens, one activation over every routed row, and one fp32 ``mm`` per expert
    (``kernel_lists._expert_dtype``). Other stacks list one GEMM per expert (DeepSpeed-MoE's
    loop; torch-compile's one DSV2-Lite step: -6.6% as listed per expert, -29.6% grouped)."""
    if stack is None or stack.moe != "grouped_gemm":
        return False
    own = getattr(stack, "expert_gemms", None)  # ``--expert-gemms`` wins
    if own is not None:
        return own == "grouped"
    return (expert_dtype_of(stack, precision) != "bf16"
            or layout_defaults_of(stack).grouped_experts)
