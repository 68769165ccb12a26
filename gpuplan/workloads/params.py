"""Exact parameter counts: every element the Hugging Face / torch implementation stores.

The count follows the modules of Hugging Face ``transformers`` (``LlamaForCausalLM``,
``MistralForCausalLM``, ``MixtralForCausalLM``, ``Qwen2ForCausalLM``, ``DeepseekV3ForCausalLM``,
``GPT2LMHeadModel``, ``CLIPVisionModel``) and ``sum(p.numel() for p in model.parameters())``:

- norms: RMSNorm stores a weight, LayerNorm a weight and a bias (two per block, one final;
  a CLIP vision tower has a ``pre_layrnorm`` and a ``post_layernorm`` instead);
- norms per block: two (pre-norms, or OLMo 2's post-norms), four (Gemma 2/3's sandwich norms),
  one (Mamba-2 and Nemotron-H: one norm before each layer's single mixer or MLP);
- biases where the configuration has them: every linear layer (``bias``), q, k and v only
  (``qkv_bias``, Qwen2, GLM-4.5), q, k, v and o (``attention_bias``, gpt-oss), the MLPs
  (``mlp_bias``), the router and experts (gpt-oss); LM heads never have one;
- q/k norms: one RMSNorm over a head for q and one for k (Qwen3, Gemma 3, GLM-4.5), or over all
  heads (OLMo 2); gpt-oss's attention sinks (one per head); Qwen3-Next's gated query (q_proj
  twice as wide);
- the other mixers: gated DeltaNet (Qwen3-Next: in_proj_qkvz, in_proj_ba, conv1d, dt_bias,
  A_log, norm, out_proj), Mamba-2 (in_proj, conv1d, dt_bias, A_log, D, norm, out_proj), and
  DeepSeek-V3.2's indexer beside MLA (wq_b, wk, k_norm, weights_proj); a layer without mixer
  (Nemotron-H's MLP layers) or without feed-forward (its Mamba-2 and attention layers);
- attention: q, k, v and o projections; MLA (DeepSeek-V2 report, arXiv:2405.04434, eq. 9-19)
  stores ``q_a_proj``, ``q_a_layernorm``, ``q_b_proj`` (or ``q_proj`` without query
  compression), ``kv_a_proj_with_mqa``, ``kv_a_layernorm``, ``kv_b_proj`` and ``o_proj``;
- MoE layers: the router (``d_model * n_experts``, plus DeepSeek-V3's ``e_score_correction_bias``
  of ``n_experts``: a tensor of the checkpoint, which transformers 5 registers as a persistent
  buffer rather than a parameter), every routed expert and the shared experts (one MLP of width
  ``n_shared_experts * d_ff_expert`` in HF DeepSeek: the same count);
- embeddings: the token table, the learned position table; a vision tower's patch convolution
  (without bias, as in CLIP), class embedding and position table;
- the LM head, unless tied to the token table (then it is stored once) or a vision encoder;
- a VLM's vision side (``tower_params``): its encoder, its projector and, for cross-attention,
  the cross-attention blocks and the extra token-table rows (``workloads.vision``'s styles).

Counted apart (``ParamCount.mtp``, not in ``total``): DeepSeek-V3-style multi-token-prediction
modules (``num_nextn_predict_layers``; DeepSeek-V3 report, section 2.2), as the checkpoint
stores them (``mtp_params``). Not counted: buffers that are not parameters (rotary tables,
position ids), FP8 block scales of quantized checkpoints, vision towers the reader does not
read (Gemma 3's SigLIP, Llama 4's encoder).

``active`` is what one token uses: everything except the routed experts it is not sent to, i.e.
each MoE layer keeps its router, its ``top_k`` routed and its shared experts. Embedding and head
count as active, the convention of Mixtral's "12.9B active" (Jiang et al. 2024); DeepSeek's own
"37B activated", OpenAI's gpt-oss "3.61B active" and Zhipu's GLM-4.5 "32B active" leave out the
input embedding (``active - embedding``).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuplan.errors import expects
from gpuplan.workloads.model import ModelConfig, VisionTower


@dataclass(frozen=True, slots=True)
class ParamCount:
    """A model's parameters, exactly, by where they live."""

    total: int  # every parameter stored
    active: int  # used per token (MoE: top_k routed + shared experts only)
    embedding: int  # token (+ position / patch) embedding
    lm_head: int  # 0 when tied or vision
    per_layer: tuple[int, ...]  # each block's parameters, norms included
    vision: int = 0  # a VLM's vision side: encoder, projector, cross-attention blocks
    mtp: int = 0  # multi-token-prediction modules, stored beside the model: not in total

    @property
    def final_norms(self) -> int:
        """What lies outside blocks, embedding, head and vision tower: the final norm(s)."""
        return self.total - self.embedding - self.lm_head - sum(self.per_layer) - self.vision


