"""The time of one serving iteration, from the analytical model, fast enough for millions of them.

An iteration of a replica (Orca, Yu et al. OSDI 2022; vLLM; Sarathi-Serve, Agrawal et al. OSDI
2024) runs every scheduled token through the model once:

- the token part: each block's kernels over T = prefill tokens + decode sequences (norms, the
  q/k/v, output and MLP GEMMs, RoPE, residual adds, the KV-cache append, and under tensor
  parallelism two all-reduces per block), the embedding and the final norm;
- the sampling part: the LM head and the fp32 logits of the S sequences that emit a token;
- attention: the decode sequences read their caches in one flash-decoding kernel (C cached
  tokens in all); each prefill piece (new tokens of one or more sequences after the tokens
  they already cached) attends causally in its own kernel;
- launch: the CPU issues every kernel eagerly, except that decode-only iterations replay a CUDA
  graph when ``cuda_graph`` is set (vLLM captures decode batches only); plus a fixed CPU cost per
  iteration (``Deployment.iteration_overhead_s``).

``iteration_breakdown`` prices those operators one by one through ``hwmodels`` (the reference,
as a ``Breakdown``). ``StepModel`` prices the same operators but remembers the parts: the token
part by T, the sampling part by S, the decode attention by batch size as an intercept and a
cost per cached token (flash-decoding's time is linear in the bytes it reads once the batch is
fixed), and each prefill piece. A simulation meets few distinct token counts, so after a short
warm-up an iteration costs a few dictionary lookups, and its time equals the reference's (the
test suite checks it) whatever shape the kernel models take.

A run of decode-only iterations with a fixed set of sequences has a closed form: the cached
tokens grow by the number of sequences each iteration, so the total of k iterations is a sum
of ``max(A + b j, H)`` terms (the launch model: the GPU's time or the CPU's issue time,
whichever is longer). ``decode_run_s`` and ``decode_iterations_until`` use it, which lets the
simulator jump from event to event instead of stepping every iteration.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from gpuplan.hwmodels.kernel_time import KernelTime
from gpuplan.hwmodels.launch import launch_cost
from gpuplan.hwmodels.price import kernel_count, price
from gpuplan.sim.breakdown import Breakdown, Item
from gpuplan.sim.compilation import eager, fuse_elementwise
from gpuplan.sim.serving.quantization import compute_dtype, quantized_gemm_time
from gpuplan.sim.step import layer_groups
from gpuplan.workloads.dtypes import dtype_bytes
from gpuplan.workloads.operators import embedding_forward, kv_cache_append, layer_forward
from gpuplan.workloads.ops import Attention, Collective, Elementwise, Gemm, Memory, Op, op_class


@dataclass(frozen=True, slots=True, kw_only=True)
class Batch:
    """What one iteration runs. ``prefill`` pieces are (new tokens, tokens already cached,
    sequences); decode sequences each add one token after their cached ones."""

    prefill: tuple[tuple[int, int, int], ...] = ()
    decode_seqs: int = 0
    decode_kv_tokens: int = 0  # sum over decode sequences of (cached tokens + 1)
    sampled: int | None = None  # sequences that emit a token (default: every sequence)

    @property
    def tokens(self) -> int:
        return sum(c * b for c, _, b in self.prefill) + self.decode_seqs

    @property
    def samples(self) -> int:
        if self.sampled is not None:
            return self.sampled
        return self.decode_seqs + sum(b for _, _, b in self.prefill)


# --- the operators of an iteration (the reference) ------------------------------------------


def _as_run(ops: list[Op], impl: str) -> list[Op]:
    return {"fused": list, "eager": eager, "compiled": fuse_elementwise}[impl](ops)


def token_ops(dep, *, tokens: int, layer: int = 0) -> list[Op]:
    """One block's kernels over ``tokens`` tokens, attention excepted: GEMMs, norms, RoPE, adds,
    the KV-cache append and, under tensor parallelism, its two all-reduces (Megatron)."""
    cfg = dep.model
    ops = layer_forward(cfg, batch=1, seq=tokens, dtype=dep.act_dtype, layer=layer, tp=dep.tp)
    ops = [op for op in ops if not isinstance(op, Attention)]
    ops.append(kv_cache_append(cfg, tokens=tokens, dtype=dep.kv_dtype, tp=dep.tp))
    if dep.tp > 1:
        reduce_bytes = tokens * cfg.d_model * dtype_bytes(dep.act_dtype)
        ops.append(_collective("tp all_reduce", "all_reduce", dep.tp, reduce_bytes, count=2))
    return _as_run(ops, dep.impl)


def outer_ops(dep, *, tokens: int) -> list[Op]:
    """Embedding lookup (vocab-parallel: an all-reduce under TP) and the final norm."""
    cfg = dep.model
    ops = list(embedding_forward(cfg, tokens=tokens, dtype=dep.act_dtype))
    if dep.tp > 1:
        nbytes = tokens * cfg.d_model * dtype_bytes(dep.act_dtype)
        ops.append(_collective("embedding all_reduce", "all_reduce", dep.tp, nbytes))
    norm = Elementwise(
        name="final_norm",
        op=cfg.norm,
        tokens=tokens,
        hidden=cfg.d_model,
        pass_="fwd",
        dtype=dep.act_dtype,
    )
    return _as_run(ops + [norm], dep.impl)


def sample_ops(dep, *, seqs: int) -> list[Op]:
    """LM head over the vocabulary shard, fp32 logits written and read by the sampler, and
    their gather onto one rank under TP."""
    cfg = dep.model
    shard = -(-cfg.vocab_size // dep.tp)
    ops: list[Op] = [
        Gemm(name="lm_head", m=seqs, n=shard, k=cfg.d_model, dtype=dep.act_dtype),
        Memory(name="logits", op="softmax", bytes_moved=seqs * shard * (4 + 4)),
    ]
    if dep.tp > 1:
        ops.append(_collective("logits gather", "all_gather", dep.tp, seqs * shard * 4))
    return ops


def _collective(name: str, op: str, world: int, nbytes: float, count: int = 1) -> Collective:
    return Collective(name=name, op=op, world=world, bytes_per_rank=nbytes, count=count)


def attention_template(dep, *, layer: int = 0) -> Attention:
    """Block ``layer``'s attention for one sequence (its heads per rank, dims and dtype)."""
    ops = layer_forward(dep.model, batch=1, seq=1, dtype=dep.act_dtype, layer=layer, tp=dep.tp)
    return next(op for op in ops if isinstance(op, Attention))


