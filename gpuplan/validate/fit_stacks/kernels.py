"""Fit the stack parameters that are unmeasured priors on the stack campaign's records, and report
the held-out error per (stack, kind).

``python3 -m gpuplan.validate.fit_stacks --data DIR --out FILE [--seed N] [--device KEY]``

Parameters (their priors: ``hwmodels/data/efficiency_prior.json``, ``sim/stacks/pytorch.py`` and
``sim/stacks/kernels.py``):

- the fixed cost of one call timed in isolation (``kernels.ISOLATED_CALL_S``): per single-op
  kind, a backward's start, a forced SDPA backend (the isolated records of the ``pytorch`` stack);

- ``attn_kernel_rate`` entries the records exercise: ``cudnn_fwd``, ``cudnn_bwd``,
  ``cudnn_bwd_d256`` (heads wider than 128), ``efficient_fwd``, ``efficient_bwd``,
  ``efficient_decode`` (attention records whose kernel, named or resolved from SDPA's default
  dispatch, is cuDNN's or the memory-efficient one); ``--package-rates PATH`` writes them as
  ``hwmodels.efficiency`` reads them (``gpuplan/hwmodels/data/stack_rates_h200.json``);
- ``hf-transformers``' ``HostModel.moe_block_s`` (its MoE models' prefill and decode records; a
  linear grid over 0-5 ms in 50 us steps), ``HostModel.attention_plan_s`` (its decode records
  whose cached length is new each call, ``predict.kv_length_grows``: 0-60 ms in 0.5 ms steps),
  ``HostModel.module_call_s`` (its whole-model records)
  and ``HostModel.device_overlap`` (its decode records; a linear grid over [0, 1] in steps of
  1/32);
- ``torch-compile``'s ``HostModel.moe_block_s`` (``compiled_moe_block_s``: its MoE models'
  prefill records, a linear grid over 0-5 ms in 50 us steps, fitted first),
  ``HostModel.call_factor`` (its whole-model records),
  ``HostModel.graph_call_s`` (its CUDA-graph decode records at batch 1, where the fixed cost
  is what the step exposes) and ``HostModel.compiled_call_s``
  (its prefill records; linear grids over 0-2 ms in 10 us steps and 0-5 ms in 25 us), in two
  rounds;
- the grouped GEMM's ``grouped_gemm_fraction`` and ``grouped_gemm_hbm_fraction`` (the bf16
  ``grouped_gemm`` records; written with the rates by ``--package-rates``);
- the fp32 SIMT GEMMs' ``simt_tile_hbm_fraction``, ``simt_k_step_s`` and ``simt_split_k_s``
  (more than ``SIMT_GEMV_MAX_ROWS`` rows), ``simt_gemv_fraction`` and ``simt_gemv_hbm_fraction``
  (as many or fewer), on the device-timed fp32 ``gemm`` and ``grouped_gemm`` records, and the
  fallback's ``grouped_fallback_s`` on the device-timed fp32 ``grouped_gemm`` ones: first of
  all, since the isolated calls' fixed costs add to their device time (written with the rates
  by ``--package-rates``); ``isolated_simt_gemm`` (an isolated fp32 ``torch.mm``, apart from
  ``isolated_gemm``), ``isolated_grouped_fallback`` and ``isolated_fallback_group`` (the fixed
  and per-group cost of an isolated fp32 ``torch._grouped_mm``, its fallback) are fitted with
  the other isolated costs.

Split: the records are grouped by case (params without ``timing``, so a case's two timings and a
repeat stay on one side), the cases of each (stack, kind) shuffled with ``--seed`` and 70% taken
for the fit (at least one a stratum), the rest held out. Each parameter in turn (the order above,
``bwd`` after ``fwd``; hf-transformers' four, which share records, in three rounds, the MoE
block's and cuDNN's graph build first; torch-compile's four in two rounds, its MoE block's first) minimizes the median absolute log error of
the fit records it changes (the isolated-call costs, the mean: see ``fit``): a linear grid
where one is named above, else a log grid of factors 1/8 to 8 around the prior, then a finer
grid around the best point (steps of 2^(1/64), about 1.1%). The report gives, per (stack, kind), the held-out median and p90 absolute
percent error with the priors and with the fit. Nothing installed reads FILE;
``--package PATH`` also writes the fitted host factors as the presets read them
(``gpuplan/sim/stacks/data/stack_fit.json``, read by ``sim/stacks/pytorch.py``). The priors are
always ``pytorch.PRIORS`` (not the installed values), so a rerun fits from the same start.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

from gpuplan.errors import GpuplanError
from gpuplan.validate.fit_stacks import cases
from gpuplan.validate.fit_stacks.parameters import (
    BATCH_ONE,
    COARSE_GRID,
    COMPILE_PASSES,
    EFF_KEYS,
    FINE_GRID,
    HOST_FIELD,
    HOST_KINDS,
    HOST_PARAMS,
    HOST_PASSES,
    ISOLATED_KEYS,
    LINEAR_GRIDS,
    MOE_ONLY,
    RATE_KEYS,
    SIMT_KEYS,
)
from gpuplan.validate.record_kinds import MODEL_KINDS


def attention_rate_key(rec, acc) -> str | None:
    """The ``attn_kernel_rate`` entry an attention record's time depends on, or None."""
    from gpuplan.sim.stacks.kernels import sdpa_default

    if rec.kind != "attention":
        return None
    decode = rec.params["seq_q"] == 1
    phase = "decode" if decode else ("train" if rec.params["pass"] == "fwd_bwd" else "prefill")
    kernel = rec.params.get("attention_kernel")
    if kernel is None and rec.params.get("stack", "pytorch") == "pytorch":
        kernel = sdpa_default(acc, phase)
    if decode:
        key = f"{kernel}_decode"
    else:
        from gpuplan.hwmodels.attention import rate_key

        pass_ = "bwd" if rec.params["pass"] == "fwd_bwd" else "fwd"
        key = rate_key(RATE_KEYS, kernel, pass_, rec.params["head_dim"])
    return key if key in RATE_KEYS else None


