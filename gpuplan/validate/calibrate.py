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
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import sys
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from gpuplan.errors import GpuplanError, unknown_key
from gpuplan.hwmodels.efficiency import Efficiency, prior_efficiency
from gpuplan.hwmodels.gemm import is_aligned
from gpuplan.outputs import write_text
from gpuplan.validate import runs as runs_mod
from gpuplan.validate.record_prediction import predict_record
from gpuplan.validate.records import Record, read_records
from gpuplan.validate.score import ScoreResult, score_records

COMPOSITE = ("layer", "train_step", "decode_step", "tp_mlp")
MULTI_GPU_KINDS = runs_mod.MULTI_GPU_KINDS
HOST_COSTS = ("host_launch_s", "autograd_s", "autograd_op_s")  # CPU per eager op, backward
HOST_FACTOR_BOUNDS = (0.2, 5.0)
HOST_STAGES = ("composite",)  # the stage that fits the CPU costs
SWEEPS = 2
DTYPES = ("bf16", "fp16", "fp32", "tf32", "fp8", "int8")
ELEMENTWISE = ("layernorm", "rmsnorm", "gelu", "silu_mul", "softmax", "add", "dropout_add")


@dataclass(frozen=True, slots=True)
class Param:
    path: str  # field, or "field.key" for an entry of a dict field
    low: float
    high: float


@dataclass(frozen=True, slots=True)
class Stage:
    name: str
    kinds: tuple[str, ...]
    params: tuple[Param, ...]


def _fraction(path: str) -> Param:
    return Param(path, 0.02, 1.0)


STAGES = (
    Stage(
        "elementwise",
        ("elementwise",),
        (
            *(_fraction(f"elementwise_hbm_fraction.{op}") for op in ELEMENTWISE),
            *(
                _fraction(f"elementwise_hbm_fraction.{op}_bwd")
                for op in ELEMENTWISE
                if op != "add"  # an add's backward runs no kernel
            ),
            _fraction("elementwise_hbm_fraction.softmax_warp"),  # rows <= 1024: another kernel
            _fraction("elementwise_hbm_fraction.softmax_warp_bwd"),
            Param("kernel_overhead_s", 1e-7, 3e-5),
            Param("launch_latency_s", 1e-8, 2e-5),
            *(
                Param(f"row_reduction_s_per_elem.{op}", 1e-12, 1e-7)
                for op in ("rmsnorm", "layernorm", "softmax", "softmax_warp")
            ),
            Param("reduction_rows_per_sm", 0.25, 32.0),
        ),
    ),
    Stage(
        "gemm",
        ("gemm",),
        (
            *(_fraction(f"gemm_peak_fraction.{d}") for d in DTYPES),
            *(_fraction(f"gemm_unaligned_fraction.{d}") for d in DTYPES),
            Param("gemm_k_overhead", 1.0, 2048.0),
            Param("gemm_small_tile_penalty", 1e-3, 2.0),
            _fraction("gemm_hbm_fraction"),
            _fraction("gemm_unaligned_hbm_fraction"),
            Param("gemm_overhead_s", 1e-7, 3e-5),
            Param("boost_time_constant_s", 2e-4, 5e-3),  # the campaign: settled by 5 ms
        ),
    ),
    Stage(
        "attention",
        ("attention",),
        (
            _fraction("attn_fwd_fraction"),
            _fraction("attn_bwd_fraction"),
            _fraction("attn_decode_hbm_fraction"),
            _fraction("attn_decode_nosplit_hbm_fraction"),
            _fraction("attn_decode_cudnn_hbm_fraction"),
            Param("attn_kv_overhead", 1.0, 4096.0),
            Param("attn_bwd_kv_overhead", 1.0, 4096.0),
            Param("attn_softmax_head_dim", 0.1, 256.0),
            Param("attn_fixed_s", 1e-7, 1e-4),
        ),
    ),
    Stage(
        "collective",
        ("collective",),
        (
            Param("collective_latency_s", 1e-7, 1e-4),
            _fraction("collective_bw_fraction"),
            Param("collective_launch_s", 1e-7, 2e-4),
            _fraction("collective_ll_bw_fraction"),
            *(
                Param(f"collective_op_bw_factor.{op}", 0.5, 1.6)
                for op in ("all_gather", "reduce_scatter", "all_to_all", "send_recv")
            ),
            Param("collective_ll_latency_s", 1e-8, 2e-5),
            Param("p2p_launch_s", 1e-8, 2e-4),
        ),
    ),
    Stage(
        "composite",
        COMPOSITE,
        (
            Param("host_launch_s", 5e-7, 1e-4),
            # the elementwise records are device time (their run's GPU pre-spin hides the CPU),
            # so the start of a backward pass is pinned down by the composite kinds' fwd_bwd
            # at most 150 us: more would stand in for per-op host costs of an eager backward
            Param("autograd_s", 1e-6, 1.5e-4),
            Param("autograd_op_s", 1e-7, 1e-4),
            _fraction("queued_overhead_fraction"),
            Param("sustained_clock_fraction", 0.5, 1.0),  # steady-state kinds pin it down
            # an eager collective's CPU issue (39-73 us without the GPU spin: the records'
            # with_launch) plus, in a multi-process step, the wait for the slower rank
            Param("collective_host_s", 1e-7, 4e-4),
            *(
                _fraction(f"elementwise_hbm_fraction.{op}")
                for op in ("rope", "copy", "fused", "adamw", "cross_entropy", "embedding")
            ),
        ),
    ),
)


