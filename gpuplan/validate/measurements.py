"""The records a calibration reads: the device's runs (``validate.runs``) and their files, each
run's timing notes, and the Efficiency a record of one run is priced with (its host's factor).

The runs are read in name order, whatever the manifest's: the split and the fit depend on the
records' order.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gpuplan.errors import GpuplanError, unknown_key
from gpuplan.hwmodels.efficiency import Efficiency
from gpuplan.validate import runs as runs_mod
from gpuplan.validate.calibration_stages import HOST_COSTS
from gpuplan.validate.records import Record, read_records


def default_data_dir() -> Path:
    """The checkout's ``data/`` (measurements are not installed with the package)."""
    return runs_mod.resolve_data_dir(None)


@dataclass(frozen=True, slots=True, kw_only=True)
class Measurements:
    """The records a calibration reads, where they came from, and what was left out."""

    records: list[Record]
    files: list[str]
    runs: list[runs_mod.Run]
    skipped: list[str]  # one line per run or file left out, and why


def load_runs(data_dir: str | Path | None, device: str = "h200") -> Measurements:
    """The records of ``device`` in the runs of ``data_dir`` (its ``runs.json`` or, without
    one, every folder of records; ``validate.runs``). Records of another device are skipped
    with a note; a bad line, or no record at all, is an error."""
    data_dir = runs_mod.resolve_data_dir(data_dir)
    devices = _catalogue_keys()
    if device not in devices:
        raise unknown_key("device", device, devices)
    runs = runs_mod.runs_of(data_dir, devices)
    skipped = [f"run {r.name}/ is of device {r.device}, not {device}" for r in runs
               if r.device and r.device != device]  # fmt: skip
    # in name order, whatever the manifest's: the split and the fit depend on the records' order
    runs = sorted((r for r in runs if not r.device or r.device == device), key=lambda r: r.name)
    records, files, kinds_of = [], [], {}
    for run in runs:
        for path in run.files:
            found, errors = read_records(path, known_devices=lambda: devices)
            if errors:
                more = f" (and {len(errors) - 1} more bad lines)" if len(errors) > 1 else ""
                raise GpuplanError(f"{path}:{errors[0].line_no}: {errors[0].reason}{more}")
            other = [r for r in found if r.device != device]
            if other:
                skipped.append(f"{path}: {len(other)} records of device {other[0].device}, "
                               f"not {device}")  # fmt: skip
            mine = [r for r in found if r.device == device]
            if mine:
                files.append(str(path))
                kinds_of.setdefault(run.name, set()).update(r.kind for r in mine)
            records += [
                dataclasses.replace(r, source=f"{run.name}/{path.name}:{r.line_no}") for r in mine
            ]
    if not records:
        raise GpuplanError(
            f"no {device} measurement record under {str(data_dir)!r}: no *.jsonl of that device "
            "in its runs (runs.json, or the folder and its sub-folders)"
        )
    if runs and not runs[0].device:  # found by folder, not named by a manifest
        runs = runs_mod.discovered_hosts([r for r in runs if r.name in kinds_of], kinds_of, device)
    _set_timing(runs)
    return Measurements(records=records, files=files, runs=runs, skipped=skipped)


def _catalogue_keys() -> list[str]:
    from gpuplan.hwmodels.accelerators import list_accelerators

    return [acc.key for acc in list_accelerators()]


def _set_timing(runs: Sequence[runs_mod.Run]) -> None:
    """The timing notes of the runs loaded last (not of an earlier load)."""
    _PRESPIN_S.clear()
    _KERNEL.clear()
    for run in runs:
        for kind, note in run.timing.items():
            if note.prespin_s:
                _PRESPIN_S[(run.name, kind)] = note.prespin_s
            if note.attention_kernel:
                _KERNEL[(run.name, kind)] = note.attention_kernel


def load_measurements(
    data_dir: str | Path | None, device: str = "h200"
) -> tuple[list[Record], list[str]]:
    """The records of ``load_runs``, and the files they came from."""
    found = load_runs(data_dir, device)
    return found.records, found.files


def run_of(record: Record) -> str:
    """The run (data folder) a loaded record came from: ``load_measurements`` names it first in
    the record's source; '' for a record from elsewhere."""
    folder, sep, _ = record.source.partition("/")
    return folder if sep else ""


# (run, kind) -> the GPU spin before each timed call, and the attention kernel where it is not
# FlashAttention-2, from the run's ``timing.json`` (written by the harness; filled by
# ``load_measurements``).
_PRESPIN_S: dict[tuple[str, str], float] = {}
_KERNEL: dict[tuple[str, str], str] = {}


def for_run(eff: Efficiency, run: str, kind: str = "") -> Efficiency:
    """``eff`` for the records of ``kind`` in ``run``: its CPU costs times the run's host
    factor; where the run's harness spun the GPU before each timed call, that spin is the CPU's
    head start (it queues the whole call meanwhile)."""
    factor = eff.host_factor.get(run, 1.0)
    changes = {c: getattr(eff, c) * factor for c in HOST_COSTS} if factor != 1.0 else {}
    spin_s = _PRESPIN_S.get((run, kind))
    if spin_s:
        changes["timer_headstart_s"] = spin_s
    if (run, kind) in _KERNEL:
        changes["attention_kernel"] = _KERNEL[(run, kind)]
    return dataclasses.replace(eff, **changes) if changes else eff


def attention_kernel(run: str, kind: str) -> str | None:
    """The attention kernel ``run``'s harness timed ``kind`` with, where it is not
    FlashAttention-2 (its ``timing.json``); None otherwise."""
    return _KERNEL.get((run, kind))
