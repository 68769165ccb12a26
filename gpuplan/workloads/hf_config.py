"""Read a Hugging Face ``config.json`` into a ``ModelConfig``, with the reader's notes.

Any decoder is read structurally (``hf_structural``: its fields give the per-layer mixer and
feed-forward kinds, ``hf_traits`` adds what no field states); families checked against their
published parameter counts (tests/test_hf_families.py): ``llama``, ``mistral``, ``mixtral``,
``qwen2``, ``qwen2_moe``, ``qwen3``, ``qwen3_moe``, ``qwen3_next``, ``gemma``, ``gemma2``,
``gemma3``, ``gemma3_text``, ``phi3`` (Phi-3, 3.5, 4), ``llama4``, ``gpt_oss``,
``deepseek_v2``, ``deepseek_v3``, ``kimi_k2`` (Kimi-K2: DeepSeek-V3's architecture),
``deepseek_v32``, ``glm4_moe``, ``olmo2``, ``granitemoehybrid``, ``nemotron_h``, ``mamba2``.
An unknown ``model_type`` with the standard fields is read the same way, with a note. Optional
fields that are absent take the default of the ``transformers`` configuration class; a required
field that is absent is a ``GpuplanError`` naming it and the file.

Wrappers: a config with ``text_config`` is read through its text decoder (``llama4`` and any
unknown wrapper: the vision tower is not read, and a note says so). Three vision-language models
are read with their towers:

- ``gemma3`` (Gemma 3, 4B and up): ``text_config`` (gemma3_text) and ``vision_config``'s
  hidden_size, num_hidden_layers, num_attention_heads, intermediate_size, patch_size,
  image_size, num_channels (SigLIP; defaults of ``Gemma3Config``), ``mm_tokens_per_image``:
  image tokens inline, each the average of merge x merge patches;
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

``gpt2`` keeps its own field names: n_embd, n_layer, n_head, n_inner (null: 4 n_embd),
n_positions, vocab_size (LayerNorm, GELU, biases everywhere, learned positions, tied
embeddings).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from gpuplan.errors import GpuplanError
from gpuplan.workloads.hf_fields import Fields, load, part
from gpuplan.workloads.hf_structural import checkpoint_format, read_decoder
from gpuplan.workloads.hf_traits import TRAITS
from gpuplan.workloads.model import ModelConfig, VisionTower


def _gpt2(f: Fields, notes: list[str]) -> dict[str, Any]:
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


def _qwen2_vl(f: Fields, notes: list[str]) -> dict[str, Any]:
    text = part(f, "text_config") if "text_config" in f.raw else f
    v = part(f, "vision_config")
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
    lm = read_decoder(text, "qwen2", notes)
    if v.get("hidden_size", lm["d_model"]) != lm["d_model"]:
        raise GpuplanError(f"{v.origin}: hidden_size={v.raw['hidden_size']} (the merger's output) "
                           f"must equal the language model's hidden_size={lm['d_model']}")
    tower = VisionTower(encoder=encoder, style="inline", merge=merge,
                        temporal_patch=v.get("temporal_patch_size", 2),
                        projector_hidden=width * merge**2)
    return {**lm, "vision_tower": tower}


def _mllama(f: Fields, notes: list[str]) -> dict[str, Any]:
    text, v = part(f, "text_config"), part(f, "vision_config")
    fields = read_decoder(text, "mllama", notes)
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


def _gemma3(f: Fields, notes: list[str]) -> dict[str, Any]:
    """Gemma 3's wrapper: the gemma3_text decoder and its SigLIP tower (``vision_config``,
    defaults of ``Gemma3Config``'s: SigLIP-so400m at 896 px), whose 4,096 patches are averaged
    into ``mm_tokens_per_image`` (256) tokens (``Gemma3MultiModalProjector``)."""
    lm = read_decoder(part(f, "text_config"), "gemma3_text", notes)
    v = part(f, "vision_config")
    width, heads = v.get("hidden_size", 1152), v.get("num_attention_heads", 16)
    patch, size = v.get("patch_size", 14), v.get("image_size", 896)
    patches = (size // patch) ** 2
    tokens = f.get("mm_tokens_per_image", 256)
    merge = math.isqrt(patches // tokens)
    if merge**2 * tokens != patches:
        raise GpuplanError(f"{f.origin}: mm_tokens_per_image={tokens} does not pool {patches} "
                           "patches by a square: not supported")
    encoder = ModelConfig(
        name="vision", n_layers=v.get("num_hidden_layers", 27, "layers"), d_model=width,
        n_heads=heads, n_kv_heads=heads, d_ff=v.get("intermediate_size", 4304), vocab_size=0,
        norm="layernorm", activation="gelu", bias=True, position="learned", max_seq_len=patches,
        causal=False, patch_size=patch, image_size=size, n_channels=v.get("num_channels", 3))
    tower = VisionTower(encoder=encoder, style="inline", merge=merge, siglip=True, pool=True)
    return {**lm, "vision_tower": tower}


_READERS: dict[str, Callable[[Fields, list[str]], dict[str, Any]]] = {
    "gemma3": _gemma3,
    "gpt2": _gpt2,
    "qwen2_vl": _qwen2_vl,
    "mllama": _mllama,
}
# the families whose hidden facts the reader knows (any other reads with a note)
SUPPORTED_MODEL_TYPES = tuple(sorted({*TRAITS, *_READERS}))


def _wrapped(f: Fields, model_type: str, notes: list[str]) -> dict[str, Any]:
    """A multimodal wrapper's text decoder (``text_config``); its vision tower is not read."""
    text = part(f, "text_config")
    inner = text.get("model_type", f"{model_type}_text", "str")
    if "vision_config" in f.raw:
        notes.append(f"{model_type}: the text decoder ({inner}) is read; the vision tower in "
                     "vision_config is not (neither counted nor priced)")
    return read_decoder(text, inner, notes)


def read_hf_config(
    path_or_dict: str | Path | Mapping[str, Any], name: str | None = None
) -> tuple[ModelConfig, list[str]]:
    """A ``ModelConfig`` from a ``config.json`` file, its directory or the parsed dict, and the
    reader's notes (what it assumed or left out)."""
    fields, default_name = load(path_or_dict)
    model_type = fields.need("model_type", "str")
    notes: list[str] = []
    reader = _READERS.get(model_type)
    if reader is not None:
        kwargs = reader(fields, notes)
    elif "text_config" in fields.raw:
        kwargs = _wrapped(fields, model_type, notes)
    else:
        kwargs = read_decoder(fields, model_type, notes)
    kwargs |= checkpoint_format(fields)  # quantization_config sits at the top, wrapped or not
    cfg = ModelConfig(
        name=name or default_name,
        source=f"Hugging Face config.json ({fields.origin}), model_type {model_type}",
        **kwargs,
    )
    return cfg, notes


def from_hf_config(
    path_or_dict: str | Path | Mapping[str, Any], name: str | None = None
) -> ModelConfig:
    """A ``ModelConfig`` from a ``config.json`` file, its directory, or the parsed dict."""
    return read_hf_config(path_or_dict, name)[0]
