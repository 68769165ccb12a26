"""``python3 -m gpuplan.validate.bands --out gpuplan/hwmodels/data/error_bands.json``: the data of
the error bands (``gpuplan.sim.bands``) from the validation residuals.

A residual is the signed relative error ``e = predicted / true - 1`` of one prediction, in the
direction of its family's metric. Three sets give them, each with its own committed, seeded split
into a fit part and a held-out part; the bands are fitted on the fit part only and the held-out
part is left for ``benchmarks/band_coverage.py``:

- the harness records (``data/``, ``validate.calibrate.split`` with the seed and train fraction of
  the committed calibration, 70/30 by case and kind), predicted with the committed calibration:
  one family per kind and metric, ``<kind>.time_s`` and ``<kind>.peak_bytes``;
- the published training runs (``sim.parallel.published_training``, held out by source):
  ``train.time`` (step time: a throughput's error ``e`` is the step time's ``1 / (1 + e) - 1``)
  and ``train.memory``;
- the published serving rows (``sim.serving.published``, held out by row within each source):
  ``serve.throughput``, ``serve.ttft``, ``serve.tpot``, ``serve.e2e``.

Per family, stack and device the p10 and p90 of the fit residuals (numpy's linear quantile) are
written with the residual count; groups of fewer than ``MIN_ROWS`` fit residuals are not written
(a prediction for them gets the family's unmeasured band, ``sim.bands``). Same inputs, same bytes.
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
COLUMNS = ["family", "stack", "device", "part", "e"]


def _sha256(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def harness_residuals(data_dir=None, device: str = "h200") -> pd.DataFrame:
    """The harness records' residuals: one row per record and metric, ``part`` fit or held_out."""
    from gpuplan.hwmodels.efficiency import calibrated_efficiency
    from gpuplan.validate import calibrate

    eff = calibrated_efficiency(device)
    if eff is None:
        raise GpuplanError(f"device={device!r}: no calibration to score its records with")
    prov = eff.provenance
    records, _ = calibrate.load_measurements(data_dir, device)
    train, test = calibrate.split(records, seed=prov["seed"], train_fraction=prov["train_fraction"])
    parts = []
    for part, recs in (("fit", train), ("held_out", test)):
        rows = calibrate.score(recs, eff).rows
        rows = rows[(rows["measured"] > 0) & rows["predicted"].notna()]
        parts.append(pd.DataFrame({
            "family": rows["kind"] + "." + rows["metric"],
            "stack": rows["stack"].fillna("harness").astype(str),
            "device": rows["device"].astype(str),
            "part": part,
            "e": rows["predicted"] / rows["measured"] - 1.0,
        }))  # fmt: skip
    return pd.concat(parts, ignore_index=True)[COLUMNS]


def training_residuals() -> pd.DataFrame:
    """The published training rows' residuals (rows that could be priced)."""
    from gpuplan.sim.parallel.published_training import reproduce_training

    f = reproduce_training()
    f = f[(f["status"] == "ok") & f["predicted"].notna() & (f["published"] > 0)]
    ratio = f["predicted"] / f["published"]  # the metric's own predicted/true
    is_time = f["metric"].astype(str).str.endswith("_s") | (f["kind"] == "memory")
    e = np.where(is_time, ratio - 1.0, 1.0 / ratio - 1.0)  # throughputs: the step time's error
    return pd.DataFrame({
        "family": np.where(f["kind"] == "memory", "train.memory", "train.time"),
        "stack": f["stack"].astype(str),
        "device": f["gpu"].astype(str),
        "part": np.where(f["held_out"], "held_out", "fit"),
        "e": e,
    })[COLUMNS]  # fmt: skip


def serving_residuals() -> pd.DataFrame:
    """The published serving rows' residuals (rows that could be run)."""
    from gpuplan.sim.serving.published import ENGINE_STACK, reproduce

    f = reproduce()
    f = f[f["predicted"].notna() & (f["value"] > 0)]
    return pd.DataFrame({
        "family": "serve." + f["kind"].astype(str),
        "stack": f["engine"].map(ENGINE_STACK).fillna(f["engine"]).astype(str),
        "device": f["gpu"].astype(str),
        "part": np.where(f["split"] == "holdout", "held_out", "fit"),
        "e": f["error_pct"] / 100.0,
    })[COLUMNS]  # fmt: skip


def all_residuals(data_dir=None) -> pd.DataFrame:
    return pd.concat(
        [harness_residuals(data_dir), training_residuals(), serving_residuals()],
        ignore_index=True,
    )


def _q(values) -> tuple[float, float]:
    lo, hi = np.quantile(np.asarray(values, dtype=float), QUANTILES)
    return round(float(lo), 6), round(float(hi), 6)


def band_table(residuals: pd.DataFrame) -> dict:
    """Per family: its groups' p10/p90 of the FIT residuals (held-out ones are never read)."""
    fit = residuals[residuals["part"] == "fit"]
    families: dict = {}
    for family, g in fit.groupby("family", sort=True):
        groups = []
        for (stack, device), gg in g.groupby(["stack", "device"], sort=True):
            if len(gg) >= MIN_ROWS:
                lo, hi = _q(gg["e"])
                med = round(float(np.median(gg["e"])), 6)
                groups.append({"stack": stack, "device": device, "n_fit": len(gg),
                               "p10": lo, "p90": hi, "median": med})  # fmt: skip
        lo, hi = _q(g["e"])
        families[family] = {"pooled": {"n_fit": len(g), "p10": lo, "p90": hi}, "groups": groups}
    return families


def document(residuals: pd.DataFrame, inputs: dict[str, str]) -> dict:
    counts = residuals.groupby("part").size().to_dict()
    return {
        "about": (
            "p10 and p90 of the signed relative error e = predicted/true - 1 of the FIT part of "
            "each validation split, per family (harness record kind and metric; published "
            "training and serving metric families), stack and device; built by "
            "`python3 -m gpuplan.validate.bands` (gpuplan/validate/bands.py), read by "
            "gpuplan/sim/bands.py"
        ),
        "inputs": inputs,
        "quantiles": list(QUANTILES),
        "min_rows": MIN_ROWS,
        "residuals": {"fit": int(counts.get("fit", 0)), "held_out": int(counts.get("held_out", 0))},
        "families": band_table(residuals),
    }


def _inputs() -> dict[str, str]:
    from gpuplan.validate import calibrate

    root = Path(__file__).resolve().parents[1]
    files = {
        "calibration": root / "hwmodels/data/calibration_h200.json",
        "published_training": root / "sim/parallel/data/published_training.csv",
        "published_serving": root / "sim/serving/data/published_serving.csv",
    }
    out = {k: f"{p.relative_to(root.parent)} sha256:{_sha256(p)}" for k, p in files.items()}
    found = calibrate.load_runs(None, "h200")
    digest = hashlib.sha256("".join(_sha256(f) for f in sorted(found.files)).encode()).hexdigest()
    out["harness_records"] = f"{len(found.files)} files of data/ (h200), sha256 of their sha256s:{digest}"
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m gpuplan.validate.bands", description=__doc__)
    p.add_argument("--out", required=True, help="the JSON file to write")
    args = p.parse_args(argv)
    out = Path(args.out)
    if not out.parent.is_dir():
        print(f"error: --out={args.out!r}: folder {str(out.parent)!r} does not exist", file=sys.stderr)
        return 2
    doc = document(all_residuals(), _inputs())
    tmp = out.with_suffix(out.suffix + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    tmp.replace(out)
    print(f"wrote {out}: {len(doc['families'])} families, {doc['residuals']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
