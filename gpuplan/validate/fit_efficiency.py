"""The calibration's fit: each stage's parameters by robust least squares on the log error of
its kinds' records, the stages swept in order (block coordinate descent), a host factor per run.

Each stage minimises the soft-L1 sum of squared log errors, log(predicted/measured), over its
training records with ``scipy.optimize.least_squares``, parameters in log space within the
bounds of ``calibration_stages``; each record is predicted with its run's Efficiency
(``measurements.for_run``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from scipy.optimize import least_squares

from gpuplan.hwmodels.efficiency import Efficiency, prior_efficiency
from gpuplan.hwmodels.gemm import is_aligned
from gpuplan.validate import runs as runs_mod
from gpuplan.validate.calibration_stages import (
    DTYPES,
    ELEMENTWISE,
    HOST_FACTOR_BOUNDS,
    HOST_STAGES,
    STAGES,
    Param,
    Stage,
    get_value,
    with_values,
)
from gpuplan.validate.measurements import attention_kernel, for_run, run_of
from gpuplan.validate.record_prediction import predict_record
from gpuplan.validate.records import Record
from gpuplan.validate.score import ScoreResult, score_records

MULTI_GPU_KINDS = runs_mod.MULTI_GPU_KINDS
SWEEPS = 2


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
        return any(attention_kernel(run_of(r), r.kind) == "cudnn" for r in records)
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
