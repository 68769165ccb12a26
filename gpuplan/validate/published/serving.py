"""Published serving results reproduced: each published number predicted by the serving step model
and its capacity bound, with the error by source and metric.

The rows and their sources are ``data/published_serving.csv`` and
``data/published_serving_sources.json`` (TensorRT-LLM's performance overviews, NVIDIA NIM's
benchmarks, vLLM's latency tests; every setting a source leaves unstated is marked assumed).
Each row's load decides how it is predicted (assumptions, named):

- ``static_batch``: one batch of ``batch`` equal requests run to completion: one prefill
  iteration of all prompts, then ``output_tokens - 1`` decode iterations of the whole batch
  (``StepModel.decode_run_s``); TTFT is that prefill, end-to-end latency the whole run; a
  batch larger than the KV cache runs in waves of the sequences that fit (``_static``), and a
  source that ran with the paged KV cache off (sources file ``kv_cache: contiguous``) holds its
  batch in the whole device;
- ``offline`` (every request queued at once, in-flight batching): the replica saturated with
  as many sequences as its scheduler and KV cache hold, each reserving prompt + output tokens
  (TensorRT-LLM's default GUARANTEED_NO_EVICT capacity scheduler reserves a request's whole
  length); prompts are prefilled in iterations of at most the engine's token budget, then the
  batch decodes; throughput is sequences x output tokens over that time (the bound
  ``plan.unit_rate_bound`` takes, with the prefill packed by the budget);
- ``concurrency`` (a closed loop of C clients): ``b = min(C, sequences that fit)`` run at once;
  a new request waits half a decode iteration and runs its prefill alone, after any other
  request's prefill under way (an M/D/1 wait: those prefills hold the engine a share
  ``(b - 1) x prefill / lifetime``); each other running request's prefill stalls a request's
  decode once in its lifetime (no chunking); clients beyond ``b`` queue, and Little's law on the
  loop gives their wait.

Each row is priced on its engine's stack (``ENGINE_STACK``; ``stacks.serving``): its kernels,
host cost per call, CUDA graphs and CPU time per iteration (``on_stack.stack_deployment``) and
its scheduler's limits (``on_stack.stack_scheduler``): TensorRT-LLM's ``BuildConfig`` defaults
``max_batch_size=2048`` and ``max_num_tokens=8192`` (tensorrt_llm/builder.py) with its KV cache
a share of the free memory; the Splitwise profiles' engine vLLM-like, ``max_num_seqs=256`` with
the default token budget of continuous batching. A row's load decides the batches, not the
engine's chunking policy. fp16 is priced as bf16: two bytes and the same tensor-core rate on
every GPU in the catalogue (their datasheets). ``split_by_source`` holds out a seeded share of
each source's rows; the stack parameters without a cited value are fitted on the other rows only
(``python3 -m gpuplan.validate.fit_stacks.serving``).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import zlib
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd

from gpuplan.errors import GpuplanError
from gpuplan.sim.runtime.serving.deployment import SchedulerConfig
from gpuplan.sim.runtime.serving.kv_cache import kv_capacity
from gpuplan.sim.runtime.serving.on_stack import stack_deployment, stack_scheduler
from gpuplan.sim.runtime.serving.step_model import Batch, StepModel
from gpuplan.sim.stacks import get_stack
from gpuplan.workloads.model import ModelConfig
from gpuplan.workloads.presets import get_model

COLUMNS = ("id", "source", "model", "gpu", "gpus", "tp", "pp", "engine", "weight_dtype",
           "kv_dtype", "prompt_tokens", "output_tokens", "load", "batch", "concurrency",
           "metric", "statistic", "per", "value", "assumed", "notes")  # fmt: skip
LOADS = ("static_batch", "offline", "concurrency")
METRIC_KIND = {"output_tokens_per_s": "throughput", "ttft_s": "ttft", "tpot_s": "tpot",
               "e2e_latency_s": "e2e"}  # fmt: skip
PERS = ("gpu", "total", "request")
HOLDOUT_SHARE = 0.3
# the stack of each engine named by the rows (NIM's fp8 profiles run TensorRT-LLM: its source)
ENGINE_STACK = {"trt-llm": "trt-llm", "nim-trt-llm": "trt-llm", "vllm": "vllm",
                "eager-2023": "eager-2023"}  # fmt: skip
DTYPE_AS = {"fp16": "bf16"}  # priced as (module docstring)


class CannotRun(Exception):
    """A row gpuplan cannot predict yet; the message is the reason."""


def _data(name: str):
    return resources.files("gpuplan.validate.published") / "data" / name


@functools.cache
def published_sources() -> dict:
    """The sources file: each source's title, address and method, and the added models."""
    return json.loads(_data("published_serving_sources.json").read_text())


