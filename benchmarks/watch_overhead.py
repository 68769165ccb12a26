"""What ``gpuplan watch`` costs the machine it runs on: the CPU share of one core it takes while
(a) following a 10,000-step torchtitan log that keeps growing (10 steps a second), and (b)
polling a live Prometheus endpoint (prometheus-client, vLLM's metric names) every second.

The share is the watch process's user + system CPU time (/proc/PID/stat) over the wall time of
the steady period, after its start-up (the import and the first read of the whole log) is done.

    python3 benchmarks/watch_overhead.py [--seconds 30]

Target (the monitoring issue): under 1% of one core for each. Linux only (/proc).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from wsgiref.simple_server import WSGIRequestHandler, make_server

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "watch"
TICK_S = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK_S  # utime, stime


def _line(step: int) -> str:
    return (f"[rank0]:[titan] 2025-06-01 10:00:00,000 - root - INFO - step: {step:2}  loss:  "
            f"2.1000  memory: 62.41GiB(78.37%)  tps: 9,400  tflops: 471.20  mfu: 47.63%\n")


def _share(cmd: list[str], seconds: float, settle_s: float, feed) -> tuple[float, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    stop = threading.Event()
    feeder = threading.Thread(target=feed, args=(stop,), daemon=True)
    feeder.start()
    time.sleep(settle_s)  # start-up: imports, the first read
    c0, t0 = cpu_s(proc.pid), time.monotonic()
    time.sleep(seconds)
    c1, t1 = cpu_s(proc.pid), time.monotonic()
    stop.set()
    proc.terminate()
    out, _ = proc.communicate(timeout=30)
    return (c1 - c0) / (t1 - t0), out.decode()[:200]


def follow_log(seconds: float) -> float:
    tmp = Path(tempfile.mkdtemp()) / "train.log"
    tmp.write_text("".join(_line(s) for s in range(1, 10_001)))

    def grow(stop):
        step = 10_001
        while not stop.is_set():
            with tmp.open("a") as fh:
                fh.write(_line(step))
            step += 1
            time.sleep(0.1)

    cmd = [sys.executable, "-m", "gpuplan.cli", "watch", str(DATA / "plan_llama3_8b_8xh100.json"),
           str(tmp), "--follow", "--interval-s", "1", "--window", "1000000000"]
    share, _ = _share(cmd, seconds, 5.0, grow)
    return share


def poll_endpoint(seconds: float) -> float:
    import prometheus_client as prom

    reg = prom.CollectorRegistry()
    ttft = prom.Histogram("vllm:time_to_first_token_seconds", "TTFT", registry=reg)
    gen = prom.Counter("vllm:generation_tokens", "tokens", registry=reg)

    class Quiet(WSGIRequestHandler):
        def log_message(self, *args):
            pass

    server = make_server("127.0.0.1", 0, prom.make_wsgi_app(reg), handler_class=Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()

    def traffic(stop):
        while not stop.is_set():
            ttft.observe(0.03)
            gen.inc(85)
            time.sleep(0.1)

    cmd = [sys.executable, "-m", "gpuplan.cli", "watch",
           str(DATA / "plan_serve_llama3_8b_h200.json"),
           f"http://127.0.0.1:{server.server_port}/metrics", "--interval-s", "1",
           "--window", "1000000000"]  # fmt: skip
    share, _ = _share(cmd, seconds, 5.0, traffic)
    server.shutdown()
    return share


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    result = {"follow_log_cpu_share": follow_log(args.seconds),
              "poll_endpoint_cpu_share": poll_endpoint(args.seconds), "seconds": args.seconds}
    if args.json:
        print(json.dumps(result))
    else:
        print(f"following a 10,000-step log growing 10 steps/s: {100 * result['follow_log_cpu_share']:.2f}% of one core")
        print(f"polling /metrics every second:                 {100 * result['poll_endpoint_cpu_share']:.2f}% of one core")
        print(f"(steady state over {args.seconds:g} s; target < 1%)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
