"""Which measured runs a calibration reads, and where the measurement data lives.

A run is one folder of measurement records (JSON Lines, ARCHITECTURE.md) taken on one machine
by one call of the harness. The runs are named, never guessed from folder names:

- A folder with a manifest, ``runs.json``, reads exactly the runs it lists (the repository's
  own ``data/runs.json`` is one). Each entry says::

      {"folder": "h200_run2", "device": "h200", "host": "fitted",
       "host_probe_s_per_launch": 7.18e-06,
       "timing": {"elementwise": {"convention": "device", "prespin_s": 0.000515}},
       "notes": "..."}

  ``folder``: relative to the manifest; its ``*.jsonl`` files (not those of sub-folders) are
  the run's records. ``device``: a catalogue key. ``host``: ``reference`` (the host whose CPU
  costs the fit is for: predictions for users use it; one per device), ``fitted`` (the run's
  CPU speed relative to the reference is fitted, a host factor on the eager CPU costs) or
  ``reference-cpu`` (taken as the reference's: a multi-GPU run, whose CPU costs are tied to
  the collective issue cost only it measures). ``host_probe_s_per_launch``: the median CPU time
  to launch one tiny kernel, from the records' ``stats.host_probe_s`` (64 launches), null when
  the run did not probe; it documents why a run gets a factor and is not read by the fit.
  ``timing``, per kind, the timing convention: ``isolated`` (CUDA events around one call after
  an L2 flush; the flush is the CPU's head start, the default) or ``device`` (the GPU spun
  ``prespin_s`` before each call: the spin is the head start, so the call's kernels run back to
  back); ``attention_kernel`` where SDPA did not run FlashAttention-2. A top-level ``repeat``
  names a re-measurement of one run's cases on another GPU (the report's repeatability table).
- A folder without one (a user's records) is read whole: ``DIR/*.jsonl`` and ``DIR/*/*.jsonl``,
  one run per folder; the run named after the device, else the first, is the reference host,
  a run holding multi-GPU kinds keeps the reference's CPU and the others get a fitted factor;
  a ``timing.json`` the harness wrote beside the records gives their timing convention.

Data is not installed with the package: ``validate`` reads a ``--data DIR`` or, from a
checkout of the repository, its top-level ``data/`` (``checkout_data_dir``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gpuplan
from gpuplan.errors import GpuplanError, unknown_key

MANIFEST = "runs.json"
HOSTS = ("reference", "fitted", "reference-cpu")
CONVENTIONS = ("isolated", "device")
MULTI_GPU_KINDS = ("collective", "tp_mlp", "tp_layer")
RUN_KEYS = ("folder", "device", "host", "host_probe_s_per_launch", "timing", "notes")
TIMING_KEYS = ("convention", "prespin_s", "prespin_cycles", "attention_kernel", "calls")
NO_DATA = (
    "no measurement data: this installation of gpuplan holds none (measurements live in the "
    "data/ folder of a checkout of gpuplan's repository): run from the checkout, or give "
    "--data DIR, a folder of records (the checkout's data/, or your own GPUs' from `python3 -m "
    "gpuplan.validate.harness`)"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class KindTiming:
    """How one kind's records of a run were timed."""

    convention: str = "isolated"
    prespin_s: float = 0.0  # the GPU's spin before each timed call (convention "device")
    attention_kernel: str = ""  # SDPA's kernel where it is not FlashAttention-2


@dataclass(frozen=True, slots=True, kw_only=True)
class Run:
    """One folder of records from one machine."""

    name: str  # the folder's name: the key of its host factor and of its records' sources
    folder: Path
    device: str
    host: str
    timing: dict[str, KindTiming] = field(default_factory=dict)
    host_probe_s_per_launch: float | None = None

    @property
    def files(self) -> list[Path]:
        return sorted(self.folder.glob("*.jsonl"))


def checkout_data_dir() -> Path | None:
    """The ``data/`` folder of the repository this package runs from, if it is a checkout; else
    that of the checkout the current directory is in (an installed package run from one)."""
    for root in (Path(gpuplan.__file__).resolve().parents[1], *_cwd_and_parents()):
        if _is_checkout(root):
            return root / "data"
    return None


def _cwd_and_parents() -> list[Path]:
    try:
        here = Path.cwd().resolve()
    except OSError:  # the current directory was removed
        return []
    return [here, *here.parents]


def _is_checkout(root: Path) -> bool:
    """A checkout of gpuplan: its pyproject names the project, its data/ has the manifest."""
    try:
        project = (root / "pyproject.toml").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    return 'name = "gpuplan"' in project and (root / "data" / MANIFEST).is_file()


def resolve_data_dir(given: str | Path | None) -> Path:
    """``--data DIR`` if given (it must be a folder), else the checkout's ``data/``."""
    if given is not None:
        path = Path(given)
        if str(given) == "" or not path.is_dir():
            what = "does not exist" if not path.exists() else "is not a folder"
            raise GpuplanError(f"--data {str(given)!r} {what}: give a folder of records")
        return path
    found = checkout_data_dir()
    if found is None:
        raise GpuplanError(NO_DATA)
    return found


