"""``gpuplan train --timeline``: the step played out in time (``sim.runtime.timeline``), its
Chrome/Perfetto trace written at the finest detail that stays openable, and its lines in the
printed estimate."""

from __future__ import annotations

from typing import Any

from gpuplan.cli.calibration import efficiency_from_args
from gpuplan.errors import GpuplanError
from gpuplan.tables import format_value


def write_timeline(args, cfg, strategy, cluster, seq) -> dict[str, Any]:
    """Simulate the step, write its trace; the timeline's headline figures."""
    from gpuplan.sim.runtime.timeline import Straggler, simulate_step
    from gpuplan.sim.runtime.timeline.trace import write_chrome_trace

    tl = simulate_step(
        cfg, strategy, cluster=cluster, seq=seq, all_ranks=args.all_ranks, jitter=args.jitter,
        seed=args.seed, stragglers=tuple(Straggler(rank=r, slowdown=s) for r, s in args.straggler),
        eff=efficiency_from_args(args, cluster.accelerator.key),
    )  # fmt: skip
    detail, every_rank = trace_detail(tl)
    slices = write_chrome_trace(tl, args.timeline, detail=detail, every_rank=every_rank)
    return tl.to_dict() | {"trace": args.timeline, "trace_slices": slices, "trace_detail": detail,
                           "trace_every_rank": every_rank and tl.all_ranks}  # fmt: skip


MAX_TRACE_SLICES = 2_000_000  # about 250 MB of JSON, written in seconds; a viewer opens it


def trace_detail(tl) -> tuple[str, bool]:
    """The finest (detail, every rank) whose trace holds at most ``MAX_TRACE_SLICES`` slices:
    kernels, then steps (block halves), then each TP x CP group drawn once, then tasks."""
    from gpuplan.sim.runtime.timeline.trace import choose_detail

    detail, every_rank, n = choose_detail(tl, MAX_TRACE_SLICES)
    if n > MAX_TRACE_SLICES:
        raise GpuplanError(
            f"the trace would hold {n:,} slices even one per task (at most {MAX_TRACE_SLICES:,}); "
            "drop --all-ranks to draw each symmetric group once"
        )
    return detail, every_rank


def render_timeline(t: dict[str, Any], estimate_s: float, wall_s: float | None = None) -> list[str]:
    diff = 100 * (t["step_time_s"] / estimate_s - 1)
    took = "" if wall_s is None else f" in {wall_s:.2f} s"
    return [
        "",
        f"timeline        {format_value('step_time_s', t['step_time_s'])} ({diff:+.1f}% vs the "
        f"closed form), bubble {100 * t['bubble_fraction']:.1f}% (mean of the simulated GPUs)",
        f"                {t['simulated_gpus']} TP x CP groups simulated for {t['world']} GPUs, "
        f"{t['events']:,} events{took}",
        *[f"                {n}" for n in t["notes"][1:]],
        f"trace           {t['trace']} ({t['trace_slices']:,} slices, {t['trace_detail']} "
        f"detail{_drawn(t)}; open in https://ui.perfetto.dev)",
    ]


def _drawn(t: dict[str, Any]) -> str:
    if not t["all_ranks"]:
        return ""
    return ", every rank" if t.get("trace_every_rank") else ", each TP x CP group once"
