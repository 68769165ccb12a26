"""Published model configurations (Hugging Face ``config.json`` fields) the campaign builds with
``AutoModelForCausalLM.from_config`` (random weights; the GPU machine has no network).

Each entry: ``hf_config`` as published (fields that change no cost left out), its source, the
layer counts kept per phase on one 141 GB H200 (``layers``: inference and training; training
holds fp32 weights, gradients and two AdamW moments, 16 bytes a parameter), and the gpuplan
preset it corresponds to where one exists (``preset``; the others are priced from this config
through ``gpuplan.workloads.hf_config``).
"""

from __future__ import annotations

MODELS: dict[str, dict] = {
    "llama3-8b": {
        "preset": "llama3-8b",
        "source": "config.json of meta-llama/Meta-Llama-3-8B (../shared/reference/model_configs.json)",
        "hf_config": {
            "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 4096,
            "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,
            "num_hidden_layers": 32, "vocab_size": 128256, "max_position_embeddings": 8192,
            "rope_theta": 500000.0, "rms_norm_eps": 1e-05, "hidden_act": "silu",
            "tie_word_embeddings": False,
        },
        "layers": {"infer": 32, "train": 8, "compile": 8},
    },
    "qwen2.5-7b": {
        "preset": None,
        "source": "config.json of Qwen/Qwen2.5-7B (Hugging Face Hub): hidden 3584, ffn 18944, "
                  "28 heads, 4 KV heads, 28 layers, vocab 152064, qkv bias",
        "hf_config": {
            "model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "hidden_size": 3584,
            "intermediate_size": 18944, "num_attention_heads": 28, "num_key_value_heads": 4,
            "num_hidden_layers": 28, "vocab_size": 152064, "max_position_embeddings": 131072,
            "rope_theta": 1000000.0, "rms_norm_eps": 1e-06, "hidden_act": "silu",
            "tie_word_embeddings": False, "use_sliding_window": False, "max_window_layers": 28,
        },
        "layers": {"infer": 28, "train": 8, "compile": 8},
    },
    "mistral-7b": {
        "preset": None,
        "source": "config.json of mistralai/Mistral-7B-v0.1 (Hugging Face Hub): hidden 4096, "
                  "ffn 14336, 32 heads, 8 KV heads, 32 layers, vocab 32000, sliding window 4096",
        "hf_config": {
            "model_type": "mistral", "architectures": ["MistralForCausalLM"],
            "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
            "num_key_value_heads": 8, "num_hidden_layers": 32, "vocab_size": 32000,
            "max_position_embeddings": 32768, "rope_theta": 10000.0, "rms_norm_eps": 1e-05,
            "hidden_act": "silu", "sliding_window": 4096, "tie_word_embeddings": False,
        },
        "layers": {"infer": 32, "train": 8, "compile": 8},
    },
    "mixtral-8x7b": {
        "preset": "mixtral-8x7b",
        "source": "config.json of mistralai/Mixtral-8x7B-v0.1 (../shared/reference/model_configs.json)",
        "hf_config": {
            "model_type": "mixtral", "architectures": ["MixtralForCausalLM"],
            "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
            "num_key_value_heads": 8, "num_hidden_layers": 32, "vocab_size": 32000,
            "max_position_embeddings": 32768, "num_local_experts": 8, "num_experts_per_tok": 2,
            "rope_theta": 1000000.0, "rms_norm_eps": 1e-05, "sliding_window": None,
            "tie_word_embeddings": False,
        },
        # 46.7 B parameters: 16 of 32 layers (~47 GB bf16) for inference, 2 for training.
        "layers": {"infer": 16, "train": 2, "compile": 2},
    },
    "deepseek-v2-lite": {
        "preset": None,
        "source": "config.json of deepseek-ai/DeepSeek-V2-Lite (Hugging Face Hub; DeepSeek-V2 "
                  "paper, Appendix B): MLA (kv_lora_rank 512, no query compression), 64 routed "
                  "+ 2 shared experts, top-6; its yarn rope_scaling left out (RoPE only)",
        "hf_config": {
            "model_type": "deepseek_v2", "architectures": ["DeepseekV2ForCausalLM"],
            "hidden_size": 2048, "intermediate_size": 10944, "moe_intermediate_size": 1408,
            "num_hidden_layers": 27, "num_attention_heads": 16, "num_key_value_heads": 16,
            "n_shared_experts": 2, "n_routed_experts": 64, "num_experts_per_tok": 6,
            "first_k_dense_replace": 1, "moe_layer_freq": 1, "kv_lora_rank": 512,
            "q_lora_rank": None, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
            "v_head_dim": 128, "vocab_size": 102400, "max_position_embeddings": 163840,
            "rms_norm_eps": 1e-06, "rope_theta": 10000.0, "topk_method": "greedy",
            "n_group": 1, "topk_group": 1, "routed_scaling_factor": 1.0,
            "norm_topk_prob": False, "tie_word_embeddings": False,
        },
        "layers": {"infer": 27, "train": 4, "compile": 4},
    },
}


def tiny_config(name: str) -> dict:
    """The same family at toy sizes (CPU smoke path): 2 layers, hidden 64, vocab 256."""
    cfg = dict(MODELS[name]["hf_config"])
    cfg |= {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
            "vocab_size": 256, "max_position_embeddings": 512}
    heads = {"llama3-8b": (4, 2), "qwen2.5-7b": (4, 2), "mistral-7b": (4, 2),
             "mixtral-8x7b": (4, 2), "deepseek-v2-lite": (4, 4)}[name]
    cfg["num_attention_heads"], cfg["num_key_value_heads"] = heads
    if name == "mistral-7b":
        cfg["sliding_window"] = 64
    if name == "mixtral-8x7b":
        cfg["num_local_experts"] = 4
    if name == "deepseek-v2-lite":
        cfg |= {"moe_intermediate_size": 32, "n_routed_experts": 4, "num_experts_per_tok": 2,
                "n_shared_experts": 1, "kv_lora_rank": 16, "qk_nope_head_dim": 16,
                "qk_rope_head_dim": 8, "v_head_dim": 16}
    return cfg
