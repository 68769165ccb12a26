"""The bands of a command's document: which error family prices each key of a training, serving
or one-GPU estimate document (``TRAIN_KEYS``, ``SERVE_KEYS``, ``CATEGORY_FAMILY``), composed from
the families' residuals by ``lookup``."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from gpuplan.sim.runtime.serving.load import offered_cap
from gpuplan.validate.bands.lookup import (
    Band,
    compose,
    interval,
    join_labels,
    residuals,
    stack_key,
    table,
)

# Which family prices a document key, and the power of the family's metric it is: a key of a
# document that is a time, a throughput, a memory or a cost (cost and energy scale with time;
# cost per token with 1/throughput).
TRAIN_KEYS = {
    "step_time_s": ("train.time", 1), "tokens_per_s": ("train.time", -1),
    "tokens_per_s_per_gpu": ("train.time", -1), "mfu": ("train.time", -1),
    "hfu": ("train.time", -1), "peak_memory_per_gpu_bytes": ("train.memory", 1),
    "time_to_train_s": ("train.time", 1), "time_to_train_with_failures_s": ("train.time", 1),
    "gpu_hours": ("train.time", 1), "cost_usd": ("train.time", 1),
    "energy_kwh": ("train.time", 1),
}  # fmt: skip
SERVE_KEYS = {
    "ttft": ("serve.ttft", 1), "tpot": ("serve.tpot", 1), "tokens_per_s": ("serve.throughput", 1),
    "requests_per_s": ("serve.throughput", 1), "throughput": ("serve.throughput", 1),
    # a plan's cost per token: if the deployment's capacity is (1 + e) times the truth, serving
    # the load takes (1 + e) times the GPUs
    "usd_per_m_": ("serve.throughput", -1),
}  # fmt: skip


def serve_key(key: str) -> tuple[str, int] | None:
    """The family and power of a serving document's key, by the words in it, or None."""
    if key.endswith("_bytes") or key.startswith(("slo", "goodput", "offered")):
        return None  # a goal or the load asked for, not a prediction
    for word, spec in SERVE_KEYS.items():
        if word in key:
            return spec
    return None


def latency_key(metric: str, stat: str) -> str:
    """``ttft_s``, ``p99`` -> ``ttft_p99_s``."""
    return f"{metric.removesuffix('_s')}_{stat}_s"


def flat_serve_values(doc: Mapping[str, Any]) -> dict[str, float]:
    """A serving document's numbers: ``ttft_p99_s`` for a statistic of a latency (``serve plan``'s
    names), else the key."""
    out: dict[str, float] = {}
    for key, value in doc.items():
        if isinstance(value, Mapping) and key in ("ttft_s", "tpot_s", "e2e_s"):
            out |= {latency_key(key, stat): v for stat, v in value.items()}
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[key] = value
    return out


def for_document(values: Mapping[str, float], keys: Mapping[str, tuple[str, int]], *, stack: str,
                 device: str, data: Mapping | None = None) -> dict[str, Any]:  # fmt: skip
    """``{"error_band": {key: [low, high]}, "error_band_label": str}`` for the ``values`` of a
    document whose key is in ``keys`` (key -> (family, power)); a value that is not a finite
    number is left out. The label is '' when every band was measured."""
    bands: dict[str, list[float]] = {}
    labels: list[str] = []
    said: list[str] = []
    for key, value in values.items():
        if key not in keys or not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        if not math.isfinite(value):
            continue
        family, power = keys[key]
        b = interval(float(value), residuals(family, stack, device, data=data), power=power)
        bands[key] = b.as_list()
        if b.label and b.label not in labels:
            labels.append(b.label)
        if b.words not in said:
            said.append(b.words)
    return {"error_band": bands, "error_band_label": join_labels(labels),
            "error_band_words": "; ".join(said)}


def train_bands(doc: Mapping[str, Any], *, stack: str, device: str) -> dict[str, Any]:
    """The bands of a training document's top-level numbers (``gpuplan train``, ``diagnose``)."""
    return for_document(doc, TRAIN_KEYS, stack=stack, device=device)


def serve_bands(doc: Mapping[str, Any], *, stack: str, device: str) -> dict[str, Any]:
    """The bands of a serving document's numbers (``gpuplan serve``, ``serve plan``'s rows,
    ``diagnose``). A request's end-to-end latency is its TTFT and its decode, so its band is
    composed of the two (``compose``), split by the means' shares: TTFT's share of the mean
    end-to-end latency is priced with ``serve.ttft``, the rest with ``serve.tpot``."""
    values = flat_serve_values(doc)
    keys = {k: spec for k in values if (spec := serve_key(k)) is not None}
    out = for_document(values, keys, stack=stack, device=device)
    ttft = doc.get("ttft_s", {}).get("mean") if isinstance(doc.get("ttft_s"), Mapping) else None
    e2e = doc.get("e2e_s") if isinstance(doc.get("e2e_s"), Mapping) else {}
    labels = [out["error_band_label"]]
    if ttft is not None and e2e.get("mean"):
        share = min(max(ttft / e2e["mean"], 0.0), 1.0)
        for stat, v in e2e.items():
            if isinstance(v, (int, float)) and math.isfinite(v):
                b = compose([(share * v, "serve.ttft"), ((1 - share) * v, "serve.tpot")], stack,
                            device)  # fmt: skip
                out["error_band"][latency_key("e2e_s", stat)] = b.as_list()
                labels.append(join_labels(b.label.split("; ")))
    out["error_band_label"] = next((x for x in labels if x), "")
    out["error_band"] = _within_offered(out["error_band"], doc)
    return out


