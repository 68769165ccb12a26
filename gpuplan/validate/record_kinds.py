"""The contract's table of measurement-record kinds (ARCHITECTURE.md, "Measurement records"):
each kind's params with the rule their values follow, its optional params, its measured metrics.

- The contract fixes the dtype list of ``gemm`` only (``GEMM_DTYPES``: its six and the low-precision
  formats beside them). Kernels of the other compute kinds run in
  a floating format (``FLOAT_DTYPES``); a collective moves any format of ``DTYPE_BYTES``.
- Shape rules that make a record meaningless otherwise are part of the table: ``heads_q`` a
  multiple of ``heads_kv`` (GQA), ``hidden`` a multiple of ``heads_q`` (head_dim = hidden /
  heads_q in a Llama layer), ``ffn`` a multiple of ``tp`` (each rank holds ``ffn / tp``), and
  for ``tp_layer`` ``heads_kv`` a multiple of ``tp`` (each rank holds ``heads_kv / tp``).
- ``tp_layer`` is an extension kind beside the contract's fixed table (ARCHITECTURE.md): the
  contract's kinds and keys are unchanged.
- The optional params of every kind (ARCHITECTURE.md): ``stack`` (a preset of ``gpuplan
  stacks``), ``attention_kernel`` (a kernel of ``sim.stacks.ATTENTION_KERNELS``), ``timing``
  (``isolated`` or ``device``). A record without them means plain PyTorch, timed in isolation.

``records`` checks a record against this table.
"""

from __future__ import annotations

from gpuplan.workloads.dtypes import DTYPE_BYTES

POSITIVE_INT = "positive integer"
MAX_INT = 2**53  # the largest integer a float holds exactly (IEEE 754 binary64)
BOOLEAN = "boolean"
OBJECT = "object"  # a JSON object (a whole-model record's hf_config)
PASSES = ("fwd", "fwd_bwd")
# the contract's six, then (an extension beside them, as ``tp_layer`` is) the block-scaled formats
# of ``hwmodels.formats`` (fp4 is NVFP4) and int4, the weight-only W4A16 GEMM (16-bit
# activations, int4 weights with one fp16 scale per 128, dequantized to bf16 math: Marlin)
GEMM_DTYPES = ("bf16", "fp16", "fp32", "tf32", "fp8", "int8", "fp4", "nvfp4", "mxfp4", "mxfp8",
               "int4")
FLOAT_DTYPES = ("bf16", "fp16", "fp32", "fp8")
ELEMENTWISE_OPS = ("layernorm", "rmsnorm", "gelu", "silu_mul", "softmax", "add", "dropout_add")
COLLECTIVE_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")

# A rule is POSITIVE_INT, BOOLEAN, OBJECT, or the tuple of allowed strings.
Rule = str | tuple[str, ...]

# The contract's table (ARCHITECTURE.md, "Measurement records"), param names in its order.
PARAM_RULES: dict[str, dict[str, Rule]] = {
    "gemm": {"m": POSITIVE_INT, "n": POSITIVE_INT, "k": POSITIVE_INT, "dtype": GEMM_DTYPES},
    "attention": {
        "batch": POSITIVE_INT,
        "heads_q": POSITIVE_INT,
        "heads_kv": POSITIVE_INT,
        "seq_q": POSITIVE_INT,
        "seq_kv": POSITIVE_INT,
        "head_dim": POSITIVE_INT,
        "causal": BOOLEAN,
        "pass": PASSES,
        "dtype": FLOAT_DTYPES,
    },
    "elementwise": {
        "op": ELEMENTWISE_OPS,
        "tokens": POSITIVE_INT,
        "hidden": POSITIVE_INT,
        "pass": PASSES,
        "dtype": FLOAT_DTYPES,
    },
    "layer": {
        "hidden": POSITIVE_INT,
        "heads_q": POSITIVE_INT,
        "heads_kv": POSITIVE_INT,
        "ffn": POSITIVE_INT,
        "seq": POSITIVE_INT,
        "micro_batch": POSITIVE_INT,
        "pass": PASSES,
        "compiled": BOOLEAN,
        "dtype": FLOAT_DTYPES,
    },
    "train_step": {
        "vocab": POSITIVE_INT,
        "hidden": POSITIVE_INT,
        "heads_q": POSITIVE_INT,
        "heads_kv": POSITIVE_INT,
        "ffn": POSITIVE_INT,
        "layers": POSITIVE_INT,
        "seq": POSITIVE_INT,
        "micro_batch": POSITIVE_INT,
        "recompute": ("none", "full"),
        "optimizer": ("adamw",),
        "precision": ("bf16-mixed",),
    },
    "decode_step": {
        "hidden": POSITIVE_INT,
        "heads_q": POSITIVE_INT,
        "heads_kv": POSITIVE_INT,
        "ffn": POSITIVE_INT,
        "layers": POSITIVE_INT,
        "batch": POSITIVE_INT,
        "context": POSITIVE_INT,
        "cuda_graph": BOOLEAN,
        "dtype": FLOAT_DTYPES,
    },
    "collective": {
        "op": COLLECTIVE_OPS,
        "world": POSITIVE_INT,
        "bytes": POSITIVE_INT,
        "dtype": tuple(DTYPE_BYTES),
    },
    "tp_mlp": {
        "hidden": POSITIVE_INT,
        "ffn": POSITIVE_INT,
        "tokens": POSITIVE_INT,
        "tp": POSITIVE_INT,
        "pass": PASSES,
        "dtype": FLOAT_DTYPES,
    },
    # An extension beside the contract's kinds (their keys unchanged): the contract's decoder
    # layer under Megatron tensor parallelism, eager, one of ``tp`` ranks of one host timed
    # (the slowest); each rank holds heads_q / tp query heads, heads_kv / tp key/value heads and
    # ffn / tp of the MLP width, with two all-reduces in the forward and two in the backward.
    "tp_layer": {
        "hidden": POSITIVE_INT,
        "heads_q": POSITIVE_INT,
        "heads_kv": POSITIVE_INT,
        "ffn": POSITIVE_INT,
        "seq": POSITIVE_INT,
        "micro_batch": POSITIVE_INT,
        "tp": POSITIVE_INT,
        "pass": PASSES,
        "dtype": FLOAT_DTYPES,
    },
}