@expects(cfg="ModelConfig")
def count_params(cfg: ModelConfig) -> ParamCount:
    """Exact stored and per-token-active parameters of ``cfg``."""
    per_layer = tuple(layer_params(cfg, layer) for layer in range(cfg.n_layers))
    embedding = embedding_params(cfg)
    head = lm_head_params(cfg)
    vision = tower_params(cfg)
    total = embedding + head + sum(per_layer) + final_norm_params(cfg) + vision
    inactive = cfg.n_moe_layers * (cfg.n_experts - cfg.top_k) * expert_params(cfg)
    return ParamCount(
        total=total, active=total - inactive, embedding=embedding, lm_head=head,
        per_layer=per_layer, vision=vision, mtp=mtp_params(cfg),
    )


def norm_params(cfg: ModelConfig, width: int) -> int:
    """One norm over ``width`` features: RMSNorm a weight; LayerNorm a weight and a bias."""
    return width if cfg.norm == "rmsnorm" else 2 * width


def linear_params(d_in: int, d_out: int, *, bias: bool) -> int:
    """A ``torch.nn.Linear(d_in, d_out, bias)``."""
    return d_in * d_out + (d_out if bias else 0)


def attention_params(cfg: ModelConfig, kind: str = "full") -> int:
    """One layer's token mixer of ``kind`` (``layer_kinds.MIXER_KINDS``), norms around it
    excluded: attention projections with their q/k norms and sinks, MLA (plus DeepSeek-V3.2's
    indexer for "dsa"), gated DeltaNet ("linear"), Mamba-2 ("mamba2"), nothing ("none")."""
    if kind == "none":
        return 0
    if kind == "linear":
        return linear_attention_params(cfg)
    if kind == "mamba2":
        return mamba2_params(cfg)
    if cfg.is_mla:
        return mla_params(cfg) + (indexer_params(cfg) if kind == "dsa" else 0)
    d, q_width, kv_width = cfg.d_model, cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
    qkv_bias = cfg.bias or cfg.qkv_bias or cfg.attention_bias
    q_out = 2 * q_width if cfg.attn_output_gate else q_width  # Qwen3-Next: query and gate
    qkv = linear_params(d, q_out, bias=qkv_bias) + 2 * linear_params(d, kv_width, bias=qkv_bias)
    out = linear_params(q_width, d, bias=cfg.bias or cfg.attention_bias)
    return qkv + out + qk_norm_params(cfg) + (cfg.n_heads if cfg.attention_sinks else 0)


def qk_norm_params(cfg: ModelConfig) -> int:
    """q_norm and k_norm: over one head (Qwen3, Gemma 3, Qwen3-Next) or over all the heads of
    the projection (OLMo 2: ``Olmo2RMSNorm(num_attention_heads * head_dim)``)."""
    if cfg.qk_norm == "head":
        return 2 * norm_params(cfg, cfg.head_dim)
    if cfg.qk_norm == "all":
        return norm_params(cfg, (cfg.n_heads + cfg.n_kv_heads) * cfg.head_dim)
    return 0


def linear_attention_params(cfg: ModelConfig) -> int:
    """Qwen3-Next's gated DeltaNet (``Qwen3NextGatedDeltaNet``): in_proj_qkvz (q, k, v and the
    output gate z), in_proj_ba (beta and the decay's a, one each per value head), a depthwise
    conv1d over q, k, v without bias, dt_bias and A_log per value head, a gated RMSNorm over a
    value head, out_proj."""
    la, d = cfg.linear_attention, cfg.d_model
    qkvz = d * (2 * la.key_dim + 2 * la.value_dim)
    ba = d * 2 * la.n_value_heads
    conv = la.conv_channels * la.conv_kernel
    return qkvz + ba + conv + 2 * la.n_value_heads + la.value_head_dim + la.value_dim * d


def mamba2_params(cfg: ModelConfig) -> int:
    """A Mamba-2 mixer (HF ``Mamba2Mixer``, ``NemotronHMamba2Mixer``, Granite's): in_proj to
    z, x, B, C and dt (``2 d_inner + 2 n_groups state + n_heads``), a depthwise conv1d over x, B,
    C, dt_bias, A_log and D per head, a gated RMSNorm over d_inner, out_proj."""
    s, d = cfg.ssm, cfg.d_model
    in_proj = linear_params(d, s.in_proj_width, bias=cfg.ssm_proj_bias)
    conv = s.conv_channels * s.conv_kernel + (s.conv_channels if cfg.ssm_conv_bias else 0)
    out = linear_params(s.d_inner, d, bias=cfg.ssm_proj_bias)
    return in_proj + conv + 3 * s.n_heads + s.d_inner + out


