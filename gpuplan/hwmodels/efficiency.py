"""Achievable fractions of datasheet peaks, and fixed overheads: the fitted half of the hardware model.

Datasheet facts (``accelerators.csv``) say what the silicon could do; an ``Efficiency`` says how
much of it real kernels reach and what each launch costs. The two never share a file. Values come
from ``data/efficiency_prior.json`` (round numbers from public measurements, cited there, used
before any calibration) overlaid by ``data/calibration_<device>.json`` when ``gpuplan validate
calibrate`` has fitted one from committed measurements. A device with no calibration of its own
borrows the H200 fit: its datasheet figures times the H200's achievable fractions. A fit of
one's own records (``gpuplan validate calibrate --device KEY --out FILE``) is read by
``efficiency_from_file``, for that device only. ``source`` records which one a prediction used,
so reports can say so.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from gpuplan.errors import GpuplanError, check_key, check_kind, check_positive, unknown_key
from gpuplan.workloads.ops import ATTN_MASK, INDUCTOR_COPY, MEMCPY, UNVECTORIZED

REFERENCE_DEVICE = "h200"  # the device whose fit stands in for unmeasured devices

# Kernel families (``workloads.ops``) measured on an H200 beside the calibrated ones (a
# calibration's table replaces the prior's whole, so these stand apart), shares of HBM
# bandwidth: the unvectorized elementwise kernel and the device-to-device memcpy, medians of the
# transformers MoE profile (``python3 -m gpuplan.validate.fit_hf_moe``, data/h200_stacks/run6);
# an attention kernel's mask reads (Mistral-7B's sliding-window prefill, data/h200_stacks/run7:
# ``sim.estimate.inference.sliding_window_masked``); Inductor's ``repeat_kv`` copy, the median over a
# seeded 70% of the compiled static-cache decodes profiled on the H200 (``python3 -m
# gpuplan.validate.compare_compiled``, data/h200_stacks/run9).
# A serving engine's fused residual add + RMSNorm has its own share (``engine_norm_data``).
MEASURED_FRACTION = {UNVECTORIZED: 0.30, MEMCPY: 0.32, ATTN_MASK: 0.75, INDUCTOR_COPY: 0.75}


@functools.cache
def engine_norm_data() -> dict[str, Any]:
    """``data/engine_norm.json``: the engine's fused add + RMSNorm kernel measured on the H200
    (row latency per element and share of HBM bandwidth; ``gpuplan.validate.engine_norm_fit``).
    Other devices borrow it, as they borrow the H200 fit."""
    return _read_json("engine_norm.json")


@dataclass(frozen=True, slots=True, kw_only=True)
class Efficiency:
    """Fitted efficiency parameters of the kernel models (fractions are of datasheet peaks)."""

    source: str
    # GEMM (hwmodels.gemm)
    gemm_peak_fraction: dict[str, float]  # achievable fraction of dense peak, per dtype
    gemm_k_overhead: float  # prologue/epilogue of one tile, in equivalent k elements
    gemm_small_tile_penalty: float  # extra cost of a 64-wide tile relative to its FLOPs
    gemm_unaligned_fraction: dict[str, float]  # per dtype: rate when a leading dim is unaligned
    gemm_unaligned_hbm_fraction: float  # of HBM bandwidth, a memory-bound unaligned GEMM
    gemm_overhead_s: float  # fixed device time of one library GEMM kernel
    hbm_fraction: float  # streaming fraction of datasheet HBM bandwidth
    gemm_hbm_fraction: float  # fraction reached by a memory-bound GEMM (GEMV-like)
    # attention (hwmodels.attention)
    attn_fwd_fraction: float  # of the bf16 dense peak, flash forward
    attn_bwd_fraction: float  # of the bf16 dense peak, flash backward
    attn_decode_hbm_fraction: float  # of HBM bandwidth, decode attention split along the keys
    attn_decode_nosplit_hbm_fraction: float  # of HBM bandwidth, decode attention not split
    attn_decode_cudnn_hbm_fraction: float  # of HBM bandwidth, cuDNN's decode attention kernel
    attn_tile_q: int  # query rows per attention block
    attn_kv_overhead: float  # per-block fixed work, in equivalent keys (prologue, epilogue)
    attn_bwd_kv_overhead: float  # the same for the backward kernels
    attn_softmax_head_dim: float  # softmax work per score, in equivalent head dimensions
    attn_fixed_s: float  # fixed device time of one attention call beyond one kernel
    # elementwise (hwmodels.elementwise)
    elementwise_hbm_fraction: dict[str, float]  # per op, of HBM bandwidth
    # fixed costs (hwmodels.launch)
    kernel_overhead_s: float  # device-side fixed cost of one kernel inside a stream of kernels
    launch_latency_s: float  # once per timed call: from the start event to the first kernel
    queued_overhead_fraction: float  # share of a kernel's fixed cost left when queued in a stream
    sustained_clock_fraction: float  # clock under a long tensor-core load, of the boost clock
    boost_time_constant_s: float  # how fast the clock falls from boost to sustained
    host_launch_s: float  # CPU time to issue one op in eager PyTorch
    autograd_s: float  # exposed CPU time of starting one backward pass (autograd engine)
    autograd_op_s: float  # CPU time the autograd engine adds to each op of a backward
    timer_headstart_s: float  # CPU head start of a call timed in isolation after an L2 flush
    row_reduction_s_per_elem: dict[str, float]  # per op: one row's reduction latency per element
    reduction_rows_per_sm: float  # rows a multiprocessor reduces at once
    graph_launch_s: float  # gap between kernels replayed from a CUDA graph
    # collectives (hwmodels.collectives)
    collective_latency_s: float  # per algorithm step
    collective_bw_fraction: float  # of the one-direction link bandwidth
    collective_launch_s: float  # fixed cost of one collective call
    collective_ll_bw_fraction: float  # of the link, NCCL's low-latency (LL) protocol
    collective_op_bw_factor: dict[str, float]  # per op, times collective_bw_fraction
    collective_ll_latency_s: float  # per algorithm step, LL protocol
    p2p_launch_s: float  # extra fixed cost of a point-to-point send/recv
    collective_host_s: float  # CPU time to issue one collective (torch.distributed + NCCL)
    provenance: dict[str, Any] = field(default_factory=dict)
    steady_state: bool = False  # kernels in a busy stream: sustained clock (set by ``queued``)
    # Each timed call follows an L2 flush (a measurement convention of the harness stack, set by
    # ``sim.stacks.stack_efficiency``): the flushed L2's write-back and the timer's head start.
    l2_flushed: bool = False
    # The CPU speed of each measured run (data folder) relative to the reference run's host, as
    # a factor on the host costs (``validate.calibrate.HOST_COSTS``): lent machines of one kind
    # differ in their CPUs, and eager CPU-bound times follow them. Fitted with the rest; used
    # only to score each run's records. Predictions use the reference host (factor 1).
    host_factor: dict[str, float] = field(default_factory=dict)
    # Which fused-attention kernels run (hwmodels.attention.ATTENTION_KERNELS): FlashAttention-2,
    # as the validation harness runs SDPA, or cuDNN's, which PyTorch's default SDPA dispatch picks
    # for one-query decode on Hopper (docs/serving_validation.md). cuDNN's decode kernel streams
    # the KV cache at its own fraction of HBM bandwidth (attn_decode_cudnn_hbm_fraction), with no
    # key split to choose.
    attention_kernel: str = "flash2"
    # The kernel of the other attention calls (prefill and training forward/backward): chosen by
    # the stack (``sim.stacks``), like ``attention_kernel`` for one-query decode.
    prefill_attention_kernel: str = "flash2"
    # Rates of the kernels other than FlashAttention-2 (hwmodels.attention.KERNEL_RATE_KEYS):
    # ``<kernel>_fwd`` / ``<kernel>_bwd`` multiply FlashAttention-2's fitted rate, ``<kernel>_decode``
    # is a fraction of HBM bandwidth. Priors from published kernel benchmarks (sources in
    # efficiency_prior.json) until a device's own measurements are fitted.
    attn_kernel_rate: dict[str, float] = field(default_factory=dict)
    # torch._grouped_mm's CUTLASS kernel (bf16 MoE experts): its shares of the dense 16-bit
    # peak and of HBM bandwidth over the groups' aggregate work (hwmodels.gemm.grouped_gemm_time)
    grouped_gemm_fraction: float = 0.78
    grouped_gemm_hbm_fraction: float = 0.85
    # fp32 SIMT GEMMs (hwmodels.gemm): the tiles' operand stream, of HBM bandwidth; one k-step
    # of their main loop at least; the second pass of a split-K call; cuBLAS's GEMV kernel (few
    # rows): its FMAs' share of the fp32 peak and its share of HBM bandwidth; the device time
    # torch._grouped_mm's fp32 fallback adds once per call to its per-group GEMMs (its copy of
    # the group offsets to the host)
    simt_tile_hbm_fraction: float = 0.5
    simt_k_step_s: float = 2e-7
    simt_split_k_s: float = 2e-6
    simt_gemv_fraction: float = 0.1
    simt_gemv_hbm_fraction: float = 0.5
    grouped_fallback_s: float = 2e-6

    def __post_init__(self) -> None:
        """Every fitted number finite and not negative, every table a dict of them, every
        switch True or False: a NaN or an infinity here would price every kernel as NaN."""
        for field_name, kind in _FIELD_KINDS:
            value = getattr(self, field_name)
            if kind == "number":
                _check_amount(field_name, value)
            elif kind == "table":
                check_kind(f"efficiency.{field_name}", value, dict)
                for key, x in value.items():
                    _check_amount(f"{field_name}[{key!r}]", x)
            elif type(value) is not kind:
                check_kind(f"efficiency.{field_name}", value, kind)

    def gemm_fraction(self, dtype: str, *, aligned: bool = True) -> float:
        table = self.gemm_peak_fraction if aligned else self.gemm_unaligned_fraction
        return table.get(dtype, table.get("default", self.gemm_peak_fraction["bf16"]))

    def elementwise_fraction(self, op: str, pass_: str = "fwd") -> float:
        """Of HBM bandwidth, for ``op`` in ``pass_``: its backward's own entry (``op_bwd``)
        where one was fitted, else the op's, else a family measured apart
        (``MEASURED_FRACTION``), else the default."""
        table = self.elementwise_hbm_fraction
        if pass_ == "bwd" and f"{op}_bwd" in table:
            return table[f"{op}_bwd"]
        if op == "add_rmsnorm" and op not in table:
            return engine_norm_data()["add_rmsnorm_hbm_fraction"]
        if op not in table:
            return MEASURED_FRACTION.get(op, table["default"])
        return table[op]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


_FIELD_KINDS = [(f.name, {"float": "number", "int": "number", "dict[str, float]": "table",
                          "bool": bool, "str": str}.get(f.type, dict))
                for f in dataclasses.fields(Efficiency)]  # fmt: skip


def _check_amount(name: str, value: float) -> None:
    if not (type(value) in (float, int) and 0 <= value < math.inf):  # the quick common case
        check_positive(f"efficiency.{name}", value, allow_zero=True)


def queued(eff: Efficiency) -> Efficiency:
    """Kernels queued back to back in one stream: each one's launch and prologue overlap the
    previous one's tail, so only a share of the fixed cost measured on an isolated kernel
    remains (``queued_overhead_fraction``, fitted on steps); and the GPU, kept busy, runs at
    its sustained clock (``hwmodels.power``)."""
    f = eff.queued_overhead_fraction
    return dataclasses.replace(
        eff,
        kernel_overhead_s=eff.kernel_overhead_s * f,
        gemm_overhead_s=eff.gemm_overhead_s * f,
        attn_fixed_s=eff.attn_fixed_s * f,
        steady_state=True,
    )


def _read_json(name: str) -> dict[str, Any] | None:
    path = resources.files("gpuplan.hwmodels") / "data" / name
    if not path.is_file():
        return None
    return json.loads(path.read_text())


def _from_dict(data: dict[str, Any]) -> Efficiency:
    names = {f.name for f in dataclasses.fields(Efficiency)}
    return Efficiency(**{k: v for k, v in data.items() if k in names})


@functools.cache
def prior_efficiency() -> Efficiency:
    """The uncalibrated prior: round numbers from public measurements (sources in the file)."""
    return _from_dict(_read_json("efficiency_prior.json"))


def _with_stack_rates(merged: dict[str, Any], device_key: str) -> dict[str, Any]:
    """``merged`` with the attention kernels' rates and the grouped GEMM's shares fitted on the
    device's stack campaign (written by ``python3 -m gpuplan.validate.fit_stacks
    --package-rates``): SDPA's cuDNN and memory-efficient kernels and torch._grouped_mm, which
    the harness's calibration records do not run."""
    stack_rates = _read_json(f"stack_rates_{device_key}.json")
    if stack_rates is None:
        return merged
    merged = merged | stack_rates.get("parameters", {})
    merged["attn_kernel_rate"] = merged["attn_kernel_rate"] | stack_rates["attn_kernel_rate"]
    return merged


