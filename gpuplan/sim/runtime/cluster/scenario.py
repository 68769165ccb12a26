"""Scenario files (YAML): a cluster, its policies, failures, checkpoints and jobs, and variants
that change a few of them — one file, several runs to compare.

Top-level keys (each section optional unless noted):

    name, description, seed, horizon_days
    cluster:    preset (required), nodes (required), spare_nodes, nodes_per_leaf, oversubscription
    scheduler:  policy (fifo, backfill, priority, gang), placement (topology, first-fit, random,
                gpu-first-fit), backfill_depth, quantum_s
    failures:   rates (default: the Llama 3 Table 5 file, or a path), scale, distribution
                (exponential, weibull), overrides {cause: {field: value}}, enabled
    recovery:   reschedule_s, restart_s
    checkpoint: policy (none, fixed, young, daly), interval_s, mode (blocking, async),
                write_bytes_per_s, read_bytes_per_s, node_write_bytes_per_s, overhead_s
    trace:      file (CSV or JSON Lines, relative to the scenario) or generate {jobs, load, seed,
                mix, high_priority_share, size_scale, duration_scale}
    jobs:       a list of jobs (``jobs.JobSpec`` keys; ``strategy`` a dict)
    on_oversize: error (default) or reject
    variants:   a list of {name, <any section above, merged into the base>}
    expect:     published figures to print beside the simulated ones (free-form numbers)

Every value is checked against ``scenario.schema.json`` (``schema``) when the file is read — its
type, its range, unknown keys — and ``docs/scenario.md`` describes every key with its unit,
default and range; ``check_scenario`` lists every problem of a file (``gpuplan cluster --check``).

``run_scenario`` runs the base and every variant with the same seed (the file's, or the one
given), so variants differ only by what they change. A seed other than the file's also shifts a
generated trace's seed by as much: another seed is another draw of the whole scenario.
"""

from __future__ import annotations

import copy
import math
import os
from dataclasses import replace
from importlib import resources
from pathlib import Path

from gpuplan.errors import GpuplanError, check_kind, unknown_key
from gpuplan.sim.parallel.topology import built_of, get_cluster
from gpuplan.sim.runtime.cluster.checkpoint import CheckpointConfig
from gpuplan.sim.runtime.cluster.config import ClusterConfig
from gpuplan.sim.runtime.cluster.failures import load_causes
from gpuplan.sim.runtime.cluster.jobs import generate_trace, job_from_dict, load_trace
from gpuplan.sim.runtime.cluster.schema import check, definition, load_yaml, problems

TOP_KEYS = ("name", "description", "seed", "horizon_days", "cluster", "scheduler", "failures",
            "recovery", "checkpoint", "trace", "jobs", "on_oversize", "variants", "expect")  # fmt: skip
SECTION_KEYS = {
    "cluster": ("preset", "nodes", "spare_nodes", "nodes_per_leaf", "oversubscription"),
    "scheduler": ("policy", "placement", "backfill_depth", "quantum_s"),
    "failures": ("rates", "scale", "distribution", "overrides", "enabled"),
    "recovery": ("reschedule_s", "restart_s"),
    "checkpoint": (
        "policy",
        "interval_s",
        "mode",
        "write_bytes_per_s",
        "read_bytes_per_s",
        "node_write_bytes_per_s",
        "overhead_s",
    ),  # fmt: skip
    "trace": ("file", "generate"),
}
DAY_S = 86400.0
# Failures a run may draw: the engine plays about 7,000 a second (llama3-405b at 100x the rates:
# 21,368 failures in 3.1 s on one core), so this many take some 15 s; a failure-rate scale of 1e9
# is refused at once instead of running for days. A run without a horizon counts ten years.
MAX_FAILURES = 100_000
MAX_WEIBULL_DRAWS = 10_000_000  # about 2 s: 86 million took 19 s on a loaded core
MAX_SLICES = 1_000_000  # gang time slices in a horizon (each is a scheduling pass)
LIMIT_S = 3650 * DAY_S  # as engine.UNBOUNDED_LIMIT_S: the longest a run without a horizon lasts
SEED_END = 2**64  # seeds are 0 ... 2**64 - 1, as numpy takes them (a shifted trace seed wraps)