class Model:
    """Predictions of records under candidate parameter values."""

    def __init__(self, device: str) -> None:
        from gpuplan.hwmodels.accelerators import get_accelerator
        from gpuplan.hwmodels.efficiency import efficiency_for, prior_efficiency

        self.acc = get_accelerator(device)
        self.eff = efficiency_for(self.acc.key)
        # the rates start from their priors, not from a previous fit's installed values
        prior = prior_efficiency()
        self.values = {k: prior.attn_kernel_rate[k] for k in RATE_KEYS}
        self.values |= {k: getattr(prior, k) for k in EFF_KEYS}
        self.values |= {name: _host_value(stack, name) for name, stack in HOST_PARAMS.items()}
        from gpuplan.sim.stacks.kernels import ISOLATED_PRIORS

        self.values |= {f"isolated_{k}": v for k, v in ISOLATED_PRIORS.items()}

    def predict(self, rec, values: dict | None = None) -> dict[str, float]:
        from gpuplan.validate.record_prediction import predict_breakdown, record_stack

        v = self.values | (values or {})
        eff = replace(self.eff, attn_kernel_rate=self.eff.attn_kernel_rate
                      | {k: v[k] for k in RATE_KEYS}, **{k: v[k] for k in EFF_KEYS})
        stack = record_stack(rec.params)
        for name, owner in HOST_PARAMS.items():
            if stack.name == owner:
                field = HOST_FIELD.get(name, name)
                stack = replace(stack, host=replace(stack.host, **{field: v[name]}))
        speed = cases.host_speed(rec)
        if speed is not None:
            stack = replace(stack, host=replace(stack.host, speed_factor=speed))
        isolated = {k.removeprefix("isolated_"): v[k] for k in ISOLATED_KEYS}
        bd = predict_breakdown(rec.kind, rec.device, rec.params, eff=eff, stack=stack,
                               isolated_call_s=isolated)
        out = {"time_s": bd.total_s}
        if bd.peak_bytes is not None and "peak_bytes" in rec.measured:
            out["peak_bytes"] = bd.peak_bytes
        return out

    def touches(self, rec, name: str) -> bool:
        if name in ISOLATED_KEYS:
            from gpuplan.sim.stacks.kernels import ISOLATED_KINDS

            if (rec.kind not in ISOLATED_KINDS or rec.params.get("timing", "isolated") != "isolated"
                    or rec.params.get("stack", "pytorch") == "harness"):
                return False
            what = name.removeprefix("isolated_")
            if what == "backward":
                return rec.params.get("pass") == "fwd_bwd"
            if what == "forced_kernel":
                return rec.kind == "attention" and rec.params.get("attention_kernel") is not None
            if what == "grouped_gemm":  # the CUTLASS call; fp32's per-group fallback is apart
                return rec.kind == what and rec.params.get("dtype") == "bf16"
            if what in ("grouped_fallback", "fallback_group"):
                return rec.kind == "grouped_gemm" and rec.params.get("dtype") != "bf16"
            if what in ("gemm", "simt_gemm"):  # the fp32 calls (SIMT kernels) apart
                return rec.kind == "gemm" and (rec.params.get("dtype") == "fp32") == (
                    what == "simt_gemm")
            return rec.kind == what
        if name in RATE_KEYS:
            return attention_rate_key(rec, self.acc) == name
        if name in EFF_KEYS:
            kinds, dtype = EFF_KEYS[name]
            if rec.kind not in kinds or rec.params.get("dtype") != dtype:
                return False
            return name not in SIMT_KEYS or _simt_fit_record(rec, name)
        if name in MOE_ONLY:
            from gpuplan.validate.record_prediction import record_model

            if rec.kind not in MODEL_KINDS or not record_model(rec.params["model"]).is_moe:
                return False
        if name in BATCH_ONE and rec.params.get("batch") != 1:
            return False
        if name == "attention_plan_s":  # the decodes whose cached length is new each call
            from gpuplan.validate.record_prediction import kv_length_grows, record_model

            if rec.kind != "model_decode_step" or not kv_length_grows(
                    record_model(rec.params["model"]), rec.params):
                return False
        return rec.params.get("stack", "pytorch") == HOST_PARAMS[name] and rec.kind in (
            HOST_KINDS.get(name, MODEL_KINDS))


