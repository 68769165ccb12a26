"""Figures over the library's results: a roofline of operators, a breakdown as bars, and
predictions against measurements.

Every function draws on a ``matplotlib.figure.Figure`` it creates itself (or on the ``ax`` it is
given) and returns that figure. None touches ``pyplot``: no global figure state, no
``plt.show()``, so they run the same under the Agg backend, in a notebook or in a test.

The roofline follows Williams, Waterman and Patterson, "Roofline: an insightful visual
performance model for multicore architectures", CACM 52(4), 2009: attainable FLOP/s at
arithmetic intensity ``I`` (FLOP per byte of DRAM traffic) is ``min(peak, I * bandwidth)``.
Two roofs are drawn per dtype: the datasheet one (dashed) and the achievable one (solid), the
datasheet peak times the fitted GEMM fraction and the datasheet HBM bandwidth times the fitted
streaming fraction (``hwmodels.efficiency``). A point is one operator: its FLOPs over its
fewest bytes (``workloads.ops``) against its FLOPs over its priced time (``hwmodels.price``,
fixed per-kernel overhead included). Operators without FLOPs (norms, casts, optimizer steps)
have no place on log axes and are counted in a note instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from gpuplan.errors import GpuplanError, check_choice, check_kind, expects
from gpuplan.hwmodels.price import price
from gpuplan.units import MS, TFLOPS
from gpuplan.workloads.ops import Op, op_class

ROWS_COLUMNS = ("kind", "metric", "measured", "predicted")
BANDS = {0.25: "0.9", 0.10: "0.75"}  # relative error band around y = x: its grey, widest first
LABEL_RADIUS = (0.2, 0.1)  # decades of intensity and of FLOP/s within which labels merge
BREAKDOWN_GROUPS = ("layer", "category", "op", "phase", "bound")


def _axes(ax: Axes | None, figsize: tuple[float, float]) -> tuple[Figure, Axes]:
    """The given axes and their figure, or a new pyplot-free figure with one axes."""
    check_kind("ax", ax, ("Axes", None))
    if ax is not None:
        return ax.figure, ax
    fig = Figure(figsize=figsize, layout="constrained")
    return fig, fig.add_subplot()


# --- roofline -----------------------------------------------------------------------------


@expects(ops=Iterable, acc="Accelerator", eff="Efficiency")
def operator_points(ops: Iterable[Op], acc, eff) -> pd.DataFrame:
    """One row per operator that does FLOPs: name, class, intensity and achieved FLOP/s."""
    rows = []
    for op in ops:
        kt = price(op, acc, eff)
        if op.flops <= 0 or op.bytes <= 0 or kt.total_s <= 0:
            continue
        rows.append(
            {
                "op": op.name,
                "category": op_class(op),
                "flops_per_byte": op.flops / op.bytes,
                "flops_per_s": op.flops / kt.total_s,
                "bound": kt.bound,
            }
        )
    columns = ["op", "category", "flops_per_byte", "flops_per_s", "bound"]
    return pd.DataFrame(rows, columns=columns)


def _roof_dtypes(ops: Sequence[Op], acc) -> list[str]:
    """The dtypes the operators compute in that the device has a peak for; else its ridge dtype."""
    used = {getattr(op, "dtype", None) for op in ops if op.flops > 0}
    dtypes = [d for d in acc.peak_flops_per_s if d in used]
    return dtypes or [acc.ridge_dtype]


def _intensity_range(points: pd.DataFrame, acc) -> np.ndarray:
    """Intensities spanning the points and the ridge, a decade of margin each side."""
    ridge = acc.ridge_flops_per_byte
    lo = min([ridge, *points["flops_per_byte"]]) / 10
    hi = max([ridge, *points["flops_per_byte"]]) * 10
    return np.geomspace(lo, hi, 256)


def _draw_roofs(ax: Axes, acc, eff, dtypes: Sequence[str], intensity: np.ndarray) -> None:
    """Datasheet (dashed) and achievable (solid) roofs, one colour per dtype."""
    for i, dtype in enumerate(dtypes):
        colour = f"C{i}"
        peak = acc.peak(dtype)
        datasheet = np.minimum(peak, intensity * acc.hbm_bytes_per_s)
        achievable = np.minimum(
            peak * eff.gemm_fraction(dtype), intensity * acc.hbm_bytes_per_s * eff.hbm_fraction
        )
        ax.plot(
            intensity,
            datasheet / TFLOPS,
            "--",
            color=colour,
            lw=1,
            gid=f"roof:datasheet:{dtype}",
            label=f"{dtype} datasheet",
        )
        ax.plot(
            intensity,
            achievable / TFLOPS,
            "-",
            color=colour,
            lw=1.5,
            gid=f"roof:achievable:{dtype}",
            label=f"{dtype} achievable",
        )


def _draw_points(ax: Axes, points: pd.DataFrame) -> None:
    """One scatter per operator class, each point labelled by its operator's name."""
    markers = {"gemm": "o", "attention": "D"}
    for category, group in points.groupby("category", sort=False):
        ax.scatter(
            group["flops_per_byte"],
            group["flops_per_s"] / TFLOPS,
            color="black",
            marker=markers.get(category, "^"),
            s=24,
            zorder=3,
            gid="operators",
            label=category,
        )
    for (x, y), names in _label_clusters(points).items():
        label = names[0] if len(names) == 1 else f"{names[0]} +{len(names) - 1}"
        ax.annotate(label, (x, y / TFLOPS), fontsize=7, xytext=(4, -8), textcoords="offset points")


