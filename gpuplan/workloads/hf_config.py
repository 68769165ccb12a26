"""Read a Hugging Face ``config.json`` into a ``ModelConfig``.

Supported ``model_type`` values and the fields read (names as in ``transformers``):

- ``llama``, ``mistral``, ``qwen2``: hidden_size, num_hidden_layers, num_attention_heads,
  num_key_value_heads, intermediate_size, vocab_size, head_dim, max_position_embeddings,
  tie_word_embeddings; Llama's attention_bias / mlp_bias; Qwen2 always has q, k, v biases;
- ``mixtral``: the same plus num_local_experts and num_experts_per_tok (intermediate_size is the
  width of one expert; every layer is MoE);
- ``deepseek_v2``, ``deepseek_v3``: the same plus n_routed_experts, num_experts_per_tok,
  n_shared_experts, moe_intermediate_size, first_k_dense_replace, moe_layer_freq and the MLA
  ranks q_lora_rank (null: no query compression), kv_lora_rank, qk_nope_head_dim,
  qk_rope_head_dim, v_head_dim; V3 (and ``topk_method: noaux_tc``) routers carry a per-expert
  score bias. ``num_nextn_predict_layers`` (the MTP module) is not part of the model read.
  MoE layers follow DeepSeek's own ``modeling_deepseek.py`` (``moe_layer_freq`` honoured;
  transformers' port ignores it, the same for the value 1 of every official config);
- sliding-window attention: Mistral's ``sliding_window`` (null: none) windows every block;
  ``gemma2`` (every other block windowed, the first included: ``modeling_gemma2.py``) and
  ``gemma3_text`` (``sliding_window_pattern``, default 6: five windowed blocks, then a full one:
  ``modeling_gemma3.py``) read the llama fields, ``sliding_window`` and, where given,
  ``layer_types`` (``sliding_attention`` / ``full_attention`` per block, which must repeat one
  pattern ending in a full block); their gated-GELU MLP has SwiGLU's three matrices;
- ``gpt2``: n_embd, n_layer, n_head, n_inner (null: 4 n_embd), n_positions, vocab_size
  (LayerNorm, GELU, biases everywhere, learned positions, tied embeddings).

An optional field that is absent takes the default of the ``transformers`` configuration class
(e.g. num_key_value_heads = num_attention_heads; max_position_embeddings 2048 for Llama). A
required field that is absent, or an unsupported model_type, is a ``GpuplanError`` naming it and
the file. Qwen2-MoE is not read; of multimodal wrappers (``text_config``, ``vision_config``):

- ``qwen2_vl`` (Qwen2-VL): the Qwen2 text fields (top level, or in ``text_config``) and
  ``vision_config``'s depth, embed_dim, mlp_ratio, num_heads, in_chans / in_channels,
  patch_size, spatial_merge_size, temporal_patch_size (defaults of ``Qwen2VLVisionConfig``);
  image tokens inline in the prompt (``workloads.vision``);
- ``mllama`` (Llama 3.2 Vision): ``text_config``'s Llama fields and ``cross_attention_layers``
  (the model read keeps the other blocks as its layers), ``vision_config``'s hidden_size,
  num_hidden_layers, num_global_layers, attention_heads, intermediate_size, image_size,
  patch_size, num_channels, max_num_tiles, intermediate_layers_indices and
  supported_aspect_ratios (defaults of ``MllamaVisionConfig``); the token table has
  vocab_size + 8 rows (``MllamaTextModel.embed_tokens``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from gpuplan.errors import GpuplanError
from gpuplan.workloads.model import ModelConfig, VisionTower

_MISSING = object()


class _Fields:
    """A config dict whose every read is checked, in one place: ``need`` (required) and ``get``
    (optional) take the kind of value the field holds (``KINDS``), and a missing required field or
    a value of the wrong kind is a one-line GpuplanError naming the file, the key and the value."""

    def __init__(self, raw: Mapping[str, Any], origin: str) -> None:
        self.raw, self.origin = raw, origin

    def need(self, key: str, kind: str = "count") -> Any:
        value = self.raw.get(key, _MISSING)
        if value is _MISSING or value is None:
            raise GpuplanError(f"{self.origin}: required field {key!r} is missing")
        return self.checked(key, value, kind)

    def get(self, key: str, default: Any, kind: str = "count") -> Any:
        """The field, or ``default`` when absent or null (transformers treats both alike)."""
        value = self.raw.get(key)
        return default if value is None else self.checked(key, value, kind)

    def checked(self, key: str, value: Any, kind: str) -> Any:
        """``value`` if it is of ``kind`` (a whole-number float such as 4096.0 as an int)."""
        test, words = KINDS[kind]
        if kind in ("count", "size", "layers") and isinstance(value, float) and value.is_integer():
            value = int(value)
        if not test(value):
            shown = _shown(value)
            raise GpuplanError(
                f"{self.origin}: {key}={shown} ({type(value).__name__}) is invalid: it must be "
                f"{words}"
            )
        return value


def _shown(value: Any) -> str:
    """A value as an error message prints it: short, and safe for a 5,000-digit integer."""
    if isinstance(value, int) and value.bit_length() > 200:
        return f"an integer of about {int(value.bit_length() * 0.30103) + 1:,} digits"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _whole(low: int, high: int) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and low <= v <= high


# What a field may hold. MAX_FIELD bounds every size: no published model comes within 1,000x of
# it (the largest vocabularies hold about 256k tokens, Gemma's, arXiv:2403.08295; the longest
# context is Llama 4 Scout's 10M tokens, https://ai.meta.com/blog/llama-4-multimodal-intelligence/),
# and a layer count of 10^30 would be priced, layer by layer, for ever.
# Layers are priced and played out one by one: MAX_CONFIG_LAYERS (a config.json's bound, not
# ``gpuplan.limits.MAX_LAYERS``, the API's) is 80x the deepest published decoder
# (Llama 3.1 405B, 126 layers, Dubey et al. 2024, arXiv:2407.21783, Table 3).
MAX_FIELD = 10**10
MAX_CONFIG_LAYERS = 10_000
KINDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "count": (_whole(1, MAX_FIELD), f"a whole number from 1 to {MAX_FIELD:,} (a JSON integer)"),
    "size": (_whole(0, MAX_FIELD), f"a whole number from 0 to {MAX_FIELD:,} (a JSON integer)"),
    "layers": (_whole(1, MAX_CONFIG_LAYERS),
               f"a whole number from 1 to {MAX_CONFIG_LAYERS:,} (a JSON integer)"),
    "bool": (lambda v: isinstance(v, bool), "true or false (a JSON boolean)"),
    "str": (lambda v: isinstance(v, str), "a string"),
    "list": (lambda v: isinstance(v, list), "a list (a JSON array)"),
}


def _llama_like(f: _Fields, *, max_positions_default: int) -> dict[str, Any]:
    """Fields shared by Llama, Mistral, Mixtral, Qwen2 and DeepSeek configs."""
    heads = f.need("num_attention_heads")
    return {
        "n_layers": f.need("num_hidden_layers", "layers"),
        "d_model": f.need("hidden_size"),
        "n_heads": heads,
        "n_kv_heads": f.get("num_key_value_heads", heads),
        "d_ff": f.need("intermediate_size"),
        "vocab_size": f.need("vocab_size"),
        "d_head": f.get("head_dim", None),
        "tied_embeddings": f.get("tie_word_embeddings", False, "bool"),
        "max_seq_len": f.get("max_position_embeddings", max_positions_default),
    }


def _llama(f: _Fields) -> dict[str, Any]:
    attention_bias = f.get("attention_bias", False, "bool")
    mlp_bias = f.get("mlp_bias", False, "bool")
    if attention_bias != mlp_bias:
        raise GpuplanError(
            f"{f.origin}: attention_bias={attention_bias} with mlp_bias={mlp_bias} is not "
            f"supported: only both or neither"
        )
    return {**_llama_like(f, max_positions_default=2048), "bias": attention_bias}


def _mistral(f: _Fields) -> dict[str, Any]:
    return {**_llama_like(f, max_positions_default=4096 * 32),
            "sliding_window": f.get("sliding_window", 0, "size")}  # fmt: skip


def _local_per_global(f: _Fields, pattern_default: int) -> int:
    """Windowed blocks before each full one: from ``layer_types`` when given, else from
    ``sliding_window_pattern`` (``pattern_default`` when absent)."""
    types = f.raw.get("layer_types")
    if types is None:
        return f.get("sliding_window_pattern", pattern_default) - 1
    if not isinstance(types, list) or not types or any(
        t not in ("sliding_attention", "full_attention") for t in types
    ):
        raise GpuplanError(f"{f.origin}: layer_types={_shown(types)} is invalid: give a list of "
                           "'sliding_attention' and 'full_attention'")  # fmt: skip
    period = types.index("full_attention") + 1 if "full_attention" in types else 0
    expected = [("full_attention" if (i + 1) % period == 0 else "sliding_attention")
                for i in range(len(types))] if period else None  # fmt: skip
    if types != expected:
        raise GpuplanError(f"{f.origin}: layer_types is not one repeating pattern ending in a "
                           "full_attention block: not supported")  # fmt: skip
    return period - 1


def _gemma(f: _Fields, *, pattern_default: int) -> dict[str, Any]:
    return {**_llama_like(f, max_positions_default=8192),
            "tied_embeddings": f.get("tie_word_embeddings", True, "bool"),
            "sliding_window": f.need("sliding_window", "size"),
            "local_per_global": _local_per_global(f, pattern_default)}  # fmt: skip


def _qwen2(f: _Fields) -> dict[str, Any]:
    return {**_llama_like(f, max_positions_default=32768), "qkv_bias": True}


def _mixtral(f: _Fields) -> dict[str, Any]:
    fields = _llama_like(f, max_positions_default=4096 * 32)
    return {
        **fields,
        "n_experts": f.need("num_local_experts"),
        "top_k": f.need("num_experts_per_tok"),
        "d_ff_expert": fields["d_ff"],
    }


def _deepseek(f: _Fields, *, v3: bool) -> dict[str, Any]:
    fields = _llama_like(f, max_positions_default=4096 if v3 else 2048)
    fields["d_head"] = None  # HF keeps head_dim = qk_rope_head_dim for RoPE; not a head size
    mla = {
        "q_lora_rank": f.get("q_lora_rank", 0, "size"),
        "kv_lora_rank": f.need("kv_lora_rank"),
        "qk_nope_head_dim": f.need("qk_nope_head_dim"),
        "qk_rope_head_dim": f.need("qk_rope_head_dim"),
        "v_head_dim": f.need("v_head_dim"),
    }
    if f.get("attention_bias", False, "bool"):
        raise GpuplanError(
            f"{f.origin}: attention_bias=True is not supported for {f.need('model_type', 'str')}: "
            f"its feed-forward layers have no biases, and ModelConfig.bias covers every layer"
        )
    return {**fields, **mla, **_deepseek_moe(f, v3=v3)}


def _deepseek_moe(f: _Fields, *, v3: bool) -> dict[str, Any]:
    n_experts = f.get("n_routed_experts", 0, "size")
    if not n_experts:
        return {}
    return {
        "n_experts": n_experts,
        "top_k": f.need("num_experts_per_tok"),
        "n_shared_experts": f.get("n_shared_experts", 0, "size"),
        "d_ff_expert": f.need("moe_intermediate_size"),
        "n_dense_layers": f.get("first_k_dense_replace", 0, "size"),
        "moe_layer_freq": f.get("moe_layer_freq", 1),
        "router_score_bias": v3 or f.get("topk_method", "", "str") == "noaux_tc",
    }


def _gpt2(f: _Fields) -> dict[str, Any]:
    d, heads = f.need("n_embd"), f.need("n_head")
    return {
        "n_layers": f.need("n_layer", "layers"),
        "d_model": d,
        "n_heads": heads,
        "n_kv_heads": heads,
        "d_ff": f.get("n_inner", 4 * d),
        "vocab_size": f.need("vocab_size"),
        "norm": "layernorm",
        "activation": "gelu",
        "bias": True,
        "tied_embeddings": f.get("tie_word_embeddings", True, "bool"),
        "position": "learned",
        "max_seq_len": f.get("n_positions", 1024),
    }


_READERS: dict[str, Callable[[_Fields], dict[str, Any]]] = {
    "llama": _llama,
    "mistral": _mistral,
    "mixtral": _mixtral,
    "qwen2": _qwen2,
    "deepseek_v2": lambda f: _deepseek(f, v3=False),
    "deepseek_v3": lambda f: _deepseek(f, v3=True),
    "gpt2": _gpt2,
    "gemma2": lambda f: _gemma(f, pattern_default=2),
    "gemma3_text": lambda f: _gemma(f, pattern_default=6),
}


def _part(f: _Fields, key: str) -> _Fields:
    """A nested config (``text_config``, ``vision_config``), its reads checked like the top's."""
    raw = f.raw.get(key)
    if raw is None:
        return _Fields({}, f"{f.origin} {key}")
    if not isinstance(raw, Mapping):
        raise GpuplanError(f"{f.origin}: {key} must be a JSON object, not {type(raw).__name__}")
    return _Fields(raw, f"{f.origin} {key}")


