"""Exact parameter counts: published anchors, torch models built the same way, properties.

Anchors were checked against ``sum(p.numel() for p in model.parameters())`` of the Hugging Face
``transformers`` (5.24) models built from the same config.json on the meta device; DeepSeek-V3's
figure adds the 58 x 256 ``e_score_correction_bias`` elements transformers keeps as a buffer.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuplan.workloads.model import ModelConfig
from gpuplan.workloads.params import count_params
from gpuplan.workloads.presets import PRESETS

# --- published anchors ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "total"),
    [
        ("llama3-8b", 8_030_261_248),  # HF meta-llama/Meta-Llama-3-8B model card "8.03B"
        ("llama2-7b", 6_738_415_616),  # HF LlamaForCausalLM, Llama-2-7b-hf
        ("mixtral-8x7b", 46_702_792_704),  # Mixtral paper: 46.7B (Jiang et al. 2024)
        ("qwen2.5-72b", 72_706_203_648),  # Qwen2.5 report: 72.7B
        ("llama3.1-405b", 405_853_388_800),
        ("deepseek-v3", 671_026_419_200),  # checkpoint tensors without the MTP layer
        ("vit-l-14", 303_179_776),  # HF CLIPVisionModel, openai/clip-vit-large-patch14
    ],
)
def test_total_matches_the_hugging_face_model_exactly(key, total):
    assert count_params(PRESETS[key]).total == total


def test_mixtral_active_parameters_are_the_published_12_9_billion():
    assert count_params(PRESETS["mixtral-8x7b"]).active == 12_879_925_248


def test_mixtral_8x22b_is_141_billion_with_39_billion_active():
    # Mistral AI announcement of Mixtral 8x22B: 141B total, 39B active
    params = count_params(PRESETS["mixtral-8x22b"])
    assert params.total == pytest.approx(141e9, rel=0.005)
    assert params.active == pytest.approx(39e9, rel=0.01)


def test_deepseek_v3_is_671_billion_with_37_billion_active():
    # DeepSeek-V3 technical report (arXiv:2412.19437), abstract: 671B total, 37B activated
    params = count_params(PRESETS["deepseek-v3"])
    assert params.total == pytest.approx(671e9, rel=0.005)
    assert params.active == pytest.approx(37e9, rel=0.03)


def test_gpt3_is_175_billion():
    # Brown et al. 2020 Table 2.1: n_params 175.0B
    assert count_params(PRESETS["gpt3-175b"]).total == pytest.approx(175e9, rel=0.01)


@pytest.mark.parametrize(
    ("size", "billions"),
    [
        ("1.7b", 1.7),
        ("3.6b", 3.6),
        ("7.5b", 7.5),
        ("18.4b", 18.4),
        ("39.1b", 39.1),
        ("76.1b", 76.1),
        ("145.6b", 145.6),
        ("310.1b", 310.1),
        ("529.6b", 529.6),
        ("1t", 1008.0),
    ],
)
def test_megatron_models_match_table_1_to_its_printed_digits(size, billions):
    # Narayanan et al. 2021, Table 1 "Number of parameters (billion)"
    total = count_params(PRESETS[f"megatron-gpt-{size}"]).total
    assert round(total / 1e9, 1) == billions


def test_tied_embeddings_are_stored_once():
    gpt3 = count_params(PRESETS["gpt3-175b"])
    assert gpt3.lm_head == 0
    untied = count_params(dataclasses.replace(PRESETS["gpt3-175b"], tied_embeddings=False))
    assert untied.total - gpt3.total == 50257 * 12288


def test_only_final_norms_lie_outside_blocks_embedding_and_head_of_every_preset():
    for cfg in PRESETS.values():
        params = count_params(cfg)
        n_final_norms = 2 if cfg.is_vision else 1
        norm_width = cfg.d_model if cfg.norm == "rmsnorm" else 2 * cfg.d_model
        assert params.final_norms == n_final_norms * norm_width, cfg.name
        assert len(params.per_layer) == cfg.n_layers


def test_deepseek_dense_layers_differ_from_its_moe_layers():
    per_layer = count_params(PRESETS["deepseek-v3"]).per_layer
    assert per_layer[0] == per_layer[1] == per_layer[2]
    assert len(set(per_layer[3:])) == 1
    assert per_layer[3] > 10 * per_layer[0]


# --- tiny torch models built the same way ---------------------------------------------------


def _torch_model(cfg: ModelConfig):
    """A minimal torch module with the layout of the HF implementation of ``cfg``."""
    torch = pytest.importorskip("torch")
    nn = torch.nn

    def norm(width):
        return nn.RMSNorm(width) if cfg.norm == "rmsnorm" else nn.LayerNorm(width)

    def mlp(width):
        if cfg.activation == "swiglu":  # gate, up, down
            layers = [nn.Linear(cfg.d_model, width, bias=cfg.bias) for _ in range(2)]
        else:  # fc, proj
            layers = [nn.Linear(cfg.d_model, width, bias=cfg.bias)]
        return nn.ModuleList([*layers, nn.Linear(width, cfg.d_model, bias=cfg.bias)])

    def moe():
        m = nn.Module()
        m.gate = nn.Linear(cfg.d_model, cfg.n_experts, bias=False)
        m.experts = nn.ModuleList([mlp(cfg.d_ff_expert) for _ in range(cfg.n_experts)])
        if cfg.n_shared_experts:
            m.shared = mlp(cfg.n_shared_experts * cfg.d_ff_expert)
        if cfg.router_score_bias:
            m.e_score_correction_bias = nn.Parameter(torch.zeros(cfg.n_experts))
        return m

    def attention():
        d, h, hd, kv = cfg.d_model, cfg.n_heads, cfg.head_dim, cfg.n_kv_heads
        qkv_bias = cfg.bias or cfg.qkv_bias
        return nn.ModuleDict(
            {
                "q": nn.Linear(d, h * hd, bias=qkv_bias),
                "k": nn.Linear(d, kv * hd, bias=qkv_bias),
                "v": nn.Linear(d, kv * hd, bias=qkv_bias),
                "o": nn.Linear(h * hd, d, bias=cfg.bias),
            }
        )

    def mla():
        d, h = cfg.d_model, cfg.n_heads
        parts = {}
        if cfg.q_lora_rank:
            parts["q_a_proj"] = nn.Linear(d, cfg.q_lora_rank, bias=cfg.bias)
            parts["q_a_layernorm"] = norm(cfg.q_lora_rank)
            parts["q_b_proj"] = nn.Linear(cfg.q_lora_rank, h * cfg.qk_head_dim, bias=False)
        else:
            parts["q_proj"] = nn.Linear(d, h * cfg.qk_head_dim, bias=False)
        latent = cfg.kv_lora_rank + cfg.qk_rope_head_dim
        parts["kv_a_proj_with_mqa"] = nn.Linear(d, latent, bias=cfg.bias)
        parts["kv_a_layernorm"] = norm(cfg.kv_lora_rank)
        kv_out = h * (cfg.qk_nope_head_dim + cfg.v_head_dim)
        parts["kv_b_proj"] = nn.Linear(cfg.kv_lora_rank, kv_out, bias=False)
        parts["o_proj"] = nn.Linear(h * cfg.v_head_dim, d, bias=cfg.bias)
        return nn.ModuleDict(parts)

    def block(layer):
        ffn = moe() if cfg.is_moe_layer(layer) else mlp(cfg.d_ff)
        attn = mla() if cfg.is_mla else attention()
        return nn.ModuleList([norm(cfg.d_model), attn, norm(cfg.d_model), ffn])

    model = nn.Module()
    model.blocks = nn.ModuleList([block(i) for i in range(cfg.n_layers)])
    if cfg.is_vision:  # CLIPVisionTransformer
        model.patch = nn.Conv2d(cfg.n_channels, cfg.d_model, cfg.patch_size, bias=False)
        model.class_embedding = nn.Parameter(torch.zeros(cfg.d_model))
        model.pre_layrnorm, model.post_layernorm = norm(cfg.d_model), norm(cfg.d_model)
    else:
        model.wte = nn.Embedding(cfg.vocab_size, cfg.d_model)
        model.final_norm = norm(cfg.d_model)
        model.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tied_embeddings:
            model.lm_head.weight = model.wte.weight
    if cfg.position == "learned":
        model.wpe = nn.Embedding(cfg.seq_len_default, cfg.d_model)
    return model


def _numel(module) -> int:
    return sum(p.numel() for p in module.parameters())


TINY_LLAMA = ModelConfig(
    name="tiny-llama", n_layers=3, d_model=64, n_heads=8, n_kv_heads=2, d_ff=176, vocab_size=128
)
TINY_GPT2 = ModelConfig(
    name="tiny-gpt2",
    n_layers=2,
    d_model=48,
    n_heads=4,
    n_kv_heads=4,
    d_ff=192,
    vocab_size=100,
    norm="layernorm",
    activation="gelu",
    bias=True,
    tied_embeddings=True,
    position="learned",
    max_seq_len=32,
)
TINY_MIXTRAL = dataclasses.replace(
    TINY_LLAMA, name="tiny-mixtral", n_experts=4, top_k=2, d_ff_expert=96
)
TINY_MLA = ModelConfig(
    name="tiny-mla",
    n_layers=4,
    d_model=64,
    n_heads=4,
    n_kv_heads=4,
    d_ff=128,
    vocab_size=100,
    n_experts=6,
    top_k=2,
    n_shared_experts=2,
    d_ff_expert=32,
    n_dense_layers=1,
    router_score_bias=True,
    q_lora_rank=24,
    kv_lora_rank=16,
    qk_nope_head_dim=8,
    qk_rope_head_dim=8,
    v_head_dim=12,
)
TINY_VIT = ModelConfig(
    name="tiny-vit",
    n_layers=2,
    d_model=32,
    n_heads=4,
    n_kv_heads=4,
    d_ff=64,
    vocab_size=0,
    norm="layernorm",
    activation="gelu",
    bias=True,
    position="learned",
    causal=False,
    patch_size=4,
    image_size=16,
)
TINY = {
    "llama-gqa": TINY_LLAMA,
    "llama-tied": dataclasses.replace(TINY_LLAMA, tied_embeddings=True),
    "qwen2-qkv-bias": dataclasses.replace(TINY_LLAMA, qkv_bias=True),
    "gpt2": TINY_GPT2,
    "mixtral": TINY_MIXTRAL,
    "mla-moe": TINY_MLA,
    "mla-no-query-compression": dataclasses.replace(TINY_MLA, q_lora_rank=0),
    "mla-moe-every-other-layer": dataclasses.replace(TINY_MLA, moe_layer_freq=2),
    "vit": TINY_VIT,
}


@pytest.mark.parametrize("key", list(TINY))
def test_total_equals_the_torch_models_parameter_count(key):
    cfg = TINY[key]
    assert count_params(cfg).total == _numel(_torch_model(cfg))


@pytest.mark.parametrize("key", list(TINY))
def test_each_block_equals_the_torch_blocks_parameter_count(key):
    cfg = TINY[key]
    blocks = _torch_model(cfg).blocks
    assert count_params(cfg).per_layer == tuple(_numel(b) for b in blocks)


def test_embedding_and_head_equal_the_torch_tables():
    model = _torch_model(TINY_GPT2)
    params = count_params(TINY_GPT2)
    assert params.embedding == _numel(model.wte) + _numel(model.wpe)
    assert params.lm_head == 0
    llama = count_params(TINY_LLAMA)
    assert llama.lm_head == _numel(_torch_model(TINY_LLAMA).lm_head) == 128 * 64


def test_active_keeps_only_top_k_of_the_routed_experts():
    for cfg in (TINY_MIXTRAL, TINY_MLA):
        model = _torch_model(cfg)
        unused = 0
        for layer, block in enumerate(model.blocks):
            if cfg.is_moe_layer(layer):
                experts = block[3].experts
                unused += sum(_numel(e) for e in experts[cfg.top_k :])
        assert count_params(cfg).active == _numel(model) - unused


# --- properties -------------------------------------------------------------------------------


@st.composite
def configs(draw) -> ModelConfig:
    """Small valid decoders: dense or MoE, GQA or MLA, either norm and activation."""
    n_kv_heads = draw(st.sampled_from([1, 2, 4]))
    n_heads = n_kv_heads * draw(st.integers(1, 4))
    fields = {
        "name": "drawn",
        "n_layers": draw(st.integers(1, 6)),
        "d_model": n_heads * draw(st.integers(1, 16)),
        "n_heads": n_heads,
        "n_kv_heads": n_kv_heads,
        "d_ff": draw(st.integers(1, 512)),
        "vocab_size": draw(st.integers(1, 1000)),
        "norm": draw(st.sampled_from(["rmsnorm", "layernorm"])),
        "activation": draw(st.sampled_from(["swiglu", "gelu"])),
        "bias": draw(st.booleans()),
        "tied_embeddings": draw(st.booleans()),
        "position": draw(st.sampled_from(["rope", "learned", "none"])),
        "max_seq_len": draw(st.integers(1, 256)),
    }
    if draw(st.booleans()):
        n_experts = draw(st.integers(1, 16))
        fields |= {
            "n_experts": n_experts,
            "top_k": draw(st.integers(1, n_experts)),
            "n_shared_experts": draw(st.integers(0, 2)),
            "d_ff_expert": draw(st.integers(1, 256)),
            "n_dense_layers": draw(st.integers(0, fields["n_layers"] - 1)),
        }
    if draw(st.booleans()):
        fields |= {
            "n_kv_heads": n_heads,
            "q_lora_rank": draw(st.integers(0, 64)),
            "kv_lora_rank": draw(st.integers(1, 64)),
            "qk_nope_head_dim": draw(st.integers(0, 32)),
            "qk_rope_head_dim": draw(st.integers(1, 32)),
            "v_head_dim": draw(st.integers(1, 32)),
        }
    return ModelConfig(**fields)


@given(configs(), st.integers(1, 4))
def test_more_layers_never_means_fewer_parameters(cfg, extra):
    deeper = dataclasses.replace(cfg, n_layers=cfg.n_layers + extra)
    assert count_params(deeper).total > count_params(cfg).total
    assert count_params(deeper).active > count_params(cfg).active


@given(configs())
def test_active_never_exceeds_total(cfg):
    params = count_params(cfg)
    assert 0 < params.active <= params.total


@given(configs())
def test_a_dense_model_uses_every_parameter_per_token(cfg):
    dense = dataclasses.replace(
        cfg, n_experts=0, top_k=0, n_shared_experts=0, d_ff_expert=0, n_dense_layers=0
    )
    params = count_params(dense)
    assert params.active == params.total


@given(configs())
def test_only_the_final_norm_lies_outside_blocks_embedding_and_head(cfg):
    params = count_params(cfg)
    assert params.final_norms == (cfg.d_model if cfg.norm == "rmsnorm" else 2 * cfg.d_model)
