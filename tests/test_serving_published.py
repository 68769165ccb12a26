"""Published serving results: the data file, the split, the predictions and ``serve --reproduce``."""

import json
import math

import pandas as pd
import pytest

from gpuplan.cli import main
from gpuplan.errors import GpuplanError
from gpuplan.sim.runtime.serving.step_model import Batch
from gpuplan.validate.published import serving as published
from gpuplan.validate.published.serving import (
    CannotRun,
    Deployments,
    cannot_run,
    load_rows,
    predict_row,
    published_sources,
    reproduce,
    row_model,
    split_by_source,
    summary,
)


@pytest.fixture(scope="module")
def rows():
    return load_rows()


def _few(rows, per_source=4):
    """The first rows of every source: a small set that still has every source."""
    return rows.groupby("source", sort=False).head(per_source).reset_index(drop=True)


def test_the_committed_set_has_300_rows_from_5_sources_each_with_its_source(rows):
    assert len(rows) >= 300
    assert rows["source"].nunique() >= 5
    sources = published_sources()["sources"]
    assert set(rows["source"]) <= set(sources)
    for meta in sources.values():
        assert meta["title"] and meta["url"].startswith("https://")
    assert rows["value"].gt(0).all()


def test_every_model_named_is_a_preset_or_an_added_config_with_its_source(rows):
    added = published_sources()["models"]
    for key in rows["model"].unique():
        cfg = row_model(key)
        assert cfg.name == key or key not in added
    assert all(m["source"] for m in added.values())
    # Llama 3.1 is the Llama 3 shape with a longer context
    assert row_model("llama3.1-8b").d_ff == row_model("llama3-8b").d_ff
    assert row_model("llama3.1-8b").max_seq_len == 131072


def _write(tmp_path, frame):
    path = tmp_path / "rows.csv"
    frame.to_csv(path, index=False)
    return path


def test_a_file_without_a_column_is_an_error_naming_it(tmp_path, rows):
    path = _write(tmp_path, rows.head(3).drop(columns=["metric"]))
    with pytest.raises(GpuplanError, match="missing column.*metric"):
        load_rows(path)


def test_an_unknown_metric_is_an_error_naming_the_row_and_the_value(tmp_path, rows):
    bad = rows.head(3).copy()
    bad.loc[1, "metric"] = "goodput"
    with pytest.raises(GpuplanError, match=r"row 3 .*metric='goodput' is invalid"):
        load_rows(_write(tmp_path, bad))


def test_a_value_that_is_not_a_positive_number_is_an_error(tmp_path, rows):
    bad = rows.head(3).copy()
    bad.loc[2, "value"] = -3.0
    with pytest.raises(GpuplanError, match=r"row 4 .*value=-3.0 is invalid"):
        load_rows(_write(tmp_path, bad))


def test_an_id_given_twice_is_an_error(tmp_path, rows):
    bad = rows.head(3).copy()
    bad.loc[2, "id"] = bad.loc[0, "id"]
    with pytest.raises(GpuplanError, match="appears more than once"):
        load_rows(_write(tmp_path, bad))


def test_a_static_batch_row_without_a_batch_is_an_error(tmp_path, rows):
    bad = rows[rows["load"] == "static_batch"].head(2).copy()
    bad["batch"] = ""
    with pytest.raises(GpuplanError, match="needs a whole batch"):
        load_rows(_write(tmp_path, bad))


def test_the_split_is_seeded_and_holds_out_a_share_of_every_source(rows):
    a, b = split_by_source(rows, seed=0), split_by_source(rows, seed=0)
    assert a.equals(b)
    assert not a.equals(split_by_source(rows, seed=1))
    for _, g in a.groupby(rows["source"]):
        held = (g == "holdout").sum()
        assert 1 <= held < len(g)
        assert abs(held - 0.3 * len(g)) <= 1


