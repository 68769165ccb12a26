"""``gpuplan watch``: real log formats read, a run held against its plan's bands, drift
attributed, a growing log followed, and a live Prometheus endpoint (prometheus-client) polled."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from wsgiref.simple_server import WSGIRequestHandler, make_server

import pytest

from gpuplan.cli import main
from gpuplan.validate.watch.logs import parse_line
from gpuplan.validate.watch.prometheus import between, parse_text

DATA = Path(__file__).parent / "data" / "watch"
PLAN = str(DATA / "plan_llama3_8b_8xh100.json")
SERVE_PLAN = str(DATA / "plan_serve_llama3_8b_h200.json")


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_each_framework_line_is_read():
    titan = parse_line("[rank0]:[titan] 2025-06-01 10:00:01,007 - root - INFO - \x1b[31mstep:  7  "
                       "\x1b[32mloss:  9.9500  \x1b[33mmemory: 62.41GiB(78.37%)  \x1b[34mtps: 9,123"
                       "  \x1b[36mtflops: 471.20  \x1b[35mmfu: 47.63%\x1b[39m")  # fmt: skip
    assert titan.source == "torchtitan" and titan.step == 7 and titan.tokens_per_s_per_gpu == 9123
    assert titan.peak_memory_bytes == pytest.approx(62.41 * 2**30) and titan.mfu == pytest.approx(0.4763)
    mega = parse_line(" [2025-08-01 07:19:37] iteration        2/    5000 | consumed samples:"
                      "          256 | elapsed time per iteration (ms): 12936.1 | throughput per GPU"
                      " (TFLOP/s/GPU): 118.7 | learning rate: 1.395349E-07 | global batch size:   128 |")  # fmt: skip
    assert mega.source == "megatron" and mega.step == 2 and mega.step_time_s == pytest.approx(12.9361)
    assert mega.tflops_per_gpu == pytest.approx(118.7)
    mem = parse_line("[Rank 0] (after 1 iterations) memory (MB) | allocated: 10770.3 | max allocated:"
                     " 15754.9 | reserved: 16334.0 | max reserved: 16334.0")  # fmt: skip
    assert mem.peak_memory_bytes == pytest.approx(16334.0 * 2**20) and mem.step is None
    hf = parse_line("{'train_runtime': 120.0, 'train_samples_per_second': 8.0, "
                    "'train_steps_per_second': 0.5, 'train_loss': 2.3, 'epoch': 1.0}")  # fmt: skip
    assert hf.source == "hf-trainer" and hf.step_time_s == pytest.approx(2.0) and hf.whole_run
    assert parse_line("{'loss': 2.3, 'grad_norm': 1.0, 'learning_rate': 5e-05, 'epoch': 0.1}").step_time_s is None
    assert parse_line('{"step": 3, "step_time_s": 1.5}').step_time_s == 1.5
    assert parse_line("NCCL INFO Channel 00/32") is None


@pytest.mark.parametrize("log", ["torchtitan_on_plan.log", "megatron_on_plan.log",
                                 "hf_trainer.log", "steps.jsonl"])  # fmt: skip
def test_a_run_on_plan_exits_0(capsys, log):
    code, out, _ = run(capsys, "watch", PLAN, str(DATA / log), "--json")
    doc = json.loads(out)
    assert code == 0 and not doc["breached"] and doc["records"] > 0
    step = next(f for f in doc["figures"] if f["name"] == "step_time_s")
    assert step["status"] == "inside"


def test_a_run_that_leaves_its_band_exits_1_and_names_the_layer(capsys):
    slow = str(DATA / "torchtitan_slow.log")
    code, out, _ = run(capsys, "watch", PLAN, slow, "--json")
    doc = json.loads(out)
    assert code == 1 and doc["breached"] and doc["stopped"] == "left its band"
    assert next(f for f in doc["figures"] if f["name"] == "step_time_s")["status"] == "above"
    assert "profiler trace" in doc["attribution"]  # no trace: it says what it would need
    code, out, _ = run(capsys, "watch", PLAN, slow, "--json", "--profile",
                       str(DATA / "profile_one_step.json"))  # fmt: skip
    assert code == 1 and json.loads(out)["attribution"].startswith("communication")
    # a window longer than the slow stretch: no breach
    code, _, _ = run(capsys, "watch", PLAN, slow, "--window", "100")
    assert code == 0


def test_follow_tails_a_growing_log(capsys, tmp_path):
    log = tmp_path / "train.log"
    lines = (DATA / "torchtitan_on_plan.log").read_text().splitlines(keepends=True)
    log.write_text("".join(lines[:5]))

    def grow():
        for line in lines[5:]:
            time.sleep(0.002)
            with log.open("a") as fh:
                fh.write(line)

    writer = threading.Thread(target=grow)
    writer.start()
    code, out, _ = run(capsys, "watch", PLAN, str(log), "--follow", "--interval-s", "0.05",
                       "--idle-s", "0.5", "--json")  # fmt: skip
    writer.join()
    doc = json.loads(out)
    assert code == 0 and doc["last_step"] == 60 and doc["stopped"].startswith("no new lines")


def test_bad_input_is_one_line(capsys, tmp_path):
    code, _, err = run(capsys, "watch", str(tmp_path / "none.json"), str(DATA / "steps.jsonl"))
    assert code == 2 and err.count("\n") == 1 and "PLAN=" in err
    junk = tmp_path / "junk.log"
    junk.write_text("hello\nworld\n")
    code, _, err = run(capsys, "watch", PLAN, str(junk))
    assert code == 2 and "none of its 2 lines" in err
    code, _, err = run(capsys, "watch", PLAN, "http://127.0.0.1:9/metrics")
    assert code == 2 and "training plan" in err
    bad = tmp_path / "infeasible.json"
    bad.write_text(json.dumps({"feasible": False, "does_not_fit": "x"}))
    code, _, err = run(capsys, "watch", str(bad), str(DATA / "steps.jsonl"))
    assert code == 2 and "does not fit" in err


def test_prometheus_text_between_two_polls():
    a = parse_text('vllm:time_to_first_token_seconds_sum{model_name="m"} 1.0\n'
                   'vllm:time_to_first_token_seconds_count{model_name="m"} 10\n'
                   "vllm:generation_tokens_total 100\n")  # fmt: skip
    b = parse_text('vllm:time_to_first_token_seconds_sum{model_name="m"} 4.0\n'
                   'vllm:time_to_first_token_seconds_count{model_name="m"} 20\n'
                   "vllm:generation_tokens_total 600\nvllm:num_requests_waiting 3\n")  # fmt: skip
    poll = between(a, b, 2.0, 2.0)
    assert poll.ttft_s == pytest.approx(0.3) and poll.output_tokens_per_s == 250 and poll.waiting == 3


class _Quiet(WSGIRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture
def engine():
    """A local /metrics endpoint with vLLM's metric names (prometheus-client)."""
    prom = pytest.importorskip("prometheus_client")
    reg = prom.CollectorRegistry()
    m = {
        "ttft": prom.Histogram("vllm:time_to_first_token_seconds", "TTFT", registry=reg),
        "itl": prom.Histogram("vllm:inter_token_latency_seconds", "ITL", registry=reg),
        "waiting": prom.Gauge("vllm:num_requests_waiting", "waiting", registry=reg),
        "kv": prom.Gauge("vllm:kv_cache_usage_perc", "kv", registry=reg),
        "gen": prom.Counter("vllm:generation_tokens", "tokens", registry=reg),
    }
    server = make_server("127.0.0.1", 0, prom.make_wsgi_app(reg), handler_class=_Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield m, f"http://127.0.0.1:{server.server_port}/metrics"
    server.shutdown()


def _traffic(m, stop, *, ttft_s, waiting):
    last = time.monotonic()
    while not stop.is_set():
        for _ in range(5):
            m["ttft"].observe(ttft_s)
            m["itl"].observe(0.0055)
        now = time.monotonic()
        m["gen"].inc(850 * (now - last))  # the plan's ~850 output tokens/s
        last = now
        m["waiting"].set(waiting)
        m["kv"].set(0.4)
        time.sleep(0.01)


@pytest.mark.parametrize("ttft_s,waiting,code,layer", [(0.03, 0, 0, "no drift"),
                                                       (2.5, 40, 1, "queueing")])  # fmt: skip
def test_a_live_endpoint_is_polled_and_judged(capsys, engine, ttft_s, waiting, code, layer):
    m, url = engine
    stop = threading.Event()
    feeder = threading.Thread(target=_traffic, args=(m, stop), kwargs={"ttft_s": ttft_s,
                                                                       "waiting": waiting})  # fmt: skip
    feeder.start()
    try:
        got, out, _ = run(capsys, "watch", SERVE_PLAN, url, "--interval-s", "0.1",
                          "--duration-s", "1.5", "--window", "3", "--warmup", "1", "--json")  # fmt: skip
    finally:
        stop.set()
        feeder.join()
    doc = json.loads(out)
    assert got == code and doc["polls"] >= 3 and doc["attribution"].startswith(layer)
    assert next(f for f in doc["figures"] if f["name"] == "ttft_s")["measured"] == pytest.approx(ttft_s)


def test_more_bad_input_is_one_line(capsys, tmp_path):
    code, _, err = run(capsys, "watch", PLAN, str(DATA / "steps.jsonl"), "--warmup", "-1")
    assert code == 2 and "--warmup=-1" in err
    plan = json.loads(Path(PLAN).read_text())
    plan["step_time_s"] = "fast"
    bad = tmp_path / "plan.json"
    bad.write_text(json.dumps(plan))
    code, _, err = run(capsys, "watch", str(bad), str(DATA / "steps.jsonl"))
    assert code == 2 and err.count("\n") == 1 and "plan field step_time_s" in err
    code, _, err = run(capsys, "watch", SERVE_PLAN, "http://127.0.0.1:9/metrics",
                       "--duration-s", "1")  # fmt: skip
    assert code == 2 and err.count("\n") == 1 and "does not answer" in err


def test_a_plan_not_an_object_or_a_serving_plan_held_against_a_log_is_one_line(capsys, tmp_path):
    steps = str(DATA / "steps.jsonl")
    not_object = tmp_path / "list.json"
    not_object.write_text("[1, 2]")
    code, _, err = run(capsys, "watch", str(not_object), steps)
    assert code == 2 and err.count("\n") == 1 and "a JSON object is expected" in err
    code, _, err = run(capsys, "watch", SERVE_PLAN, steps)
    assert code == 2 and err.count("\n") == 1 and "is a serving plan: give the engine's" in err
