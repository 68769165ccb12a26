"""Figures: the right number of points, roofs and bars, physics respected, nothing shown."""

import io

import matplotlib
import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

from gpuplan.errors import GpuplanError
from gpuplan.hwmodels.accelerators import get_accelerator
from gpuplan.hwmodels.efficiency import efficiency_for
from gpuplan.plots import (
    breakdown_bar,
    operator_points,
    predicted_vs_measured,
    roofline,
)
from gpuplan.sim.estimate.breakdown import Breakdown, Item
from gpuplan.units import MS, TFLOPS
from gpuplan.workloads.operators import layer_forward
from gpuplan.workloads.ops import Gemm
from gpuplan.workloads.presets import get_model

H200 = get_accelerator("h200")
EFF = efficiency_for("h200")


def llama_layer(**kw):
    defaults = {"batch": 1, "seq": 2048}
    return layer_forward(get_model("llama3-8b"), **(defaults | kw))


def collections_with(fig: Figure, gid: str):
    return [c for ax in fig.axes for c in ax.collections if c.get_gid() == gid]


def n_points(fig: Figure, gid: str) -> int:
    return sum(len(c.get_offsets()) for c in collections_with(fig, gid))


def lines_starting(fig: Figure, prefix: str):
    return [ln for ax in fig.axes for ln in ax.lines if (ln.get_gid() or "").startswith(prefix)]


# --- roofline -----------------------------------------------------------------------------


def test_roofline_has_one_point_per_operator_that_does_flops():
    ops = llama_layer()
    fig = roofline(ops, H200, EFF)
    with_flops = [op for op in ops if op.flops > 0]
    assert len(with_flops) == 5  # qkv, attention, o, gate_up, down
    assert n_points(fig, "operators") == len(with_flops)


def test_roofline_counts_the_operators_it_cannot_place_on_log_axes():
    ops = llama_layer()
    fig = roofline(ops, H200, EFF)
    notes = [t.get_text() for t in fig.axes[0].texts if "not shown" in t.get_text()]
    assert notes == [f"{sum(op.flops == 0 for op in ops)} operators without FLOPs not shown"]


def test_roofline_draws_a_datasheet_and_an_achievable_roof_per_dtype():
    fig = roofline(llama_layer(), H200, EFF, dtypes=("bf16", "fp8"))
    assert len(lines_starting(fig, "roof:datasheet:")) == 2
    assert len(lines_starting(fig, "roof:achievable:")) == 2
    assert [ln.get_linestyle() for ln in lines_starting(fig, "roof:datasheet:")] == ["--", "--"]


def test_default_roofs_are_the_dtypes_the_operators_compute_in():
    fig = roofline(llama_layer(dtype="fp16"), H200, EFF)
    assert [ln.get_gid() for ln in lines_starting(fig, "roof:")] == [
        "roof:datasheet:fp16",
        "roof:achievable:fp16",
    ]


def test_achievable_roof_lies_under_the_datasheet_roof():
    fig = roofline(llama_layer(), H200, EFF)
    (datasheet,) = lines_starting(fig, "roof:datasheet:bf16")
    (achievable,) = lines_starting(fig, "roof:achievable:bf16")
    assert np.all(achievable.get_ydata() < datasheet.get_ydata())
    assert datasheet.get_ydata().max() == pytest.approx(H200.peak("bf16") / TFLOPS)


@pytest.mark.parametrize(
    "kw", [{"batch": 1, "seq": 4096}, {"batch": 16, "seq": 1, "context": 8192}]
)
def test_no_operator_beats_the_datasheet_roofline(kw):
    points = operator_points(llama_layer(**kw), H200, EFF)
    roof = np.minimum(H200.peak("bf16"), points["flops_per_byte"] * H200.hbm_bytes_per_s)
    assert len(points) == 5
    assert np.all(points["flops_per_s"] <= roof)


def test_decode_gemms_sit_below_the_ridge_and_prefill_gemms_above_it():
    ridge = H200.ridge_flops_per_byte
    decode = operator_points(llama_layer(batch=8, seq=1, context=4096), H200, EFF)
    prefill = operator_points(llama_layer(batch=1, seq=4096), H200, EFF)
    assert np.all(decode.query("category == 'gemm'")["flops_per_byte"] < ridge)
    assert np.all(prefill.query("category == 'gemm'")["flops_per_byte"] > ridge)


def test_coinciding_points_share_one_label():
    ops = [Gemm(name=n, m=4096, n=4096, k=4096, dtype="bf16") for n in ("a", "b")]
    ops.append(Gemm(name="gemv", m=1, n=4096, k=4096, dtype="bf16"))
    fig = roofline(ops, H200, EFF)
    labels = sorted(t.get_text() for t in fig.axes[0].texts)
    assert labels == ["a +1", "gemv"]