def _within_offered(band: dict[str, list[float]], doc: Mapping[str, Any]) -> dict:
    """The bands of served rates clipped to the offered load (``serving.load``): whatever the
    deployment's true speed, it serves no more than it is offered, so the true served rate is
    the lesser of the two and its band is too."""
    out = dict(band)
    for key, (low, high) in band.items():
        top = offered_cap(key, doc)
        if top is not None:
            out[key] = [min(low, top), min(high, top)]
    return out



def plan_bands(rows: Iterable[Mapping[str, Any]], *, stack: str, device: str) -> dict[str, Any]:
    """``serve plan``'s bands: each row with its own (``serve_bands``) as ``configs``, and the
    first (cheapest) row's as the document's."""
    configs = [c | serve_bands(c, stack=stack, device=device) for c in rows]
    first = configs[0] if configs else {}
    return {
        "configs": configs,
        "error_band": first.get("error_band", {}),
        "error_band_label": first.get("error_band_label", ""),
        "error_band_words": first.get("error_band_words", ""),
    }


# A breakdown category's family: the harness kind that measures that kernel class. Categories of
# memory-bound kernels (norms, activations, copies, the optimizer's elementwise update, the loss,
# embedding lookups) are priced as elementwise kernels; launch and host time, and any category
# no kind measures alone, by the whole-step kind it belongs to (WHOLE_FAMILY).
CATEGORY_FAMILY = {
    "gemm": "gemm.time_s", "attention": "attention.time_s", "communication": "collective.time_s",
    "collective": "collective.time_s", "elementwise": "elementwise.time_s",
    "softmax": "elementwise.time_s", "copy": "elementwise.time_s", "adamw": "elementwise.time_s",
    "cross_entropy": "elementwise.time_s", "embedding": "elementwise.time_s",
}  # fmt: skip
WHOLE_FAMILY = {"train_step": "train_step.time_s", "layer": "layer.time_s",
                "tp_layer": "tp_layer.time_s", "tp_mlp": "tp_mlp.time_s",
                "prefill_step": "prefill_step.time_s"}  # fmt: skip
DEFAULT_WHOLE = "decode_step.time_s"  # launch-bound steps: the kind whose residuals hold host time
MEMORY_FAMILY = {"layer": "layer.peak_bytes"}
DEFAULT_MEMORY = "train_step.peak_bytes"


def category_family(category: str, kind: str) -> str:
    if f"{kind}.time_s" in CATEGORY_FAMILY.values():  # a one-kernel estimate: its own kind
        return f"{kind}.time_s"
    return CATEGORY_FAMILY.get(category, WHOLE_FAMILY.get(kind, DEFAULT_WHOLE))


def breakdown_band(by_category: Iterable[tuple[str, float]], kind: str, *, stack: str,
                   device: str, data: Mapping | None = None) -> Band:  # fmt: skip
    """The composed time band of a breakdown given as (category, time_s) pairs."""
    parts = [(t, category_family(c, kind)) for c, t in by_category if t > 0]
    return compose(parts, stack, device, data=data)


def estimate_bands(result: Mapping[str, Any], *, stack: str, device: str) -> dict[str, Any]:
    """``error_band`` and ``error_band_label`` of a ``gpuplan estimate`` result: time composed
    over its categories, achieved FLOP/s its inverse, peak memory from the kind's (or a whole
    training step's) measured peaks."""
    kind = result["kind"]
    stack = stack_key(stack, (result.get("params") or {}).get("timing"))
    whole = WHOLE_MODEL_KIND.get(kind) if result.get("model") else None
    t = _whole_band(result["time_s"], whole, "time_s", stack, device)
    if t is None:
        by = result["by_category"]  # a frame (or its records) with category and time_s
        rows = by.to_dict("records") if hasattr(by, "to_dict") else by
        cats = [(c["category"], c["time_s"]) for c in rows]
        t = breakdown_band(cats, kind, stack=stack, device=device)
    bands = {"time_s": t.as_list()}
    said = [f"time: {t.words}"]
    labels = t.label.split("; ") if t.label else []
    total = result["time_s"]
    if total and result.get("achieved_flops_per_s"):
        f = result["flops"]
        bands["achieved_flops_per_s"] = [f / t.high, f / t.low]
    if result.get("peak_bytes"):
        m = _whole_band(result["peak_bytes"], whole, "peak_bytes", stack, device)
        fam = MEMORY_FAMILY.get(kind, DEFAULT_MEMORY)
        if m is None:
            m = interval(result["peak_bytes"], residuals(fam, stack, device))
            if fam == DEFAULT_MEMORY and kind != "train_step":
                labels.append(f"peak memory of {kind} never measured: priced with {fam}")
        bands["peak_bytes"] = m.as_list()
        said.append(f"peak memory: {m.words}")
        if m.label and m.label not in labels:
            labels.append(m.label)
    return {"error_band": bands, "error_band_label": join_labels(labels),
            "error_band_words": "; ".join(said)}


# A whole-model estimate's record kind (the stack campaign's records of whole models): where the
# stack was measured as a whole on the device, its band is the whole's, not composed of parts.
WHOLE_MODEL_KIND = {"prefill_step": "prefill_step", "decode_step": "model_decode_step",
                    "train_step": "model_train_step"}  # fmt: skip


def _whole_band(value: float, whole: str | None, metric: str, stack: str, device: str,
                data: Mapping | None = None) -> Band | None:  # fmt: skip
    """The band of a whole model's ``metric`` from its own record kind, if measured for the stack
    on the device; else None (the caller composes it from its parts)."""
    data = table() if data is None else data
    family = f"{whole}.{metric}"
    if whole is None or family not in data["families"]:
        return None
    res = residuals(family, stack, device, data=data)
    return interval(value, res) if res.measured else None
