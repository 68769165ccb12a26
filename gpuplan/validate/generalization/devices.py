"""Leave one device out: the records measured on one device, priced by fits made on the other.

- ``installed``: records priced exactly as a user gets them (``record_prediction.predict_record``:
  the committed fits, the H200's, applied to the record's device by datasheet scaling, as
  ``hwmodels.efficiency.efficiency_for`` borrows them). For a device no fit has read (the H100,
  Vidur's A100 and H100 profiles) this is leave-one-device-out.
- ``refit_on``: the harness calibration (``validate.calibrate``) fitted on one device's records
  alone, then applied to another device's held-out records (the same fractions of the other
  datasheet): the reverse direction, where a second device has enough records to fit.

``by_kind`` summarises per kind (GEMMs and grouped GEMMs also per dtype, and per stack where a
kind was measured under several) the median and p90 absolute % error of ``time_s``.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from gpuplan.validate.records import read_records

DTYPE_KINDS = ("gemm", "grouped_gemm")


def records_of(folders: Iterable[str | Path], device: str | None = None) -> list:
    """Every record of ``DIR/*.jsonl`` and ``DIR/*/*.jsonl`` of each folder (bad lines skipped),
    of ``device`` only where given."""
    out = []
    for root in map(Path, folders):
        for path in sorted([*root.glob("*.jsonl"), *root.glob("*/*.jsonl")]):
            records, _ = read_records(path)
            out += [r for r in records if device is None or r.device == device]
    return out


def _label(record) -> dict:
    p = record.params
    return {"stack": p.get("stack", "harness"), "timing": p.get("timing", ""),
            "dtype": p.get("dtype", "")}  # fmt: skip


def installed(records: list) -> pd.DataFrame:
    """Each record's ``time_s`` priced as a user gets it, with its labels."""
    from gpuplan.validate.record_prediction import predict_record

    out = []
    for r in records:
        try:
            predicted = predict_record(r)["time_s"]
        except Exception as err:  # noqa: BLE001 - a record the model cannot price is counted
            out.append({"kind": r.kind, **_label(r), "device": r.device, "measured": np.nan,
                        "predicted": np.nan, "error": f"{type(err).__name__}: {err}"})  # fmt: skip
            continue
        out.append({"kind": r.kind, **_label(r), "device": r.device,
                    "measured": r.measured["time_s"], "predicted": predicted, "error": ""})  # fmt: skip
    frame = pd.DataFrame(out)
    frame["error_pct"] = 100 * (frame["predicted"] - frame["measured"]) / frame["measured"]
    frame["abs_error_pct"] = frame["error_pct"].abs()
    return frame


def harness_installed(data_dir, device: str) -> pd.DataFrame:
    """The ``time_s`` rows of ``device``'s harness runs (those ``data/runs.json`` lists), priced
    as the calibration scores its own records (each run's timing convention and host) with the
    efficiency a user of ``device`` gets (``efficiency_for``: for a device without a fit of its
    own, the H200's moved by datasheet scaling)."""
    from gpuplan.hwmodels.efficiency import efficiency_for
    from gpuplan.validate.fit_efficiency import score
    from gpuplan.validate.measurements import load_measurements

    records, _ = load_measurements(data_dir, device)
    return _as_frame(score(records, efficiency_for(device)).rows)


def _as_frame(rows: pd.DataFrame) -> pd.DataFrame:
    rows = rows[rows["metric"] == "time_s"]
    frame = pd.DataFrame({"kind": rows["kind"], "stack": "harness",
                          "dtype": rows.get("dtype", pd.Series("", index=rows.index)).fillna(""),
                          "device": rows["device"], "measured": rows["measured"],
                          "predicted": rows["predicted"]})  # fmt: skip
    frame["error_pct"] = 100 * (frame["predicted"] - frame["measured"]) / frame["measured"]
    frame["abs_error_pct"] = frame["error_pct"].abs()
    return frame.reset_index(drop=True)


def _group(frame: pd.DataFrame) -> pd.Series:
    """The row's group: its kind, with the dtype for GEMMs, and the stack where not harness."""
    kind = frame["kind"].where(~frame["kind"].isin(DTYPE_KINDS),
                               frame["kind"] + "[" + frame["dtype"] + "]")  # fmt: skip
    return kind.where(frame["stack"] == "harness", frame["stack"] + " " + kind)


def by_kind(frame: pd.DataFrame) -> pd.DataFrame:
    """Per group (``_group``): records, records priced, median and p90 absolute % error and the
    median signed one (+: gpuplan slow)."""
    out = []
    for group, g in frame.groupby(_group(frame), sort=True):
        err = g["abs_error_pct"].dropna()
        out.append({"group": group, "records": len(g), "priced": len(err),
                    "median_abs_pct_error": float(err.median()) if len(err) else np.nan,
                    "p90_abs_pct_error": float(err.quantile(0.9)) if len(err) else np.nan,
                    "median_pct_error": float(g["error_pct"].median()) if len(err) else np.nan})
    return pd.DataFrame(out)


def refit_on(data_dir, fit_device: str, score_device: str, *, seed: int = 0) -> pd.DataFrame:
    """The harness calibration fitted on ``fit_device``'s records (its 70% fit part) and applied
    to ``score_device``'s held-out records (the split of the committed calibration), each run
    priced with its own timing convention, at the reference host."""
    from gpuplan.hwmodels.efficiency import (
        _from_dict,
        architecture_kernel_rates,
        calibrated_efficiency,
        prior_efficiency,
    )
    from gpuplan.validate.calibrate import run_calibration, split_as_calibrated
    from gpuplan.validate.fit_efficiency import score

    doc = run_calibration(data_dir, seed=seed, device=fit_device)
    eff = _from_dict(prior_efficiency().to_dict() | doc["parameters"] | {"host_factor": {}})
    eff = architecture_kernel_rates(eff, score_device)
    reference = calibrated_efficiency(score_device) or eff
    _, _, held = split_as_calibrated(reference, data_dir, score_device)
    return _as_frame(score(held, eff).rows)


def at_measured_host(folder, device: str) -> pd.DataFrame:
    """The whole-model records of ``folder`` that carry their host's module probe (the stack
    campaign's ``hostpair`` part), priced at that host's speed: what a user gets who measures
    the host with ``python3 -m gpuplan.validate.harness.host_probe --kind module`` and passes
    ``--host-speed`` (eager Hugging Face steps are CPU-bound, and the lent machines' CPUs
    differ)."""
    from dataclasses import replace

    from gpuplan.validate.fit_stacks import cases
    from gpuplan.validate.record_prediction import predict_breakdown, record_stack

    out = []
    for r in cases.load(folder, device):
        if id(r) not in cases.MODULE_PROBE_S:
            continue
        stack = record_stack(r.params)
        stack = replace(stack, host=replace(stack.host, speed_factor=cases.host_speed(r)))
        predicted = predict_breakdown(r.kind, r.device, r.params, stack=stack).total_s
        out.append({"kind": r.kind, **_label(r), "device": r.device,
                    "measured": r.measured["time_s"], "predicted": predicted, "error": ""})  # fmt: skip
    frame = pd.DataFrame(out)
    if len(frame):
        frame["error_pct"] = 100 * (frame["predicted"] - frame["measured"]) / frame["measured"]
        frame["abs_error_pct"] = frame["error_pct"].abs()
    return frame
