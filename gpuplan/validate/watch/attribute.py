"""Which layer a run's drift belongs to.

Training, with a PyTorch profiler trace of ``steps`` steps (``validate.trace`` reads its kernels):
each step's compute (every kernel but NCCL's), exposed communication (NCCL kernel time no compute
kernel overlaps) and GPU idle time (the trace's span that no kernel covers: the pipeline bubble
where the plan has pipeline stages, else the host's launch gaps) against the plan's seconds a step
per class; the class with the largest excess is the drift's layer. Without a trace only memory
drift is attributed (to the model layer's memory terms); step-time drift is said to need one.

Serving, from the engine's gauges: time to first token out of band while requests wait beyond
the plan's queue is queueing (runtime layer); a KV cache past vLLM's watermark (99% in use) is memory (preemption);
TPOT out of band is the decode iteration's compute.
"""

from __future__ import annotations

from gpuplan.sim.runtime.serving.deployment import SchedulerConfig
from gpuplan.validate.watch.drift import Verdict
from gpuplan.validate.watch.plan import Plan

# the share of KV blocks in use beyond which vLLM admits no new prefill and preempts: all but
# its watermark (``SchedulerConfig.watermark``, vLLM's 1%)
KV_FULL = 1.0 - SchedulerConfig().watermark


def _union_s(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for start, stop in sorted(intervals):
        if stop <= end:
            continue
        total += stop - max(start, end)
        end = stop
    return total


def trace_classes(trace_path: str, steps: int) -> dict[str, float]:
    """Seconds a step of compute, exposed communication and idle GPU time in a profiler trace."""
    from gpuplan.validate.trace import kernels

    k = kernels(trace_path)
    if k.empty:
        return {}
    spans = list(zip(k["start_s"], k["start_s"] + k["dur_s"], strict=True))
    compute = [s for s, cls in zip(spans, k["class"], strict=True) if cls != "nccl"]
    busy = _union_s(spans)
    compute_s = _union_s(compute)
    span = max(e for _, e in spans) - min(s for s, _ in spans)
    return {"compute": compute_s / steps, "communication": (busy - compute_s) / steps,
            "idle": (span - busy) / steps}  # fmt: skip


def training_layer(plan: Plan, verdicts: list[Verdict], classes: dict[str, float]) -> str:
    """One sentence: the layer the training drift belongs to."""
    out = {v.name for v in verdicts if v.status in ("above", "below")}
    timing = out & {"step_time_s", "tokens_per_s_per_gpu", "mfu", "tflops_per_gpu"}
    if not out:
        return "no drift: every figure inside its band"
    if not timing:
        return "memory: peak memory out of its band (the model layer's memory terms)"
    if not classes:
        return ("step time out of its band; its layer needs a profiler trace (--profile "
                "TRACE.json from torch.profiler) to be told")  # fmt: skip
    idle_class = "bubble" if plan.pipeline else "host"
    planned = {"compute": plan.categories_s.get("compute", 0.0),
               "communication": plan.categories_s.get("communication", 0.0),
               idle_class: plan.categories_s.get("bubble", 0.0) + plan.categories_s.get("host", 0.0)}  # fmt: skip
    measured = {"compute": classes["compute"], "communication": classes["communication"],
                idle_class: classes["idle"]}  # fmt: skip
    excess = {k: measured[k] - planned[k] for k in planned}
    layer = max(excess, key=excess.get)
    parts = ", ".join(f"{k} {measured[k]:.3g} s (plan {planned[k]:.3g} s)" for k in planned)
    return f"{layer}: the largest excess a step ({parts})"


def serving_layer(plan: Plan, verdicts: list[Verdict], gauges: dict[str, float | None]) -> str:
    """One sentence: the layer the serving drift belongs to."""
    out = {v.name for v in verdicts if v.status == "above" or
           (v.status == "below" and v.name in ("output_tokens_per_s", "requests_per_s"))}  # fmt: skip
    if not out:
        return "no drift: every figure inside its band"
    waiting, kv = gauges.get("waiting"), gauges.get("kv_use")
    if kv is not None and kv >= KV_FULL:
        return f"memory: KV cache {kv:.0%} full (the engine preempts; runtime layer)"
    plan_wait = plan.waiting_mean or 0.0
    if "ttft_s" in out and waiting is not None and waiting > max(1.0, 2 * plan_wait):
        return (f"queueing: {waiting:.0f} requests waiting against {plan_wait:.1f} planned "
                "(offered load beyond what the plan priced; runtime layer)")  # fmt: skip
    if "tpot_s" in out:
        return "compute: decode iterations slower than priced (TPOT out of its band)"
    return f"{', '.join(sorted(out))} out of band; the gauges show no queue or full cache"
