"""Records, the two timing conventions and the time boxes every part of the campaign shares.

Timing conventions (ARCHITECTURE.md, ``params.timing``):

- ``isolated``: each repetition is a ``synchronize``, a CUDA event, one call, a CUDA event and a
  ``synchronize``: what a user timing one call measures, launch latency and the CPU's issue time
  included where the GPU does not hide them. No L2 flush. The record's ``time_s`` is the median.
- ``device``: the kernels' own time in a busy stream. The GPU first spins
  (``torch.cuda._sleep``) long enough for the CPU to queue every repetition, then the calls run
  back to back under ``torch.profiler``; ``time_s`` is the summed duration of the GPU activities
  (kernels, memcpy, memset) that start inside the labelled block, per call. That is what a
  profiler trace's kernel durations add up to (``harness/trace.py`` reads kernels the same way).

On a CPU both use ``time.perf_counter`` around each call (``device`` is then not a device time:
the smoke path only checks the plumbing).
"""

from __future__ import annotations

import statistics
import time

from ..harness.records import PARAM_KEYS

# Whole-model kinds, additive to the contract: gpuplan/validate/record_kinds.py holds their rules,
# and this copy of their keys (the package imports nothing of gpuplan but the harness) is checked
# against them by tests/test_stack_campaign.py.
MODEL_PARAM_KEYS: dict[str, tuple[str, ...]] = {
    "prefill_step": ("model", "layers", "batch", "seq", "dtype"),
    "model_decode_step": ("model", "layers", "batch", "context", "kv_cache", "dtype"),
    "model_train_step": ("model", "layers", "micro_batch", "seq", "optimizer", "precision"),
}
CONTRACT_PARAM_KEYS: dict[str, tuple[str, ...]] = {
    **{kind: PARAM_KEYS[kind] for kind in ("gemm", "attention", "elementwise")},
    **MODEL_PARAM_KEYS,
    # MoE experts' grouped GEMM (stack_campaign/grouped.py; validate/record_kinds.py has its rules,
    # which tests/test_stack_campaign.py checks this copy against)
    "grouped_gemm": ("groups", "m", "n", "k", "dtype"),
}
OPTIONAL_PARAMS = ("stack", "attention_kernel", "timing", "max_cache_len", "hf_config", "impl")
# GPU spin before a device-timed block: 2e7 cycles, about 10 ms at the H200's 1.98 GHz maximum
# SM clock (nvidia-smi clocks.max.sm, docs/dev/campaign.md): longer than the CPU takes to queue
# the block's repetitions of any case here (at most ~1 ms each).
SPIN_CYCLES = 20_000_000


def make_record(kind: str, device: str, params: dict, measured: dict, source: str,
                **extra) -> dict:
    """One contract record; params other than the kind's keys plus the optional ones is a bug."""
    want = set(CONTRACT_PARAM_KEYS[kind])
    got = set(params)
    if not want <= got or got - want - set(OPTIONAL_PARAMS):
        raise ValueError(f"{kind} params {sorted(got)} differ from {sorted(want)} (+ optional)")
    ordered = {k: params[k] for k in CONTRACT_PARAM_KEYS[kind]}
    ordered |= {k: params[k] for k in OPTIONAL_PARAMS if k in params}
    return {"kind": kind, "device": device, "params": ordered, "measured": measured,
            "source": source, **extra}


class TimeBox:
    """A deadline on the monotonic clock."""

    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + max(0.0, seconds)

    def left_s(self) -> float:
        return max(0.0, self.end - time.monotonic())

    def over(self) -> bool:
        return time.monotonic() >= self.end


def log(msg: str) -> None:
    print(msg, flush=True)


PROBE_LAUNCHES = 64  # tiny kernels per host probe (``harness.timing.Clock.host_probe_s``)


def host_probe_s_per_launch(torch, device: str) -> float:
    """The harness's host probe now, in seconds per kernel launch."""
    from ..harness.timing import Clock

    return Clock(torch, device).host_probe_s(launches=PROBE_LAUNCHES) / PROBE_LAUNCHES


