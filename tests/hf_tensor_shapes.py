"""An independent parameter count for tests/test_hf_families.py: the named tensors each family's
Hugging Face modeling code registers (``modeling_<family>.py`` of huggingface/transformers;
DeepSeek's own ``inference/model.py`` for the V3.2 indexer), listed from the raw config.json,
and their shapes multiplied out and summed.

It shares no code with gpuplan's reader or ``workloads/params.py``: it walks the module tree
(``model.layers.{i}.self_attn.q_proj.weight`` ...) rather than summing formulas, and reads the
config's fields itself, so a wrong field, a missed tensor or a wrong layer rule shows up as a
difference. MTP modules are left out (gpuplan counts them apart), as are the vision towers
gpuplan does not read (Llama 4's); Gemma 3's SigLIP tower and projector are in.
"""

from __future__ import annotations

import math

# Gemma3TextConfig's defaults for fields the Gemma 3 checkpoints' text_config leaves out
GEMMA3_TEXT = {"vocab_size": 262_208, "num_attention_heads": 8, "num_key_value_heads": 4,
               "head_dim": 256}


def _linear(t, name, n_in, n_out, bias=False):
    t[f"{name}.weight"] = (n_out, n_in)
    if bias:
        t[f"{name}.bias"] = (n_out,)


def _attention(t, p, c, *, qkv_bias=False, o_bias=False, qk_norm="", gate=False, sinks=False):
    d, h = c["hidden_size"], c["num_attention_heads"]
    kv = c.get("num_key_value_heads") or h
    hd = c.get("head_dim") or c.get("attention_head_dim") or d // h
    _linear(t, f"{p}.q_proj", d, h * hd * (2 if gate else 1), qkv_bias)
    _linear(t, f"{p}.k_proj", d, kv * hd, qkv_bias)
    _linear(t, f"{p}.v_proj", d, kv * hd, qkv_bias)
    _linear(t, f"{p}.o_proj", h * hd, d, o_bias)
    if qk_norm == "head":
        t[f"{p}.q_norm.weight"], t[f"{p}.k_norm.weight"] = (hd,), (hd,)
    elif qk_norm == "all":
        t[f"{p}.q_norm.weight"], t[f"{p}.k_norm.weight"] = (h * hd,), (kv * hd,)
    if sinks:
        t[f"{p}.sinks"] = (h,)


def _mla(t, p, c, indexer=False):
    d, h = c["hidden_size"], c["num_attention_heads"]
    qk = c["qk_nope_head_dim"] + c["qk_rope_head_dim"]
    if c.get("q_lora_rank"):
        _linear(t, f"{p}.q_a_proj", d, c["q_lora_rank"])
        t[f"{p}.q_a_layernorm.weight"] = (c["q_lora_rank"],)
        _linear(t, f"{p}.q_b_proj", c["q_lora_rank"], h * qk)
    else:
        _linear(t, f"{p}.q_proj", d, h * qk)
    _linear(t, f"{p}.kv_a_proj_with_mqa", d, c["kv_lora_rank"] + c["qk_rope_head_dim"])
    t[f"{p}.kv_a_layernorm.weight"] = (c["kv_lora_rank"],)
    _linear(t, f"{p}.kv_b_proj", c["kv_lora_rank"], h * (c["qk_nope_head_dim"] + c["v_head_dim"]))
    _linear(t, f"{p}.o_proj", h * c["v_head_dim"], d)
    if indexer:  # DeepSeek-V3.2 inference/model.py Indexer
        ih, ihd = c["index_n_heads"], c["index_head_dim"]
        _linear(t, f"{p}.indexer.wq_b", c["q_lora_rank"], ih * ihd)
        _linear(t, f"{p}.indexer.wk", d, ihd)
        t[f"{p}.indexer.k_norm.weight"], t[f"{p}.indexer.k_norm.bias"] = (ihd,), (ihd,)
        _linear(t, f"{p}.indexer.weights_proj", d, ih)


def _mlp(t, p, d, f, *, gated=True, bias=False):
    if gated:
        _linear(t, f"{p}.gate_proj", d, f, bias)
    _linear(t, f"{p}.up_proj", d, f, bias)
    _linear(t, f"{p}.down_proj", f, d, bias)


def _experts(t, p, n, d, f, bias=False):
    """Fused expert tensors (as transformers 5 stores them): gate_up [n, 2f, d], down [n, d, f]."""
    t[f"{p}.gate_up_proj"], t[f"{p}.down_proj"] = (n, 2 * f, d), (n, d, f)
    if bias:
        t[f"{p}.gate_up_proj_bias"], t[f"{p}.down_proj_bias"] = (n, 2 * f), (n, d)


