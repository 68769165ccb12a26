"""Fit the hardware model's efficiencies on measured records; report the error on held-out ones.

Method:
- The records of the device's runs are read: the runs a folder's manifest names (the
  repository's ``data/runs.json``), or every folder of records of a folder without one
  (``validate.runs``); records of another device are skipped, a bad line is an error. The
  records of each kind are split at random, with a seed, into a training share (70%) and a held-out rest. The split is
  by record, stratified by kind, so every kind is both fitted and tested.
- The parameters of ``hwmodels.efficiency.Efficiency`` are fitted in stages, each on the kinds
  that isolate them, the later stages holding the earlier ones fixed: GEMM rates and overheads on
  ``gemm``; flash-attention rates on ``attention``; per-op bandwidth, the per-kernel floor, the
  launch latency on ``elementwise`` (fitted first: the others use them); link
  latency and bandwidth on ``collective``; launch costs and the bandwidth of the ops that occur
  only inside layers (RoPE, layout copies, fused kernels, the optimizer) on the composite kinds.
- Lent machines of one kind differ in their CPUs, and a CPU-bound call (an eager decode step, a
  small fwd_bwd) runs at its host's speed. Every run the manifest marks ``host: fitted`` gets a
  host factor on the CPU costs of the ``reference`` run's host (``HOST_COSTS``), fitted with
  the stage that fits those costs; each record is predicted with its run's factor. Predictions
  for users use the reference host.
- The split is by case: the records of one kind with the same parameters (the same case measured
  in two runs) fall on the same side, so no held-out case was seen in fitting on another host.
- The stages are swept twice: the CPU's cost per eager op, which only the composite kinds pin
  down, feeds back into the single-op stages (an isolated call's CPU work hides behind the
  timer's head start, ``timer_headstart_s``: computed from the flush, not fitted).
- Each stage minimises the robust (soft-L1) sum of squared log errors, log(predicted/measured),
  over its training records with ``scipy.optimize.least_squares``, parameters in log space
  within physical bounds (a fraction of a peak stays within (0, 1]).
- The fit is a document with its provenance (files and their SHA-256, seed, split sizes, date,
  the errors on both splits), written only where ``--out`` says: the repository's own fit is
  ``--out gpuplan/hwmodels/data/calibration_h200.json``; anyone's is read back by
  ``--calibration FILE`` (``hwmodels.efficiency.efficiency_from_file``).

The parts: ``calibration_stages`` (the fitted parameters, by stage), ``measurements`` (the runs'
records and each run's host), ``holdout`` (the split), ``fit_efficiency`` (the fit and the
score); this module runs them in turn, writes the document and is ``gpuplan validate calibrate``.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from gpuplan.errors import GpuplanError
from gpuplan.hwmodels.efficiency import Efficiency
from gpuplan.outputs import write_text
from gpuplan.validate.calibration_stages import STAGES
from gpuplan.validate.fit_efficiency import fit, score
from gpuplan.validate.holdout import split
from gpuplan.validate.measurements import load_measurements, load_runs
from gpuplan.validate.records import Record
from gpuplan.validate.score import ScoreResult


def split_as_calibrated(
    eff, data_dir: str | Path | None, device: str
) -> tuple[list[Record], list[Record], list[Record]]:
    """``device``'s records and the (fit, held-out) split the calibration ``eff`` was fitted on
    (its provenance's seed and train fraction): the records, the fit part, the held-out part."""
    prov = eff.provenance
    records, _ = load_measurements(data_dir, device)
    train, test = split(records, seed=prov["seed"], train_fraction=prov["train_fraction"])
    return records, train, test


def file_sha256(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def calibration_document(
    eff: Efficiency,
    *,
    files: list[str],
    seed: int,
    train_fraction: float,
    train: ScoreResult,
    test: ScoreResult,
    device: str,
) -> dict[str, Any]:
    fitted = {p.path for s in STAGES for p in s.params}
    fields = {p.partition(".")[0] for p in fitted} | {"host_factor"}
    return {
        "source": f"fitted by `gpuplan validate calibrate` on {device} measurements "
        f"(seed {seed}, {train_fraction:.0%} train)",
        "parameters": {f: getattr(eff, f) for f in sorted(fields)},
        "provenance": {
            "script": "gpuplan/validate/calibrate.py",
            "fitted_at": dt.date.today().isoformat(),
            "device": device,
            "seed": seed,
            "train_fraction": train_fraction,
            "files": {Path(f).parent.name + "/" + Path(f).name: file_sha256(f) for f in files},
            "n_train": int(len(train.rows)),
            "n_test": int(len(test.rows)),
            "train_error": train.summary.to_dict("records"),
            "test_error": test.summary.to_dict("records"),
        },
    }


def run_calibration(
    data_dir: str | Path | None = None,
    *,
    seed: int = 0,
    train_fraction: float = 0.7,
    device: str = "h200",
    progress: Callable[[str], None] = lambda _: None,
    notes: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """Load, split, fit, score: the calibration document (not yet written). ``notes`` hears
    of each run or file left out (another device)."""
    found = load_runs(data_dir, device)
    for note in found.skipped:
        notes(note)
    train, test = split(found.records, seed=seed, train_fraction=train_fraction)
    hosts = [r.name for r in found.runs if r.host == "fitted"]
    eff = fit(train, progress=progress, fitted_hosts=hosts)
    return calibration_document(
        eff,
        files=found.files,
        seed=seed,
        train_fraction=train_fraction,
        train=score(train, eff),
        test=score(test, eff),
        device=device,
    )


def checked_out(out: str | None) -> Path | None:
    """``--out``: None (print only), else a file whose folder exists; checked before any work."""
    if out is None:
        return None
    if not str(out).strip():
        raise GpuplanError(
            f"--out {out!r} is empty: give a file for the fit (e.g. --out fit.json), or leave "
            "--out out to print the fit without writing it"
        )
    path = Path(out)
    if path.is_dir():
        raise GpuplanError(f"--out {out!r} is a folder: give a file for the fit (e.g. fit.json)")
    if not path.parent.is_dir():
        raise GpuplanError(f"--out {out!r}: folder {str(path.parent)!r} does not exist")
    return path


def main(args) -> int:
    """``gpuplan validate calibrate``: fit, print both error tables; the fit is written only to
    ``--out`` (without it nothing is written: ``--json`` prints the whole fit)."""
    from gpuplan.hwmodels import efficiency
    from gpuplan.tables import dump_json, render_table

    out = checked_out(getattr(args, "out", None))
    doc = run_calibration(
        args.data,
        seed=args.seed,
        train_fraction=args.train_fraction,
        device=getattr(args, "device", None) or "h200",
        progress=lambda s: None if args.json else print(f"fitting {s} ..."),
        notes=lambda s: print(f"gpuplan: skipped {s}", file=sys.stderr),
    )
    if out is not None:
        write_text(out, json.dumps(doc, indent=2, sort_keys=True) + "\n")
        efficiency.calibrated_efficiency.cache_clear()
    if args.json:
        print(dump_json({"output": None if out is None else str(out), **doc}))
        return 0
    prov = doc["provenance"]
    for name in ("train_error", "test_error"):
        table = pd.DataFrame(prov[name])
        print(
            f"\n{name.replace('_', ' ')} ({'fitted on' if name == 'train_error' else 'held out'}):"
        )
        print(render_table(table))
    if out is None:
        print("\nthe fit was not written (no --out FILE); --json prints it whole")
    else:
        print(f"\nwrote {out}")
    return 0