def decode_attention(dep, att: Attention, *, seqs: int, kv_tokens: float) -> Attention:
    """One flash-decoding kernel for ``seqs`` sequences reading ``kv_tokens`` cached tokens in
    all (as ``seqs`` sequences of the mean length: the bytes are the same), in the cache's dtype."""
    return replace(
        att,
        name="decode_attention",
        batch=seqs,
        seq_q=1,
        seq_kv=kv_tokens / seqs,
        causal=False,
        dtype=dep.kv_dtype,
    )


def prefill_attention(att: Attention, *, tokens: int, cached: int, seqs: int) -> Attention:
    """Causal attention of ``tokens`` new tokens after ``cached`` ones, for ``seqs`` sequences."""
    return replace(att, name="prefill_attention", batch=seqs, seq_q=tokens, seq_kv=cached + tokens)


def price_op(op: Op, dep) -> KernelTime:
    """``hwmodels.price``, with quantized weights for GEMMs and a math-dtype fallback for
    devices that publish no 16-bit rate (``quantization``)."""
    if isinstance(op, Gemm):
        return quantized_gemm_time(dep.acc, op, dep.eff, weight_dtype=dep.weight_dtype)
    if isinstance(op, Attention) and op.seq_q > 1 and not dep.acc.supports(op.dtype):
        op = replace(op, dtype=compute_dtype(dep.acc, op.dtype))
    return price(op, dep.acc, dep.eff)


def _items(ops: list[Op], dep, *, repeat: int = 1, phase: str = "iteration") -> list[Item]:
    out = []
    for op in ops:
        kt = price_op(op, dep)
        if kt.total_s == 0.0:
            continue
        out.append(
            Item(
                layer="parallel" if isinstance(op, Collective) else "model",
                category=op_class(op),
                op=op.name,
                phase=phase,
                time_s=kt.total_s * repeat,
                flops=op.flops * repeat,
                bytes=op.bytes * repeat,
                kernels=kernel_count(op) * repeat,
                bound=kt.bound,
            )
        )
    return out