def _mamba(t, p, c, d):
    heads = c.get("mamba_num_heads") or c.get("mamba_n_heads") or c["num_heads"]
    hd = c.get("mamba_head_dim") or c.get("mamba_d_head") or c.get("head_dim")
    n = c.get("ssm_state_size") or c.get("mamba_d_state") or c.get("state_size")
    g = c.get("n_groups") or c.get("mamba_n_groups") or 1
    k = c.get("conv_kernel") or c.get("mamba_d_conv") or 4
    inner, conv = heads * hd, heads * hd + 2 * g * n
    conv_bias = c.get("use_conv_bias", c.get("mamba_conv_bias", True))
    proj_bias = c.get("use_bias", c.get("mamba_proj_bias", False))
    _linear(t, f"{p}.in_proj", d, inner + conv + heads, proj_bias)
    t[f"{p}.conv1d.weight"] = (conv, 1, k)
    if conv_bias:
        t[f"{p}.conv1d.bias"] = (conv,)
    t[f"{p}.dt_bias"], t[f"{p}.A_log"], t[f"{p}.D"] = (heads,), (heads,), (heads,)
    t[f"{p}.norm.weight"] = (inner,)
    _linear(t, f"{p}.out_proj", inner, d, proj_bias)


def _gated_deltanet(t, p, c, d):
    kd = c["linear_num_key_heads"] * c["linear_key_head_dim"]
    vd = c["linear_num_value_heads"] * c["linear_value_head_dim"]
    nv = c["linear_num_value_heads"]
    _linear(t, f"{p}.in_proj_qkvz", d, 2 * kd + 2 * vd)
    _linear(t, f"{p}.in_proj_ba", d, 2 * nv)
    t[f"{p}.conv1d.weight"] = (2 * kd + vd, 1, c["linear_conv_kernel_dim"])
    t[f"{p}.dt_bias"], t[f"{p}.A_log"] = (nv,), (nv,)
    t[f"{p}.norm.weight"] = (c["linear_value_head_dim"],)
    _linear(t, f"{p}.out_proj", vd, d)


def tensors(raw: dict) -> dict[str, tuple[int, ...]]:
    """Every parameter tensor of the text model, by name."""
    c, mt = raw, raw["model_type"]
    if "text_config" in raw:
        c = raw["text_config"]
        mt = c.get("model_type", mt)
        if mt == "gemma3_text":
            c = {**GEMMA3_TEXT, **c}
    t: dict[str, tuple[int, ...]] = {}
    d, n, v = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"]
    t["model.embed_tokens.weight"] = (v, d)
    t["model.norm.weight"] = (d,)
    tied = c.get("tie_word_embeddings", raw.get("tie_word_embeddings",
                                                mt in ("gemma", "gemma2", "gemma3_text")))
    if not tied:
        t["lm_head.weight"] = (v, d)
    for i in range(n):
        _layer(t, f"model.layers.{i}", c, mt, i)
    if raw["model_type"] == "gemma3":
        _siglip(t, raw.get("vision_config", {}), d)
    return t