@functools.cache
def calibrated_efficiency(device_key: str) -> Efficiency | None:
    """The fit for ``device_key`` from ``data/calibration_<key>.json``, or None if there is none."""
    fitted = _read_json(f"calibration_{device_key}.json")
    if fitted is None:
        return None
    merged = _with_stack_rates(prior_efficiency().to_dict() | fitted["parameters"], device_key)
    merged["source"] = fitted.get("source", f"calibration_{device_key}.json")
    merged["provenance"] = fitted.get("provenance", {})
    return _from_dict(merged)


def efficiency_for(device_key: str) -> Efficiency:
    """The device's own fit; else the reference device's fit (borrowed); else the prior."""
    check_key("device", device_key)
    own = calibrated_efficiency(device_key)
    if own is not None:
        return own
    borrowed = calibrated_efficiency(REFERENCE_DEVICE)
    if borrowed is not None:
        borrowed = architecture_kernel_rates(borrowed, device_key)
        if same_power_envelope(device_key, REFERENCE_DEVICE):
            return dataclasses.replace(
                borrowed,
                source=f"{borrowed.source} (fit on {REFERENCE_DEVICE}, applied to the "
                f"{device_key} datasheet; not measured on {device_key})",
            )
        # The clock a long tensor-core load settles at is the fitted device's power limit
        # meeting its chip's draw (hwmodels.power); another chip or board limit has its own,
        # unmeasured: it is priced at its datasheet (boost-clock) rates.
        return dataclasses.replace(
            borrowed,
            sustained_clock_fraction=1.0,
            source=f"{borrowed.source} (fit on {REFERENCE_DEVICE}, applied to the "
            f"{device_key} datasheet at its boost clock; not measured on {device_key})",
        )
    return prior_efficiency()


