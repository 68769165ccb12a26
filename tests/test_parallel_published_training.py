"""Published training runs as data: every row names its source and a layout gpuplan reads, the
model definitions reproduce the sources' parameter counts, the split by source is seeded and
stable, a row gpuplan cannot express says why, and ``train --reproduce`` prints every source."""

import json
import re

import pytest

from gpuplan.cli import main
from gpuplan.errors import GpuplanError
from gpuplan.sim.parallel.topology import get_cluster
from gpuplan.validate.published.training import (
    METRICS,
    parse_options,
    predict_row,
    row_cluster,
    row_model,
    row_strategy,
    source_summary,
    split_sources,
    training_rows,
    training_sources,
)
from gpuplan.workloads.params import count_params
from gpuplan.workloads.presets import get_model


def rows_of(source):
    return [r for r in training_rows() if r["source"] == source]


def test_at_least_300_rows_from_at_least_8_sources_each_with_its_reference():
    rows = training_rows()
    sources = training_sources()["sources"]
    assert len(rows) >= 300
    assert len({r["id"] for r in rows}) == len(rows)
    assert len(sources) >= 8
    for r in rows:
        assert r["source"] in sources, r["id"]
        assert r["table"].strip() and r["metric"] in METRICS, r["id"]
        assert r["published"] > 0, r["id"]
    for name, src in sources.items():
        assert src["reference"].strip() and src["title"].strip(), name


def test_every_model_definition_names_its_source():
    for key, model in training_sources()["models"].items():
        assert model["name"] == key and model["source"].strip(), key


@pytest.mark.parametrize("size", ["125m", "7b", "70b"])
def test_mpt_definitions_give_the_parameter_counts_llm_foundry_prints(size):
    # the NumParams column of the benchmark table, kept in each row's notes
    row = next(r for r in rows_of("mosaicml-llmfoundry") if r["model"] == f"mpt-{size}")
    published = int(re.search(r"NumParams (\d+)", row["notes"]).group(1))
    assert count_params(row_model(row)).total == pytest.approx(published, rel=1e-3)


def test_options_parse_booleans_numbers_words_and_stage_lists():
    got = parse_options("overlap_tp=true;capacity_factor=1.0;pp_layers=7,8,7;state_precision=bf16")
    assert got == {"overlap_tp": True, "capacity_factor": 1.0, "pp_layers": (7, 8, 7),
                   "state_precision": "bf16"}  # fmt: skip
    assert parse_options("") == {}


def test_a_row_becomes_the_strategy_it_states():
    row = next(r for r in training_rows() if r["id"] == "tt24-t4-70b-2d-asynctp")
    st = row_strategy(row, row_model(row))
    assert (st.tp, st.dp, st.zero, st.micro_batch, st.global_batch) == (8, 32, 3, 16, 512)
    assert st.overlap_tp and st.precision == "fp8" and st.recompute == "full"
    assert st.world == row["gpus"]


def test_llama3_table4_rows_use_the_papers_uneven_stages():
    row = rows_of("dubey2024-llama3")[0]
    st = row_strategy(row, row_model(row))
    assert st.pp_layers == (7,) + (8,) * 14 + (7,)  # sec. 3.3.2: one block fewer at each end


def test_a_row_gpuplan_cannot_express_is_reported_with_why_not_dropped():
    row = next(r for r in training_rows() if r["model"] == "llama3.1-8b" and r["seq"] > 131072)
    status, predicted, memory = predict_row(row, {})
    assert status.startswith("not expressible: ") and "max_seq_len=131,072" in status
    assert predicted is None and memory is None


def test_a_predicted_row_is_in_the_metric_it_publishes():
    row = next(r for r in training_rows() if r["id"] == "mtnlg-n280")
    status, predicted, _ = predict_row(row, {})
    assert status == "ok" and row["metric"] == "step_time_s"
    assert 0.5 * row["published"] < predicted < 2 * row["published"]  # seconds, not tokens/s


def test_split_by_source_is_seeded_and_ignores_order_and_repeats():
    names = [f"s{i}" for i in range(10)]
    held = split_sources(names, seed=3)
    assert held == split_sources(list(reversed(names)) * 2, seed=3)
    assert len(held) == 3 and held <= set(names)
    assert any(split_sources(names, seed=s) != held for s in range(4, 10))
    grown = split_sources([*names, "new"], seed=3)  # still 3 held out of 11
    assert len(grown) == 3 and grown & set(names) <= held
    assert split_sources(["a", "b"], seed=0, fraction=0.1) and len(split_sources(["a"])) == 1
    with pytest.raises(GpuplanError, match="fraction"):
        split_sources(names, fraction=1.0)