def load_rows(path: str | Path | None = None) -> pd.DataFrame:
    """The published rows (the committed file by default), checked column by column."""
    frame = pd.read_csv(path or _data("published_serving.csv"), keep_default_na=False)
    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing:
        raise GpuplanError(f"published rows: missing column(s) {', '.join(missing)}")
    if frame["id"].duplicated().any():
        dup = frame.loc[frame["id"].duplicated(), "id"].iloc[0]
        raise GpuplanError(f"published rows: id={dup!r} appears more than once")
    for i, row in frame.iterrows():
        _check_row(i, row)
    for col in ("gpus", "tp", "pp", "prompt_tokens", "output_tokens"):
        frame[col] = frame[col].astype(int)
    frame["value"] = frame["value"].astype(float)
    return frame


def _check_row(i: int, row) -> None:
    where = f"published row {i + 2} ({row['id']})"  # + header, 1-based
    for field, valid in (("load", LOADS), ("metric", tuple(METRIC_KIND)), ("per", PERS)):
        if row[field] not in valid:
            raise GpuplanError(f"{where}: {field}={row[field]!r} is invalid: give one of "
                               f"{', '.join(valid)}")  # fmt: skip
    if not pd.to_numeric(row["value"], errors="coerce") > 0:
        raise GpuplanError(f"{where}: value={row['value']!r} is invalid: give a number > 0")
    need = {"static_batch": "batch", "concurrency": "concurrency"}.get(row["load"])
    if need and not str(row[need]).isdigit():
        raise GpuplanError(f"{where}: load={row['load']} needs a whole {need}, got {row[need]!r}")


def row_model(key: str) -> ModelConfig:
    """A model named by the rows: an added configuration of the sources file, or a preset."""
    added = published_sources()["models"].get(key)
    if added is None:
        return get_model(key)
    fields = {k: v for k, v in added.items() if k != "base"}
    if "base" in added:
        return dataclasses.replace(get_model(added["base"]), **fields)
    return ModelConfig(**fields)


def split_by_source(frame: pd.DataFrame, *, holdout_share: float = HOLDOUT_SHARE,
                    seed: int = 0) -> pd.Series:  # fmt: skip
    """'fit' or 'holdout' for each row: within each source a seeded ``holdout_share`` of its
    rows (at least one of two or more) is held out, independent of the other sources."""
    if not 0 < holdout_share < 1:
        raise GpuplanError(f"holdout_share={holdout_share} is invalid: give one in (0, 1)")
    if seed < 0:
        raise GpuplanError(f"seed={seed} is invalid: give a whole number >= 0")
    split = pd.Series("fit", index=frame.index, dtype=object)
    for source, rows in frame.groupby("source", sort=True):
        rng = np.random.default_rng([seed, zlib.crc32(str(source).encode())])
        n = len(rows)
        k = max(1, round(holdout_share * n)) if n > 1 else 0
        held = rows.index[rng.permutation(n)[:k]]
        split[held] = "holdout"
    return split


# --- predictions -------------------------------------------------------------------------------


