"""Leave one source out, for the published training and serving rows.

Training: no parameter fitted on published training rows is in force. The one such parameter,
``TrainingRuntime.comm_interference``, is fitted per stack by ``benchmarks/fit_training_stacks.py``
and adopted by none (its ``.json`` says why for each); the kernel efficiencies come from the
H200 measurements (``hwmodels/data/calibration_h200.json``), never from a published row. So each
training row's prediction is already made without its source: ``training_left_out`` checks that
claim against the committed fit file (``NotLeftOut`` where a stack adopts a value: then each
source would need its own refit) and returns the rows.

Serving: the serving stacks' parameters are fitted on published rows; each source's rows are
priced with the values fitted without that source (``fit_stacks.serving_loso``).

``summary`` gives, per source (and source family) and metric kind, the median and p90 absolute
error left out, beside the in-sample figure (the committed fits, which may have seen the row).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from gpuplan.validate.published.training import reproduce_training, training_sources

TRAINING_FIT = Path(__file__).resolve().parents[3] / "benchmarks" / "fit_training_stacks.json"


class NotLeftOut(RuntimeError):
    """A committed training fit adopts a value fitted on published rows."""


def adopted_training_values(path: Path | None = None) -> dict[str, float]:
    """The stacks whose ``comm_interference`` fitted on published rows is in force ({} when
    none is, or when the fit file is not in this checkout: an installed package reads none)."""
    path = TRAINING_FIT if path is None else path
    if not path.is_file():
        return {}
    stacks = json.loads(path.read_text())["stacks"]
    return {name: s["adopted"] for name, s in stacks.items() if s.get("adopted", 0.0) != 0.0}


def training_left_out(seed: int = 0) -> pd.DataFrame:
    """Every published training row with its error when its source is in no fit (module
    docstring), and its source's family."""
    adopted = adopted_training_values()
    if adopted:
        raise NotLeftOut(f"published-row fits in force for {sorted(adopted)}: the training "
                         "rows are not left out of every fit; refit per source first")
    families = {k: v.get("family", k) for k, v in training_sources()["sources"].items()}
    rows = reproduce_training(seed)
    return rows.assign(family=rows["source"].map(families).fillna(rows["source"]))


def serving_left_out() -> pd.DataFrame:
    """Every published serving row, error in-sample and left out (``left_abs_error_pct``)."""
    from gpuplan.validate.fit_stacks.serving_loso import left_out
    from gpuplan.validate.published.serving import reproduce

    inside, out = reproduce(), left_out()
    return inside.assign(left_error_pct=out["error_pct"], left_abs_error_pct=out["abs_error_pct"],
                         family=inside["source"])  # fmt: skip


def _stats(err: pd.Series) -> dict:
    err = err.dropna()
    return {"median_abs_pct_error": float(err.median()) if len(err) else np.nan,
            "p90_abs_pct_error": float(err.quantile(0.9)) if len(err) else np.nan}  # fmt: skip


def summary(rows: pd.DataFrame, by: str = "source", *, inside: str = "abs_error_pct",
            left: str = "abs_error_pct") -> pd.DataFrame:
    """Per ``by`` (source or family) and kind, then 'all' per kind: rows, rows predicted, the
    left-out median and p90 absolute % error and the in-sample median."""
    out = []
    for (key, kind), g in pd.concat([rows, rows.assign(**{by: "all"})]).groupby([by, "kind"]):
        s = _stats(g[left])
        out.append({by: key, "kind": kind, "rows": len(g), "predicted": int(g[left].notna().sum()),
                    "left_out_median_pct": s["median_abs_pct_error"],
                    "left_out_p90_pct": s["p90_abs_pct_error"],
                    "in_sample_median_pct": _stats(g[inside])["median_abs_pct_error"]})  # fmt: skip
    return pd.DataFrame(out)
