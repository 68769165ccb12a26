"""The HBM shares of SDPA's math-backend kernels, from the committed H200 kernel profile.

``python3 -m gpuplan.validate.fit_math_sdpa [--profile FILE]``

Reads the math-backend profiles of ``data/h200_stacks/run4/kernel_profile.json`` (measured by
``python3 -m gpuplan.validate.stack_campaign --only kprofile``: every kernel of one call, its
launches and time, in a busy stream), matches each measured kernel to the kernel the model
names (``hwmodels.attention.math_attention_kernels``, by ATen kernel name: ``PATTERNS``), and
prints, per class of ``MATH_HBM_FRACTION``, the share of HBM bandwidth each profile implies
(the model's bytes of that class over the measured time of its kernels, at the H200's datasheet
bandwidth) and their median: the constants ``hwmodels/attention.py`` holds. Only profiles where a
class's kernels take at least ``MIN_CLASS_S`` count (shorter ones are launch-bound). The fit
uses the profile alone; the campaign's own math-backend attention records
(``data/h200_stacks``, ``attention_kernel: math``) check it (``fit_stacks``' held-out table and
``docs/validation.md``). Valid for PyTorch 2.11 on an H200 (the profile's stack).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

PROFILE = Path(__file__).resolve().parents[2] / "data" / "h200_stacks" / "run4" / \
    "kernel_profile.json"
MIN_CLASS_S = 50e-6
# ATen kernel names (torch 2.11) of each model label's kernels; the first pattern that matches
# a measured kernel's name wins, a label's kernels are those of every pattern listed for it
PATTERNS: dict[str, tuple[str, ...]] = {
    "cast": ("unrolled_elementwise_kernel<at::native::direct_copy",),
    "strided": ("elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::"
                "direct_copy",),
    "reduce": ("and_kernel_cuda", "sum_functor"),
    "unvectorized": ("where_kernel_impl", "CUDAFunctor_add"),
    "vectorized": ("MulFunctor", "isneginf", "oftMax", "softmax_warp", "bfloat16_copy"),
    "gemv": ("gemvx::kernel",),
}


def classify(name: str) -> str | None:
    """The class of one measured kernel, or None (GEMMs, fills, memsets: not fitted here)."""
    for klass, patterns in PATTERNS.items():
        if any(p in name for p in patterns):
            return klass
    return None


def _op(params: dict, pass_: str):
    from gpuplan.workloads.ops import Attention

    p = params
    return Attention(name="sdpa", batch=p["batch"], heads_q=p["heads_q"], heads_kv=p["heads_kv"],
                     seq_q=p["seq_q"], seq_kv=p["seq_kv"], head_dim=p["head_dim"],
                     v_head_dim=p["head_dim"], causal=p["causal"], pass_=pass_,
                     dtype=p["dtype"])


def model_bytes(params: dict) -> dict[str, float]:
    """The model's bytes per class for one profiled call (fwd, and bwd for ``fwd_bwd``)."""
    from gpuplan.hwmodels.attention import MATH_GEMV_CLASS, math_attention_kernels

    out: dict[str, float] = {}
    passes = ("fwd", "bwd") if params["pass"] == "fwd_bwd" else ("fwd",)
    for pass_ in passes:
        op = _op(params, pass_)
        for _, klass, nbytes, _n in math_attention_kernels(op):
            out[klass] = out.get(klass, 0.0) + nbytes
        # the one-query QK^T GEMV reads every key, in fp32 (4 bytes: the backend upcasts 16-bit
        # inputs, ``hwmodels.attention.math_attention_time``; its price, ``gemm_bytes``, also
        # counts q and the scores: 1 + 1/head_dim + 1/seq_kv times these bytes)
        if pass_ == "fwd" and op.seq_q == 1:
            out[MATH_GEMV_CLASS] = out.get(MATH_GEMV_CLASS, 0.0) + (
                op.batch * op.heads_q * op.seq_kv * op.head_dim * 4)
    return out


