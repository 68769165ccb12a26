"""The leave-one-out section of ``docs/validation.md``: the accuracy that counts, first.

Written by ``gpuplan validate report`` (``validate.report.write_report``) from the published rows
left out of every fit (``published``) and every record set of a device no fit reads, priced as
installed (``devices``). The refits (the calibration fitted on another device, leave one model
family out) take minutes and are printed by ``python3 benchmarks/generalization.py --refit``.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from gpuplan.validate.generalization import devices, published

# record folders of devices no fit reads, as (label, folder, device)
UNSEEN = (
    ("H100 harness", "h100", "h100-sxm"),  # read through data/runs.json: harness_installed
    ("H100 stack campaign", "h100_stacks", "h100-sxm"),
    ("Vidur H100 profiles", "vidur_h100", "h100-sxm"),
    ("Vidur A100 profiles", "vidur_a100", "a100-sxm-80gb"),
)
PAIRED = ("h100_stacks",)  # stack campaigns with host-probed (hostpair) records
HARNESS_RUNS = ("h100",)  # runs data/runs.json lists: priced with their timing conventions
PCT_COLUMNS = ("left_out_median_pct", "left_out_p90_pct", "in_sample_median_pct",
               "median_abs_pct_error", "p90_abs_pct_error", "median_pct_error")  # fmt: skip


def _pct(v) -> str:
    return "-" if pd.isna(v) else f"{v:.1f}%"


def unseen_tables(data_dir: Path) -> list[tuple[str, pd.DataFrame]]:
    """Per record set of a device no fit reads: the error per kind, priced as installed."""
    out = []
    for label, folder, device in UNSEEN:
        if not (data_dir / folder).is_dir():
            continue
        if folder in HARNESS_RUNS:
            frame = devices.harness_installed(data_dir, device)
        else:
            records = devices.records_of([data_dir / folder], device)
            frame = devices.installed(records) if records else None
        if frame is not None and len(frame):
            out.append((f"{label} (`data/{folder}`, {device}), priced as installed",
                        devices.by_kind(frame)))
        paired = devices.at_measured_host(data_dir / folder, device) if folder in PAIRED else None
        if paired is not None and len(paired):
            out.append((f"{label}, the records paired with a host probe, priced at that "
                        "host's measured speed (--host-speed)", devices.by_kind(paired)))
    return out


def section(data_dir: Path, render_table) -> str:
    """The Markdown of the leave-one-out section."""
    fmt = {c: _pct for c in PCT_COLUMNS}
    training = published.training_left_out()
    serving = published.serving_left_out()
    parts = [
        "## Leave one out: accuracy on what no fit has seen",
        "",
        "A user's model, GPU, layout and framework are never among the rows a fit has read, so "
        "these are the figures that count. Published training rows: no value fitted on a "
        "published training row is in force, so every row is priced without its source. "
        "Published serving rows: each source is priced with the serving stacks' parameters "
        "refitted without it (`python3 -m gpuplan.validate.fit_stacks.serving_loso`). Records "
        "of a device no fit has read are priced as a user gets them (the H200's fits moved by "
        "datasheet scaling). `python3 benchmarks/generalization.py --refit` also prints the "
        "calibration fitted on one device and scored on the other, and leave one model family "
        "out of the stack fit (`docs/generalization.md` holds its last run's tables).",
        "",
        "### Published training runs, per source family (absolute % error)",
        "", "```", render_table(published.summary(training, "family"), formats=fmt), "```", "",
        "### Published training runs, per source",
        "", "```", render_table(published.summary(training, "source"), formats=fmt), "```", "",
        "### Published serving rows, per source and metric",
        "", "```",
        render_table(published.summary(serving, "source", left="left_abs_error_pct"),
                     formats=fmt), "```", "",  # fmt: skip
    ]
    for title, frame in unseen_tables(data_dir):
        parts += [f"### Leave one device out: {title}", "", "```",
                  render_table(frame, formats=fmt), "```", ""]
    return "\n".join(parts)
