"""Clocks under the power limit: boost while cool, a lower sustained clock under long load.

An H100/H200 runs tensor-core work at its boost clock until its power draw reaches the board
limit (700 W on the SXM part), then GPU Boost lowers the clock (NVIDIA, "GPU Boost" in the
Hopper architecture whitepaper; "nvidia-smi -q -d PERFORMANCE" lists the power-cap throttle
reason). The campaign sees it: bf16 GEMMs of a millisecond or less reach 780-830 TFLOP/s, those
of 5-28 ms settle at 690-725; fp8 from 1,400-1,500 down to about 1,300.

Model: the clock falls exponentially with time constant ``boost_time_constant_s`` from boost to
``sustained_clock_fraction`` of it. A kernel timed alone after idle runs at the mean over its
duration; kernels in a busy stream (a training step, a layer timed back to back) run at the
sustained clock. The fitted achievable fractions of peak are at boost.
"""

from __future__ import annotations

import math

from gpuplan.hwmodels.efficiency import Efficiency

SIMT_DTYPES = ("fp32",)  # CUDA-core arithmetic draws far less power than the tensor cores


def clock_factor(busy_s: float, eff: Efficiency, dtype: str) -> float:
    """Mean clock over ``busy_s`` of tensor-core work, as a fraction of the boost clock."""
    if dtype in SIMT_DTYPES or busy_s <= 0.0:
        return 1.0
    r = eff.sustained_clock_fraction
    if eff.steady_state or eff.boost_time_constant_s <= 0.0:
        return r
    tau = eff.boost_time_constant_s
    return r + (1.0 - r) * tau / busy_s * (1.0 - math.exp(-busy_s / tau))


def throttled(compute_s: float, eff: Efficiency, dtype: str) -> float:
    """Compute time at boost clock -> time at the clock the power limit allows."""
    return compute_s / clock_factor(compute_s, eff, dtype)


def power_capped(eff: Efficiency, tdp_w: float | None, limit_w: float | None) -> Efficiency:
    """``eff`` on a board held to ``limit_w`` below its rated ``tdp_w`` (``nvidia-smi -pl``, or
    a part sold at a lower limit). Tensor-core power is dynamic power, P = a C V^2 f (Weste and
    Harris, "CMOS VLSI Design", 4th ed., sec. 5.1), and along the DVFS curve the voltage falls
    with the clock, so P grows about as f^3: the sustained clock scales by (limit/tdp)^(1/3).
    Static power, which a lower clock does not save, is left out, so the slowdown is a lower
    bound."""
    import dataclasses

    from gpuplan.errors import GpuplanError

    if limit_w is None or tdp_w is None or limit_w >= tdp_w:
        return eff
    if limit_w <= 0:
        raise GpuplanError(f"power_limit_w={limit_w!r} is invalid: a positive number of watts")
    factor = (limit_w / tdp_w) ** (1.0 / 3.0)
    return dataclasses.replace(eff, sustained_clock_fraction=eff.sustained_clock_fraction * factor)
