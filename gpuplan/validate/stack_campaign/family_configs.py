"""Decoder families no gpuplan fit has read (the ``families`` part of the campaign): each
model's Hugging Face ``config.json`` fields, built on the GPU by ``transformers`` with random
weights, its layer count cut where a whole model does not fit one 80 GB card.

Each entry: ``hf_config`` (the published fields that shape the model; token ids, dtype and
version fields left out; ``rope_scaling`` left out where noted: it changes no cost), ``source``
(where the values come from; "typed from" where they were copied by hand from a model card),
``layers`` (``infer``: bf16 prefill and decode; ``train``: fp32 weights, gradients and AdamW
moments, 16 bytes a parameter; each count keeps the model's layer pattern whole: Gemma 2 and
gpt-oss an even number, Gemma 3 a multiple of 6, Qwen3-Next a multiple of 4, GLM's first dense
block kept), ``fallback`` (the modules whose absence sends transformers to its pure-torch loops:
records of such a model say ``impl: torch-fallback`` and are not the engine's speed),
``decode`` (False: prefill only, where the model's cache is not a transformers ``Cache``).
Records carry the config they were built from (``params.hf_config``, ``num_hidden_layers`` the
count kept), so the pricing side reads it with ``gpuplan.workloads.hf_config``.
"""

from __future__ import annotations

_QWEN3_8B = {
    "model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "attention_bias": False,
    "head_dim": 128, "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 12288,
    "max_position_embeddings": 40960, "max_window_layers": 36, "num_attention_heads": 32,
    "num_hidden_layers": 36, "num_key_value_heads": 8, "rms_norm_eps": 1e-06,
    "rope_theta": 1000000, "sliding_window": None, "tie_word_embeddings": False,
    "use_sliding_window": False, "vocab_size": 151936,
}
_QWEN3_30B_A3B = {
    "model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"], "attention_bias": False,
    "decoder_sparse_step": 1, "head_dim": 128, "hidden_act": "silu", "hidden_size": 2048,
    "intermediate_size": 6144, "max_position_embeddings": 40960, "max_window_layers": 48,
    "mlp_only_layers": [], "moe_intermediate_size": 768, "norm_topk_prob": True,
    "num_attention_heads": 32, "num_experts": 128, "num_experts_per_tok": 8,
    "num_hidden_layers": 48, "num_key_value_heads": 4, "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001, "sliding_window": None,
    "tie_word_embeddings": False, "use_sliding_window": False, "vocab_size": 151936,
}
_GEMMA2_9B = {
    "model_type": "gemma2", "architectures": ["Gemma2ForCausalLM"], "attention_bias": False,
    "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0, "head_dim": 256,
    "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 3584, "intermediate_size": 14336,
    "max_position_embeddings": 8192, "num_attention_heads": 16, "num_hidden_layers": 42,
    "num_key_value_heads": 8, "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06,
    "rope_theta": 10000.0, "sliding_window": 4096, "vocab_size": 256000,
}
_GEMMA3_12B_TEXT = {
    "model_type": "gemma3_text", "architectures": ["Gemma3ForCausalLM"], "attention_bias": False,
    "attn_logit_softcapping": None, "final_logit_softcapping": None, "head_dim": 256,
    "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 3840, "intermediate_size": 15360,
    "max_position_embeddings": 131072, "num_attention_heads": 16, "num_hidden_layers": 48,
    "num_key_value_heads": 8, "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06,
    "rope_local_base_freq": 10000, "rope_theta": 1000000, "sliding_window": 1024,
    "sliding_window_pattern": 6, "vocab_size": 262208,
}
_PHI4_MINI = {
    "model_type": "phi3", "architectures": ["Phi3ForCausalLM"], "attention_bias": False,
    "hidden_act": "silu", "hidden_size": 3072, "intermediate_size": 8192,
    "max_position_embeddings": 131072, "num_attention_heads": 24, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "original_max_position_embeddings": 4096,
    "partial_rotary_factor": 0.75, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
    "sliding_window": 262144, "tie_word_embeddings": True, "vocab_size": 200064,
}
_GPT_OSS_20B = {
    "model_type": "gpt_oss", "architectures": ["GptOssForCausalLM"], "attention_bias": True,
    "head_dim": 64, "hidden_act": "silu", "hidden_size": 2880, "initial_context_length": 4096,
    "intermediate_size": 2880, "layer_types": ["sliding_attention", "full_attention"] * 12,
    "max_position_embeddings": 131072, "num_attention_heads": 64, "num_experts_per_tok": 4,
    "num_hidden_layers": 24, "num_key_value_heads": 8, "num_local_experts": 32,
    "rms_norm_eps": 1e-05, "rope_theta": 150000, "router_aux_loss_coef": 0.9,
    "sliding_window": 128, "swiglu_limit": 7.0, "tie_word_embeddings": False,
    "vocab_size": 201088,
}
_OLMO2_7B = {
    "model_type": "olmo2", "architectures": ["Olmo2ForCausalLM"], "attention_bias": False,
    "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 11008,
    "max_position_embeddings": 4096, "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 32, "rms_norm_eps": 1e-06, "rope_theta": 500000,
    "tie_word_embeddings": False, "vocab_size": 100352,
}
_GLM45_AIR = {
    "model_type": "glm4_moe", "architectures": ["Glm4MoeForCausalLM"], "attention_bias": True,
    "first_k_dense_replace": 1, "head_dim": 128, "hidden_act": "silu", "hidden_size": 4096,
    "intermediate_size": 10944, "max_position_embeddings": 131072, "moe_intermediate_size": 1408,
    "n_group": 1, "n_routed_experts": 128, "n_shared_experts": 1, "norm_topk_prob": True,
    "num_attention_heads": 96, "num_experts_per_tok": 8, "num_hidden_layers": 46,
    "num_key_value_heads": 8, "num_nextn_predict_layers": 1, "partial_rotary_factor": 0.5,
    "rms_norm_eps": 1e-05, "rope_theta": 1000000, "routed_scaling_factor": 1.0,
    "tie_word_embeddings": False, "topk_group": 1, "use_qk_norm": False, "vocab_size": 151552,
}
_QWEN3_NEXT_80B_A3B = {
    "model_type": "qwen3_next", "architectures": ["Qwen3NextForCausalLM"],
    "decoder_sparse_step": 1, "full_attention_interval": 4, "head_dim": 256,
    "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 5120,
    "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_num_key_heads": 16,
    "linear_num_value_heads": 32, "linear_value_head_dim": 128,
    "max_position_embeddings": 262144, "mlp_only_layers": [], "moe_intermediate_size": 512,
    "norm_topk_prob": True, "num_attention_heads": 16, "num_experts": 512,
    "num_experts_per_tok": 10, "num_hidden_layers": 48, "num_key_value_heads": 2,
    "partial_rotary_factor": 0.25, "rms_norm_eps": 1e-06, "rope_theta": 10000000,
    "shared_expert_intermediate_size": 512, "tie_word_embeddings": False,
    "vocab_size": 151936,
}
_MAMBA_CODESTRAL_7B = {
    "model_type": "mamba2", "architectures": ["Mamba2ForCausalLM"], "chunk_size": 256,
    "conv_kernel": 4, "expand": 2, "head_dim": 64, "hidden_size": 4096,
    "layer_norm_epsilon": 1e-05, "n_groups": 8, "num_heads": 128, "num_hidden_layers": 64,
    "residual_in_fp32": True, "rescale_prenorm_residual": False, "state_size": 128,
    "tie_word_embeddings": False, "time_step_rank": 256, "use_bias": False,
    "use_conv_bias": True, "vocab_size": 32768,
}

