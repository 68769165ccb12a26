"""What a cluster run delivered: per-job and per-event tables, the summary, and the conservation
checks every run ends with.

Definitions (GPU-time is GPUs x seconds):
- ``utilization``: GPU-time allocated to jobs over the capacity (every GPU, spares included) times
  the simulated time — what GPU-cluster studies call allocation (Jeon et al. 2019; Hu et al.
  2021);
- ``goodput``: training time that counted (it reached a checkpoint or the job's end) over the
  GPU-time allocated (start-ups, checkpoints, lost work, failure detection and final saves are
  the rest);
- ``effective_utilization``: the work delivered, in GPU-time at each job's ideal step time (its
  best placement), over capacity times time: utilization x goodput x placement efficiency;
- ``effective_training_time``: for each job, counted training over its wall time from first start
  to end (or to the horizon) — the measure Dubey et al. 2024 report for Llama 3 (> 90%);
- job completion time (arrival to end) and queueing delay (time queued, every wait counted)
  percentiles; energy from the allocated, idle and down GPU-time (``config`` notes).

Conservation, checked at the end of every run (a failure is a bug, raised as an error):
every job is finished, running, queued, not yet arrived or rejected; allocated + idle + down
GPU-time equals capacity x time; the jobs' allocated GPU-time equals the cluster's; each job's
phases add up to its allocated time.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from gpuplan.sim.runtime.cluster.state import PHASES

KWH_J = 3.6e6
REL_TOL = 1e-6


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterResult:
    """The outcome of one cluster simulation."""

    name: str
    jobs: pd.DataFrame
    events: pd.DataFrame
    samples: pd.DataFrame  # time_s, allocated, idle, down GPUs (after each change)
    summary: dict
    conservation: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"name": self.name, "summary": self.summary, "conservation": self.conservation}


def job_frame(sim) -> pd.DataFrame:
    """One row per job."""
    end = sim.env.now
    rows = []
    for j in sim.jobs.values():
        g = j.gpus
        wall = (j.end_s if j.status == "done" else end) - j.first_start_s
        row = {
            "id": j.id, "gpus": g, "priority": j.priority, "model": j.spec.model or "",
            "arrival_s": j.spec.arrival_s, "first_start_s": j.first_start_s, "end_s": j.end_s,
            "status": j.status, "queue_s": j.queue_s, "jct_s": j.end_s - j.spec.arrival_s,
            "restarts": j.restarts, "interruptions": sum(j.interruptions.values()),
            "preemptions": j.preemptions, "steps_total": j.steps_total,
            "steps_done": j.steps_done, "ideal_step_s": j.ideal_step_s, "step_s": j.step_s,
            "slowdown": j.step_s / j.ideal_step_s if j.ideal_step_s else np.nan,
            "leaf_groups": j.leaf_groups, "checkpoint_interval_s": j.interval_s,
            "alloc_gpu_s": j.alloc_s * g,
            "ideal_train_gpu_s": j.ideal_train_s * g,
            "effective_training_time": j.time["train"] / wall if wall > 0 else np.nan,
        }  # fmt: skip
        row |= {f"{p}_gpu_s": j.time[p] * g for p in PHASES}
        rows.append(row)
    return pd.DataFrame(rows)


def event_frame(sim) -> pd.DataFrame:
    return pd.DataFrame(sim.log, columns=["time_s", "kind", "job", "node", "cause", "detail"])


def _pct(values, q) -> float:
    values = np.asarray(values, float)
    values = values[~np.isnan(values)]
    return float(np.percentile(values, q)) if len(values) else float("nan")


def _chosen(intervals) -> float:
    """The median checkpoint interval the jobs ran with (a value one of them had; inf: no
    checkpoints; NaN: no job started)."""
    values = np.asarray(intervals, float)
    values = values[~np.isnan(values)]
    return float(np.percentile(values, 50, method="lower")) if len(values) else float("nan")


def summarize(sim, jobs: pd.DataFrame, events: pd.DataFrame, wall_s: float) -> dict:
    """The run's summary (module docstring's definitions), in its fixed key order."""
    cfg, t = sim.cfg, sim.env.now
    done = jobs[jobs.status == "done"]
    started = jobs[~jobs.first_start_s.isna()]
    return {
        "simulated_s": t,
        "capacity_gpus": cfg.capacity_gpus,
        "nodes": cfg.nodes,
        "spare_nodes": cfg.spare_nodes,
        "policy": cfg.policy,
        "placement": cfg.placement,
        **_gpu_time(sim, jobs, started),
        **_job_outcomes(jobs, done, started),
        "checkpoint_policy": cfg.checkpoint.policy,
        "checkpoint_interval_s": _chosen(started.checkpoint_interval_s),
        **_interruptions(cfg, events),
        "energy_kwh": _energy_j(sim) / KWH_J,
        "events": sim.events,
        "step_time_estimates": sim.steps.estimates,
        "wall_s": wall_s,
    }


def _gpu_time(sim, jobs: pd.DataFrame, started: pd.DataFrame) -> dict:
    """Where the GPU-time went: utilization, goodput, the hours of each use (module docstring)."""
    t = sim.env.now
    cap = sim.cfg.capacity_gpus * t
    alloc = sim.gpu_s["allocated"]
    train = float(jobs["train_gpu_s"].sum())
    ideal = float(jobs["ideal_train_gpu_s"].sum())
    return {
        "utilization": alloc / cap if cap else 0.0,
        "goodput": train / alloc if alloc else 0.0,
        "effective_utilization": ideal / cap if cap else 0.0,
        "placement_efficiency": ideal / train if train else 1.0,
        "allocated_gpu_hours": alloc / 3600,
        "idle_gpu_hours": sim.gpu_s["idle"] / 3600,
        "down_gpu_hours": sim.gpu_s["down"] / 3600,
        "lost_gpu_hours": float(jobs["lost_gpu_s"].sum()) / 3600,
        "checkpoint_gpu_hours": float(jobs["checkpoint_gpu_s"].sum()) / 3600,
        "recovery_gpu_hours": float(
            jobs[["startup_gpu_s", "detect_gpu_s", "save_gpu_s"]].sum().sum()
        )
        / 3600,  # fmt: skip
        "effective_training_time": float(
            started["train_gpu_s"].sum()
            / ((started.gpus * ((started.end_s.fillna(t)) - started.first_start_s)).sum() or 1)
        ),
    }


def _job_outcomes(jobs: pd.DataFrame, done: pd.DataFrame, started: pd.DataFrame) -> dict:
    """The jobs by status, and the percentiles of completion time and queueing delay."""
    status = Counter(jobs.status)
    return {
        "jobs": len(jobs),
        "finished": status["done"],
        "running": status["running"] + status["holding"],
        "queued": status["queued"],
        "not_arrived": status["pending"],
        "rejected": status["rejected"],
        "jct_p50_s": _pct(done.jct_s, 50),
        "jct_p90_s": _pct(done.jct_s, 90),
        "jct_p99_s": _pct(done.jct_s, 99),
        "queue_p50_s": _pct(started.queue_s, 50),
        "queue_p90_s": _pct(started.queue_s, 90),
        "queue_p99_s": _pct(started.queue_s, 99),
    }


def _interruptions(cfg, events: pd.DataFrame) -> dict:
    """Interruptions by cause (unexpected or planned), failures and preemptions."""
    causes = Counter()
    graceful = {c.name for c in cfg.causes if c.graceful}
    for row in events[events.kind == "interruption"].itertuples():
        causes[row.cause] += 1
    return {
        "interruptions": sum(causes.values()),
        "unexpected_interruptions": sum(v for k, v in causes.items() if k not in graceful),
        "planned_interruptions": sum(v for k, v in causes.items() if k in graceful),
        "interruptions_by_cause": dict(causes.most_common()),
        "failures": int((events.kind == "failure").sum()),
        "preemptions": int((events.kind == "preemption").sum()),
    }


def _energy_j(sim) -> float:
    """Energy of the allocated and idle GPU-time at the GPU's TDP and the facility's PUE."""
    cfg = sim.cfg
    tdp = sim.acc.tdp_w or 0.0
    return tdp * cfg.pue * (cfg.busy_power_fraction * sim.gpu_s["allocated"]
                            + cfg.idle_power_fraction * sim.gpu_s["idle"])  # fmt: skip


def conservation(sim, jobs: pd.DataFrame) -> dict:
    """Residuals of the conservation laws; raises RuntimeError when one is broken."""
    cfg, t = sim.cfg, sim.env.now
    cap = cfg.capacity_gpus * t
    total = sum(sim.gpu_s.values())
    per_job = float(jobs["alloc_gpu_s"].sum())
    phases = jobs[[f"{p}_gpu_s" for p in PHASES]].sum(axis=1)
    status = Counter(jobs.status)
    known = sum(status[k] for k in ("done", "running", "holding", "queued", "pending", "rejected"))
    out = {
        "jobs_accounted": known == len(jobs),
        "gpu_time_residual": (total - cap) / cap if cap else 0.0,
        "allocation_residual": (per_job - sim.gpu_s["allocated"])
        / max(sim.gpu_s["allocated"], 1.0),
        "phase_residual_max": float(
            ((phases - jobs.alloc_gpu_s).abs() / jobs.alloc_gpu_s.clip(lower=1.0)).max()
        ) if len(jobs) else 0.0,  # fmt: skip
        "gpus_now": sim.alloc_gpus + sim.idle_gpus + sim.down_gpus == cfg.capacity_gpus,
    }
    broken = [  # NaN breaks a law: it is no residual
        k for k, v in out.items() if (v is False) or (isinstance(v, float) and not abs(v) <= REL_TOL)
    ]
    if broken:
        raise RuntimeError(f"conservation broken ({', '.join(broken)}): {out}")
    out["ok"] = True
    return out