# The share of the dense 16-bit peak that FlashAttention-2 reaches on each GPU architecture, at
# head dimension 128 and 16k tokens (the kernel's plateau), forward and backward. FA2 was written
# for Ampere and uses none of Hopper's TMA or warpgroup MMA, so the same kernel reaches a far
# smaller share of the GH100's peak: a fit on the H200 prices it at Hopper's share. Sources:
# - hopper: Shah et al. 2024, "FlashAttention-3" (arXiv 2407.08608), Fig. 5 (forward, head dim
#   128, non-causal, H100 SXM5 BF16): FA2 370 TFLOP/s at 16k = 0.374 of 989.4e12; Fig. 6
#   (backward, head dim 128): FA2 322 TFLOP/s at 16k = 0.325.
# - ampere: Dao 2023, "FlashAttention-2" (arXiv 2307.08691), abstract and sec. 4.1 (Fig. 4-6,
#   A100 80GB SXM4): "50-73% of the theoretical maximum FLOPs/s", up to 230 TFLOP/s forward =
#   0.73 of 312e12. The backward runs below the forward (its Fig. 6); the range's low end, 0.50,
#   stands for it (a lower bound: the figure's values are not transcribed here).
# Other architectures (Ada, Blackwell, other vendors) have no published FA2 share paired with
# these: a borrowed fit keeps the reference's rates there.
FA2_PEAK_SHARE = {
    "hopper": {"fwd": 370e12 / 989.4e12, "bwd": 322e12 / 989.4e12},
    "ampere": {"fwd": 0.73, "bwd": 0.50},
}
# the measured chips of those sources, by compute capability (hwmodels.architecture): GH100 and
# GA100; Orin (sm_87) and the rest have no published share
FA2_FAMILY = {"sm_90": "hopper", "sm_80": "ampere"}


