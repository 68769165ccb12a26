"""Production layouts fit as they ran (validate/published/memory_truth.py): every row of the truth
set names its source, fits its GPU with its framework's defaults or names the gap that decides
its fit, and is within 10% of any memory figure its source prints."""

import dataclasses
import runpy

import numpy as np
import pytest

from gpuplan.errors import GpuplanError
from gpuplan.sim.parallel.memory import layer_act_per_token
from gpuplan.sim.parallel.model_facts import model_facts
from gpuplan.validate.published import memory_truth as mt
from gpuplan.workloads.memory import PRECISION_BYTES, fp8_cached_input_saving
from gpuplan.workloads.presets import get_model


@pytest.fixture(scope="module")
def table():
    return mt.truth_table()


def test_every_row_names_a_source_with_its_reference_and_what_it_states():
    sources = mt.truth_sources()["sources"]
    for row in mt.truth_rows():
        assert row["source"] in sources and sources[row["source"]]["reference"], row["id"]
        assert row["stated"] and row["missing"], row["id"]


def test_the_truth_set_holds_every_layout_fits_or_names_its_gap(table):
    assert mt.misses(table) == []
    assert all(table.loc[~table.gap.astype(bool), "fits"])
    assert {line.split(":")[0] for line in mt.gaps(table)} == {"deepseek-v3-2048",
                                                                "llama3-405b-8192"}


def test_published_memory_figures_are_within_ten_percent(table):
    published = table[table.published_metric.notna()]
    assert len(published) >= 8
    assert (published.error_pct.abs() <= mt.TOLERANCE_PCT).all()


def test_gpt3_fits_with_the_distributed_optimizer_and_not_without_it(table):
    row = next(r for r in mt.truth_rows() if r["id"] == "mlperf31-gpt3-175b-4096")
    assert table.set_index("id").loc[row["id"], "layout"].endswith("zero1 fp8")
    assert not mt.price_row(dict(row, zero=0))["fits"]  # ZeRO 0: every rank holds 12 B/param


def test_transformer_engine_caches_fp8_gemm_inputs_and_torchao_does_not():
    cfg = get_model("gpt3-175b")
    rep, split = fp8_cached_input_saving(cfg)
    assert (rep, split) == (2 * cfg.d_model, cfg.d_model + cfg.d_ff)  # 1 B less each
    f = model_facts(cfg)
    bf16 = layer_act_per_token(f, 4, True, 0, 2048, "flash", 0)[0]
    fp8 = layer_act_per_token(f, 4, True, 0, 2048, "flash", 0, fp8_inputs=True)[0]
    assert np.isclose(bf16 - fp8, (rep + split) / 4)
    full = layer_act_per_token(f, 4, True, 2, 2048, "flash", 0, fp8_inputs=True)[0]
    assert np.isclose(full, cfg.d_model * 2 / 4)  # full recomputation keeps the block input


def test_the_bf16_gradient_buffer_is_two_bytes_a_parameter():
    assert PRECISION_BYTES["bf16-grads-megatron"] == (2, 2, 12)


def test_an_unknown_published_metric_is_a_one_line_error():
    raw = {k: "" for k in ("zero", "recompute", "options", "published_bytes")}
    raw |= {c: "1" for c in mt.INT_COLUMNS} | {"id": "x", "published_metric": "peak"}
    with pytest.raises(GpuplanError, match=r"x: published_metric='peak' is unknown; valid: "
                       r"activations, weights_gradients_optimizer or empty"):  # fmt: skip
        mt._typed(raw)


def test_the_command_prints_the_table_and_exits_0(capsys):
    with pytest.raises(SystemExit) as done:
        runpy.run_path("benchmarks/memory_truth.py", run_name="__main__")
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "mlperf40-gpt3-175b-512" in out and "gap: llama3-405b-8192" in out


def test_a_row_that_does_not_fit_without_a_gap_is_a_miss(table):
    bad = table.copy()
    bad.loc[bad.id == "deepseek-v3-2048", "gap"] = ""
    assert [m.split(":")[0] for m in mt.misses(bad)] == ["deepseek-v3-2048"]
    assert dataclasses.is_dataclass(mt.truth_cluster(mt.truth_rows()[6]))
