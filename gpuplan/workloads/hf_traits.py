"""What a Hugging Face ``config.json`` does not say: the facts of each family that live in its
``modeling_*.py`` only, and the defaults of its ``configuration_*.py`` for absent fields.

The structural reader (``hf_structural``) takes everything else from the config's fields; this
table is only for facts no field states. Each entry cites the modeling code it comes from
(``src/transformers/models/<family>/modeling_<family>.py`` of huggingface/transformers, read
2026-12). A ``model_type`` missing here is read with ``GENERIC`` (no hidden facts) and a note.

Keys of an entry:

- ``max_positions``, ``tied``: the configuration class's defaults of ``max_position_embeddings``
  and ``tie_word_embeddings``;
- ``fields``: ``ModelConfig`` values that hold for every model of the family;
- ``embedding_scale_sqrt_d``: token embeddings multiplied by sqrt(hidden_size) (Gemma:
  ``Gemma*ScaledWordEmbedding``, ``embed_scale = hidden_size**0.5``);
- ``window_pattern``: the default ``sliding_window_pattern`` (windowed blocks + 1 per period);
- ``mla``: the family's attention is MLA (kv_lora_rank is required);
- ``attention_bias``: which projections ``attention_bias`` puts a bias on ("qkvo" or "qkv");
- ``shared_expert``: a shared expert of the routed experts' width in every MoE layer (Llama 4:
  ``Llama4TextMoe.shared_expert``);
- ``dense_width``: the field holding a dense MLP's width when it is not intermediate_size;
- ``llama4_layers``, ``qk_norm_weightless``: Llama 4's chunked-RoPE / global-NoPE layers and
  its q/k L2 norm without weights (``use_qk_norm`` adds no parameter);
- ``defaults``: configuration-class defaults of fields that real configs leave out;
- ``window_every_layer``: ``sliding_window`` (when given, and not switched off by
  ``use_sliding_window: false``) windows every layer (Mistral, Mixtral, Phi-3, Qwen2).
"""

from __future__ import annotations

from typing import Any

GENERIC: dict[str, Any] = {"max_positions": None, "tied": False, "fields": {}}

_QK_HEAD = {"qk_norm": "head"}  # q_norm, k_norm: RMSNorm(head_dim)
# Gemma3TextConfig's defaults of the fields that the text_config of Gemma 3 checkpoints leaves
# out (the sizes every one states, hidden_size, intermediate_size, num_hidden_layers, stay
# required)
_GEMMA3_TEXT_DEFAULTS = {"vocab_size": 262_208, "num_attention_heads": 8,
                         "num_key_value_heads": 4, "head_dim": 256, "sliding_window": 4096}

