"""Failures as random processes, with rates from a data file whose every rate cites its source.

Each cause (``data/failure_rates.yaml``) has a rate per unit-hour of its unit — a GPU, a node,
a leaf group, or a GPU of a running job (``job_gpu``: software failures strike only running jobs;
they are drawn per GPU and dropped where the GPU is idle) — and a scope: ``node`` takes the
server out of service until it is repaired, ``leaf`` every server under one leaf switch, ``job``
only restarts the job(s) it strikes.

Every unit fails as an independent renewal process, inter-failure times exponential (a Poisson
process) or Weibull with the same mean and the file's shape (Schroeder and Gibson, DSN 2006). A
Weibull renewal process is started well before time zero (five mean lifetimes) so that what falls
in the horizon is its stationary part, not every unit's infancy at once. A unit's failures while
it is being repaired are dropped (the replaced part starts afresh). All draws come from one
numpy generator: the same seed, the same failures.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path

import numpy as np
import yaml

from gpuplan.errors import GpuplanError, check_choice

UNITS = ("gpu", "node", "leaf", "job_gpu")
SCOPES = ("node", "leaf", "job")
DISTRIBUTIONS = ("exponential", "weibull")
HOUR_S = 3600.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Cause:
    """One interruption cause: how often per unit, what it takes down, for how long."""

    name: str
    category: str
    unit: str
    scope: str
    rate_per_hour: float  # per unit
    detection_s: float
    repair_s: float
    graceful: bool = False
    source: str = ""

    def __post_init__(self) -> None:
        check_choice(f"cause {self.name!r} unit", self.unit, UNITS)
        check_choice(f"cause {self.name!r} scope", self.scope, SCOPES)
        for field in ("rate_per_hour", "detection_s", "repair_s"):
            value = getattr(self, field)
            if not isinstance(value, int | float) or value < 0 or math.isnan(value):
                raise GpuplanError(
                    f"failure cause {self.name!r}: {field}={value!r} is invalid: it must be a "
                    "number >= 0"
                )


@functools.cache
def _default_text() -> str:
    return (resources.files("gpuplan.sim.runtime.cluster") / "data" / "failure_rates.yaml").read_text()


def load_causes(path: str | Path | None = None, *, scale: float = 1.0,
                overrides: dict | None = None) -> tuple[tuple[Cause, ...], float]:  # fmt: skip
    """The causes of a rates file (default: the Llama 3 Table 5 file) and its Weibull shape;
    ``scale`` multiplies every rate; ``overrides`` replaces fields by cause name."""
    if scale < 0:
        raise GpuplanError(f"failure rate scale={scale!r} is invalid: use a factor >= 0")
    if path in (None, "default"):
        doc = yaml.safe_load(_default_text())
    else:  # a user's file: numbers as YAML 1.2 writes them, every key checked (one line each)
        from gpuplan.sim.runtime.cluster.schema import load_rates

        doc = load_rates(Path(path))
    source = doc.get("source", "")
    causes = []
    for raw in doc["causes"]:
        if "rate_per_hour" in raw:
            rate = raw["rate_per_hour"]
        else:
            rate = raw["count"] / raw["exposure_hours"]
        causes.append(
            Cause(
                name=raw["name"],
                category=raw["category"],
                unit=raw["unit"],
                scope=raw["scope"],
                rate_per_hour=rate,
                detection_s=raw.get("detection_s", 0.0),
                repair_s=raw.get("repair_s", 0.0),
                graceful=bool(raw.get("graceful", False)),
                source=raw.get("source", source),
            )  # fmt: skip
        )
    causes = _override(causes, overrides or {})
    causes = [replace(c, rate_per_hour=c.rate_per_hour * scale) for c in causes]
    return tuple(causes), float(doc.get("weibull_shape", 0.75))


def _override(causes: list[Cause], overrides: dict) -> list[Cause]:
    names = {c.name: c for c in causes}
    for name, fields in overrides.items():
        if name not in names:
            from gpuplan.errors import unknown_key

            raise unknown_key("failure cause", name, names)
        names[name] = replace(names[name], **fields)
    return list(names.values())


def _renewal_times(n_units: int, mean_s: float, horizon_s: float, rng, shape: float | None):
    """(unit, time) of every failure in [0, horizon) of ``n_units`` renewal processes."""
    if n_units == 0 or not math.isfinite(mean_s):
        return np.zeros(0, int), np.zeros(0)
    if shape is None:  # Poisson: the superposition of the units is one Poisson process
        count = rng.poisson(n_units * horizon_s / mean_s)
        return rng.integers(0, n_units, count), rng.uniform(0.0, horizon_s, count)
    scale = mean_s / math.gamma(1.0 + 1.0 / shape)
    t = np.full(n_units, -5.0 * mean_s)  # burn-in: the stationary regime by time zero
    units, times = [], []
    alive = np.arange(n_units)
    while len(alive):
        t[alive] += scale * rng.weibull(shape, len(alive))
        alive = alive[t[alive] < horizon_s]
        hit = alive[t[alive] >= 0]
        units.append(hit)
        times.append(t[hit])
    return np.concatenate(units), np.concatenate(times)


def failure_events(causes, *, units: dict[str, int], horizon_s: float, rng,
                   distribution: str = "exponential", shape: float = 0.75) -> list[tuple]:  # fmt: skip
    """Every failure in [0, horizon): (time_s, cause index, unit index), in time order."""
    check_choice("failure distribution", distribution, DISTRIBUTIONS)
    out = []
    for k, cause in enumerate(causes):
        if cause.rate_per_hour <= 0:
            continue
        mean_s = HOUR_S / cause.rate_per_hour
        who, when = _renewal_times(
            units[cause.unit], mean_s, horizon_s, rng, shape if distribution == "weibull" else None
        )
        out += [(float(t), k, int(u)) for t, u in zip(when, who, strict=True)]
    out.sort()
    return out


def mtbf_s(causes, *, gpus: int, nodes: int) -> float:
    """Mean time between interruptions of a job on ``gpus`` GPUs of ``nodes`` nodes."""
    per_unit = {"gpu": gpus, "job_gpu": gpus, "node": nodes, "leaf": 0}
    rate = sum(c.rate_per_hour * per_unit[c.unit] for c in causes) / HOUR_S
    return 1.0 / rate if rate > 0 else math.inf