def builtin_scenarios() -> dict[str, Path]:
    """Scenario names shipped with gpuplan -> their files."""
    folder = resources.files("gpuplan.sim.runtime.cluster") / "scenarios"
    return {
        p.name.removesuffix(".yaml").replace("_", "-"): Path(str(p))
        for p in folder.iterdir()
        if p.name.endswith(".yaml")
    }


def scenario_path(name_or_path: str | Path) -> Path:
    """A built-in scenario's file, or the path given."""
    check_kind("scenario", name_or_path, (str, os.PathLike))
    if not str(name_or_path).strip():
        raise GpuplanError("scenario='' is invalid: give a YAML file or a built-in name")
    path = Path(name_or_path)
    if path.exists():
        return path
    known = builtin_scenarios()
    key = str(name_or_path).removesuffix(".yaml").replace("_", "-")
    if key in known:
        return known[key]
    raise unknown_key("scenario (a YAML file or a built-in name)", str(name_or_path), known)


def load_scenario(name_or_path) -> tuple[dict, Path]:
    """The scenario document, every value checked against the schema, and its file."""
    path = scenario_path(name_or_path)
    doc = load_yaml(path)
    if not isinstance(doc, dict):
        raise GpuplanError(f"{path}: a scenario is a mapping of sections (cluster, jobs ...), "
                           f"not {type(doc).__name__}")  # fmt: skip
    for problem in problems(doc):
        raise GpuplanError(f"{path}: {problem}")
    return doc, path


def check_scenario(name_or_path) -> list[str]:
    """Every problem of a scenario file, one line each (empty: it is valid). Schema problems are
    all listed; a file that meets the schema is then built, run by run, and set up to simulate
    (every job's ideal step time estimated) without simulating, and the first problem found
    there (an unknown model, a trace file missing, a strategy the model cannot take) is listed."""
    from gpuplan.sim.runtime.cluster.engine import ClusterSim

    path = scenario_path(name_or_path)
    doc = load_yaml(path)
    if not isinstance(doc, dict):
        return [f"{path}: a scenario is a mapping of sections, not {type(doc).__name__}"]
    found = [f"{path}: {p}" for p in problems(doc)]
    if found:
        return found
    for name, run_doc in runs(doc):
        where = f"{path}: run {name!r}"
        try:
            cfg, jobs = build(run_doc, path.parent, where=where)
        except GpuplanError as err:
            return [str(err)]
        try:
            ClusterSim(cfg, jobs)  # prices every job's step; simulates nothing
        except GpuplanError as err:
            return [f"{where}: {err}"]
    return []


def merged(base: dict, variant: dict) -> dict:
    """``base`` with the variant's sections merged over it (one level deep)."""
    out = copy.deepcopy({k: v for k, v in base.items() if k != "variants"})
    for key, value in variant.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = out[key] | value
        else:
            out[key] = copy.deepcopy(value)
    return out


def build(doc: dict, folder: Path, *, where: str = "scenario"):
    """(ClusterConfig, jobs) of one run's document (checked against the schema first)."""
    for problem in problems(doc):
        raise GpuplanError(f"{where}: {problem}")
    try:
        return _build(doc, folder)
    except GpuplanError as err:
        raise GpuplanError(f"{where}: {err}") from None