def iteration_breakdown(dep, batch: Batch) -> Breakdown:
    """Every kernel of one iteration priced one by one, plus launch and the CPU's fixed cost."""
    items: list[Item] = []
    tokens = batch.tokens
    if tokens:
        items += _items(outer_ops(dep, tokens=tokens), dep)
    for layer, count in layer_groups(dep.model):
        att = attention_template(dep, layer=layer)
        if tokens:
            items += _items(token_ops(dep, tokens=tokens, layer=layer), dep, repeat=count)
        if batch.decode_seqs:
            dec = decode_attention(
                dep, att, seqs=batch.decode_seqs, kv_tokens=batch.decode_kv_tokens
            )
            items += _items([dec], dep, repeat=count)
        for c, cached, seqs in batch.prefill:
            pre = prefill_attention(att, tokens=c, cached=cached, seqs=seqs)
            items += _items([pre], dep, repeat=count)
    if batch.samples:
        items += _items(sample_ops(dep, seqs=batch.samples), dep)
    graph = dep.cuda_graph and not batch.prefill
    kernels_s = sum(i.time_s for i in items)
    cost = launch_cost(sum(i.kernels for i in items), kernels_s, dep.eff, cuda_graph=graph)
    what = "graph replay gaps" if graph else "host issue time not hidden"
    items.append(Item(layer="runtime", category="launch", op=what, phase="iteration",
                      time_s=cost.total_s, bound="launch"))  # fmt: skip
    if dep.iteration_overhead_s:
        items.append(Item(layer="runtime", category="scheduler", op="per-iteration CPU work",
                          phase="iteration", time_s=dep.iteration_overhead_s, bound="launch"))  # fmt: skip
    return Breakdown(items=tuple(items))


# --- the fast model ---------------------------------------------------------------------------


def _total_s(ops: list[Op], dep) -> float:
    return sum(price_op(op, dep).total_s for op in ops)


def _kernels(ops: list[Op]) -> int:
    return sum(kernel_count(op) for op in ops)


