"""What a training run costs: time to a token budget, GPU-hours, money and energy.

- Money: GPU-hours times a rental price per GPU-hour from ``data/prices.json``, whose every entry
  names its source and date (or a price the user gives).
- Energy, named assumptions: each GPU draws ``power_fraction`` of its TDP on average over the run
  (0.8: training keeps the GPUs busy but below the board limit most of the time; a round figure,
  not a measurement — Patterson et al. 2021, "Carbon Emissions and Large Neural Network
  Training", arXiv:2104.10350, argue for measured power instead); the facility multiplies the IT
  power by a PUE of 1.1 (the figure Patterson et al. use for Google's datacenters; they cite 1.59
  for the average datacenter). Host CPUs, memory and network are not counted.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass
from importlib import resources

from gpuplan.errors import GpuplanError, check_positive, expects
from gpuplan.sim.estimate.inputs import check_gpus
from gpuplan.units import HOUR

POWER_FRACTION = 0.8
PUE = 1.1
KWH = 3.6e6  # joules


@dataclass(frozen=True, slots=True)
class Price:
    usd_per_gpu_hour: float
    source: str
    date: str

    @property
    def cited(self) -> str:
        """Where the price is from and when: ``source (date)``."""
        return f"{self.source} ({self.date})"


@functools.cache
def _prices() -> dict[str, Price]:
    path = resources.files("gpuplan.sim.parallel") / "data" / "prices.json"
    raw = json.loads(path.read_text())["prices"]
    return {k: Price(v["usd_per_gpu_hour"], v["source"], v["date"]) for k, v in raw.items()}


def price_for(gpu: str) -> Price | None:
    """The price file's entry for accelerator ``gpu``, or None when it has none."""
    return _prices().get(gpu)


@dataclass(frozen=True, slots=True, kw_only=True)
class RunBudget:
    """A run of ``tokens`` tokens at a predicted throughput."""

    tokens: float
    time_to_train_s: float
    gpu_hours: float
    cost_usd: float | None
    price_source: str
    energy_kwh: float
    power_fraction: float
    pue: float

    def to_dict(self) -> dict:
        return {
            "tokens": self.tokens,
            "time_to_train_s": self.time_to_train_s,
            "gpu_hours": self.gpu_hours,
            "cost_usd": self.cost_usd,
            "price_source": self.price_source,
            "energy_kwh": self.energy_kwh,
            "power_fraction": self.power_fraction,
            "pue": self.pue,
        }


@expects(acc="Accelerator")
def run_budget(
    *,
    tokens: float,
    tokens_per_s: float,
    gpus: int,
    acc,
    usd_per_gpu_hour: float | None = None,
    power_fraction: float = POWER_FRACTION,
    pue: float = PUE,
) -> RunBudget:
    """Time, GPU-hours, cost and energy of training ``tokens`` tokens."""
    check_positive("tokens", tokens)
    check_positive("tokens_per_s", tokens_per_s)
    check_gpus(gpus)
    check_positive("power_fraction", power_fraction)
    check_positive("pue", pue)
    time_s = tokens / tokens_per_s
    gpu_hours = gpus * time_s / HOUR
    price = price_for(acc.key)
    if usd_per_gpu_hour is not None:
        check_positive("price_per_gpu_hour", usd_per_gpu_hour)
        rate, source = usd_per_gpu_hour, "given by the user"
    elif price is not None:
        rate, source = price.usd_per_gpu_hour, price.cited
    else:
        rate, source = None, f"no price for {acc.key} in the price file; give one"
    energy_j = gpus * (acc.tdp_w or 0.0) * power_fraction * time_s * pue
    cost = None if rate is None else gpu_hours * rate
    for what, value in (("time", time_s), ("energy", energy_j), ("cost", cost or 0.0)):
        if not math.isfinite(value):  # e.g. tokens_per_s=1e-300 or pue=1e308
            raise GpuplanError(
                f"tokens={tokens:g}, tokens_per_s={tokens_per_s:g}, gpus={gpus}, power_fraction="
                f"{power_fraction:g}, pue={pue:g}, usd_per_gpu_hour={rate}: the run's {what} "
                "overflows a float; give realistic values")  # fmt: skip
    return RunBudget(
        tokens=tokens,
        time_to_train_s=time_s,
        gpu_hours=gpu_hours,
        cost_usd=cost,
        price_source=source,
        energy_kwh=energy_j / KWH,
        power_fraction=power_fraction,
        pue=pue,
    )


def usd_per_hour(gpu: str, override: float | None = None) -> float:
    """The hourly rate of one GPU (override, price file, else NaN)."""
    if override is not None:
        return override
    price = price_for(gpu)
    return price.usd_per_gpu_hour if price else float("nan")


def kwh_per_hour(gpus: int, tdp_w: float) -> float:
    """Energy of ``gpus`` GPUs running for an hour, as ``run_budget`` prices it: each at
    ``POWER_FRACTION`` of its TDP, times the PUE."""
    return gpus * tdp_w * POWER_FRACTION * PUE * HOUR / KWH


def kwh_per_million_tokens(gpus: int, tdp_w: float, tokens_per_s: float) -> float:
    """Energy of a million tokens made at ``tokens_per_s`` by ``gpus`` GPUs (``kwh_per_hour``)."""
    return kwh_per_hour(gpus, tdp_w) / (tokens_per_s * HOUR) * 1e6


def usd_per_million_tokens(gpus: int, usd_per_gpu_hour: float, output_tokens_per_s: float) -> float:
    """GPU cost of a million output tokens: ``gpus`` GPU-hours an hour over the tokens made in
    that hour."""
    return gpus * usd_per_gpu_hour / HOUR / output_tokens_per_s * 1e6
