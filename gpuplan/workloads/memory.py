"""Memory of a model: weights, gradients, optimizer state, activations kept for backward, KV cache.

Training state per parameter (Rajbhandari et al. 2020, ZeRO, sec. 3.1, for Adam):
- ``bf16-mixed`` as torch autocast runs it (the record contract's precision): fp32 weights that
  are also the master copy (4 B), fp32 gradients (4 B), Adam's two fp32 moments (8 B): 16 B.
- ``bf16-mixed-megatron`` (Megatron-LM's mixed precision, ZeRO's 2 + 2 + 12 accounting with fp32
  gradient accumulation): bf16 weights (2), fp32 main gradients (4), fp32 master weights and
  moments (12): 18 B.
- ``bf16-grads-megatron``: Megatron's with its gradient buffer in bf16 (2 + 2 + 12 = 16 B):
  Megatron-Core's ``DistributedDataParallelConfig(grad_reduce_in_fp32=False)``, its default, keeps
  the main-gradient buffer in the parameters' dtype (NeMo's performance recipes set
  ``grad_reduce_in_fp32 = False``, e.g. nemo/collections/llm/recipes/gpt3_175b.py
  ``pretrain_recipe_performance``); apex's ``DistributedFusedAdam`` allocates its contiguous
  gradient buffer in ``grad_sync_dtype`` (apex/contrib/optimizers/distributed_fused_adam.py), bf16
  in MLPerf's NeMo GPT-3 (conf/optim/distributed_fused_adam.yaml ``grad_sync_dtype: bf16``).
- ``bf16``: everything in bf16: 2 + 2 + 4 = 8 B.
- ``bf16-deepspeed`` (DeepSpeed's BF16_Optimizer, Megatron-DeepSpeed's bf16 with ZeRO stage 0, as
  BLOOM trained): bf16 weights (2), their bf16 ``.grad`` and a whole fp32 gradient buffer
  (2 + 4: ``fp32_groups_gradients_flat`` is ``zeros_like`` the bf16 group, unsharded), fp32
  master weights and moments (12) on each rank's partition only (its own ZeRO-1):
  deepspeed/runtime/bf16_optimizer.py; the 4 unsharded bytes are BigScience's ("4bytes x params
  and it's not sharded", bigscience train/tr11-176B-ml/chronicles-prequel.md).
- ``bf16-deepspeed-2022``: that optimizer as first written, which BLOOM's 2022 runs used (the
  bigscience bf16-updates branch): it cloned the whole flat bf16 group to fp32 and stepped a
  narrow view of it (``fp32_groups_flat = bf16_groups_flat.clone().float()``, "TODO: Need to
  only track fp32 params of this partition"), so the fp32 master weights are whole (6 B with the
  bf16 weights) and only the moments (8) are sharded; microsoft/DeepSpeed 56c522386 (#1801,
  2022-04-19) merged the partition-only master copy of ``bf16-deepspeed``.

Activations kept for the backward of one block, per token, derived by listing the tensors that
autograd saves in the Hugging Face Llama/GPT-2 modules with a flash attention kernel (no s x s
score matrix is stored: Dao et al. 2022). With e bytes per element, h = d_model, f = FFN width,
q/kv the query/key-value widths (heads x head_dim), tp the tensor-parallel degree:

- outside the tensor-parallel region (divided by tp only under sequence parallelism):
  the attention-norm input h, the q/k/v projection input h, the MLP-norm input h, the MLP input
  h (4 h e), plus one fp32 reciprocal-RMS per norm and token (8 B); GPT-style dropout keeps a
  one-byte mask after each residual branch (2 h).
- inside it (divided by tp): the fused q/k/v projection's output (q + 2 kv: v is a view of it,
  which keeps the whole buffer alive), the rotated q and k that RoPE writes and flash attention
  saves (q + kv; none without RoPE), the attention output and its fp32 log-sum-exp, the
  contiguous copy of the output that feeds the output projection; SwiGLU's fused gate/up output
  (2 f: gate and up are views of it) and the product fed to the down projection (f), plus, in
  eager PyTorch, silu(gate), which the multiply saves (f); GELU's input and output (2 f).
- the structural extras (docs/hf_families.md): q/k norms keep their outputs, RoPE's inputs
  (q + kv); Qwen3-Next's output gate its gate and the gated product (q + out); Gemma 2/3's
  post-norms their inputs and fp32 statistics (outside the TP region: 2 h e + 8 B).
This mirrors Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer
Models", eq. 1-2: 34 s b h + 5 a s^2 b) with the attention-core terms gone. Full recomputation
keeps only each block's input (h e per token; Korthikanti sec. 4.1). Selective recomputation
recomputes the attention core, which a flash kernel already never stores, so it equals none here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuplan.errors import GpuplanError, check_choice, check_positive, check_whole, expects
from gpuplan.limits import MAX_DIM, MAX_GPUS
from gpuplan.workloads.dtypes import dtype_bytes
from gpuplan.workloads.layer_kinds import TOKEN_CACHE_KINDS
from gpuplan.workloads.model import ModelConfig

RECOMPUTE = ("none", "selective", "full")
ACT_BYTES = 2  # 16-bit activations
# bytes per parameter: (weights, gradients, optimizer state), see the module docstring
PRECISION_BYTES: dict[str, tuple[float, float, float]] = {
    "bf16-mixed": (4, 4, 8),
    "bf16-mixed-megatron": (2, 4, 12),
    "bf16-grads-megatron": (2, 2, 12),
    "bf16": (2, 2, 4),
    "bf16-deepspeed": (2, 6, 12),
    "bf16-deepspeed-2022": (6, 6, 8),
}


def kv_cache_bytes_per_token_layer(cfg: ModelConfig, dtype: str = "bf16") -> float:
    """KV-cache bytes one token adds in one block: K and V per KV head (MHA, GQA, MQA), or
    MLA's compressed latent plus its decoupled RoPE key (DeepSeek-V2 sec. 2.1.3)."""
    if cfg.is_mla:
        return (cfg.kv_lora_rank + cfg.qk_rope_head_dim) * dtype_bytes(dtype)
    return cfg.n_kv_heads * (cfg.qk_head_dim + cfg.v_dim_per_head) * dtype_bytes(dtype)


