"""The model catalogue: published configurations under the keys users type.

Every entry names its source, a paper table or a Hugging Face ``config.json``. Two families are
generated from a table:

- ``megatron-gpt-*``: Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on
  GPU Clusters Using Megatron-LM", Table 1 (attention heads, hidden size, layers; vocabulary
  51,200 and sequence 2,048 for all, section 5.1), built as GPT-3 is (d_ff = 4 d_model, learned
  positions, LayerNorm, GELU, biases, tied embeddings);
- ``gpt3-175b``: Brown et al. 2020, "Language Models are Few-Shot Learners", Table 2.1
  (d_ff = 4 d_model and the GPT-2 architecture per section 2.1; GPT-2 BPE vocabulary 50,257).
  GPT-3 alternates dense and locally banded sparse attention; that changes no parameter.

``get_model`` also takes a path to a ``config.json`` (or a directory holding one).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from gpuplan.errors import check_key, unknown_key
from gpuplan.workloads.hf_config import from_hf_config
from gpuplan.workloads.model import ModelConfig, VisionTower
from gpuplan.workloads.params import count_params

if TYPE_CHECKING:
    import pandas as pd

_MEGATRON_SOURCE = (
    "Narayanan et al. 2021, Efficient Large-Scale Language Model Training on GPU Clusters "
    "Using Megatron-LM, Table 1 (vocab 51200, seq 2048; GPT-3 architecture)"
)
# key suffix: (attention heads, hidden size, layers), Narayanan et al. 2021 Table 1
_MEGATRON_TABLE_1: dict[str, tuple[int, int, int]] = {
    "1.7b": (24, 2304, 24),
    "3.6b": (32, 3072, 30),
    "7.5b": (32, 4096, 36),
    "18.4b": (48, 6144, 40),
    "39.1b": (64, 8192, 48),
    "76.1b": (80, 10240, 60),
    "145.6b": (96, 12288, 80),
    "310.1b": (128, 16384, 96),
    "529.6b": (128, 20480, 105),
    "1t": (160, 25600, 128),
}


def _gpt(name: str, *, layers: int, d: int, heads: int, vocab: int, source: str) -> ModelConfig:
    """A GPT-2/3-style decoder: learned positions, LayerNorm, GELU, biases, tied embeddings."""
    return ModelConfig(
        name=name,
        n_layers=layers,
        d_model=d,
        n_heads=heads,
        n_kv_heads=heads,
        d_ff=4 * d,
        vocab_size=vocab,
        norm="layernorm",
        activation="gelu",
        bias=True,
        tied_embeddings=True,
        position="learned",
        max_seq_len=2048,
        source=source,
    )


def _megatron() -> dict[str, ModelConfig]:
    return {
        f"megatron-gpt-{size}": _gpt(
            f"megatron-gpt-{size}",
            layers=layers,
            d=d,
            heads=heads,
            vocab=51200,
            source=_MEGATRON_SOURCE,
        )
        for size, (heads, d, layers) in _MEGATRON_TABLE_1.items()
    }


def _llama(name: str, layers: int, d: int, heads: int, kv: int, ff: int, **kw) -> ModelConfig:
    """A Llama-style decoder: RoPE, RMSNorm, SwiGLU, no biases, untied head."""
    return ModelConfig(
        name=name, n_layers=layers, d_model=d, n_heads=heads, n_kv_heads=kv, d_ff=ff, **kw
    )


def _hf(repo: str) -> str:
    return f"Hugging Face {repo} config.json"


# _llama(key, n_layers, d_model, n_heads, n_kv_heads, d_ff, ...), each from its config.json
_LLAMA = {
    "llama2-7b": _llama(
        "llama2-7b", 32, 4096, 32, 32, 11008, vocab_size=32000, max_seq_len=4096,
        source=_hf("meta-llama/Llama-2-7b-hf"),
    ),
    "llama2-13b": _llama(
        "llama2-13b", 40, 5120, 40, 40, 13824, vocab_size=32000, max_seq_len=4096,
        source=_hf("meta-llama/Llama-2-13b-hf"),
    ),
    "llama2-70b": _llama(
        "llama2-70b", 80, 8192, 64, 8, 28672, vocab_size=32000, max_seq_len=4096,
        source=_hf("meta-llama/Llama-2-70b-hf"),
    ),
    "llama3-8b": _llama(
        "llama3-8b", 32, 4096, 32, 8, 14336, vocab_size=128256, max_seq_len=8192,
        source=_hf("meta-llama/Meta-Llama-3-8B"),
    ),
    "llama3.2-3b": _llama(
        "llama3.2-3b", 28, 3072, 24, 8, 8192, vocab_size=128256, max_seq_len=131072,
        tied_embeddings=True, source=_hf("meta-llama/Llama-3.2-3B") + " (tied embeddings)",
    ),
    "llama3-70b": _llama(
        "llama3-70b", 80, 8192, 64, 8, 28672, vocab_size=128256, max_seq_len=8192,
        source=_hf("meta-llama/Meta-Llama-3-70B"),
    ),
    "llama3.1-405b": _llama(
        "llama3.1-405b", 126, 16384, 128, 8, 53248, vocab_size=128256, max_seq_len=131072,
        source=_hf("meta-llama/Llama-3.1-405B") + " (8 KV heads, as the Llama 3 paper Table 3)",
    ),
    "qwen2.5-72b": _llama(
        "qwen2.5-72b", 80, 8192, 64, 8, 29568, vocab_size=152064, max_seq_len=131072,
        qkv_bias=True, source=_hf("Qwen/Qwen2.5-72B") + " (Qwen2 attention: q, k, v biases)",
    ),
}  # fmt: skip

_MOE = {
    "mixtral-8x7b": _llama(
        "mixtral-8x7b", 32, 4096, 32, 8, 14336, vocab_size=32000, max_seq_len=32768,
        n_experts=8, top_k=2, d_ff_expert=14336,
        source=_hf("mistralai/Mixtral-8x7B-v0.1"),
    ),
    "mixtral-8x22b": _llama(
        "mixtral-8x22b", 56, 6144, 48, 8, 16384, vocab_size=32768, max_seq_len=65536,
        n_experts=8, top_k=2, d_ff_expert=16384,
        source=_hf("mistralai/Mixtral-8x22B-v0.1"),
    ),
    "deepseek-v3": _llama(
        "deepseek-v3", 61, 7168, 128, 128, 18432, vocab_size=129280, max_seq_len=163840,
        n_experts=256, top_k=8, n_shared_experts=1, d_ff_expert=2048, n_dense_layers=3,
        router_score_bias=True,
        q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
        v_head_dim=128, mtp_layers=1, checkpoint_weight_dtype="fp8",
        source=_hf("deepseek-ai/DeepSeek-V3") + " (its MTP module counted apart, not in the total;"
        " its quantization_config: quant_method fp8, fmt e4m3, weight_block_size [128, 128])",
    ),
}  # fmt: skip

_OTHERS = {
    "gpt3-175b": _gpt(
        "gpt3-175b",
        layers=96,
        d=12288,
        heads=96,
        vocab=50257,
        source="Brown et al. 2020, Language Models are Few-Shot Learners, Table 2.1 "
        "(d_head 128, n_ctx 2048; d_ff = 4 d_model; GPT-2 BPE vocab 50257)",
    ),
    "vit-l-14": ModelConfig(
        name="vit-l-14",
        n_layers=24,
        d_model=1024,
        n_heads=16,
        n_kv_heads=16,
        d_ff=4096,
        vocab_size=0,
        norm="layernorm",
        activation="gelu",  # quick_gelu, two matrices
        bias=True,
        position="learned",
        max_seq_len=257,
        causal=False,
        patch_size=14,
        image_size=224,
        source=_hf("openai/clip-vit-large-patch14") + " vision_config (CLIPVisionModel)",
    ),
}


def _vlm() -> dict[str, ModelConfig]:
    """Vision-language models (``workloads.vision``), each from its config.json."""
    qwen_vit = ModelConfig(
        name="qwen2-vl-7b-vision", n_layers=32, d_model=1280, n_heads=16, n_kv_heads=16,
        d_ff=5120, vocab_size=0, norm="layernorm", activation="gelu", bias=True,
        position="rope", max_seq_len=32768, causal=False, patch_size=14, image_size=448,
        source=_hf("Qwen/Qwen2-VL-7B-Instruct") + " vision_config (depth 32, embed_dim 1280, "
        "mlp_ratio 4, num_heads 16, patch_size 14; image_size: a default, resolution is dynamic)",
    )
    mllama_vit = ModelConfig(
        name="llama3.2-11b-vision-encoder", n_layers=32, d_model=1280, n_heads=16, n_kv_heads=16,
        d_ff=5120, vocab_size=0, norm="layernorm", activation="gelu", bias=False,
        position="learned", max_seq_len=1601, causal=False, patch_size=14, image_size=560,
        source=_hf("meta-llama/Llama-3.2-11B-Vision") + " vision_config (MllamaVisionModel)",
    )
    return {
        "qwen2-vl-7b": _llama(
            "qwen2-vl-7b", 28, 3584, 28, 4, 18944, vocab_size=152064, max_seq_len=32768,
            qkv_bias=True,
            vision_tower=VisionTower(encoder=qwen_vit, style="inline", merge=2,
                                     temporal_patch=2, projector_hidden=5120),
            source=_hf("Qwen/Qwen2-VL-7B-Instruct") + " (text and vision_config: spatial_merge_size"
            " 2, temporal_patch_size 2, merger 5120 -> 3584)",
        ),
        "llama3.2-11b-vision": _llama(
            "llama3.2-11b-vision", 32, 4096, 32, 8, 14336, vocab_size=128256,
            max_seq_len=131072,
            vision_tower=VisionTower(
                encoder=mllama_vit, style="cross-attention", class_token=True, max_tiles=4,
                global_layers=8, intermediate_layers=5, aspect_ratios=9,
                cross_attention_layers=(3, 8, 13, 18, 23, 28, 33, 38), extra_embedding_rows=8,
            ),
            source=_hf("meta-llama/Llama-3.2-11B-Vision") + " (text_config: 40 blocks, of them "
            "cross_attention_layers [3, 8, ..., 38]: n_layers here counts the 32 self-attention "
            "blocks; vision_config: num_global_layers 8, max_num_tiles 4, 8 aspect ratios, "
            "vision_output_dim 7680; embed_tokens has vocab_size + 8 rows)",
        ),
    }  # fmt: skip


# presets read from a committed config.json by the reader a user's own file goes through
# (data/hf_presets/README.md says where each file's fields come from)
_CONFIG_PRESETS = {
    "qwen3-235b-a22b": "Qwen/Qwen3-235B-A22B",
    "llama4-maverick": "meta-llama/Llama-4-Maverick-17B-128E",
    "gpt-oss-120b": "openai/gpt-oss-120b",
    "kimi-k2": "moonshotai/Kimi-K2-Instruct",
}


def _from_configs() -> dict[str, ModelConfig]:
    import dataclasses

    folder = Path(__file__).parent / "data" / "hf_presets"
    return {key: dataclasses.replace(from_hf_config(folder / f"{key}.json", key),
                                     source=_hf(repo) + f" (data/hf_presets/{key}.json)")
            for key, repo in _CONFIG_PRESETS.items()}  # fmt: skip


PRESETS: dict[str, ModelConfig] = {**_OTHERS, **_megatron(), **_LLAMA, **_MOE,
                                   **_from_configs(), **_vlm()}  # fmt: skip


def get_model(key_or_path: str) -> ModelConfig:
    """A catalogue model by key (any case), or a ``config.json`` path or its directory."""
    check_key("model", key_or_path)
    path = Path(key_or_path)
    if key_or_path.endswith(".json") or path.is_dir():
        return from_hf_config(path)
    try:
        return PRESETS[key_or_path.lower()]
    except KeyError:
        raise unknown_key("model", key_or_path, PRESETS) from None


def list_models() -> list[ModelConfig]:
    """Every catalogue model, in catalogue order."""
    return list(PRESETS.values())


def models_frame() -> pd.DataFrame:
    """The catalogue as a table: shape, attention kind, experts and exact parameter counts."""
    import pandas as pd  # here: every command reads the presets, few print this table

    rows = []
    for key, cfg in PRESETS.items():
        params = count_params(cfg)
        rows.append(
            {
                "key": key,
                "n_layers": cfg.n_layers,
                "d_model": cfg.d_model,
                "n_heads": cfg.n_heads,
                "n_kv_heads": cfg.n_kv_heads,
                "head_dim": cfg.head_dim,
                "d_ff": cfg.d_ff,
                "vocab_size": cfg.vocab_size,
                "attention_kind": cfg.attention_kind,
                "n_experts": cfg.n_experts,
                "top_k": cfg.top_k,
                "max_seq_len": cfg.max_seq_len,
                "params_total": params.total,
                "params_active": params.active,
                "source": cfg.source,
            }
        )
    return pd.DataFrame(rows)
