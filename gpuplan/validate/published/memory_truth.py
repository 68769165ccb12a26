"""Production layouts fit as they ran: the memory truth set (``data/memory_truth.csv``, sources in
``data/memory_truth_sources.json``), each public layout priced for its memory per GPU.

A row states the layout its source gives; what it leaves empty (``zero``, ``recompute``, no
``sp`` option) is the stack's framework's default, filled by the function every command fills a
layout with (``sim.stacks.training_defaults.fill_defaults``, through ``published.training``'s
``row_strategy``). Each row must fit its GPU (the peak of ``estimate_training``'s memory terms,
fragmentation and CUDA context included, at most the device's memory) and, where the source
prints a memory figure (``published_metric``: ``activations`` or
``weights_gradients_optimizer``), be within ``TOLERANCE_PCT`` of it. A row whose fit turns on
what its source states but gpuplan cannot price, or leaves unstated, names it in ``gap``: such a
row is reported beside the misses, never counted as fitting. ``docs/memory.md`` has the terms
and the table ``python3 benchmarks/memory_truth.py`` prints.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import json
from importlib import resources

import pandas as pd

from gpuplan.errors import GpuplanError
from gpuplan.hwmodels.efficiency import efficiency_for
from gpuplan.sim.parallel.estimate import estimate_training
from gpuplan.sim.parallel.topology import get_cluster
from gpuplan.validate.published.megatron import published_runs
from gpuplan.validate.published.training import (
    parse_options,
    row_cluster,
    row_model,
    row_stack,
    row_strategy,
)
from gpuplan.workloads.model import ModelConfig

TOLERANCE_PCT = 10.0
INT_COLUMNS = ("gpus", "tp", "pp", "dp", "cp", "ep", "virtual_stages", "micro_batch",
               "global_batch", "seq")  # fmt: skip
UNSET_COLUMNS = ("zero", "recompute")  # empty: the stack's framework's default
METRICS = {  # a published metric: the memory terms it adds up
    "activations": ("activations",),
    "weights_gradients_optimizer": ("weights", "gradients", "optimizer"),
}


def _data(name: str):
    return resources.files("gpuplan.validate.published") / "data" / name


@functools.cache
def truth_sources() -> dict:
    """The sources file: every source's reference, and the models and clusters the rows name."""
    return json.loads(_data("memory_truth_sources.json").read_text())


@functools.cache
def truth_rows() -> tuple[dict, ...]:
    """The rows of ``memory_truth.csv``, numbers typed, options parsed, unset columns None."""
    with _data("memory_truth.csv").open(newline="") as f:
        return tuple(_typed(r) for r in csv.DictReader(f))


def _typed(raw: dict) -> dict:
    row = dict(raw)
    for col in INT_COLUMNS:
        row[col] = int(row[col])
    row["zero"] = int(row["zero"]) if row["zero"] else None
    row["recompute"] = row["recompute"] or None
    row["options"] = parse_options(row["options"])
    metric = row["published_metric"]
    if metric and metric not in METRICS:
        raise GpuplanError(f"{row['id']}: published_metric={metric!r} is unknown; valid: "
                           f"{', '.join(METRICS)} or empty")  # fmt: skip
    row["published_bytes"] = float(row["published_bytes"]) if row["published_bytes"] else None
    return row


def truth_model(row: dict) -> ModelConfig:
    """A model of the sources file, of ``published_runs.json`` (Korthikanti's), else as the
    published training rows find it (their definitions, then the presets)."""
    for models in (truth_sources()["models"], published_runs()["models"]):
        if row["model"] in models:
            return ModelConfig(**models[row["model"]])
    return row_model(row)


def truth_cluster(row: dict):
    """A cluster of the sources file (a preset with the fields a source states), else as the
    published training rows find it."""
    custom = truth_sources()["clusters"].get(row["cluster"])
    if custom is None:
        return row_cluster(row)
    fields = {k: v for k, v in custom.items() if k != "base"}
    return dataclasses.replace(get_cluster(custom["base"]), key=row["cluster"], **fields)


def price_row(row: dict) -> dict:
    """One row priced: its layout as filled, the peak per GPU and the device's memory, whether
    it fits, and the published figure beside gpuplan's where the source prints one."""
    cfg, cluster, stack = truth_model(row), truth_cluster(row), row_stack(row)
    strategy = row_strategy(row, cfg, stack)
    est = estimate_training(cfg, strategy, cluster=cluster, seq=row["seq"], gpus=row["gpus"],
                            eff=efficiency_for(cluster.gpu), stack=stack)  # fmt: skip
    terms = est.breakdown.memory_bytes
    metric = row["published_metric"]
    predicted = sum(terms[t] for t in METRICS[metric]) if metric else None
    error = 100 * (predicted / row["published_bytes"] - 1) if metric else None
    return {"id": row["id"], "source": row["source"], "model": cfg.name, "gpu": cluster.gpu,
            "gpus": row["gpus"], "stack": stack.name, "layout": strategy.label,
            "published_metric": metric or None, "published_bytes": row["published_bytes"],
            "predicted_bytes": predicted, "error_pct": error,
            "peak_bytes": est.peak_memory_per_gpu_bytes,
            "device_bytes": est.device_memory_bytes, "fits": bool(est.fits),
            "within_tolerance": None if error is None else abs(error) <= TOLERANCE_PCT,
            "missing": row["missing"], "gap": row["gap"], "terms": terms}  # fmt: skip


def truth_table() -> pd.DataFrame:
    """Every row priced (``price_row``), in the file's order."""
    return pd.DataFrame([price_row(r) for r in truth_rows()])


def misses(frame: pd.DataFrame) -> list[str]:
    """One line per row that does not fit without a ``gap`` to say why, or is off its published
    figure by more than the tolerance; empty when the truth set holds."""
    out = [f"{r.id}: {r.peak_bytes / 1e9:.1f} GB of {r.device_bytes / 1e9:.0f} GB does not fit"
           for r in frame.itertuples() if not r.fits and not r.gap]  # fmt: skip
    out += [f"{r.id}: {r.published_metric} {r.error_pct:+.1f}% off the published figure "
            f"(tolerance {TOLERANCE_PCT:.0f}%)"
            for r in frame.itertuples() if r.within_tolerance is False]  # fmt: skip
    return out


def gaps(frame: pd.DataFrame) -> list[str]:
    """One line per row that does not fit because of what its source states or leaves unstated
    and gpuplan cannot price (its ``gap``): the truth set's open questions, not its misses."""
    return [f"{r.id}: {r.peak_bytes / 1e9:.1f} GB of {r.device_bytes / 1e9:.0f} GB; gap: {r.gap}"
            for r in frame.itertuples() if not r.fits and r.gap]  # fmt: skip
