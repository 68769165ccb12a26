"""``python3 -m gpuplan.validate.bands --out gpuplan/hwmodels/data/error_bands.json``: the data of
the error bands (``gpuplan.validate.bands.lookup``) from the validation residuals. 12-30 s on two cores;
same inputs, same bytes (``tests/test_bands.py`` checks it).

A residual is the signed relative error ``e = predicted / true - 1`` of one prediction, in the
direction of its family's metric. Four sets give them, each with its own committed, seeded split
into a fit part and a held-out part; the bands are built from the fit part only and the held-out
part is left for ``benchmarks/band_coverage.py``:

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
- the published training runs (``validate.published.training``, held out by source):
  ``train.time`` (step time: a throughput's error ``e`` is the step time's ``1 / (1 + e) - 1``)
  and ``train.memory``;
- the published serving rows (``validate.published.serving``, held out by row within each source):
  ``serve.throughput``, ``serve.ttft``, ``serve.tpot``, ``serve.e2e``.

Every residual also carries its ``source`` (a published source; ``harness`` or ``h200_stacks``
for the two campaigns). Per family, the p10 and p90 of the fit residuals (numpy's linear
quantile, every row weighted alike) are written at four levels, the ones a prediction is looked
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
(``benchmarks/band_coverage.py``, "leave one source out") covers about half its rows, not four
in five, whatever the pooling, because eight sources are eight draws of a source's bias. So a
pooled level is only used when it holds at least two sources (one source's band is that
source's bias, not a spread), and the first thing pooled over is the device, not the framework:
every device without a fit of its own borrows the H200's kernel efficiencies
(``hwmodels.efficiency.efficiency_for``), so the device is what the rows of a device share (the
fit's Blackwell rows run 30-40% fast whatever the stack, its A100 rows a few percent slow). The
held-out training source llm-foundry (216 of the 220 held-out training rows) ran
``composer-fsdp``, a stack no fit source ran: its rows get their device's band (H100), or their
architecture's (A100 40GB: sm_80, measured on the A100 80GB). No width here was chosen to meet a
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
        "part": np.where(f["held_out"], "held_out", "fit"),
        "e": e,
    })[COLUMNS]  # fmt: skip


def serving_residuals() -> pd.DataFrame:
    """The published serving rows' residuals (rows that could be run)."""
    from gpuplan.validate.published.serving import ENGINE_STACK, reproduce

    f = reproduce()
    f = f[f["predicted"].notna() & (f["value"] > 0)]
    return pd.DataFrame({
        "set": "published serving",
        "family": "serve." + f["kind"].astype(str),
        "stack": f["engine"].map(ENGINE_STACK).fillna(f["engine"]).astype(str),
        "device": f["gpu"].astype(str),
        "source": f["source"].astype(str),
        "part": np.where(f["split"] == "holdout", "held_out", "fit"),
        "e": f["error_pct"] / 100.0,
    })[COLUMNS]  # fmt: skip


def all_residuals(data_dir=None) -> pd.DataFrame:
    return pd.concat(
        [harness_residuals(data_dir), stack_residuals(data_dir), training_residuals(),
         serving_residuals()],
        ignore_index=True,
    )  # fmt: skip


def _q(values) -> tuple[float, float]:
    lo, hi = np.quantile(np.asarray(values, dtype=float), QUANTILES)
    return round(float(lo), 6), round(float(hi), 6)


def architecture(device: str) -> str | None:
    from gpuplan.hwmodels.architecture import ARCH

    return ARCH.get(device)


def _pool(g: pd.DataFrame, **keys) -> dict | None:
    """A pooled level's entry, or None when it holds too few rows or sources."""
    n_sources = g["source"].nunique()
    if len(g) < MIN_ROWS or n_sources < MIN_SOURCES:
        return None
    lo, hi = _q(g["e"])
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
                lo, hi = _q(gg["e"])
                med = round(float(np.median(gg["e"])), 6)
                groups.append({"stack": stack, "device": device, "n_fit": len(gg),
                               "p10": lo, "p90": hi, "median": med})  # fmt: skip
        devices = [e for d, gg in g.groupby("device", sort=True) if (e := _pool(gg, device=d))]
        archs = [e for a, gg in g[g["arch"] != ""].groupby("arch", sort=True)
                 if (e := _pool(gg, arch=a, devices=sorted(gg["device"].unique().tolist())))]
        lo, hi = _q(g["e"])
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
