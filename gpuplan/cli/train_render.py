"""The printed ``gpuplan train`` estimate (also ``search train``'s fastest strategy): headline,
breakdown by class, memory terms, the run's budget and interruptions, the timeline's lines."""

from __future__ import annotations

from typing import Any

from gpuplan.cli.train_timeline import render_timeline
from gpuplan.tables import band_text, format_banded, format_value, render_table


def render_interruptions(i: dict[str, Any], with_failures_s: float) -> str:
    """One line: the interruptions' rate, checkpoints, restarts and the time they add."""
    return (
        f"with interruptions: {with_failures_s / 86400:.1f} days (one every "
        f"{i['mtbf_s'] / 3600:.1f} h, a {i['checkpoint_s']:.0f} s checkpoint every "
        f"{i['checkpoint_interval_s'] / 60:.0f} min, {i['restart_s']:.0f} s per restart: "
        f"{100 * i['waste']:.1f}% of wall time lost; rates: {i['source']})"
    )


def render_overlaps(overlaps: dict[str, bool]) -> str:
    """The overlaps in force, e.g. 'dp on, tp off, pp off'."""
    return ", ".join(f"{k} {'on' if v else 'off'}" for k, v in overlaps.items())


def _pct(value: float) -> str:
    return f"{100 * value:.1f}%"


def _banded(doc: dict[str, Any], key: str, fmt=None) -> str:
    return format_banded(key, doc[key], doc.get("error_band", {}).get(key), fmt)


def render_estimate(doc: dict[str, Any]) -> str:
    """The estimate as people read it: headline, breakdown by class, memory terms."""
    lines = _headline(doc)
    lines.append("")
    rows = [dict(r, share_pct=100 * r["share"]) for r in doc["by_category"]]
    rows.sort(key=lambda r: -r["time_s"])
    lines.append(render_table(rows, ["layer", "category", "time_s", "share_pct"]))
    lines.append("")
    mem = [{"term": k, "bytes": v} for k, v in doc["memory_bytes"].items()]
    lines.append(render_table(mem, ["term", "bytes"]))
    if "budget" in doc:
        lines += _budget_lines(doc)
    if "timeline" in doc:
        wall_s = doc.get("timing", {}).get("timeline_wall_s")
        lines += render_timeline(doc["timeline"], doc["step_time_s"], wall_s)
    lines += ["", *[f"note: {n}" for n in doc["notes"]]]
    return "\n".join(lines)


def _headline(doc: dict[str, Any]) -> list[str]:
    """The setup, the defaults in force, step time, throughput, MFU, memory, overlaps, stack."""
    st = doc["strategy"]
    fits = "fits" if doc["fits"] else "DOES NOT FIT"
    lines = [
        f"{doc['model']} on {doc['gpus']} GPUs of {doc['cluster']}: {st['label']}, "
        f"global batch {st['global_batch']} x {doc['seq']} tokens",
        *(["defaults in force (not given): " + (", ".join(doc["defaults"]) or "none")]
          if "defaults" in doc else []),  # fmt: skip
        "",
        f"step time       {_banded(doc, 'step_time_s')}",
        f"tokens/s        {_banded(doc, 'tokens_per_s', lambda v: f'{v:,.0f}')}",
        f"MFU / HFU       {_banded(doc, 'mfu', _pct)} / {_banded(doc, 'hfu', _pct)}",
        f"memory per GPU  {_banded(doc, 'peak_memory_per_gpu_bytes')} of "
        f"{format_value('bytes', doc['device_memory_bytes'])} ({fits})",
        f"overlaps        {render_overlaps(doc['overlaps'])}",
    ]
    if text := band_text(doc):
        lines.append(f"band p10-p90    {text}")
    if "stack" in doc:
        s = doc["stack"]
        measured = "" if s.get("measured") else "; not measured as a whole"
        lines.append(f"stack           {s['name']} (attention {s['attention']['train']}, "
                     f"elementwise {s['elementwise']}, host {s['host']['mode']}{measured})")
    return lines


def _budget_lines(doc: dict[str, Any]) -> list[str]:
    """The whole run of --tokens: days, GPU-hours, cost, energy, price, interruptions."""
    b = doc["budget"]
    band = {**b, **doc}
    cost = "-" if b["cost_usd"] is None else _banded(band, "cost_usd", lambda v: f"${v:,.0f}")
    return [
        "",
        f"{b['tokens']:.3g} tokens: "
        f"{_banded(band, 'time_to_train_s', lambda v: f'{v / 86400:.1f}')} days, "
        f"{_banded(band, 'gpu_hours', lambda v: f'{v:,.0f}')} GPU-hours, {cost}, "
        f"{_banded(band, 'energy_kwh', lambda v: f'{v:,.0f}')} kWh "
        f"(power {b['power_fraction']:.0%} of TDP, PUE {b['pue']})",
        f"price: {b['price_source']}"
        + (f"; electricity ${b['electricity_usd']:,.0f} at the price given"
           if b.get("electricity_usd") is not None else ""),
        render_interruptions(b["interruptions"], b["time_to_train_with_failures_s"]),
    ]