def get_value(eff: Efficiency, path: str) -> float:
    field, _, key = path.partition(".")
    value = getattr(eff, field)
    return value.get(key, value.get("default")) if key else value


def with_values(eff: Efficiency, values: dict[str, float]) -> Efficiency:
    """A copy of ``eff`` with the given parameters set (dict fields copied, never mutated)."""
    changes: dict[str, Any] = {}
    for path, value in values.items():
        field, _, key = path.partition(".")
        if key:
            changes.setdefault(field, dict(getattr(eff, field)))[key] = float(value)
        else:
            changes[field] = float(value)
    return dataclasses.replace(eff, **changes)


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


def split(
    records: Sequence[Record], *, seed: int, train_fraction: float
) -> tuple[list[Record], list[Record]]:
    """Seeded split stratified by kind: ``train_fraction`` of each kind's cases to train, the rest
    to test; the records of one case (same kind and parameters, measured in several runs) go
    together."""
    train, test = [], []
    for kind in sorted({r.kind for r in records}):
        # one stream per kind: adding another kind's records leaves this kind's split alone
        rng = np.random.default_rng([seed, zlib.crc32(kind.encode())])
        cases: dict[str, list[Record]] = {}
        for r in records:
            if r.kind == kind:
                cases.setdefault(json.dumps(r.params, sort_keys=True), []).append(r)
        groups = list(cases.values())
        order = rng.permutation(len(groups))
        n_train = int(round(train_fraction * len(groups)))
        train += [r for i in order[:n_train] for r in groups[i]]
        test += [r for i in order[n_train:] for r in groups[i]]
    return train, test


def split_as_calibrated(
    eff, data_dir: str | Path | None, device: str
) -> tuple[list[Record], list[Record], list[Record]]:
    """``device``'s records and the (fit, held-out) split the calibration ``eff`` was fitted on
    (its provenance's seed and train fraction): the records, the fit part, the held-out part."""
    prov = eff.provenance
    records, _ = load_measurements(data_dir, device)
    train, test = split(records, seed=prov["seed"], train_fraction=prov["train_fraction"])
    return records, train, test


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


def _predictor(eff: Efficiency) -> Callable[[Record], dict[str, Any]]:
    memo: dict[tuple[str, str], Efficiency] = {}

    def predict(r: Record) -> dict[str, Any]:
        key = (run_of(r), r.kind)
        if key not in memo:
            memo[key] = for_run(eff, *key)
        return predict_record(r, eff=memo[key])

    return predict


def _predict_time_s(records: Sequence[Record], eff: Efficiency) -> list[float]:
    predict = _predictor(eff)
    return [predict(r)["time_s"] for r in records]


def _log_residuals(records: Sequence[Record], eff: Efficiency) -> np.ndarray:
    predicted = np.asarray(_predict_time_s(records, eff))
    return np.log(predicted / np.asarray([r.measured["time_s"] for r in records]))


