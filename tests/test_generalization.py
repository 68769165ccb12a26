"""Leave one out: the published rows are priced without their own source's fits, the device and
family views group and price as documented, and the bands weigh each source alike."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuplan.sim.stacks import get_stack
from gpuplan.sim.stacks.serving import PRIORS
from gpuplan.validate.bands import build as band_data
from gpuplan.validate.fit_stacks import serving_loso
from gpuplan.validate.generalization import devices, families, published
from gpuplan.validate.published import serving as serving_rows


def test_a_source_alone_on_its_stack_is_priced_at_the_stacks_priors():
    rows = serving_rows.load_rows()
    fitted = serving_loso.fit_without(rows, "eager-2023", "splitwise-sim-profiles")
    assert fitted["prior"] and fitted["fitted_on"] == [] and fitted["rows"] == 0
    assert fitted["values"] == PRIORS["eager-2023"]


def test_the_committed_left_out_fits_never_read_their_own_source():
    fits = serving_loso.loso_values()
    assert fits, "stack_fit_loso.json is committed"
    for stack, by_source in fits.items():
        for source, fitted in by_source.items():
            assert source not in fitted["fitted_on"], (stack, source)
            assert fitted["prior"] == (not fitted["fitted_on"])


def test_left_out_prices_every_row_and_keeps_the_row_order():
    frame = serving_rows.load_rows()
    before = {name: get_stack(name) for name in ("trt-llm", "eager-2023")}
    inside = serving_rows.reproduce(frame)
    out = serving_loso.left_out(frame)
    assert list(out.index) == list(frame.index) and len(out) == len(frame)
    # the left-out values differ from the committed ones, and the stacks are registered back
    assert not np.allclose(out["predicted"].fillna(-1), inside["predicted"].fillna(-1))
    assert {name: get_stack(name) for name in before} == before


def test_training_rows_are_not_called_left_out_while_a_fit_is_in_force(tmp_path, monkeypatch):
    fit = tmp_path / "fit.json"
    fit.write_text(json.dumps({"stacks": {"fsdp2": {"adopted": 0.5}, "deepspeed": {"adopted": 0}}}))
    assert published.adopted_training_values(fit) == {"fsdp2": 0.5}
    monkeypatch.setattr(published, "TRAINING_FIT", fit)
    with pytest.raises(published.NotLeftOut, match="fsdp2"):
        published.training_left_out()


def test_no_committed_training_fit_is_in_force():
    assert published.adopted_training_values() == {}


def test_summary_counts_every_row_and_adds_all():
    rows = pd.DataFrame({"source": ["a", "a", "b"], "kind": ["time"] * 3,
                         "abs_error_pct": [1.0, 3.0, np.nan]})  # fmt: skip
    out = published.summary(rows).set_index("source")
    assert out.loc["a", "rows"] == 2 and out.loc["a", "left_out_median_pct"] == 2.0
    assert out.loc["all", "rows"] == 3 and out.loc["all", "predicted"] == 2


def test_by_kind_groups_gemms_by_dtype_and_names_the_stack():
    frame = pd.DataFrame({"kind": ["gemm", "gemm", "attention"], "dtype": ["bf16", "fp8", "bf16"],
                          "stack": ["harness", "pytorch", "harness"],
                          "error_pct": [10.0, -5.0, 2.0]})  # fmt: skip
    frame["abs_error_pct"] = frame["error_pct"].abs()
    groups = list(devices.by_kind(frame)["group"])
    assert groups == ["attention", "gemm[bf16]", "pytorch gemm[fp8]"]


def test_every_model_of_the_stack_campaign_has_a_family():
    from gpuplan.validate.stack_campaign.configs import MODELS

    assert set(MODELS) <= set(families.FAMILY)


@given(st.lists(st.sampled_from("abc"), min_size=1, max_size=30))
def test_each_source_weighs_alike(sources):
    w = band_data.source_weights(pd.Series(sources))
    totals = w.groupby(pd.Series(sources)).sum()
    assert np.allclose(totals, 1.0)


@given(st.lists(st.floats(-0.9, 3.0), min_size=2, max_size=40))
def test_one_sources_band_is_numpys_linear_quantile(values):
    g = pd.DataFrame({"e": values, "source": "s"})
    lo, hi = band_data._q(g)
    want = np.quantile(values, band_data.QUANTILES)
    assert (lo, hi) == pytest.approx((round(want[0], 6), round(want[1], 6)), abs=2e-6)
