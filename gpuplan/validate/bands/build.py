"""``python3 -m gpuplan.validate.bands --out gpuplan/hwmodels/data/error_bands.json``: the data of
the error bands (``gpuplan.validate.bands.lookup``) from the validation residuals. 12-30 s on two cores;
same inputs, same bytes (``tests/test_bands.py`` checks it).

A residual is the signed relative error ``e = predicted / true - 1`` of one prediction, in the
direction of its family's metric. Four sets give them; the two campaigns' records are split, seeded,
into a fit part and a held-out part, the bands built from the fit part only and the held-out
part left for ``benchmarks/band_coverage.py``:

- the harness records (``data/``, ``validate.calibrate.split`` with the seed and train fraction of
  the committed calibration, 70/30 by case and kind), predicted with the committed calibration:
  one family per kind and metric, ``<kind>.time_s`` and ``<kind>.peak_bytes``; stack ``harness``;
- the H200 stack campaign (``data/h200_stacks/``: stacks ``pytorch``, ``hf-transformers``,
  ``torch-compile``; ``validate.fit_stacks.kernels.split``, seed 0, 70% of each (stack, kind)'s cases),
  predicted as ``gpuplan estimate`` prices them (``validate.record_prediction.predict_breakdown`` with the
  record's stack and the installed fits): the same ``<kind>.<metric>`` families, with the whole
  model kinds ``prefill_step``, ``model_decode_step`` and ``model_train_step``; a record timed in
  a convention other than its stack's own is the group ``stack@timing`` (``validate.bands.lookup.stack_key``:
  ``pytorch@device``), as ``gpuplan estimate --timing`` looks it up;
- the published training rows (``validate.published.training``): ``train.time`` (step time: a
  throughput's error ``e`` is the step time's ``1 / (1 + e) - 1``) and ``train.memory``;
- the published serving rows, each priced with the stacks' values fitted without its source
  (``validate.fit_stacks.serving_loso.left_out``): ``serve.throughput``, ``serve.ttft``,
  ``serve.tpot``, ``serve.e2e``.

Every published row is already left out of every fit made with its source
(``validate.generalization.published``), so all of them build the bands (``part`` fit), and the
coverage a new source gets is measured by leaving each source out of the band build in turn
(``benchmarks/band_coverage.py``, ``benchmarks/generalization.py``). Within a band, each source's
residuals weigh alike in total (``source_weights``).

Every residual also carries its ``source`` (a published source; ``harness`` or ``h200_stacks``
for the two campaigns). Per family, the p10 and p90 of the fit residuals (numpy's linear
quantile, each source weighted alike) are written at four levels, the ones a prediction is looked
up by (``validate.bands.lookup.residuals``, most specific first):

1. ``groups``: per (stack, device) with at least ``MIN_ROWS`` fit residuals: a measured band;
2. ``devices``: per device, every stack's residuals on it, where they are at least ``MIN_ROWS``
   from at least ``MIN_SOURCES`` sources: the band of a stack never measured on a measured
   device;
3. ``architectures``: the same per device architecture (``hwmodels.architecture.ARCH``, e.g.
   sm_80 for both A100s): the band of a device never measured, by the devices of its kind;
4. ``pooled``: every fit residual of the family: the last resort, labelled.

Why these levels, and why sources. The published sets' errors are dominated by what each source
shares across its rows (its cluster, its software version, how it times a step): leaving one
training source out and pricing its rows with the band of the others
(``benchmarks/band_coverage.py``, "leave one source out") covers well under four rows in five,
whatever the pooling, because eleven training sources are eleven draws of a source's bias. So a
pooled level is only used when it holds at least two sources (one source's band is that
source's bias, not a spread), each source weighs alike in it, and the first thing pooled over
is the device, not the framework: every device without a fit of its own borrows the H200's
kernel efficiencies (``hwmodels.efficiency.efficiency_for``), so the device is what the rows of
a device share (the Blackwell rows run 30-55% fast whatever the stack, the A100 rows a few
percent slow). No width here was chosen to meet a
coverage target: every band is the p10-p90 of fit residuals.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from gpuplan.errors import GpuplanError

QUANTILES = (0.1, 0.9)
MIN_ROWS = 5  # fewer fit residuals than this: no band of the group's own
MIN_SOURCES = 2  # a pooled level (device, architecture) holds at least this many sources
COLUMNS = ["set", "family", "stack", "device", "source", "part", "e"]
STACK_CAMPAIGN = "h200_stacks"  # data/h200_stacks/: the stack campaign's records
STACK_SEED = 0  # the seed of its committed fit (gpuplan/sim/stacks/data/stack_fit.json)


def _files_digest(paths) -> str:
    """The sha256 of the files' sha256s, in the order given."""
    from gpuplan.validate.calibrate import file_sha256

    return hashlib.sha256("".join(file_sha256(f) for f in paths).encode()).hexdigest()