def _simt_fit_record(rec, name: str) -> bool:
    """A device-timed pytorch-stack fp32 record that ``name`` prices: the GEMV kernel's share
    at ``SIMT_GEMV_MAX_ROWS`` rows or fewer, the tiles' above."""
    from gpuplan.hwmodels.gemm import SIMT_GEMV_MAX_ROWS

    if rec.params.get("stack", "pytorch") != "pytorch" or rec.params.get("timing") != "device":
        return False
    gemv = rec.params["m"] <= SIMT_GEMV_MAX_ROWS
    return {"simt_gemv_fraction": gemv, "simt_gemv_hbm_fraction": gemv,
            "simt_tile_hbm_fraction": not gemv, "simt_k_step_s": not gemv,
            "simt_split_k_s": not gemv}.get(name, True)


def _host_value(stack_name: str, name: str) -> float:
    from gpuplan.sim.stacks.pytorch import PRIORS

    return float(PRIORS[stack_name][HOST_FIELD.get(name, name)])


def _log_error(model: Model, recs: list, values: dict, *, mean: bool = False) -> float:
    errs = [abs(math.log(model.predict(r, values)["time_s"] / r.measured["time_s"])) for r in recs]
    return statistics.fmean(errs) if mean else statistics.median(errs)


def fit(model: Model, records: list) -> dict[str, dict]:
    """Each parameter in turn over the records it changes; {name: {prior, fitted, records}}."""
    values = dict(model.values)
    out = {}
    # the MoE blocks' own cost first, then cuDNN's graph build at a new decode length, so
    # that module_call_s is pulled up by neither
    shared = sorted((n for n, owner in HOST_PARAMS.items() if owner == "hf-transformers"),
                    key=lambda n: (n not in MOE_ONLY, n != "attention_plan_s"))
    compiled = [n for n, owner in HOST_PARAMS.items() if owner == "torch-compile"]  # MoE first
    others = [n for n in EFF_KEYS if n not in SIMT_KEYS]
    for name in (*SIMT_KEYS, *ISOLATED_KEYS, *RATE_KEYS, *others, *shared * HOST_PASSES,
                 *compiled * COMPILE_PASSES):
        recs = [r for r in records if model.touches(r, name)]
        prior = model.values[name]
        if not recs:
            out[name] = {"prior": prior, "fitted": None, "records": 0}
            continue
        best = values[name]
        if name in LINEAR_GRIDS:
            best = min((_log_error(model, recs, values | {name: v}), v) for v in LINEAR_GRIDS[name])[1]
        # an isolated call's fixed cost is shared by calls from microseconds to milliseconds
        # long: the median of the fit records would follow the long ones, which it barely
        # changes, so these minimize the mean absolute log error
        mean = name in ISOLATED_KEYS
        for grid in () if name in LINEAR_GRIDS else (COARSE_GRID, FINE_GRID):
            centre = best
            scored = [(_log_error(model, recs, values | {name: centre * f}, mean=mean),
                       centre * f) for f in grid]
            best = min(scored)[1]
        values[name] = best
        out[name] = {"prior": prior, "fitted": best, "records": len(recs)}
    return out