def test_a_source_is_split_the_same_whatever_the_other_sources_are(rows):
    whole = split_by_source(rows, seed=4)
    alone = rows[rows["source"] == "trtllm-1.0"]
    assert split_by_source(alone, seed=4).equals(whole[alone.index])


def test_a_holdout_share_outside_0_1_is_an_error(rows):
    with pytest.raises(GpuplanError, match="holdout_share=1.5 is invalid"):
        split_by_source(rows, holdout_share=1.5)
    with pytest.raises(GpuplanError, match="seed=-1 is invalid"):
        split_by_source(rows, seed=-1)


def _row(**kw):
    base = {"id": "t", "source": "t", "model": "llama3-8b", "gpu": "h200", "gpus": 1, "tp": 1,
            "pp": 1, "engine": "trt-llm", "weight_dtype": "bf16", "kv_dtype": "bf16",
            "prompt_tokens": 1024, "output_tokens": 128, "load": "static_batch", "batch": 1,
            "concurrency": "", "metric": "ttft_s", "per": "request", "value": 1.0}  # fmt: skip
    return pd.Series({**base, **kw})


def test_a_batch_of_one_has_the_ttft_of_one_prefill_iteration():
    deps = Deployments()
    row = _row()
    _, step, _ = deps(row)
    assert predict_row(row, deps) == step.iteration_s(Batch(prefill=((1024, 0, 1),)))


def test_a_static_batch_decodes_its_output_in_one_run_of_the_whole_batch():
    deps = Deployments()
    _, step, _ = deps(_row())
    kw = {"batch": 8, "prompt_tokens": 512, "output_tokens": 128}
    run_s = step.decode_run_s(8, 8 * 513, 127)
    assert predict_row(_row(metric="tpot_s", **kw), deps) == pytest.approx(run_s / 127)
    e2e = predict_row(_row(metric="e2e_latency_s", **kw), deps)
    assert e2e == pytest.approx(predict_row(_row(metric="ttft_s", **kw), deps) + run_s)


def test_a_lone_client_waits_half_a_decode_and_decodes_alone():
    deps = Deployments()
    _, step, _ = deps(_row())
    loop = {"load": "concurrency", "concurrency": 1, "batch": ""}
    decode = step.decode_s(1, 1024 + 64)
    assert predict_row(_row(metric="tpot_s", **loop), deps) == pytest.approx(decode)
    prefill = step.iteration_s(Batch(prefill=((1024, 0, 1),)))
    ttft = predict_row(_row(metric="ttft_s", **loop), deps)
    assert ttft == pytest.approx(prefill + decode / 2)
    tput = predict_row(_row(metric="output_tokens_per_s", per="total", **loop), deps)
    assert tput == pytest.approx(128 / (ttft + 127 * decode))


def test_clients_beyond_the_cache_wait_and_add_no_throughput():
    deps = Deployments()
    loop = {"load": "concurrency", "model": "llama3-70b", "gpu": "h100-sxm", "tp": 2,
            "weight_dtype": "fp8", "kv_dtype": "fp8", "prompt_tokens": 5000,
            "output_tokens": 500, "batch": ""}  # fmt: skip
    tput = [predict_row(_row(metric="output_tokens_per_s", per="total", concurrency=c, **loop),
                        deps) for c in (1000, 2000)]  # fmt: skip
    ttft = [predict_row(_row(metric="ttft_s", concurrency=c, **loop), deps) for c in (1000, 2000)]
    assert tput[0] == pytest.approx(tput[1])
    assert ttft[1] > 1.9 * ttft[0]