def _siglip(t, v, d_text):
    """Gemma 3's SigLIP tower (modeling_siglip.py) and Gemma3MultiModalProjector."""
    d, p, size = v.get("hidden_size", 1152), v.get("patch_size", 14), v.get("image_size", 896)
    f, n = v.get("intermediate_size", 4304), v.get("num_hidden_layers", 27)
    e = "vision_tower.vision_model.embeddings"
    t[f"{e}.patch_embedding.weight"], t[f"{e}.patch_embedding.bias"] = (d, 3, p, p), (d,)
    t[f"{e}.position_embedding.weight"] = ((size // p) ** 2, d)
    for i in range(n):
        q = f"vision_tower.vision_model.encoder.layers.{i}"
        for norm in ("layer_norm1", "layer_norm2"):
            t[f"{q}.{norm}.weight"], t[f"{q}.{norm}.bias"] = (d,), (d,)
        for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
            _linear(t, f"{q}.self_attn.{proj}", d, d, True)
        _linear(t, f"{q}.mlp.fc1", d, f, True)
        _linear(t, f"{q}.mlp.fc2", f, d, True)
    post = "vision_tower.vision_model.post_layernorm"
    t[f"{post}.weight"], t[f"{post}.bias"] = (d,), (d,)
    t["multi_modal_projector.mm_input_projection_weight"] = (d, d_text)
    t["multi_modal_projector.mm_soft_emb_norm.weight"] = (d,)


def _layer(t, p, c, mt, i):  # noqa: C901 - one branch per family, as the modeling files are
    d = c["hidden_size"]
    if mt == "mamba2":
        t[f"{p}.norm.weight"] = (d,)
        _mamba(t, f"{p}.mixer", c, d)
        return
    if mt == "nemotron_h":
        kind = c["hybrid_override_pattern"][i]
        t[f"{p}.norm.weight"] = (d,)
        if kind == "M":
            _mamba(t, f"{p}.mixer", c, d)
        elif kind == "*":
            _attention(t, f"{p}.mixer", c)
        else:
            _mlp(t, f"{p}.mixer", d, c["intermediate_size"], gated=False)
        return
    norms = ["input_layernorm", "post_attention_layernorm"]
    if mt in ("gemma2", "gemma3_text"):
        norms += ["pre_feedforward_layernorm", "post_feedforward_layernorm"]
    if mt == "olmo2":
        norms = ["post_attention_layernorm", "post_feedforward_layernorm"]
    for norm in norms:
        t[f"{p}.{norm}.weight"] = (d,)
    _mixer(t, p, c, mt, i)
    _ffn(t, f"{p}.mlp", c, mt, i)


def _mixer(t, p, c, mt, i):
    d, a = c["hidden_size"], f"{p}.self_attn"
    bias = c.get("attention_bias", False)
    if mt in ("deepseek_v3", "deepseek_v32", "kimi_k2"):
        _mla(t, a, c, indexer=mt == "deepseek_v32")
    elif mt == "qwen3_next" and (i + 1) % c["full_attention_interval"]:
        _gated_deltanet(t, f"{p}.linear_attn", c, d)
    elif mt == "granitemoehybrid" and c["layer_types"][i] == "mamba":
        _mamba(t, f"{p}.mamba", c, d)
    elif mt in ("qwen2", "qwen2_moe"):
        _attention(t, a, c, qkv_bias=True)
    elif mt == "glm4_moe":
        _attention(t, a, c, qkv_bias=bias, qk_norm="head" if c.get("use_qk_norm") else "")
    else:
        qk = {"qwen3": "head", "qwen3_moe": "head", "qwen3_next": "head", "gemma3_text": "head",
              "olmo2": "all"}.get(mt, "")
        _attention(t, a, c, qkv_bias=bias, o_bias=bias, qk_norm=qk, gate=mt == "qwen3_next",
                   sinks=mt == "gpt_oss")


def _ffn(t, p, c, mt, i):  # noqa: C901
    d = c["hidden_size"]
    e = c.get("num_local_experts") or c.get("num_experts") or c.get("n_routed_experts") or 0
    f = c.get("moe_intermediate_size") or c.get("intermediate_size")
    if mt in ("deepseek_v3", "deepseek_v32", "kimi_k2", "glm4_moe"):
        moe = i >= c.get("first_k_dense_replace", 0)
    elif mt in ("qwen2_moe", "qwen3_moe", "qwen3_next"):
        moe = i not in c.get("mlp_only_layers", []) and (i + 1) % c.get("decoder_sparse_step", 1) == 0
    elif mt == "llama4_text":
        step = c.get("interleave_moe_layer_step", 1)
        moe = i in range(step - 1, c["num_hidden_layers"], step)
    else:
        moe = e > 0
    if not moe:
        width = c.get("intermediate_size_mlp") or c.get("shared_intermediate_size") \
            or c["intermediate_size"]
        _mlp(t, p, d, width, bias=c.get("mlp_bias", False))
        return
    if mt == "granitemoehybrid":  # block_sparse_moe + shared_mlp
        _linear(t, p.replace(".mlp", ".block_sparse_moe.router.layer"), d, e)
        t[p.replace(".mlp", ".block_sparse_moe.input_linear.weight")] = (e, 2 * f, d)
        t[p.replace(".mlp", ".block_sparse_moe.output_linear.weight")] = (e, d, f)
        s = c["shared_intermediate_size"]
        _linear(t, p.replace(".mlp", ".shared_mlp.input_linear"), d, 2 * s)
        _linear(t, p.replace(".mlp", ".shared_mlp.output_linear"), s, d)
        return
    _linear(t, f"{p}.gate", d, e, bias=mt == "gpt_oss")
    if mt in ("deepseek_v3", "deepseek_v32", "kimi_k2", "glm4_moe"):
        t[f"{p}.gate.e_score_correction_bias"] = (e,)
    _experts(t, f"{p}.experts", e, d, f, bias=mt == "gpt_oss")
    shared = c.get("n_shared_experts", 0) * f or c.get("shared_expert_intermediate_size", 0)
    if mt == "llama4_text":
        shared = c["intermediate_size"]
    if shared:
        _mlp(t, f"{p}.shared_expert", d, shared)
        if mt in ("qwen2_moe", "qwen3_next"):
            _linear(t, f"{p}.shared_expert_gate", d, 1)


def count(raw: dict) -> int:
    return sum(math.prod(shape) for shape in tensors(raw).values())
