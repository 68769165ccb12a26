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
as a ``Breakdown``). ``StepModel`` derives from the same prices, once per deployment, a table of
the token part over T, a table of the sampling part over S, three coefficients of the decode
attention (fixed, per sequence, per cached token: flash-decoding time is linear in the bytes it
reads) and a memo of prefill-attention pieces; it then gives an iteration's time in about a
microsecond, equal to the reference's. The tables are exact, not fitted: a GEMM's compute term
changes only where its count of output tiles changes, i.e. at multiples of ``TILE_ROWS`` rows
(``hwmodels.gemm``'s tiles are 64 or 128 rows), and its memory term is linear in the rows; every
other token-part kernel is linear in T. The test suite checks the equality.

A run of decode-only iterations with a fixed set of sequences has a closed form: the cached
tokens grow by the number of sequences each iteration, so the total of k iterations is a sum
of ``max(A + b j, H)`` terms (the launch model: the GPU's time or the CPU's issue time,
whichever is longer). ``decode_run_s`` and ``decode_iterations_until`` use it, which lets the
simulator jump from event to event instead of stepping every iteration.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from gpuplan.hwmodels.gemm import TILES
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

TILE_ROWS = math.gcd(*(tile_m for tile_m, _ in TILES))  # GEMM compute is constant between
_PROBE_TOKENS = 1000  # a token count at which every GEMM's rows reveal how they follow T


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


def _affine(fn, t1: int, t2: int) -> tuple[float, float]:
    """(intercept, slope) of a function known to be affine, from two of its values."""
    y1, y2 = fn(t1), fn(t2)
    slope = (y2 - y1) / (t2 - t1)
    return y1 - slope * t1, slope


def _total_s(ops: list[Op], dep) -> float:
    return sum(price_op(op, dep).total_s for op in ops)


def _kernels(ops: list[Op]) -> int:
    return sum(kernel_count(op) for op in ops)


def gemm_table(op: Gemm, dep, m_max: int) -> np.ndarray:
    """Time of ``op`` for every row count 0..m_max: priced row by row up to one tile, then
    compute from the tile-grid points and memory linear in the rows (module docstring)."""
    top = m_max // TILE_ROWS + 1
    grid = [price_op(replace(op, m=TILE_ROWS * j), dep).compute_s for j in range(1, top + 1)]
    one, two = price_op(replace(op, m=1), dep), price_op(replace(op, m=2), dep)
    slope = two.memory_s - one.memory_s
    m = np.arange(m_max + 1)
    compute = np.asarray(grid)[np.maximum((m + TILE_ROWS - 1) // TILE_ROWS - 1, 0)]
    out = np.maximum(compute, one.memory_s + slope * (m - 1)) + one.launch_s
    small = min(TILE_ROWS, m_max)  # skinny kernels (quantization.SKINNY_ROWS) differ per row
    out[1 : small + 1] = [price_op(replace(op, m=r), dep).total_s for r in range(1, small + 1)]
    out[0] = 0.0
    return out


class StepModel:
    """Iteration times of one deployment, derived once from the analytical model (module
    docstring); ``iteration_s(batch)`` equals ``iteration_breakdown(dep, batch).total_s``."""

    def __init__(self, dep, *, max_tokens: int = 4096):
        self.dep = dep
        cfg = dep.model
        self._groups = layer_groups(cfg)
        self._n_layers = sum(count for _, count in self._groups)
        self._templates = [attention_template(dep, layer=layer) for layer, _ in self._groups]
        self._routed = (cfg.top_k, cfg.n_experts) if cfg.is_moe else None
        self._prefill_memo: dict[tuple[int, int, int], float] = {}
        self._decode_coefficients()
        self._kernel_counts()
        self._size = 0
        self._grow(max(max_tokens, 2 * TILE_ROWS))

    # tables over tokens and samples

    def _routed_rows(self, t):
        k, e = self._routed
        return np.maximum(1, np.round(t * k / e)).astype(np.int64)

    def _row_map(self, op: Gemm) -> str:
        if op.m == _PROBE_TOKENS:
            return "tokens"
        if self._routed and op.m == int(self._routed_rows(np.int64(_PROBE_TOKENS))):
            return "routed"
        raise ValueError(f"GEMM {op.name}: m={op.m} follows tokens in an unknown way")

    def _grow(self, size: int) -> None:
        """(Re)build the tables for up to ``size`` tokens and sampled sequences."""
        dep, t = self.dep, np.arange(size + 1)
        token = np.zeros(size + 1)
        for (layer, count), _ in zip(self._groups, self._templates, strict=True):
            probe = token_ops(dep, tokens=_PROBE_TOKENS, layer=layer)
            for op in (op for op in probe if isinstance(op, Gemm)):
                rows = t if self._row_map(op) == "tokens" else self._routed_rows(t)
                token += count * gemm_table(op, dep, size)[rows]

            def rest(n, layer=layer):
                ops = token_ops(dep, tokens=n, layer=layer)
                return _total_s([op for op in ops if not isinstance(op, Gemm)], dep)

            a, b = _affine(rest, 8 * self._experts(), 64 * self._experts())
            token += count * (a + b * t)
        a, b = _affine(lambda n: _total_s(outer_ops(dep, tokens=n), dep), 1, 2)
        token += a + b * t
        token[0] = 0.0
        head = sample_ops(dep, seqs=1)
        sample = gemm_table(head[0], dep, size)
        a, b = _affine(lambda n: _total_s(sample_ops(dep, seqs=n)[1:], dep), 1, 2)
        sample += a + b * t
        sample[0] = 0.0
        self._token_s, self._sample_s, self._size = token, sample, size
        self._token_list, self._sample_list = token.tolist(), sample.tolist()

    def _experts(self) -> int:
        return self._routed[1] if self._routed else 1

    def _ensure(self, n: int) -> None:
        if n > self._size:
            self._grow(max(n, 2 * self._size))

    def _kernel_counts(self) -> None:
        dep = self.dep
        self._token_kernels = _kernels(outer_ops(dep, tokens=1)) + sum(
            count * _kernels(token_ops(dep, tokens=1, layer=layer)) for layer, count in self._groups
        )
        self._sample_kernels = _kernels(sample_ops(dep, seqs=1))
        n_dec = self._token_kernels + self._sample_kernels + self._n_layers
        self._dec_kernels = n_dec
        # decode-only iteration time = max(K + gaps, host) for kernels K (launch model)
        graph = dep.cuda_graph
        self._dec_gap_s = launch_cost(n_dec, math.inf, dep.eff, cuda_graph=graph).total_s
        self._dec_host_s = launch_cost(n_dec, 0.0, dep.eff, cuda_graph=graph).total_s

    def _decode_coefficients(self) -> None:
        """Fixed, per-sequence and per-cached-token time of the decode attention, all layers."""
        fixed = per_seq = per_kv = 0.0
        for (_, count), att in zip(self._groups, self._templates, strict=True):

            def t(seqs, kv, att=att):
                op = decode_attention(self.dep, att, seqs=seqs, kv_tokens=kv)
                return price_op(op, self.dep).total_s

            t11, t1k, t21 = t(1, 1), t(1, 1001), t(2, 2)
            kv = (t1k - t11) / 1000
            seq = t21 - t11 - kv
            fixed += count * (t11 - seq - kv)
            per_seq += count * seq
            per_kv += count * kv
        self._dec_fixed_s, self._dec_seq_s, self._dec_kv_s = fixed, per_seq, per_kv

    # iteration times

    def prefill_attention_s(self, tokens: int, cached: int, seqs: int = 1) -> float:
        """Prefill attention of one piece, all layers (memoized)."""
        key = (tokens, cached, seqs)
        hit = self._prefill_memo.get(key)
        if hit is None:
            hit = sum(
                count
                * price_op(
                    prefill_attention(att, tokens=tokens, cached=cached, seqs=seqs), self.dep
                ).total_s
                for (_, count), att in zip(self._groups, self._templates, strict=True)
            )
            self._prefill_memo[key] = hit
        return hit

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
        self._ensure(max(tokens, sampled))
        kernels_s += self._token_list[tokens] + self._sample_list[sampled]
        n = self._token_kernels + self._sample_kernels + self._n_layers * len(prefill)
        if decode_seqs:
            kernels_s += (
                self._dec_fixed_s
                + self._dec_seq_s * decode_seqs
                + self._dec_kv_s * decode_kv_tokens
            )
            n += self._n_layers
        graph = self.dep.cuda_graph and not prefill
        launch = launch_cost(n, kernels_s, self.dep.eff, cuda_graph=graph).total_s
        return kernels_s + launch + self.dep.iteration_overhead_s

    def _decode_kernels_s(self, seqs: int, kv_tokens: float) -> float:
        self._ensure(seqs)
        return (
            self._token_list[seqs]
            + self._sample_list[seqs]
            + self._dec_fixed_s
            + self._dec_seq_s * seqs
            + self._dec_kv_s * kv_tokens
        )

    def decode_s(self, seqs: int, kv_tokens: int) -> float:
        """One decode-only iteration of ``seqs`` sequences reading ``kv_tokens`` in all."""
        k = self._decode_kernels_s(seqs, kv_tokens)
        return max(k + self._dec_gap_s, self._dec_host_s) + self.dep.iteration_overhead_s

    def _run_terms(self, seqs: int, kv_tokens: int) -> tuple[float, float, float, int]:
        """(A, b, H, j*): iteration j of a run costs max(A + b j, H) + overhead; the first j*
        iterations are host-bound (cost H)."""
        a = self._decode_kernels_s(seqs, kv_tokens) + self._dec_gap_s
        b = self._dec_kv_s * seqs
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
