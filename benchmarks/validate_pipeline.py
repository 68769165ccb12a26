"""Pipeline steps measured with torch.distributed.pipelining, predicted by the timeline.

Reads the records ``gpuplan/validate/pipeline_bench.py`` wrote (default:
``data/pipeline_h200x2/pipeline.jsonl``; any stage count), predicts each step
with ``validate.timeline.predict_pipeline`` and prints the error table and its summary.
Target: every record within 10%. Where the records carry the measured bubble
(``stats.bubble_fraction``), the table shows it beside the predicted one and the summary gives
their median absolute difference in percentage points.

Run: ``python benchmarks/validate_pipeline.py [FILE] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from gpuplan.tables import render_table
from gpuplan.validate.timeline import pipeline_errors

DEFAULT = (
    Path(__file__).resolve().parents[1] / "data/pipeline_h200x2/pipeline.jsonl"
)
TARGET_PCT = 10.0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file", nargs="?", default=str(DEFAULT))
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    path = Path(args.file)
    if not path.exists():
        print(f"no measurements at {path}: run gpuplan/validate/pipeline_bench.py on GPUs first",
              file=sys.stderr)  # fmt: skip
        return 2
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    frame = pipeline_errors(records)
    abs_err = frame["error_pct"].abs()
    summary = {
        "records": len(frame),
        "median_abs_pct_error": float(abs_err.median()),
        "max_abs_pct_error": float(abs_err.max()),
        "within_target": int((abs_err <= TARGET_PCT).sum()),
        "target_pct": TARGET_PCT,
        "median_abs_bubble_error_points": _bubble_points(frame),
    }
    if args.json:
        print(json.dumps({"rows": frame.to_dict("records"), "summary": summary}, indent=2))
        return 0
    pct = lambda v: f"{100 * v:.0f}%"  # noqa: E731
    fmt = {"error_pct": lambda v: f"{v:+.1f}%", "measured_bubble": pct, "predicted_bubble": pct}
    cols = ["stages", "hidden", "layers", "vocab", "seq", "micro_batch", "schedule",
            "micro_batches", "measured_s", "predicted_s", "error_pct", "measured_bubble",
            "predicted_bubble"]  # fmt: skip
    print(f"{path}: pipeline steps, measured against the timeline\n")
    print(render_table(frame.to_dict("records"), cols, formats=fmt))
    print(f"\nmedian |error| {summary['median_abs_pct_error']:.1f}%, max "
          f"{summary['max_abs_pct_error']:.1f}%; {summary['within_target']} of "
          f"{summary['records']} within {TARGET_PCT:.0f}%")  # fmt: skip
    if summary["median_abs_bubble_error_points"] is not None:
        print(f"bubble: median |predicted - measured| "
              f"{summary['median_abs_bubble_error_points']:.1f} percentage points")  # fmt: skip
    return 0


def _bubble_points(frame) -> float | None:
    """Median |predicted - measured| bubble fraction in percentage points; None if unmeasured."""
    diff = (frame["predicted_bubble"] - frame["measured_bubble"]).abs().dropna()
    return float(100 * diff.median()) if len(diff) else None


if __name__ == "__main__":
    raise SystemExit(main())
