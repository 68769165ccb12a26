"""Production layouts fit as they ran: the memory truth set's table, and exit 1 on a miss.

Every row of ``gpuplan/validate/published/data/memory_truth.csv`` (MLPerf GPT-3 175B, Nemotron-4
340B, DeepSeek-V3, MPT-70B, Llama 3 405B, Korthikanti et al. 2022 Figure 1; sources in
``memory_truth_sources.json``) priced by ``estimate_training`` with its stack's framework
defaults: the layout as filled, the published memory figure where the source prints one,
gpuplan's figure beside it, the peak per GPU and whether it fits. A row that does not fit
without a stated ``gap``, or that is more than 10% off its published figure, is a miss; the
command prints the misses and the gaps and exits 1 when there is a miss. ``docs/memory.md``
holds the table and the memory model's terms.
"""

from __future__ import annotations

import sys

from gpuplan.tables import render_table
from gpuplan.validate.published.memory_truth import gaps, misses, truth_table

GB = 1e9


def _gb(value) -> str:
    return "-" if value is None or value != value else f"{value / GB:.1f}"


def table_rows(frame) -> list[dict]:
    """The printed table: one line per row, memory in GB."""
    return [{"id": r.id, "layout": r.layout, "stack": r.stack,
             "published GB": _gb(r.published_bytes),
             "metric": r.published_metric or "-", "predicted GB": _gb(r.predicted_bytes),
             "peak GB": _gb(r.peak_bytes), "of GB": f"{r.device_bytes / GB:.0f}",
             "fits": "yes" if r.fits else ("no (gap)" if r.gap else "NO")}
            for r in frame.itertuples()]  # fmt: skip


def main() -> int:
    frame = truth_table()
    print(render_table(table_rows(frame)))
    for line in gaps(frame):
        print(f"gap: {line}")
    bad = misses(frame)
    for line in bad:
        print(f"MISS: {line}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
