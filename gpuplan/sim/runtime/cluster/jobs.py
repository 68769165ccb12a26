"""Job traces: read from CSV or JSON Lines, or generated with a seed from a published-shape mix.

A job is an arrival time, a GPU count, a priority and its work: steps to train, tokens, or an
ideal run time (at the best placement), and how fast a step is — a model and strategy (its step
time then comes from the training estimate on the placed topology) or a given ``step_time_s``
(with ``comm_fraction``: the share of it that placement can slow down).

Files: one job per row (CSV) or line (JSON Lines) with the keys of ``JobSpec`` (``strategy`` a
dict in JSON; in CSV the strategy's fields ``tp``, ``pp``, ``cp``, ``ep``, ``micro_batch``,
``global_batch``, ``schedule``, ``zero`` as columns). The Helios trace schema (Hu et al. SC'21:
``job_id``, ``submit_time``, ``gpu_num``, ``duration``) is read as well; CPU-only rows are skipped.
Every row is checked against the schema's ``job`` (``scenario.schema.json``): a value of the
wrong type or out of range, or an unknown column, is an error naming the file, the line and the
key, never a row dropped or a value truncated; the Helios trace's other columns are ignored.

Generated traces (``generate_trace``): Poisson arrivals at the rate that offers ``load`` times the
cluster's GPU-hours; sizes and log-normal run times from ``data/job_mix.yaml`` (shaped after
Philly, Helios, PAI and Meta's RSC; see the file); each size trains the mix's template model.
"""

from __future__ import annotations

import functools
import json
import math
import numbers
import warnings
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np
import yaml

from gpuplan.errors import GpuplanError
from gpuplan.sim.parallel.strategy import Strategy
from gpuplan.sim.runtime.cluster.schema import definition, from_text, load_job_mix, problems

STRATEGY_KEYS = ("tp", "pp", "cp", "ep", "micro_batch", "global_batch", "schedule",
                 "virtual_stages", "zero", "sp", "recompute")  # fmt: skip