class StepModel:
    """Iteration times of one deployment from memoized analytical prices (module docstring);
    ``iteration_s(batch)`` equals ``iteration_breakdown(dep, batch).total_s``."""

    MEMO_LIMIT = 200_000  # prefill-attention pieces kept before the memo starts afresh

    def __init__(self, dep, *, max_tokens: int = 4096):
        self.dep = dep
        self._groups = layer_groups(dep.model)
        self._n_layers = sum(count for _, count in self._groups)
        self._templates = [attention_template(dep, layer=layer) for layer, _ in self._groups]
        self._token_memo: dict[int, float] = {}
        self._sample_memo: dict[int, float] = {}
        self._decode_memo: dict[int, tuple[float, float]] = {}
        self._prefill_memo: dict[tuple[int, int, int], float] = {}
        self._kernel_counts()
        self.max_tokens = max_tokens  # a size hint; any token count is priced on demand

    # memoized parts

    def token_s(self, tokens: int) -> float:
        """Token part of an iteration over ``tokens`` tokens (all blocks, embedding, norm)."""
        hit = self._token_memo.get(tokens)
        if hit is None:
            dep = self.dep
            hit = _total_s(outer_ops(dep, tokens=tokens), dep) + sum(
                count * _total_s(token_ops(dep, tokens=tokens, layer=layer), dep)
                for layer, count in self._groups
            )
            self._token_memo[tokens] = hit
        return hit

    def sample_s(self, seqs: int) -> float:
        """Sampling part: LM head and logits of ``seqs`` sequences."""
        hit = self._sample_memo.get(seqs)
        if hit is None:
            hit = _total_s(sample_ops(self.dep, seqs=seqs), self.dep) if seqs else 0.0
            self._sample_memo[seqs] = hit
        return hit

    def decode_attention_terms(self, seqs: int) -> tuple[float, float]:
        """(intercept, per cached token) of the decode attention of ``seqs`` sequences, all
        layers: flash-decoding's time is linear in the bytes it reads for a given batch."""
        hit = self._decode_memo.get(seqs)
        if hit is None:
            one, many = seqs, 1001 * seqs  # 1 and 1001 cached tokens per sequence
            lo = hi = 0.0
            for (_, count), att in zip(self._groups, self._templates, strict=True):
                for kv, acc in ((one, "lo"), (many, "hi")):
                    op = decode_attention(self.dep, att, seqs=seqs, kv_tokens=kv)
                    t = count * price_op(op, self.dep).total_s
                    lo, hi = (lo + t, hi) if acc == "lo" else (lo, hi + t)
            slope = (hi - lo) / (many - one)
            hit = (lo - slope * one, slope)
            self._decode_memo[seqs] = hit
        return hit

    def prefill_attention_s(self, tokens: int, cached: int, seqs: int = 1) -> float:
        """Prefill attention of one piece, all layers."""
        key = (tokens, cached, seqs)
        hit = self._prefill_memo.get(key)
        if hit is None:
            if len(self._prefill_memo) > self.MEMO_LIMIT:
                self._prefill_memo.clear()
            hit = sum(
                count
                * price_op(
                    prefill_attention(att, tokens=tokens, cached=cached, seqs=seqs), self.dep
                ).total_s
                for (_, count), att in zip(self._groups, self._templates, strict=True)
            )
            self._prefill_memo[key] = hit
        return hit

    def _kernel_counts(self) -> None:
        dep = self.dep
        self._token_kernels = _kernels(outer_ops(dep, tokens=1)) + sum(
            count * _kernels(token_ops(dep, tokens=1, layer=layer)) for layer, count in self._groups
        )
        self._sample_kernels = _kernels(sample_ops(dep, seqs=1))
        n_dec = self._token_kernels + self._sample_kernels + self._n_layers
        # a decode-only iteration takes max(K + gaps, host) for kernels K (the launch model)
        graph = dep.cuda_graph
        self._dec_gap_s = launch_cost(n_dec, math.inf, dep.eff, cuda_graph=graph).total_s
        self._dec_host_s = launch_cost(n_dec, 0.0, dep.eff, cuda_graph=graph).total_s

    # iteration times

    def iteration_s(self, batch: Batch) -> float:
        """Time of one iteration (any mix of prefill pieces and decode sequences)."""
        return self.mixed_s(batch.prefill, batch.decode_seqs, batch.decode_kv_tokens, batch.samples)

    def mixed_s(self, prefill, decode_seqs: int, decode_kv_tokens: int, sampled: int) -> float:
        """``iteration_s`` from plain arguments (the simulator's hot path)."""
        tokens = decode_seqs
        kernels_s = 0.0
        for c, cached, seqs in prefill:
            tokens += c * seqs
            kernels_s += self.prefill_attention_s(c, cached, seqs)
        kernels_s += self.token_s(tokens) + self.sample_s(sampled)
        n = self._token_kernels + self._n_layers * len(prefill)
        if sampled:
            n += self._sample_kernels
        if decode_seqs:
            fixed, per_kv = self.decode_attention_terms(decode_seqs)
            kernels_s += fixed + per_kv * decode_kv_tokens
            n += self._n_layers
        graph = self.dep.cuda_graph and not prefill
        launch = launch_cost(n, kernels_s, self.dep.eff, cuda_graph=graph).total_s
        return kernels_s + launch + self.dep.iteration_overhead_s

    def _decode_kernels_s(self, seqs: int, kv_tokens: float) -> float:
        fixed, per_kv = self.decode_attention_terms(seqs)
        return self.token_s(seqs) + self.sample_s(seqs) + fixed + per_kv * kv_tokens

    def decode_s(self, seqs: int, kv_tokens: int) -> float:
        """One decode-only iteration of ``seqs`` sequences reading ``kv_tokens`` in all."""
        k = self._decode_kernels_s(seqs, kv_tokens)
        return max(k + self._dec_gap_s, self._dec_host_s) + self.dep.iteration_overhead_s

    def _run_terms(self, seqs: int, kv_tokens: int) -> tuple[float, float, float, int]:
        """(A, b, H, j*): iteration j of a run costs max(A + b j, H) + overhead; the first j*
        iterations are host-bound (cost H)."""
        a = self._decode_kernels_s(seqs, kv_tokens) + self._dec_gap_s
        b = self.decode_attention_terms(seqs)[1] * seqs
        h = self._dec_host_s
        if a >= h:
            return a, b, h, 0
        flat = math.ceil((h - a) / b) if b > 0 else 1 << 62
        return a, b, h, flat

    def decode_run_s(self, seqs: int, kv_tokens: int, iterations: int) -> float:
        """Total time of ``iterations`` decode-only iterations of the same ``seqs`` sequences,
        reading ``kv_tokens`` in the first and ``seqs`` more in each next one."""
        if iterations <= 0:
            return 0.0
        a, b, h, flat = self._run_terms(seqs, kv_tokens)
        j = min(flat, iterations)
        k = iterations
        rising = (k - j) * a + b * (k * (k - 1) - j * (j - 1)) / 2
        return h * j + rising + k * self.dep.iteration_overhead_s

    def decode_iterations_until(self, seqs: int, kv_tokens: int, elapsed_s: float) -> int:
        """The fewest iterations (at least one) of such a run that take ``elapsed_s`` or more."""
        if elapsed_s <= 0:
            return 1
        a, b, h, flat = self._run_terms(seqs, kv_tokens)
        o = self.dep.iteration_overhead_s
        if flat * (h + o) >= elapsed_s:
            n = math.ceil(elapsed_s / (h + o))
        else:
            rest = elapsed_s - flat * (h + o)
            first = a + b * flat + o  # cost of iteration ``flat``, then + b per iteration
            if b > 0:
                half = first - b / 2
                n = flat + math.ceil((-half + math.sqrt(half * half + 2 * b * rest)) / b)
            else:
                n = flat + math.ceil(rest / first)
        n = max(n, 1)
        while n > 1 and self.decode_run_s(seqs, kv_tokens, n - 1) >= elapsed_s:
            n -= 1
        while self.decode_run_s(seqs, kv_tokens, n) < elapsed_s:
            n += 1
        return n