class Deployments:
    """One deployment and step model per setting, made once (a row that cannot have one
    remembers why)."""

    def __init__(self):
        self._seen: dict[tuple, tuple | str] = {}  # setting -> (dep, step, stack) or why

    def __call__(self, row) -> tuple:
        key = (row["model"], row["gpu"], row["tp"], row["pp"], row["weight_dtype"],
               row["kv_dtype"], row["engine"])  # fmt: skip
        if key not in self._seen:
            self._seen[key] = self._make(row)
        hit = self._seen[key]
        if isinstance(hit, str):
            raise CannotRun(hit)
        return hit

    @staticmethod
    def _make(row) -> tuple | str:
        if row["pp"] != 1:
            return f"pp={row['pp']}: pipeline-parallel serving is not modelled"
        if row["engine"] not in ENGINE_STACK:
            return f"engine={row['engine']!r} has no stack here"
        stack = ENGINE_STACK[row["engine"]]
        try:
            dep = stack_deployment(row_model(row["model"]), row["gpu"], stack, tp=row["tp"],
                                   weight_dtype=DTYPE_AS.get(row["weight_dtype"], row["weight_dtype"]),
                                   kv_dtype=DTYPE_AS.get(row["kv_dtype"], row["kv_dtype"]))  # fmt: skip
        except GpuplanError as err:
            return str(err)
        return dep, StepModel(dep), stack


def _sched(row, dep, stack: str) -> SchedulerConfig:
    """The engine's limits for the row (its stack's scheduler, continuous batching: the row's
    load decides the batches); a free-memory KV share becomes the device share it amounts to
    once the weights and workspace are placed."""
    base = stack_scheduler(stack)
    sched = SchedulerConfig(max_seqs=base.max_seqs, max_batched_tokens=base.max_batched_tokens,
                            block_tokens=base.block_tokens,
                            max_model_len=row["prompt_tokens"] + row["output_tokens"])  # fmt: skip
    if _contiguous_kv(row):
        return dataclasses.replace(sched, memory_utilization=1.0)
    run = get_stack(stack).serving
    if run is None or run.kv_memory != "free":
        return dataclasses.replace(sched, memory_utilization=base.memory_utilization)
    whole = _capacity(dep, dataclasses.replace(sched, memory_utilization=1.0))
    placed = whole.weights_bytes + whole.workspace_bytes
    if placed >= whole.hbm_bytes:
        raise CannotRun(f"{dep.model.name} weights and workspace, {placed / 1e9:.1f} GB per GPU, "
                        f"exceed the {whole.hbm_bytes / 1e9:.1f} GB of {dep.acc.key} at tp={dep.tp}")
    used = placed + run.memory_fraction * (whole.hbm_bytes - placed)
    return dataclasses.replace(sched, memory_utilization=used / whole.hbm_bytes)


def _contiguous_kv(row) -> bool:
    """The row's source ran with the paged KV cache off: TensorRT-LLM then allocates one
    contiguous KV tensor of max_batch_size x max_seq_len at start, in whatever the device holds
    after the weights and activations; its free-memory fraction sizes the paged pool only
    (TensorRT-LLM docs/source/reference/memory.md, "KV cache tensor"). The sources file says
    so per source (``kv_cache``: ``contiguous``)."""
    meta = published_sources()["sources"].get(row["source"], {})
    return meta.get("kv_cache") == "contiguous"


def _capacity(dep, sched):
    try:
        return kv_capacity(dep, sched)
    except GpuplanError as err:
        raise CannotRun(str(err)) from None


def _prefill_one_s(step: StepModel, prompt: int, budget: int) -> float:
    """One prompt alone, in chunks of at most ``budget`` tokens."""
    pieces = [(min(budget, prompt - c), c, 1) for c in range(0, prompt, budget)]
    return sum(step.iteration_s(Batch(prefill=(p,))) for p in pieces)


