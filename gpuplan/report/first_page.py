"""A report's first page, for whoever reads only that: the question, the answer, what it costs in
dollars and kWh, how sure the answer is (its p10-p90 band), and the three changes the diagnosis
finds worth most. Pure: documents in, ``FirstPage`` out; every number is a document's.

Cost without a token budget: the GPUs' hourly price (``sim.parallel.cost``) and energy (each
GPU at ``POWER_FRACTION`` of its TDP, PUE ``PUE``; Patterson et al. 2021), per hour and per
million tokens at the predicted throughput.
"""

from __future__ import annotations

import math

from gpuplan.report import FirstPage
from gpuplan.sim.parallel.cost import (
    kwh_per_hour,
    kwh_per_million_tokens,
    usd_per_million_tokens,
)
from gpuplan.tables import format_value
from gpuplan.units import HOUR

DAY_S = 24 * HOUR

# what a document key is called in a report (never the raw key)
LABELS = {
    "step_time_s": "step time", "tokens_per_s": "tokens/s", "mfu": "MFU", "hfu": "HFU",
    "peak_memory_per_gpu_bytes": "memory per GPU", "time_to_train_s": "time to train",
    "time_to_train_with_failures_s": "time to train with interruptions", "gpu_hours": "GPU-hours",
    "cost_usd": "GPU cost", "energy_kwh": "energy", "output_tokens_per_s": "output tokens/s",
    "requests_per_s": "requests/s", "ttft_mean_s": "time to first token (mean)",
    "tpot_mean_s": "time per output token (mean)", "e2e_mean_s": "request latency (mean)",
    "usd_per_million_tokens": "cost per million tokens", "e2e_s": "request latency",
    "ttft_s": "time to first token", "tpot_s": "time per output token",
}  # fmt: skip


def label(key: str) -> str:
    return LABELS.get(key, key.replace("_", " "))


def usd(v: float) -> str:
    """Dollars; a figure priced with no GPU price (a device of one's own) is said to have none."""
    if not math.isfinite(v):
        return "no price (the GPU has no hourly price in gpuplan's price file)"
    return f"${v:,.0f}" if v >= 100 else f"${v:,.3g}"


def kwh(v: float) -> str:
    return f"{v:,.0f} kWh" if v >= 100 else f"{v:,.3g} kWh"


def band_words(doc: dict, key: str, value: float, unit_key: str | None = None) -> str:
    """``p10-p90 3.1 s - 4.0 s`` of ``key`` with what the band stands on, or why there is none."""
    band = (doc.get("error_band") or {}).get(key)
    if not band:
        return f"{label(key)}: no band (this figure was never validated)"
    u = unit_key or key
    words = doc.get("error_band_words") or ""
    text = (f"{label(key)} {format_value(u, value)}, p10-p90 {format_value(u, band[0])} to "
            f"{format_value(u, band[1])}")  # fmt: skip
    return f"{text}: {words}" if words else text


def levers(diag: dict | None, n: int = 3) -> tuple[str, ...]:
    """The diagnosis's ``n`` layers of largest gain, as sentences; what stops it, if none."""
    if diag is None:
        return ()
    m = diag["metric"]
    rows = sorted((r for r in diag["layers"] if r["gain"] > 0), key=lambda r: -r["gain"])[:n]
    if not rows:
        return ("the diagnosis finds no change in its five layers that helps",)
    return tuple(f"{r['name']}: {r['change']} ({label(m)} {format_value(m, r['metric_after'])}, "
                 f"{100 * r['share']:.0f}% of the gain the walk finds)" for r in rows)  # fmt: skip


def hourly(gpus: int, usd_per_gpu_hour: float, tdp_w: float) -> tuple[float, float]:
    """(dollars, kWh) an hour of ``gpus`` GPUs (module docstring)."""
    return gpus * usd_per_gpu_hour, kwh_per_hour(gpus, tdp_w)


def train_first_page(doc: dict, diag: dict | None, *, usd_per_gpu_hour: float, tdp_w: float,
                     electricity: float | None) -> FirstPage:  # fmt: skip
    st, gpus = doc["strategy"], doc["gpus"]
    usd_h, kwh_h = hourly(gpus, usd_per_gpu_hour, tdp_w)
    per_m = usd_per_million_tokens(gpus, usd_per_gpu_hour, doc["tokens_per_s"])
    kwh_m = kwh_per_million_tokens(gpus, tdp_w, doc["tokens_per_s"])
    figures = [("step time", format_value("step_time_s", doc["step_time_s"])),
               ("throughput", f"{doc['tokens_per_s']:,.0f} tokens/s (MFU {100 * doc['mfu']:.1f}%)"),
               ("memory per GPU", f"{format_value('bytes', doc['peak_memory_per_gpu_bytes'])} of "
                                  f"{format_value('bytes', doc['device_memory_bytes'])}"),
               ("cost an hour", f"{usd(usd_h)} and {kwh(kwh_h)}"),
               ("cost per million tokens", f"{usd(per_m)} and {kwh(kwh_m)}")]  # fmt: skip
    b = doc.get("budget")
    if b:
        answer = (f"{b['time_to_train_with_failures_s'] / DAY_S:,.1f} days (with interruptions) "
                  f"and {usd(b['cost_usd'] or 0.0)} of GPU time for {b['tokens']:.3g} tokens, "
                  f"{kwh(b['energy_kwh'])}")  # fmt: skip
        figures.append(("whole run", answer))
    else:
        answer = (f"{format_value('step_time_s', doc['step_time_s'])} a step, "
                  f"{doc['tokens_per_s']:,.0f} tokens/s: {usd(usd_h)} an hour, {usd(per_m)} per "
                  "million tokens (give --tokens for the whole run)")  # fmt: skip
    question = (f"How fast, and at what cost, does {doc['model']} train on {gpus} GPUs of "
                f"{doc['cluster']} ({st['label']})?")  # fmt: skip
    band = band_words(doc, "step_time_s", doc["step_time_s"])
    return _page(question, answer, figures, band, levers(diag), kwh_h, electricity)