TRAITS: dict[str, dict[str, Any]] = {
    "llama": {"max_positions": 2048, "tied": False, "fields": {}},
    "mistral": {"max_positions": 4096 * 32, "tied": False, "fields": {},
                "window_every_layer": True},
    "mixtral": {"max_positions": 4096 * 32, "tied": False, "fields": {},
                "window_every_layer": True},
    # Qwen2Attention: q, k, v with bias=True, o without (modeling_qwen2.py)
    "qwen2": {"max_positions": 32768, "tied": False, "fields": {"qkv_bias": True},
              "window_every_layer": True},
    # Qwen2MoeSparseMoeBlock: shared_expert_gate = Linear(hidden, 1, bias=False)
    "qwen2_moe": {"max_positions": 32768, "tied": False,
                  "fields": {"qkv_bias": True, "shared_expert_gate": True},
                  "window_every_layer": True},
    "qwen3": {"max_positions": 32768, "tied": False, "fields": _QK_HEAD,
              "window_every_layer": True},
    "qwen3_moe": {"max_positions": 32768, "tied": False, "fields": _QK_HEAD,
                  "window_every_layer": True},
    # Qwen3NextAttention: q_proj yields the query and a sigmoid output gate (attn_output_gate)
    "qwen3_next": {"max_positions": 32768, "tied": False,
                   "fields": {**_QK_HEAD, "attn_output_gate": True, "shared_expert_gate": True}},
    # Gemma: GemmaMLP is gated GELU (three matrices, priced as SwiGLU); embeddings scaled
    "gemma": {"max_positions": 8192, "tied": True, "fields": {},
              "embedding_scale_sqrt_d": True},
    # Gemma 2/3 decoder layers: input, post_attention, pre_feedforward, post_feedforward norms
    "gemma2": {"max_positions": 8192, "tied": True, "fields": {"norms_per_block": 4},
               "embedding_scale_sqrt_d": True, "window_pattern": 2},
    "gemma3_text": {"max_positions": 131072, "tied": True,
                    "fields": {"norms_per_block": 4, **_QK_HEAD},
                    "embedding_scale_sqrt_d": True, "window_pattern": 6,
                    "defaults": _GEMMA3_TEXT_DEFAULTS},
    "phi3": {"max_positions": 4096, "tied": False, "fields": {}, "window_every_layer": True},
    # Llama4TextMoe: a shared expert beside the routed ones; Llama4TextL2Norm on q, k has no
    # weight (use_qk_norm adds no parameter)
    "llama4_text": {"max_positions": 4096 * 32, "tied": False, "fields": {},
                    "shared_expert": True, "llama4_layers": True, "qk_norm_weightless": True,
                    "dense_width": "intermediate_size_mlp"},
    # GptOssAttention: sinks = Parameter(num_attention_heads); GptOssTopKRouter: bias;
    # GptOssExperts: gate_up_proj_bias, down_proj_bias
    "gpt_oss": {"max_positions": 131072, "tied": False,
                "fields": {"attention_sinks": True, "router_bias": True, "expert_bias": True}},
    "deepseek_v2": {"max_positions": 2048, "tied": False, "fields": {}, "mla": True},
    # DeepseekV3TopkRouter: e_score_correction_bias (noaux_tc)
    "deepseek_v3": {"max_positions": 4096, "tied": False, "mla": True,
                    "fields": {"router_score_bias": True}},
    "deepseek_v32": {"max_positions": 4096, "tied": False, "mla": True,
                     "fields": {"router_score_bias": True}},
    # Glm4MoeAttention: attention_bias on q, k, v only; Glm4MoeTopkRouter: score bias
    "glm4_moe": {"max_positions": 131072, "tied": False,
                 "fields": {"router_score_bias": True}, "attention_bias": "qkv"},
    # Olmo2Attention: q_norm over num_heads * head_dim, k_norm over num_kv_heads * head_dim;
    # post_attention_layernorm and post_feedforward_layernorm (two norms, after each half)
    "olmo2": {"max_positions": 2048, "tied": False, "fields": {"qk_norm": "all"}},
    # GraniteMoeHybridDecoderLayer: shared_mlp of shared_intermediate_size in every layer
    "granitemoehybrid": {"max_positions": 2048, "tied": False, "fields": {},
                         "dense_width": "shared_intermediate_size"},
    # NemotronHBlock: one norm and one mixer (Mamba-2, attention, MLP or MoE) per layer;
    # NemotronHMLP: up, relu2, down
    "nemotron_h": {"max_positions": 4096, "tied": False,
                   "fields": {"norms_per_block": 1, "activation": "relu2", "position": "none"}},
    # Mamba2Block: one norm and a mixer; no positions, so no position limit: the context is
    # bounded at 262,144 tokens, the length Mistral tested Mamba-Codestral to in context
    # (https://mistral.ai/news/codestral-mamba: "tested on in-context retrieval capabilities up
    # to 256k tokens")
    "mamba2": {"max_positions": 262_144, "tied": True,
               "fields": {"norms_per_block": 1, "position": "none"}},
}
TRAITS["kimi_k2"] = TRAITS["deepseek_v3"]  # Kimi-K2: DeepSeek-V3's architecture, its own name
TRAITS["gemma3"] = TRAITS["gemma3_text"]  # a text_config of a multimodal wrapper
TRAITS["llama4"] = TRAITS["llama4_text"]
TRAITS["qwen2_vl"] = TRAITS["qwen2"]
TRAITS["mllama"] = {**TRAITS["llama"], "max_positions": 131072}
TRAITS["mllama_text_model"] = TRAITS["mllama"]


def traits(model_type: str) -> tuple[dict[str, Any], bool]:
    """The family's entry, and whether the family is known."""
    entry = TRAITS.get(model_type)
    return (entry, True) if entry is not None else (GENERIC, False)
