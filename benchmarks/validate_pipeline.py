"""Two-stage pipeline steps measured with torch.distributed.pipelining, predicted by the timeline.

Reads the records ``gpuplan/validate/pipeline_bench.py`` wrote (default:
``gpuplan/validate/data/pipeline_h200x2/pipeline.jsonl``), predicts each step with
``sim.timeline.validation.predict_pipeline_step`` and prints the error table and its summary.
Target: every record within 10%.

Run: ``python benchmarks/validate_pipeline.py [FILE] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from gpuplan.cli.tables import render_table
from gpuplan.sim.timeline.validation import pipeline_errors

DEFAULT = Path(__file__).resolve().parents[1] / "gpuplan/validate/data/pipeline_h200x2/pipeline.jsonl"
TARGET_PCT = 10.0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file", nargs="?", default=str(DEFAULT))
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    path = Path(args.file)
    if not path.exists():
        print(f"no measurements at {path}: run gpuplan/validate/pipeline_bench.py on two GPUs first",
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
    }
    if args.json:
        print(json.dumps({"rows": frame.to_dict("records"), "summary": summary}, indent=2))
        return 0
    fmt = {"error_pct": lambda v: f"{v:+.1f}%"}
    cols = ["hidden", "layers", "vocab", "seq", "micro_batch", "schedule", "micro_batches",
            "measured_s", "predicted_s", "error_pct"]  # fmt: skip
    print(f"{path}: two-stage pipeline steps, measured against the timeline\n")
    print(render_table(frame.to_dict("records"), cols, formats=fmt))
    print(f"\nmedian |error| {summary['median_abs_pct_error']:.1f}%, max "
          f"{summary['max_abs_pct_error']:.1f}%; {summary['within_target']} of "
          f"{summary['records']} within {TARGET_PCT:.0f}%")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