def test_a_new_prompt_waits_for_the_other_clients_prefills_as_an_md1_queue():
    deps = Deployments()
    _, step, _ = deps(_row())
    loop = {"load": "concurrency", "concurrency": 9, "batch": ""}
    prefill = step.iteration_s(Batch(prefill=((1024, 0, 1),)))
    decode = step.decode_s(9, 9 * (1024 + 64))
    tpot = decode + 8 * prefill / 127
    lifetime = prefill + decode / 2 + 127 * tpot
    rho = 8 * prefill / lifetime  # the other 8 clients' prefills, one a lifetime each
    ttft = predict_row(_row(metric="ttft_s", **loop), deps)
    assert ttft == pytest.approx(prefill + decode / 2 + rho * prefill / (2 * (1 - rho)))
    assert predict_row(_row(metric="tpot_s", **loop), deps) == pytest.approx(tpot)  # unchanged
    tput = predict_row(_row(metric="output_tokens_per_s", per="total", **loop), deps)
    assert tput == pytest.approx(9 * 128 / lifetime)


def test_a_static_batch_beyond_the_kv_cache_runs_in_waves_of_what_fits():
    deps = Deployments()
    kw = {"engine": "vllm", "model": "llama3-70b", "gpu": "h100-sxm", "tp": 4, "gpus": 4,
          "prompt_tokens": 2048, "output_tokens": 256}  # fmt: skip
    dep, step, stack = deps(_row(**kw))
    fit = published._capacity(dep, published._sched(_row(**kw), dep, stack)).sequences(2304)
    assert 1 <= fit < 1000
    b = 2 * fit + 3  # two full waves and a short one
    waves = [fit, fit, 3]
    prefill = [step.iteration_s(Batch(prefill=((2048, 0, w),))) for w in waves]
    decode = [step.decode_run_s(w, w * 2049, 255) for w in waves]
    e2e = predict_row(_row(metric="e2e_latency_s", batch=b, **kw), deps)
    assert e2e == pytest.approx(sum(prefill) + sum(decode))
    assert predict_row(_row(metric="ttft_s", batch=b, **kw), deps) == pytest.approx(prefill[0])
    assert predict_row(_row(metric="tpot_s", batch=b, **kw), deps) == pytest.approx(
        decode[0] / 255)
    one_wave = predict_row(_row(metric="e2e_latency_s", batch=fit, **kw), deps)
    assert e2e > 2 * one_wave


def test_a_contiguous_kv_source_holds_its_batch_in_the_whole_device():
    # TensorRT-LLM 0.9.0's gptSessionBenchmark ran with the paged KV cache off: its KV tensor
    # takes what the device holds, not the paged pool's free-memory fraction
    assert published_sources()["sources"]["trtllm-0.9.0"]["kv_cache"] == "contiguous"
    deps = Deployments()
    kw = {"model": "llama2-7b", "gpu": "h100-sxm", "weight_dtype": "fp8", "kv_dtype": "fp8",
          "prompt_tokens": 128, "output_tokens": 2048, "batch": 120,
          "metric": "output_tokens_per_s"}  # fmt: skip
    dep, step, stack = deps(_row(**kw))
    contiguous = published._sched(_row(source="trtllm-0.9.0", **kw), dep, stack)
    paged = published._sched(_row(source="trtllm-0.14.0", **kw), dep, stack)
    assert contiguous.memory_utilization == 1.0 > paged.memory_utilization
    # the pool holds fewer than 120 such requests, the whole device all of them: one wave
    assert published._capacity(dep, paged).sequences(2176) < 120
    one = predict_row(_row(source="trtllm-0.9.0", per="total", **kw), deps)
    ttft = step.iteration_s(Batch(prefill=((128, 0, 120),)))
    assert one == pytest.approx(120 * 2048 / (ttft + step.decode_run_s(120, 120 * 129, 2047)))
    assert predict_row(_row(source="trtllm-0.14.0", per="total", **kw), deps) < one


def test_every_committed_row_is_answered_including_the_20000_token_prompts(rows):
    out = reproduce(rows)
    assert (out["cannot_run"] == "").all(), out.loc[out["cannot_run"] != "", "cannot_run"].iloc[0]
    long = out[out["prompt_tokens"] == 20000]
    assert len(long) >= 44 and long["predicted"].gt(0).all()


