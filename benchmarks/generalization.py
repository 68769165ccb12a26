"""Accuracy on cases no fit has seen, in one run: ``python3 benchmarks/generalization.py``.

1. Published training runs, leave one source out, per source family and per source
   (``gpuplan.validate.generalization.published``).
2. Published serving rows, leave one source out, per source and metric, beside in-sample.
3. Leave one device out: every record measured on a device no fit has read (the H100 runs under
   ``data/h100*``, Vidur's A100 and H100 profiles) priced as installed (the H200's fits, moved
   by datasheet scaling); and, with ``--refit``, the harness calibration fitted on the H100's
   records alone and scored on the H200's held-out records (about 2 minutes).
4. With ``--refit``: leave one model family out of the stack fit, on the H200 stack campaign's
   whole-model records (about 5 minutes).
5. Band coverage, leave one source out (``benchmarks/band_coverage.py``'s figures, 40 s).

    python3 benchmarks/generalization.py [--refit] [--json FILE] [--markdown FILE]

Targets (the issue): training <= 8% over all rows and no family above 15%; serving <= 12% per
metric; leave-one-device-out <= 12% per kind; band coverage 80% +- 5%.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

from gpuplan.tables import render_table
from gpuplan.validate.generalization import devices, families, published

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data"
PCT = ("left_out_median_pct", "left_out_p90_pct", "in_sample_median_pct",
       "median_abs_pct_error", "p90_abs_pct_error", "median_pct_error", "coverage_pct")  # fmt: skip
FORMATS = {c: (lambda v: "-" if pd.isna(v) else f"{v:.1f}%") for c in PCT}


def training() -> dict[str, pd.DataFrame]:
    rows = published.training_left_out()
    return {"training by family": published.summary(rows, "family"),
            "training by source": published.summary(rows, "source")}  # fmt: skip


def serving() -> dict[str, pd.DataFrame]:
    rows = published.serving_left_out()
    return {"serving by source": published.summary(rows, "source", left="left_abs_error_pct")}


def unseen_devices() -> dict[str, pd.DataFrame]:
    from gpuplan.validate.generalization.report import unseen_tables

    return {f"leave one device out: {title}": frame
            for title, frame in unseen_tables(DATA)}


def refits() -> dict[str, pd.DataFrame]:
    out = {}
    if (DATA / "h100").is_dir():
        frame = devices.refit_on(DATA, "h100-sxm", "h200")
        out["leave one device out: calibration fitted on the H100, H200 held-out records"] = (
            devices.by_kind(frame))
    frame = families.left_out(DATA / "h200_stacks", progress=lambda s: print(s, file=sys.stderr))
    out["leave one model family out: H200 stack campaign"] = families.summary(frame)
    return out


def bands() -> dict[str, pd.DataFrame]:
    sys.path.insert(0, str(Path(__file__).parent))
    import band_coverage

    from gpuplan.validate.bands import build as band_data

    residuals = band_data.all_residuals()
    out = []
    for set_name in ("published training", "published serving"):
        rows = band_coverage.leave_one_source_out(residuals, set_name)
        if len(rows):
            for source, g in pd.concat([rows, rows.assign(source="all")]).groupby("source"):
                out.append({"set": set_name, "source": source, "rows": len(g),
                            "coverage_pct": 100 * g["inside"].mean()})  # fmt: skip
    return {"band coverage (p10-p90), leave one source out": pd.DataFrame(out)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--refit", action="store_true", help="also the refits of sections 3 and 4")
    ap.add_argument("--no-bands", action="store_true", help="skip the band coverage")
    ap.add_argument("--json", type=Path, help="write every table as JSON records")
    ap.add_argument("--markdown", type=Path, help="write every table as a Markdown page")
    args = ap.parse_args(argv)
    tables = training() | serving() | unseen_devices()
    if args.refit:
        tables |= refits()
    if not args.no_bands:
        tables |= bands()
    text = []
    for title, frame in tables.items():
        text += [f"## {title}", "", "```", render_table(frame, formats=FORMATS), "```", ""]
    print("\n".join(line for line in text if line != "```"))
    if args.markdown:
        args.markdown.write_text("\n".join(text))
    if args.json:
        args.json.write_text(json.dumps({t: f.to_dict("records") for t, f in tables.items()},
                                        indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
