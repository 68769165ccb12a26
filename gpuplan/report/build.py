"""Reports of a training run, a serving deployment or a cluster scenario, from the JSON documents
the commands print (``train --json``, ``serve --json``, ``cluster --json``) and the diagnosis
(``diagnose --json``). Pure: documents in, ``Report`` out; the numbers are the documents'."""

from __future__ import annotations

from typing import Any

from gpuplan.report import FigurePng, Report, Section, Table
from gpuplan.report.figures import bars
from gpuplan.report.first_page import (
    label,
    serve_first_page,
    train_first_page,
)
from gpuplan.sim.parallel.cost import (
    POWER_FRACTION,
    PUE,
    kwh_per_million_tokens,
    usd_per_million_tokens,
)
from gpuplan.tables import band_text, format_value
from gpuplan.units import HOUR

SWING = 0.2  # the sensitivity table's +-20%
ENERGY_SOURCE = (f"each GPU at {POWER_FRACTION:.0%} of its TDP, PUE {PUE} (sim/parallel/cost.py: "
                 "Patterson et al. 2021, arXiv:2104.10350)")  # fmt: skip


def fmt(key: str, value: Any) -> str:
    if value is None:
        return "-"
    if key.endswith("usd"):
        return f"${value:,.0f}" if value >= 100 else f"${value:,.3g}"
    if key.endswith("kwh"):
        return f"{value:,.0f} kWh"
    if key == "time_to_train_s" or key.endswith("with_failures_s"):
        return f"{value / (24 * HOUR):,.2f} days"
    if key.endswith("gpu_hours"):
        return f"{value:,.0f} GPU-hours"
    if key in ("mfu", "hfu"):
        return f"{100 * value:.1f}%"
    return format_value(key, value)


def banded(doc: dict, key: str, value: float) -> str:
    """``577 ms (540 ms-610 ms)`` where the document has a band for ``key``, else ``(no band)``."""
    band = (doc.get("error_band") or {}).get(key)
    if not band:
        return f"{fmt(key, value)} (no band)"
    return f"{fmt(key, value)} ({fmt(key, band[0])}-{fmt(key, band[1])})"


def band_section(doc: dict) -> Section:
    band = doc.get("error_band")
    if not band:
        return Section(title="Error bands", paragraphs=(
            "no band: this document carries no error_band (gpuplan prints bands from the "
            "validation residuals where they exist)",))  # fmt: skip
    rows = tuple((label(k), f"{fmt(k, lo)} to {fmt(k, hi)}") for k, (lo, hi) in sorted(band.items()))
    words = band_text(doc)
    return Section(title="Error bands", paragraphs=(
        "p10-p90: the range in which 80% of comparable past predictions' true values fell, "
        "composed over the setup's parts", *((words,) if words else ())),
        tables=(Table(columns=("figure", "p10 to p90"), rows=rows),))  # fmt: skip


def diagnosis_section(diag: dict | None, why: str = "") -> Section:
    if diag is None:
        return Section(title="Diagnosis", paragraphs=(why,))
    m = diag["metric"]
    rows = [("-", "as given", "", fmt(m, diag["baseline"]["metric"]), "", "",
             diag["baseline"]["command"])]  # fmt: skip
    rows += [(str(r["layer"]), r["name"], r["change"], fmt(m, r["metric_after"]), fmt(m, r["gain"]),
              f"{100 * r['share']:.0f}%", r["command"]) for r in diag["layers"]]  # fmt: skip
    rows.append(("-", "physical limit", diag["limit"]["basis"], fmt(m, diag["limit"]["metric"]),
                 "", "", ""))  # fmt: skip
    labels = ["as given", *(f"{r['layer']} {r['name']}" for r in diag["layers"]), "limit"]
    values = [diag["baseline"]["metric"], *(r["metric_after"] for r in diag["layers"]),
              diag["limit"]["metric"]]  # fmt: skip
    fig = FigurePng(title=f"{label(m)} after each layer (cumulative)",
                    png=bars(labels, values, xlabel=label(m), title="five-layer walk"))  # fmt: skip
    return Section(
        title="Diagnosis (five layers, cumulative)",
        paragraphs=(f"{label(m)}, lower is better; each row's command reproduces it",),
        tables=(Table(columns=("layer", "name", "change", f"{label(m)} after", "gain", "share",
                               "command"), rows=tuple(rows)),), figures=(fig,))  # fmt: skip