def harness_residuals(data_dir=None, device: str = "h200") -> pd.DataFrame:
    """The harness records' residuals: one row per record and metric, ``part`` fit or held_out."""
    from gpuplan.hwmodels.efficiency import calibrated_efficiency
    from gpuplan.validate import calibrate

    eff = calibrated_efficiency(device)
    if eff is None:
        raise GpuplanError(f"device={device!r}: no calibration to score its records with")
    _, train, test = calibrate.split_as_calibrated(eff, data_dir, device)
    parts = []
    for part, recs in (("fit", train), ("held_out", test)):
        rows = calibrate.score(recs, eff).rows
        rows = rows[(rows["measured"] > 0) & rows["predicted"].notna()]
        parts.append(pd.DataFrame({
            "set": "harness records",
            "family": rows["kind"] + "." + rows["metric"],
            "stack": rows["stack"].fillna("harness").astype(str),
            "device": rows["device"].astype(str),
            "source": "harness",
            "part": part,
            "e": rows["predicted"] / rows["measured"] - 1.0,
        }))  # fmt: skip
    return pd.concat(parts, ignore_index=True)[COLUMNS]


def stack_dir(data_dir=None) -> Path:
    from gpuplan.validate.runs import resolve_data_dir

    return resolve_data_dir(data_dir) / STACK_CAMPAIGN


def stack_residuals(data_dir=None, device: str = "h200", seed: int = STACK_SEED) -> pd.DataFrame:
    """The stack campaign's residuals (``data/h200_stacks``), split as its fit was
    (``validate.fit_stacks.kernels.split``), each record predicted as ``gpuplan estimate`` prices it."""
    from gpuplan.validate.bands.lookup import stack_key
    from gpuplan.validate.fit_stacks import cases as fit_cases
    from gpuplan.validate.record_prediction import predict_breakdown, record_stack

    records = fit_cases.load(stack_dir(data_dir), device)
    fit, held = fit_cases.split(records, seed)
    rows = []
    for part, recs in (("fit", fit), ("held_out", held)):
        for r in recs:
            bd = predict_breakdown(r.kind, r.device, r.params, stack=record_stack(r.params))
            stack = stack_key(fit_cases.stratum(r)[0], r.params.get("timing"))
            got = {"time_s": bd.total_s, "peak_bytes": bd.peak_bytes}
            for metric, true in r.measured.items():
                pred = got.get(metric)
                if pred is None or not true or true <= 0:
                    continue
                rows.append(("stack campaign", f"{r.kind}.{metric}", stack, r.device,
                             STACK_CAMPAIGN, part, pred / true - 1.0))  # fmt: skip
    return pd.DataFrame(rows, columns=COLUMNS)


