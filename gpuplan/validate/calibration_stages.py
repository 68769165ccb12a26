"""The parameters the calibration fits: the stages of ``hwmodels.efficiency.Efficiency`` fields,
each with its bounds and the record kinds that pin it down, and how to read and set them.

A stage's parameters are fitted on the kinds that isolate them (``fit_efficiency``); a path is a
field, or ``field.key`` for an entry of a dict field.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from gpuplan.hwmodels.efficiency import Efficiency

COMPOSITE = ("layer", "train_step", "decode_step", "tp_mlp")
HOST_COSTS = ("host_launch_s", "autograd_s", "autograd_op_s")  # CPU per eager op, backward
HOST_FACTOR_BOUNDS = (0.2, 5.0)
HOST_STAGES = ("composite",)  # the stage that fits the CPU costs
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