def _label_clusters(points: pd.DataFrame) -> dict[tuple[float, float], list[str]]:
    """Operator names grouped by nearness on the log axes (within ``LABEL_RADIUS`` decades of a
    cluster's first point), so coinciding points (a GEMM and its gradients) share one label."""
    clusters: dict[tuple[float, float], list[str]] = {}
    for row in points.itertuples():
        here = np.log10([row.flops_per_byte, row.flops_per_s])
        near = (a for a in clusters if np.all(np.abs(np.log10(a) - here) <= LABEL_RADIUS))
        anchor = next(near, (row.flops_per_byte, row.flops_per_s))
        clusters.setdefault(anchor, []).append(row.op)
    return clusters


@expects(ops=Iterable, acc="Accelerator", eff="Efficiency", dtypes=(list, tuple, None))
def roofline(
    ops: Iterable[Op], acc, eff, ax: Axes | None = None, *, dtypes: Sequence[str] | None = None
) -> Figure:
    """Operators on the device's roofline: log-log intensity against achieved FLOP/s.

    ``dtypes`` picks the compute roofs (default: the dtypes the operators compute in).
    """
    ops = list(ops)
    fig, ax = _axes(ax, (7.0, 4.5))
    points = operator_points(ops, acc, eff)
    roof_dtypes = list(dtypes) if dtypes is not None else _roof_dtypes(ops, acc)
    for dtype in roof_dtypes:
        acc.peak(dtype)  # an unsupported dtype is a GpuplanError naming the supported ones
    _draw_roofs(ax, acc, eff, roof_dtypes, _intensity_range(points, acc))
    _draw_points(ax, points)
    skipped = len(ops) - len(points)
    if skipped:
        ax.text(
            0.99,
            0.02,
            f"{skipped} operators without FLOPs not shown",
            ha="right",
            fontsize=7,
            transform=ax.transAxes,
        )
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="arithmetic intensity (FLOP/byte)",
        ylabel="achieved TFLOP/s",
        title=f"Roofline on {acc.name}",
    )
    ax.legend(fontsize=7, loc="upper left")
    return fig


# --- breakdown ----------------------------------------------------------------------------