def indexer_params(cfg: ModelConfig) -> int:
    """DeepSeek-V3.2's lightning indexer (DeepSeek's ``inference/model.py`` ``Indexer``): wq_b
    from the query latent, wk, k_norm (a LayerNorm: weight and bias), weights_proj; no biases."""
    ix, d = cfg.sparse_indexer, cfg.d_model
    q_in = cfg.q_lora_rank or d
    return q_in * ix.n_heads * ix.head_dim + d * ix.head_dim + 2 * ix.head_dim + d * ix.n_heads


def mla_params(cfg: ModelConfig) -> int:
    """Multi-head latent attention as HF ``DeepseekV3Attention`` stores it.

    Biases (``attention_bias``) sit on q_a_proj, kv_a_proj_with_mqa and o_proj only.
    """
    d, h = cfg.d_model, cfg.n_heads
    if cfg.q_lora_rank:
        query = (
            linear_params(d, cfg.q_lora_rank, bias=cfg.bias)  # q_a_proj
            + norm_params(cfg, cfg.q_lora_rank)  # q_a_layernorm
            + linear_params(cfg.q_lora_rank, h * cfg.qk_head_dim, bias=False)  # q_b_proj
        )
    else:
        query = linear_params(d, h * cfg.qk_head_dim, bias=False)  # q_proj
    latent = cfg.kv_lora_rank + cfg.qk_rope_head_dim
    key_value = (
        linear_params(d, latent, bias=cfg.bias)  # kv_a_proj_with_mqa
        + norm_params(cfg, cfg.kv_lora_rank)  # kv_a_layernorm
        + linear_params(cfg.kv_lora_rank, h * (cfg.qk_nope_head_dim + cfg.v_head_dim), bias=False)
    )
    out = linear_params(h * cfg.v_head_dim, d, bias=cfg.bias)  # o_proj
    return query + key_value + out


def ffn_params(cfg: ModelConfig, width: int, *, bias: bool | None = None) -> int:
    """One feed-forward of ``width``: SwiGLU gate, up, down; GELU or squared ReLU up, down.
    Biases: ``bias`` when given, else the model's (``bias`` or ``mlp_bias``)."""
    bias = cfg.bias or cfg.mlp_bias if bias is None else bias
    n_in = 2 if cfg.activation == "swiglu" else 1
    up = n_in * linear_params(cfg.d_model, width, bias=bias)
    return up + linear_params(width, cfg.d_model, bias=bias)


def expert_params(cfg: ModelConfig) -> int:
    """One routed expert (gpt-oss's carry biases: ``gate_up_proj_bias``, ``down_proj_bias``)."""
    return ffn_params(cfg, cfg.d_ff_expert, bias=cfg.bias or cfg.expert_bias)


def moe_params(cfg: ModelConfig) -> int:
    """One MoE feed-forward: router (with its bias, gpt-oss, or score-correction bias,
    DeepSeek-V3), every routed expert, the shared experts and their gate (Qwen2-MoE)."""
    e = cfg.n_experts
    router = cfg.d_model * e + e * (int(cfg.router_score_bias) + int(cfg.router_bias))
    shared = 0
    if cfg.n_shared_experts:
        shared = ffn_params(cfg, cfg.n_shared_experts * cfg.d_ff_expert)
        shared += cfg.d_model if cfg.shared_expert_gate else 0  # Linear(d, 1, bias=False)
    return router + e * expert_params(cfg) + shared


FFN_PARAMS = {
    "dense": lambda cfg: ffn_params(cfg, cfg.d_ff),
    "moe": moe_params,
    "none": lambda cfg: 0,
}


def layer_params(cfg: ModelConfig, layer: int) -> int:
    """Block ``layer``: its norms (``norms_per_block``), its mixer and its feed-forward, each
    of the kind ``layer_kinds`` gives the layer."""
    norms = cfg.norms_per_block * norm_params(cfg, cfg.d_model)
    mixer = attention_params(cfg, cfg.layer_kind(layer))
    return norms + mixer + FFN_PARAMS[cfg.ffn_kind(layer)](cfg)


