"""Fit the row latency of a serving engine's fused residual add + RMSNorm kernel.

``python3 -m gpuplan.validate.engine_norm_fit [RECORDS.jsonl]`` prints the JSON that
``gpuplan/hwmodels/data/engine_norm.json`` holds, from the H200 records that
``gpuplan.validate.harness.engine_norm`` wrote (default ``data/h200_engine_norm/engine_norm.jsonl``).

The kernel reduces each row inside one thread block, so over one wave of rows its time is a fixed
cost plus a latency proportional to the row's length. The fit is the least-squares line
``graph_per_call_s = fixed_s + s_per_elem x hidden`` over the Inductor form (vLLM V1's kernel) at
2 to 64 tokens (one wave: fewer rows than the H200's 132 SMs; 1 token is left out because
Inductor specializes a size-1 dimension and emits a split reduction for it). ``s_per_elem`` is
the row latency the pricing uses (``hwmodels.elementwise.row_per_elem_s``); ``fixed_s`` is
printed beside it for comparison with the model's own per-kernel cost, which it does not replace.
Over many rows the kernel is bandwidth-bound: ``add_rmsnorm_hbm_fraction`` is the median, over
the Inductor records of at least 512 tokens, of the bytes it must move (x and the residual read,
the output and the new residual written) over the time, as a share of the device's catalogue
HBM bandwidth (``efficiency.MEASURED_FRACTION``).
"""

from __future__ import annotations

import json
import sys

import numpy as np

DEFAULT_RECORDS = "data/h200_engine_norm/engine_norm.jsonl"
FORM = "inductor"
MIN_TOKENS, MAX_TOKENS = 2, 64
BANDWIDTH_TOKENS = 512  # and more: many waves of rows, bandwidth-bound


def _bytes(r: dict) -> float:
    """The bytes the kernel must move, as the pricing counts them (``Elementwise.bytes`` of an
    ``add_rmsnorm``: x and the residual read, the output and the new residual written)."""
    from gpuplan.workloads.ops import Elementwise

    return Elementwise(name="add_rmsnorm", op="add_rmsnorm", tokens=r["tokens"],
                       hidden=r["hidden"], pass_="fwd", dtype=r["dtype"]).bytes  # fmt: skip


def fit(rows: list[dict], path: str = DEFAULT_RECORDS) -> dict:
    """The fitted terms (module docstring) of ``rows``, the records read from ``path``."""
    use = [r for r in rows if r["form"] == FORM and MIN_TOKENS <= r["tokens"] <= MAX_TOKENS]
    hidden = np.array([r["hidden"] for r in use], dtype=float)
    time_s = np.array([r["graph_per_call_s"] for r in use])
    slope, fixed = np.polyfit(hidden, time_s, 1)
    resid = time_s - (fixed + slope * hidden)
    from gpuplan.hwmodels.accelerators import get_accelerator
    from gpuplan.validate.harness.records import device_key

    hbm_bytes_per_s = get_accelerator(device_key(use[0]["device"])).hbm_bytes_per_s
    wide = [r for r in rows if r["form"] == FORM and r["tokens"] >= BANDWIDTH_TOKENS]
    shares = [_bytes(r) / r["graph_per_call_s"] / hbm_bytes_per_s for r in wide]
    return {
        "add_rmsnorm_hbm_fraction": float(np.median(shares)),
        "add_rmsnorm_s_per_elem": float(slope),
        "fixed_s": float(fixed),
        "rows": len(use),
        "max_abs_residual_s": float(np.abs(resid).max()),
        "source": f"least squares over {len(use)} {FORM} records, {MIN_TOKENS}-{MAX_TOKENS} "
                  f"tokens, and the median share of {len(wide)} of >= {BANDWIDTH_TOKENS} tokens, of {path} ({use[0]['device']}, torch {use[0]['torch']}) "
                  "by gpuplan.validate.engine_norm_fit",
    }  # fmt: skip


def main(argv: list[str]) -> int:
    path = argv[0] if argv else DEFAULT_RECORDS
    try:
        with open(path, encoding="utf-8") as fh:
            rows = [json.loads(line) for line in fh if line.strip()]
        out = fit(rows, path)
    except OSError as err:
        print(f"error: RECORDS={path!r}: {err.strerror}", file=sys.stderr)
        return 2
    except (ValueError, KeyError, IndexError, TypeError) as err:  # not the harness's records
        print(f"error: RECORDS={path!r}: not the records of harness.engine_norm "
              f"({type(err).__name__}: {err})", file=sys.stderr)  # fmt: skip
        return 2
    print(json.dumps(out, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