def _qwen2_vl(f: _Fields) -> dict[str, Any]:
    text = _part(f, "text_config") if "text_config" in f.raw else f
    v = _part(f, "vision_config")
    width, heads = v.get("embed_dim", 1280), v.get("num_heads", 16)
    channels = v.get("in_chans", v.get("in_channels", 3))
    patch = v.get("patch_size", 14)
    encoder = ModelConfig(
        name="vision", n_layers=v.get("depth", 32, "layers"), d_model=width, n_heads=heads,
        n_kv_heads=heads, d_ff=width * v.get("mlp_ratio", 4), vocab_size=0, norm="layernorm",
        # Qwen2-VL's resolution is dynamic: 448 x 448 (32 patches a side) is only the default
        # image when none is given, as the preset's; 32768 the language model's context
        activation="gelu", bias=True, position="rope", max_seq_len=32768, causal=False,
        patch_size=patch, image_size=patch * 32, n_channels=channels,
    )
    merge = v.get("spatial_merge_size", 2)
    lm = _qwen2(text)
    if v.get("hidden_size", lm["d_model"]) != lm["d_model"]:
        raise GpuplanError(f"{v.origin}: hidden_size={v.raw['hidden_size']} (the merger's output) "
                           f"must equal the language model's hidden_size={lm['d_model']}")
    tower = VisionTower(encoder=encoder, style="inline", merge=merge,
                        temporal_patch=v.get("temporal_patch_size", 2),
                        projector_hidden=width * merge**2)
    return {**lm, "vision_tower": tower}