def training_residuals() -> pd.DataFrame:
    """The published training rows' residuals (rows that could be priced)."""
    from gpuplan.validate.published.training import reproduce_training

    f = reproduce_training()
    f = f[(f["status"] == "ok") & f["predicted"].notna() & (f["published"] > 0)]
    ratio = f["predicted"] / f["published"]  # the metric's own predicted/true
    is_time = f["metric"].astype(str).str.endswith("_s") | (f["kind"] == "memory")
    e = np.where(is_time, ratio - 1.0, 1.0 / ratio - 1.0)  # throughputs: the step time's error
    return pd.DataFrame({
        "set": "published training",
        "family": np.where(f["kind"] == "memory", "train.memory", "train.time"),
        "stack": f["stack"].astype(str),
        "device": f["gpu"].astype(str),
        "source": f["source"].astype(str),
        "part": "fit",  # every row is left out of every fit (generalization.published)
        "e": e,
    })[COLUMNS]  # fmt: skip


def serving_residuals() -> pd.DataFrame:
    """The published serving rows' residuals (rows that could be run), each row priced with the
    stacks' values fitted without its source (``fit_stacks.serving_loso.left_out``)."""
    from gpuplan.validate.fit_stacks.serving_loso import left_out
    from gpuplan.validate.published.serving import ENGINE_STACK

    f = left_out()
    f = f[f["predicted"].notna() & (f["value"] > 0)]
    return pd.DataFrame({
        "set": "published serving",
        "family": "serve." + f["kind"].astype(str),
        "stack": f["engine"].map(ENGINE_STACK).fillna(f["engine"]).astype(str),
        "device": f["gpu"].astype(str),
        "source": f["source"].astype(str),
        "part": "fit",  # left out of its own source's fit
        "e": f["error_pct"] / 100.0,
    })[COLUMNS]  # fmt: skip


def all_residuals(data_dir=None) -> pd.DataFrame:
    return pd.concat(
        [harness_residuals(data_dir), stack_residuals(data_dir), training_residuals(),
         serving_residuals()],
        ignore_index=True,
    )  # fmt: skip


def _q(g: pd.DataFrame) -> tuple[float, float]:
    """The p10 and p90 of ``g``'s residuals, each SOURCE weighted alike (``source_weights``)."""
    e = np.asarray(g["e"], dtype=float)
    order = np.argsort(e, kind="stable")
    w = source_weights(g["source"]).to_numpy()[order]
    # the weighted quantile whose unweighted case is numpy's linear one: the k-th of n sorted
    # values sits at cumulative weight k / (n - 1) of the whole
    at = (np.cumsum(w) - w[0]) / max(w.sum() - w[0], 1e-300) if len(e) > 1 else np.zeros(1)
    lo, hi = np.interp(QUANTILES, at, e[order])
    return round(float(lo), 6), round(float(hi), 6)


def source_weights(sources: pd.Series) -> pd.Series:
    """A weight per residual such that each source's residuals weigh alike in total: a published
    source's rows share its setup (cluster, software version, timing method), so its errors are
    one draw of that setup's bias, however many rows it has; without the weights the largest
    source (216 llm-foundry rows, 622 TensorRT-LLM v0.14 rows) would set every band."""
    counts = sources.map(sources.value_counts())
    return 1.0 / counts.astype(float)


def architecture(device: str) -> str | None:
    from gpuplan.hwmodels.architecture import ARCH

    return ARCH.get(device)


def _pool(g: pd.DataFrame, **keys) -> dict | None:
    """A pooled level's entry, or None when it holds too few rows or sources."""
    n_sources = g["source"].nunique()
    if len(g) < MIN_ROWS or n_sources < MIN_SOURCES:
        return None
    lo, hi = _q(g)
    return keys | {"n_fit": len(g), "n_sources": int(n_sources),
                   "stacks": sorted(g["stack"].unique().tolist()), "p10": lo, "p90": hi}  # fmt: skip


