"""The paged KV cache of a replica: what one GPU holds, how many blocks fit, block arithmetic.

PagedAttention (Kwon et al. 2023, "Efficient Memory Management for Large Language Model Serving
with PagedAttention", sec. 4.1-4.3) stores each sequence's keys and values in fixed blocks of
``block_tokens`` tokens allocated on demand, so a sequence of n tokens holds ceil(n / block)
blocks. The blocks fill what is left of each GPU after, in this order (assumptions, named):

- the share vLLM lets itself use, ``memory_utilization`` (``gpu_memory_utilization``, 0.9):
  the rest covers the CUDA context, CUDA graphs, NCCL buffers and fragmentation;
- the weights on each GPU: block projections in the weight format (``quantization``), split
  over ``tp``; embedding and LM head in 16 bits, split over the vocabulary (vLLM's
  vocab-parallel layers); norms replicated;
- an activation workspace: one forward over the iteration's token budget (the residual, the norm
  output, q/k/v, the MLP's gate/up outputs and their product, in 16 bits) plus fp32 logits over
  the whole vocabulary for every sequence (vLLM measures this with a profiling run instead).

Per token and GPU the cache holds K and V of the GPU's KV heads (``max(1, n_kv_heads / tp)``:
heads are replicated when tp exceeds them) in every layer, or MLA's compressed latent plus its
RoPE key, replicated on every rank (DeepSeek-V2 sec. 2.1.3). A model with sliding-window, chunked or
fixed-state layers pages its cache per layer (``blocks.BlockRule``), as vLLM's hybrid KV cache
manager does: a block is then one layer's ``block_tokens`` tokens, a windowed layer holds only
the blocks its window still reaches, a chunked layer those of its current chunk, and a
linear-attention or Mamba-2 layer one fixed state a request.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace

from gpuplan.errors import GpuplanError, Infeasible
from gpuplan.sim.runtime.serving.blocks import BlockRule
from gpuplan.sim.runtime.serving.pipeline import binding_stage, fitting_pp
from gpuplan.sim.runtime.serving.quantization import block_weights_bytes
from gpuplan.sim.runtime.serving.wide_ep import busiest_rank_tokens, dp_weights_bytes
from gpuplan.workloads.dtypes import dtype_bytes
from gpuplan.workloads.layer_kinds import STATE_KINDS, TOKEN_CACHE_KINDS
from gpuplan.workloads.memory import (
    indexer_bytes_per_token,
    kv_cache_bytes_per_token_layer,
    kv_layer_tokens_all,
    state_bytes_per_sequence,
)
from gpuplan.workloads.model import ModelConfig
from gpuplan.workloads.params import count_params

LOGIT_BYTES = 4  # fp32 logits for sampling


def blocks_for(tokens: int, block_tokens: int) -> int:
    """Blocks a sequence of ``tokens`` cached tokens holds."""
    return -(-tokens // block_tokens)


def weights_bytes_per_gpu(cfg: ModelConfig, *, tp: int, weight_dtype: str) -> float:
    """Weight bytes on each of the ``tp`` GPUs of a replica."""
    try:
        hash(cfg)
    except TypeError:  # a config holding a list: priced afresh
        return _weights_bytes_per_gpu.__wrapped__(cfg, tp, weight_dtype)
    return _weights_bytes_per_gpu(cfg, tp, weight_dtype)


@functools.lru_cache(maxsize=1024)  # a pure function of frozen inputs, asked at every replica
def _weights_bytes_per_gpu(cfg: ModelConfig, tp: int, weight_dtype: str) -> float:
    pc = count_params(cfg)
    blocks = block_weights_bytes(cfg, sum(pc.per_layer), weight_dtype) / tp
    vocab = (pc.embedding + pc.lm_head) * dtype_bytes("bf16") / tp
    vision = pc.vision * dtype_bytes("bf16") / tp  # a VLM's tower: 16-bit, split like the blocks
    return blocks + vocab + vision + pc.final_norms * dtype_bytes("bf16")


def kv_bytes_per_token_layer(cfg: ModelConfig, *, tp: int, kv_dtype: str) -> float:
    """KV-cache bytes one token occupies in one token-caching block on each GPU of the replica
    (a DeepSeek sparse-attention block's indexer key included: ``memory.indexer_bytes_per_token``)."""
    if cfg.is_mla:
        per = kv_cache_bytes_per_token_layer(cfg, kv_dtype)
    else:
        heads = max(1, cfg.n_kv_heads // tp)
        per = heads * (cfg.qk_head_dim + cfg.v_dim_per_head) * dtype_bytes(kv_dtype)
    return per + indexer_bytes_per_token(cfg) if "dsa" in cfg.layer_kinds else per


def kv_bytes_per_token(cfg: ModelConfig, *, tp: int, kv_dtype: str) -> float:
    """KV-cache bytes one token occupies on each GPU of the replica, in every block that caches
    tokens (before any window or chunk has cut it; fixed states apart: ``state_bytes_per_gpu``)."""
    return _token_layers(cfg) * kv_bytes_per_token_layer(cfg, tp=tp, kv_dtype=kv_dtype)


def state_bytes_per_gpu(cfg: ModelConfig, *, tp: int, kv_dtype: str) -> float:
    """One sequence's fixed linear-attention and Mamba-2 state on each GPU (heads split by tp)."""
    return state_bytes_per_sequence(cfg, kv_dtype) / tp


def kv_bytes_per_sequence(cfg: ModelConfig, tokens: float, *, tp: int, kv_dtype: str) -> float:
    """Cache bytes of one sequence of ``tokens`` tokens on each GPU, block kind by block kind
    (``memory.kv_cache_bytes_per_sequence``: windows, chunks, fixed states)."""
    per = kv_bytes_per_token_layer(cfg, tp=tp, kv_dtype=kv_dtype)
    state = state_bytes_per_gpu(cfg, tp=tp, kv_dtype=kv_dtype)
    tokens_bytes = kv_layer_tokens_all(cfg, tokens) * per
    return tokens_bytes + state if state else tokens_bytes  # (no state: the JSON keeps an int)


def _token_layers(cfg: ModelConfig) -> int:
    return sum(k in TOKEN_CACHE_KINDS for k in cfg.layer_kinds)


def block_rule(cfg: ModelConfig, block_tokens: int, cross_tokens: int = 0,
               state_units: int = 0) -> BlockRule:
    """The blocks a sequence of the model holds: per layer when some layers are windowed or
    chunked, hold a fixed state (``state_units`` page units each, ``_state_units``), or when a
    cross-attention VLM's sequences each cache ``cross_tokens`` image tokens in its
    cross-attention layers (their keys and values take a layer's bytes per token each)."""
    kinds = cfg.layer_kinds
    windowed, chunked = kinds.count("sliding"), kinds.count("chunked")
    states = sum(k in STATE_KINDS for k in kinds)
    full = _token_layers(cfg) - windowed - chunked
    if not windowed and not chunked and not states and not cross_tokens and full == cfg.n_layers:
        return BlockRule(block_tokens)
    cross = {} if not cross_tokens else {
        "cross_layers": len(cfg.vision_tower.cross_attention_layers), "cross_tokens": cross_tokens}
    return BlockRule(block_tokens, full_layers=full, windowed_layers=windowed,
                     window=cfg.sliding_window if windowed else 0, chunked_layers=chunked,
                     chunk=cfg.attention_chunk_size if chunked else 0, state_layers=states,
                     state_units=state_units, **cross)  # fmt: skip


def _state_units(cfg: ModelConfig, unit_bytes: float, *, tp: int, kv_dtype: str) -> int:
    """Page units of one block's fixed state: vLLM's hybrid manager gives each Mamba or linear-
    attention layer one page per request (``MambaManager``), its page padded to the attention
    pages' size or the attention block size raised to match it (``unify_kv_cache_spec_page_size``
    / ``HybridAttentionMambaModelConfig``): here, the units of ``unit_bytes`` its state fills."""
    states = sum(k in STATE_KINDS for k in cfg.layer_kinds)
    if not states:
        return 0
    per_layer = state_bytes_per_gpu(cfg, tp=tp, kv_dtype=kv_dtype) / states
    return max(1, math.ceil(per_layer / unit_bytes)) if unit_bytes else 1


def _ffn_width(cfg: ModelConfig) -> int:
    if not cfg.is_moe:
        return cfg.d_ff
    routed = cfg.top_k * cfg.d_ff_expert + cfg.n_shared_experts * cfg.d_ff_expert
    return max(cfg.d_ff, routed)


def workspace_bytes(
    cfg: ModelConfig, *, tp: int, tokens: int, seqs: int, act_dtype: str = "bf16"
) -> float:
    """Activations of one forward over ``tokens`` tokens plus the logits of ``seqs`` sequences."""
    qkv = cfg.n_heads * cfg.qk_head_dim + 2 * cfg.n_kv_heads * cfg.v_dim_per_head
    per_token = 2 * cfg.d_model + (qkv + 3 * _ffn_width(cfg)) / tp
    return tokens * per_token * dtype_bytes(act_dtype) + seqs * cfg.vocab_size * LOGIT_BYTES


@dataclass(frozen=True, slots=True, kw_only=True)
class KvCapacity:
    """The KV cache of one replica, per GPU, with the terms it is left from."""

    blocks: int
    block_tokens: int
    block_bytes: float  # one block on one GPU
    hbm_bytes: float
    usable_bytes: float  # hbm_bytes * memory_utilization
    weights_bytes: float
    workspace_bytes: float
    rule: BlockRule | None = None  # None: one block holds its tokens in every layer

    @property
    def layer_blocks_per_block(self) -> int:
        """One-layer blocks that hold a block of tokens in every layer where windowed or chunked
        layers page the cache per layer (``blocks.BlockRule``); 1 where a block is every layer's."""
        return self.rule.units if self.rule and self.rule.paged_per_layer else 1

    @property
    def tokens(self) -> int:
        """Cached tokens the blocks hold when no window has cut them (every layer's)."""
        units = self.rule.units if self.rule else 1
        return self.blocks * self.block_tokens // units

    def blocks_of(self, tokens: int) -> int:
        """Blocks one sequence of ``tokens`` cached tokens holds."""
        return self.rule.blocks(tokens) if self.rule else blocks_for(tokens, self.block_tokens)

    def sequences(self, tokens: float) -> int:
        """Sequences of ``tokens`` cached tokens the blocks hold at once (without windows:
        the cached tokens over ``tokens``, block rounding left to the scheduler)."""
        if self.rule is None:
            return int(self.tokens // tokens)
        return self.blocks // max(1, self.rule.blocks(math.ceil(tokens)))

    @property
    def kv_bytes(self) -> float:
        return self.blocks * self.block_bytes


def check_servable(dep) -> None:
    """A serving simulation keeps a paged or static cache: a dynamic one (Hugging Face's
    ``DynamicCache``, a ``torch.cat`` per step) is priced per iteration (``StepModel``,
    ``iteration_breakdown``) but not simulated as traffic."""
    if dep.kv_cache == "dynamic":
        raise GpuplanError(
            "kv_cache='dynamic' (a torch.cat per step) is not simulated: a serving engine "
            "keeps a paged or static cache"
        )


def kv_capacity(dep, sched, speculator=None) -> KvCapacity:
    """Blocks of the replica's KV cache; a model that does not fit is an error naming the TP
    (and GPU count) it would need. A ``speculative.Speculator``'s drafter takes its weights and
    its cache per token (a block then holds both models' tokens)."""
    cap = _capacity(dep, sched, dep.tp, speculator)
    needed = cap.blocks_of(sched.model_len(dep.model))
    if cap.blocks < needed:
        message, fix = _does_not_fit(dep, sched, cap, needed)
        raise Infeasible(message, fix=fix)
    if dep.dp > 1:  # a wide-EP group pools its ranks' caches (``wide_ep``)
        return replace(cap, blocks=cap.blocks * dep.dp)
    return cap


def _capacity(dep, sched, tp: int, speculator=None) -> KvCapacity:
    cfg = dep.model
    tokens = sched.batched_tokens(cfg) or sched.model_len(cfg)
    per_token = kv_bytes_per_token(cfg, tp=tp, kv_dtype=dep.kv_dtype)
    weights = weights_bytes_per_gpu(cfg, tp=tp, weight_dtype=dep.weight_dtype)
    if dep.dp_attention:  # attention replicated per rank, experts over the group (``wide_ep``)
        weights = dp_weights_bytes(dep)
    if speculator is not None:
        per_token += speculator.kv_bytes_per_token(tp)
        weights += speculator.extra_weights_bytes(tp)
    rule = _rule(dep, sched, tp, per_token)
    if not per_token:  # fixed states only (a Mamba-2 model): a page unit is one layer's state
        per_token = state_bytes_per_gpu(cfg, tp=tp, kv_dtype=dep.kv_dtype) / max(
            1, rule.state_layers) / sched.block_tokens
    per_token /= rule.units
    block_bytes = sched.block_tokens * per_token
    usable = dep.acc.hbm_bytes * sched.memory_utilization
    # a wide-EP group's limits are its ranks' together (``wide_ep.group_scheduler``)
    work = workspace_bytes(cfg, tp=tp, tokens=busiest_rank_tokens(dep, tokens),
                           seqs=busiest_rank_tokens(dep, sched.max_seqs), act_dtype=dep.act_dtype)
    blocks = max(0, math.floor((usable - weights - work) / block_bytes))
    if dep.pp > 1:  # each stage its own weights and its blocks' share: the tightest one binds
        weights, block_bytes, blocks = binding_stage(dep, tp=tp, free_bytes=usable - work,
                                                     block_bytes=block_bytes)  # fmt: skip
    return KvCapacity(
        blocks=blocks,
        block_tokens=sched.block_tokens,
        block_bytes=block_bytes,
        hbm_bytes=dep.acc.hbm_bytes,
        usable_bytes=usable,
        weights_bytes=weights,
        workspace_bytes=work,
        rule=rule if rule.paged_per_layer else None,
    )


def _rule(dep, sched, tp: int, per_token: float) -> BlockRule:
    """The block rule of the replica at ``tp``: a state layer's units sized against one page
    unit (one token-caching block's ``block_tokens`` tokens, or the state itself without any)."""
    cfg = dep.model
    token_layers = _token_layers(cfg)
    unit_bytes = sched.block_tokens * per_token / token_layers if token_layers else 0.0
    units = _state_units(cfg, unit_bytes, tp=tp, kv_dtype=dep.kv_dtype)
    return block_rule(cfg, sched.block_tokens, dep.cross_kv_tokens, units)


def fitting_tp(dep, sched, *, max_tp: int = 8) -> int | None:
    """The smallest tensor-parallel degree at which one max-length request fits, or None."""
    for tp in range(1, max_tp + 1):
        if dep.model.n_heads % tp:
            continue
        cap = _capacity(dep, sched, tp)
        if cap.blocks >= cap.blocks_of(sched.model_len(dep.model)):
            return tp
    return None


def _does_not_fit(dep, sched, cap: KvCapacity, needed: int) -> tuple[str, dict]:
    """The message of a replica that cannot hold one request, and the nearest change that does
    as flags (empty where none is found)."""
    cfg, gb = dep.model, 1e9
    head = (
        f"{cfg.name} does not fit on {dep.acc.key} at tp={dep.tp}"
        f"{f' x pp={dep.pp}' if dep.pp > 1 else ''} with {dep.weight_dtype} "
        f"weights: {cap.weights_bytes / gb:.1f} GB of weights and {cap.workspace_bytes / gb:.1f} "
        f"GB of workspace per GPU leave room for {cap.tokens} cached tokens of the "
        f"{sched.model_len(cfg)} one request may need ({cap.usable_bytes / gb:.1f} GB usable)"
    )
    own = cfg.checkpoint_weight_dtype  # the checkpoint's format: the same GPUs, as shipped
    if own and own != dep.weight_dtype and _capacity(
            replace(dep, weight_dtype=own), sched, dep.tp).blocks >= needed:  # fmt: skip
        return (f"{head}; serve the checkpoint's own {own} weights (--weight-dtype {own})",
                {"--weight-dtype": own})  # fmt: skip
    if dep.dp_attention:  # a wide-EP group: its experts over more GPUs
        return f"{head}; spread the experts over more GPUs (a wider --ep)", {}
    tp = fitting_tp(dep, sched)
    if tp is not None and tp > dep.tp:
        return f"{head}; it needs tp={tp} ({tp} GPUs per replica)", {"--tp": str(tp)}
    if tp is not None:
        return f"{head}; lower --max-model-len or the batch limits", {}
    pipeline = fitting_pp(dep, sched, lambda d: _capacity(d, sched, d.tp).blocks >= needed)
    if pipeline is not None:
        advice, flags = pipeline
        return f"{head}; {advice}", flags
    shorter = fitting_model_len(dep, sched)
    if shorter is not None:  # vLLM refuses the same way until --max-model-len is lowered
        return (f"{head}; give --max-model-len {shorter} or less (the longest that fits at "
                f"tp={dep.tp})", {"--max-model-len": str(shorter)})  # fmt: skip
    total = weights_bytes_per_gpu(cfg, tp=1, weight_dtype=dep.weight_dtype)
    gpus = math.ceil(total / cap.usable_bytes) + 1
    return (
        f"{head}; even tp=8 is not enough: it needs about {gpus} GPUs of "
        f"{dep.acc.key} for weights and cache; try --weight-dtype int4 or a GPU with more memory"
    ), {}


def fitting_model_len(dep, sched) -> int | None:
    """The longest ``max_model_len`` (a multiple of the block) at which one request of that
    length fits at the deployment's TP, or None when not even one block's worth does."""
    def fits(length: int) -> bool:
        s = replace(sched, max_model_len=length)
        cap = _capacity(dep, s, dep.tp)
        return cap.blocks >= cap.blocks_of(length)

    step = sched.block_tokens
    # in blocks: one block fits, the refused length (rounded up to whole blocks) does not
    low, high = 1, -(-sched.model_len(dep.model) // step)
    if high <= low or not fits(low * step):
        return None
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if fits(mid * step) else (low, mid)
    return low * step