def _prefill_many_s(step: StepModel, prompt: int, seqs: int, budget: int) -> float:
    """``seqs`` prompts packed into iterations of at most ``budget`` tokens."""
    if prompt > budget:
        return seqs * _prefill_one_s(step, prompt, budget)
    per = budget // prompt
    full, rest = divmod(seqs, per)
    total = full * step.iteration_s(Batch(prefill=((prompt, 0, per),))) if full else 0.0
    return total + (step.iteration_s(Batch(prefill=((prompt, 0, rest),))) if rest else 0.0)


def _static(row, dep, step, sched) -> dict[str, float]:
    """A batch larger than the KV cache runs in waves of the sequences that fit: a paged
    engine admits a waiting prompt only while blocks are free for it (vLLM's scheduler,
    vllm/core/scheduler.py ``_schedule_prefills``: ``AllocStatus.LATER`` leaves it waiting), so
    the rest wait for a wave to finish. TTFT and TPOT are the first wave's (the batch's prefill
    and its decode, as the engine runs it), end-to-end latency the whole run."""
    b, p, o = int(row["batch"]), row["prompt_tokens"], row["output_tokens"]
    cap = _capacity(dep, sched)
    fit = min(b, cap.sequences(p + o))
    if fit < 1:
        raise CannotRun(f"one request of {p + o} tokens exceeds the {cap.tokens:,} KV tokens "
                        "that fit")  # fmt: skip
    full, rest = divmod(b, fit)
    waves = [fit] * full + ([rest] if rest else [])
    prefill = [step.iteration_s(Batch(prefill=((p, 0, w),))) for w in waves]
    decode = [step.decode_run_s(w, w * (p + 1), o - 1) for w in waves]
    e2e = sum(prefill) + sum(decode)
    tpot = decode[0] / (o - 1) if o > 1 else 0.0
    return {"ttft_s": prefill[0], "tpot_s": tpot, "e2e_latency_s": e2e,
            "output_tokens_per_s": b * o / e2e}  # fmt: skip


def _fitting_seqs(row, dep, sched) -> int:
    p, o = row["prompt_tokens"], row["output_tokens"]
    cap = _capacity(dep, sched)
    seqs = min(sched.max_seqs, cap.sequences(p + o))
    if seqs < 1:
        raise CannotRun(f"one request of {p + o} tokens exceeds the {cap.tokens:,} KV tokens "
                        "that fit")
    return seqs


def _offline(row, dep, step, sched) -> dict[str, float]:
    p, o = row["prompt_tokens"], row["output_tokens"]
    seqs = _fitting_seqs(row, dep, sched)
    budget = sched.batched_tokens(dep.model) or p * seqs
    run_s = _prefill_many_s(step, p, seqs, budget) + step.decode_run_s(seqs, seqs * (p + 1), o - 1)
    return {"output_tokens_per_s": seqs * o / run_s}


