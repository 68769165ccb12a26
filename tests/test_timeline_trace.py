"""The Chrome/Perfetto trace: a process per GPU, a thread per stream, slices in microseconds;
and ``gpuplan train --timeline``."""

import json

from gpuplan.cli import main
from gpuplan.sim.parallel import Strategy, get_cluster
from gpuplan.sim.runtime.timeline import chrome_trace, simulate_step
from gpuplan.workloads.presets import get_model

H100 = get_cluster("dgx-h100")


def small_timeline(all_ranks=False):
    cfg = get_model("llama2-7b")
    st = Strategy(tp=2, pp=2, dp=2, global_batch=8)
    return simulate_step(cfg, st, cluster=H100, seq=2048, all_ranks=all_ranks)


def test_a_trace_has_a_process_per_simulated_gpu_and_a_thread_per_stream():
    tl = small_timeline()
    doc = chrome_trace(tl)
    names = [e for e in doc["traceEvents"] if e["name"] == "process_name"]
    assert len(names) == len(tl.gpus) == 2
    threads = {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    assert {"compute", "tp", "pp", "dp"} <= threads
    slices = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    end_us = max(e["ts"] + e["dur"] for e in slices)
    assert abs(end_us - 1e6 * tl.step_time_s) < 1.0  # microseconds
    assert {"gemm", "attention", "communication"} & {e["cat"] for e in slices}


def test_all_ranks_draws_every_gpu_of_the_world():
    doc = chrome_trace(small_timeline(all_ranks=True))
    pids = {e["pid"] for e in doc["traceEvents"] if e["ph"] == "X"}
    assert pids == set(range(8))


def test_step_detail_draws_fewer_slices_than_kernel_detail():
    tl = small_timeline()
    kernel = [e for e in chrome_trace(tl)["traceEvents"] if e["ph"] == "X"]
    step = [e for e in chrome_trace(tl, detail="step")["traceEvents"] if e["ph"] == "X"]
    assert len(step) < len(kernel)


def test_train_timeline_writes_a_trace_and_reports_it(tmp_path, capsys):
    out = tmp_path / "step.json"
    code = main(["train", "--model", "llama3-8b", "--gpus", "16", "--tp", "2", "--pp", "4",
                 "--global-batch", "32", "--seq", "2048", "--timeline", str(out),
                 "--straggler", "3:0.2", "--json"])  # fmt: skip
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and out.exists()
    t = doc["timeline"]
    assert t["trace"] == str(out) and t["trace_slices"] > 0 and t["step_time_s"] > 0
    assert json.loads(out.read_text())["traceEvents"]


def test_train_timeline_bad_straggler_is_one_line(capsys):
    code = main(["train", "--model", "llama3-8b", "--gpus", "8", "--tp", "2", "--pp", "2",
                 "--timeline", "x.json", "--straggler", "99:0.1"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "straggler rank=99 is invalid" in err and err.count("\n") == 1