@expects(cfg="ModelConfig", dtype=str)
def kv_cache_bytes_per_token(cfg: ModelConfig, dtype: str = "bf16") -> float:
    """KV-cache bytes one token adds across all blocks that cache tokens (every such block
    keeping it: the bound of a sequence no longer than any window; ``kv_cache_bytes_per_sequence``
    for longer ones, and for the fixed state of linear-attention and Mamba-2 layers)."""
    return kv_layer_tokens_all(cfg, 1) * kv_cache_bytes_per_token_layer(cfg, dtype) + (
        cfg.layer_kinds.count("dsa") * indexer_bytes_per_token(cfg))


# DeepSeek-V3.2's indexer caches one key of ``index_head_dim`` elements a token in fp8 with one
# fp32 scale per 128 elements (``index_quant_block_size``): 128 + 4 = 132 bytes for the model's
# 128 (vLLM ``DeepseekV32IndexerCache``: ``head_dim + head_dim // quant_block_size * 4`` uint8;
# LightLLM ``Deepseek3_2MemoryManager``: fp8 keys, fp32 scales).
INDEXER_QUANT_BLOCK = 128
INDEXER_DTYPE = "fp8"  # the indexer's keys and queries (DeepSeek-V3.2-Exp: fp8 with scales)


def indexer_bytes_per_token(cfg: ModelConfig) -> float:
    """Indexer-cache bytes one token adds in one ``dsa`` block (0 without an indexer)."""
    if cfg.sparse_indexer is None:
        return 0
    d = cfg.sparse_indexer.head_dim
    scales = -(-d // INDEXER_QUANT_BLOCK)
    return d * dtype_bytes(INDEXER_DTYPE) + scales * dtype_bytes("fp32")


def kv_layer_tokens(cfg: ModelConfig, layer: int, tokens: float) -> float:
    """Tokens block ``layer`` keeps in its cache for a sequence of ``tokens``: all (full, NoPE,
    DeepSeek sparse attention, whose indexer must score every earlier key), the window (sliding:
    Mistral's rolling buffer, Jiang et al. 2023 sec. 2), the current chunk at most (chunked:
    Llama 4's local layers attend within their chunk, so vLLM keeps at most one chunk), and none
    for a layer with a fixed-size state (linear attention, Mamba-2) or no mixer."""
    return _kept(cfg, cfg.layer_kind(layer), tokens)


def _kept(cfg: ModelConfig, kind: str, tokens: float) -> float:
    if kind == "sliding":
        return min(tokens, cfg.sliding_window)
    if kind == "chunked":
        return min(tokens, cfg.attention_chunk_size)
    return tokens if kind in TOKEN_CACHE_KINDS else 0


def kv_layer_tokens_all(cfg: ModelConfig, tokens: float) -> float:
    """``kv_layer_tokens`` summed over the blocks: token-layers of cache one sequence holds."""
    kinds = cfg.layer_kinds
    return sum(kinds.count(k) * _kept(cfg, k, tokens) for k in set(kinds))


def state_bytes_per_sequence(cfg: ModelConfig, dtype: str = "bf16") -> float:
    """Fixed-size recurrent state of one sequence over all blocks, whatever its length: gated
    DeltaNet's dk x dv matrix per value head plus its causal convolution's last ``conv_kernel -
    1`` inputs (Qwen3-Next, ``Qwen3NextGatedDeltaNet``), Mamba-2's ``n_heads x head_dim x
    state_size`` SSM state plus ``conv_kernel - 1`` inputs of its x/B/C convolution (Dao & Gu
    2024; HF ``Mamba2Mixer``). In ``dtype``: vLLM keeps both in the model's dtype unless told
    otherwise (``CacheConfig.mamba_cache_dtype = "auto"``, ``mamba_ssm_cache_dtype = "auto"``
    following it)."""
    kinds = cfg.layer_kinds
    elems = 0
    if cfg.linear_attention is not None:
        la = cfg.linear_attention
        elems += kinds.count("linear") * (la.state_elements + la.conv_state_elements)
    if cfg.ssm is not None:
        elems += kinds.count("mamba2") * (cfg.ssm.state_elements + cfg.ssm.conv_state_elements)
    return elems * dtype_bytes(dtype)


def kv_cache_bytes_per_sequence(cfg: ModelConfig, tokens: float, dtype: str = "bf16", *,
                                per_token_layer: float | None = None) -> float:
    """Cache bytes of one sequence of ``tokens`` tokens, layer kind by layer kind: each block's
    kept tokens (``kv_layer_tokens``) at ``per_token_layer`` bytes (the model's own layout by
    default: ``kv_cache_bytes_per_token_layer``), DeepSeek sparse attention's indexer keys, and
    the fixed state of linear-attention and Mamba-2 blocks (``state_bytes_per_sequence``)."""
    per = kv_cache_bytes_per_token_layer(cfg, dtype) if per_token_layer is None else per_token_layer
    kinds = cfg.layer_kinds
    indexer = kinds.count("dsa") * tokens * indexer_bytes_per_token(cfg)
    state = state_bytes_per_sequence(cfg, dtype)
    total = per * kv_layer_tokens_all(cfg, tokens)
    for extra in (indexer, state):  # added only when present: whole numbers stay whole
        if extra:
            total += extra
    return total


@dataclass(frozen=True, slots=True)
class TrainingState:
    weights_bytes: float
    grads_bytes: float
    optimizer_bytes: float

    @property
    def total_bytes(self) -> float:
        return self.weights_bytes + self.grads_bytes + self.optimizer_bytes


def training_state_bytes(num_params: float, precision: str = "bf16-mixed") -> TrainingState:
    """Weights, gradients and Adam state for ``num_params`` parameters."""
    check_positive("num_params", num_params, allow_zero=True)
    check_choice("precision", precision, PRECISION_BYTES)
    w, g, o = PRECISION_BYTES[precision]
    if not math.isfinite(o * num_params):
        raise GpuplanError(f"num_params={num_params:g} is invalid: its bytes overflow a float")
    return TrainingState(w * num_params, g * num_params, o * num_params)


@dataclass(frozen=True, slots=True)
class LayerActivations:
    """Bytes one block keeps for its backward, split by where tensor parallelism cuts them."""

    replicated_bytes: float  # outside the TP region: divided by tp only under SP
    split_bytes: float  # inside the TP region: divided by tp

    @property
    def total_bytes(self) -> float:
        return self.replicated_bytes + self.split_bytes


@expects(cfg="ModelConfig", dtype=str)
def layer_activation_bytes(
    cfg: ModelConfig,
    *,
    tokens: int,
    impl: str = "fused",
    dtype: str = "bf16",
    recompute: str = "none",
    tp: int = 1,
    sp: bool = False,
    layer: int = 0,
) -> LayerActivations:
    """Activation bytes of one block for ``tokens`` tokens (module docstring has the terms)."""
    check_choice("recompute", recompute, RECOMPUTE)
    check_positive("tokens", tokens, allow_zero=True)
    if tokens > MAX_DIM:
        raise GpuplanError(f"tokens={tokens:g} is invalid: it must be at most {MAX_DIM:,}")
    check_whole("tp", tp, high=MAX_GPUS)
    e, h = dtype_bytes(dtype), cfg.d_model
    rep_div = tp if sp else 1
    if recompute == "full":  # only the block input survives
        return LayerActivations(tokens * h * e / rep_div, 0.0)
    replicated = 4 * h * e + 8 + (2 * h if cfg.bias and not cfg.is_vision else 0)
    if cfg.norms_per_block == 4:  # the post-norms' inputs and statistics (Gemma 2/3)
        replicated += 2 * h * e + 8
    mlp = _mlp_saved_elems(cfg, layer, eager=impl == "eager")
    if cfg.layer_types or cfg.ffn_types:  # explicit kinds: each half as its kind keeps it
        return _kinded_activations(cfg, layer, tokens=tokens, e=e, mlp=mlp, tp=tp,
                                   rep_div=rep_div)
    split = _attention_saved_elems(cfg) * e + 4 * cfg.n_heads + mlp * e
    return LayerActivations(tokens * replicated / rep_div, tokens * split / tp)


def _kinded_activations(cfg: ModelConfig, layer: int, *, tokens: int, e: float, mlp: float,
                        tp: int, rep_div: int) -> LayerActivations:
    """A block's saved tensors by its kinds: a half that is absent ("none") keeps neither its
    two inputs (2 h) nor its norm's statistic; a fixed-state mixer keeps its projections' and
    convolution's outputs and its scan's output and norm (``_state_saved_elems``); a sparse-
    attention block also the indexer's query and key; attention its log-sum-exp per head."""
    h, kind, ffn = cfg.d_model, cfg.layer_kind(layer), cfg.ffn_kind(layer)
    halves = (kind != "none") + (ffn != "none")
    # a sandwich block's post-norms (Gemma 2/3) keep their inputs and statistics as well
    per_half = (3 * h * e + 8) if cfg.norms_per_block == 4 else (2 * h * e + 4)
    replicated = halves * per_half + (2 * h if cfg.bias and not cfg.is_vision else 0)
    if kind in ("linear", "mamba2"):
        mixer = _state_saved_elems(cfg, kind) * e
    elif kind == "none":
        mixer = 0.0
    else:
        mixer = _attention_saved_elems(cfg) * e + 4 * cfg.n_heads
        if kind == "dsa":
            ix = cfg.sparse_indexer
            mixer += (ix.n_heads + 1) * ix.head_dim * e
    split = mixer + (mlp * e if ffn != "none" else 0.0)
    return LayerActivations(tokens * replicated / rep_div, tokens * split / tp)


def _state_saved_elems(cfg: ModelConfig, kind: str) -> int:
    """Per token, what a gated DeltaNet or Mamba-2 mixer keeps for its backward: the input
    projections' outputs, the convolution's output, the scan's output and the gated norm's
    output (its chunk states are recomputed in the backward, as FLA and mamba_ssm do)."""
    if kind == "linear":
        la = cfg.linear_attention
        return 2 * la.key_dim + 2 * la.value_dim + 2 * la.n_value_heads + la.conv_channels + (
            2 * la.value_dim)
    ssm = cfg.ssm
    return ssm.in_proj_width + ssm.conv_channels + 2 * ssm.d_inner


def _attention_saved_elems(cfg: ModelConfig) -> int:
    """Fused q/k/v output, rotated q and k, the output and its contiguous copy, per token; with
    q/k norms their outputs too (RoPE's inputs), with an output gate (Qwen3-Next) the gate and
    the gated output (o_proj's input)."""
    q = cfg.n_heads * cfg.qk_head_dim
    k = cfg.n_kv_heads * cfg.qk_head_dim
    v = cfg.n_kv_heads * cfg.v_dim_per_head
    rotated = q + k if cfg.position == "rope" else 0
    out = cfg.n_heads * cfg.v_dim_per_head
    normed = q + k if cfg.qk_norm else 0
    gated = q + out if cfg.attn_output_gate else 0
    return q + k + v + rotated + 2 * out + normed + gated


def _mlp_saved_elems(cfg: ModelConfig, layer: int, *, eager: bool = False) -> float:
    """FFN tensors per token: SwiGLU 3 f (4 f eager: silu's output too), GELU 2 f; MoE counts
    the routed copies (and each routed token's permuted input)."""
    per_width = 2 if cfg.activation != "swiglu" else 4 if eager else 3  # relu2 as gelu
    if not cfg.is_moe_layer(layer):
        return per_width * cfg.d_ff
    routed = cfg.top_k * (per_width * cfg.d_ff_expert + cfg.d_model)
    shared = per_width * cfg.d_ff_expert * cfg.n_shared_experts
    return routed + shared + cfg.n_experts  # router probabilities


def fp8_cached_input_saving(cfg: ModelConfig, layer: int = 0) -> tuple[float, float]:
    """(outside, inside the TP region) bytes per token one block keeps less when its GEMMs run
    in fp8 under Transformer Engine, which caches each Linear's fp8-cast input for the weight
    gradient instead of the 16-bit one: ``_Linear.forward`` saves ``inputmat``, the quantized
    input, its row-wise data discarded as "not needed in backward pass"
    (transformer_engine/pytorch/module/linear.py; LayerNormLinear alike). 1 byte instead of 2
    for the inputs only a GEMM keeps: the two norm outputs (q/k/v and MLP inputs) and the down
    projection's input; the output projection's input, which the attention kernel keeps as its
    output anyway, is cached as a 1-byte copy beside it (counted here as its contiguous copy's
    2 bytes falling to 1)."""
    e, e8 = ACT_BYTES, 1
    out = cfg.n_heads * cfg.v_dim_per_head
    if cfg.is_moe_layer(layer):
        down = cfg.top_k * cfg.d_ff_expert + cfg.n_shared_experts * cfg.d_ff_expert
    else:
        down = cfg.d_ff
    return float(2 * cfg.d_model * (e - e8)), float((out + down) * (e - e8))


def korthikanti_activation_bytes(
    cfg: ModelConfig,
    *,
    seq: int,
    micro_batch: int,
    tp: int = 1,
    sp: bool = False,
    recompute: str = "none",
) -> float:
    """One GPT block's activation bytes as Korthikanti et al. 2022 count them (16-bit
    activations, dropout masks, and the s x s attention scores stored: no flash attention).

    Eq. 1 (no parallelism) sbh(34 + 5as/h); eq. 2 (tensor parallel) sbh(10 + 24/t + 5as/(ht));
    eq. 4 (tensor + sequence parallel) sbh/t (34 + 5as/h); sec. 5 (selective recomputation
    drops the 5as/h term); sec. 4.1 (full recomputation keeps the block input, 2sbh, split by t
    under sequence parallelism).
    """
    check_choice("recompute", recompute, RECOMPUTE)
    s, b, h, a, t = seq, micro_batch, cfg.d_model, cfg.n_heads, tp
    if recompute == "full":
        return 2 * s * b * h / (t if sp else 1)
    scores = 0.0 if recompute == "selective" else 5 * a * s / h
    if sp:
        return s * b * h / t * (34 + scores)
    return s * b * h * (10 + 24 / t + scores / t)
