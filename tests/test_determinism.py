"""Same inputs and seed, same bytes, whatever PYTHONHASHSEED; serving conserves its requests."""

import json
import os
import subprocess
import sys
from collections import deque

import numpy as np
import pytest

from gpuplan.cli import main
from gpuplan.sim.runtime.serving.metrics import conservation, request_frame
from gpuplan.sim.runtime.serving.request_table import RequestTable
from gpuplan.sim.runtime.serving.requests import Workload
from gpuplan.sim.runtime.serving.state import ReplicaState

SCENARIO = """\
name: small
description: 64 H100s for two days
seed: 0
horizon_days: 2
cluster: {preset: dgx-h100, nodes: 8}
scheduler: {policy: backfill, placement: topology}
failures: {rates: default}
trace:
  generate: {jobs: 40, load: 1.2, seed: 1}
variants:
  - name: fifo-random
    scheduler: {policy: fifo, placement: random}
"""
SERVE = ["serve", "--model", "llama3-8b", "--gpu", "h200", "--rate", "40", "--prompt-tokens",
         "uniform:64:512", "--output-tokens", "uniform:8:64", "--requests", "150", "--seed", "3",
         "--horizon-s", "2.5"]  # fmt: skip
WALL_CLOCK = {"wall_s", "pricing_s", "evaluation_s", "strategies_per_s", "timeline_wall_s"}
COMMANDS = {
    "serve": [*SERVE, "--json"],
    "serve-disaggregated-table": [*SERVE, "--disaggregate", "1:2"],
    "serve-plan": ["serve", "plan", "--model", "llama3-8b", "--gpu", "h200", "--rate", "4",
                   "--slo-ttft-s", "0.5", "--slo-tpot-s", "0.05", "--requests", "60", "--tp", "1",
                   "--max-seqs", "64", "--prompt-tokens", "256", "--output-tokens", "32",
                   "--no-disaggregation", "--json"],  # fmt: skip
    "cluster": ["cluster", "{scenario}", "--repeat", "2", "--seed", "3", "--json"],
    "train-timeline": ["train", "--model", "llama3-8b", "--gpus", "16", "--tp", "2", "--pp", "2",
                       "--global-batch", "16", "--seq", "2048", "--timeline", "step.json",
                       "--jitter", "0.05", "--seed", "4", "--json"],  # fmt: skip
    "search": ["search", "train", "--model", "llama3-8b", "--gpus", "8", "--global-batch", "16",
               "--seq", "2048", "--top", "3", "--json"],  # fmt: skip
}


def wall_clock_keys(doc, path="") -> list[str]:
    """Keys of wall-clock figures anywhere in a document, outside its ``timing`` object."""
    if isinstance(doc, dict):
        return [hit for k, v in doc.items() if k != "timing"
                for hit in ([f"{path}/{k}"] if k in WALL_CLOCK else wall_clock_keys(v, f"{path}/{k}"))]  # fmt: skip
    if isinstance(doc, list):
        return [hit for i, v in enumerate(doc) for hit in wall_clock_keys(v, f"{path}/{i}")]
    return []


@pytest.mark.slow
@pytest.mark.parametrize("name", list(COMMANDS))
def test_the_same_seed_prints_the_same_bytes_whatever_the_hash_seed(name, tmp_path):
    scenario = tmp_path / "small.yaml"
    scenario.write_text(SCENARIO)
    argv = [a.format(scenario=scenario) for a in COMMANDS[name]] + ["--no-timing"]
    procs = []
    for hash_seed in ("1", "4242"):  # both at once: the machine has two cores
        cwd = tmp_path / f"hash{hash_seed}"
        cwd.mkdir()
        env = os.environ | {"PYTHONHASHSEED": hash_seed}
        procs.append(subprocess.Popen([sys.executable, "-m", "gpuplan.cli", *argv], cwd=cwd,
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE))  # fmt: skip
    (out1, err1), (out2, err2) = (p.communicate(timeout=300) for p in procs)
    assert procs[0].returncode == 0 and procs[1].returncode == 0, err1 + err2
    assert out1 == out2 and len(out1) > 200
    if "--json" in argv:
        assert wall_clock_keys(json.loads(out1)) == []
    else:
        assert b"conservation checks:" in out1 and b" ms" not in out1.split(b"\n")[2]
    if "--timeline" in argv:
        trace1, trace2 = (tmp_path / f"hash{h}" / "step.json" for h in ("1", "4242"))
        assert trace1.read_bytes() == trace2.read_bytes()


def test_wall_clock_figures_are_only_in_the_timing_object(capsys):
    assert main([*SERVE, "--requests", "40", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["timing"]["wall_s"] > 0 and wall_clock_keys(doc) == []
    assert main([*SERVE, "--requests", "40"]) == 0
    assert "simulated 2.5 s in " in capsys.readouterr().out
    assert main([*SERVE, "--requests", "40", "--no-timing"]) == 0
    out = capsys.readouterr().out
    assert "simulated 2.5 s\n" in out and "timing" not in out


@pytest.mark.parametrize("layout", [[], ["--disaggregate", "1:2"]])
def test_serve_accounts_for_every_request_in_json_and_table(capsys, layout):
    assert main([*SERVE, *layout, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    c = doc["conservation"]
    assert c["ok"] and c["requests"] == 150
    parts = ("finished", "running", "queued", "rejected", "transferring", "not_arrived")
    assert sum(c[k] for k in parts) == 150
    # the horizon cuts the run short: some are still in the system, some have not arrived
    assert c["running"] + c["queued"] + c["transferring"] == doc["in_flight"] > 0
    assert c["not_arrived"] > 0 and c["finished"] == doc["finished"]
    assert main([*SERVE, *layout, "--no-timing"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("conservation"))
    assert line.startswith("conservation checks: 150 requests = ") and line.endswith(": ok")
    assert f"{c['finished']:,} finished" in line and f"{c['running']:,} running" in line


def test_cluster_repeat_draws_a_trace_per_seed_without_variants(tmp_path, capsys):
    path = tmp_path / "plain.yaml"
    path.write_text(SCENARIO.split("variants:")[0])  # no variants: --repeat shifts the trace seed
    assert main(["cluster", str(path), "--repeat", "2", "--json", "--no-timing"]) == 0
    (run,) = json.loads(capsys.readouterr().out)["runs"]
    first, second = run["repeats"]
    assert first != second and run["conservation"]["ok"]


def _replica(table) -> ReplicaState:
    return ReplicaState(0, table, total_blocks=100, block_tokens=16, block_bytes=1.0, max_seqs=8)


def test_serving_conservation_fails_on_a_request_counted_twice_or_nowhere():
    load = Workload(arrival_s=np.zeros(3), prompt_tokens=np.full(3, 100),
                    output_tokens=np.full(3, 10))  # fmt: skip
    table = RequestTable(load)
    table.replica = [0, 0, 0]
    frame = request_frame(table, end_s=1.0)  # all three in flight
    st = _replica(table)
    for rid in (0, 1, 2):
        st.enqueue(rid)
    assert conservation(frame, table, [st])["queued"] == 3  # consistent: passes
    st.waiting = deque([0, 1])  # request 2 lost
    with pytest.raises(RuntimeError, match="unaccounted"):
        conservation(frame, table, [st])
    st.waiting = deque([0, 1, 2])
    st.prefilling = [2]  # request 2 queued and running at once
    with pytest.raises(RuntimeError, match="counted_twice"):
        conservation(frame, table, [st])
