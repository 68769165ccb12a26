"""The three sweeps in this process and on a local Dask cluster of two worker processes.

1. ``search train``: GPT-3 175B on 1,024 A100s (DGX A100 nodes), global batch 1,536 x 2,048,
   every strategy (the pricing of the distinct kernel shapes and the evaluation, in pieces);
2. ``serve plan``: Llama-3 8B on H200 at 20 requests/s, TTFT p99 <= 0.3 s, TPOT p99 <= 50 ms,
   1,000 requests per simulation (candidates simulated two at a time);
3. ``cluster --repeat 8``: the Llama 3 405B scenario (16,384 H100s, 54 days) at eight seeds.

For each: the wall time in this process, on two workers with the cluster already running (and
gpuplan imported there), and with the cluster's start, imports and stop counted; the speed-ups;
and whether the answers are the same (they must be: the pieces are fixed and merged in order).
The sweeps here take seconds, so the start of a cluster weighs as much as the work; a running
cluster (``--scheduler``) does not pay it. Needs ``pip install 'gpuplan[dask]'``.

Run: ``python benchmarks/bench_dask.py [--workers N]``.
"""

from __future__ import annotations

import argparse
import os
import time

# one thread per process: the workers are the parallelism
for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(var, "1")


def search_sweep(pool):
    from gpuplan.sim.parallel.search import search
    from gpuplan.sim.parallel.topology import get_cluster
    from gpuplan.workloads.presets import get_model

    result = search(get_model("gpt3-175b"), cluster=get_cluster("dgx-a100"), gpus=1024,
                    global_batch=1536, seq=2048, pool=pool)  # fmt: skip
    return result.frame, f"{result.evaluated:,} strategies"


def plan_sweep(pool):
    from gpuplan.sim.runtime.serving.plan import plan
    from gpuplan.sim.runtime.serving.plan_space import Slo
    from gpuplan.sim.runtime.serving.requests import make_workload

    load = make_workload(rate_per_s=20.0, n=1000, prompt_tokens=1024, output_tokens=256, seed=0)
    result = plan("llama3-8b", "h200", rate_per_s=20.0, slo=Slo(ttft_s=0.3, tpot_s=0.05),
                  lengths=(load.prompt_tokens, load.output_tokens), requests=load.n, pool=pool)  # fmt: skip
    return result.evaluated, f"{len(result.evaluated)} candidates simulated"


def _one_seed(seed: int):
    from gpuplan.sim.runtime.cluster import run_scenario

    return [{k: v for k, v in r.summary.items() if k != "wall_s"}
            for r in run_scenario("llama3-405b", seed=seed)]  # fmt: skip


def cluster_sweep(pool):
    return pool.map(_one_seed, list(range(8))), "8 seeds"


def timed(fn, *args):
    start = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - start


def same(a, b) -> bool:
    from gpuplan.tables import dump_json

    return dump_json(a) == dump_json(b)  # NaN as null: NaN != NaN


def warm_up() -> None:
    """What a worker imports before its first piece (counted in the cluster's start)."""
    import gpuplan.sim.parallel.search
    import gpuplan.sim.runtime.cluster
    import gpuplan.sim.runtime.serving.plan  # noqa: F401


def main() -> None:
    from gpuplan.sim.sweep import InProcess, open_pool

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    workers = parser.parse_args().workers
    sweeps = (("search train", search_sweep), ("serve plan", plan_sweep),
              ("cluster --repeat 8", cluster_sweep))  # fmt: skip
    load = os.getloadavg()[0]
    here = {name: timed(fn, InProcess()) for name, fn in sweeps}
    start = time.perf_counter()
    with open_pool(workers=workers) as pool:
        pool.client.run(warm_up)
        started_s = time.perf_counter() - start
        there = {name: timed(fn, pool) for name, fn in sweeps}
        stop = time.perf_counter()
    stopped_s = time.perf_counter() - stop
    print(f"{os.cpu_count()} CPU cores; local Dask cluster of {workers} workers: started in "
          f"{started_s:.1f} s, stopped in {stopped_s:.1f} s; load average {load:.1f} at the start\n")  # fmt: skip
    print(f"{'sweep':20s} {'work':>26s} {'in-process':>11s} {'on workers':>11s} "
          f"{'speed-up':>9s} {'with start':>11s} {'speed-up':>9s}  same answer")  # fmt: skip
    for name, _fn in sweeps:
        (a, what), t_here = here[name]
        (b, _), t_there = there[name]
        # the cluster's start and stop, shared by the three sweeps, counted once for each
        t_cold = t_there + started_s + stopped_s
        print(f"{name:20s} {what:>26s} {t_here:10.2f}s {t_there:10.2f}s {t_here / t_there:8.2f}x "
              f"{t_cold:10.2f}s {t_here / t_cold:8.2f}x  {'yes' if same(a, b) else 'NO'}")  # fmt: skip


if __name__ == "__main__":  # worker processes re-import this file
    main()