def held_out_table(model: Model, held: list, fitted: dict) -> list[dict]:
    """Per (stack, kind): held-out median and p90 absolute percent error, prior and fitted."""
    values = {k: v["fitted"] for k, v in fitted.items() if v["fitted"] is not None}
    groups: dict[tuple, list] = defaultdict(list)
    for rec in held:
        groups[cases.stratum(rec)].append(rec)
    # a stratum of several dtypes (the GEMMs) also gets a row per dtype, as ``kind[dtype]``
    for (stack, kind), recs in list(groups.items()):
        dtypes = {r.params.get("dtype") for r in recs}
        for dtype in sorted(dtypes) if len(dtypes) > 1 else ():
            groups[(stack, f"{kind}[{dtype}]")] = [r for r in recs
                                                   if r.params.get("dtype") == dtype]
    rows = []
    for (stack, kind), recs in sorted(groups.items()):
        row = {"stack": stack, "kind": kind, "records": len(recs)}
        for label, vals in (("prior", {}), ("fit", values)):
            errs = [100 * abs(model.predict(r, vals)["time_s"] / r.measured["time_s"] - 1)
                    for r in recs]
            row[f"{label}_median_pct"] = statistics.median(errs)
            row[f"{label}_p90_pct"] = _p90(errs)
        mem = [r for r in recs if "peak_bytes" in r.measured]
        if mem:
            errs = [100 * abs(model.predict(r, values).get("peak_bytes", 0)
                              / r.measured["peak_bytes"] - 1) for r in mem]
            row["fit_peak_median_pct"] = statistics.median(errs)
        rows.append(row)
    return rows


def _p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]


def run(data_dir, out_file, *, seed: int = 0, device: str = "h200") -> dict:
    records = cases.load(data_dir, device)
    model = Model(device)
    fit_recs, held = cases.split(records, seed)
    fitted = fit(model, fit_recs)
    doc = {"data": str(data_dir), "device": device, "seed": seed, "fit_share": cases.FIT_SHARE,
           "records": len(records), "fit_records": len(fit_recs), "held_out_records": len(held),
           "parameters": fitted, "held_out": held_out_table(model, held, fitted)}
    Path(out_file).write_text(json.dumps(doc, indent=1) + "\n")
    return doc