def serve_first_page(doc: dict, diag: dict | None, *, usd_per_gpu_hour: float, tdp_w: float,
                     electricity: float | None) -> FirstPage:  # fmt: skip
    c = doc["config"]
    gpus, out_s = c["gpus"], doc["output_tokens_per_s"]
    usd_h, kwh_h = hourly(gpus, usd_per_gpu_hour, tdp_w)
    lat = ", ".join(f"{label(k)} {format_value(k, doc[k]['mean'])}" for k in ("ttft_s", "tpot_s"))
    figures = [("throughput", f"{out_s:,.0f} output tokens/s, {doc['requests_per_s']:.3g} requests/s"),
               ("latency (mean)", lat), ("cost an hour", f"{usd(usd_h)} and {kwh(kwh_h)}")]  # fmt: skip
    if doc.get("saturated"):
        answer = (f"it cannot keep up: {doc['offered_requests_per_s']:.3g} requests/s offered, "
                  f"about {doc['sustainable_requests_per_s']:.3g} sustained; the queue grows by "
                  f"{doc.get('queue_growth_per_s', 0):.3g} requests a second, so no cost per "
                  "token is given at this load")  # fmt: skip
    else:
        per_m = usd_per_million_tokens(gpus, usd_per_gpu_hour, out_s)
        answer = f"{out_s:,.0f} output tokens/s ({lat}) for {usd(per_m)} per million output tokens"
        figures.append(("cost per million output tokens",
                        f"{usd(per_m)} and {kwh(kwh_per_million_tokens(gpus, tdp_w, out_s))}"))
    question = (f"What does serving {c['model']} at {c['rate_per_s']} requests/s on {gpus} x "
                f"{c['gpu']} deliver, and what does it cost?")  # fmt: skip
    band = band_words(doc, "ttft_mean_s", doc["ttft_s"]["mean"], "ttft_s")
    return _page(question, answer, figures, band, levers(diag), kwh_h, electricity)


def _page(question, answer, figures, band, moves, kwh_h, electricity) -> FirstPage:
    """The page, with the electricity an hour at ``electricity`` $/kWh where it is given."""
    if electricity is not None:
        figures.append(("electricity", f"{usd(kwh_h * electricity)} an hour at ${electricity:g}/kWh"))
    return FirstPage(question=question, answer=answer, figures=tuple(figures), band=band,
                     levers=moves)


def cluster_first_page(doc: dict, *, usd_per_gpu_hour: float, gpu: str,
                       electricity: float | None) -> FirstPage:  # fmt: skip
    runs = doc["runs"]
    first = runs[0]["summary"]
    days = first["simulated_s"] / DAY_S
    cost = first["allocated_gpu_hours"] * usd_per_gpu_hour
    eff = first["effective_utilization"]
    figures = [("capacity", f"{first['capacity_gpus']:,} GPUs of {gpu} for {days:,.1f} days"),
               ("useful work", f"{100 * eff:.1f}% of the GPU time (utilization "
                               f"{100 * first['utilization']:.1f}%, goodput "
                               f"{100 * first['goodput']:.1f}%, placement efficiency "
                               f"{100 * first.get('placement_efficiency', 1.0):.1f}%)"),
               ("GPU time allocated", f"{first['allocated_gpu_hours']:,.0f} GPU-hours, {usd(cost)}"),
               ("lost to interruptions", f"{first['lost_gpu_hours']:,.0f} GPU-hours, "
                                         f"{usd(first['lost_gpu_hours'] * usd_per_gpu_hour)}"),
               ("energy", kwh(first["energy_kwh"]))]  # fmt: skip
    if electricity is not None:
        figures.append(("electricity", usd(first["energy_kwh"] * electricity)))
    ranked = sorted(runs, key=lambda r: -r["summary"]["effective_utilization"])
    moves = tuple(f"{r['name']}: {100 * r['summary']['effective_utilization']:.1f}% of the GPU time "
                  f"does useful work ({100 * (r['summary']['effective_utilization'] - eff):+.1f} "
                  f"points against {runs[0]['name']})" for r in ranked[:3] if r is not runs[0])  # fmt: skip
    return FirstPage(
        question=(f"How much of a {first['capacity_gpus']:,}-GPU cluster's time does useful work "
                  f"over {days:,.0f} days, and what does it cost?"),
        answer=(f"{100 * eff:.1f}% of its GPU time ({runs[0]['name']}): {usd(cost)} of GPU time "
                f"allocated and {kwh(first['energy_kwh'])}"),
        figures=tuple(figures),
        band="no band: the cluster simulation's figures were never validated against a cluster",
        levers=moves or ("the scenario has one run: no policy to compare",))  # fmt: skip
