"""Layer 3, runtime orchestration: one training step played out over time on simpy.

``simulate_step(cfg, strategy, cluster=, seq=)`` -> ``StepTimeline``: every GPU's compute stream
and communication streams under the pipeline schedule (GPipe, 1F1B, interleaved), data-parallel
gradient buckets behind the backward, ZeRO/FSDP gathers and reduce-scatters, optional TP-comm
overlap, and links shared by the transfers that meet on them; unbalanced end stages, stragglers
and seeded kernel jitter. Every duration comes from the analytical models of ``sim.parallel``;
where the closed form's assumptions hold the two agree (tests hold them within 2%).

- ``schedule``: the pipeline orders and the balanced bubble (p-1)/(vm+p-1);
- ``work``: the priced steps of each stage (``Plan``), of ``block_steps`` (a block's steps) and
  ``comm`` (a collective's fixed and busy seconds); ``links``: processor-sharing links;
- ``engine``: the simpy processes; ``result``: ``StepTimeline`` and its views;
- ``trace``: a Chrome/Perfetto trace writer.

Cost: linear in the simulated GPUs. With no jitter, replicas whose stages compute at the same
speeds play out identically (the data-parallel collectives they meet at start when the last of
them arrives, which is the same time for all): ``all_ranks`` simulates one of each kind and
copies its slices to the others. The garbage collector is paused while the engine runs (it holds
millions of live objects and frees almost none; each full pass would walk them all).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from gpuplan.errors import (
    GpuplanError,
    check_kind,
    check_number,
    check_switch,
    check_whole,
    expects,
)
from gpuplan.hwmodels.efficiency import efficiency_for
from gpuplan.limits import MAX_CV, MAX_DIM
from gpuplan.sim.estimate.inputs import check_seed
from gpuplan.sim.parallel.strategy import Strategy, validate
from gpuplan.sim.parallel.topology import Cluster, strides
from gpuplan.sim.runtime.timeline.engine import Engine, Straggler
from gpuplan.sim.runtime.timeline.result import GpuInfo, StepTimeline, gc_paused
from gpuplan.sim.runtime.timeline.schedule import bubble_fraction, stage_order
from gpuplan.sim.runtime.timeline.trace import chrome_trace, write_chrome_trace
from gpuplan.sim.runtime.timeline.work import build_plan

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


def _check_inputs(strategy, stragglers, all_ranks, contention, gather_prefetch) -> None:
    check_kind("strategy", strategy, "Strategy")
    check_kind("stragglers", stragglers, (tuple, list))
    for straggler in stragglers:
        check_kind("stragglers[...]", straggler, "Straggler")
    check_switch("all_ranks", all_ranks)
    check_switch("contention", contention)
    check_whole("gather_prefetch", gather_prefetch, low=0, high=MAX_DIM)


@expects(cfg="ModelConfig", strategy="Strategy", cluster="Cluster", eff=("Efficiency", None),
         impl=str)
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
    _check_inputs(strategy, stragglers, all_ranks, contention, gather_prefetch)
    validate(strategy, cfg, strategy.world, seq)
    check_seed(seed)
    check_number("jitter", jitter)
    if not 0 <= jitter <= MAX_CV:
        raise GpuplanError(
            f"jitter={jitter!r} is invalid: it is a coefficient of variation from 0 to {MAX_CV:g}"
        )
    acc = cluster.accelerator
    from gpuplan.sim.parallel.fp8 import check_precision

    check_precision(acc, strategy.precision)
    eff = eff or efficiency_for(acc.key)
    if impl == "fused":  # the estimate's kernels: megatron-te's, in a busy stream
        from gpuplan.sim.parallel.estimate import training_efficiency
        from gpuplan.sim.stacks import get_stack

        eff = training_efficiency(get_stack("megatron-te"), eff, acc)
    plan = build_plan(cfg, strategy, cluster=cluster, seq=seq, eff=eff, acc=acc, impl=impl)
    factors = _factors(stragglers, strategy, cluster)
    replicas = list(range(strategy.dp)) if all_ranks else [_replica(factors)]
    started = time.perf_counter()
    played = play(plan, replicas=replicas, factors=factors, jitter=jitter, seed=seed,
                  contention=contention, gather_prefetch=gather_prefetch)  # fmt: skip
    gpus = tuple(
        GpuInfo(gid=gid, dp=d, stage=s, ranks=ranks_of(d, s, strategy, cluster))
        for gid, d, s in played.gpus
    )
    return StepTimeline(
        model=cfg.name,
        strategy_label=strategy.label,
        gpus=gpus,
        slices=played.slices,
        waits=played.waits,
        ends=played.ends,
        links=played.links,
        world=strategy.world,
        all_ranks=all_ranks,
        notes=_notes(strategy, eff, all_ranks, jitter, factors),
        wall_s=time.perf_counter() - started,
        events=played.events,
    )


def _kinds(replicas: list[int], factors: dict, p: int, jitter: float) -> dict[int, int]:
    """replica -> the replica simulated for it: itself under jitter (its own draws), else the
    first replica whose stages compute at the same speeds."""
    if jitter:
        return {d: d for d in replicas}
    first: dict[tuple, int] = {}
    return {d: first.setdefault(tuple(factors.get((d, s), 1.0) for s in range(p)), d)
            for d in replicas}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Played:
    """The engine's records with the gids of every replica (copies for the unsimulated);
    ``gpus``: (gid, replica, stage) of each."""

    gpus: list
    slices: list
    waits: list
    ends: dict
    links: dict
    events: int

    @classmethod
    def of(cls, engine: Engine, replicas: list[int], kinds: dict[int, int], p: int) -> Played:
        row = {d: k for k, d in enumerate(sorted(set(kinds.values())))}  # engine's replica index
        copies: dict[int, list[int]] = {}  # engine gid -> the gids it stands for
        for k, d in enumerate(replicas):
            for s in range(p):
                copies.setdefault(row[kinds[d]] * p + s, []).append(k * p + s)
        if all(len(v) == 1 and v[0] == g for g, v in copies.items()):
            slices, waits, ends = engine.slices, engine.waits, engine.ends
        else:
            slices = [(c, *r[1:]) for r in engine.slices for c in copies[r[0]]]
            waits = [(c, *r[1:]) for r in engine.waits for c in copies[r[0]]]
            ends = {c: engine.ends[g] for g in sorted(engine.ends) for c in copies[g]}
        links = {}
        for g in engine.gpus:
            for link in (g.nvlink, g.nic):
                if link.transfers:
                    stats = {"busy_s": link.busy_s, "shared_s": link.shared_s,
                             "transfers": link.transfers}  # fmt: skip
                    port = link.name.split(".", 1)[1]
                    for c in copies[g.gid]:
                        links[f"gpu{c}.{port}"] = dict(stats)
        gpus = [(k * p + s, d, s) for k, d in enumerate(replicas) for s in range(p)]
        return cls(gpus, slices, waits, ends, links, engine.events)


def play(plan, *, replicas: list[int], factors: dict, jitter: float = 0.0, seed: int = 0,
         contention: bool = True, gather_prefetch: int = 2) -> Played:  # fmt: skip
    """Play ``plan`` out for data-parallel ``replicas`` (each replica's ``pp`` GPUs)."""
    kinds = _kinds(replicas, factors, plan.p, jitter)
    with gc_paused():
        engine = Engine(plan, replicas=sorted(set(kinds.values())), factors=factors,
                        jitter=jitter, seed=seed, contention=contention,
                        gather_prefetch=gather_prefetch)  # fmt: skip
        engine.run()
        return Played.of(engine, replicas, kinds, plan.p)


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
