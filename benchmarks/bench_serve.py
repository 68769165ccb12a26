"""Serving-simulator speed: simulated requests per second, and a million requests end to end.

1. Vidur's setting: Llama-2-7B on one A100 (80 GB SXM) at TP1, 4,096 requests arriving as a
   Poisson process at 4 requests/s, conversation-like lengths (gpuplan's ``conversation`` preset:
   lognormal fits to the Azure LLM inference trace 2023, conversation, as Vidur ships it in
   ``splitwise_conv.csv``: prompt median 894 and p90 1,314 tokens, output median 197 and p90 425,
   prompt + output at most 4,096), continuous batching with at most 128 sequences. Prints the
   wall time (step-model build and simulation included, one cold start), the CPU time of this
   process (the figure that holds on a shared machine) and simulated requests per second, then
   the marginal rate: 4,096 more requests (8,192 against 4,096, both cold, the least CPU time
   of three runs each), so the step model's warm-up is left out. Target: at least 5,000 per
   second marginal on one core (Vidur: about 500 on this machine).
2. A million requests of the same kind across 16 such replicas (64 requests/s, round robin),
   with a progress bar; the timeline is not kept (16 x 2 million rows). Target: under 5 minutes.

Run: ``python benchmarks/bench_serve.py [--skip-million]``.
"""

from __future__ import annotations

import argparse
import time

from gpuplan.sim.runtime.serving.deployment import SchedulerConfig, deployment
from gpuplan.sim.runtime.serving.engine import simulate
from gpuplan.sim.runtime.serving.requests import make_workload

VIDUR_PER_S = 500  # the figure for Vidur on this setting and machine
TARGET_PER_S = 5_000
MILLION_TARGET_S = 300.0


def vidur_setting(n: int, rate_per_s: float, replicas: int, *, progress: bool):
    """(result, wall seconds, CPU seconds) of one cold run."""
    dep = deployment("llama2-7b", "a100-sxm-80gb", tp=1)
    sched = SchedulerConfig(policy="continuous", max_seqs=128)
    load = make_workload(
        rate_per_s=rate_per_s,
        n=n,
        prompt_tokens="conversation",
        output_tokens="conversation",
        seed=0,
    )
    started, cpu = time.perf_counter(), time.process_time()
    result = simulate(
        dep, sched, load, replicas=replicas, timeline=replicas == 1, progress=progress
    )
    return result, time.perf_counter() - started, time.process_time() - cpu


def report(title: str, n: int, result, wall_s: float, cpu_s: float) -> None:
    s = result.summary
    print(title)
    print(f"  wall time                {wall_s:>10.2f} s")
    print(f"  CPU time                 {cpu_s:>10.2f} s")
    print(f"  simulated requests/s     {n / wall_s:>10,.0f} (wall), {n / cpu_s:,.0f} (CPU)")
    print(f"  simulated time           {result.end_s:>10,.0f} s")
    print(f"  finished / rejected      {s['finished']:>10,} / {s['rejected']:,}")
    print(
        f"  TTFT p50 / p99           {s['ttft_s']['p50'] * 1e3:>10.1f} / "
        f"{s['ttft_s']['p99'] * 1e3:.1f} ms"
    )
    print(
        f"  TPOT p50 / p99           {s['tpot_s']['p50'] * 1e3:>10.1f} / "
        f"{s['tpot_s']['p99'] * 1e3:.1f} ms"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skip-million", action="store_true", help="only the 4,096-request run")
    args = ap.parse_args()
    n = 4096
    result, wall_s, cpu_s = vidur_setting(n, 4.0, 1, progress=False)
    report("Llama-2-7B, 1 x A100 TP1, 4,096 requests at 4/s, continuous, max 128 seqs", n, result,
           wall_s, cpu_s)  # fmt: skip
    small = min([cpu_s] + [vidur_setting(n, 4.0, 1, progress=False)[2] for _ in range(2)])
    large = min(vidur_setting(2 * n, 4.0, 1, progress=False)[2] for _ in range(3))
    per_s = n / (large - small)
    verdict = "meets" if per_s >= TARGET_PER_S else "MISSES"
    print(
        f"  marginal: {n:,} more requests in {large - small:.3f} s of CPU ({small:.3f} s for "
        f"{n:,}, {large:.3f} s for {2 * n:,}): {per_s:,.0f} requests/s\n"
        f"  {per_s / VIDUR_PER_S:.1f}x Vidur's ~{VIDUR_PER_S}/s; {verdict} the target of "
        f"{TARGET_PER_S:,}/s marginal on one core\n"
    )
    if args.skip_million:
        return
    n = 1_000_000
    result, wall_s, cpu_s = vidur_setting(n, 64.0, 16, progress=True)
    report("Llama-2-7B, 16 x A100 TP1, 1,000,000 requests at 64/s, round robin", n, result,
           wall_s, cpu_s)  # fmt: skip
    verdict = "meets" if wall_s <= MILLION_TARGET_S else "MISSES"
    on_cpu = "meets" if cpu_s <= MILLION_TARGET_S else "MISSES"
    print(f"  {verdict} the target of {MILLION_TARGET_S:.0f} s in wall time; {on_cpu} it in CPU "
          "time (what one core of an unshared machine would take)")


if __name__ == "__main__":
    main()
