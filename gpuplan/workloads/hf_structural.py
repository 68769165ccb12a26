"""Read a decoder's structure from a Hugging Face ``config.json``, whatever its ``model_type``.

The reader does not match a list of model types: it reads the fields a config states and turns
them into per-layer structure (``ModelConfig`` with ``layer_types`` and ``ffn_types``):

- shape: hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim
  (or attention_head_dim), intermediate_size (Llama 4's dense layers: intermediate_size_mlp;
  Granite hybrids: shared_intermediate_size), vocab_size, max_position_embeddings,
  tie_word_embeddings;
- biases: attention_bias, mlp_bias; soft-capping: attn_logit_softcapping,
  final_logit_softcapping; embedding_multiplier; position_embedding_type "nope";
- mixer per layer: layer_types (full_attention, sliding_attention, chunked_attention,
  linear_attention, attention, mamba), sliding_window with sliding_window_pattern or
  use_sliding_window and max_window_layers (Qwen2), full_attention_interval (Qwen3-Next), no_rope_layers with
  attention_chunk_size (Llama 4), hybrid_override_pattern (Nemotron-H: M Mamba-2, * attention,
  - MLP, E MoE), index_n_heads / index_head_dim / index_topk (DeepSeek-V3.2 sparse attention);
- the state-space and linear-attention shapes: mamba_num_heads | mamba_n_heads | num_heads,
  mamba_head_dim | mamba_d_head | head_dim, ssm_state_size | mamba_d_state | state_size,
  n_groups | mamba_n_groups, conv_kernel | mamba_d_conv, chunk_size | mamba_chunk_size,
  use_conv_bias | mamba_conv_bias, use_bias | mamba_proj_bias; linear_num_key_heads,
  linear_num_value_heads, linear_key_head_dim, linear_value_head_dim, linear_conv_kernel_dim;
- MLA: q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim;
- MoE: num_local_experts | num_experts | n_routed_experts, num_experts_per_tok,
  moe_intermediate_size, n_shared_experts | shared_expert_intermediate_size |
  shared_intermediate_size, and the layout: first_k_dense_replace with moe_layer_freq,
  decoder_sparse_step with mlp_only_layers, moe_layers or interleave_moe_layer_step;
  num_nextn_predict_layers (DeepSeek MTP modules, counted apart); quantization_config's
  quant_method "mxfp4" (gpt-oss experts).

``hf_traits.TRAITS`` adds what no field states. An unknown ``model_type`` is read from these
fields with a note; a required field that is absent is a one-line ``GpuplanError`` naming it.
"""

from __future__ import annotations

import math
from typing import Any

from gpuplan.errors import GpuplanError
from gpuplan.workloads.hf_fields import Fields, shown
from gpuplan.workloads.hf_traits import traits
from gpuplan.workloads.layer_kinds import LinearAttention, Mamba2, SparseIndexer

# the names configs give a layer's mixer (transformers' layer_types values)
_MIXER_NAMES = {"full_attention": "full", "attention": "full", "sliding_attention": "sliding",
                "chunked_attention": "chunked", "linear_attention": "linear", "mamba": "mamba2"}
# Nemotron-H's hybrid_override_pattern: (mixer, ffn) per character
_NEMOTRON = {"M": ("mamba2", "none"), "*": ("full", "none"), "-": ("none", "dense"),
             "E": ("none", "moe")}
_NEMOTRON_NAMES = {"linear_attention": "M", "mamba": "M", "full_attention": "*",
                   "attention": "*", "mlp": "-", "moe": "E"}


_MOE = ("router_bias", "expert_bias", "shared_expert_gate", "router_score_bias")


