"""The serving simulation on simpy: one process per replica, one for the arrivals.

Processes hold no formula (STYLE.md): a replica's process asks its policy for a plan, waits as
long as the step model says the plan takes, and tells its state what the plan did. Runs of
decode-only iterations are one wait, not one per iteration (``step_model``'s closed form); an
arrival that the policy would admit at the next iteration boundary interrupts such a run, which
then ends at the first boundary after the arrival, exactly where stepping every iteration
would have admitted it (``max_run_iterations=1`` steps every iteration, for comparison).

Disaggregation (prefill and decode pools, DistServe and Splitwise) is in ``disagg``; it builds
on the ``Replica`` here. A run's progress bar and its watch are ``progress``'s.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import simpy

from gpuplan.errors import GpuplanError, check_kind, check_positive, check_whole, shown
from gpuplan.sim.estimate.inputs import check_gpus
from gpuplan.sim.runtime.serving.kv_cache import KvCapacity, kv_capacity
from gpuplan.sim.runtime.serving.metrics import (
    Timeline,
    conservation,
    prefix_cache_summary,
    request_columns,
    summarize,
    time_average,
)
from gpuplan.sim.runtime.serving.policies import IDLE, DecodeRun, Iteration, WaitUntil, make_policy
from gpuplan.sim.runtime.serving.progress import Progress, arrival_watched, watched_progress
from gpuplan.sim.runtime.serving.request_table import RequestTable
from gpuplan.sim.runtime.serving.router import Router
from gpuplan.sim.runtime.serving.state import ReplicaState
from gpuplan.sim.runtime.serving.step_model import StepModel, check_servable
from gpuplan.sim.runtime.serving.vision import (
    cross_attention_step,
    cross_kv_deployment,
    encoder_summary,
    prepare_images,
)

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True, slots=True, kw_only=True)
class ServingResult:
    """Per-request outcomes, the timeline, their summary, and the replica's KV cache. The
    outcomes and the timeline are kept as numpy columns; ``requests`` and ``timeline`` are
    their DataFrames, built when asked for (so a run that only prints its summary never loads
    pandas)."""

    request_columns: dict  # REQUEST_COLUMNS -> numpy array
    timeline_columns: dict  # Timeline.COLUMNS -> numpy array
    summary: dict
    capacity: KvCapacity
    end_s: float  # simulated time at the end
    wall_s: float  # seconds the simulation took

    @property
    def requests(self) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame(self.request_columns)

    @property
    def timeline(self) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame(self.timeline_columns)


class Replica:
    """One replica as the engine drives it."""

    def __init__(self, env, state: ReplicaState, policy, step: StepModel, timeline, *, swap_bw,
                 max_run_iterations=None, speculator=None):  # fmt: skip
        self.env, self.state, self.policy, self.step = env, state, policy, step
        self.spec = speculator  # speculative decoding (speculative.Speculator), or None
        self.spec_steps = 0  # speculative steps this replica has run
        self.timeline = timeline
        self.swap_bytes_per_s = swap_bw
        self.max_run = max_run_iterations
        self.wake = None  # an event while idle
        self.interruptible = False  # inside a decode run an arrival may cut short
        self.process = env.process(self._loop())

    def offer(self, rid: int) -> None:
        """A request arrives here (routed, or its KV cache transferred)."""
        st, now = self.state, self.env.now
        if self.policy.rejects(st, rid):
            st.reject(rid, now)
            return
        st.enqueue(rid)
        self.timeline.record(now, st)
        if self.wake is not None and not self.wake.triggered:
            self.wake.succeed()
        elif self.interruptible:
            self.interruptible = False
            self.process.interrupt()

    def _loop(self):
        env, st = self.env, self.state
        while True:
            plan = self.policy.schedule(st, env.now)
            self.timeline.record(env.now, st)
            if plan is IDLE or type(plan) is WaitUntil:
                self.wake = env.event()
                wait = self.wake
                if type(plan) is WaitUntil:
                    wait = wait | env.timeout(max(0.0, plan.at_s - env.now))
                yield wait
                self.wake = None
            elif type(plan) is Iteration:
                yield env.timeout(self.iteration_s(plan))
                self.finish_iteration(plan, env.now)
            elif self.spec is not None:
                yield from self._speculative_step(plan)
            else:
                yield from self._decode_run(plan)

    def iteration_s(self, plan: Iteration) -> float:
        if self.spec is not None and plan.decode_seqs:  # its decode is a speculative step
            n = plan.decode_seqs
            step_s = self.spec.step_s(self.step, seqs=n, cached_tokens=plan.decode_kv_tokens - n,
                                      prefill=plan.prefill, sampled=plan.sampled - n,
                                      replay=None if plan.prefill else self.step.dep.cuda_graph)
        else:
            step_s = self.step.mixed_s(plan.prefill, plan.decode_seqs, plan.decode_kv_tokens,
                                       plan.sampled)  # fmt: skip
        if plan.pieces:  # a VLM's encoder runs before the chunk that holds the images
            step_s += self.state.table.take_encoder_s(plan.pieces)
        if plan.swap_bytes:
            step_s += plan.swap_bytes / self.swap_bytes_per_s
        return step_s

    def finish_iteration(self, plan: Iteration, end_s: float) -> None:
        if plan.decode_seqs:
            if self.spec is not None:
                self._speculated(end_s)
            else:
                self.state.run_decode(1, lambda j: end_s)
        self.state.finish_prefill_chunks(plan.pieces, end_s, padded_to=plan.padded_to)

    def _speculative_step(self, plan: DecodeRun):
        """One speculative step of the decoding sequences (not cut short: an arrival waits for
        its end, as it waits for an iteration's)."""
        n = plan.seqs
        yield self.env.timeout(self.spec.step_s(self.step, seqs=n, cached_tokens=plan.kv_tokens - n,
                                                replay=self.step.dep.cuda_graph))
        self._speculated(self.env.now)

    def _speculated(self, end_s: float) -> None:
        """The decoding sequences emit this step's tokens (as many as their free blocks hold,
        at least the one the policy made room for)."""
        st = self.state
        m = self.spec.tokens_at(self.spec_steps)
        m = max(1, st.decode_room(m))
        seqs = len(st.decoding.members)
        self.spec.emitted(seqs, st.run_decode(m, lambda j: end_s))
        self.spec_steps += 1

    def _decode_run(self, plan: DecodeRun):
        env, step = self.env, self.step
        t0, n = env.now, plan.iterations
        if self.max_run is not None:
            n = min(n, self.max_run)
        self.interruptible = plan.interruptible
        try:
            yield env.timeout(step.decode_run_s(plan.seqs, plan.kv_tokens, n))
        except simpy.Interrupt:
            cut = step.decode_iterations_until(plan.seqs, plan.kv_tokens, env.now - t0)
            n = min(n, cut)
            end = t0 + step.decode_run_s(plan.seqs, plan.kv_tokens, n)
            yield env.timeout(max(0.0, end - env.now))
        self.interruptible = False

        def time_at(j: int) -> float:
            return t0 + step.decode_run_s(plan.seqs, plan.kv_tokens, j)

        self.state.run_decode(n, time_at, keep_done=plan.keep_done)


def make_replica(env, index, table, dep, sched, step, timeline, *, prefill_only=False,
                 speculator=None, cap=None, **kw):  # fmt: skip
    """A replica with its state, KV cache (``cap``: ``kv_capacity``'s, if known) and policy."""
    cap = cap or kv_capacity(dep, sched, speculator)
    state = ReplicaState(
        index,
        table,
        total_blocks=cap.blocks,
        block_tokens=cap.block_tokens,
        block_bytes=cap.block_bytes,
        max_seqs=sched.max_seqs,
        watermark=sched.watermark,
        rule=cap.rule,
    )
    if sched.policy in ("static", "dynamic") and not prefill_only:
        state.use_static_batches()
    decode_tokens = 1 if speculator is None else speculator.spec.k + 1  # K proposals, 1 bonus
    policy = make_policy(sched, dep.model, prefill_only=prefill_only, decode_tokens=decode_tokens)
    return Replica(env, state, policy, step, timeline, swap_bw=swap_bytes_per_s(dep),
                   speculator=speculator, **kw)  # fmt: skip


def swap_bytes_per_s(dep) -> float:
    """Host link of one GPU, one direction (each GPU of a TP group swaps its own shard)."""
    return dep.acc.pcie_bytes_per_s or dep.acc.scaleup_bytes_per_s or math.inf


def arrivals(env, table: RequestTable, dispatch):
    """Offer each request at its arrival time (``dispatch(rid)`` routes it)."""
    arrival = table.arrival_s
    for rid in range(table.n):
        delay = arrival[rid] - env.now
        if delay > 0:
            yield env.timeout(delay)
        dispatch(rid)
    yield env.timeout(0)


def simulate(
    dep,
    sched,
    workload,
    *,
    replicas: int = 1,
    router: str = "round_robin",
    horizon_s: float | None = None,
    timeline: bool = True,
    progress: bool = False,
    max_run_iterations: int | None = None,
    slo_ttft_s: float | None = None,
    slo_tpot_s: float | None = None,
    step: StepModel | None = None,
    watch=None,
    speculator=None,
) -> ServingResult:
    """Serve ``workload`` with ``replicas`` identical replicas behind ``router`` (``step``: a
    step model of ``dep`` to reuse, with its memo, across simulations; ``watch(table, rid,
    at_s)``: called at each request finished or rejected, and its ``first_token(table, rid,
    at_s)`` and ``arrival(table, rid, at_s)``, if it has them, at each first token and arrival;
    any may raise ``Settled``, which propagates; ``speculator``: a ``speculative.Speculator``,
    whose decode steps are speculative and whose summary joins the result's)."""
    _check_inputs(dep, sched, workload, step=step, watch=watch, speculator=speculator,
                  slo=(slo_ttft_s, slo_tpot_s), max_run_iterations=max_run_iterations)  # fmt: skip
    _check_run(sched, replicas, horizon_s, speculator)
    started = time.perf_counter()
    workload = prepare_images(dep, workload)  # a VLM's image tokens and encoder, if any
    dep = cross_kv_deployment(dep, workload)  # and a cross-attention VLM's image cache
    env, table = simpy.Environment(), RequestTable(workload)
    check_servable(dep)
    step = step or StepModel(dep, max_tokens=_table_tokens(sched, dep.model))
    step = cross_attention_step(step, dep, workload, speculator)  # a cross-attention VLM's
    line = Timeline(timeline)
    bar = watched_progress(workload.n, progress, watch, table)
    cap = kv_capacity(dep, sched, speculator)
    reps = [
        make_replica(env, i, table, dep, sched, step, line, max_run_iterations=max_run_iterations,
                     speculator=speculator, cap=cap)  # fmt: skip
        for i in range(replicas)
    ]
    watch_replicas(reps, bar)
    pick = Router(router, replicas)
    dispatch = arrival_watched(_dispatcher(pick, reps, table), watch, table, env)
    env.process(arrivals(env, table, dispatch))
    env.run(until=horizon_s)
    bar.close()
    end_s = env.now
    frame, over_time = request_columns(table, end_s=end_s), line.columns()
    summary = summarize(frame, slo_ttft_s=slo_ttft_s, slo_tpot_s=slo_tpot_s)
    summary |= _run_facts(frame, over_time, table, reps, workload, dep, speculator=speculator,
                          kv_blocks=cap.blocks * replicas, end_s=end_s, timeline=timeline)  # fmt: skip
    return ServingResult(
        request_columns=frame,
        timeline_columns=over_time,
        summary=summary,
        capacity=cap,
        end_s=end_s,
        wall_s=time.perf_counter() - started,
    )


def _check_inputs(dep, sched, workload, *, step, watch, speculator, slo,
                  max_run_iterations) -> None:  # fmt: skip
    """The objects a run is given, each of its kind, and its SLO targets and run cap numbers (a
    GpuplanError naming the first that is not)."""
    for name, target in zip(("slo_ttft_s", "slo_tpot_s"), slo, strict=True):
        if target is not None:
            check_positive(name, target, allow_inf=True)
    if max_run_iterations is not None:
        check_whole("max_run_iterations", max_run_iterations)
    check_kind("dep", dep, "Deployment")
    check_kind("sched", sched, "SchedulerConfig")
    check_kind("workload", workload, "Workload")
    check_kind("step", step, ("StepModel", None))
    check_kind("speculator", speculator, ("Speculator", None))
    if watch is not None and not callable(watch):
        raise GpuplanError(f"watch={shown(watch)} is invalid: give None or a callable "
                           "watch(table, rid, at_s)")  # fmt: skip


def _check_run(sched, replicas: int, horizon_s: float | None, speculator) -> None:
    """A run's replicas, horizon and speculation checked (``speculator``'s counts cleared)."""
    check_gpus(replicas, "replicas")
    if speculator is not None:
        _start_speculation(sched, speculator)
    if horizon_s is not None:
        check_positive("horizon_s", horizon_s)


def _run_facts(frame, over_time, table, reps, workload, dep, *, speculator, kv_blocks: int,
               end_s: float, timeline: bool) -> dict:  # fmt: skip
    """What the summary adds to the requests' latencies: conservation, and the prefix cache,
    images, speculation and the timeline's means where the run had them."""
    facts = {"conservation": conservation(frame, table, [r.state for r in reps])}
    if table.prefix_id is not None:
        facts["prefix_cache"] = prefix_cache_summary(table)
    if workload.encoder_s is not None:
        facts["vision"] = encoder_summary(workload, dep)
    if speculator is not None:
        facts["speculative"] = speculator.summary()
    if timeline:
        facts["waiting_mean"] = time_average(over_time, "waiting", end_s=end_s)
        used = time_average(over_time, "kv_blocks_used", end_s=end_s)
        facts["kv_use_mean"] = used / kv_blocks
    return facts


def watch_replicas(reps: list[Replica], bar: Progress) -> None:
    """Tell the run's ``Progress`` each request a replica finishes or rejects, and each first
    token (``first_token`` None without a watch of first tokens)."""
    for rep in reps:
        rep.state.on_done = bar.done
        rep.state.on_first = bar.first_token


def _start_speculation(sched, speculator) -> None:
    """Check that ``sched`` can speculate, and clear what ``speculator`` counted before."""
    if sched.policy not in ("continuous", "chunked"):
        raise GpuplanError(f"speculative decoding runs with continuous or chunked batching, not "
                           f"policy={sched.policy!r}")  # fmt: skip
    speculator.reset()


def _dispatcher(pick: Router, reps: list[Replica], table: RequestTable):
    def dispatch(rid: int) -> None:
        loads = [pick.load_of(r.state) for r in reps] if pick.needs_load else ()
        i = pick.pick(loads)
        table.replica[rid] = i
        reps[i].offer(rid)

    return dispatch


def _table_tokens(sched, cfg) -> int:
    budget = sched.batched_tokens(cfg)
    if budget is None:
        return sched.max_seqs * 64
    if budget <= 0:
        raise GpuplanError(f"max_batched_tokens={budget} is invalid: it must be positive")
    return max(budget, sched.max_seqs)
