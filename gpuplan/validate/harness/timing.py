"""Timing a piece of device work the way a model step sees it, and the time budget of a run.

On CUDA each repetition is one call of the function between two CUDA events on the current
stream, and the result is the median over repetitions (METHOD.md in the device library: warm up,
time with device events, repeat, take the median). For kernels small enough to sit in the 60 MB
L2 of an H200 the L2 is flushed before each timed call by zeroing a 256 MB buffer (the method of
``triton.testing.do_bench``); the zeroing runs before the start event, so it is not timed, and
while it runs the CPU queues the timed call, so a single kernel is timed without its launch gap
while a call that is bound by the CPU (many small launches, autograd bookkeeping) is timed with
it, as in a real step. On the CPU the same loop uses ``time.perf_counter``.

The number of repetitions adapts: about ``target_s`` of timed work, at least ``min_reps``, at
most ``max_reps``.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

FLUSH_BYTES = 256 * 2**20  # 4x the H200's 60 MB L2 (H200 datasheet; KINDS.md reads 60 MB)


@dataclass(frozen=True, slots=True, kw_only=True)
class Timing:
    """Times of the repetitions of one case, in seconds."""

    times_s: tuple[float, ...]
    warmup: int
    l2: str  # "flushed" or "warm"

    @property
    def median_s(self) -> float:
        return statistics.median(self.times_s)

    def stats(self) -> dict:
        """Summary kept beside each record: spread, repetitions, L2 treatment."""
        ordered = sorted(self.times_s)
        pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
        return {
            "reps": len(ordered),
            "warmup": self.warmup,
            "median_s": self.median_s,
            "min_s": ordered[0],
            "p10_s": pick(0.1),
            "p90_s": pick(0.9),
            "l2": self.l2,
        }


class Budget:
    """A wall-clock deadline for a whole run, shared out among kinds as they start."""

    def __init__(self, total_s: float, weights: dict[str, float]) -> None:
        self.start = time.monotonic()
        self.end = self.start + total_s
        self.weights = dict(weights)

    def left_s(self) -> float:
        return max(0.0, self.end - time.monotonic())

    def kind_deadline(self, kind: str, remaining_kinds: list[str]) -> float:
        """Monotonic deadline for ``kind``: its weight's share of what is left now."""
        total = sum(self.weights.get(k, 1.0) for k in remaining_kinds) or 1.0
        share = self.weights.get(kind, 1.0) / total
        return time.monotonic() + self.left_s() * share


class Clock:
    """Times callables on one device: CUDA events on 'cuda', perf_counter on 'cpu'."""

    def __init__(
        self, torch, device: str, *, target_s: float = 0.25, min_reps: int = 10, max_reps: int = 50
    ) -> None:
        self.torch = torch
        self.device = device
        self.target_s = target_s
        self.min_reps = min_reps
        self.max_reps = max_reps
        self._flush_buf = None

    def flush_l2(self) -> None:
        """Evict the L2 by writing a buffer four times its size (CUDA only)."""
        if self.device != "cuda":
            return
        if self._flush_buf is None:
            self._flush_buf = self.torch.empty(FLUSH_BYTES, dtype=self.torch.int8, device="cuda")
        self._flush_buf.zero_()

    def host_probe_s(self, launches: int = 64, reps: int = 5) -> float:
        """Host speed now: median wall time to launch ``launches`` tiny kernels (no sync inside).

        A CPU-bound call (an eager decode step, a small fwd_bwd) costs host time per launch; on
        a shared virtual machine that speed drifts, and this probe, taken beside such a case,
        says how fast the host was when the case ran."""
        x = self.torch.zeros(1, device=self.device)
        times = []
        for _ in range(reps):
            self.sync()
            start = time.perf_counter()
            for _ in range(launches):
                x.add_(1.0)
            times.append(time.perf_counter() - start)
        self.sync()
        return statistics.median(times)

    def sync(self) -> None:
        if self.device == "cuda":
            self.torch.cuda.synchronize()

    def spin_s(self, cycles: int) -> float:
        """How long ``torch.cuda._sleep(cycles)`` keeps this GPU busy (median of 5; 0 on a CPU)."""
        if self.device != "cuda" or cycles <= 0:
            return 0.0
        t = self.torch
        times = []
        for _ in range(5):
            start, end = t.cuda.Event(enable_timing=True), t.cuda.Event(enable_timing=True)
            start.record()
            t.cuda._sleep(cycles)
            end.record()
            t.cuda.synchronize()
            times.append(start.elapsed_time(end) * 1e-3)
        return statistics.median(times)

    def time(
        self,
        fn,
        *,
        flush: bool,
        warmup: int = 3,
        min_reps: int | None = None,
        max_reps=None,
        prespin_cycles: int = 0,
    ) -> Timing:
        """Warm up ``fn``, then time ``reps`` single calls; the count adapts to the call's length.

        ``prespin_cycles``: after the flush the GPU also spins this many clock cycles
        (``torch.cuda._sleep``) before the start event, so the CPU has queued the whole call
        by then and the time is the device's alone (no launch or autograd gap)."""
        for _ in range(warmup):
            fn()
        self.sync()
        estimate_s = max(self._time_once(fn, flush=flush, spin=prespin_cycles), 1e-7)
        hi = self.max_reps if max_reps is None else min(max_reps, self.max_reps)
        lo = min(hi, self.min_reps if min_reps is None else min_reps)
        reps = max(lo, min(hi, int(self.target_s / estimate_s)))
        if estimate_s * reps > 8 * self.target_s:  # slow calls: fewer, but at least 3
            reps = max(3, int(8 * self.target_s / estimate_s))
        times = self._time_cuda(fn, reps, flush, prespin_cycles) if self.device == "cuda" else None
        if times is None:
            times = [self._time_once(fn, flush=flush, spin=prespin_cycles) for _ in range(reps)]
        flushed = flush and self.device == "cuda"
        return Timing(times_s=tuple(times), warmup=warmup, l2="flushed" if flushed else "warm")

    def _time_once(self, fn, *, flush: bool, spin: int = 0) -> float:
        if self.device != "cuda":
            start = time.perf_counter()
            fn()
            return time.perf_counter() - start
        return self._time_cuda(fn, 1, flush, spin)[0]

    def _time_cuda(self, fn, reps: int, flush: bool, spin: int = 0) -> list[float]:
        event = self.torch.cuda.Event
        starts = [event(enable_timing=True) for _ in range(reps)]
        ends = [event(enable_timing=True) for _ in range(reps)]
        for start, end in zip(starts, ends, strict=True):
            if flush:
                self.flush_l2()
            if spin:
                self.torch.cuda._sleep(spin)
            start.record()
            fn()
            end.record()
        self.torch.cuda.synchronize()
        return [s.elapsed_time(e) * 1e-3 for s, e in zip(starts, ends, strict=True)]
