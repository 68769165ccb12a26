"""Sweeps on Dask (``--workers``, ``--scheduler``) give the same document as in this process."""

import json
import logging
import sys

import pytest

from gpuplan.cli import main
from gpuplan.sim.sweep import InProcess, chunks, open_pool

distributed = pytest.importorskip("distributed")

SCENARIO = """\
name: small
description: 64 H100s for three days
seed: 0
horizon_days: 3
cluster: {preset: dgx-h100, nodes: 8}
scheduler: {policy: backfill, placement: topology}
failures: {rates: default}
trace:
  generate: {jobs: 60, load: 1.2, seed: 1}
variants:
  - name: fifo
    scheduler: {policy: fifo}
"""
SEARCH = ["search", "train", "--model", "llama3-8b", "--gpus", "8", "--global-batch", "16",
          "--seq", "2048", "--top", "3"]  # fmt: skip
PLAN = ["serve", "plan", "--model", "llama3-8b", "--gpu", "h200", "--rate", "4", "--slo-ttft-s",
        "0.5", "--slo-tpot-s", "0.05", "--requests", "60", "--tp", "1", "--max-seqs", "64",
        "--prompt-tokens", "256", "--output-tokens", "32", "--seed", "2"]  # fmt: skip


def run(capsys, argv):
    code = main([*argv, "--json", "--no-timing"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


@pytest.fixture(scope="module")
def scheduler():
    """A running two-worker cluster, as ``--scheduler ADDRESS`` would find it."""
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  host="127.0.0.1", dashboard_address=":0",
                                  silence_logs=logging.ERROR) as cluster:  # fmt: skip
        yield cluster.scheduler_address


@pytest.fixture(scope="module")
def scenario(tmp_path_factory):
    path = tmp_path_factory.mktemp("dask") / "small.yaml"
    path.write_text(SCENARIO)
    return str(path)


def test_cluster_repeat_on_a_dask_cluster_is_the_in_process_document(capsys, scheduler, scenario):
    argv = ["cluster", scenario, "--repeat", "3", "--seed", "4"]
    here = run(capsys, argv)
    there = run(capsys, [*argv, "--scheduler", scheduler])
    assert there == here
    doc = json.loads(here)
    assert [len(r["repeats"]) for r in doc["runs"]] == [3, 3]
    # the seeds differ, so a merge out of order would show
    assert len({json.dumps(r) for r in doc["runs"][0]["repeats"]}) == 3


@pytest.mark.slow
def test_search_on_a_dask_cluster_is_the_in_process_document(capsys, scheduler):
    assert run(capsys, [*SEARCH, "--scheduler", scheduler]) == run(capsys, SEARCH)


@pytest.mark.slow
def test_serve_plan_on_a_dask_cluster_is_the_in_process_document(capsys, scheduler):
    here = run(capsys, PLAN)
    assert run(capsys, [*PLAN, "--scheduler", scheduler]) == here
    assert json.loads(here)["evaluated"] >= 2  # several candidates, simulated two at a time


@pytest.mark.slow
def test_workers_starts_a_local_cluster_with_the_same_answer(capsys, scenario):
    argv = ["cluster", scenario, "--repeat", "2"]
    assert run(capsys, [*argv, "--workers", "2"]) == run(capsys, argv)
    code = main([*argv, "--workers", "2", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["timing"]["ran_on"] == "2 local Dask workers"


def test_pool_map_keeps_the_order_of_the_pieces():
    assert InProcess().map(lambda x: x * x, [3, 1, 2]) == [9, 1, 4]
    assert chunks(5, 2) == [slice(0, 2), slice(2, 4), slice(4, 5)]
    with open_pool() as pool:
        assert isinstance(pool, InProcess) and pool.width == 1


def test_missing_dask_is_one_line_naming_the_extra(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed -> ImportError
    assert main([*SEARCH, "--workers", "2"]) == 2
    err = capsys.readouterr().err
    assert "pip install 'gpuplan[dask]'" in err and err.count("\n") == 1


@pytest.mark.parametrize(("flags", "words"), [
    (["--workers", "2", "--scheduler", "tcp://127.0.0.1:8786"], "exclude each other"),
    (["--workers", "100000"], "give 1 to 256"),
    (["--workers", "0"], "greater than zero"),
    (["--scheduler", " "], "give an address"),
    (["--scheduler", "foo"], "not a Dask scheduler address"),
    (["--scheduler", "xyz://host:1"], "not a Dask scheduler address"),
    (["--scheduler", "tcp://host:port"], "not a Dask scheduler address"),
])  # fmt: skip
def test_bad_pool_options_are_one_line_and_exit_code_2(capsys, flags, words):
    assert main([*SEARCH, *flags]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1
