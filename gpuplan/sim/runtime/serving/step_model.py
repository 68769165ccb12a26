"""The time of one serving iteration, fast enough for millions of them.

``StepModel`` prices the operators of ``iteration`` but remembers the parts: the token part by
T, the sampling part by S, the decode attention by batch size as an intercept and a cost per
cached token (flash-decoding's time is linear in the bytes it reads once the batch is fixed),
and each prefill piece. A simulation meets few distinct token counts, so after a short warm-up
an iteration costs a few dictionary lookups, and its time equals
``iteration.iteration_breakdown``'s (the test suite checks it) whatever shape the kernel models
take, with one exception: a decode kernel that crosses its ridge within the cache's span is linear
on each side only. An absorbed MLA decode on all 128 heads (TP 1) turns compute-bound past a few
hundred cached tokens a sequence (below, its query and output bytes dominate): the terms are
taken at 1001 and 2001 tokens, exact from the crossing up and under 1% fast below it.

Decode-only iterations and runs of them in closed form are ``decode_runs``' ``DecodeRuns``.
"""

from __future__ import annotations

import numpy as np

from gpuplan.hwmodels.price import host_calls, kernel_count
from gpuplan.sim.estimate.composite import layer_groups
from gpuplan.sim.runtime.serving.decode_runs import DecodeRuns, run_costs
from gpuplan.sim.runtime.serving.iteration import (
    Batch,
    cache_ops,
    decode_ops,
    iteration_breakdown,
    iteration_launch,
    mixer_templates,
    outer_ops,
    prefill_ops,
    price_op,
    sample_ops,
    token_ops,
    token_part,
)
from gpuplan.sim.runtime.serving.kv_cache import check_servable  # (its callers' old home)
from gpuplan.sim.runtime.serving.pipeline import (
    Stage,
    micro_batches,
    p2p_s,
    pipeline_period_s,
    stage_groups,
)
from gpuplan.sim.runtime.serving.wide_ep import busiest_rank_tokens, prefill_share
from gpuplan.workloads.ops import Op

__all__ = ["Batch", "StepModel", "check_servable", "iteration_breakdown"]


def _total_s(ops: list[Op], dep) -> float:
    return sum(price_op(op, dep).total_s for op in ops)


def _cap(att) -> int:
    """The keys a sequence's decode reads at most: a window or a chunk (0: all; a scan: none)."""
    return getattr(att, "window", 0) or getattr(att, "chunk", 0)


def _kernels(ops: list[Op]) -> int:
    return sum(kernel_count(op) for op in ops)


def _calls(ops: list[Op]) -> int:
    return sum(host_calls(op) for op in ops)