FAMILIES: dict[str, dict] = {
    "qwen3-8b": {"hf_config": _QWEN3_8B, "layers": {"infer": 36, "train": 6},
                 "source": "config.json of Qwen/Qwen3-8B (Hugging Face Hub; the Base "
                           "checkpoint's copy in Chen-Oliver/qwen3-8b-base reads the same "
                           "shape fields)"},
    "qwen3-30b-a3b": {"hf_config": _QWEN3_30B_A3B, "layers": {"infer": 24, "train": 2},
                      "source": "config.json of Qwen/Qwen3-30B-A3B (Hugging Face Hub), typed "
                                "from the model card; 24 of 48 layers to infer (all MoE: "
                                "decoder_sparse_step 1, no mlp_only_layers)"},
    "gemma2-9b": {"hf_config": _GEMMA2_9B, "layers": {"infer": 42, "train": 6},
                  "source": "config.json of google/gemma-2-9b (Hugging Face Hub; quoted in a "
                            "vLLM issue as models--google--gemma-2-9b-it/config.json)"},
    "gemma3-12b-text": {"hf_config": _GEMMA3_12B_TEXT, "layers": {"infer": 48, "train": 6},
                        "source": "text_config of google/gemma-3-12b-pt's config.json "
                                  "(Hugging Face Hub), the text tower alone "
                                  "(Gemma3ForCausalLM); its linear rope_scaling (factor 8) "
                                  "left out"},
    "phi4-mini": {"hf_config": _PHI4_MINI, "layers": {"infer": 32, "train": 8},
                  "source": "config.json of microsoft/Phi-4-mini-instruct (Hugging Face Hub), "
                            "typed from the model card; its longrope rope_scaling lists left "
                            "out (RoPE only)"},
    "gpt-oss-20b": {"hf_config": _GPT_OSS_20B, "layers": {"infer": 12, "train": 2},
                    "source": "config.json of openai/gpt-oss-20b (Hugging Face Hub), typed "
                              "from the model card; its mxfp4 quantization_config and yarn "
                              "rope_scaling left out: bf16 experts; 12 of 24 layers "
                              "(sliding/full pairs) to infer"},
    "olmo2-7b": {"hf_config": _OLMO2_7B, "layers": {"infer": 32, "train": 8},
                 "source": "config.json of allenai/OLMo-2-1124-7B (Hugging Face Hub), typed "
                           "from the model card"},
    "glm4.5-air": {"hf_config": _GLM45_AIR, "layers": {"infer": 8, "train": 2},
                   "source": "config.json of zai-org/GLM-4.5-Air (Hugging Face Hub), typed "
                             "from the model card; 8 of 46 layers to infer (the dense first "
                             "block and 7 MoE blocks), 2 to train (dense + MoE); the MTP "
                             "layer is not built by transformers"},
    "qwen3-next-80b-a3b": {"hf_config": _QWEN3_NEXT_80B_A3B, "layers": {"infer": 4, "train": 4},
                           "fallback": ("fla", "causal_conv1d"),
                           "source": "config.json of Qwen/Qwen3-Next-80B-A3B-Instruct "
                                     "(Hugging Face Hub), typed from the model card and the "
                                     "Qwen3NextConfig defaults of transformers 5.17; 4 of 48 "
                                     "layers (3 gated-delta, 1 full attention)"},
    "mamba-codestral-7b": {"hf_config": _MAMBA_CODESTRAL_7B, "layers": {"infer": 8, "train": 4},
                           "fallback": ("mamba_ssm", "causal_conv1d"),
                           # its forward returns cache_params, not a Cache: prefill only
                           "decode": False,
                           "source": "config.json of mistralai/Mamba-Codestral-7B-v0.1 (the "
                                     "Mamba2Config defaults of transformers 5.17 are this "
                                     "model's shape), typed; 8 of 64 layers"},
}
