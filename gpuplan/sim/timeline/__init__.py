"""Layer 3, runtime orchestration: one training step played out over time on simpy.

``simulate_step(cfg, strategy, cluster=, seq=)`` -> ``StepTimeline``: every GPU's compute stream
and communication streams under the pipeline schedule (GPipe, 1F1B, interleaved), data-parallel
gradient buckets behind the backward, ZeRO/FSDP gathers and reduce-scatters, optional TP-comm
overlap, and links shared by the transfers that meet on them; unbalanced end stages, stragglers
and seeded kernel jitter. Every duration comes from the analytical models of ``sim.parallel``;
where the closed form's assumptions hold the two agree (tests hold them within 2%).

- ``schedule``: the pipeline orders and the balanced bubble (p-1)/(vm+p-1);
- ``work``: the priced steps of each stage (``Plan``); ``links``: processor-sharing links;
- ``engine``: the simpy processes; ``result``: ``StepTimeline`` and its views;
- ``trace``: a Chrome/Perfetto trace writer.
"""

from __future__ import annotations

import time

from gpuplan.errors import GpuplanError
from gpuplan.hwmodels.efficiency import efficiency_for
from gpuplan.sim.parallel.strategy import Strategy, validate
from gpuplan.sim.parallel.topology import Cluster, strides
from gpuplan.sim.timeline.engine import Engine, Straggler
from gpuplan.sim.timeline.result import GpuInfo, StepTimeline
from gpuplan.sim.timeline.schedule import bubble_fraction, stage_order
from gpuplan.sim.timeline.trace import chrome_trace, write_chrome_trace
from gpuplan.sim.timeline.work import build_plan

__all__ = [
    "simulate_step",
    "StepTimeline",
    "Straggler",
    "bubble_fraction",
    "stage_order",
    "chrome_trace",
    "write_chrome_trace",
]


def _sizes(st: Strategy) -> dict[str, int]:
    return {"tp": st.tp, "cp": st.cp, "dp": st.dp, "pp": st.pp}


def place_of(rank: int, st: Strategy, cluster: Cluster) -> dict[str, int]:
    """The index of global ``rank`` in each parallel dimension (the cluster's placement)."""
    sizes = _sizes(st)
    stride = strides(cluster, sizes)
    return {dim: (rank // stride[dim]) % sizes[dim] for dim in sizes}


def ranks_of(d: int, s: int, st: Strategy, cluster: Cluster) -> tuple[int, ...]:
    """Global ranks of the TP x CP group at data-parallel replica ``d``, stage ``s``."""
    stride = strides(cluster, _sizes(st))
    base = d * stride["dp"] + s * stride["pp"]
    return tuple(
        sorted(
            base + t * stride["tp"] + c * stride["cp"] for t in range(st.tp) for c in range(st.cp)
        )
    )


def _factors(stragglers, st: Strategy, cluster: Cluster) -> dict:
    out: dict[tuple[int, int], float] = {}
    for s in stragglers:
        if not 0 <= s.rank < st.world:
            raise GpuplanError(f"straggler rank={s.rank} is invalid: choose 0 .. {st.world - 1}")
        if s.slowdown < 0:
            raise GpuplanError(
                f"straggler slowdown={s.slowdown!r} is invalid: 0.1 means 10% slower; use >= 0"
            )
        where = place_of(s.rank, st, cluster)
        key = (where["dp"], where["pp"])
        out[key] = max(out.get(key, 1.0), 1.0 + s.slowdown)  # a TP group goes at its slowest
    return out


def simulate_step(
    cfg,
    strategy: Strategy,
    *,
    cluster: Cluster,
    seq: int,
    eff=None,
    all_ranks: bool = False,
    jitter: float = 0.0,
    seed: int = 0,
    stragglers: tuple[Straggler, ...] = (),
    contention: bool = True,
    gather_prefetch: int = 2,
    impl: str = "fused",
) -> StepTimeline:
    """One training step of ``cfg`` under ``strategy`` on ``cluster``, played out in time."""
    validate(strategy, cfg, strategy.world, seq)
    if jitter < 0:
        raise GpuplanError(f"jitter={jitter!r} is invalid: it is a coefficient of variation >= 0")
    acc = cluster.accelerator
    if not acc.supports(strategy.precision):
        raise GpuplanError(f"precision={strategy.precision!r} is not supported by {acc.key}")
    eff = eff or efficiency_for(acc.key)
    if impl == "fused":  # the estimate's kernels: megatron-te's, in a busy stream
        from gpuplan.sim.parallel.estimate import training_efficiency
        from gpuplan.sim.stacks import get_stack

        eff = training_efficiency(get_stack("megatron-te"), eff, acc)
    plan = build_plan(cfg, strategy, cluster=cluster, seq=seq, eff=eff, acc=acc, impl=impl)
    factors = _factors(stragglers, strategy, cluster)
    replicas = list(range(strategy.dp)) if all_ranks else [_replica(factors)]
    started = time.perf_counter()
    engine = Engine(plan, replicas=replicas, factors=factors, jitter=jitter, seed=seed,
                    contention=contention, gather_prefetch=gather_prefetch)  # fmt: skip
    engine.run()
    gpus = tuple(
        GpuInfo(gid=g.gid, dp=g.d, stage=g.s, ranks=ranks_of(g.d, g.s, strategy, cluster))
        for g in engine.gpus
    )
    links = {
        link.name: {"busy_s": link.busy_s, "shared_s": link.shared_s, "transfers": link.transfers}
        for g in engine.gpus
        for link in (g.nvlink, g.nic)
        if link.transfers
    }
    return StepTimeline(
        model=cfg.name,
        strategy_label=strategy.label,
        gpus=gpus,
        slices=engine.slices,
        waits=engine.waits,
        ends=engine.ends,
        links=links,
        world=strategy.world,
        all_ranks=all_ranks,
        notes=_notes(strategy, eff, all_ranks, jitter, factors),
        wall_s=time.perf_counter() - started,
        events=engine.events,
    )


def _replica(factors: dict) -> int:
    """The replica to simulate alone: the slowest one (every DP collective waits for it)."""
    if not factors:
        return 0
    return max(factors, key=lambda k: (factors[k], -k[0]))[0]


def _notes(st: Strategy, eff, all_ranks: bool, jitter: float, factors: dict) -> tuple[str, ...]:
    notes = [f"hardware efficiency: {eff.source}"]
    if not all_ranks:
        notes.append("symmetric ranks simulated once: one TP x CP group per stage, one replica")
    if jitter:
        notes.append(f"kernel jitter: lognormal, coefficient of variation {jitter}")
    for (d, s), f in sorted(factors.items()):
        notes.append(f"straggler: replica {d} stage {s} computes {100 * (f - 1):.0f}% slower")
    return tuple(notes)