def architecture_kernel_rates(borrowed: Efficiency, device_key: str) -> Efficiency:
    """A fit borrowed from the reference device, its FlashAttention-2 rates moved to the
    device's architecture: times the ratio of the kernel's published shares of peak on the two
    (``FA2_PEAK_SHARE``). The other attention kernels are rated against FlashAttention-2's
    (``attn_kernel_rate``), so they move with it. Unchanged where either share is unknown."""
    from gpuplan.hwmodels.architecture import ARCH

    mine = FA2_PEAK_SHARE.get(FA2_FAMILY.get(ARCH.get(device_key, ""), ""))
    ref = FA2_PEAK_SHARE.get(FA2_FAMILY.get(ARCH.get(REFERENCE_DEVICE, ""), ""))
    if mine is None or ref is None or mine is ref:
        return borrowed
    return dataclasses.replace(
        borrowed,
        attn_fwd_fraction=min(1.0, borrowed.attn_fwd_fraction * mine["fwd"] / ref["fwd"]),
        attn_bwd_fraction=min(1.0, borrowed.attn_bwd_fraction * mine["bwd"] / ref["bwd"]),
    )


def same_power_envelope(a: str, b: str) -> bool:
    """Whether two catalogue devices share a chip and a board power limit (same dense bf16 peak
    and TDP: the H100 SXM and the H200 are both GH100 at 700 W), so that a sustained clock
    measured on one holds for the other."""
    from gpuplan.hwmodels.accelerators import get_accelerator

    x, y = get_accelerator(a), get_accelerator(b)
    return x.tdp_w == y.tdp_w and x.peak_flops_per_s.get("bf16") == y.peak_flops_per_s.get("bf16")


