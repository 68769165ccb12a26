"""Step-timeline speed: one training step of a 1,024-GPU strategy simulated on simpy.

GPT-3 175B (96 layers) on 1,024 H100s (128 DGX H100 nodes): TP 8 x PP 16 x DP 8, 64 micro-batches
per replica (global batch 512 x 2,048 tokens), interleaved schedule with 3 model chunks per GPU,
gradient buckets behind the backward. Symmetric ranks are simulated once (16 GPUs, one per stage);
the same step with every replica (``all_ranks``, 128 simulated TP groups) is timed too. Target:
the symmetric step in under 2 s (the end-to-end time: pricing the kernels, building the plan and
the simulation). Prints the step time, the closed form's, events and events per second.

Run: ``python benchmarks/bench_timeline.py``.
"""

from __future__ import annotations

import time

from gpuplan.sim.parallel import Strategy, estimate_training, get_cluster
from gpuplan.sim.timeline import simulate_step
from gpuplan.workloads.presets import get_model

TARGET_S = 2.0


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
    print(f"  bubble (last GPU)        {100 * tl.bubble_fraction():10.1f} %")
    print(f"  simulated GPUs           {len(tl.gpus):10d}")
    print(f"  events                   {tl.events:10,}")
    print(f"  simulation               {tl.wall_s:10.3f} s ({tl.events / tl.wall_s:,.0f} events/s)")
    verdict = "met" if wall_s < TARGET_S else "MISSED"
    print(f"  end to end               {wall_s:10.3f} s (target < {TARGET_S} s: {verdict})")
    start = time.perf_counter()
    every = simulate_step(cfg, st, cluster=cluster, seq=seq, all_ranks=True)
    print(f"  all ranks: {len(every.gpus)} simulated, {every.events:,} events, "
          f"{time.perf_counter() - start:.2f} s, step {every.step_time_s:.4f} s")  # fmt: skip


if __name__ == "__main__":
    main()