def _closed_loop(row, dep, step, sched) -> dict[str, float]:
    p, o, clients = row["prompt_tokens"], row["output_tokens"], int(row["concurrency"])
    b = min(clients, _fitting_seqs(row, dep, sched))
    prefill = _prefill_one_s(step, p, sched.batched_tokens(dep.model) or p)
    decode = step.decode_s(b, b * (p + o // 2))
    tpot = decode + (b - 1) * prefill / (o - 1) if o > 1 else 0.0
    service_ttft = prefill + decode / 2
    lifetime_s = service_ttft + (o - 1) * tpot
    done_per_s = b / lifetime_s
    wait = max(0.0, clients / done_per_s - lifetime_s)  # Little's law over the loop
    # the other running requests' prefills hold the engine a share rho of the time (each one
    # prefill per lifetime); a new prompt that finds one under way waits for it: an M/D/1
    # queue's mean wait, rho S / (2 (1 - rho)) (Pollaczek-Khinchine; Kleinrock, "Queueing
    # Systems" vol. 1, sec. 5.7). That wait comes out of the decode stalls already counted in
    # tpot (the same prefills), so the lifetime and the throughput stay as they are.
    rho = (b - 1) * prefill / lifetime_s
    if rho >= 1:  # the others' prefills alone fill the engine: no steady M/D/1 queue
        raise CannotRun(f"{clients} concurrent requests of {o} output tokens keep the engine "
                        f"prefilling all the time (utilisation {rho:.2f} >= 1): outside the "
                        "closed-loop queue model")
    queued = rho * prefill / (2 * (1 - rho))
    return {"ttft_s": wait + queued + service_ttft, "tpot_s": tpot,
            "output_tokens_per_s": done_per_s * o}


_BY_LOAD = {"static_batch": _static, "offline": _offline, "concurrency": _closed_loop}


def predict_row(row, deployments: Deployments) -> float:
    """gpuplan's value of the row's metric, in the row's units (raises CannotRun)."""
    dep, step, stack = deployments(row)
    values = _BY_LOAD[row["load"]](row, dep, step, _sched(row, dep, stack))
    if row["metric"] not in values:
        raise CannotRun(f"metric {row['metric']} is not predicted for load={row['load']}")
    value = values[row["metric"]]
    return value / row["gpus"] if row["per"] == "gpu" else value


def reproduce(frame: pd.DataFrame | None = None, *, seed: int = 0,
              holdout_share: float = HOLDOUT_SHARE) -> pd.DataFrame:  # fmt: skip
    """Every row with its prediction, signed and absolute % error, split, and, for a row that
    cannot be run, the reason (``predicted`` NaN)."""
    frame = load_rows() if frame is None else frame.copy()
    deployments = Deployments()
    predicted, reasons = [], []
    for _, row in frame.iterrows():
        try:
            predicted.append(predict_row(row, deployments))
            reasons.append("")
        except CannotRun as why:
            predicted.append(np.nan)
            reasons.append(str(why))
    out = frame[["id", "source", "model", "gpu", "tp", "engine", "weight_dtype", "load",
                 "prompt_tokens", "output_tokens", "metric", "per", "value"]].copy()  # fmt: skip
    out.insert(0, "split", split_by_source(frame, holdout_share=holdout_share, seed=seed))
    out["kind"] = out["metric"].map(METRIC_KIND)
    out["predicted"] = predicted
    out["error_pct"] = 100 * (out["predicted"] - out["value"]) / out["value"]
    out["abs_error_pct"] = out["error_pct"].abs()
    out["cannot_run"] = reasons
    return out


def summary(rows: pd.DataFrame, *, split: str | None = "holdout") -> pd.DataFrame:
    """Per source (and 'all') and metric kind: rows, rows predicted, median and p90 absolute
    % error and the median signed one (+: gpuplan high) over the predicted rows of ``split``
    (None: every row)."""
    kept = rows if split is None else rows[rows["split"] == split]
    parts = [kept.assign(source="all"), kept] if len(kept) else [kept]
    out = []
    for (source, kind), g in pd.concat(parts).groupby(["source", "kind"], sort=True):
        err, signed = g["abs_error_pct"].dropna(), g["error_pct"].dropna()
        out.append({"source": source, "kind": kind, "rows": len(g), "predicted": len(err),
                    "cannot_run": len(g) - len(err),
                    "median_abs_pct_error": float(err.median()) if len(err) else np.nan,
                    "p90_abs_pct_error": float(err.quantile(0.9)) if len(err) else np.nan,
                    "median_pct_error": float(signed.median()) if len(err) else np.nan})  # fmt: skip
    return pd.DataFrame(out)


def cannot_run(rows: pd.DataFrame) -> pd.DataFrame:
    """Rows that could not be run, counted by source and reason."""
    bad = rows[rows["cannot_run"] != ""]
    counts = bad.groupby(["source", "cannot_run"], sort=True).size()
    return counts.rename("rows").reset_index().rename(columns={"cannot_run": "reason"})