class Timer:
    """Both timing conventions on one device ("cuda" or "cpu")."""

    def __init__(self, torch, device: str, *, target_s: float = 0.08, max_reps: int = 20) -> None:
        self.torch = torch
        self.device = device
        self.target_s = target_s
        self.max_reps = max_reps

    def sync(self) -> None:
        if self.device == "cuda":
            self.torch.cuda.synchronize()

    def _once(self, fn, before=None) -> float:
        if before is not None:
            before()
        self.sync()
        if self.device != "cuda":
            start = time.perf_counter()
            fn()
            return time.perf_counter() - start
        ev = self.torch.cuda.Event
        start, end = ev(enable_timing=True), ev(enable_timing=True)
        start.record()
        fn()
        end.record()
        self.torch.cuda.synchronize()
        return start.elapsed_time(end) * 1e-3

    def reps_for(self, estimate_s: float) -> int:
        return max(3, min(self.max_reps, int(self.target_s / max(estimate_s, 1e-7))))

    def isolated(self, fn, *, warmup: int = 2, before=None, reps: int | None = None) -> dict:
        """Median of single synchronized calls; ``before`` runs untimed before each call."""
        for _ in range(warmup):
            if before is not None:
                before()
            fn()
        estimate = self._once(fn, before)
        n = reps or self.reps_for(estimate)
        times = sorted(self._once(fn, before) for _ in range(n))
        return _stats(times, "isolated")

    def device_time(self, fn, *, reps: int = 5) -> dict | None:
        """Kernel time per call from torch.profiler, the calls queued behind a GPU spin."""
        t = self.torch
        if self.device != "cuda":
            times = sorted(self._once(fn) for _ in range(reps))
            return _stats(times, "device (CPU wall time: smoke path)")
        got = profiled_block(t, fn, reps, "campaign_block")
        if got is None:
            return None
        _, events, lo, hi = got
        total_us, kernels, names, span_us = 0.0, 0, [], None
        for e in events:
            if e.device_type != t.autograd.DeviceType.CUDA or "sleep" in e.name.lower():
                continue
            if e.name == "campaign_block":  # the annotation's own GPU-side span, not a kernel
                span_us = e.time_range.elapsed_us()
                continue
            if lo <= e.time_range.start <= hi:
                total_us += e.time_range.elapsed_us()
                kernels += 1
                if e.name not in names and len(names) < 4:
                    names.append(e.name[:120])
        if kernels == 0:
            return None
        per_call = total_us * 1e-6 / reps
        span = None if span_us is None else span_us * 1e-6 / reps
        return {"median_s": per_call, "reps": reps, "kernels_per_call": kernels / reps,
                "kernel_names": names, "gpu_span_per_call_s": span, "timing": "device"}


def profiled_block(torch, fn, reps: int, label: str):
    """``reps`` calls of ``fn`` under torch.profiler, queued behind a GPU spin inside a
    ``record_function(label)`` block: (profiler, events, block start us, block end us), or None
    where the profiler recorded no such block."""
    t = torch
    act = [t.profiler.ProfilerActivity.CPU, t.profiler.ProfilerActivity.CUDA]
    fn()
    t.cuda.synchronize()
    with t.profiler.profile(activities=act) as prof:
        t.cuda._sleep(SPIN_CYCLES)
        with t.profiler.record_function(label):
            for _ in range(reps):
                fn()
            t.cuda.synchronize()
    events = prof.events()
    block = [e for e in events if e.name == label and e.device_type == t.autograd.DeviceType.CPU]
    if not block:
        return None
    return prof, events, block[0].time_range.start, block[0].time_range.end


def _stats(times: list[float], timing: str) -> dict:
    pick = lambda q: times[min(len(times) - 1, int(q * len(times)))]  # noqa: E731
    return {"median_s": statistics.median(times), "reps": len(times), "min_s": times[0],
            "p10_s": pick(0.1), "p90_s": pick(0.9), "timing": timing}


def lib_source(torch, device: str, what: str, stats: dict) -> str:
    """Short provenance: library, what ran, timer, statistic, GPU."""
    if device == "cuda":
        lib = f"torch {torch.__version__.split('+')[0]} cu{(torch.version.cuda or '')}"
        gpu = torch.cuda.get_device_name(0)
    else:
        lib, gpu = f"torch {torch.__version__}", "CPU"
    if stats["timing"] == "device":
        how = f"torch.profiler kernel time in a busy stream, {stats['reps']} calls"
    else:
        how = f"{stats['timing']}: median of {stats['reps']} synchronized calls, no L2 flush"
    return f"{lib}, {what}, {how}, {gpu}"


def timed(timer, fn, timing: str) -> dict | None:
    """One timing of ``fn``; None (logged) where the profiler fails, so the case goes on."""
    if timing == "isolated":
        return timer.isolated(fn)
    try:
        return timer.device_time(fn)
    except Exception as exc:  # a profiler failure must not cost the isolated records
        log(f"  device timing failed: {type(exc).__name__}: {str(exc)[:160]}")
        return None


def write_both_timings(writer, timer, fn, kind: str, device_key: str, params: dict, torch,
                       device: str, what: str) -> None:
    """``fn`` timed ``isolated`` and ``device`` (``timed``), one ``pytorch``-stack record each,
    the kernels' names kept in its stats; a timing the profiler fails is left out."""
    for timing in ("isolated", "device"):
        stats = timed(timer, fn, timing)
        if stats is None:
            continue
        writer.write(make_record(kind, device_key, dict(params, stack="pytorch", timing=timing),
                                 {"time_s": stats["median_s"]},
                                 lib_source(torch, device, what, stats), stats=stats))