def _build(doc: dict, folder: Path):
    c = doc["cluster"]
    cluster = get_cluster(c["preset"])
    cluster = replace(
        cluster,
        nodes_per_leaf=int(c.get("nodes_per_leaf", cluster.nodes_per_leaf)),
        oversubscription=float(c.get("oversubscription", cluster.oversubscription)),
    )
    f = doc.get("failures") or {}
    causes, shape = (), 0.75
    if f.get("enabled", True):
        rates = f.get("rates", "default")
        if rates != "default":
            rates = _file(folder, rates, "failures.rates")
        causes, shape = load_causes(rates, scale=float(f.get("scale", 1.0)),
                                    overrides=f.get("overrides"))  # fmt: skip
    s, r = doc.get("scheduler") or {}, doc.get("recovery") or {}
    horizon = doc.get("horizon_days")
    cfg = ClusterConfig(
        cluster=cluster, nodes=int(c["nodes"]), spare_nodes=int(c.get("spare_nodes", 0)),
        policy=s.get("policy", "fifo"), placement=s.get("placement", "topology"),
        backfill_depth=int(s.get("backfill_depth", 500)),
        quantum_s=float(s.get("quantum_s", 3600.0)),
        checkpoint=CheckpointConfig(**(doc.get("checkpoint") or {})), causes=causes,
        distribution=f.get("distribution", "exponential"), weibull_shape=shape,
        reschedule_s=float(r.get("reschedule_s", 60.0)),
        restart_s=float(r.get("restart_s", 180.0)),
        horizon_s=None if horizon is None else float(horizon) * DAY_S,
        on_oversize=doc.get("on_oversize", "error"),
    )  # fmt: skip
    _check_failure_count(cfg, f.get("scale", 1.0))
    slices = (cfg.horizon_s or LIMIT_S) / cfg.quantum_s
    if cfg.policy == "gang" and slices > MAX_SLICES:
        raise GpuplanError(
            f"scheduler.quantum_s={cfg.quantum_s:g} gives {slices:,.0f} gang time slices in "
            f"{'the horizon' if cfg.horizon_s else 'the 10 years a run may last'}, more than "
            f"{MAX_SLICES:,}: use a longer quantum"
        )
    return cfg, _jobs(doc, folder, cfg)


def expected_failures(cfg: ClusterConfig) -> float:
    """Mean number of failures the run draws in its horizon (without one: in the ten years a
    run may last at most)."""
    span_s = LIMIT_S if cfg.horizon_s is None else cfg.horizon_s
    units = _units(cfg)
    return sum(c.rate_per_hour / 3600.0 * units[c.unit] * span_s for c in cfg.causes)


def weibull_draws(cfg: ClusterConfig) -> float:
    """Mean number of Weibull draws the failures take: each unit of a cause with a rate starts
    five mean lifetimes before time zero (``failures._renewal_times``), so five draws each
    besides the failures themselves; none for exponential failures."""
    if cfg.distribution != "weibull":
        return 0.0
    units = _units(cfg)
    burn_in = sum(5.0 * units[c.unit] for c in cfg.causes if c.rate_per_hour > 0)
    return burn_in + expected_failures(cfg)


