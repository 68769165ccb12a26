"""What a transformer is: the shape of a dense or MoE decoder, or of a ViT encoder.

``ModelConfig`` is a plain, frozen description; it computes nothing but the derived sizes below.
It covers the architectures of the catalogue (``presets.py``) and of the Hugging Face
``config.json`` files that ``hf_config.py`` reads:

- attention: multi-head (MHA), grouped-query (GQA, Ainslie et al. 2023), multi-query (MQA,
  Shazeer 2019) and DeepSeek's multi-head latent attention (MLA, DeepSeek-V2 report,
  arXiv:2405.04434, section 2.1), whose queries and keys have ``qk_nope_head_dim +
  qk_rope_head_dim`` elements per head and whose values ``v_head_dim``;
- feed-forward: SwiGLU (three matrices, Shazeer 2020) or GELU (two matrices, GPT-2/3, ViT);
- mixture of experts: ``n_experts`` routed experts of width ``d_ff_expert``, ``top_k`` of them
  per token, ``n_shared_experts`` always-on experts of the same width (DeepSeekMoE), after
  ``n_dense_layers`` leading dense layers and on every ``moe_layer_freq``-th layer after that,
  exactly as DeepSeek's ``modeling_deepseek.py`` decides it (``layer >= first_k_dense_replace
  and layer % moe_layer_freq == 0``);
- sliding-window attention: with ``sliding_window`` W > 0 a windowed block's queries attend to
  the W most recent keys only and its cache keeps W tokens a sequence (Mistral 7B, Jiang et al.
  2023, sec. 2); hybrid models interleave ``local_per_global`` windowed blocks with one
  full-attention block (Gemma 2: 1, every other block, Gemma Team 2024 sec. 2; Gemma 3: 5,
  Gemma Team 2025 sec. 2.1); 0 windows every block (Mistral);
- per-layer kinds: ``layer_types`` names each block's mixer (full, sliding, chunked, NoPE,
  gated-DeltaNet linear attention, Mamba-2, DeepSeek sparse attention, none) and ``ffn_types``
  its feed-forward; ``layer_kinds.py`` defines them and validates every field of this class
  that concerns the layout (MoE, MLA, windows, kinds);
- vision: a CLIP-style ViT encoder (Radford et al. 2021; Dosovitskiy et al. 2021) cutting an
  ``image_size`` square into ``patch_size`` patches plus one class token;
- vision-language: a language model carrying a ``VisionTower``: a ViT, a projector, and image
  tokens inline in the prompt or behind cross-attention layers (``workloads.vision`` describes
  the two styles and lists their operators);
- the structure a ``config.json`` states beyond the shape, in the last block of fields (biases,
  q/k norms, norms per block, sinks, soft-capping, MTP modules, expert weight format; checked in
  ``structure.py``).

Variants are made with ``dataclasses.replace``; every invalid combination is a ``GpuplanError``
that prints the numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuplan.errors import GpuplanError, check_choice, check_positive, check_whole
from gpuplan.workloads.images import Images
from gpuplan.workloads.layer_kinds import (
    LinearAttention,
    Mamba2,
    SparseIndexer,
    check_layer_kinds,
    check_mla,
    check_moe,
    derived_ffn_kind,
    derived_layer_kinds,
    require_unset,
)
from gpuplan.workloads.structure import check_field_types, check_structure

NORMS = ("rmsnorm", "layernorm")
ACTIVATIONS = ("swiglu", "gelu", "relu2")  # relu2: squared ReLU, two matrices (Nemotron-H)
POSITIONS = ("rope", "learned", "none")
STYLES = ("inline", "cross-attention")  # how a vision tower's image tokens reach the LM


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelConfig:
    """A transformer: dense or MoE decoder; MHA, GQA, MQA or MLA attention; or a ViT encoder."""

    name: str
    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    d_ff: int  # dense FFN width (for MoE models: the dense layers' width)
    vocab_size: int  # 0 for a vision encoder
    d_head: int | None = None  # None -> d_model // n_heads (see head_dim)
    norm: str = "rmsnorm"  # "rmsnorm" | "layernorm"
    activation: str = "swiglu"  # "swiglu" (3 matrices) | "gelu", "relu2" (2 matrices)
    bias: bool = False  # biases on every linear layer (GPT-2/3, ViT)
    qkv_bias: bool = False  # biases on the q, k, v projections only (Qwen2)
    tied_embeddings: bool = False
    position: str = "rope"  # "rope" | "learned" | "none"
    max_seq_len: int = 4096  # learned position table size; also the default sequence
    # mixture of experts (n_experts == 0 -> dense)
    n_experts: int = 0
    top_k: int = 0
    n_shared_experts: int = 0
    d_ff_expert: int = 0  # width of one routed (and one shared) expert
    n_dense_layers: int = 0  # leading dense layers (DeepSeek first_k_dense_replace)
    moe_layer_freq: int = 1
    router_score_bias: bool = False  # a per-expert score bias (DeepSeek-V3 noaux_tc routing)
    # multi-head latent attention (kv_lora_rank == 0 -> not MLA)
    q_lora_rank: int = 0  # 0 -> no query compression
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    # sliding-window attention (0 -> full attention in every block)
    sliding_window: int = 0
    local_per_global: int = 0  # windowed blocks before each full one; 0: every block windowed
    # per-layer kinds (workloads/layer_kinds.py)
    layer_types: tuple[str, ...] = ()  # mixer kind per layer; () -> derived from the window
    ffn_types: tuple[str, ...] = ()  # "dense" | "moe" | "none" per layer; () -> MoE layout
    attention_chunk_size: int = 0  # Llama 4's chunked local attention ("chunked" layers)
    linear_attention: LinearAttention | None = None  # gated DeltaNet ("linear" layers)
    ssm: Mamba2 | None = None  # Mamba-2 SSD mixer ("mamba2" layers)
    sparse_indexer: SparseIndexer | None = None  # DeepSeek-V3.2 indexer ("dsa" layers)
    # vision encoder (patch_size == 0 -> text decoder)
    causal: bool = True
    patch_size: int = 0
    image_size: int = 0
    n_channels: int = 3
    # vision-language model: this config is its language model; the tower adds the images
    vision_tower: VisionTower | None = None
    source: str = ""  # where the numbers come from
    # structure read from config.json (hf reader; checked in workloads/structure.py)
    attention_bias: bool = False  # biases on q, k, v and o (gpt-oss; Llama's attention_bias)
    mlp_bias: bool = False  # biases on the dense MLPs' projections (Llama's mlp_bias)
    qk_norm: str = ""  # "" | "head": RMSNorm over each head (Qwen3) | "all": over all (OLMo 2)
    norms_per_block: int = 2  # 4: Gemma 2/3 sandwich norms; 1: one norm a layer (Mamba-2)
    attention_sinks: bool = False  # one learned sink logit per head (gpt-oss)
    attn_output_gate: bool = False  # q_proj also gives a sigmoid gate on the output (Qwen3-Next)
    attn_logit_softcap: float = 0.0  # tanh soft-capping of attention logits; 0: none (Gemma 2)
    final_logit_softcap: float = 0.0  # the same on the LM head's logits
    embedding_scale: float = 1.0  # token embeddings are multiplied by this (Gemma: sqrt(d))
    router_bias: bool = False  # the router's linear has a bias (gpt-oss)
    expert_bias: bool = False  # every routed expert's projections have biases (gpt-oss)
    shared_expert_gate: bool = False  # a sigmoid gate on the shared expert (Qwen2-MoE)
    ssm_conv_bias: bool = False  # the Mamba-2 convolution's bias (use_conv_bias)
    ssm_proj_bias: bool = False  # biases on the Mamba-2 in_proj and out_proj (use_bias)
    mtp_layers: int = 0  # multi-token-prediction modules beside the model (DeepSeek-V3)
    expert_weight_dtype: str = ""  # "": as the other weights; "mxfp4" (gpt-oss's experts)
    # the format the published checkpoint stores its linear weights in, which engines serve
    # as is ("": 16-bit; "fp8": DeepSeek-V3's and Kimi-K2's block-wise FP8 e4m3, 128x128 scales)
    checkpoint_weight_dtype: str = ""

    def __post_init__(self) -> None:
        check_field_types(self)
        self._check_sizes()
        self._check_choices()
        self._check_heads()
        check_layer_kinds(self)
        check_moe(self)
        check_mla(self)
        self._check_vision()
        check_structure(self)

    # --- validation -------------------------------------------------------------------------

    def _field(self, field: str) -> str:
        return f"{self.name}: {field}"

    def _check_sizes(self) -> None:
        for field in ("n_layers", "d_model", "n_heads", "n_kv_heads", "d_ff", "max_seq_len"):
            check_positive(self._field(field), getattr(self, field))
        check_positive(self._field("vocab_size"), self.vocab_size, allow_zero=True)
        if self.d_head is not None:
            check_positive(self._field("d_head"), self.d_head)

    def _check_choices(self) -> None:
        check_choice(self._field("norm"), self.norm, NORMS)
        check_choice(self._field("activation"), self.activation, ACTIVATIONS)
        check_choice(self._field("position"), self.position, POSITIONS)

    def _check_heads(self) -> None:
        if self.n_heads % self.n_kv_heads:
            raise GpuplanError(
                f"{self.name}: n_heads={self.n_heads} is not a multiple of "
                f"n_kv_heads={self.n_kv_heads}"
            )
        if self.d_head is None and not self.is_mla and self.d_model % self.n_heads:
            raise GpuplanError(
                f"{self.name}: d_model={self.d_model} is not a multiple of "
                f"n_heads={self.n_heads}; give d_head explicitly"
            )

    def _check_vision(self) -> None:
        for field in ("patch_size", "image_size"):
            check_positive(self._field(field), getattr(self, field), allow_zero=True)
        if not self.is_vision:
            require_unset(self, "patch_size=0 (text decoder)", ("image_size",))
            check_positive(self._field("vocab_size"), self.vocab_size)
            return
        check_positive(self._field("image_size"), self.image_size)
        check_positive(self._field("n_channels"), self.n_channels)
        if self.image_size % self.patch_size:
            raise GpuplanError(
                f"{self.name}: image_size={self.image_size} is not a multiple of "
                f"patch_size={self.patch_size}"
            )
        if self.vocab_size:
            raise GpuplanError(
                f"{self.name}: vocab_size={self.vocab_size} is invalid for a vision encoder "
                f"(patch_size={self.patch_size}): it must be 0"
            )

    def layer_kind(self, layer: int) -> str:
        """The mixer kind of block ``layer`` (0-based): ``layer_kinds.MIXER_KINDS``."""
        return self.layer_kinds[self._layer(layer)]

    @property
    def layer_kinds(self) -> tuple[str, ...]:
        """Every block's mixer kind; derived from the window fields when layer_types is empty."""
        return derived_layer_kinds(self)

    def ffn_kind(self, layer: int) -> str:
        """The feed-forward kind of block ``layer``: "dense", "moe" or "none"."""
        return derived_ffn_kind(self, self._layer(layer))

    def is_windowed_layer(self, layer: int) -> bool:
        """Whether block ``layer`` (0-based) attends through the sliding window."""
        return self.layer_kind(layer) == "sliding"

    @property
    def n_windowed_layers(self) -> int:
        return self.layer_kinds.count("sliding")  # one derivation, not one per layer

    # --- derived sizes ----------------------------------------------------------------------

    @property
    def head_dim(self) -> int:
        """Elements per attention head: d_head, else v_head_dim for MLA, else d_model / n_heads."""
        if self.d_head is not None:
            return self.d_head
        if self.is_mla:
            return self.v_head_dim
        return self.d_model // self.n_heads

    @property
    def qk_head_dim(self) -> int:
        """Elements per head of a query and a key (MLA: no-position part plus RoPE part)."""
        if self.is_mla:
            return self.qk_nope_head_dim + self.qk_rope_head_dim
        return self.head_dim

    @property
    def v_dim_per_head(self) -> int:
        """Elements per head of a value (MLA: v_head_dim)."""
        return self.v_head_dim if self.is_mla else self.head_dim

    @property
    def is_moe(self) -> bool:
        return self.n_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def is_vision(self) -> bool:
        return self.patch_size > 0

    @property
    def is_vlm(self) -> bool:
        """A language model with a vision tower (image tokens join its prefill)."""
        return self.vision_tower is not None

    @property
    def attention_kind(self) -> str:
        """ "mla", "mha" (one KV head per query head), "mqa" (one KV head) or "gqa"."""
        if self.is_mla:
            return "mla"
        if self.n_kv_heads == self.n_heads:
            return "mha"
        if self.n_kv_heads == 1:
            return "mqa"
        return "gqa"

    def is_moe_layer(self, layer: int) -> bool:
        """Whether block ``layer`` (0-based) has an MoE feed-forward (DeepSeek's rule, or
        ffn_types when given)."""
        return self.ffn_kind(layer) == "moe"

    def _layer(self, layer: int) -> int:
        check_whole("layer", layer, low=0)
        if not 0 <= layer < self.n_layers:
            raise GpuplanError(
                f"{self.name}: layer={layer} is invalid: choose 0 to {self.n_layers - 1}"
            )
        return layer

    @property
    def n_moe_layers(self) -> int:
        return sum(self.is_moe_layer(layer) for layer in range(self.n_layers))

    @property
    def n_patches(self) -> int:
        """Image patches of a vision encoder, (image_size / patch_size)^2; 0 for text."""
        return (self.image_size // self.patch_size) ** 2 if self.is_vision else 0

    @property
    def seq_len_default(self) -> int:
        """Tokens of one sequence: vision, the patches plus one class token; text, max_seq_len."""
        return self.n_patches + 1 if self.is_vision else self.max_seq_len


@dataclass(frozen=True, slots=True, kw_only=True)
class VisionTower:
    """A VLM's encoder, projector and fusion style (the styles: ``workloads.vision``)."""

    encoder: ModelConfig  # the ViT: patch size, default image (tile) size, layers, width, heads
    style: str  # "inline" | "cross-attention"
    merge: int = 1  # spatial merge: merge x merge patches become one token (Qwen2-VL: 2)
    temporal_patch: int = 1  # frames one patch spans (Qwen2-VL: 2, an image repeated)
    class_token: bool = False  # one class token per tile (Mllama)
    max_tiles: int = 1  # tiles an image is cut into, at most (Mllama: 4)
    global_layers: int = 0  # Mllama's gated global encoder layers after the local ones
    intermediate_layers: int = 0  # encoder states concatenated into the projector (Mllama: 5)
    aspect_ratios: int = 0  # Mllama's supported aspect ratios (embedding tables of 9 rows)
    projector_hidden: int = 0  # 0: one linear to the LM width; else an MLP of this width
    cross_attention_layers: tuple[int, ...] = ()  # positions in the full stack (HF indices)
    extra_embedding_rows: int = 0  # token-table rows beyond vocab_size (Mllama: 8)
    siglip: bool = False  # SigLIP encoder: patch bias, a position table, a post-norm (Gemma 3)
    pool: bool = False  # merge^2 patches averaged, RMSNorm, one linear (Gemma 3's projector)

    def __post_init__(self) -> None:
        name = self.encoder.name
        check_choice(f"{name}: style", self.style, STYLES)
        if not self.encoder.is_vision:
            raise GpuplanError(f"{name}: a vision tower's encoder needs patch_size > 0")
        for field in ("merge", "temporal_patch", "max_tiles"):
            check_positive(f"{name}: {field}", getattr(self, field))
        if (self.style == "cross-attention") != bool(self.cross_attention_layers):
            raise GpuplanError(f"{name}: style={self.style!r} and cross_attention_layers="
                               f"{self.cross_attention_layers} disagree: cross-attention needs "
                               "them, inline has none")

    @property
    def patch_multiple(self) -> int:
        """What each image side must be a multiple of (inline: patch x merge)."""
        return self.encoder.patch_size * self.merge

    @property
    def tokens_per_tile(self) -> int:
        return self.encoder.n_patches + int(self.class_token)

    @property
    def projector_in(self) -> int:
        """Features per token entering the projector."""
        if self.style == "inline":
            return self.encoder.d_model * (1 if self.pool else self.merge**2)
        return self.encoder.d_model * (1 + self.intermediate_layers)

    def check(self, images: Images) -> None:
        """Raise when the images cannot be cut as this tower cuts them."""
        if self.style != "inline":
            return
        m = self.patch_multiple
        for field in ("width", "height"):
            value = getattr(images, field)
            if value % m:
                patch = self.encoder.patch_size
                raise GpuplanError(
                    f"image {field}={value} is not a multiple of {m} (patch {patch} x merge "
                    f"{self.merge}): give the size the processor resizes it to, e.g. "
                    f"{max(m, value // m * m)}")

    def tiles(self, images: Images) -> int:
        """Tiles per image (cross-attention style): the tiles covering it, at most max_tiles."""
        t = self.encoder.image_size
        return min(self.max_tiles, math.ceil(images.width / t) * math.ceil(images.height / t))

    def patches_per_image(self, images: Images) -> int:
        p = self.encoder.patch_size
        if self.style == "inline":
            return (images.width // p) * (images.height // p)
        return self.tiles(images) * self.encoder.n_patches

    def encoder_tokens_per_image(self, images: Images) -> int:
        """Tokens one image's encoder attention runs over (patches, class tokens)."""
        if self.style == "inline":
            return self.patches_per_image(images)
        return self.tiles(images) * self.tokens_per_tile

    def image_tokens(self, images: Images) -> int:
        """Tokens the language model receives for these images: prompt tokens (inline) or
        cross-attention keys and values (cross-attention)."""
        self.check(images)
        if not images.count:
            return 0
        if self.style == "inline":
            return images.count * self.patches_per_image(images) // self.merge**2
        return images.count * self.encoder_tokens_per_image(images)
