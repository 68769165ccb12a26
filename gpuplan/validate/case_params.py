"""A record-contract case's params as ``gpuplan estimate`` takes them: each kind's defaults and
required params, the params it accepts (with a whole model or without), and a case's params
merged from the defaults, the scenario's overrides and those given."""

from __future__ import annotations

from typing import Any

# Defaults that make a param optional, per kind; params with no default are required.
DEFAULTS: dict[str, dict[str, Any]] = {
    "gemm": {"dtype": "bf16"},
    "attention": {
        "batch": 1,
        "heads_q": 32,
        "heads_kv": 8,
        "head_dim": 128,
        "causal": True,
        "pass": "fwd",
        "dtype": "bf16",
    },
    "elementwise": {"pass": "fwd", "dtype": "bf16"},
    "layer": {"seq": 4096, "micro_batch": 1, "pass": "fwd_bwd", "compiled": False, "dtype": "bf16"},
    "prefill_step": {"batch": 1, "seq": 4096},
    "train_step": {
        "seq": 4096,
        "micro_batch": 1,
        "recompute": "none",
        "optimizer": "adamw",
        "precision": "bf16-mixed",
    },
    "decode_step": {"batch": 1, "context": 2048, "cuda_graph": False, "dtype": "bf16"},
    "collective": {"world": 2, "dtype": "bf16"},
    "tp_mlp": {"tp": 1, "pass": "fwd_bwd", "dtype": "bf16"},
}
REQUIRED: dict[str, tuple[str, ...]] = {
    "gemm": ("m", "n", "k"),
    "attention": ("seq_q",),
    "elementwise": ("op", "tokens", "hidden"),
    "layer": ("hidden", "heads_q", "heads_kv", "ffn"),
    "prefill_step": ("model",),
    "train_step": ("vocab", "hidden", "heads_q", "heads_kv", "ffn", "layers"),
    "decode_step": ("hidden", "heads_q", "heads_kv", "ffn", "layers"),
    "collective": ("op", "bytes"),
    "tp_mlp": ("hidden", "ffn", "tokens"),
}
# One vocabulary with ``gpuplan train --precision``: the GEMMs' precision under mixed-precision
# training (fp32 master weights, gradients and Adam state as --state-precision says there);
# the record contract's ``bf16-mixed`` is bf16 in it. A one-GPU train step prices bf16 only.
PRECISION_ALIASES = {"bf16": "bf16-mixed"}
# What a whole model (``--model``) fills in, and what the whole-model path also takes.
MODEL_SHAPE = ("hidden", "heads_q", "heads_kv", "ffn", "vocab")
MODEL_EXTRA = {
    "layer": ("tp",),
    "prefill_step": ("tp", "layers"),
    "decode_step": ("tp", "layers", "kv_cache", "max_cache_len"),
    "train_step": ("layers",),
}
MODEL_ONLY = ("kv_cache", "max_cache_len")  # whole-model decode only
IMAGE_PARAMS = ("images", "image_size", "freeze_vision")  # a VLM's prefill and training step
CONTRACT_ONLY = ("timing",)  # the record contract's timing convention


def accepted(kind: str, with_model: bool) -> set[str]:
    """The params ``estimate KIND`` takes; any other given is refused, not ignored."""
    names = (set(DEFAULTS[kind]) | set(REQUIRED[kind])) - {"model"}
    if kind == "attention":
        names.add("seq_kv")
    if with_model:
        names = (names - set(MODEL_SHAPE)) | set(MODEL_EXTRA.get(kind, ()))
        if kind in ("prefill_step", "train_step"):
            names |= set(IMAGE_PARAMS) - ({"freeze_vision"} if kind == "prefill_step" else set())
    else:
        names |= set(CONTRACT_ONLY)
    return names


def case_params(kind: str, given: dict[str, Any], overrides: dict[str, Any], *,
                with_model: bool = False) -> dict[str, Any]:  # fmt: skip
    """The kind's defaults, then ``overrides``, then ``given`` (a whole model's decode step takes
    the stack's CUDA graphs unless given); the precision in the contract's word; an attention's
    ``seq_kv`` its ``seq_q`` unless given."""
    defaults = dict(DEFAULTS[kind])
    if with_model and kind == "decode_step":
        defaults.pop("cuda_graph")  # the stack's own choice unless asked
    params = defaults | overrides | given
    if "precision" in params:
        params["precision"] = PRECISION_ALIASES.get(params["precision"], params["precision"])
    if kind == "attention":
        params.setdefault("seq_kv", params.get("seq_q"))
    return params


def missing_params(kind: str, params: dict[str, Any]) -> list[str]:
    """The required params of ``kind`` that ``params`` lacks, in the contract's order."""
    return [k for k in REQUIRED[kind] if k not in params]
