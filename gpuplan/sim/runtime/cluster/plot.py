"""A timeline plot of a cluster run: GPUs allocated, idle and down over time, with the failures
and job interruptions marked."""

from __future__ import annotations

from pathlib import Path

from gpuplan.outputs import save_figure
from gpuplan.sim.runtime.cluster.metrics import ClusterResult

DAY_S = 86400.0


def plot_timeline(result: ClusterResult, path: str | Path | None = None, *, ax=None):
    """Stacked allocated / idle / down GPUs against days; failures as ticks. Returns the axes
    (and writes ``path`` when given)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    s = result.samples
    if ax is None:
        _fig, ax = plt.subplots(figsize=(10, 3.5))
    days = s.time_s / DAY_S
    ax.stackplot(days, s.allocated, s.idle, s.down, step="post",
                 labels=("allocated", "idle", "down"),
                 colors=("#4c72b0", "#dddddd", "#c44e52"))  # fmt: skip
    ev = result.events
    cap = result.summary["capacity_gpus"]
    fails = ev[ev.kind == "interruption"].time_s / DAY_S
    ax.plot(fails, [cap * 1.02] * len(fails), "|", color="black", ms=6, label="interruption")
    ax.set_xlabel("days")
    ax.set_ylabel("GPUs")
    ax.set_ylim(0, cap * 1.06)
    ax.set_title(f"{result.name}: utilization {100 * result.summary['utilization']:.1f}%, "
                 f"goodput {100 * result.summary['goodput']:.1f}%")  # fmt: skip
    ax.legend(loc="lower right", fontsize=8, ncols=4)
    if path is not None:
        ax.figure.tight_layout()
        save_figure(path, ax.figure, dpi=120)
    return ax