def measured_s(profile: dict) -> dict[str, float]:
    out: dict[str, float] = {}
    gemvs = 0
    for k in profile["kernels"]:
        klass = classify(k["name"])
        if klass == "gemv":  # the first GEMV is QK^T, the second PV (priced as a GEMM)
            gemvs += 1
            if gemvs > 1:
                continue
        if klass is not None:
            out[klass] = out.get(klass, 0.0) + k["time_s_per_call"]
    return out


def fit(path: str | Path = PROFILE) -> dict[str, dict]:
    """{class: {"fraction": median, "profiles": [per-profile shares]}}."""
    doc = json.loads(Path(path).read_text())
    math = [prof for prof in doc["profiles"] if prof["backend"] == "math"]
    return median_shares(math, model_bytes, measured_s, min_s=MIN_CLASS_S)


def median_shares(profiles, model_bytes, measured_s, *, min_s: float = 0.0) -> dict[str, dict]:
    """{name: {"fraction": median, "profiles": [per-profile shares]}}: in each profile, the
    model's bytes of a name (``model_bytes(params)``) over its kernels' measured time
    (``measured_s(profile)``, counted where over 0 and at least ``min_s``) at the profile
    device's datasheet HBM bandwidth."""
    from gpuplan.hwmodels.accelerators import get_accelerator

    shares: dict[str, list[float]] = {}
    for prof in profiles:
        acc = get_accelerator(prof["device"])
        nbytes, secs = model_bytes(prof["params"]), measured_s(prof)
        for name, t in secs.items():
            if t > 0 and t >= min_s and nbytes.get(name):
                shares.setdefault(name, []).append(nbytes[name] / (t * acc.hbm_bytes_per_s))
    return {k: {"fraction": statistics.median(v), "profiles": v} for k, v in sorted(shares.items())}


def main(argv: list[str] | None = None) -> int:
    from gpuplan.hwmodels.attention import MATH_HBM_FRACTION

    return shares_cli(argv, module="gpuplan.validate.fit_math_sdpa", doc=__doc__,
                      profile=PROFILE, profile_help="a kernel_profile.json", fit=fit,
                      in_model=MATH_HBM_FRACTION, what="class")


def shares_cli(argv, *, module: str, doc: str, profile: Path, profile_help: str, fit, in_model,
               what: str) -> int:
    """A share fit's command line (this module's and ``fit_hf_moe``'s): ``--profile FILE``, then
    the fit's table; a profile that cannot be read is one line naming it (exit 2)."""
    ap = argparse.ArgumentParser(prog=f"python3 -m {module}", description=doc.splitlines()[0])
    ap.add_argument("--profile", default=str(profile), help=profile_help)
    args = ap.parse_args(argv)
    try:
        fitted = fit(args.profile)
    except (OSError, ValueError) as err:
        return profile_error(args.profile, err, profile.name)
    print(format_shares(fitted, in_model, what))
    return 0


def profile_error(path: str, err: Exception, expected: str) -> int:
    """A ``--profile`` that cannot be read (``err``: an OSError, a ValueError for one that is
    not JSON, a KeyError for JSON without the profile's key), as one line on stderr naming it
    and what to give; exit status 2."""
    if isinstance(err, OSError):
        why = err.strerror
    elif isinstance(err, KeyError):
        why = f"no {err} key: give a {expected}"
    else:
        why = f"not JSON: give a {expected}"
    print(f"error: --profile {path!r}: {why}", file=sys.stderr)
    return 2


def format_shares(fitted: dict[str, dict], in_model: dict[str, float], what: str) -> str:
    """The fit's table: per class, its profiles, their median share and the model's constant."""
    lines = [f"{what:<14} {'profiles':>8}  {'median':>6}  {'in model':>8}  per profile"]
    for name, r in fitted.items():
        per = " ".join(f"{x:.2f}" for x in r["profiles"])
        lines.append(f"{name:<14} {len(r['profiles']):>8}  {r['fraction']:>6.2f}  "
                     f"{in_model.get(name, float('nan')):>8.2f}  {per}")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
