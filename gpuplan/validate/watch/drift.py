"""A run's figures held against its plan's bands, observation by observation.

Each figure is smoothed over its last ``smooth`` observations (their median: one slow step, a
checkpoint save, does not move it) and judged against its target's p10-p90 band. A figure out of
its band for more than ``window`` observations in a row is a breach: the run has left its plan.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass

from gpuplan.validate.watch.logs import StepRecord
from gpuplan.validate.watch.plan import Plan


@dataclass(frozen=True, slots=True)
class Verdict:
    name: str
    point: float
    band: tuple[float, float] | None
    measured: float
    observations: int
    status: str  # inside, above, below, no band
    streak: int  # observations in a row out of the band
    breached: bool

    @property
    def drift(self) -> float:
        """Measured over planned, less one."""
        return self.measured / self.point - 1 if self.point else 0.0


class Tracker:
    """Holds a run's observations against ``plan`` (module docstring)."""

    def __init__(self, plan: Plan, *, window: int = 10, smooth: int = 5, warmup: int = 3):
        self.plan = plan
        self.window, self.smooth, self.warmup = window, smooth, warmup
        self._recent: dict[str, deque] = {k: deque(maxlen=smooth) for k in plan.targets}
        self._count: dict[str, int] = dict.fromkeys(plan.targets, 0)
        self._streak: dict[str, int] = dict.fromkeys(plan.targets, 0)
        self._breached: set[str] = set()
        self._seen = 0  # observations offered, warm-up included
        self.last_step: int | None = None

    def observe(self, values: dict[str, float | None], *, whole_run: bool = False) -> None:
        """One observation: the figures it gives (None or absent: not given); ``whole_run``: a
        summary of the run, which no warm-up precedes."""
        self._seen += 0 if whole_run else 1
        if not whole_run and self._seen <= self.warmup:
            return
        for name, value in values.items():
            target = self.plan.targets.get(name)
            if target is None or value is None:
                continue
            self._recent[name].append(value)
            self._count[name] += 1
            smoothed = statistics.median(self._recent[name])
            inside = target.inside(smoothed)
            self._streak[name] = 0 if inside in (True, None) else self._streak[name] + 1
            if self._streak[name] > self.window:
                self._breached.add(name)

    def observe_record(self, rec: StepRecord) -> None:
        """A training log's record, as the plan's per-GPU figures (``values_of``)."""
        if rec.step is not None:
            self.last_step = rec.step
        values = values_of(rec, self.plan)
        if any(v is not None for v in values.values()):
            self.observe(values, whole_run=rec.whole_run)

    @property
    def breached(self) -> bool:
        return bool(self._breached)

    def verdicts(self) -> list[Verdict]:
        out = []
        for name, target in self.plan.targets.items():
            if not self._recent[name]:
                continue
            value = statistics.median(self._recent[name])
            inside = target.inside(value)
            status = ("no band" if inside is None else "inside" if inside else
                      "above" if value > target.band[1] else "below")  # fmt: skip
            out.append(Verdict(name=name, point=target.point, band=target.band, measured=value,
                               observations=self._count[name], status=status,
                               streak=self._streak[name], breached=name in self._breached))  # fmt: skip
        return out


def values_of(rec: StepRecord, plan: Plan) -> dict[str, float | None]:
    """A record's figures per GPU: its step time from whichever rate it logs (the plan's tokens
    a step over the job's tokens per second), and the other way round."""
    step = rec.step_time_s
    tokens = plan.tokens_per_step
    gpus = max(plan.gpus, 1)
    per_gpu = rec.tokens_per_s_per_gpu
    if per_gpu is None and rec.tokens_per_s:
        per_gpu = rec.tokens_per_s / gpus
    if step is None and per_gpu and tokens:
        step = tokens / (per_gpu * gpus)
    if per_gpu is None and step and tokens:
        per_gpu = tokens / step / gpus
    return {"step_time_s": step, "tokens_per_s_per_gpu": per_gpu,
            "peak_memory_bytes": rec.peak_memory_bytes, "mfu": rec.mfu,
            "tflops_per_gpu": rec.tflops_per_gpu}  # fmt: skip
