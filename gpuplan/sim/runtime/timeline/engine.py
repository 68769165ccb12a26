"""The step timeline on simpy: every simulated GPU plays its pipeline schedule on a compute stream,
with communication streams beside it, and links shared by the transfers that meet on them.

Per GPU (one TP x CP group, whose ranks run in lock step and are simulated once):
- the compute stream runs its tasks in schedule order (``schedule.stage_order``); a task waits
  for its input (the activation or gradient a send delivers), runs its blocks' steps
  (``block_steps.Step``: kernels, then the collectives it waits for), and sends its output;
- ``pp`` sends: the compute stream waits for each send unless ``overlap_pp`` (then the send runs
  on its own stream and only the receiver waits);
- ``dp``: gradient buckets are reduced as the last micro-batch's backward produces them (ZeRO 0/1,
  Megatron's ``overlap_grad_reduce``), or each block's gradients are reduce-scattered after every
  backward (ZeRO 2/3), in one FIFO stream; without ``overlap_dp`` they wait for the end of the
  backward;
- ``dp-gather``: ZeRO-3 (FSDP) all-gathers each block's parameters before every use, at most
  ``gather_prefetch`` blocks ahead of the compute (FSDP's rate limiter); ZeRO 1/2 gather the
  updated parameters once, block by block ahead of the first forward (Megatron's
  ``overlap_param_gather``, which gathers the previous step's update during this forward);
- at the end: wait for the reductions, the tied-embedding all-reduce, the optimizer.

Symmetric ranks are simulated once: one data-parallel replica (the one holding a straggler, which
every data-parallel collective waits for) of ``pp`` stages. ``all_ranks`` simulates every replica,
each with its own jitter draws and links, and data-parallel collectives start only when every
replica has reached them. Kernel jitter: each compute step's time times a lognormal factor of mean
1 and coefficient of variation ``jitter``, drawn from a per-GPU stream of ``seed``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import simpy

from gpuplan.sim.runtime.timeline.block_steps import OTHER, Step
from gpuplan.sim.runtime.timeline.comm import Comm
from gpuplan.sim.runtime.timeline.links import Link
from gpuplan.sim.runtime.timeline.schedule import stage_order
from gpuplan.sim.runtime.timeline.work import Plan


@dataclass(frozen=True, slots=True, kw_only=True)
class Straggler:
    """GPU ``rank`` (global) computes ``slowdown`` slower: 0.1 is 10% more time per kernel."""

    rank: int
    slowdown: float


class Gpu:
    """One simulated GPU (a TP x CP group): its place, its links, its clock factor."""

    def __init__(self, env, gid: int, d: int, s: int, factor: float, jitter: float, rng):
        self.gid, self.d, self.s, self.factor = gid, d, s, factor
        self.nvlink = Link(env, f"gpu{gid}.nvlink")
        self.nic = Link(env, f"gpu{gid}.nic")
        self._sigma = math.sqrt(math.log1p(jitter * jitter)) if jitter > 0 else 0.0
        self._rng, self._draws, self._k = rng, np.ones(0), 0
        self.dp_tail = None  # the dp stream's last queued collective
        self.dp_seq = 0

    def scale(self) -> float:
        """This step's clock factor: straggler slowdown times a jitter draw."""
        if not self._sigma:
            return self.factor
        if self._k >= len(self._draws):
            self._draws = self._rng.lognormal(-0.5 * self._sigma**2, self._sigma, 4096)
            self._k = 0
        self._k += 1
        return self.factor * float(self._draws[self._k - 1])


