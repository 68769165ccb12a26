"""The vision side of a vision-language model (VLM): a ViT encoder, a projector, and the way its
image tokens reach the language model.

Two styles, as the published models build them:

- ``inline`` (Qwen2-VL, Wang et al. 2024, arXiv:2409.12191, sec. 2.1; HF
  ``Qwen2VLForConditionalGeneration``): an image of H x W pixels is cut into (H/14)(W/14)
  patches (``Conv3d`` over two copies of the frame, ``temporal_patch_size`` 2), the ViT runs
  over each image's patches with full (non-causal) attention, and the merger (``ln_q``, then
  an MLP over every 2 x 2 block of patches: 4 x 1280 -> 5120 -> 3584) leaves
  (H/14)(W/14)/4 tokens that replace the image placeholders in the prompt: the prefill grows by
  them and the KV cache holds them like any prompt token. The image side must be a multiple of
  28 (patch x merge; the processor's ``smart_resize`` rounds to it: give the resized size).
- ``cross-attention`` (Llama 3.2 Vision, HF ``MllamaForConditionalGeneration``; Meta's model
  card): an image is resized onto up to ``max_tiles`` = 4 tiles of 560 x 560; each tile gives
  (560/14)^2 = 1600 patches and a class token, 1601 tokens; a 32-layer local encoder and an
  8-layer gated global encoder run over all the tiles of an image at once, and the projector
  maps the concatenation of the final and five intermediate layers' states (6 x 1280 = 7680)
  to the LM width. The prompt does not grow: cross-attention layers inserted among the
  language model's blocks (``cross_attention_layers``) attend from the text tokens to the
  image tokens, whose keys and values each such layer computes once per request and keeps in
  the cache. With no image a request skips them (vLLM's ``MllamaForConditionalGeneration``,
  ``skip_cross_attention``), so the model is then its 32 self-attention blocks.

Here the ``ModelConfig`` of a VLM is its language model (for Llama 3.2 Vision: the self-attention
blocks) with a ``VisionTower`` (``workloads.model``; its parameters: ``workloads.params``):
everything that prices text alone prices the VLM with no image. This module checks a
sequence's images against the tower and lists the operators of its encoder, projector and
cross-attention blocks.

Not modelled: video (Qwen2-VL's temporal frames), Mllama's padding of 1601 tokens to 1608 and of
absent tiles (HF pads to ``max_num_tiles``; vLLM runs the tiles present), the scalar gates.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gpuplan.errors import GpuplanError, expects
from gpuplan.workloads.attention_block import attention_block
from gpuplan.workloads.dtypes import dtype_bytes
from gpuplan.workloads.feed_forward import mlp_block
from gpuplan.workloads.images import Images
from gpuplan.workloads.model import ModelConfig, VisionTower
from gpuplan.workloads.operators import layer_forward
from gpuplan.workloads.ops import Attention, Collective, Elementwise, Gemm, Memory, Op

OpGroup = tuple[list[Op], int]  # operators and how many identical blocks run them


def check_images(cfg: ModelConfig, images: Images | None) -> None:
    """Images for a text-only model, or of a size the tower cannot cut, are an error."""
    if images is None or not images.count:
        return
    if cfg.vision_tower is None:
        raise GpuplanError(f"{cfg.name} is a text-only model: it takes no images (images="
                           f"{images.count}); choose a vision-language model, e.g. qwen2-vl-7b "
                           "or llama3.2-11b-vision")
    cfg.vision_tower.check(images)


def default_image_size(cfg: ModelConfig) -> tuple[int, int]:
    """(width, height) when none is given: the encoder's square (one tile for Mllama); for a
    text-only model, the error that it takes no images."""
    if cfg.vision_tower is None:
        check_images(cfg, Images(count=1, width=1, height=1))  # raises: a text-only model
    side = cfg.vision_tower.encoder.image_size
    return side, side


@expects(cfg="ModelConfig", images=("Images", None))
def image_tokens(cfg: ModelConfig, images: Images | None) -> int:
    """Image tokens of one sequence (0 without images)."""
    check_images(cfg, images)
    if images is None or not images.count:
        return 0
    return cfg.vision_tower.image_tokens(images)


# --- operators ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EncoderWork:
    """What the encoder runs over for one sequence: images, patches and tokens of each."""

    images: int
    patches_per_image: int
    tokens_per_image: int  # its attention's sequence (patches, plus class tokens)

    @classmethod
    def of(cls, tower: VisionTower, images: Images) -> EncoderWork:
        tower.check(images)
        return cls(images.count, tower.patches_per_image(images),
                   tower.encoder_tokens_per_image(images))

    @classmethod
    def from_image_tokens(cls, tower: VisionTower, images: int, image_tokens: int) -> EncoderWork:
        """The work behind ``image_tokens`` LM tokens of ``images`` equal images (a trace's
        column): inline, merge^2 patches a token; cross-attention, whole tiles of tokens."""
        per = image_tokens // images
        if tower.style == "inline":
            return cls(images, per * tower.merge**2, per * tower.merge**2)
        tiles = max(1, round(per / tower.tokens_per_tile))
        return cls(images, tiles * tower.encoder.n_patches, per)


def encoder_forward(cfg: ModelConfig, work: EncoderWork, *, seqs: int = 1,
                    dtype: str = "bf16", tp: int = 1) -> list[OpGroup]:
    """The encoder and projector over the images of ``seqs`` sequences: patch embedding (a
    GEMM over unfolded pixels), the ViT blocks (attention within each image; under ``tp``
    Megatron-split with two all-reduces each, as vLLM's Qwen2-VL and Mllama encoders run), the
    merge or concatenation, and the projector to the LM width (replicated)."""
    tower = cfg.vision_tower
    enc, n_img = tower.encoder, seqs * work.images
    if not n_img:
        return []
    per_image = work.tokens_per_image
    t, patches = n_img * per_image, n_img * work.patches_per_image
    pixels = enc.n_channels * tower.temporal_patch * enc.patch_size**2
    groups: list[OpGroup] = [([Gemm(name="vision.patch_embed", m=patches, n=enc.d_model,
                                    k=pixels, dtype=dtype)], 1)]
    if tower.style == "cross-attention":  # class token, tile and position embeddings, pre-norm
        groups.append(([_ew("vision.embed_adds", "add", t, enc.d_model, dtype, count=3),
                        _ew("vision.layernorm_pre", enc.norm, t, enc.d_model, dtype)], 1))
    block = layer_forward(enc, batch=n_img, seq=per_image, dtype=dtype, tp=tp)
    if tp > 1:
        block.append(Collective(name="tp all_reduce", op="all_reduce", world=tp,
                                bytes_per_rank=t * enc.d_model * dtype_bytes(dtype), count=2))
    groups.append(([_named(op, "vision.") for op in block], enc.n_layers + tower.global_layers))
    return groups + [(_projector(cfg, t, dtype), 1)]


def _projector(cfg: ModelConfig, tokens: int, dtype: str) -> list[Op]:
    tower = cfg.vision_tower
    enc, d_in = tower.encoder, tower.projector_in
    if tower.pool:  # Gemma 3: post-norm, average over merge x merge patches, RMSNorm, linear
        merged = tokens // tower.merge**2
        return [_ew("vision.layernorm_post", enc.norm, tokens, enc.d_model, dtype),
                _ew("vision.avg_pool", "add", tokens, enc.d_model, dtype),
                _ew("vision.soft_emb_norm", "rmsnorm", merged, d_in, dtype),
                Gemm(name="vision.projector", m=merged, n=cfg.d_model, k=d_in, dtype=dtype)]
    if tower.style == "inline":  # Qwen2VL PatchMerger: ln_q, then MLP over 2x2 patches
        merged = tokens // tower.merge**2
        return [_ew("vision.merger_norm", enc.norm, tokens, enc.d_model, dtype),
                Gemm(name="vision.merger_fc1", m=merged, n=tower.projector_hidden, k=d_in,
                     dtype=dtype),
                _ew("vision.merger_gelu", "gelu", merged, tower.projector_hidden, dtype),
                Gemm(name="vision.merger_fc2", m=merged, n=cfg.d_model,
                     k=tower.projector_hidden, dtype=dtype)]
    return [_ew("vision.layernorm_post", enc.norm, tokens, enc.d_model, dtype),
            _ew("vision.concat_states", "copy", tokens, d_in, dtype),
            Gemm(name="vision.projector", m=tokens, n=cfg.d_model, k=d_in, dtype=dtype)]


def cross_kv_forward(cfg: ModelConfig, *, image_tokens: int, dtype: str = "bf16",
                     kv_dtype: str = "bf16", tp: int = 1) -> list[OpGroup]:
    """Each cross-attention layer's keys and values of the image tokens (k/v projections and
    Mllama's k_norm), written into the cache once per request."""
    if not image_tokens:
        return []
    width = max(1, cfg.n_kv_heads // tp) * cfg.head_dim
    e = dtype_bytes(kv_dtype)
    ops: list[Op] = [
        Gemm(name="cross_attn.kv_proj", m=image_tokens, n=2 * width, k=cfg.d_model, dtype=dtype),
        _ew("cross_attn.k_norm", "rmsnorm", image_tokens, width, dtype),
        # K and V (2 x width each) read from the projection and written into the cache (2 x),
        # as the prefill's own ``kv_cache_write``; one copy call each for K and V
        Memory(name="cross_attn.kv_cache_write", op="copy", bytes_moved=2 * image_tokens * 2 *
               width * e, calls=2),
    ]
    return [(ops, len(cfg.vision_tower.cross_attention_layers))]


def cross_layer_forward(cfg: ModelConfig, *, seqs: int, tokens_per_seq: float, image_tokens: int,
                        dtype: str = "bf16", tp: int = 1) -> list[OpGroup]:
    """The cross-attention blocks over ``seqs`` sequences' text tokens attending to their
    ``image_tokens`` each (Mllama ``MllamaCrossAttentionDecoderLayer``: norm, q_proj, q_norm,
    attention to the cached image keys and values, o_proj, gated residual, norm, MLP, gated
    residual)."""
    if not image_tokens or not seqs:
        return []
    t = max(1, round(seqs * tokens_per_seq))
    att = [op for op in attention_block(cfg, batch=seqs, seq_q=max(1, round(tokens_per_seq)),
                                        seq_kv=image_tokens, dtype=dtype, tp=tp, causal=False)
           if not (isinstance(op, Elementwise) and op.op == "rope")]
    q_width = (cfg.n_heads // tp) * cfg.head_dim
    q_only = [replace(op, name="q_proj", n=q_width) if op.name == "qkv_proj" else op for op in att]
    q_only = [replace(op, seq_q=tokens_per_seq) if isinstance(op, Attention) else op
              for op in q_only]
    ops: list[Op] = [_ew("input_layernorm", cfg.norm, t, cfg.d_model, dtype), *q_only[:1],
                     _ew("q_norm", "rmsnorm", t, q_width, dtype), *q_only[1:],
                     _ew("attn_gate_residual", "add", t, cfg.d_model, dtype),
                     _ew("post_attention_layernorm", cfg.norm, t, cfg.d_model, dtype),
                     *mlp_block(cfg, tokens=t, dtype=dtype, tp=tp),
                     _ew("mlp_gate_residual", "add", t, cfg.d_model, dtype)]
    named = [_named(op, "cross_attn.") for op in ops]
    return [(named, len(cfg.vision_tower.cross_attention_layers))]


def _ew(name: str, op: str, tokens: int, hidden: int, dtype: str, *, count: int = 1) -> Elementwise:
    return Elementwise(name=name, op=op, tokens=tokens, hidden=hidden, pass_="fwd", dtype=dtype,
                       count=count)


def _named(op: Op, prefix: str) -> Op:
    return op if op.name.startswith(prefix) else replace(op, name=prefix + op.name)
