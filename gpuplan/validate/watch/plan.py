"""The plan a run is held against: the ``--json`` document of ``gpuplan train`` or ``gpuplan
serve``, read into targets (a point and its p10-p90 band) per figure the run reports.

Training targets are per GPU, as the frameworks log them: step time, tokens per second per GPU
(the job's tokens over its GPUs), peak memory, MFU and achieved model TFLOP/s per GPU (the
plan's model FLOPs a step over its step time and GPUs; its band the step time's, inverted).
Serving targets: mean TTFT, TPOT and end-to-end latency, output tokens per second, requests per
second, and the queue (waiting requests) the simulation saw.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from gpuplan.errors import GpuplanError, check_number
from gpuplan.units import TFLOPS


@dataclass(frozen=True, slots=True)
class Target:
    """A planned figure: its point and p10-p90 band (None: the plan gives no band)."""

    name: str
    point: float
    band: tuple[float, float] | None

    def inside(self, value: float) -> bool | None:
        if self.band is None:
            return None
        lo, hi = self.band
        return lo <= value <= hi


@dataclass(frozen=True, slots=True)
class Plan:
    kind: str  # "train" or "serve"
    targets: dict[str, Target]
    gpus: int
    tokens_per_step: float | None  # training: global batch x sequence
    categories_s: dict[str, float]  # training: planned seconds a step per class
    pipeline: bool  # training: pp > 1 (GPU idle time is the bubble's, else the host's)
    waiting_mean: float | None  # serving: mean waiting requests the simulation saw
    label: str


def _band(doc: dict, key: str, scale: float = 1.0) -> tuple[float, float] | None:
    band = (doc.get("error_band") or {}).get(key)
    if not isinstance(band, list | tuple) or len(band) != 2:
        return None
    lo, hi = (float(v) * scale for v in band)
    return (lo, hi) if math.isfinite(lo) and math.isfinite(hi) else None


def load_plan(path: str | Path) -> Plan:
    """The plan in ``path`` (module docstring); anything else is a one-line GpuplanError."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text())
    except FileNotFoundError:
        raise GpuplanError(f"PLAN={str(p)!r} does not exist: write one with `gpuplan train ... "
                           "--json > plan.json` or `gpuplan serve ... --json > plan.json`") from None  # fmt: skip
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as err:
        raise GpuplanError(f"PLAN={str(p)!r} is not a JSON plan: {' '.join(str(err).split())[:200]}") from None  # fmt: skip
    if not isinstance(doc, dict):
        raise GpuplanError(f"PLAN={str(p)!r} is not a plan: a JSON object is expected")
    if doc.get("feasible") is False:
        raise GpuplanError(f"PLAN={str(p)!r} is a plan that does not fit: no run can be held "
                           "against it")  # fmt: skip
    if "step_time_s" in doc and "strategy" in doc:
        return _training(doc)
    if isinstance(doc.get("ttft_s"), dict) and "output_tokens_per_s" in doc:
        return _serving(doc)
    raise GpuplanError(f"PLAN={str(p)!r} is neither a `gpuplan train --json` nor a `gpuplan serve "
                       "--json` document")  # fmt: skip


def _num(doc: dict, key: str) -> float:
    value = doc.get(key)
    check_number(f"plan field {key}", value)
    return float(value)


def _training(doc: dict) -> Plan:
    gpus = int(_num(doc, "gpus"))
    step = _num(doc, "step_time_s")
    tokens = float(doc["strategy"]["global_batch"]) * _num(doc, "seq")
    band = _band(doc, "step_time_s")
    flops = doc.get("model_flops_per_step")
    targets = {
        "step_time_s": Target("step_time_s", step, band),
        "tokens_per_s_per_gpu": Target("tokens_per_s_per_gpu", tokens / step / gpus,
                                       _band(doc, "tokens_per_s", 1 / gpus)),
        "peak_memory_bytes": Target("peak_memory_bytes", _num(doc, "peak_memory_per_gpu_bytes"),
                                    _band(doc, "peak_memory_per_gpu_bytes")),
        "mfu": Target("mfu", _num(doc, "mfu"), _band(doc, "mfu")),
    }  # fmt: skip
    if isinstance(flops, int | float) and flops > 0:
        per = flops / gpus / TFLOPS  # TFLOP a step per GPU
        tb = (per / band[1], per / band[0]) if band else None
        targets["tflops_per_gpu"] = Target("tflops_per_gpu", per / step, tb)
    cats: dict[str, float] = {}
    for row in doc.get("by_category", []):
        cls = _class_of(row.get("category", ""))
        cats[cls] = cats.get(cls, 0.0) + float(row.get("time_s", 0.0))
    return Plan(kind="train", targets=targets, gpus=gpus, tokens_per_step=tokens,
                categories_s=cats, pipeline=doc["strategy"].get("pp", 1) > 1, waiting_mean=None,
                label=f"{doc.get('model')} on {gpus} GPUs: {doc['strategy'].get('label', '')}")  # fmt: skip


def _class_of(category: str) -> str:
    """A breakdown category as the layer ``watch`` attributes drift to."""
    if category == "communication":
        return "communication"
    if category == "bubble":
        return "bubble"
    if category in ("launch", "host"):
        return "host"
    return "compute"


SERVING = (("ttft_s", "ttft_mean_s"), ("tpot_s", "tpot_mean_s"), ("e2e_s", "e2e_mean_s"))


def _serving(doc: dict) -> Plan:
    targets = {}
    for key, band_key in SERVING:
        point = doc[key].get("mean") if isinstance(doc[key], dict) else None
        if isinstance(point, int | float) and math.isfinite(point):
            targets[key] = Target(key, float(point), _band(doc, band_key))
    for key in ("output_tokens_per_s", "requests_per_s"):
        if isinstance(doc.get(key), int | float):
            targets[key] = Target(key, float(doc[key]), _band(doc, key))
    cfg = doc.get("config") or {}
    gpus = int(cfg.get("gpus", 0) or 0)
    waiting = doc.get("waiting_mean")
    return Plan(kind="serve", targets=targets, gpus=gpus, tokens_per_step=None, categories_s={},
                pipeline=False, waiting_mean=float(waiting) if isinstance(waiting, int | float) else None,
                label=f"{cfg.get('model', 'serving plan')}")  # fmt: skip
