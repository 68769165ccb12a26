"""Failures and repairs on the simulated cluster: the failure injector's process (events drawn
up front by ``failures.failure_events``), a failure taking nodes down or hitting jobs directly,
the jobs it interrupts, and the repair that brings a node back (a hot spare again if short)."""

from __future__ import annotations

from gpuplan.sim.runtime.cluster.failures import failure_events
from gpuplan.sim.runtime.cluster.state import JobState

CHUNK_S = 30 * 86400.0  # failures drawn a month at a time when the run has no horizon


class Outages:
    """``ClusterSim``'s failures and repairs (mixed in: it books GPUs through ``GpuBooks`` and
    stops jobs through ``JobLife``)."""

    def _failures(self):
        start, horizon = 0.0, self.cfg.horizon_s
        units = {"gpu": self.cfg.capacity_gpus, "job_gpu": self.cfg.capacity_gpus,
                 "node": self.cfg.total_nodes, "leaf": -(-self.cfg.total_nodes // self.npl)}  # fmt: skip
        while horizon is None or start < horizon:
            span = CHUNK_S if horizon is None else horizon
            for t, k, unit in failure_events(
                self.cfg.causes, units=units, horizon_s=span, rng=self.fail_rng,
                distribution=self.cfg.distribution, shape=self.cfg.weibull_shape,
            ):  # fmt: skip
                yield self.env.timeout(start + t - self.now)
                self._fail(k, unit)
            start += span
            yield self.env.timeout(max(start - self.now, 0.0))

    def _fail(self, k: int, unit: int) -> None:
        cause = self.cfg.causes[k]
        if cause.scope == "job":
            self._job_failure(cause, unit)
            return
        if cause.scope == "leaf":
            nodes = range(unit * self.npl, min((unit + 1) * self.npl, len(self.down)))
        else:
            nodes = [unit // self.gpn if cause.unit == "gpu" else unit]
        hit = [n for n in nodes if not self.down[n]]
        if not hit:
            return  # failures of a part under repair are dropped
        self._tick()
        for node in hit:
            if self.spare[node]:
                self._set_spare(node, False)
            self._set_down(node, True)
            self.note("failure", node=node, cause=cause.name)
            repair = self.env.timeout(cause.repair_s)
            repair.callbacks.append(lambda _e, node=node: self._repair(node))
        self._sample()
        victims = {j for n in hit for j in self.node_jobs[n]}
        for job_id in sorted(victims):
            self._interrupt(self.jobs[job_id], cause)

    def _job_failure(self, cause, unit: int) -> None:
        if cause.unit in ("gpu", "job_gpu"):
            node, slot = divmod(unit, self.gpn)
            owner = _slot_owner(self.node_jobs[node], slot)
            victims = [owner] if owner else []
        elif cause.unit == "node":
            victims = sorted(self.node_jobs[unit])
        else:
            nodes = range(unit * self.npl, min((unit + 1) * self.npl, len(self.down)))
            victims = sorted({j for n in nodes for j in self.node_jobs[n]})
        for job_id in victims:
            self.note("failure", job_id, cause=cause.name)
            self._interrupt(self.jobs[job_id], cause)

    def _interrupt(self, job: JobState, cause) -> None:
        if job.status != "running":
            return  # already stopping: one interruption
        job.interruptions[cause.name] = job.interruptions.get(cause.name, 0) + 1
        self.note("interruption", job.id, cause=cause.name)
        self._settle(job, graceful=cause.graceful)
        if cause.graceful:
            self._hold(job, self._cost(job).blocking_s, "save", "restart")
        else:
            self._hold(job, cause.detection_s, "detect", "restart")

    def _repair(self, node: int) -> None:
        self._tick()
        self._set_down(node, False)
        if self.spare.sum() < self.cfg.spare_nodes and self.node_alloc[node] == 0:
            self._set_spare(node, True)
        self._sample()
        self.note("repair", node=node)
        self._kick()


def _slot_owner(jobs_on_node: dict[str, int], slot: int) -> str | None:
    """The job holding GPU ``slot`` of a node (jobs fill the node in the order they came)."""
    for job_id, count in jobs_on_node.items():
        if slot < count:
            return job_id
        slot -= count
    return None