def test_the_summary_counts_every_row_and_its_reasons():
    import pandas as pd

    frame = pd.DataFrame(
        [
            {"source": "a", "kind": "time", "status": "ok", "abs_error_pct": 10.0, "held_out": True},
            {"source": "a", "kind": "time", "status": "ok", "abs_error_pct": 30.0, "held_out": True},
            {"source": "a", "kind": "time", "status": "not expressible: x", "abs_error_pct": None,
             "held_out": True},
            {"source": "b", "kind": "time", "status": "ok", "abs_error_pct": 4.0, "held_out": False},
        ]
    )  # fmt: skip
    summ = source_summary(frame).set_index("source")
    assert summ.loc["a", "n"] == 3 and summ.loc["a", "not_expressible"] == 1
    assert summ.loc["a", "median_abs_pct_error"] == pytest.approx(20.0)
    assert summ.loc["all", "n"] == 4 and summ.loc["all", "median_abs_pct_error"] == 10.0


@pytest.mark.slow
def test_train_reproduce_prints_every_source_and_the_same_json(capsys):
    assert main(["train", "--reproduce", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert main(["train", "--reproduce"]) == 0
    text = capsys.readouterr().out
    assert "Published runs (A100 80GB, DGX A100 / Selene)" in text  # the old table stays
    for name in training_sources()["sources"]:
        assert name in text
    assert "not expressible: seq=262,144 is longer than llama3.1-8b's max_seq_len=131,072" in text
    new = doc["published_training"]
    assert {r["id"] for r in new["rows"]} >= {r["id"] for r in training_rows()}
    assert set(new["held_out_sources"]) == {s["source"] for s in new["summary"] if s["held_out"]}
    assert len(doc["rows"]) == 46  # published_runs.json, as before


def test_a_cluster_of_the_sources_file_replaces_only_the_stated_links():
    row = next(r for r in training_rows() if r["source"] == "bigscience-bloom")
    cluster = row_cluster(row)
    # 4 x 100 Gb/s Omni-Path per 8-GPU node (the sources file); NVLink as the DGX A100 preset
    assert cluster.key == "jean-zay-a100" and cluster.scaleout_bytes_per_s == 6.25e9
    assert cluster.scaleup_bytes_per_s == get_cluster("dgx-a100").scaleup_bytes_per_s


def test_bloom_rows_run_as_megatron_deepspeed_ran_them_and_stay_held_out():
    rows = rows_of("bigscience-bloom")
    assert len(rows) >= 15 and "bigscience-bloom" in split_sources(
        [r["source"] for r in training_rows()] + ["narayanan2021", "korthikanti2022"])
    for row in rows:  # the BF16 optimizer under CUDA_LAUNCH_BLOCKING=1 (tr11-176B-ml.slurm)
        assert row["options"]["state_precision"] == "bf16-deepspeed-2022"
        assert row["options"]["launch_blocking"] is True and row["stack"] == "deepspeed"
    row = next(r for r in rows if r["id"] == "bloom-prequel-h14336-l70-nh112-tp4pp12dp8-mb2")
    plain = dict(row, options={k: v for k, v in row["options"].items()
                               if k not in ("state_precision", "launch_blocking")})  # fmt: skip
    slow, fast = predict_row(row, {})[1], predict_row(plain, {})[1]
    assert slow > 1.05 * fast  # fp32 accumulation, fp32 all-reduce and exposed launches
    assert abs(slow - row["published"]) / row["published"] < 0.10  # 104.5 s per step


def test_torchtitan_rows_run_on_grand_tetons_hbm2e_h100_and_llama_3_1():
    row = next(r for r in training_rows() if r["id"] == "tt24-t1-8b-g8-fsdp")
    cluster = row_cluster(row)
    assert cluster.gpu == "h100-sxm-hbm2e" and cluster.accelerator.hbm_bytes_per_s == 2.4e12
    base, cfg = get_model("llama3-8b"), row_model(row)
    assert (cfg.max_seq_len, base.max_seq_len) == (131072, 8192)
    assert count_params(cfg) == count_params(base)  # Llama 3.1 8B: the Llama 3 shape
    hbm3 = dict(row, gpu="h100-sxm", cluster="dgx-h100")
    # the same run on HBM3 (3.35 TB/s) is faster: its memory-bound kernels are
    assert predict_row(hbm3, {})[1] > 1.03 * predict_row(row, {})[1]