def _fitted(doc: dict, keys) -> dict[str, float]:
    """{key: fitted value} of the ``keys`` the fit has a value for."""
    return {k: doc["parameters"][k]["fitted"] for k in keys
            if doc["parameters"].get(k, {}).get("fitted") is not None}


def _write_fit(doc: dict, path: str | Path, sections: dict) -> None:
    """``sections`` with the fit's provenance as ``source``, to ``path`` (folders made)."""
    out = {"source": f"python3 -m gpuplan.validate.fit_stacks --data {doc['data']} (seed "
                     f"{doc['seed']}, fit share {doc['fit_share']}, {doc['fit_records']} fit "
                     f"records of {doc['records']}, device {doc['device']})", **sections}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")


def write_package(doc: dict, path: str | Path) -> None:
    """The fitted host factors per stack, as ``sim/stacks/pytorch.py`` reads them, and the
    isolated calls' fixed costs, as ``sim/stacks/kernels.py`` does."""
    stacks: dict[str, dict] = {}
    for name, owner in HOST_PARAMS.items():
        fitted = doc["parameters"][name]["fitted"]
        if fitted is not None:
            stacks.setdefault(owner, {})[HOST_FIELD.get(name, name)] = fitted
    isolated = {k.removeprefix("isolated_"): v for k, v in _fitted(doc, ISOLATED_KEYS).items()}
    _write_fit(doc, path, {"stacks": stacks, "isolated": isolated})


def write_rates(doc: dict, path: str | Path) -> None:
    """The fitted attention-kernel rates and grouped-GEMM shares, as ``hwmodels.efficiency``
    reads them (``gpuplan/hwmodels/data/stack_rates_<device>.json``)."""
    _write_fit(doc, path, {"attn_kernel_rate": _fitted(doc, RATE_KEYS),
                           "parameters": _fitted(doc, EFF_KEYS)})


def format_table(doc: dict) -> str:
    lines = [f"{'stack':<16} {'kind':<18} {'n':>4}  prior med/p90 %   fit med/p90 %   peak med %"]
    for r in doc["held_out"]:
        peak = f"{r['fit_peak_median_pct']:>9.1f}" if "fit_peak_median_pct" in r else f"{'-':>9}"
        lines.append(f"{r['stack']:<16} {r['kind']:<18} {r['records']:>4}  "
                     f"{r['prior_median_pct']:>6.1f} {r['prior_p90_pct']:>7.1f}   "
                     f"{r['fit_median_pct']:>6.1f} {r['fit_p90_pct']:>7.1f}   {peak}")
    for name, p in doc["parameters"].items():
        fitted = "not measured" if p["fitted"] is None else f"{p['fitted']:.4g}"
        lines.append(f"{name}: prior {p['prior']:.4g} -> {fitted} ({p['records']} fit records)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m gpuplan.validate.fit_stacks",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, help="folder of stack-campaign records")
    ap.add_argument("--out", required=True, help="JSON file for the fit and the held-out table")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="h200", help="catalogue key of the records' device")
    ap.add_argument("--package", help="also write the fitted host factors as the presets read "
                    "them (gpuplan/sim/stacks/data/stack_fit.json)")
    ap.add_argument("--package-rates", help="also write the fitted attention-kernel rates as "
                    "hwmodels reads them (gpuplan/hwmodels/data/stack_rates_h200.json)")
    ap.add_argument("--host-probes", action="store_true",
                    help="price each whole-model record at its own host probe (HOST_PROBE_S)")
    args = ap.parse_args(argv)
    cases.USE_HOST_PROBES = args.host_probes
    try:
        doc = run(args.data, args.out, seed=args.seed, device=args.device)
    except GpuplanError as exc:
        print(f"fit_stacks: error: {exc}")
        return 2
    if args.package:
        write_package(doc, args.package)
    if args.package_rates:
        write_rates(doc, args.package_rates)
    print(format_table(doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