def mtp_params(cfg: ModelConfig) -> int:
    """DeepSeek-V3's multi-token-prediction modules as its checkpoint stores them (layer 61 of
    ``deepseek-ai/DeepSeek-V3``): enorm, hnorm, eh_proj (2d -> d), one MoE block, the shared
    head's norm, and its own copies of the token table and the head. Not part of ``total``."""
    if not cfg.mtp_layers:
        return 0
    d = cfg.d_model
    block = layer_params(cfg, cfg.n_layers - 1)
    tables = 2 * cfg.vocab_size * d
    return cfg.mtp_layers * (3 * norm_params(cfg, d) + 2 * d * d + block + tables)


def embedding_params(cfg: ModelConfig) -> int:
    """Token and learned-position tables; for vision, patch conv, class token and positions."""
    d = cfg.d_model
    positions = cfg.seq_len_default * d if cfg.position == "learned" else 0
    if cfg.is_vision:
        patch_conv = cfg.n_channels * cfg.patch_size**2 * d  # CLIP: Conv2d(bias=False)
        return patch_conv + d + positions  # + class_embedding
    return cfg.vocab_size * d + positions


def lm_head_params(cfg: ModelConfig) -> int:
    """The output projection to the vocabulary; none when tied or for a vision encoder."""
    if cfg.is_vision or cfg.tied_embeddings:
        return 0
    return cfg.vocab_size * cfg.d_model


def final_norm_params(cfg: ModelConfig) -> int:
    """The final norm; a CLIP vision tower has two (pre_layrnorm and post_layernorm)."""
    return (2 if cfg.is_vision else 1) * norm_params(cfg, cfg.d_model)


# --- a VLM's vision side ----------------------------------------------------------------------


def tower_params(cfg: ModelConfig) -> int:
    """Parameters of the vision side, exactly as HF stores them: encoder, projector and, for
    cross-attention, the cross-attention blocks and the extra token-table rows."""
    tower = cfg.vision_tower
    if tower is None:
        return 0
    cross = len(tower.cross_attention_layers) * cross_layer_params(cfg)
    rows = tower.extra_embedding_rows * cfg.d_model
    return encoder_params(tower) + projector_params(cfg) + cross + rows


def encoder_params(tower: VisionTower) -> int:
    """Patch embedding (no bias), the blocks, and the style's embeddings and norms."""
    enc = tower.encoder
    d = enc.d_model
    patch = enc.n_channels * tower.temporal_patch * enc.patch_size**2 * d
    blocks = (enc.n_layers + tower.global_layers) * layer_params(enc, 0)
    if tower.style == "inline" and tower.siglip:  # Gemma 3's SigLIP: patch bias, positions,
        return patch + d + enc.n_patches * d + blocks + norm_params(enc, d)  # post_layernorm
    if tower.style == "inline":  # Qwen2-VL: 2D RoPE, no position table, no pre/post norm
        return patch + blocks
    # Mllama: class embedding; gated position embedding (table, per-aspect-ratio tile table,
    # gate); pre- and post-tile aspect-ratio embeddings (table and gate each); two norms; a
    # gate_attn and a gate_ffn per global layer; its blocks' q, k, v, o have no bias (the
    # encoder's bias=False) but fc1 and fc2 do
    tiles, n = tower.max_tiles, tower.tokens_per_tile
    mlp_bias = (enc.n_layers + tower.global_layers) * (enc.d_ff + d)  # fc1, fc2 have biases
    position = n * d + tower.aspect_ratios * tiles * n * d + 1
    tile = 2 * (tower.aspect_ratios * tiles * d + 1)
    gates = 2 * tower.global_layers
    return patch + d + position + tile + 2 * norm_params(enc, d) + blocks + mlp_bias + gates


def projector_params(cfg: ModelConfig) -> int:
    """Qwen2-VL's merger (ln_q and a two-layer MLP, biases), Gemma 3's pooled projection or
    Mllama's one linear (bias)."""
    tower = cfg.vision_tower
    if tower.pool:  # Gemma3MultiModalProjector: mm_soft_emb_norm (RMSNorm), the projection
        return tower.encoder.d_model + tower.projector_in * cfg.d_model
    if tower.projector_hidden:
        return (norm_params(tower.encoder, tower.encoder.d_model)
                + linear_params(tower.projector_in, tower.projector_hidden, bias=True)
                + linear_params(tower.projector_hidden, cfg.d_model, bias=True))
    return linear_params(tower.projector_in, cfg.d_model, bias=True)


def cross_layer_params(cfg: ModelConfig) -> int:
    """One Mllama cross-attention block: a decoder block's norms, projections and MLP, plus
    q_norm and k_norm over a head and the attention and MLP gates."""
    return layer_params(cfg, 0) + 2 * norm_params(cfg, cfg.head_dim) + 2
