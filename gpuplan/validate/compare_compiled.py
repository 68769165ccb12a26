"""Compiled forwards' kernels, measured against what the model prices, class by class.

``python3 -m gpuplan.validate.compare_compiled [--profile FILE]``

Reads ``compiled_kernel_profile.json`` (``python3 -m gpuplan.validate.stack_campaign --only
cprofile``: every kernel of one ``torch.compile``d forward of a transformers model, default
mode, no CUDA graphs, in a busy stream; ``stack_campaign/cprofile.py``), sorts each case's
kernels into classes by name (``kernel_class``) and prices the same case on the
``torch-compile`` stack in device timing (``predict_breakdown``: the kernels alone, no launch
or host items), its items sorted into the same classes (``item_class``). Prints per case the
measured and priced time of each class, their ratio, and the kernels of the class that differs
most. Classes: ``gemm`` (cuBLAS/cuBLASLt and CUTLASS dense GEMMs, the router and shared experts
included), ``attention`` (SDPA's fused kernels), ``elementwise`` (Inductor's Triton kernels and
ATen's copies, fills and memsets), ``moe`` (the routed experts' grouped GEMMs and the routing's
sorts, scans and gathers), ``other``. Last, the share of HBM bandwidth Inductor's ``repeat_kv``
kernels reach in the static-cache decodes (``fit_repeat_kv_share``: the median over a seeded 70%
of the cases, checked on the rest): ``hwmodels.efficiency.MEASURED_FRACTION["inductor_copy"]``.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

PROFILE = (Path(__file__).resolve().parents[2] / "data" / "h200_stacks" / "run9"
           / "compiled_kernel_profile.json")
CLASSES = ("gemm", "attention", "elementwise", "moe", "other")
# kernel-name fragments per class, tried in this order (lower-case names; first match wins).
# Inductor names a Triton kernel by the ops it fused, the consumer's among them (a kernel that
# writes SDPA's repeated keys is ``triton_poi_fused__scaled_dot_product_cudnn_attention_...``):
# Triton kernels are elementwise whatever their names hold.
_NAME_RULES = (
    ("elementwise", ("triton_",)),
    ("moe", ("grouped", "groupproblemshape", "histogram", "radixsort", "topk", "devicescan",
             "sort_", "expert")),
    ("attention", ("fmha", "flash", "sdpa", "attention", "attn")),
    ("gemm", ("nvjet", "gemm", "cublas", "xmma", "splitkreduce", "cutlass", "matmul")),
    ("elementwise", ("triton", "elementwise", "memcpy", "memset", "copy", "index", "cat",
                     "reduce", "softmax", "fill", "scatter", "gather")),
)
# model op names that are the routed experts' work (``workloads.feed_forward.moe_block``)
_MOE_OPS = ("expert_", "router_softmax", "permute", "unpermute", "expert_grouping")
# priced apart, run inside the attention kernel: its reads of an explicit mask
_IN_ATTENTION = ("attention_mask_read",)


def kernel_class(name: str) -> str:
    """The class of a profiled kernel, by its name (module docstring)."""
    low = name.lower()
    for cls, frags in _NAME_RULES:
        if any(f in low for f in frags):
            return cls
    return "other"


def item_class(item) -> str:
    """The class of a priced breakdown item (``sim.estimate.breakdown.Item``)."""
    if any(m in item.op for m in _MOE_OPS) and not item.op.startswith("shared_"):
        return "moe"
    if item.category == "gemm":
        return "gemm"
    if item.category == "attention" or item.op in _IN_ATTENTION:
        return "attention"
    return "elementwise"


def record_params(profile: dict) -> dict:
    """The profiled case as a device-timed ``torch-compile`` record's params."""
    p = {k: v for k, v in profile["params"].items() if k != "mode"}
    return p | {"stack": "torch-compile", "timing": "device"}


def measured_classes(profile: dict) -> dict[str, float]:
    out: dict[str, float] = defaultdict(float)
    for k in profile["kernels"]:
        out[kernel_class(k["name"])] += k["time_s_per_call"]
    return dict(out)


def priced_classes(profile: dict, device: str = "h200") -> tuple[dict[str, float], list]:
    """(seconds per class, the items) of the case's kernels as the model prices them: the
    breakdown's ``model`` items (a device-timed decode keeps its CPU ``runtime`` items)."""
    from gpuplan.validate.record_prediction import predict_breakdown

    bd = predict_breakdown(profile["kind"], device, record_params(profile))
    items = [i for i in bd.items if i.layer == "model"]
    out: dict[str, float] = defaultdict(float)
    for item in items:
        out[item_class(item)] += item.time_s
    return dict(out), items


def case_label(profile: dict) -> str:
    p = profile["params"]
    what = (f"prefill {p['batch']}x{p['seq']}" if profile["kind"] == "prefill_step"
            else f"decode b{p['batch']} ctx {p['context']} (max {p.get('max_cache_len')})")
    return f"{p['model']} L{p['layers']} {what}"