def test_offline_throughput_per_gpu_is_the_total_over_the_gpus():
    deps = Deployments()
    kw = {"load": "offline", "metric": "output_tokens_per_s", "model": "llama3-70b", "tp": 4,
          "gpus": 4, "batch": ""}  # fmt: skip
    total = predict_row(_row(per="total", **kw), deps)
    assert predict_row(_row(per="gpu", **kw), deps) == pytest.approx(total / 4)


def test_rows_that_cannot_run_say_why_and_are_counted():
    deps = Deployments()
    for kw, why in (({"gpu": "no-such-gpu"}, "unknown accelerator"),
                    ({"weight_dtype": "fp4"}, "weight_dtype='fp4' cannot run on"),
                    ({"pp": 2}, "pipeline-parallel"),
                    ({"prompt_tokens": 2_000_000}, "does not fit on h200")):  # fmt: skip
        with pytest.raises(CannotRun, match=why):
            predict_row(_row(**kw), deps)


def test_reproduce_keeps_every_row_and_summarizes_by_source(rows):
    few = _few(rows)
    out = reproduce(few, seed=0)
    assert len(out) == len(few) and list(out["id"]) == list(few["id"])
    ran = out["predicted"].notna()
    assert (out.loc[~ran, "cannot_run"] != "").all() and (out.loc[ran, "cannot_run"] == "").all()
    err = 100 * (out["predicted"] - out["value"]) / out["value"]
    assert out.loc[ran, "error_pct"].tolist() == pytest.approx(err[ran].tolist())
    every = summary(out, split=None)
    mine = every[every["source"] != "all"]
    assert mine["rows"].sum() == len(out)
    assert (mine["predicted"] + mine["cannot_run"] == mine["rows"]).all()
    assert cannot_run(out)["rows"].sum() == (~ran).sum()


def test_serve_reproduce_prints_every_source_and_the_same_json(rows, monkeypatch, capsys):
    monkeypatch.setattr(published, "load_rows", lambda path=None: _few(rows))
    assert main(["serve", "--reproduce"]) == 0
    text = capsys.readouterr().out
    for source in rows["source"].unique():
        assert source in text
    assert "held-out rows" in text and "rows that cannot be run" in text
    assert main(["serve", "--reproduce", "--json", "--seed", "2"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["seed"] == 2 and len(doc["rows"]) == len(_few(rows))
    assert {"summary_holdout", "summary_all", "cannot_run"} <= set(doc)
    ran = [r for r in doc["rows"] if r["predicted"] is not None]
    assert all(math.isfinite(r["abs_error_pct"]) for r in ran)


@pytest.mark.slow
def test_the_whole_set_runs_in_well_under_a_minute(rows):
    import time

    started = time.perf_counter()
    out = reproduce(rows)
    assert time.perf_counter() - started < 30
    assert len(out) == len(rows)


def test_summary_gives_the_median_and_p90_absolute_and_the_median_signed_error():
    err = pd.Series([10.0, -20.0, 30.0, float("nan")])
    rows = pd.DataFrame({"split": "holdout", "source": "s", "kind": "ttft", "error_pct": err,
                         "abs_error_pct": err.abs()})  # fmt: skip
    got = summary(rows).set_index("source").loc["s"]
    assert (got["rows"], got["predicted"], got["cannot_run"]) == (4, 3, 1)
    assert got["median_abs_pct_error"] == 20.0 and got["median_pct_error"] == 10.0
    assert got["p90_abs_pct_error"] == pytest.approx(28.0)  # linear between 20 and 30
    assert summary(rows, split="fit").empty


def test_a_closed_loop_whose_prefills_fill_the_engine_cannot_run_rather_than_a_negative_wait():
    from gpuplan.validate.published.serving import CannotRun, Deployments, load_rows, predict_row

    frame = load_rows()
    row = frame[frame["load"] == "concurrency"].iloc[0].copy()
    row["output_tokens"], row["concurrency"] = 1, "3"  # one token each: all prefill
    with pytest.raises(CannotRun, match="utilisation .* >= 1"):
        predict_row(row, Deployments())