def fit_stage(stage: Stage, records: Sequence[Record], eff: Efficiency) -> Efficiency:
    """Least-squares fit of one stage's parameters on its kinds' records (and, in a stage that
    fits CPU costs, the host factor of every run but the reference among them)."""
    mine = [r for r in records if r.kind in stage.kinds]
    params = [p for p in stage.params if _matters(p, mine)]
    if stage.name in HOST_STAGES:
        lo, hi = HOST_FACTOR_BOUNDS
        params += [Param(f"host_factor.{run}", lo, hi) for run in sorted(eff.host_factor)
                   if any(run_of(r) == run for r in mine)]  # fmt: skip
    if not mine or not params:
        return eff
    lo = np.log([p.low for p in params])
    hi = np.log([p.high for p in params])
    x0 = np.clip(np.log([get_value(eff, p.path) for p in params]), lo + 1e-9, hi - 1e-9)

    counts = {k: sum(r.kind == k for r in mine) for k in stage.kinds}
    present = [k for k in stage.kinds if counts[k]]
    # each kind weighs the same in a stage that fits several (not the one with most records)
    weight = np.asarray([np.sqrt(len(mine) / (len(present) * counts[r.kind])) for r in mine])

    def residuals(x: np.ndarray) -> np.ndarray:
        trial = with_values(eff, {p.path: v for p, v in zip(params, np.exp(x), strict=True)})
        return weight * _log_residuals(mine, trial)

    result = least_squares(
        residuals, x0, bounds=(lo, hi), loss="soft_l1", f_scale=0.1, diff_step=1e-3, max_nfev=200
    )
    return with_values(eff, {p.path: v for p, v in zip(params, np.exp(result.x), strict=True)})


def _matters(param: Param, records: Sequence[Record]) -> bool:
    """A per-dtype or per-op entry is fitted only when some record exercises it."""
    field, _, key = param.path.partition(".")
    if field == "attn_decode_cudnn_hbm_fraction":
        return any(_KERNEL.get((run_of(r), r.kind)) == "cudnn" for r in records)
    if field == "gemm_unaligned_fraction":
        return any(
            r.params.get("dtype") == key and not is_aligned(r.params["n"], r.params["k"], key)
            for r in records
        )
    if key.endswith("_bwd"):
        op = key.removesuffix("_bwd").removesuffix("_warp")  # softmax_warp: short-row softmax
        return any(r.params.get("op") == op and r.params.get("pass") == "fwd_bwd" for r in records)
    if key in DTYPES or key in ELEMENTWISE:
        return any(r.params.get("dtype") == key or r.params.get("op") == key for r in records)
    return True


def fit(
    train: Sequence[Record],
    *,
    prior: Efficiency | None = None,
    sweeps: int = SWEEPS,
    progress: Callable[[str], None] = lambda _: None,
    fitted_hosts: Sequence[str] | None = None,
) -> Efficiency:
    """Fit the stages in order, ``sweeps`` times over (block coordinate descent): a later
    stage's parameters (the CPU's cost per eager op, fitted on composite kinds) feed back into
    the earlier stages on the next sweep. ``fitted_hosts``: the runs whose host gets a factor
    (the manifest's ``host: fitted``); by default every single-GPU run but the reference."""
    eff = prior or prior_efficiency()
    if fitted_hosts is None:  # records from no manifest: as ``runs.discovered_hosts`` decides
        reference = reference_run(train)
        # a multi-GPU run's CPU costs are tied to the collective issue cost that only it
        # measures: a host factor there would trade off against that cost, so such a run keeps
        # the reference's
        multi_gpu = {run_of(r) for r in train if r.kind in MULTI_GPU_KINDS}
        fitted_hosts = sorted({run_of(r) for r in train} - {reference, ""} - multi_gpu)
    runs = sorted(set(fitted_hosts) & {run_of(r) for r in train})
    eff = dataclasses.replace(eff, host_factor={run: 1.0 for run in runs})
    for sweep in range(sweeps):
        for stage in STAGES:
            progress(f"{stage.name} (sweep {sweep + 1} of {sweeps})")
            eff = fit_stage(stage, train, eff)
    return eff


def reference_run(records: Sequence[Record]) -> str:
    """The run whose host the others are measured against: the folder named after the device
    (``h200/``), else the first in order."""
    runs = sorted({run_of(r) for r in records} - {""})
    devices = {r.device for r in records}
    return next((run for run in runs if run in devices), runs[0] if runs else "")


def score(records: Sequence[Record], eff: Efficiency) -> ScoreResult:
    return score_records(records, _predictor(eff))


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