class StepModel(DecodeRuns):
    """Iteration times of one deployment from memoized analytical prices (module docstring);
    ``iteration_s(batch)`` equals ``iteration_breakdown(dep, batch).total_s``."""

    MEMO_LIMIT = 200_000  # prefill-attention pieces kept before the memo starts afresh

    def __new__(cls, dep=None, *, max_tokens: int = 4096, stage: Stage | None = None):
        # a replica of several pipeline stages is a ``PipelineStepModel`` of one per stage
        # (``dep`` None: pickle's ``cls.__new__(cls)`` rebuilding one, as Dask workers do)
        if cls is StepModel and stage is None and dep is not None and dep.pp > 1:
            cls = PipelineStepModel
        return super().__new__(cls)

    def __init__(self, dep, *, max_tokens: int = 4096, stage: Stage | None = None):
        """``stage``: price only that pipeline stage's blocks and ends (None: the whole model)."""
        self.dep = dep
        self._groups = layer_groups(dep.model) if stage is None else stage_groups(dep.model, stage)
        self._first, self._last = (True, True) if stage is None else (stage.first, stage.last)
        # the CPU's fixed cost is once per iteration of the replica, not once per stage
        self._overhead_s = dep.iteration_overhead_s if stage is None else 0.0
        self._seq_s = dep.seq_overhead_s if stage is None else 0.0  # per sequence
        self._n_layers = sum(count for _, count in self._groups)
        # (blocks, template) of every context-dependent mixer kernel: a block's attention, a
        # sparse-attention block's indexer too, a fixed-state block's scan (``mixer_templates``)
        self._pairs = [(count, att) for layer, count in self._groups
                       for att in mixer_templates(dep, layer=layer)]  # fmt: skip
        # sliding-window (and chunked) groups read at most their window (chunk) a sequence:
        # priced apart (``_windowed``)
        self.windowed = any(_cap(att) for _, att in self._pairs)
        self._window_memo: dict[int, list[tuple[float, float, int]]] = {}
        self._token_memo: dict[int, float] = {}
        self._sample_memo: dict[int, float] = {}
        self._decode_memo: dict[int, tuple[float, float]] = {}
        self._prefill_memo: dict[tuple[int, int, int], float] = {}
        self._last_run: tuple = (None, None)  # (seqs, kv_tokens), ``_run_terms`` of them
        self._kernel_counts()
        self.max_tokens = max_tokens  # a size hint; any token count is priced on demand

    # memoized parts

    def token_s(self, tokens: int, rank_tokens: int | None = None,
                low_latency: bool = True) -> float:  # fmt: skip
        """Token part of an iteration over ``tokens`` tokens (all blocks, embedding, norm); a
        wide-EP group's over its busiest rank's ``rank_tokens`` (default: an even spread),
        its all-to-alls DeepEP's ``low_latency`` kernels or the normal ones (``wide_ep``)."""
        if self.dep.dp > 1:
            rank_tokens = rank_tokens or busiest_rank_tokens(self.dep, tokens)
        key = (tokens, rank_tokens, low_latency) if self.dep.dp > 1 else tokens
        rank_tokens = rank_tokens or tokens
        hit = self._token_memo.get(key)
        if hit is None:
            dep = self.dep
            ends = outer_ops(dep, tokens=rank_tokens, first=self._first, last=self._last)
            hit = _total_s(ends, dep)
            for layer, count in self._groups:
                _, times, parts = token_part(dep, tokens=rank_tokens, layer=layer,
                                             group_tokens=tokens, low_latency=low_latency)
                hit += count * parts * sum(t.total_s for t in times.values())
            self._token_memo[key] = hit
        return hit

    def sample_s(self, seqs: int) -> float:
        """Sampling part: LM head and logits of ``seqs`` sequences (a wide-EP group: of its
        busiest rank's share)."""
        seqs = busiest_rank_tokens(self.dep, seqs)
        hit = self._sample_memo.get(seqs)
        if hit is None:
            hit = _total_s(sample_ops(self.dep, seqs=seqs), self.dep) if seqs and self._last else 0.0
            self._sample_memo[seqs] = hit
        return hit

    def _decode_ops_s(self, seqs: int, kv_tokens: float, *, windowed: bool) -> float:
        """Decode attention (``iteration.decode_ops``) of the groups with (``windowed``) or
        without a sliding window; the latter with the cache's upkeep (``iteration.cache_ops``)."""
        dep = self.dep
        total = sum(count * _total_s(decode_ops(dep, att, seqs=seqs, kv_tokens=kv_tokens), dep)
                    for count, att in self._pairs if bool(_cap(att)) == windowed)  # fmt: skip
        if not windowed:
            total += self._n_layers * _total_s(cache_ops(dep, kv_tokens), dep)
        return total

    def decode_attention_terms(self, seqs: int) -> tuple[float, float]:
        """(intercept, per cached token) of the decode attention of ``seqs`` sequences, all
        layers: flash-decoding's time is linear in the bytes it reads for a given batch (as
        are a masked decode's K/V repeat and a dynamic cache's concatenation). A wide-EP
        group's: its busiest rank's ``ceil(seqs / dp)`` sequences and their share of the
        cached tokens."""
        rank = busiest_rank_tokens(self.dep, seqs)
        fixed, per_kv = self._rank_terms(rank)
        return fixed, per_kv * rank / seqs

    def _rank_terms(self, seqs: int) -> tuple[float, float]:
        hit = self._decode_memo.get(seqs)
        if hit is None:
            # 1001 and 2001 cached tokens per sequence: a kernel past its ridge at long context
            # (an absorbed MLA decode on many heads, ``mla_forms``) is exact from there up
            one, many = 1001 * seqs, 2001 * seqs
            lo = self._decode_ops_s(seqs, one, windowed=False)
            hi = self._decode_ops_s(seqs, many, windowed=False)
            slope = (hi - lo) / (many - one)
            hit = (lo - slope * one, slope)
            self._decode_memo[seqs] = hit
        return hit

    def _windowed(self, seqs: int) -> list[tuple[float, float, int]]:
        """(intercept, per cached token, window) of each sliding-window group's decode: linear
        in the tokens read, which stop growing at the window (``Attention.kv_read``)."""
        hit = self._window_memo.get(seqs)
        if hit is None:
            hit = []
            for count, att in self._pairs:
                cap = _cap(att)
                if not cap:
                    continue
                top = min(1001, cap)
                lo, hi = (count * _total_s(decode_ops(self.dep, att, seqs=seqs,
                                                      kv_tokens=kv * seqs), self.dep)
                          for kv in (1, top))  # fmt: skip
                slope = (hi - lo) / ((top - 1) * seqs) if top > 1 else 0.0
                hit.append((lo - slope * seqs, slope, cap))
            self._window_memo[seqs] = hit
        return hit

    def decode_attention_s(self, seqs: int, kv_tokens: float) -> float:
        """Decode attention of ``seqs`` sequences reading ``kv_tokens`` in all, all layers (a
        wide-EP group: its busiest rank's share, ``decode_attention_terms``)."""
        rank = busiest_rank_tokens(self.dep, seqs)
        seqs, kv_tokens = rank, kv_tokens * rank / seqs
        fixed, per_kv = self._rank_terms(seqs)
        total = fixed + per_kv * kv_tokens
        if self.windowed:
            total += sum(a + b * min(kv_tokens, seqs * w) for a, b, w in self._windowed(seqs))
        return total

    def prefill_attention_s(self, tokens: int, cached: int, seqs: int = 1) -> float:
        """Prefill attention of one piece, all layers."""
        key = (tokens, cached, seqs)
        hit = self._prefill_memo.get(key)
        if hit is None:
            if len(self._prefill_memo) > self.MEMO_LIMIT:
                self._prefill_memo.clear()
            hit = sum(
                count * _total_s(prefill_ops(self.dep, att, tokens=tokens, cached=cached,
                                             seqs=seqs), self.dep)
                for count, att in self._pairs
            )
            self._prefill_memo[key] = hit
        return hit

    def _kernel_counts(self) -> None:
        dep = self.dep
        token = [outer_ops(dep, tokens=1, first=self._first, last=self._last)] + [
            token_ops(dep, tokens=1, layer=layer) for layer, _ in self._groups
        ]
        parts = 2 if dep.two_batch_overlap else 1  # two micro-batches issue the blocks twice
        weights = [1] + [count * parts for _, count in self._groups]
        self._token_kernels = sum(w * _kernels(ops) for w, ops in zip(weights, token, strict=True))
        self._token_calls = sum(w * _calls(ops) for w, ops in zip(weights, token, strict=True))
        sampling = sample_ops(dep, seqs=1) if self._last else []
        self._sample_kernels = _kernels(sampling)
        self._sample_calls = _calls(sampling)
        # the decode attention of every block (with its K/V repeat and cache upkeep), and one
        # prefill piece's attention: kernels and torch calls
        dec = [(c, decode_ops(dep, att, seqs=1, kv_tokens=1)) for c, att in self._pairs]
        dec.append((self._n_layers, cache_ops(dep, 1)))
        self._dec_kernels = sum(c * _kernels(ops) for c, ops in dec)
        self._dec_calls = sum(c * _calls(ops) for c, ops in dec)
        pre = [(c, prefill_ops(dep, att, tokens=1, cached=0, seqs=1))
               for c, att in self._pairs]  # fmt: skip
        self._pre_kernels = sum(c * _kernels(ops) for c, ops in pre)
        self._pre_calls = sum(c * _calls(ops) for c, ops in pre)
        n_dec = self._token_kernels + self._sample_kernels + self._dec_kernels
        calls = self._token_calls + self._sample_calls + self._dec_calls
        # a decode-only iteration of device time A = kernels + gaps takes A + max(0, H - o A)
        # (the launch model): H the CPU's issue time, o the share of the device's time that
        # hides it; with o = 1 that is max(A, H), H then the launch model's cost of an
        # iteration without kernels. A graph replay hides nothing: its launch joins A (o = 1)
        graph = dep.cuda_graph
        o = 1.0 if graph else dep.host_overlap
        bare = iteration_launch(dep, n_dec, 0.0, calls, graph=graph)  # no kernel time
        self._dec_gap_s = bare.total_s if graph else bare.gaps_s
        self._dec_host_s = bare.total_s if o == 1.0 else iteration_launch(
            dep, n_dec, 0.0, calls, graph=graph, overlap=0.0).host_exposed_s
        self._dec_overlap = o

    # iteration times

    def iteration_s(self, batch: Batch) -> float:
        """Time of one iteration (any mix of prefill pieces and decode sequences)."""
        return self.mixed_s(batch.prefill, batch.decode_seqs, batch.decode_kv_tokens, batch.samples)

    def mixed_s(self, prefill, decode_seqs: int, decode_kv_tokens: int, sampled: int,
                replay: bool | None = None) -> float:  # fmt: skip
        """``iteration_s`` from plain arguments (the simulator's hot path); ``replay`` forces
        a CUDA-graph replay or eager issue (default: graphs for decode-only iterations)."""
        cpu_s = self._overhead_s
        if self._seq_s:
            cpu_s += self._seq_s * (decode_seqs + sum(b for _, _, b in prefill))
        if not prefill and decode_seqs and self.dep.pads_decode:
            rows, decode_kv_tokens = self.dep.padded_decode(decode_seqs, decode_kv_tokens)
            sampled += rows - decode_seqs
            decode_seqs = rows
        tokens = decode_seqs
        pieces = []
        for c, cached, seqs in prefill:
            tokens += c * seqs
            pieces.append(self.prefill_attention_s(c, cached, seqs))
        kernels_s = sum(pieces) * prefill_share(self.dep, pieces) if pieces else 0.0
        rank_tokens = None
        if prefill and self.dep.dp > 1:  # a chunk is not split over the ranks
            rank_tokens = busiest_rank_tokens(self.dep, tokens, max(c for c, _, _ in prefill))
        kernels_s += self.token_s(tokens, rank_tokens, not prefill) + self.sample_s(sampled)
        n = self._token_kernels + self._pre_kernels * len(prefill)
        calls = self._token_calls + self._pre_calls * len(prefill)
        if sampled:
            n += self._sample_kernels
            calls += self._sample_calls
        if decode_seqs:
            kernels_s += self.decode_attention_s(decode_seqs, decode_kv_tokens)
            n += self._dec_kernels
            calls += self._dec_calls
        graph = self.dep.cuda_graph and not prefill if replay is None else replay
        launch = iteration_launch(self.dep, n, kernels_s, calls, graph=graph).total_s
        return kernels_s + launch + cpu_s

