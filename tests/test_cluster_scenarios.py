"""The shipped scenarios against what they reproduce, ``gpuplan cluster``, and trace files."""

import json
import math

import pytest

from gpuplan.cli import main
from gpuplan.errors import GpuplanError
from gpuplan.sim.runtime.cluster import load_trace, run_scenario
from gpuplan.sim.runtime.cluster.scenario import builtin_scenarios


@pytest.fixture(scope="module")
def llama():
    return run_scenario("llama3-405b")[0]


def test_llama3_405b_sees_the_published_interruptions_and_over_90_percent_training(llama):
    s = llama.summary
    # Poisson counts: within four standard deviations of Dubey et al.'s 466 / 419 / 47
    for key, published in (("interruptions", 466), ("unexpected_interruptions", 419),
                           ("planned_interruptions", 47)):  # fmt: skip
        assert abs(s[key] - published) < 4 * math.sqrt(published), key
    assert s["effective_training_time"] > 0.90
    causes = s["interruptions_by_cause"]
    assert max(causes, key=causes.get) == "faulty_gpu"  # as in Table 5
    assert llama.conservation["ok"]


def test_thousand_gpus_gain_utilization_from_backfill_and_topology_aware_placement():
    runs = {r.name: r.summary for r in run_scenario("thousand-gpu")}
    base, best = runs["fifo-random"], runs["backfill-topology"]
    assert best["effective_utilization"] - base["effective_utilization"] > 0.05
    assert runs["backfill-random"]["utilization"] > base["utilization"]  # backfill fills holes
    assert runs["fifo-topology"]["placement_efficiency"] > base["placement_efficiency"]


def test_cluster_json_has_every_run_with_its_summary_and_checks(capsys):
    code = main(["cluster", "llama3-405b", "--json", "--seed", "3"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["expect"]["interruptions"] == 466
    run = doc["runs"][0]
    assert run["seed"] == 3 and run["conservation"]["ok"]
    for key in ("utilization", "goodput", "lost_gpu_hours", "jct_p50_s", "queue_p90_s",
                "energy_kwh", "interruptions_by_cause", "events"):  # fmt: skip
        assert key in run["summary"]


def test_cluster_prints_tables_and_writes_plot_and_frames(tmp_path, capsys):
    png, jobs, events = tmp_path / "t.png", tmp_path / "j.csv", tmp_path / "e.csv"
    code = main(["cluster", "llama3-405b", "--plot", str(png), "--jobs", str(jobs),
                 "--events", str(events), "--no-progress"])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0 and "published" in out and "events in" in out and "faulty_gpu" in out
    assert png.stat().st_size > 0 and jobs.read_text().startswith("id,")
    assert "interruption" in events.read_text()


def test_an_unknown_scenario_or_key_is_one_line_and_exit_code_2(tmp_path, capsys):
    assert main(["cluster", "llama-4"]) == 2
    assert "unknown scenario" in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text("cluster: {preset: dgx-h100, nodes: 4}\nschedular: {policy: fifo}\n")
    assert main(["cluster", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "schedular" in err and "scheduler" in err and err.count("\n") == 1
    assert set(builtin_scenarios()) >= {"llama3-405b", "thousand-gpu"}


def test_traces_load_from_json_lines_and_the_helios_csv_schema(tmp_path):
    jl = tmp_path / "t.jsonl"
    jl.write_text(
        json.dumps({"id": "a", "arrival_s": 10, "gpus": 16, "model": "llama3-8b",
                    "strategy": {"tp": 8}, "seq": 4096, "tokens": 1e9}) + "\n"
        + json.dumps({"id": "b", "arrival_s": 20, "gpus": 1, "step_time_s": 0.5,
                      "duration_s": 600}) + "\n"
    )  # fmt: skip
    a, b = load_trace(jl)
    assert (
        a.arrival_s == 0 and a.strategy.dp == 2 and a.tokens_per_step == 8 * 4096
    )  # 4 micro-batches x dp 2
    assert b.arrival_s == 10
    csv = tmp_path / "helios.csv"
    csv.write_text("job_id,submit_time,gpu_num,duration,step_time_s\n"
                   "x,2020-04-01 00:00:10,8,3600,1.0\ny,2020-04-01 00:01:10,0,50,1.0\n"
                   "z,2020-04-01 00:02:10,2,60,1.0\n")  # fmt: skip
    jobs = load_trace(csv)
    assert [j.id for j in jobs] == ["x", "z"] and jobs[1].arrival_s == 120.0
    with pytest.raises(GpuplanError, match="give a model and a strategy, or step_time_s"):
        csv.write_text("job_id,submit_time,gpu_num,duration\nx,0,8,3600\n")
        load_trace(csv)