def _breakdown_figures(doc: dict) -> tuple[FigurePng, ...]:
    by_layer: dict[str, float] = {}
    by_class: dict[str, float] = {}
    for r in doc["by_category"]:
        by_layer[r["layer"]] = by_layer.get(r["layer"], 0.0) + r["time_s"]
        by_class[r["category"]] = by_class.get(r["category"], 0.0) + r["time_s"]
    out = []
    for name, d in (("layer", by_layer), ("operator class", by_class)):
        items = sorted(d.items(), key=lambda kv: -kv[1])
        out.append(FigurePng(title=f"step time by {name}", png=bars(
            [k for k, _ in items], [v for _, v in items], xlabel="time per step (s)",
            title=f"step time by {name}")))  # fmt: skip
    return tuple(out)


def train_report(doc: dict, diag: dict | None, *, command: str,
                 electricity_usd_per_kwh: float | None, usd_per_gpu_hour: float = 0.0,
                 tdp_w: float = 0.0) -> Report:  # fmt: skip
    st = doc["strategy"]
    head = [("step time", banded(doc, "step_time_s", doc["step_time_s"])),
            ("tokens/s", f"{doc['tokens_per_s']:,.0f}"), ("MFU", f"{100 * doc['mfu']:.1f}%"),
            ("memory per GPU", banded(doc, "peak_memory_per_gpu_bytes",
                                      doc["peak_memory_per_gpu_bytes"]))]  # fmt: skip
    b = doc.get("budget")
    cost_lines: list[tuple[str, str]] = []
    if b:
        cost_lines = [(label, banded(doc, key, b[key])) for label, key in (
            ("time to train", "time_to_train_s"),
            ("with interruptions", "time_to_train_with_failures_s"),
            ("GPU-hours", "gpu_hours"), ("GPU cost", "cost_usd"), ("energy", "energy_kwh"))
            if b[key] is not None]  # fmt: skip
        if electricity_usd_per_kwh is not None:
            cost_lines.append(("electricity cost", fmt("cost_usd",
                                                       b["energy_kwh"] * electricity_usd_per_kwh)))
    head += cost_lines
    inputs = _inputs(command, [
        ("model", doc["model"]), ("GPUs", f"{doc['gpus']} of {doc['cluster']}"),
        ("layout", st["label"]), ("global batch", f"{st['global_batch']} x {doc['seq']} tokens"),
        ("stack", doc["stack"]["name"] if isinstance(doc.get("stack"), dict) else str(doc.get("stack"))),
        ("kernel efficiencies", doc["efficiency_source"]),
        ("defaults in force", ", ".join(doc.get("defaults") or []) or "none"),
        *_money_inputs(b, electricity_usd_per_kwh),
    ], doc)  # fmt: skip
    sections = [inputs,
                Section(title="Breakdown by layer and operator class",
                        figures=_breakdown_figures(doc)),
                diagnosis_section(diag),
                Section(title="Time to train, GPU-hours, dollars and energy",
                        paragraphs=() if b else ("give --tokens for the run's time, GPU-hours, "
                                                 "dollars and energy",),
                        tables=(Table(columns=("figure", "value"), rows=tuple(cost_lines)),)
                        if b else ()),
                band_section(doc), train_sensitivity(doc, electricity_usd_per_kwh),
                Section(title="Notes", paragraphs=tuple(doc.get("notes", ())))]  # fmt: skip
    first = train_first_page(doc, diag, usd_per_gpu_hour=usd_per_gpu_hour, tdp_w=tdp_w,
                             electricity=electricity_usd_per_kwh)  # fmt: skip
    return Report(title=f"Training {doc['model']} on {doc['gpus']} GPUs: cost estimate",
                  sections=tuple(sections), headline=tuple(head), first_page=first)  # fmt: skip


def _inputs(command: str, rows, doc: dict) -> Section:
    # a device of one's own (cli.device_args) was never measured: its line says so
    device = (doc["device_note"],) if doc.get("device_note") else ()
    return Section(title="Inputs and assumptions", paragraphs=(f"command: {command}", *device),
                   tables=(Table(columns=("input", "value (source)"), rows=tuple(rows)),))