def read_decoder(f: Fields, model_type: str, notes: list[str]) -> dict[str, Any]:
    """``ModelConfig`` keyword arguments of the text decoder that ``f`` describes."""
    entry, known = traits(model_type)
    if not known:
        notes.append(f"model_type {model_type!r} is not in the traits table: read from its "
                     "standard fields, with no hidden facts (sandwich norms, q/k norms, sinks)")
    if entry.get("defaults"):
        f = Fields({**entry["defaults"], **f.raw}, f.origin)
    out = _core(f, entry, notes)
    if f.get("use_qk_norm", False, "bool") and not entry.get("qk_norm_weightless"):
        out["qk_norm"] = "head"
    out |= _biases(f, entry, out)
    out |= _moe(f, entry, out)
    out |= {k: v for k, v in entry["fields"].items() if out.get("n_experts") or k not in _MOE}
    out |= _extras(f, entry, out, notes)
    mixers, ffns = _layout(f, entry, out, notes)
    out |= _compact(mixers, ffns, out)
    return out


def _core(f: Fields, entry: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    """Shape, the MLA, linear-attention, state-space and indexer sizes."""
    d = f.need("hidden_size")
    out: dict[str, Any] = {"n_layers": f.need("num_hidden_layers", "layers"), "d_model": d,
                           "vocab_size": f.need("vocab_size"),
                           "tied_embeddings": f.get("tie_word_embeddings", entry["tied"], "bool")}
    ssm = _ssm(f) if _has_ssm(f) else None
    if ssm is not None and not f.has("num_attention_heads"):  # a pure state-space model
        out |= {"n_heads": ssm.n_heads, "n_kv_heads": ssm.n_heads, "d_head": ssm.head_dim,
                "d_ff": ssm.d_inner}
    else:
        heads = f.need("num_attention_heads")
        out |= {"n_heads": heads, "n_kv_heads": f.get("num_key_value_heads", heads),
                "d_head": f.get("head_dim", None) or f.get("attention_head_dim", None),
                "d_ff": f.need(entry.get("dense_width", "intermediate_size"))}
    positions = f.get("max_position_embeddings", entry["max_positions"])
    if positions is None:
        positions = 4096
        notes.append("max_position_embeddings is absent: 4,096 tokens taken as the context")
    out["max_seq_len"] = positions
    if ssm is not None:
        out["ssm"] = ssm
        out["ssm_conv_bias"] = _first(f, ("use_conv_bias", "mamba_conv_bias"), True, "bool")
        out["ssm_proj_bias"] = _first(f, ("use_bias", "mamba_proj_bias"), False, "bool")
    if f.has("kv_lora_rank") or entry.get("mla"):
        out |= _mla(f)
    if f.has("linear_num_key_heads"):
        out["linear_attention"] = LinearAttention(
            n_key_heads=f.need("linear_num_key_heads"),
            n_value_heads=f.need("linear_num_value_heads"),
            key_head_dim=f.need("linear_key_head_dim"),
            value_head_dim=f.need("linear_value_head_dim"),
            conv_kernel=f.get("linear_conv_kernel_dim", 4))
    if f.has("index_topk"):
        out["sparse_indexer"] = SparseIndexer(n_heads=f.need("index_n_heads"),
                                              head_dim=f.need("index_head_dim"),
                                              top_k=f.need("index_topk"))
    return out


def _first(f: Fields, keys: tuple[str, ...], default: Any, kind: str = "count") -> Any:
    """The first of ``keys`` that is given (configs spell one field several ways)."""
    for key in keys:
        if f.has(key):
            return f.get(key, default, kind)
    return default


def _has_ssm(f: Fields) -> bool:
    return any(f.has(k) for k in ("mamba_num_heads", "mamba_n_heads", "ssm_state_size",
                                  "mamba_d_state", "state_size"))  # fmt: skip


def _ssm(f: Fields) -> Mamba2:
    """Mamba-2 sizes under any of their spellings (defaults of ``Mamba2Config``)."""
    heads = _first(f, ("mamba_num_heads", "mamba_n_heads", "num_heads"), None)
    if heads is None:
        raise GpuplanError(f"{f.origin}: required field 'mamba_num_heads' (or mamba_n_heads, "
                           "num_heads) is missing")
    head_dim = _first(f, ("mamba_head_dim", "mamba_d_head"), None)
    if head_dim is None:
        head_dim = f.need("head_dim") if not f.has("num_attention_heads") else None
    if head_dim is None:  # Granite writes mamba_d_head only when it is not d_inner / heads
        head_dim = _first(f, ("mamba_expand", "expand"), 2) * f.need("hidden_size") // heads
    return Mamba2(n_heads=heads, head_dim=head_dim,
                  state_size=_first(f, ("ssm_state_size", "mamba_d_state", "state_size"), 128),
                  n_groups=_first(f, ("n_groups", "mamba_n_groups"), 1),
                  conv_kernel=_first(f, ("conv_kernel", "mamba_d_conv"), 4),
                  chunk_size=_first(f, ("chunk_size", "mamba_chunk_size"), 256))


def _mla(f: Fields) -> dict[str, Any]:
    return {"d_head": None,  # HF keeps head_dim = qk_rope_head_dim for RoPE; not a head size
            "q_lora_rank": f.get("q_lora_rank", 0, "size"), "kv_lora_rank": f.need("kv_lora_rank"),
            "qk_nope_head_dim": f.need("qk_nope_head_dim"),
            "qk_rope_head_dim": f.need("qk_rope_head_dim"), "v_head_dim": f.need("v_head_dim")}


def _biases(f: Fields, entry: dict[str, Any], out: dict[str, Any]) -> dict[str, Any]:
    bias = f.get("attention_bias", False, "bool")
    mlp = {"mlp_bias": f.get("mlp_bias", False, "bool")}
    if not bias:
        return mlp
    if out.get("kv_lora_rank"):
        raise GpuplanError(f"{f.origin}: attention_bias=True is not supported for MLA attention "
                           "(its feed-forward layers have no biases)")  # fmt: skip
    if entry.get("attention_bias") == "qkv":
        return mlp | {"qkv_bias": True}
    return mlp | {"attention_bias": True}


def _moe(f: Fields, entry: dict[str, Any], out: dict[str, Any]) -> dict[str, Any]:
    n = _first(f, ("num_local_experts", "num_experts", "n_routed_experts"), 0, "size")
    if not n:
        return {}
    width = f.get("moe_intermediate_size", None) or f.need("intermediate_size")
    moe = {"n_experts": n, "top_k": f.need("num_experts_per_tok"), "d_ff_expert": width}
    shared_width = _first(f, ("shared_expert_intermediate_size", "shared_intermediate_size"), 0,
                          "size")
    if f.has("n_shared_experts"):
        moe["n_shared_experts"] = f.get("n_shared_experts", 0, "size")
    elif shared_width:
        if shared_width % width:
            raise GpuplanError(f"{f.origin}: the shared expert's width {shared_width} is not a "
                               f"multiple of moe width {width}: not supported")
        moe["n_shared_experts"] = shared_width // width
    elif entry.get("shared_expert"):
        moe["n_shared_experts"] = 1
    if not moe.get("n_shared_experts"):
        moe.pop("n_shared_experts", None)
    if f.get("topk_method", "", "str") == "noaux_tc":  # DeepSeek's score-correction bias
        moe["router_score_bias"] = True
    quant = f.get("quantization_config", {}, "dict")
    if quant.get("quant_method") == "mxfp4":
        moe["expert_weight_dtype"] = "mxfp4"
    return moe


def checkpoint_format(f: Fields) -> dict[str, Any]:
    """The checkpoint's own weight format from ``quantization_config`` (transformers'
    ``quantizers/auto.py`` names the methods): ``fp8`` (DeepSeek-V3, Kimi-K2: block-wise FP8
    e4m3) and AWQ/GPTQ at 4 or 8 bits; anything else (mxfp4 is the experts' own, read with them)
    leaves the 16-bit default."""
    quant = f.get("quantization_config", {}, "dict")
    method = quant.get("quant_method")
    if method == "fp8":
        return {"checkpoint_weight_dtype": "fp8"}
    if method in ("awq", "gptq") and quant.get("bits") in (4, 8):
        return {"checkpoint_weight_dtype": f"int{quant['bits']}"}
    return {}


def _extras(f: Fields, entry: dict[str, Any], out: dict[str, Any],
            notes: list[str]) -> dict[str, Any]:  # fmt: skip
    extra = {"attn_logit_softcap": f.get("attn_logit_softcapping", 0.0, "number"),
             "final_logit_softcap": f.get("final_logit_softcapping", 0.0, "number")}
    if entry.get("embedding_scale_sqrt_d"):
        extra["embedding_scale"] = math.sqrt(out["d_model"])
    elif f.has("embedding_multiplier"):
        extra["embedding_scale"] = f.get("embedding_multiplier", 1.0, "number") or 1.0
    if f.get("position_embedding_type", "", "str") == "nope":
        extra["position"] = "none"
    mtp = f.get("num_nextn_predict_layers", 0, "size")
    if mtp and out.get("n_experts") and "router_score_bias" in entry["fields"]:
        extra["mtp_layers"] = mtp
        notes.append(f"{mtp} multi-token-prediction module(s) counted apart, not in the total")
    elif mtp:
        notes.append(f"num_nextn_predict_layers={mtp}: its modules are not counted")
    return extra


def _layout(f: Fields, entry: dict[str, Any], out: dict[str, Any],
            notes: list[str]) -> tuple[list[str], list[str]]:  # fmt: skip
    """The mixer kind and the feed-forward kind of every layer."""
    n = out["n_layers"]
    blocks = _nemotron_blocks(f, n)
    if blocks is not None:
        return [b[0] for b in blocks], [b[1] for b in blocks]
    mixers = _mixers(f, entry, out, notes)
    if "ssm" in out and not f.has("num_attention_heads"):
        return mixers, ["none"] * n
    return mixers, _ffns(f, out)


def _nemotron_blocks(f: Fields, n: int) -> list[tuple[str, str]] | None:
    """Nemotron-H's one-part blocks, from hybrid_override_pattern (or its layer_types)."""
    text = f.get("hybrid_override_pattern", None, "str")
    if text is None and f.raw.get("model_type") == "nemotron_h" and f.has("layer_types"):
        names = f.get("layer_types", [], "list")
        text = "".join(_NEMOTRON_NAMES.get(x, "?") if isinstance(x, str) else "?" for x in names)
    if text is None:
        return None
    if len(text) != n or any(c not in _NEMOTRON for c in text):
        raise GpuplanError(f"{f.origin}: hybrid_override_pattern={shown(text)} is invalid: give "
                           f"{n} characters of M (Mamba-2), * (attention), - (MLP), E (MoE)")
    return [_NEMOTRON[c] for c in text]


def _mixers(f: Fields, entry: dict[str, Any], out: dict[str, Any],
            notes: list[str]) -> list[str]:  # fmt: skip
    n, window = out["n_layers"], f.get("sliding_window", 0, "size")
    if f.has("layer_types"):
        kinds = _named_kinds(f, n)
    elif "linear_attention" in out:
        every = f.get("full_attention_interval", 4)
        kinds = ["full" if (i + 1) % every == 0 else "linear" for i in range(n)]
    elif entry.get("llama4_layers"):
        kinds = _llama4_kinds(f, n)
        out["attention_chunk_size"] = f.get("attention_chunk_size", 0, "size")
        if not out["attention_chunk_size"]:
            kinds = ["full"] * n
    elif "sparse_indexer" in out:
        kinds = ["dsa"] * n
    elif "ssm" in out and not f.has("num_attention_heads"):
        kinds = ["mamba2"] * n
    elif window and entry.get("window_pattern"):
        period = f.get("sliding_window_pattern", entry["window_pattern"])
        kinds = ["full" if (i + 1) % period == 0 else "sliding" for i in range(n)]
    elif window and entry.get("window_every_layer", True) and f.get(
            "use_sliding_window", True, "bool"):  # fmt: skip
        first = f.get("max_window_layers", 0, "size")  # Qwen2: layers from it on are windowed
        kinds = ["sliding" if i >= first else "full" for i in range(n)]
    else:
        kinds = ["full"] * n
    if "sliding" in kinds and window >= out["max_seq_len"]:
        notes.append(f"sliding_window={window} spans the whole context "
                     f"({out['max_seq_len']}): read as full attention")
        kinds = ["full" if k == "sliding" else k for k in kinds]
    elif "sliding" in kinds:
        out["sliding_window"] = window
    return kinds


def _named_kinds(f: Fields, n: int) -> list[str]:
    names = f.get("layer_types", [], "list")
    if len(names) != n or any(not isinstance(x, str) or x not in _MIXER_NAMES for x in names):
        raise GpuplanError(f"{f.origin}: layer_types={shown(names)} is invalid: give "
                           f"{n} of {', '.join(_MIXER_NAMES)}")
    return [_MIXER_NAMES[x] for x in names]


def _llama4_kinds(f: Fields, n: int) -> list[str]:
    """Llama 4: no_rope_layers[i] = 1 where layer i uses RoPE (and chunked attention), 0 for a
    global NoPE layer; absent, every ``no_rope_layer_interval``-th (4th) layer is NoPE."""
    every = f.get("no_rope_layer_interval", 4)
    rope = f.get("no_rope_layers", [], "list") or [int((i + 1) % every != 0) for i in range(n)]
    if len(rope) != n or any(x not in (0, 1) for x in rope):
        raise GpuplanError(f"{f.origin}: no_rope_layers={shown(rope)} is invalid: give {n} "
                           "values of 0 or 1")
    return ["chunked" if x else "nope" for x in rope]


def _ffns(f: Fields, out: dict[str, Any]) -> list[str]:
    """Which layers are MoE, by the fields the family uses."""
    n = out["n_layers"]
    if not out.get("n_experts"):
        return ["dense"] * n
    if f.has("first_k_dense_replace") or f.has("moe_layer_freq"):
        k, freq = f.get("first_k_dense_replace", 0, "size"), f.get("moe_layer_freq", 1)
        return ["moe" if i >= k and i % freq == 0 else "dense" for i in range(n)]
    if f.has("decoder_sparse_step") or f.has("mlp_only_layers"):
        step, dense = f.get("decoder_sparse_step", 1), f.get("mlp_only_layers", [], "list")
        return ["moe" if i not in dense and (i + 1) % step == 0 else "dense" for i in range(n)]
    if f.has("moe_layers") or f.has("interleave_moe_layer_step"):
        step = f.get("interleave_moe_layer_step", 1)
        moe = f.get("moe_layers", list(range(step - 1, n, step)), "list")
        return ["moe" if i in moe else "dense" for i in range(n)]
    return ["moe"] * n


def _compact(mixers: list[str], ffns: list[str], out: dict[str, Any]) -> dict[str, Any]:
    """The layout as ``ModelConfig`` fields: the older window and MoE fields where they say it
    (so a plain model reads as its preset), else explicit ``layer_types`` / ``ffn_types``."""
    layout: dict[str, Any] = {}
    n = len(mixers)
    if set(mixers) == {"sliding", "full"} and "full" in mixers:
        period = mixers.index("full") + 1
        if mixers == ["full" if (i + 1) % period == 0 else "sliding" for i in range(n)]:
            layout["local_per_global"] = period - 1
            mixers = []
    if set(mixers) <= {"full"} or set(mixers) == {"sliding"}:
        mixers = []
    if mixers:
        layout["layer_types"] = tuple(mixers)
    if "moe" in ffns and set(ffns) <= {"moe", "dense"}:
        k = ffns.index("moe")
        if ffns == ["moe" if i >= k else "dense" for i in range(n)]:
            return layout | ({"n_dense_layers": k} if k else {})
    if set(ffns) - {"dense"}:
        layout["ffn_types"] = tuple(ffns)
    return layout
