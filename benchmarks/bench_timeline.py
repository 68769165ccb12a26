"""Step-timeline speed: one training step of a 1,024-GPU strategy simulated on simpy.

GPT-3 175B (96 layers) on 1,024 H100s (128 DGX H100 nodes): TP 8 x PP 16 x DP 8, 64 micro-batches
per replica (global batch 512 x 2,048 tokens), interleaved schedule with 3 model chunks per GPU,
gradient buckets behind the backward. Symmetric ranks are simulated once (16 GPUs, one per stage);
the same step with every replica (``all_ranks``, 128 simulated TP groups) is timed too. Target:
the symmetric step in under 2 s (the end-to-end time: pricing the kernels, building the plan and
the simulation). Prints the step time, the closed form's, events and events per second.

Then the scaling of ``gpuplan train ... --timeline step.json --all-ranks`` (the whole command:
estimate, simulation of every replica, trace written) with the world size, on Llama 3 405B's
layout (Dubey et al. 2024, "The Llama 3 Herd of Models", Table 4: TP 8 x PP 16 on 16,384 H100s,
16 sequences per data-parallel replica and step) applied to GPT-3 175B's 96 layers, with one
straggler (alike replicas simulated once and copied), then with kernel jitter too (every replica
simulated, its own draws): 1,024, 4,096 and 16,384 GPUs (DP 8, 32, 128). Target: linear in the
world size and under 10 s at 16,384 GPUs.

Run: ``python benchmarks/bench_timeline.py`` (``--scaling-only`` skips the first part).
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import tempfile
import time
from pathlib import Path

from gpuplan.sim.parallel import Strategy, estimate_training, get_cluster
from gpuplan.sim.runtime.timeline import simulate_step
from gpuplan.workloads.presets import get_model

TARGET_S = 2.0
SCALING_TARGET_S = 10.0  # the all-ranks command at 16,384 GPUs
WORLDS = (1024, 4096, 16384)


def main() -> None:
    cfg = get_model("gpt3-175b")
    cluster = get_cluster("dgx-h100")
    st = Strategy(tp=8, pp=16, dp=8, micro_batch=1, global_batch=512, schedule="interleaved",
                  virtual_stages=3)  # fmt: skip
    seq = 2048
    estimate_training(cfg, st, cluster=cluster, seq=seq)  # imports warmed; kernels priced once
    start = time.perf_counter()
    tl = simulate_step(cfg, st, cluster=cluster, seq=seq)
    wall_s = time.perf_counter() - start
    est = estimate_training(cfg, st, cluster=cluster, seq=seq)
    print(f"{cfg.name} on {st.world} x dgx-h100: {st.label}, {st.micro_batches} micro-batches")
    print(f"  step time (timeline)     {tl.step_time_s:10.4f} s")
    print(f"  step time (closed form)  {est.step_time_s:10.4f} s "
          f"({100 * (tl.step_time_s / est.step_time_s - 1):+.2f}%)")  # fmt: skip
    print(f"  bubble (mean of GPUs)    {100 * tl.bubble_fraction():10.1f} %")
    print(f"  simulated GPUs           {len(tl.gpus):10d}")
    print(f"  events                   {tl.events:10,}")
    print(f"  simulation               {tl.wall_s:10.3f} s ({tl.events / tl.wall_s:,.0f} events/s)")
    verdict = "met" if wall_s < TARGET_S else "MISSED"
    print(f"  end to end               {wall_s:10.3f} s (target < {TARGET_S} s: {verdict})")
    start = time.perf_counter()
    every = simulate_step(cfg, st, cluster=cluster, seq=seq, all_ranks=True)
    print(f"  all ranks: {len(every.gpus)} simulated, {every.events:,} events, "
          f"{time.perf_counter() - start:.2f} s, step {every.step_time_s:.4f} s")  # fmt: skip


def all_ranks_command(gpus: int, trace: Path, jitter: float) -> list[str]:
    """The all-ranks timeline at ``gpus`` GPUs: TP 8 x PP 16, 16 micro-batches per replica."""
    dp = gpus // 128
    return ["train", "--model", "gpt3-175b", "--cluster", "dgx-h100", "--gpus", str(gpus),
            "--tp", "8", "--pp", "16", "--dp", str(dp), "--global-batch", str(16 * dp),
            "--seq", "2048", "--schedule", "interleaved", "--virtual-stages", "3",
            "--timeline", str(trace), "--all-ranks", "--jitter", str(jitter), "--seed", "1",
            "--straggler", "12:0.1", "--json"]  # fmt: skip


def scaling(jitter: float) -> None:
    """Wall and CPU time of the whole all-ranks command against the world size."""
    from gpuplan.cli import main as cli

    print(f"all-ranks timeline, jitter {jitter} (the whole command, trace written):")
    print(f"  {'GPUs':>6} {'simulated':>9} {'events':>10} {'slices':>10} {'wall_s':>7} "
          f"{'cpu_s':>7} {'us/GPU':>7}")  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        for gpus in WORLDS:
            out = io.StringIO()
            wall, cpu = time.perf_counter(), time.process_time()
            with contextlib.redirect_stdout(out):
                code = cli(all_ranks_command(gpus, Path(tmp) / "step.json", jitter))
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            if code != 0:
                raise SystemExit(f"gpuplan train exited {code} at {gpus} GPUs")
            t = json.loads(out.getvalue())["timeline"]
            print(f"  {gpus:>6} {t['simulated_gpus']:>9} {t['events']:>10,} "
                  f"{t['trace_slices']:>10,} {wall:>7.2f} {cpu:>7.2f} {1e6 * wall / gpus:>7.0f}")  # fmt: skip
    verdict = "met" if wall < SCALING_TARGET_S else "MISSED"
    print(f"  at {WORLDS[-1]:,} GPUs: {wall:.2f} s (target < {SCALING_TARGET_S:.0f} s: {verdict})")


if __name__ == "__main__":
    if "--scaling-only" not in sys.argv:
        main()
    scaling(jitter=0.0)
    scaling(jitter=0.03)
