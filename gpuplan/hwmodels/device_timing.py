"""Device timing: a kernel's own duration in a busy stream, as a profiler's kernel rows add up.

The fixed costs of ``Efficiency`` are fitted on CUDA-event timings of isolated calls; queued in
a stream (``efficiency.queued``) a kernel costs the stream ``kernel_overhead_s x
queued_overhead_fraction`` (fitted on whole steps), at the sustained clock. That cost still
holds the gap between one kernel's end and the next one's start, which a profiler's kernel
duration leaves out. ``data/device_timing.json`` holds that gap and the row-reduction latency
of a kernel in a busy stream, both derived from the H200 stack campaign's profiler records
(``data/h200_stacks/ops.jsonl``: each device record's GPU span per call against its kernels'
durations) by ``gpuplan.validate.device_timing``; other devices borrow them as they borrow the
H200 fit.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from importlib import resources
from typing import Any

from gpuplan.hwmodels.efficiency import Efficiency, queued

DATA_FILE = "device_timing.json"


@functools.cache
def device_timing_data() -> dict[str, Any]:
    path = resources.files("gpuplan.hwmodels") / "data" / DATA_FILE
    return json.loads(path.read_text())


def device_efficiency(eff: Efficiency, data: dict[str, Any] | None = None) -> Efficiency:
    """``eff`` as a profiler sees its kernels: queued (sustained clock, the queued share of the
    fixed cost) less the gap between kernels in the stream, and the row reductions' latency in
    a busy stream where it was measured."""
    data = data or device_timing_data()
    q = queued(eff)
    gap_s = data["stream_gap_s"]
    return dataclasses.replace(
        q,
        kernel_overhead_s=max(0.0, q.kernel_overhead_s - gap_s),
        gemm_overhead_s=max(0.0, q.gemm_overhead_s - gap_s),
        row_reduction_s_per_elem=q.row_reduction_s_per_elem | data["row_reduction_s_per_elem"],
    )
