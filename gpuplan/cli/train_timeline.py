"""``gpuplan train --timeline``: the step played out in time (``sim.runtime.timeline``), its
Chrome/Perfetto trace written at the finest detail that stays openable, and its lines in the
printed estimate."""

from __future__ import annotations

from typing import Any

from gpuplan.cli.calibration import efficiency_from_args
from gpuplan.tables import format_value


def write_timeline(args, cfg, strategy, cluster, seq) -> dict[str, Any]:
    """Simulate the step, write its trace; the timeline's headline figures."""
    from gpuplan.sim.runtime.timeline import Straggler, simulate_step
    from gpuplan.sim.runtime.timeline.trace import write_openable_trace

    tl = simulate_step(
        cfg, strategy, cluster=cluster, seq=seq, all_ranks=args.all_ranks, jitter=args.jitter,
        seed=args.seed, stragglers=tuple(Straggler(rank=r, slowdown=s) for r, s in args.straggler),
        eff=efficiency_from_args(args, cluster.accelerator.key),
    )  # fmt: skip
    return tl.to_dict() | write_openable_trace(tl, args.timeline)


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
