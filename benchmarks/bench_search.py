"""Strategy-search speed on one core: strategies evaluated per second, and a whole space's time.

1. Llama-3 70B on 1,024 H100s (DGX H100 nodes), global batch 1,024 x 4,096 tokens: every valid
   strategy (TP, CP, PP, DP, micro-batch, schedule and virtual stages, recomputation, ZeRO stage,
   sequence parallelism, bf16/fp8) evaluated with numpy; prints strategies per second for the
   evaluation (the part that scales with the space) and end to end (pricing of the distinct
   kernel shapes included). Target: at least 100,000 per second.
2. GPT-3 175B on 1,024 A100s (DGX A100 nodes, Narayanan et al. 2021's setting), global batch
   1,536 x 2,048: the whole space, start to finish. Target: under a minute.
3. DeepSeek-V3 (MoE: 256 routed experts, 61 layers, so every pipeline but 1 and 61 stages is an
   uneven split) on 2,048 H100s (DGX H100 nodes; DeepSeek-V3 ran 2,048 H800s, which the
   catalogue does not hold), global batch 1,920 x 4,096 (DeepSeek-V3 ramped to 15,360
   sequences: arXiv:2412.19437, sec. 4.2; the smaller batch keeps the run short). Target: at
   least 20,000 per second end to end.

All searches are the default space: bf16 only (``--precision bf16``).

Run: ``python benchmarks/bench_search.py`` (pin one core with ``taskset -c 0`` to be strict).
On a shared machine the wall time includes what other processes took of the core; the CPU time
of the search (``time.process_time``) is printed beside it. ``--repeat N`` runs each search N
times in this process (each a whole search: its kernel table and caches are its own) and prints
the median and the best of the N, CPU and wall; the first run also pays the lazy imports.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

# one core: keep numpy's BLAS from spreading out (the evaluation is elementwise anyway)
for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(var, "1")

# the search returns pandas frames, and imports pandas when it first builds one (so that
# `serve plan`, which needs none, never loads it): import it here, outside the timed search, as
# every process that reads a search's result does once (about 0.5 s of CPU on this machine)
import pandas  # noqa: E402, F401

from gpuplan.sim.parallel.search import search  # noqa: E402
from gpuplan.sim.parallel.topology import get_cluster  # noqa: E402
from gpuplan.workloads.presets import get_model  # noqa: E402

CALCULON_PER_S = 136  # the figure for Calculon's search on this machine
DENSE_TARGET_PER_S = 100_000  # end to end, one core (issue 12's target)
MOE_TARGET_PER_S = 20_000


def run(model: str, cluster: str, gpus: int, global_batch: int, seq: int,
        target_per_s: float, repeat: int = 1) -> None:  # fmt: skip
    cfg = get_model(model)
    walls, cpus = [], []
    for _ in range(repeat):
        start, cpu_start = time.perf_counter(), time.process_time()
        result = search(
            cfg, cluster=get_cluster(cluster), gpus=gpus, global_batch=global_batch, seq=seq
        )
        walls.append(time.perf_counter() - start)
        cpus.append(time.process_time() - cpu_start)
    wall_s, cpu_s = statistics.median(walls), statistics.median(cpus)
    best = result.frame.iloc[0]
    print(f"{model} on {gpus} x {cluster}, global batch {global_batch} x {seq}")
    print(f"  strategies evaluated     {result.evaluated:>12,}")
    print(f"  fit in memory            {result.fitting:>12,}")
    print(f"  kernel shapes priced     {result.shapes_priced:>12,}  in {result.pricing_s:.2f} s")
    print(
        f"  evaluation               {result.evaluation_s:>12.3f} s  "
        f"= {result.strategies_per_s:,.0f} strategies/s "
        f"({result.strategies_per_s / CALCULON_PER_S:,.0f}x Calculon's {CALCULON_PER_S}/s)"
    )
    runs = f" (median of {repeat})" if repeat > 1 else ""
    met = "met" if result.evaluated / wall_s >= target_per_s else "NOT met"
    print(
        f"  end to end{runs:<15}{wall_s:>12.3f} s  "
        f"= {result.evaluated / wall_s:,.0f} strategies/s (target {target_per_s:,.0f}/s: {met})"
    )
    print(  # what this process computed: the wall time less the time other processes held the core
        f"  end to end, CPU time     {cpu_s:>12.3f} s  = {result.evaluated / cpu_s:,.0f} strategies/s"
    )
    if repeat > 1:
        print(
            f"  best of {repeat:<17}{min(walls):>12.3f} s wall = "
            f"{result.evaluated / min(walls):,.0f}/s; {min(cpus):.3f} s CPU = "
            f"{result.evaluated / min(cpus):,.0f}/s"
        )
    print(
        f"  fastest: tp{best.tp} pp{best.pp} dp{best.dp} cp{best.cp} mb{best.micro_batch} "
        f"{best.schedule}(v={best.virtual_stages}) rc:{best.recompute} zero{best.zero} "
        f"{best.precision}: {best.step_time_s:.2f} s/step, MFU {100 * best.mfu:.1f}%"
    )
    print()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1, help="runs of each search (median)")
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error(f"--repeat={args.repeat} is invalid: at least 1 run")
    run("llama3-70b", "dgx-h100", 1024, 1024, 4096, DENSE_TARGET_PER_S, args.repeat)
    run("gpt3-175b", "dgx-a100", 1024, 1536, 2048, DENSE_TARGET_PER_S, args.repeat)
    run("deepseek-v3", "dgx-h100", 2048, 1920, 4096, MOE_TARGET_PER_S, args.repeat)