def _mllama(f: _Fields) -> dict[str, Any]:
    text, v = _part(f, "text_config"), _part(f, "vision_config")
    fields = _llama_like(text, max_positions_default=131072)
    cross = text.get("cross_attention_layers", [3, 8, 13, 18, 23, 28, 33, 38], "list")
    if not all(isinstance(i, int) and 0 <= i < fields["n_layers"] for i in cross) or not cross:
        raise GpuplanError(f"{text.origin}: cross_attention_layers={cross!r} is invalid: give "
                           f"block indices from 0 to {fields['n_layers'] - 1}")
    width = v.get("hidden_size", 1280)
    heads = v.get("attention_heads", v.get("num_attention_heads", 16))
    patch, size = v.get("patch_size", 14), v.get("image_size", 560)
    encoder = ModelConfig(
        name="vision", n_layers=v.get("num_hidden_layers", 32, "layers"), d_model=width,
        n_heads=heads, n_kv_heads=heads, d_ff=v.get("intermediate_size", 5120), vocab_size=0,
        norm="layernorm", activation="gelu", bias=False, position="learned",
        max_seq_len=(size // patch) ** 2 + 1, causal=False, patch_size=patch, image_size=size,
        n_channels=v.get("num_channels", 3),
    )
    ratios = v.get("supported_aspect_ratios", [[1, 1]] * 8, "list")
    tower = VisionTower(
        encoder=encoder, style="cross-attention", class_token=True,
        max_tiles=v.get("max_num_tiles", 4), global_layers=v.get("num_global_layers", 8, "size"),
        intermediate_layers=len(v.get("intermediate_layers_indices", [3, 7, 15, 23, 30], "list")),
        aspect_ratios=len(ratios) + 1, cross_attention_layers=tuple(cross),
        extra_embedding_rows=8,
    )
    fields["n_layers"] -= len(cross)  # the self-attention blocks; the rest are the tower's
    return {**fields, "vision_tower": tower}


_READERS["qwen2_vl"] = _qwen2_vl
_READERS["mllama"] = _mllama
SUPPORTED_MODEL_TYPES = tuple(_READERS)


def from_hf_config(
    path_or_dict: str | Path | Mapping[str, Any], name: str | None = None
) -> ModelConfig:
    """A ``ModelConfig`` from a ``config.json`` file, its directory, or the parsed dict."""
    if isinstance(path_or_dict, Mapping):
        raw, origin = path_or_dict, "config dict"
        if not all(isinstance(k, str) for k in raw):
            raise GpuplanError("config dict: its keys must be strings (the JSON object's keys)")
        default_name = str(raw.get("_name_or_path") or raw.get("model_type", "model"))
    elif isinstance(path_or_dict, str | Path):
        file = _config_file(Path(path_or_dict))
        raw, origin = _load_json(file), str(file)
        default_name = file.parent.name if file.name == "config.json" else file.stem
    else:
        raise GpuplanError(f"config={type(path_or_dict).__name__} is invalid: give a config.json "
                           "path, its folder, or the parsed dict")  # fmt: skip
    fields = _Fields(raw, origin)
    model_type = fields.need("model_type", "str")
    reader = _READERS.get(model_type)
    if reader is None:
        raise GpuplanError(
            f"{origin}: model_type={model_type!r} is not supported: choose one of "
            f"{', '.join(SUPPORTED_MODEL_TYPES)}"
        )
    return ModelConfig(
        name=name or default_name,
        source=f"Hugging Face config.json ({origin}), model_type {model_type}",
        **reader(fields),
    )


def _config_file(path: Path) -> Path:
    """``path`` itself, or ``path/config.json`` for a directory."""
    file = path / "config.json" if path.is_dir() else path
    if not file.is_file():
        raise GpuplanError(f"model config {str(file)!r} is not a file")
    return file


def _load_json(file: Path) -> Mapping[str, Any]:
    try:
        raw = json.loads(file.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as err:
        raise GpuplanError(f"{file}: not UTF-8 text (byte {err.start}): is it a config.json?") from None
    except json.JSONDecodeError as err:
        raise GpuplanError(f"{file}: cannot read it as JSON: {err.msg} (line {err.lineno}, column "
                           f"{err.colno})") from None  # fmt: skip
    except (OSError, ValueError, RecursionError) as err:  # ValueError: a 5,000-digit number
        first = " ".join(str(err).split(";")[0].split())
        raise GpuplanError(f"{file}: cannot read it as JSON: {first}") from None
    if not isinstance(raw, dict):
        raise GpuplanError(f"{file}: a config.json holds one JSON object, not {type(raw).__name__}")
    return raw