def _money_inputs(b: dict | None, electricity: float | None) -> list[tuple[str, str]]:
    out = [("electricity price", "not given (--electricity-price $/kWh)" if electricity is None
            else f"${electricity:g}/kWh, given by the user")]  # fmt: skip
    if b:
        out += [("GPU-hour price", b["price_source"]), ("energy", ENERGY_SOURCE),
                ("interruption rates", b["interruptions"]["source"])]
    return out


def train_sensitivity(doc: dict, electricity: float | None) -> Section:
    """+-20% on MFU (time scales as 1/MFU), on the GPU-hour price, and on the failure rate
    (``sim.runtime.cluster.checkpoint``: Young's interval and the expected waste at the scaled MTBF)."""
    b = doc.get("budget")
    if not b:
        step = doc["step_time_s"]
        rows = [("MFU", fmt("step_time_s", step / (1 - SWING)), fmt("step_time_s", step),
                 fmt("step_time_s", step / (1 + SWING)), "step time")]  # fmt: skip
        return _sens(rows, "no --tokens: the run's cost, price and failures are not priced")
    t, cost = b["time_to_train_with_failures_s"], b["cost_usd"] or 0.0
    days = lambda v: fmt("time_to_train_s", v)  # noqa: E731
    usd = lambda v: fmt("cost_usd", v)  # noqa: E731
    rows = [("MFU", days(t / (1 - SWING)), days(t), days(t / (1 + SWING)), "time with failures"),
            ("MFU", usd(cost / (1 - SWING)), usd(cost), usd(cost / (1 + SWING)), "GPU cost"),
            ("GPU-hour price", usd(cost * (1 - SWING)), usd(cost), usd(cost * (1 + SWING)),
             "GPU cost")]  # fmt: skip
    lo, hi = (_with_failure_rate(b, f) for f in (1 - SWING, 1 + SWING))
    rows.append(("failure rate", days(lo), days(t), days(hi), "time with failures"))
    rows.append(("request rate", "-", "-", "-", "training has no request rate"))
    return _sens(rows, "")


def _with_failure_rate(b: dict, factor: float) -> float:
    from gpuplan.sim.runtime.cluster.checkpoint import (
        CheckpointConfig,
        expected_waste,
        interval_for,
    )

    i = b["interruptions"]
    mtbf = i["mtbf_s"] / factor
    interval = interval_for(CheckpointConfig(), i["checkpoint_s"], mtbf)
    waste = expected_waste(interval, i["checkpoint_s"], mtbf, i["restart_s"])
    return b["time_to_train_s"] / (1 - waste)


def _sens(rows, note: str) -> Section:
    return Section(title="Sensitivity (+-20%)", paragraphs=(note,) if note else (),
                   tables=(Table(columns=("input", "-20%", "as given", "+20%", "figure"),
                                 rows=tuple(rows)),))  # fmt: skip


SERVE_KEYS = ("ttft_s", "tpot_s", "e2e_s")


