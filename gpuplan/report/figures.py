"""The report's figures as PNG bytes: horizontal bars, on a log axis where the values span more
than a decade. Drawn on pyplot-free ``Figure`` objects (as ``gpuplan.plots``), saved without
the software tag so that the same inputs give the same bytes."""

from __future__ import annotations

import io
from collections.abc import Sequence

from matplotlib.figure import Figure

DECADE = 10.0


def png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, metadata={"Software": None})
    return buf.getvalue()


def bars(labels: Sequence[str], values: Sequence[float], *, xlabel: str, title: str) -> bytes:
    """One bar per label (top to bottom); log x when max/min of the positive values > 10."""
    fig = Figure(figsize=(7.5, 0.45 * len(labels) + 1.2), layout="constrained")
    ax = fig.add_subplot()
    y = list(range(len(labels)))[::-1]
    ax.barh(y, values, color="#4878a8")
    ax.set_yticks(y, labels)
    pos = [v for v in values if v > 0]
    if pos and max(pos) / min(pos) > DECADE:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    ax.grid(axis="x", alpha=0.3)
    return png(fig)