def test_a_roof_the_device_lacks_is_an_error_naming_what_it_has():
    with pytest.raises(GpuplanError, match="fp8.*supports"):
        roofline(llama_layer(), get_accelerator("a100-sxm-80gb"), EFF, dtypes=("fp8",))


def test_roofline_draws_on_the_axes_it_is_given():
    fig = Figure()
    left, right = fig.subplots(1, 2)
    assert roofline(llama_layer(), H200, EFF, ax=right) is fig
    assert n_points(fig, "operators") == 5
    assert not left.collections


# --- breakdown bars -----------------------------------------------------------------------


def small_breakdown() -> Breakdown:
    def item(category, op, time_s):
        return Item(layer="model", category=category, op=op, phase="fwd", time_s=time_s)

    return Breakdown(
        items=(
            item("gemm", "qkv", 3e-3),
            item("gemm", "o", 1e-3),
            item("attention", "attn", 2e-3),
            item("elementwise", "norm", 0.5e-3),
        )
    )


def test_breakdown_bar_has_one_bar_per_group_summing_to_the_total():
    bd = small_breakdown()
    fig = breakdown_bar(bd)
    bars = fig.axes[0].patches
    assert len(bars) == 3
    assert sum(b.get_width() for b in bars) == pytest.approx(bd.total_s / MS)
    assert bars[-1].get_width() == pytest.approx(4.0)  # gemm, the largest, on top


def test_breakdown_bar_groups_by_any_item_field():
    assert len(breakdown_bar(small_breakdown(), by="op").axes[0].patches) == 4


def test_breakdown_bar_rejects_an_unknown_grouping():
    with pytest.raises(GpuplanError, match="by='kernel'"):
        breakdown_bar(small_breakdown(), by="kernel")


# --- predicted against measured -----------------------------------------------------------


def score_rows() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "kind": ["gemm", "gemm", "attention", "layer", "layer"],
            "metric": ["time_s", "time_s", "time_s", "time_s", "peak_bytes"],
            "measured": [1e-4, 2e-3, 1e-3, 1e-2, 7e8],
            "predicted": [1.1e-4, 1.8e-3, 1.3e-3, 9e-3, 6e8],
        }
    )


def test_predicted_vs_measured_has_a_panel_per_metric_and_a_point_per_row():
    fig = predicted_vs_measured(score_rows())
    assert [ax.get_xlabel() for ax in fig.axes] == ["measured time_s", "measured peak_bytes"]
    assert n_points(fig, "measurements") == 5
    assert len(collections_with(fig, "measurements")) == 4  # (gemm, attention, layer) + layer


def test_predicted_vs_measured_draws_y_equals_x_and_both_bands():
    fig = predicted_vs_measured(score_rows().query("metric == 'time_s'"))
    ax = fig.axes[0]
    (diagonal,) = [ln for ln in ax.lines if ln.get_gid() == "y=x"]
    assert np.allclose(diagonal.get_xdata(), diagonal.get_ydata())
    assert {c.get_gid() for c in ax.collections} >= {"band:10%", "band:25%"}
    assert ax.get_xscale() == ax.get_yscale() == "log"


def test_rows_without_a_positive_value_are_left_out():
    rows = score_rows()
    rows.loc[0, "predicted"] = 0.0
    assert n_points(predicted_vs_measured(rows), "measurements") == 4


def test_predicted_vs_measured_names_missing_columns():
    with pytest.raises(GpuplanError, match="lacks columns predicted"):
        predicted_vs_measured(score_rows().drop(columns="predicted"))


def test_nothing_to_plot_is_an_error():
    rows = score_rows().assign(measured=0.0)
    with pytest.raises(GpuplanError, match="nothing to plot"):
        predicted_vs_measured(rows)


def test_one_axes_cannot_hold_two_metrics():
    with pytest.raises(GpuplanError, match="time_s, peak_bytes"):
        predicted_vs_measured(score_rows(), ax=Figure().add_subplot())


# --- no global state ----------------------------------------------------------------------


def test_figures_are_returned_never_shown_or_left_open_in_pyplot():
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.close("all")
    figs = [
        roofline(llama_layer(), H200, EFF),
        breakdown_bar(small_breakdown()),
        predicted_vs_measured(score_rows()),
    ]
    assert all(isinstance(f, Figure) for f in figs)
    assert plt.get_fignums() == []


def test_every_figure_renders_to_png_without_a_display():
    figs = [
        roofline(llama_layer(), H200, EFF),
        breakdown_bar(small_breakdown()),
        predicted_vs_measured(score_rows()),
    ]
    for fig in figs:
        png = io.BytesIO()
        fig.savefig(png, format="png")
        assert png.getvalue().startswith(b"\x89PNG")