def serve_report(doc: dict, diag: dict | None, *, command: str, usd_per_gpu_hour: float,
                 price_source: str, tdp_w: float, electricity_usd_per_kwh: float | None,
                 at_rates: dict[str, dict]) -> Report:  # fmt: skip
    c = doc["config"]
    gpus = c["gpus"]
    out_s, at = _costed_tokens_per_s(doc)
    usd_m = usd_per_million_tokens(gpus, usd_per_gpu_hour, out_s)
    kwh_m = kwh_per_million_tokens(gpus, tdp_w, out_s)
    head = [*_load_headline(doc),
            ("output tokens/s", banded(doc, "output_tokens_per_s", doc["output_tokens_per_s"])),
            ("requests/s", f"{doc['requests_per_s']:.3g}"),
            *((f"{k} mean", banded(doc, f"{k.removesuffix('_s')}_mean_s", doc[k]["mean"]))
              for k in SERVE_KEYS),  # the band of the mean: validate.bands.lookup.latency_key
            ("GPU cost per million output tokens", fmt("usd", usd_m) + at),
            ("energy per million output tokens", f"{kwh_m:,.3g} kWh" + at),
            ("GPU-hours per hour", f"{gpus}")]  # fmt: skip
    if electricity_usd_per_kwh is not None:
        head.append(("electricity per million output tokens",
                     fmt("usd", kwh_m * electricity_usd_per_kwh)))
    lat = [(k, *(fmt(k, doc[k][p]) for p in ("mean", "p50", "p90", "p99"))) for k in SERVE_KEYS]
    fig = FigurePng(title="latency percentiles", png=bars(
        [f"{k} {p}" for k in SERVE_KEYS for p in ("p50", "p90", "p99")],
        [doc[k][p] for k in SERVE_KEYS for p in ("p50", "p90", "p99")], xlabel="seconds",
        title="latency percentiles"))  # fmt: skip
    inputs = _inputs(command, [
        ("model", c["model"]), ("GPUs", f"{gpus} x {c['gpu']} ({c['replicas']} replicas, tp={c['tp']})"),
        ("stack", (c.get("stack") or {}).get("line", "-")), ("policy", c["policy"]),
        ("weights / KV cache", f"{c['weight_dtype']} / {c['kv_dtype']}"),
        ("traffic", f"{c['rate_per_s']} requests/s, {c['requests']} requests, seed {c['seed']}"),
        ("kernel efficiencies", c["efficiency_source"]), ("GPU-hour price", price_source),
        ("energy", ENERGY_SOURCE),
        *_money_inputs(None, electricity_usd_per_kwh),
    ], doc)  # fmt: skip
    sections = [inputs,
                Section(title="Capacity and latency", paragraphs=(
                    "the serving simulation keeps no per-operator breakdown; `gpuplan estimate` "
                    "gives one step's",), tables=(Table(columns=("metric", "mean", "p50", "p90",
                                                                 "p99"), rows=tuple(lat)),),
                        figures=(fig,)),
                diagnosis_section(diag), band_section(doc),
                serve_sensitivity(doc, at_rates, usd_m)]  # fmt: skip
    first = serve_first_page(doc, diag, usd_per_gpu_hour=usd_per_gpu_hour, tdp_w=tdp_w,
                             electricity=electricity_usd_per_kwh)  # fmt: skip
    return Report(title=f"Serving {c['model']} on {gpus} x {c['gpu']}: cost estimate",
                  sections=tuple(sections), headline=tuple(head), first_page=first)  # fmt: skip


def _costed_tokens_per_s(doc: dict) -> tuple[float, str]:
    """The output tokens per second a serving run's cost per token is priced at, and what to say
    of it: the run's own when it kept up; when it saturated (``serving.load``), none is served at
    the load offered, so the cost is the one at the rate it sustains, said so."""
    if not doc.get("saturated"):
        return doc["output_tokens_per_s"], ""
    return (doc["sustainable_output_tokens_per_s"],
            f" at the {doc['sustainable_requests_per_s']:.3g} requests/s it sustains, not at the "
            f"{doc['offered_requests_per_s']:.3g} offered (saturated)")


def _load_headline(doc: dict) -> list[tuple[str, str]]:
    """A saturated run's first headline row: the load offered, sustained and the queue's
    growth (``serving.load``)."""
    if not doc.get("saturated"):
        return []
    return [("SATURATED", f"{doc['offered_requests_per_s']:.3g} requests/s offered, about "
             f"{doc['sustainable_requests_per_s']:.3g} sustained; the waiting queue grows "
             f"{doc['queue_growth_per_s']:.3g} requests/s, so the latencies grow with the run")]


def serve_sensitivity(doc: dict, at_rates: dict[str, dict], usd_m: float) -> Section:
    """Request rate +-20% (the deployment simulated again at each rate: ``at_rates``), the
    GPU-hour price +-20%; MFU and failures are not inputs of the serving model."""
    lo, hi = at_rates.get("low"), at_rates.get("high")
    rows = []
    for k in SERVE_KEYS:
        rows.append(("request rate", fmt(k, lo[k]["mean"]) if lo else "-", fmt(k, doc[k]["mean"]),
                     fmt(k, hi[k]["mean"]) if hi else "-", f"{k} mean"))  # fmt: skip
    rows.append(("GPU-hour price", fmt("usd", usd_m * (1 - SWING)), fmt("usd", usd_m),
                 fmt("usd", usd_m * (1 + SWING)), "cost per million output tokens"))  # fmt: skip
    rows.append(("MFU", "-", "-", "-", "serving is priced per kernel, not from an MFU"))
    rows.append(("failure rate", "-", "-", "-", "the serving simulation has no failures"))
    return _sens(rows, "")
