"""The report of a cluster scenario (``gpuplan cluster --json``): per run, its use of the GPUs,
what its GPU time and energy cost, and how the cost moves with the prices and the lost work.

GPU cost is the GPU-hours allocated at the GPU's hourly price (``sim.parallel.cost``); energy is
the simulation's own, priced at ``--electricity-price``. The sensitivity table moves each price
by +-20% (cost is linear in each) and the GPU-hours lost to interruptions by +-20% (the cost of
the useful work: allocated less lost GPU-hours, priced as the allocated ones)."""

from __future__ import annotations

import dataclasses

from gpuplan.report import FigurePng, Report, Section, Table
from gpuplan.report.figures import bars
from gpuplan.report.first_page import cluster_first_page, kwh, usd
from gpuplan.units import HOUR

SWING = 0.2
COLUMNS = (("utilization", "utilization"), ("goodput", "goodput"),
           ("effective_utilization", "effective utilization"),
           ("allocated_gpu_hours", "GPU-hours allocated"), ("lost_gpu_hours", "GPU-hours lost"),
           ("energy_kwh", "energy (kWh)"), ("finished", "jobs finished"),
           ("interruptions", "interruptions"), ("jct_p50_s", "median job time (h)"))  # fmt: skip


def _cell(key: str, v) -> str:
    if v is None:
        return "-"
    if key in ("utilization", "goodput", "effective_utilization"):
        return f"{100 * v:.1f}%"
    if key.endswith("_s"):
        return f"{v / HOUR:,.1f}"
    if isinstance(v, float):
        return f"{v:,.0f}"
    return str(v)


def cluster_report(doc: dict, *, command: str, electricity_usd_per_kwh: float | None,
                   usd_per_gpu_hour: float = 0.0, gpu: str = "", price_source: str = "",
                   inputs_section=None) -> Report:  # fmt: skip
    runs = doc["runs"]
    if inputs_section is not None and doc.get("device_note"):  # a device of one's own
        inputs_section = dataclasses.replace(
            inputs_section, paragraphs=(*inputs_section.paragraphs, doc["device_note"]))
    rows, cost_rows = [], []
    for run in runs:
        s = run["summary"]
        rows.append((run["name"], *(_cell(k, s.get(k)) for k, _ in COLUMNS)))
        cost = s["allocated_gpu_hours"] * usd_per_gpu_hour
        useful = (s["allocated_gpu_hours"] - s["lost_gpu_hours"]) * usd_per_gpu_hour
        power = "-" if electricity_usd_per_kwh is None else usd(s["energy_kwh"] * electricity_usd_per_kwh)
        cost_rows.append((run["name"], usd(cost), usd(useful), kwh(s["energy_kwh"]), power))
    figs = (FigurePng(title="goodput per run", png=bars(
        [r["name"] for r in runs], [r["summary"]["goodput"] for r in runs],
        xlabel="goodput (share of GPU time doing useful work)", title="goodput per run")),)  # fmt: skip
    first = cluster_first_page(doc, usd_per_gpu_hour=usd_per_gpu_hour, gpu=gpu,
                               electricity=electricity_usd_per_kwh)  # fmt: skip
    sections = [*((inputs_section,) if inputs_section is not None else ()),
                Section(title="Use of the GPUs per run", tables=(Table(
                    columns=("run", *(c for _, c in COLUMNS)), rows=tuple(rows)),), figures=figs),
                Section(title="Cost per run", paragraphs=(
                    f"GPU-hours at {usd(usd_per_gpu_hour)} per GPU-hour of {gpu} ({price_source})",),
                    tables=(Table(columns=("run", "GPU cost (allocated)", "cost of useful work",
                                           "energy", "electricity cost"), rows=tuple(cost_rows)),)),
                Section(title="Error bands", paragraphs=(
                    "no band: the cluster simulation's figures were never validated against a "
                    "cluster's own accounting",)),
                _sensitivity(runs[0]["summary"], usd_per_gpu_hour, electricity_usd_per_kwh)]  # fmt: skip
    return Report(title="Cluster scenario: capacity and cost", sections=tuple(sections),
                  first_page=first)  # fmt: skip


def _sensitivity(s: dict, price: float, electricity: float | None) -> Section:
    alloc, lost, energy = s["allocated_gpu_hours"], s["lost_gpu_hours"], s["energy_kwh"]
    rows = [("GPU-hour price", usd(alloc * price * (1 - SWING)), usd(alloc * price),
             usd(alloc * price * (1 + SWING)), "GPU cost (first run)"),
            ("GPU-hours lost to interruptions", usd((alloc - lost * (1 - SWING)) * price),
             usd((alloc - lost) * price), usd((alloc - lost * (1 + SWING)) * price),
             "cost of useful work (first run)")]  # fmt: skip
    if electricity is not None:
        e = energy * electricity
        rows.append(("electricity price", usd(e * (1 - SWING)), usd(e), usd(e * (1 + SWING)),
                     "electricity cost (first run)"))  # fmt: skip
    else:
        rows.append(("electricity price", "-", "-", "-", "give --electricity-price $/kWh"))
    return Section(title="Sensitivity (+-20%)", tables=(Table(
        columns=("input", "-20%", "as given", "+20%", "figure"), rows=tuple(rows)),))  # fmt: skip