def breakdown_bar(breakdown, by: str = "category", ax: Axes | None = None) -> Figure:
    """Horizontal bars of a ``Breakdown``'s time by ``by``, largest on top, share annotated."""
    check_kind("breakdown", breakdown, "Breakdown")
    check_choice("by", by, BREAKDOWN_GROUPS)
    groups = breakdown.by(by).sort_values("time_s")
    fig, ax = _axes(ax, (6.0, 0.4 * len(groups) + 1.2))
    bars = ax.barh(groups[by].astype(str), groups["time_s"] / MS, color="C0")
    ax.bar_label(bars, labels=[f"{s:.0%}" for s in groups["share"]], fontsize=7, padding=2)
    ax.set(xlabel="time (ms)", title=f"{breakdown.total_s / MS:.3g} ms in all, by {by}")
    ax.margins(x=0.12)
    return fig


# --- predictions against measurements -----------------------------------------------------


def _plottable_rows(rows_df: pd.DataFrame) -> pd.DataFrame:
    """Rows with the needed columns and positive values (log axes); a clear error otherwise."""
    missing = [c for c in ROWS_COLUMNS if c not in rows_df.columns]
    if missing:
        raise GpuplanError(
            f"rows_df lacks columns {', '.join(missing)}: it needs {', '.join(ROWS_COLUMNS)}"
        )
    rows = rows_df[(rows_df["measured"] > 0) & (rows_df["predicted"] > 0)]
    if rows.empty:
        raise GpuplanError(
            f"rows_df has no row with measured > 0 and predicted > 0 "
            f"({len(rows_df)} rows): nothing to plot on log axes"
        )
    return rows


def _draw_bands(ax: Axes, lo: float, hi: float) -> None:
    """y = x and the relative-error bands around it."""
    x = np.geomspace(lo, hi, 64)
    for band, grey in BANDS.items():
        ax.fill_between(
            x,
            x * (1 - band),
            x * (1 + band),
            color=grey,
            lw=0,
            zorder=0,
            gid=f"band:{band:.0%}",
            label=f"±{band:.0%}",
        )
    ax.plot(x, x, "k-", lw=0.8, gid="y=x", label="y = x")


def _draw_measurements(ax: Axes, rows: pd.DataFrame, colours: dict[str, str]) -> None:
    """One metric's rows: y = x, the bands, and a scatter per kind."""
    values = pd.concat([rows["measured"], rows["predicted"]])
    _draw_bands(ax, values.min() / 2, values.max() * 2)
    for kind, part in rows.groupby("kind", sort=False):
        ax.scatter(
            part["measured"],
            part["predicted"],
            color=colours[kind],
            s=20,
            zorder=3,
            gid="measurements",
            label=kind,
        )
    metric = rows["metric"].iloc[0]
    ax.set(
        xscale="log",
        yscale="log",
        xlabel=f"measured {metric}",
        ylabel=f"predicted {metric}",
        title=f"{metric}: predicted against measured",
    )
    ax.set_aspect("equal", adjustable="datalim")
    ax.legend(fontsize=7, loc="upper left")


def predicted_vs_measured(rows_df: pd.DataFrame, ax: Axes | None = None) -> Figure:
    """Log-log predicted against measured with y = x and ±10% / ±25% bands, coloured by kind,
    one panel per metric (their units differ). ``rows_df`` has columns kind, metric, measured,
    predicted (the rows of ``gpuplan validate score``); rows with a value of zero or less are
    left out. An ``ax`` can hold one metric only."""
    check_kind("rows_df", rows_df, "DataFrame")
    check_kind("ax", ax, ("Axes", None))
    rows = _plottable_rows(rows_df)
    metrics = list(rows["metric"].unique())
    if ax is not None and len(metrics) > 1:
        raise GpuplanError(
            f"ax holds one metric but rows_df has {len(metrics)} "
            f"({', '.join(metrics)}): select one, or leave ax out"
        )
    if ax is None:
        fig = Figure(figsize=(5.0 * len(metrics), 5.0), layout="constrained")
        axes = fig.subplots(1, len(metrics), squeeze=False)[0]
    else:
        fig, axes = ax.figure, [ax]
    colours = {kind: f"C{i % 10}" for i, kind in enumerate(rows["kind"].unique())}
    for metric, metric_ax in zip(metrics, axes, strict=True):
        _draw_measurements(metric_ax, rows[rows["metric"] == metric], colours)
    return fig