def read_manifest(data_dir: Path) -> dict[str, Any] | None:
    """The folder's ``runs.json``, or None if it has none; a malformed one is an error."""
    path = data_dir / MANIFEST
    if not path.is_file():
        return None
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise GpuplanError(f"manifest {str(path)!r} is not valid JSON: {err}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("runs"), list) or not doc["runs"]:
        raise GpuplanError(f"manifest {str(path)!r} must be an object with a non-empty 'runs' list")
    return doc


def runs_of(data_dir: str | Path, devices: list[str]) -> list[Run]:
    """Every run of ``data_dir``: those its manifest lists, else one per folder of records."""
    data_dir = Path(data_dir)
    doc = read_manifest(data_dir)
    if doc is None:
        return _discovered(data_dir)
    where = str(data_dir / MANIFEST)
    runs = [_manifest_run(data_dir, entry, i, where, devices) for i, entry in enumerate(doc["runs"])]
    for device in {r.device for r in runs}:
        n = sum(r.device == device and r.host == "reference" for r in runs)
        if n != 1:
            raise GpuplanError(
                f"{where}: {n} runs of device {device!r} have host 'reference'; exactly one must"
            )
    return runs


def _manifest_run(data_dir: Path, entry: Any, i: int, where: str, devices: list[str]) -> Run:
    at = f"{where}: runs[{i}]"
    if not isinstance(entry, dict):
        raise GpuplanError(f"{at} is {type(entry).__name__}, not an object")
    for key in entry:
        if key not in RUN_KEYS:
            raise GpuplanError(f"{at}: {unknown_key('key', key, RUN_KEYS)}")
    for key in ("folder", "device", "host"):
        if not isinstance(entry.get(key), str) or not entry[key]:
            raise GpuplanError(f"{at}: {key!r} must be a non-empty string")
    folder = data_dir / entry["folder"]
    if not folder.is_dir():
        raise GpuplanError(f"{at}: folder {entry['folder']!r} does not exist under {str(data_dir)!r}")
    if entry["device"] not in devices:
        raise GpuplanError(f"{at}: {unknown_key('device', entry['device'], devices)}")
    if entry["host"] not in HOSTS:
        raise GpuplanError(f"{at}: host={entry['host']!r} is invalid: choose one of {', '.join(HOSTS)}")
    timing = entry.get("timing", {})
    if not isinstance(timing, dict):
        raise GpuplanError(f"{at}: 'timing' must be an object of kinds")
    probe = entry.get("host_probe_s_per_launch")
    if probe is not None and not _positive(probe):
        raise GpuplanError(f"{at}: host_probe_s_per_launch={probe!r} must be a number > 0 or null")
    return Run(
        name=folder.name, folder=folder, device=entry["device"], host=entry["host"],
        timing={k: _kind_timing(v, f"{at}.timing.{k}") for k, v in timing.items()},
        host_probe_s_per_launch=probe,
    )  # fmt: skip


def _positive(value: Any) -> bool:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    return ok and math.isfinite(value) and value > 0


def _kind_timing(note: Any, at: str) -> KindTiming:
    """One kind's timing note (the manifest's, or a harness ``timing.json`` entry)."""
    if not isinstance(note, dict):
        raise GpuplanError(f"{at} must be an object")
    for key in note:
        if key not in TIMING_KEYS:
            raise GpuplanError(f"{at}: {unknown_key('key', key, TIMING_KEYS)}")
    spin = note.get("prespin_s", 0.0)
    convention = note.get("convention", "device" if spin else "isolated")
    if convention not in CONVENTIONS:
        raise GpuplanError(f"{at}: convention={convention!r} is invalid: choose one of "
                           f"{', '.join(CONVENTIONS)}")  # fmt: skip
    if (convention == "device") != _positive(spin):
        raise GpuplanError(f"{at}: prespin_s={spin!r}: a 'device' convention needs the GPU's "
                           "spin in seconds (> 0), an 'isolated' one none")  # fmt: skip
    kernel = note.get("attention_kernel", note.get("kernel", ""))
    return KindTiming(convention=convention, prespin_s=float(spin), attention_kernel=str(kernel))


def _discovered(data_dir: Path) -> list[Run]:
    """One run per folder holding records (the folder itself and its sub-folders)."""
    folders = [data_dir, *sorted(p for p in data_dir.iterdir() if p.is_dir())]
    runs = []
    for folder in folders:
        if not any(folder.glob("*.jsonl")):
            continue
        timing = {}
        if (folder / "timing.json").is_file():
            notes = json.loads((folder / "timing.json").read_text(encoding="utf-8"))
            timing = {
                kind: _kind_timing(
                    {k: v for k, v in note.items() if k in ("prespin_s", "kernel")}, str(folder)
                )
                for kind, note in notes.items()
            }
        runs.append(Run(name=folder.name, folder=folder, device="", host="", timing=timing))
    return runs


def discovered_hosts(runs: list[Run], kinds_of: dict[str, set[str]], device: str) -> list[Run]:
    """Hosts of runs found without a manifest: the one named after the device (else the first)
    is the reference, a multi-GPU run keeps the reference's CPU, the others get a factor."""
    names = [r.name for r in runs]
    reference = device if device in names else (names[0] if names else "")

    def host(run: Run) -> str:
        if run.name == reference:
            return "reference"
        multi = kinds_of.get(run.name, set()) & set(MULTI_GPU_KINDS)
        return "reference-cpu" if multi else "fitted"

    return [Run(name=r.name, folder=r.folder, device=device, host=host(r), timing=r.timing)
            for r in runs]  # fmt: skip
