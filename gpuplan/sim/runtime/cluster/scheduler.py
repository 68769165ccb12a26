"""Scheduling policies: which queued jobs start, and which running jobs make room.

Every policy places a job's GPUs all at once (gang placement: a synchronous training job cannot
start on part of its GPUs) and sees the cluster through a view: the time, the free GPU count,
``start(job)`` (place and start it, or say it does not fit), the times running jobs will hand
their GPUs back, a job's remaining run time, and ``preempt(job)``.

- ``fifo``: in queue order; the first job that does not fit blocks every job behind it.
- ``backfill``: EASY backfilling (Lifka 1995, "The ANL/IBM SP scheduling system"; Mu'alem and
  Feitelson 2001, IEEE TPDS 12(6)): the blocked head job gets a reservation at the earliest time
  enough GPUs will be free (the shadow time); a later job may start now if it fits and either ends
  before the shadow time or uses only GPUs the head will not need (the extra GPUs). Run times are
  the simulator's own (perfect user estimates, which flatter backfilling a little; Mu'alem and
  Feitelson find inaccurate estimates cost little). At most ``depth`` jobs are tried per pass
  (Slurm's ``bf_max_job_test``).
- ``priority``: the queue in priority order; a high-priority head that does not fit preempts
  running jobs of lower priority (lowest first, the most recently started first) when that frees
  enough GPUs; the preempted jobs checkpoint and go back to the queue; below the head, EASY
  backfilling.
- ``gang``: time-sliced gang scheduling (Ousterhout 1982; Gandiva, Xiao et al. OSDI 2018, for
  deep learning): FIFO starts, and every ``quantum_s`` the jobs that have run a whole quantum make
  room, oldest first, for the queue's head; they checkpoint and rejoin the queue at its back.
"""

from __future__ import annotations

import math

from gpuplan.errors import check_choice

POLICIES = ("fifo", "backfill", "priority", "gang")


def run_pass(policy: str, queue: list, view, *, depth: int = 500) -> None:
    """One scheduling pass over ``queue`` (in queue order)."""
    check_choice("scheduler policy", policy, POLICIES)
    if policy in ("fifo", "gang"):
        fifo(queue, view)
    elif policy == "backfill":
        backfill(queue, view, depth=depth)
    else:
        priority(queue, view, depth=depth)


def fifo(queue: list, view) -> int:
    """Start jobs in order until one does not fit; returns how many started."""
    started = 0
    for job in queue:
        if job.gpus > view.free_gpus or not view.start(job):
            break
        started += 1
    return started


def reservation(gpus: int, view) -> tuple[float, int]:
    """(shadow time, extra GPUs): when ``gpus`` GPUs will be free, and how many beyond them."""
    free = view.free_gpus
    if free >= gpus:
        return view.now, free - gpus
    for when, released in view.releases():
        free += released
        if free >= gpus:
            return when, free - gpus
    return math.inf, 0


def backfill(queue: list, view, *, depth: int) -> None:
    """EASY backfilling behind the first job that does not fit."""
    jobs = list(queue)
    first = fifo(jobs, view)
    if first >= len(jobs):
        return
    head = jobs[first]
    shadow, extra = reservation(head.gpus, view)
    for job in jobs[first + 1 : first + 1 + depth]:
        if view.free_gpus == 0:
            break
        if job.gpus > view.free_gpus:
            continue
        ends_in_time = view.now + view.runtime(job) <= shadow
        if (ends_in_time or job.gpus <= extra) and view.start(job) and not ends_in_time:
            extra -= job.gpus


def priority(queue: list, view, *, depth: int) -> None:
    """Priority order; the head preempts lower priorities; EASY backfilling below it."""
    jobs = list(queue)
    first = fifo(jobs, view)
    if first >= len(jobs):
        return
    head = jobs[first]
    if view.making_room():
        return  # preempted jobs are checkpointing for the head: keep their GPUs for it
    victims = sorted(
        (j for j in view.running() if j.priority < head.priority),
        key=lambda j: (j.priority, -j.started_s),
    )
    if view.free_gpus + sum(j.gpus for j in victims) >= head.gpus:
        freed = view.free_gpus
        for job in victims:
            if freed >= head.gpus:
                break
            view.preempt(job, for_job=head)
            freed += job.gpus
        return
    backfill(jobs[first:], view, depth=depth)


def time_slice(queue: list, view, quantum_s: float) -> None:
    """Gang time slicing: jobs that ran a whole quantum make room for the queue's head."""
    if not queue or view.making_room():
        return
    head = queue[0]
    served = sorted(
        (j for j in view.running() if view.now - j.started_s >= quantum_s),
        key=lambda j: j.started_s,
    )
    if view.free_gpus + sum(j.gpus for j in served) < head.gpus:
        return
    freed = view.free_gpus
    for job in served:
        if freed >= head.gpus:
            break
        view.preempt(job, for_job=head)
        freed += job.gpus
