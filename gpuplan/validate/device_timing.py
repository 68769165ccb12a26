"""Derive the device-timing constants (``hwmodels/data/device_timing.json``) from profiler records.

``python3 -m gpuplan.validate.device_timing [RECORDS.jsonl]`` prints the JSON the file holds,
from the H200 stack campaign's device-timing records (default ``data/h200_stacks/ops.jsonl``):

- ``stream_gap_s``: the median, over single-kernel calls, of the GPU span per call (first
  kernel's start to last kernel's end, over back-to-back calls) less the kernel's duration:
  the gap a kernel leaves before the next one in a busy stream.
- ``row_reduction_s_per_elem``: per row-reduction op, the median over its forward calls on 16
  rows (one wave of blocks) of (duration - the device fixed cost) / row length, the fixed cost
  being the queued kernel overhead of the device's fit less the gap.

Nothing here reads other devices' records: the imported A100/H100 profiles only score the result.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Iterable, Mapping
from typing import Any

from gpuplan.errors import GpuplanError
from gpuplan.hwmodels.efficiency import Efficiency, efficiency_for, queued

DEFAULT_RECORDS = "data/h200_stacks/ops.jsonl"
ROW_OPS = ("rmsnorm", "layernorm", "softmax")
ONE_WAVE_TOKENS = 16


def derive(records: Iterable[Mapping[str, Any]], eff: Efficiency) -> dict[str, Any]:
    """The device-timing constants from record dicts (``stats`` as the campaign writes them)."""
    device = [r for r in records if r["params"].get("timing") == "device"]
    gaps = [r["stats"]["gpu_span_per_call_s"] - r["stats"]["median_s"] for r in device
            if r["stats"].get("kernels_per_call") == 1.0 and "gpu_span_per_call_s" in r["stats"]]
    if not gaps:
        raise GpuplanError("records: no device-timed single-kernel record with stats."
                           "gpu_span_per_call_s: give the stack campaign's ops.jsonl")
    gap_s = statistics.median(gaps)
    fixed_s = queued(eff).kernel_overhead_s - gap_s
    rows: dict[str, float] = {}
    for op in ROW_OPS:
        per_elem = [(r["measured"]["time_s"] - fixed_s) / r["params"]["hidden"] for r in device
                    if r["kind"] == "elementwise" and r["params"]["op"] == op
                    and r["params"]["pass"] == "fwd" and r["params"]["tokens"] == ONE_WAVE_TOKENS]
        if per_elem:
            rows[op] = statistics.median(per_elem)
    return {"stream_gap_s": gap_s, "row_reduction_s_per_elem": rows,
            "n_gap_records": len(gaps)}  # fmt: skip


def main(argv: list[str]) -> int:
    path = argv[0] if argv else DEFAULT_RECORDS
    try:
        with open(path, encoding="utf-8") as fh:
            try:
                records = [json.loads(line) for line in fh if line.strip()]
            except ValueError:  # not JSON, or not UTF-8 text
                raise GpuplanError(f"RECORDS={path!r}: not JSON Lines: give the stack "
                                   "campaign's ops.jsonl") from None
        if not records:
            raise GpuplanError(f"RECORDS={path!r}: no records")
        device = records[0]["device"]
        out = {"source": f"derived by gpuplan.validate.device_timing from {path} ({device})"}
        out |= derive(records, efficiency_for(device))
    except OSError as err:
        print(f"error: RECORDS={path!r}: {err.strerror}", file=sys.stderr)
        return 2
    except GpuplanError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(json.dumps(out, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