def model_names() -> tuple[str, ...]:
    """Models a whole-model record may name: the presets and the stack campaign's configs."""
    from gpuplan.validate.stack_campaign.configs import MODELS
    from gpuplan.validate.stack_campaign.family_configs import FAMILIES
    from gpuplan.workloads.presets import PRESETS

    return tuple(sorted(set(PRESETS) | set(MODELS) | set(FAMILIES)))


# Whole-model kinds (additive; gpuplan.validate.stack_campaign measures them): one forward of the
# named model (``prefill_step``), one decode step against its cache (``model_decode_step``), one
# training step (``model_train_step``), ``layers`` the layer count kept; priced by the same path
# as ``gpuplan estimate prefill-step / decode-step / train-step --model``.
MODEL_NAME = "model name"  # a rule: one of model_names(), resolved when checked
PARAM_RULES |= {
    "prefill_step": {"model": MODEL_NAME, "layers": POSITIVE_INT, "batch": POSITIVE_INT,
                     "seq": POSITIVE_INT, "dtype": FLOAT_DTYPES},
    "model_decode_step": {"model": MODEL_NAME, "layers": POSITIVE_INT, "batch": POSITIVE_INT,
                          "context": POSITIVE_INT, "kv_cache": ("dynamic", "static", "paged"),
                          "dtype": FLOAT_DTYPES},
    "model_train_step": {"model": MODEL_NAME, "layers": POSITIVE_INT, "micro_batch": POSITIVE_INT,
                         "seq": POSITIVE_INT, "optimizer": ("adamw",),
                         "precision": ("bf16-mixed",)},
}
MODEL_KINDS = ("prefill_step", "model_decode_step", "model_train_step")
# MoE experts' grouped GEMM (additive; stack_campaign/grouped.py measures it): ``groups`` GEMMs
# of ``m`` rows each against their own [n, k] weight in one ``torch._grouped_mm`` call, priced
# by ``hwmodels.gemm.grouped_gemm_time`` (the path the MoE blocks of whole models take).
PARAM_RULES |= {"grouped_gemm": {"groups": POSITIVE_INT, "m": POSITIVE_INT, "n": POSITIVE_INT,
                                 "k": POSITIVE_INT, "dtype": FLOAT_DTYPES}}
# Optional params of one kind, checked and kept when present. A data-parallel ``train_step``
# (harness.dist_train) names its ranks ``dp``, its micro-batches per step ``accumulation`` and
# its ZeRO stage ``zero_stage`` (absent: 1, 1, 0, the one-GPU step); ``optimizer_impl`` the
# AdamW implementation it ran (``sim.stacks.OPTIMIZERS``; absent: the stack's own).
ZERO_STAGE = "ZeRO stage"  # a rule: the JSON integer 0, 1, 2 or 3
# A whole-model record may carry the Hugging Face config its model was built from
# (``hf_config``, its layer count the one kept) and ``impl: torch-fallback`` where transformers
# ran its pure-torch loops for want of a kernel package (stack_campaign/families.py).
_BUILT_FROM: dict[str, Rule] = {"hf_config": OBJECT, "impl": ("torch-fallback", "kernels")}
KIND_OPTIONAL: dict[str, dict[str, Rule]] = {
    "prefill_step": dict(_BUILT_FROM),
    "model_train_step": dict(_BUILT_FROM),
    "model_decode_step": {"max_cache_len": POSITIVE_INT, **_BUILT_FROM},
    "train_step": {"dp": POSITIVE_INT, "accumulation": POSITIVE_INT, "zero_stage": ZERO_STAGE,
                   "optimizer_impl": ("foreach", "fused")},
}
KINDS: tuple[str, ...] = tuple(PARAM_RULES)

# Measured metrics of each kind: (required, optional).
MEASURED: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    kind: (("time_s",), ("peak_bytes",) if kind in ("layer", "train_step", *MODEL_KINDS) else ())
    for kind in KINDS
}

# (numerator, denominator) pairs that must divide exactly, per kind.
MULTIPLES: dict[str, tuple[tuple[str, str], ...]] = {
    "attention": (("heads_q", "heads_kv"),),
    "layer": (("heads_q", "heads_kv"), ("hidden", "heads_q")),
    "train_step": (("heads_q", "heads_kv"), ("hidden", "heads_q")),
    "decode_step": (("heads_q", "heads_kv"), ("hidden", "heads_q")),
    "tp_mlp": (("ffn", "tp"),),
    "tp_layer": (
        ("heads_q", "heads_kv"),
        ("hidden", "heads_q"),
        ("heads_kv", "tp"),
        ("ffn", "tp"),
    ),
}


def optional_param_rules() -> dict[str, Rule]:
    """The optional params every kind may carry, with their allowed values."""
    from gpuplan.sim.stacks import ATTENTION_KERNELS, TIMINGS, list_stacks

    return {
        "stack": tuple(s.name for s in list_stacks()),
        "attention_kernel": ATTENTION_KERNELS,
        "timing": TIMINGS,
    }