class Engine:
    """Plays a ``Plan`` out; records compute slices, communication slices and waits."""

    def __init__(self, plan: Plan, *, replicas: list[int], factors: dict, jitter: float,
                 seed: int, contention: bool = True, gather_prefetch: int = 2):  # fmt: skip
        self.env = simpy.Environment()  # the engine's one environment
        self.plan, self.contention, self.prefetch = plan, contention, max(1, gather_prefetch)
        root = np.random.SeedSequence(seed)
        streams = root.spawn(len(replicas) * plan.p)
        self.gpus: list[Gpu] = []
        for k, d in enumerate(replicas):
            for s in range(plan.p):
                gid = k * plan.p + s
                rng = np.random.default_rng(streams[gid])
                self.gpus.append(Gpu(self.env, gid, d, s, factors.get((d, s), 1.0), jitter, rng))
        self.n_replicas = len(replicas)
        self.slices: list[tuple] = []  # (gid, stream, name, start_s, end_s, work, mb, chunk)
        self.waits: list[tuple] = []  # (gid, reason, start_s, end_s)
        self.ends: dict[int, float] = {}
        self._arrivals: dict[tuple, simpy.Event] = {}
        self._barriers: dict[tuple, list] = {}
        self.events = 0

    def run(self) -> None:
        """Run to the end of the step; counts the events processed."""
        env = self.env
        for g in self.gpus:
            env.process(self._gpu(g))
        step, n = env.step, 0
        try:
            while True:
                step()
                n += 1
        except simpy.core.EmptySchedule:
            pass
        self.events = n

    # -- helpers ---------------------------------------------------------------------------
    def _arrival(self, d: int, kind: str, mb: int, vs: int) -> simpy.Event:
        key = (d, kind, mb, vs)
        event = self._arrivals.get(key)
        if event is None:
            event = self._arrivals[key] = self.env.event()
        return event

    def _meet(self, key: tuple) -> simpy.Event:
        """An event that fires when every replica has reached ``key``."""
        entry = self._barriers.get(key)
        if entry is None:
            entry = self._barriers[key] = [0, self.env.event()]
        entry[0] += 1
        if entry[0] == self.n_replicas:
            entry[1].succeed()
        return entry[1]

    def _wait(self, g: Gpu, reason: str, start_s: float) -> None:
        if self.env.now > start_s:
            self.waits.append((g.gid, reason, start_s, self.env.now))

    def _comm(self, g: Gpu, comm: Comm, mb: int = -1, chunk: int = -1, key=None):
        """Run ``comm`` on ``g``'s links (meeting the other replicas first when ``key``)."""
        env = self.env
        if key is not None and self.n_replicas > 1:
            yield self._meet(("start", *key))
        start = env.now
        if comm.fixed_s > 0:
            yield env.timeout(comm.fixed_s)
        for link, work_s in ((g.nvlink, comm.intra_s), (g.nic, comm.inter_s)):
            if work_s > 0:
                yield link.transfer(work_s) if self.contention else env.timeout(work_s)
        if key is not None and self.n_replicas > 1:
            yield self._meet(("end", *key))
        self.slices.append((g.gid, comm.stream, comm.name, start, env.now, comm, mb, chunk))

    def _step(self, g: Gpu, step: Step, mb: int, chunk: int):
        env = self.env
        beside = [env.process(self._comm(g, c, mb, chunk)) for c in step.overlap]
        if step.compute_s > 0:
            start = env.now
            yield env.timeout(step.compute_s * g.scale())
            self.slices.append((g.gid, "compute", step.name, start, env.now, step, mb, chunk))
        for proc in beside:
            if not proc.triggered:
                start = env.now
                yield proc
                self._wait(g, "exposed " + step.overlap[0].name, start)
        for c in step.after:
            start = env.now
            yield from self._comm(g, c, mb, chunk)
            self._wait(g, c.name, start)

    # -- data-parallel streams ---------------------------------------------------------------
    def _dp_issue(self, g: Gpu, comm: Comm | None):
        """Queue ``comm`` on ``g``'s dp stream (FIFO); returns its completion event."""
        if comm is None:
            return g.dp_tail
        g.dp_seq += 1
        g.dp_tail = self.env.process(self._dp_run(g, g.dp_tail, comm, ("dp", g.s, g.dp_seq)))
        return g.dp_tail

    def _dp_run(self, g: Gpu, previous, comm: Comm, key):
        if previous is not None and not previous.triggered:
            yield previous
        yield from self._comm(g, comm, key=key)

    def _gathers(self, g: Gpu, order) -> dict:
        """(task index, block index) -> gather number; the gather stream started."""
        plan = self.plan
        if plan.zero == 0 or plan.dp == 1:
            return {}
        uses, comms, seen = {}, [], set()
        for ti, (kind, _mb, c) in enumerate(order):
            if plan.zero < 3 and kind == "B":
                continue
            for bi, bw in enumerate(plan.tasks[(kind, g.s, c)]):
                if bw.block == OTHER or (plan.zero < 3 and bw.block in seen):
                    continue
                seen.add(bw.block)
                factor = 2 if (kind == "B" and plan.recompute == "full") else 1
                comm = plan.gather(bw.params * factor)
                if comm is not None:
                    uses[(ti, bi)] = len(comms)
                    comms.append(comm)
        n = len(comms)
        g.ready = [self.env.event() for _ in range(n)]
        g.used = [self.env.event() for _ in range(n)]
        limit = self.prefetch if plan.zero == 3 else 1
        if not plan.overlap_dp:
            # ZeRO 1/2: every gather before the compute starts (it waits for the last);
            # ZeRO 3: each gather when the block before it is done (one at a time)
            limit = n if plan.zero < 3 else 1
        self.env.process(self._gather_stream(g, comms, limit))
        return uses

    def _gather_stream(self, g: Gpu, comms: list[Comm], limit: int):
        for i, comm in enumerate(comms):
            if i >= limit and not g.used[i - limit].triggered:
                yield g.used[i - limit]
            yield from self._comm(g, comm, key=("gather", g.s, i))
            g.ready[i].succeed()

    # -- one GPU -----------------------------------------------------------------------------
    def _gpu(self, g: Gpu):
        env, plan = self.env, self.plan
        order = stage_order(plan.schedule, p=plan.p, m=plan.m, v=plan.v, stage=g.s)
        uses = self._gathers(g, order)
        if uses and not plan.overlap_dp and plan.zero < 3:
            start = env.now
            yield g.ready[-1]
            self._wait(g, "dp param all_gather", start)
        deferred: list[float] = []
        for ti, (kind, mb, c) in enumerate(order):
            vs = c * plan.p + g.s
            yield from self._receive(g, kind, mb, vs)
            bucket = 0.0
            for bi, bw in enumerate(plan.tasks[(kind, g.s, c)]):
                k = uses.get((ti, bi))
                if k is not None:
                    if not g.ready[k].triggered:
                        start = env.now
                        yield g.ready[k]
                        self._wait(g, "dp param all_gather", start)
                    if plan.overlap_dp:  # the next gather may start while this block runs
                        g.used[k].succeed()
                for step in bw.steps:
                    yield from self._step(g, step, mb, c)
                if k is not None and not plan.overlap_dp:
                    g.used[k].succeed()
                if kind == "B" and bw.block != OTHER:
                    bucket = yield from self._reduce(g, bw.params, bucket, mb, deferred)
            if kind == "B" and bucket > 0:
                self._dp_issue(g, plan.reduce(bucket))
            yield from self._send(g, kind, mb, vs)
        yield from self._finish(g, deferred)

    def _receive(self, g: Gpu, kind: str, mb: int, vs: int):
        last = self.plan.p * self.plan.v - 1
        if (kind == "F" and vs == 0) or (kind == "B" and vs == last):
            return
        event = self._arrival(g.d, kind, mb, vs)
        if not event.triggered:
            start = self.env.now
            yield event
            self._wait(g, "pipeline wait", start)

    def _send(self, g: Gpu, kind: str, mb: int, vs: int):
        plan = self.plan
        last = plan.p * plan.v - 1
        if plan.send is None or (kind == "F" and vs == last) or (kind == "B" and vs == 0):
            return
        target = vs + 1 if kind == "F" else vs - 1
        arrival = self._arrival(g.d, kind, mb, target)
        c = vs // plan.p
        if plan.overlap_pp:
            self.env.process(self._send_beside(g, arrival, mb, c))
            return
        start = self.env.now
        yield from self._comm(g, plan.send, mb, c)
        arrival.succeed()
        self._wait(g, "pp send", start)

    def _send_beside(self, g: Gpu, arrival, mb: int, chunk: int):
        yield from self._comm(g, self.plan.send, mb, chunk)
        arrival.succeed()

    def _reduce(self, g: Gpu, params: float, bucket: float, mb: int, deferred: list):
        """Gradients of one block are ready: bucket them, reduce them, or keep them for later.
        Returns the bucket's parameters not yet reduced."""
        plan = self.plan
        if plan.zero >= 2:  # every micro-batch, block by block
            if plan.overlap_dp:
                self._dp_issue(g, plan.reduce(params))
            else:
                comm = plan.reduce(params)
                if comm is not None:
                    start = self.env.now
                    g.dp_seq += 1
                    yield from self._comm(g, comm, key=("dp", g.s, g.dp_seq))
                    self._wait(g, comm.name, start)
            return 0.0
        if mb != plan.m - 1:  # gradients accumulate locally until the last micro-batch
            return bucket
        if not plan.overlap_dp:
            deferred.append(params)
            return 0.0
        bucket += params
        if bucket >= plan.bucket_params:
            self._dp_issue(g, plan.reduce(bucket))
            return 0.0
        return bucket

    def _finish(self, g: Gpu, deferred: list[float]):
        env, plan = self.env, self.plan
        if deferred:
            size, bucket = plan.bucket_params, 0.0
            for params in deferred:
                bucket += params
                if bucket >= size:
                    self._dp_issue(g, plan.reduce(bucket))
                    bucket = 0.0
            if bucket:
                self._dp_issue(g, plan.reduce(bucket))
        if g.dp_tail is not None and not g.dp_tail.triggered:
            start = env.now
            yield g.dp_tail
            self._wait(g, "dp gradient reduction", start)
        if plan.embedding_sync is not None and g.s in (0, plan.p - 1):
            start = env.now
            yield from self._comm(g, plan.embedding_sync)
            self._wait(g, plan.embedding_sync.name, start)
        yield from self._step(g, plan.optimizer[g.s], -1, -1)
        self.ends[g.gid] = env.now