class PipelineStepModel(StepModel):
    """Iteration times of a replica of ``dep.pp`` pipeline stages: a ``StepModel`` of each
    stage, the iteration's work split into the micro-batches in flight
    (``pipeline.micro_batches``), their stage times and sends combined by
    ``pipeline.pipeline_period_s``; equals ``iteration.pipeline_breakdown``'s total.

    A decode run's iterations are summed as an array (each stage's cost per iteration is its
    own closed form ``max(A + b j, H)``; a windowed model's, iteration by iteration), kept for
    the run last asked about: the engine asks about the same run at every request it finishes.
    """

    def __init__(self, dep, *, max_tokens: int = 4096):
        self.dep = dep
        self.max_tokens = max_tokens
        self.stages = [StepModel(dep, max_tokens=max_tokens, stage=st) for st in dep.stages]
        self.windowed = any(st.windowed for st in self.stages)
        self._n_layers = dep.model.n_layers
        self._p2p_memo: dict[int, float] = {}
        self._run: tuple = (None, None)  # (seqs, kv_tokens), cumulative times of that run

    # parts summed over the stages (``speculative`` prices draft steps from them)

    def token_s(self, tokens: int) -> float:
        return sum(st.token_s(tokens) for st in self.stages)

    def sample_s(self, seqs: int) -> float:
        return self.stages[-1].sample_s(seqs)

    def decode_attention_s(self, seqs: int, kv_tokens: float) -> float:
        return sum(st.decode_attention_s(seqs, kv_tokens) for st in self.stages)

    def prefill_attention_s(self, tokens: int, cached: int, seqs: int = 1) -> float:
        return sum(st.prefill_attention_s(tokens, cached, seqs) for st in self.stages)

    def sends_s(self, tokens: int) -> float:
        """The ``pp - 1`` stage-to-stage sends of one micro-batch of ``tokens`` tokens."""
        hit = self._p2p_memo.get(tokens)
        if hit is None:
            hit = sum(p2p_s(self.dep, tokens, b) for b in range(self.dep.pp - 1))
            self._p2p_memo[tokens] = hit
        return hit

    def _rows(self, prefill, decode_seqs: int) -> int:
        """Tokens a micro-batch sends on: decode rows padded as its graph runs them."""
        if not prefill and decode_seqs and self.dep.pads_decode:
            decode_seqs = self.dep.decode_bucket(decode_seqs)
        return decode_seqs + sum(c * b for c, _, b in prefill)

    # iteration times

    def mixed_s(self, prefill, decode_seqs: int, decode_kv_tokens: int, sampled: int,
                replay: bool | None = None) -> float:  # fmt: skip
        parts = micro_batches(prefill, decode_seqs, decode_kv_tokens, sampled, self.dep.pp)
        stage_s = [[st.mixed_s(*mb, replay=replay) for st in self.stages] for mb in parts]
        sends = [self.sends_s(self._rows(mb[0], mb[1])) for mb in parts]
        running = decode_seqs + sum(b for _, _, b in prefill)
        return pipeline_period_s(stage_s, sends, self._cpu_s(running))

    def _cpu_s(self, running: int) -> float:
        """The replica's CPU cost of one iteration (the scheduler's fixed and per-sequence
        work, ``Deployment.seq_overhead_s``), once per iteration, not once per stage."""
        return self.dep.iteration_overhead_s + self.dep.seq_overhead_s * running

    def decode_s(self, seqs: int, kv_tokens: int) -> float:
        return self.mixed_s((), seqs, kv_tokens, seqs)

    def _run_times(self, seqs: int, kv_tokens: int, iterations: int):
        """Cumulative times of the first 0 .. ``iterations`` iterations of a decode run."""
        key = (seqs, kv_tokens)
        if self._run[0] == key and len(self._run[1]) > iterations:
            return self._run[1]
        n = max(iterations, 2 * len(self._run[1]) - 2 if self._run[0] == key else 0, 64)
        steps = self._decode_times(seqs, kv_tokens, n)
        times = np.concatenate(([0.0], np.cumsum(steps)))
        self._run = (key, times)
        return times

    def _decode_times(self, seqs: int, kv_tokens: int, n: int):
        """Each of the first ``n`` iterations of the run, as an array."""
        grow = self._growth(seqs)
        if self.windowed:
            return np.array([self.decode_s(seqs, kv_tokens + j * grow) for j in range(n)])
        j = np.arange(n, dtype=float)
        stage_s, sends = [], []  # [micro-batch][stage] -> an array over iterations; [micro-batch]
        for _, d, kv, _ in micro_batches((), seqs, kv_tokens, seqs, self.dep.pp):
            stage_s.append([run_costs(a + b * j, h, o)
                            for a, b, h, o, _ in (st._run_terms(d, kv) for st in self.stages)])  # fmt: skip
            sends.append(self.sends_s(self._rows((), d)))
        latency = np.max([sum(row) + p for row, p in zip(stage_s, sends, strict=True)], axis=0)
        busy = np.max([sum(col) for col in zip(*stage_s, strict=True)], axis=0)
        return np.maximum(latency, busy) + self._cpu_s(seqs)

    def decode_run_s(self, seqs: int, kv_tokens: int, iterations: int) -> float:
        if iterations <= 0:
            return 0.0
        return float(self._run_times(seqs, kv_tokens, iterations)[iterations])

    def decode_iterations_until(self, seqs: int, kv_tokens: int, elapsed_s: float) -> int:
        if elapsed_s <= 0:
            return 1
        n = 64
        times = self._run_times(seqs, kv_tokens, n)
        while times[-1] < elapsed_s:
            n = 2 * (len(times) - 1)
            times = self._run_times(seqs, kv_tokens, n)
        return max(1, int(np.searchsorted(times, elapsed_s, side="left")))