def _units(cfg: ClusterConfig) -> dict[str, int]:
    per_domain = max(1, cfg.cluster.scaleup_size // cfg.gpus_per_node)
    leaves = math.ceil(cfg.total_nodes / (cfg.cluster.nodes_per_leaf * per_domain))
    return {"gpu": cfg.capacity_gpus, "job_gpu": cfg.capacity_gpus, "node": cfg.total_nodes,
            "leaf": leaves}  # fmt: skip


def _check_failure_count(cfg: ClusterConfig, scale) -> None:
    count = expected_failures(cfg)
    if count > MAX_FAILURES:
        span = "its horizon" if cfg.horizon_s is not None else "the 10 years a run may last"
        raise GpuplanError(
            f"failures: the rates (failures.scale={scale!r}) give {count:,.0f} failures in "
            f"{span} on {cfg.total_nodes:,} nodes, more than the {MAX_FAILURES:,} a run can "
            "simulate in seconds: lower the scale or the rates, or shorten horizon_days"
        )
    draws = weibull_draws(cfg)
    if draws > MAX_WEIBULL_DRAWS:
        raise GpuplanError(
            f"failures.distribution='weibull' on {cfg.capacity_gpus:,} GPUs takes "
            f"{draws:,.0f} random draws, more than {MAX_WEIBULL_DRAWS:,}: use exponential "
            "failures or fewer nodes"
        )


def _file(folder: Path, name: str, key: str) -> Path:
    """A file a scenario names, relative to the scenario's folder; it must exist."""
    path = folder / name
    if not path.is_file():
        raise GpuplanError(f"{key}={name!r} is invalid: no such file {path}")
    return path


def _jobs(doc: dict, folder: Path, cfg: ClusterConfig) -> list:
    jobs = [job_from_dict(raw, k) for k, raw in enumerate(doc.get("jobs") or [])]
    trace = doc.get("trace") or {}
    if "file" in trace:
        jobs += load_trace(_file(folder, trace["file"], "trace.file"))
    if "generate" in trace:
        g = trace["generate"]
        mix = None if g.get("mix") is None else str(_file(folder, g["mix"], "trace.generate.mix"))
        jobs += generate_trace(
            jobs=int(g.get("jobs", 1000)), capacity_gpus=cfg.schedulable_gpus,
            load=float(g.get("load", 1.0)), seed=int(g.get("seed", 0)), mix_path=mix,
            high_priority_share=float(g.get("high_priority_share", 0.0)),
            size_scale=int(g.get("size_scale", 1)),
            duration_scale=float(g.get("duration_scale", 1.0)),
        )  # fmt: skip
    if not jobs:
        raise GpuplanError("the scenario has no jobs: give jobs, trace.file or trace.generate")
    return jobs


def runs(doc: dict) -> list[tuple[str, dict]]:
    """(name, document) of the base run and of every variant."""
    base = doc.get("name", "scenario")
    out = [(base, doc)]
    for k, variant in enumerate(doc.get("variants") or []):
        name = variant.get("name", f"variant {k + 1}")
        out.append((name, merged(doc, {k2: v for k2, v in variant.items() if k2 != "name"})))
    return out


def run_scenario(name_or_path, *, seed: int | None = None, progress: bool = False,
                 calibration: str | None = None, gpu: str | None = None):  # fmt: skip
    """Run a scenario's base and variants; a list of ``ClusterResult``. ``calibration``: a fit
    file of the cluster's GPU (``efficiency_from_file``) to price the steps with; ``gpu``: an
    accelerator key the clusters' nodes are built of instead of their preset's
    (``topology.built_of``)."""
    from gpuplan.hwmodels.efficiency import efficiency_from_file
    from gpuplan.sim.runtime.cluster.run import simulate_cluster

    doc, path = load_scenario(name_or_path)
    base = int(doc.get("seed", 0))
    seed = base if seed is None else seed
    check(seed, definition("seed"), "seed")
    gen = (doc.get("trace") or {}).get("generate")
    if gen is not None and seed != base:  # another seed draws another trace too
        shifted = gen | {"seed": (int(gen.get("seed", 0)) + seed - base) % SEED_END}
        # (a scenario without variants keeps none: an empty list, not a null)
        variants = doc.get("variants") or []
        doc = merged(doc, {"trace": {"generate": shifted}}) | {"variants": variants}
    results = []
    for name, run_doc in runs(doc):
        cfg, jobs = build(run_doc, path.parent, where=f"{path}: run {name!r}")
        if gpu is not None:
            cfg = replace(cfg, cluster=built_of(cfg.cluster, gpu))
        fit = efficiency_from_file(calibration, cfg.cluster.gpu) if calibration else None
        results.append(simulate_cluster(cfg, jobs, seed=seed, progress=progress, name=name,
                                        fit=fit))  # fmt: skip
    return results