NOT_FITTED = ("source", "provenance")  # fields a fit file names elsewhere, never as parameters


def efficiency_from_file(path: str | Path, device_key: str) -> Efficiency:
    """A fit written by ``gpuplan validate calibrate --out FILE`` for ``device_key``: the prior
    overlaid by the file's parameters. A fit of another device, or a malformed file, is a
    one-line GpuplanError."""
    where = f"calibration file {str(path)!r}"
    doc = _read_fit(Path(path), where)
    device = doc.get("provenance", {}).get("device") if isinstance(doc, dict) else None
    if not isinstance(doc, dict) or not isinstance(doc.get("parameters"), dict):
        raise GpuplanError(f"{where} has no 'parameters' object: it is not a fit written by "
                           "`gpuplan validate calibrate --out FILE`")  # fmt: skip
    if not isinstance(device, str) or not device:
        raise GpuplanError(f"{where} names no device (provenance.device): it is not a fit "
                           "written by `gpuplan validate calibrate --out FILE`")  # fmt: skip
    if device != device_key:
        raise GpuplanError(
            f"{where} is a fit for device {device!r}, not for {device_key!r}: fit {device_key}'s "
            f"own records (gpuplan validate calibrate --device {device_key}) or drop --calibration"
        )
    prior = prior_efficiency().to_dict()
    for name, value in doc["parameters"].items():
        _check_parameter(where, name, value, prior)
    merged = _with_stack_rates(prior | doc["parameters"], device_key)
    merged["source"] = f"{doc.get('source', 'a calibration fit')} ({Path(path).name})"
    merged["provenance"] = doc.get("provenance", {}) | {"file": str(path)}
    return _from_dict(merged)


def _read_fit(path: Path, where: str) -> Any:
    if not path.is_file():
        raise GpuplanError(f"{where} {'is a folder' if path.is_dir() else 'does not exist'}")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise GpuplanError(f"{where} is not UTF-8 text") from None
    except json.JSONDecodeError as err:
        raise GpuplanError(f"{where} is not valid JSON: {err.msg} (line {err.lineno})") from None


def _check_parameter(where: str, name: str, value: Any, prior: dict[str, Any]) -> None:
    """A fitted parameter: a field of ``Efficiency`` holding numbers, finite and >= 0, and a
    fraction of a peak within (0, 1]."""
    numeric = [k for k, v in prior.items() if k not in NOT_FITTED and _is_numbers(v)]
    if name not in numeric:
        raise GpuplanError(f"{where}: {unknown_key('parameter', name, numeric)}")
    expected_dict = isinstance(prior[name], dict)
    if expected_dict != isinstance(value, dict):
        want = "an object of numbers" if expected_dict else "a number"
        raise GpuplanError(f"{where}: parameter {name!r} is {value!r}: it must be {want}")
    for key, number in value.items() if expected_dict else [("", value)]:
        label = f"{name}.{key}" if key else name
        if not _is_number(number) or not math.isfinite(number) or number < 0:
            raise GpuplanError(f"{where}: {label}={number!r} is invalid: a finite number >= 0")
        if name.endswith("_fraction") and not 0 < number <= 1:
            raise GpuplanError(f"{where}: {label}={number!r} is invalid: a fraction of a peak is "
                               "in (0, 1]")  # fmt: skip


def _is_numbers(value: Any) -> bool:
    if isinstance(value, dict):
        return all(_is_numbers(v) for v in value.values())
    return _is_number(value)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