def band_table(residuals: pd.DataFrame) -> dict:
    """Per family: the p10/p90 of the FIT residuals at each level (module docstring); held-out
    residuals are never read."""
    fit = residuals[residuals["part"] == "fit"]
    fit = fit.assign(arch=fit["device"].map(lambda d: architecture(d) or ""))
    families: dict = {}
    for family, g in fit.groupby("family", sort=True):
        groups = []
        for (stack, device), gg in g.groupby(["stack", "device"], sort=True):
            if len(gg) >= MIN_ROWS:
                lo, hi = _q(gg)
                med = round(float(np.median(gg["e"])), 6)
                groups.append({"stack": stack, "device": device, "n_fit": len(gg),
                               "p10": lo, "p90": hi, "median": med})  # fmt: skip
        devices = [e for d, gg in g.groupby("device", sort=True) if (e := _pool(gg, device=d))]
        archs = [e for a, gg in g[g["arch"] != ""].groupby("arch", sort=True)
                 if (e := _pool(gg, arch=a, devices=sorted(gg["device"].unique().tolist())))]
        lo, hi = _q(g)
        families[family] = {
            "pooled": {"n_fit": len(g), "n_sources": int(g["source"].nunique()), "p10": lo,
                       "p90": hi},
            "groups": groups, "devices": devices, "architectures": archs,
        }  # fmt: skip
    return families


def document(residuals: pd.DataFrame, inputs: dict[str, str]) -> dict:
    counts = residuals.groupby("part").size().to_dict()
    per_set = residuals.groupby(["set", "part"]).size()
    return {
        "about": (
            "p10 and p90 of the signed relative error e = predicted/true - 1 of the FIT part of "
            "each validation split, per family (harness and stack-campaign record kind and "
            "metric; published training and serving metric families) at four levels: per "
            "(stack, device) group, per device and per device architecture (pooled over "
            f"stacks, where at least {MIN_SOURCES} sources), and pooled; built by "
            "`python3 -m gpuplan.validate.bands` (gpuplan/validate/bands/build.py), read by "
            "gpuplan/validate/bands/lookup.py"
        ),
        "inputs": inputs,
        "quantiles": list(QUANTILES),
        "min_rows": MIN_ROWS,
        "min_sources": MIN_SOURCES,
        "residuals": {"fit": int(counts.get("fit", 0)), "held_out": int(counts.get("held_out", 0)),
                      "per_set": {f"{s} {p}": int(n) for (s, p), n in per_set.items()}},
        "families": band_table(residuals),
    }  # fmt: skip


def _inputs() -> dict[str, str]:
    from gpuplan.validate import calibrate

    root = Path(__file__).resolve().parents[2]
    files = {
        "calibration": root / "hwmodels/data/calibration_h200.json",
        "stack_fit": root / "sim/stacks/data/stack_fit.json",
        "published_training": root / "validate/published/data/published_training.csv",
        "published_serving": root / "validate/published/data/published_serving.csv",
    }
    out = {k: f"{p.relative_to(root.parent)} sha256:{calibrate.file_sha256(p)}" for k, p in files.items()}
    found = calibrate.load_runs(None, "h200")
    digest = _files_digest(sorted(found.files))
    out["harness_records"] = f"{len(found.files)} files of data/ (h200), sha256 of their sha256s:{digest}"
    base = stack_dir()
    stack_files = sorted([*base.glob("*.jsonl"), *base.glob("*/*.jsonl")])
    digest = _files_digest(stack_files)
    out["stack_records"] = (f"{len(stack_files)} files of data/{STACK_CAMPAIGN}/ (seed "
                            f"{STACK_SEED}), sha256 of their sha256s:{digest}")  # fmt: skip
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m gpuplan.validate.bands",
                                description=__doc__.splitlines()[0])  # fmt: skip
    p.add_argument("--out", required=True, help="the JSON file to write")
    args = p.parse_args(argv)
    out = Path(args.out)
    if not out.parent.is_dir():
        print(f"error: --out={args.out!r}: folder {str(out.parent)!r} does not exist", file=sys.stderr)
        return 2
    try:
        doc = document(all_residuals(), _inputs())
    except GpuplanError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    tmp = out.with_suffix(out.suffix + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    tmp.replace(out)
    print(f"wrote {out}: {len(doc['families'])} families, {doc['residuals']['fit']} fit and "
          f"{doc['residuals']['held_out']} held-out residuals")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