def compare(profile: dict, *, top: int = 6) -> list[str]:
    """The printout of one case: a line per class, then the top kernels of the class whose
    measured time is furthest above its price."""
    meas = measured_classes(profile)
    priced, items = priced_classes(profile)
    lines = [case_label(profile)]
    lines.append(f"  {'class':12s} {'measured us':>12s} {'priced us':>10s} {'meas/priced':>11s}")
    for cls in CLASSES:
        m, q = meas.get(cls, 0.0), priced.get(cls, 0.0)
        if m or q:
            ratio = f"{m / q:11.2f}" if q else f"{'-':>11s}"
            lines.append(f"  {cls:12s} {m * 1e6:12.1f} {q * 1e6:10.1f} {ratio}")
    tm, tq = sum(meas.values()), sum(priced.values())
    lines.append(f"  {'total':12s} {tm * 1e6:12.1f} {tq * 1e6:10.1f} {tm / tq:11.2f}")
    worst = max(CLASSES, key=lambda c: meas.get(c, 0.0) - priced.get(c, 0.0))
    ks = sorted((k for k in profile["kernels"] if kernel_class(k["name"]) == worst),
                key=lambda k: -k["time_s_per_call"])[:top]
    lines.append(f"  most over its price: {worst}; its kernels (us/call, launches/call):")
    lines += [f"    {k['time_s_per_call'] * 1e6:9.1f} {k['launches_per_call']:6.1f}  "
              f"{k['name'][:90]}" for k in ks]
    its = sorted((i for i in items if item_class(i) == worst), key=lambda i: -i.time_s)[:top]
    lines.append("  its priced items (us):")
    lines += [f"    {i.time_s * 1e6:9.1f}  {i.op}" for i in its]
    return lines


# The Triton kernels that write SDPA's repeated keys and values under a static cache's mask:
# Inductor fuses ``repeat_kv``'s expand and reshape (and the new token's RoPE and cache write)
# into one kernel per K and V, named for SDPA, its consumer
_REPEAT_FRAGMENT = "scaled_dot_product"


def repeat_kv_share(profile: dict, device: str = "h200") -> tuple[float, float, float] | None:
    """(bytes the model gives the case's ``repeat_kv`` copies, the profiled kernels' seconds, the
    share of HBM bandwidth that implies) of a static-cache decode, or None (no repeat: MHA or
    MLA, or a prefill)."""
    from gpuplan.hwmodels.accelerators import get_accelerator

    if profile["kind"] != "model_decode_step":
        return None
    _, items = priced_classes(profile, device)
    nbytes = sum(i.bytes for i in items if i.op == "repeat_kv")
    secs = sum(k["time_s_per_call"] for k in profile["kernels"]
               if k["name"].startswith("triton_") and _REPEAT_FRAGMENT in k["name"])
    if not nbytes or not secs:
        return None
    return nbytes, secs, nbytes / secs / get_accelerator(device).hbm_bytes_per_s


def repeat_kv_fit(profiles: list[dict], *, seed: int = 0) -> tuple[float, list, list] | None:
    """(the median share over a seeded 70% of the decode cases with a K/V repeat, those fit
    cases, the held-out ones), each case (label, ``repeat_kv_share``); None without a case."""
    import random
    import statistics

    cases = [(case_label(p), got) for p in profiles if (got := repeat_kv_share(p))]
    if not cases:
        return None
    order = list(range(len(cases)))
    random.Random(seed).shuffle(order)
    n_fit = max(1, round(0.7 * len(cases)))
    fit, held = [cases[i] for i in order[:n_fit]], [cases[i] for i in order[n_fit:]]
    return statistics.median(got[2] for _, got in fit), fit, held


def fit_repeat_kv_share(profiles: list[dict], *, seed: int = 0) -> list[str]:
    """The printout of ``repeat_kv_fit``: the share, and each held-out case's kernel time at it."""
    got = repeat_kv_fit(profiles, seed=seed)
    if got is None:
        return ["no static-cache decode with a K/V repeat in the profile"]
    share, fit, held = got
    lines = [f"repeat_kv (Inductor) share of HBM bandwidth: {share:.3f}, median of {len(fit)} "
             f"fit cases (seed {seed}): " + ", ".join(f"{g[2]:.3f}" for _, g in fit)]
    for label, (_nbytes, secs, implied) in held:
        pred = secs * implied / share  # the same bytes at the fitted share
        lines.append(f"  held out: {label}: {secs * 1e6:.1f} us measured, {pred * 1e6:.1f} us "
                     f"at {share:.3f} ({100 * (pred / secs - 1):+.1f}%)")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m gpuplan.validate.compare_compiled",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default=str(PROFILE), help="compiled_kernel_profile.json")
    args = ap.parse_args(argv)
    try:
        profiles = json.loads(Path(args.profile).read_text())["profiles"]
    except (OSError, ValueError, KeyError) as err:
        from gpuplan.validate.fit_math_sdpa import profile_error

        return profile_error(args.profile, err, PROFILE.name)
    for prof in profiles:
        print("\n".join(compare(prof)))
        print()
    print("\n".join(fit_repeat_kv_share(profiles)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