ALIASES = {"job_id": "id", "submit_time": "arrival_s", "gpu_num": "gpus", "duration": "duration_s"}
# The Helios trace's other columns (Hu et al. SC'21, HeliosData cluster_log.csv): read, not used
IGNORED_COLUMNS = ("user", "vc", "jobname", "cpu_num", "node_num", "state", "start_time",
                   "end_time", "queue")  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class JobSpec:
    """A job as submitted."""

    id: str
    arrival_s: float
    gpus: int
    priority: int = 0
    steps: float | None = None
    tokens: float | None = None
    duration_s: float | None = None  # ideal run time: steps = duration / ideal step time
    model: str | None = None
    strategy: Strategy | None = None
    seq: int | None = None
    step_time_s: float | None = None
    comm_fraction: float = 0.0
    state_bytes: float | None = None  # checkpoint size; default from the model's parameters

    def __post_init__(self) -> None:
        where = f"job {self.id!r}"
        for name in ("arrival_s", "priority", "steps", "tokens", "duration_s", "seq",
                     "step_time_s", "comm_fraction", "state_bytes"):  # fmt: skip
            _finite(where, name, getattr(self, name), whole=name in ("priority", "seq"))
        if isinstance(self.gpus, bool) or not isinstance(self.gpus, int) or self.gpus <= 0:
            raise GpuplanError(f"{where}: gpus={self.gpus!r} is invalid: a whole number > 0")
        if self.arrival_s < 0 or math.isnan(self.arrival_s):
            raise GpuplanError(f"{where}: arrival_s={self.arrival_s!r} is invalid: use >= 0")
        if sum(x is not None for x in (self.steps, self.tokens, self.duration_s)) != 1:
            raise GpuplanError(f"{where}: give exactly one of steps, tokens, duration_s")
        for name in ("steps", "tokens", "duration_s"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise GpuplanError(f"{where}: {name}={value!r} is invalid: it must be > 0")
        if self.step_time_s is None and (self.model is None or self.strategy is None):
            raise GpuplanError(f"{where}: give a model and a strategy, or step_time_s")
        if self.step_time_s is not None and not self.step_time_s > 0:
            raise GpuplanError(f"{where}: step_time_s={self.step_time_s!r} must be > 0")
        if self.strategy is not None and self.strategy.world != self.gpus:
            raise GpuplanError(
                f"{where}: its strategy uses {self.strategy.world} GPUs but the job asks for "
                f"gpus={self.gpus}"
            )
        if self.tokens is not None and (self.strategy is None or self.seq is None):
            raise GpuplanError(f"{where}: tokens needs a strategy and seq (tokens per step)")
        if not 0 <= self.comm_fraction <= 1:
            raise GpuplanError(f"{where}: comm_fraction={self.comm_fraction!r} is in [0, 1]")

    @property
    def tokens_per_step(self) -> float | None:
        if self.strategy is None or self.seq is None:
            return None
        return self.strategy.global_batch * self.seq


def _finite(where: str, name: str, value, *, whole: bool = False) -> None:
    """A field that, when given, must be a finite (whole) number; a boolean is none."""
    if value is None:
        return
    bad = isinstance(value, bool) or not isinstance(value, numbers.Real)
    if not bad and (not math.isfinite(value) or whole and not float(value).is_integer()):
        bad = True
    if bad:
        what = "a finite whole number" if whole else "a finite number"
        raise GpuplanError(f"{where}: {name}={value!r} is invalid: it must be {what}")


def make_strategy(gpus: int, fields: dict) -> Strategy:
    """A strategy from a few fields: dp fills the GPUs, the global batch 4 pp micro-batches."""
    tp, pp, cp = (int(fields.get(k, 1)) for k in ("tp", "pp", "cp"))
    inner = tp * pp * cp
    if gpus % inner:
        raise GpuplanError(f"tp*pp*cp = {inner} does not divide the job's gpus={gpus}")
    dp = gpus // inner
    mb = int(fields.get("micro_batch", 1))
    rest = {k: fields[k] for k in STRATEGY_KEYS if k in fields and k not in ("tp", "pp", "cp")}
    rest.setdefault("global_batch", mb * dp * max(1, 4 * pp))
    rest["micro_batch"] = mb
    return Strategy(tp=tp, pp=pp, cp=cp, dp=dp, **rest)


def job_from_dict(raw: dict, k: int = 0, *, where: str | None = None,
                  row: bool = False) -> JobSpec:  # fmt: skip
    """A ``JobSpec`` from one record, every value checked against the schema's ``job``. A trace
    ``row`` (a CSV row or JSON line) may use the Helios names and give the strategy's fields as
    columns; a CSV row's cells are text, read as the type the schema gives each key."""
    where = where or f"jobs[{k}]"
    if not isinstance(raw, dict):
        raise GpuplanError(f"{where}: a job is a mapping of keys (gpus, steps ...), not "
                           f"{type(raw).__name__}")  # fmt: skip
    if row:
        raw = _trace_row(raw)
    for problem in problems(raw, definition("job")):
        raise GpuplanError(f"{where}: {problem}")
    fields = dict(raw.get("strategy") or {})
    gpus = int(raw["gpus"])
    strategy = None
    if raw.get("model") or fields:
        try:
            strategy = make_strategy(gpus, fields)
        except GpuplanError as err:
            raise GpuplanError(f"{where}: {err}") from None

    def num(key, cast=float):
        return cast(raw[key]) if key in raw else None

    return JobSpec(
        id=str(raw.get("id", k)), arrival_s=float(raw.get("arrival_s", 0.0)), gpus=gpus,
        priority=num("priority", int) or 0, steps=num("steps"), tokens=num("tokens"),
        duration_s=num("duration_s"), model=raw.get("model"), strategy=strategy,
        seq=num("seq", int), step_time_s=num("step_time_s"),
        comm_fraction=num("comm_fraction") or 0.0, state_bytes=num("state_bytes"),
    )  # fmt: skip


def _trace_row(raw: dict) -> dict:
    """A trace row as a job record: Helios names, empty cells left out, strategy columns
    gathered, text cells read as the schema's types."""
    out = {}
    for key, value in raw.items():
        key = ALIASES.get(key, key)
        if value is None or value == "" or key in IGNORED_COLUMNS:
            continue
        out[key] = value
    columns = {k: out.pop(k) for k in STRATEGY_KEYS if k in out}
    if columns and "strategy" not in out:
        out["strategy"] = columns
    elif columns:
        out.update(columns)  # both: the schema names the columns as unknown job keys
    job, strat = definition("job")["properties"], definition("strategy")["properties"]
    for key, value in list(out.items()):
        if isinstance(value, str) and key in job and key not in ("id", "model"):
            out[key] = from_text(value.strip(), job[key])
    if isinstance(out.get("strategy"), dict):
        out["strategy"] = {
            k: from_text(v.strip(), strat[k]) if isinstance(v, str) and k in strat else v
            for k, v in out["strategy"].items()
        }
    return out


def load_trace(path: str | Path) -> list[JobSpec]:
    """Jobs from a CSV or JSON Lines file, in arrival order (times relative to the first). Rows
    with no GPUs (a Helios trace's CPU jobs) are skipped; any other bad row is an error naming
    its line."""
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        raise GpuplanError(f"{path}: not UTF-8 text (byte {err.start}): is it a trace?") from None
    except OSError as err:
        raise GpuplanError(f"{path}: cannot read the trace ({err.strerror or err})") from None
    rows = _json_rows(path, text) if path.suffix in (".jsonl", ".json") else _csv_rows(path, text)
    jobs = []
    for line, raw in rows:
        if isinstance(raw, dict) and _no_gpus(raw):
            continue
        jobs.append(job_from_dict(raw, len(jobs), where=f"{path} line {line}", row=True))
    if not jobs:
        raise GpuplanError(f"{path}: no GPU jobs in the trace")
    t0 = min(j.arrival_s for j in jobs)
    return sorted((_shift(j, t0) for j in jobs), key=lambda j: (j.arrival_s, j.id))


def _no_gpus(raw: dict) -> bool:
    """A CPU-only row: gpus (or gpu_num) is zero."""
    value = raw.get("gpus", raw.get("gpu_num"))
    if isinstance(value, str):
        return value.strip() in ("0", "0.0")
    return not isinstance(value, bool) and isinstance(value, int | float) and value == 0


def _json_rows(path: Path, text: str) -> list[tuple[int, object]]:
    rows = []
    for k, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append((k, json.loads(line)))
        except json.JSONDecodeError as err:
            raise GpuplanError(f"{path} line {k}: not valid JSON ({err.msg}, column "
                               f"{err.colno})") from None  # fmt: skip
        except (ValueError, RecursionError) as err:  # a 5,000-digit number, nesting too deep
            first = " ".join(str(err).split(";")[0].split()) or type(err).__name__
            raise GpuplanError(f"{path} line {k}: not valid JSON ({first})") from None
    return rows


def _csv_rows(path: Path, text: str) -> list[tuple[int, dict]]:
    """(line, row) of a CSV file, every cell as text; Helios' date-time submit times become
    seconds."""
    import io

    import pandas as pd

    try:
        frame = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as err:
        first = " ".join(str(err).split())
        raise GpuplanError(f"{path}: not a valid CSV trace ({first})") from None
    if "submit_time" in frame and len(frame):
        times = pd.to_numeric(frame["submit_time"], errors="coerce")
        if times.isna().any():
            try:
                with warnings.catch_warnings():  # "could not infer format": parsed one by one
                    warnings.simplefilter("ignore", UserWarning)
                    t = pd.to_datetime(frame["submit_time"])
            except (ValueError, TypeError, OverflowError):
                bad = frame["submit_time"][times.isna()].iloc[0]
                raise GpuplanError(f"{path}: submit_time={bad!r} is invalid: it must be "
                                   "seconds or a date and time") from None  # fmt: skip
            frame["submit_time"] = (t - t.min()).dt.total_seconds().map(repr)
    return [(k + 2, row) for k, row in enumerate(frame.to_dict("records"))]  # line 1: header


def _shift(job: JobSpec, t0: float) -> JobSpec:
    from dataclasses import replace

    return replace(job, arrival_s=job.arrival_s - t0) if t0 else job


@functools.cache
def job_mix(path: str | None = None) -> dict:
    """The size classes and templates of a job-mix file (default: ``data/job_mix.yaml``)."""
    if path is None:
        text = (resources.files("gpuplan.sim.runtime.cluster") / "data" / "job_mix.yaml").read_text()
        return yaml.safe_load(text)
    return load_job_mix(Path(path))


def template_for(gpus: int, mix: dict) -> dict:
    """The training a job of ``gpus`` GPUs runs in the mix: the largest template that fits."""
    fits = [t for t in mix["templates"] if t["min_gpus"] <= gpus]
    return max(fits, key=lambda t: t["min_gpus"])


def generate_trace(*, jobs: int, capacity_gpus: int, load: float, seed: int,
                   mix_path: str | None = None, high_priority_share: float = 0.0,
                   start_s: float = 0.0, size_scale: int = 1,
                   duration_scale: float = 1.0) -> list[JobSpec]:  # fmt: skip
    """``jobs`` jobs arriving as a Poisson process that offers ``load`` x the cluster's GPU
    time; sizes and run times from the mix (classes larger than the cluster left out).
    ``size_scale`` multiplies every class's GPUs and ``duration_scale`` its run times (the same
    mix on a larger cluster)."""
    if jobs <= 0 or load <= 0:
        raise GpuplanError(f"generated trace: jobs={jobs} and load={load} must be > 0")
    if not isinstance(size_scale, int) or size_scale < 1 or duration_scale <= 0:
        raise GpuplanError(
            f"generated trace: size_scale={size_scale!r} must be a whole number >= 1 and "
            f"duration_scale={duration_scale!r} > 0"
        )
    mix = job_mix(mix_path)
    classes = [
        c | {"gpus": c["gpus"] * size_scale, "median_s": c["median_s"] * duration_scale}
        for c in mix["classes"]
    ]
    classes = [c for c in classes if c["gpus"] <= capacity_gpus]
    if not classes or not sum(c["share"] for c in classes) > 0:
        raise GpuplanError(
            f"generated trace: no class of the job mix fits {capacity_gpus} GPUs with a share "
            f"above 0 (size_scale={size_scale})"
        )
    smallest = min(t["min_gpus"] for t in mix["templates"]) if mix["templates"] else math.inf
    if min(c["gpus"] for c in classes) < smallest:
        raise GpuplanError(f"generated trace: the job mix has no template for jobs of "
                           f"{min(c['gpus'] for c in classes)} GPUs (min_gpus)")  # fmt: skip
    share = np.array([c["share"] for c in classes], float)
    share /= share.sum()
    mean_s = np.array([c["median_s"] * math.exp(c["sigma"] ** 2 / 2) for c in classes])
    gpus = np.array([c["gpus"] for c in classes])
    rate = load * capacity_gpus / float((share * gpus * mean_s).sum())  # arrivals per second
    rng = np.random.default_rng(seed)
    arrivals = start_s + np.cumsum(rng.exponential(1.0 / rate, jobs))
    which = rng.choice(len(classes), size=jobs, p=share)
    z = rng.standard_normal(jobs)
    high = rng.random(jobs) < high_priority_share
    out = []
    for k in range(jobs):
        c = classes[which[k]]
        duration = float(np.clip(c["median_s"] * math.exp(c["sigma"] * z[k]), 60.0, 60 * 86400.0))
        t = template_for(c["gpus"], mix)
        out.append(
            JobSpec(
                id=f"j{k:05d}",
                arrival_s=float(arrivals[k]),
                gpus=int(c["gpus"]),
                priority=int(high[k]),
                duration_s=duration,
                model=t["model"],
                strategy=make_strategy(int(c["gpus"]), t),
                seq=int(t["seq"]),
            )  # fmt: skip
        )
    return out
