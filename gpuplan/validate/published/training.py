"""Published training runs as data: each row of ``data/published_training.csv`` predicted by
``estimate_training`` and compared with the number its source prints, in the metric it prints.

The rows, their sources and every setting a source does not state (the ``assumed`` column) are
data (``data/published_training.csv``, ``data/published_training_sources.json``); the runs of
Narayanan et al. 2021 and Korthikanti et al. 2022 stay in ``data/published_runs.json``
(``published.py``) and join here as the sources ``narayanan2021`` and ``korthikanti2022``.

A row gpuplan cannot express (a model, accelerator or layout it has no word for, such as 126
layers on 16 uneven pipeline stages) is kept with ``status = "not expressible: <why>"``, never
dropped. The sources are split, seeded, into a fit part and a held-out part
(``split_sources``): whatever is fitted to published runs may use the fit part only.

Nothing here is tuned to these rows: every accelerator's kernel efficiencies are
``efficiency_for`` (the H200 fit, borrowed by devices without a fit of their own). The
``stack`` column names the framework that ran each row (``megatron-te``, ``fsdp2``,
``composer-fsdp``, ``deepspeed``, ``pytorch``) and each row is priced as that stack runs it
(``predict_row``: its kernels, host, optimizer, runtime, and its state precision and overlaps as
defaults); the overlaps and settings a row states are its ``options``, which override them
(``attention_kernel=KERNEL``: the stack's training and prefill attention kernel as the row ran it;
``power_limit_w=W``: boards held below their rated power, ``hwmodels.power.power_capped``;
``launch_blocking=true``: a job run under CUDA_LAUNCH_BLOCKING=1, ``stacks.training``).
``reproduce_training(stacks=False)`` prices every row as ``megatron-te`` with Strategy's
defaults, for the before/after comparison (``benchmarks/fit_training_stacks.py``).
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import hashlib
import json
from importlib import resources

import pandas as pd

from gpuplan.errors import GpuplanError
from gpuplan.hwmodels.efficiency import efficiency_for
from gpuplan.hwmodels.power import power_capped
from gpuplan.sim.parallel.compute import CostCache
from gpuplan.sim.parallel.estimate import estimate_training, training_efficiency
from gpuplan.sim.parallel.strategy import Strategy, auto_pp_layers
from gpuplan.sim.parallel.topology import cluster_for, get_cluster
from gpuplan.sim.stacks import get_stack
from gpuplan.sim.stacks.registry import with_overrides
from gpuplan.sim.stacks.training import with_elementwise, with_launch_blocking
from gpuplan.sim.stacks.training_defaults import FIELDS, fill_defaults
from gpuplan.units import TFLOPS, GiB
from gpuplan.validate.published.megatron import paper_flops
from gpuplan.workloads.model import ModelConfig
from gpuplan.workloads.presets import get_model

METRICS = ("tokens_per_s_per_gpu", "step_time_s", "tflops_per_gpu", "tflops_per_gpu_megatron")
INT_COLUMNS = ("gpus", "tp", "pp", "dp", "cp", "ep", "virtual_stages", "micro_batch",
               "global_batch", "seq", "zero")  # fmt: skip
HELD_OUT_FRACTION = 0.3
DEFAULT_SEED = 0
OLD_SOURCES = {"narayanan2021": "narayanan2021", "korthikanti2022": "korthikanti2022"}


def _data(name: str):
    return resources.files("gpuplan.validate.published") / "data" / name


@functools.cache
def training_sources() -> dict:
    """The sources file: every source's reference and notes, and the model definitions."""
    return json.loads(_data("published_training_sources.json").read_text())


@functools.cache
def training_rows() -> tuple[dict, ...]:
    """The rows of ``published_training.csv``, numbers typed, options parsed."""
    with _data("published_training.csv").open(newline="") as f:
        return tuple(_typed(r) for r in csv.DictReader(f))


def _typed(raw: dict) -> dict:
    row = dict(raw)
    for col in INT_COLUMNS:  # an empty zero: the run does not state it (the stack's default)
        row[col] = None if col == "zero" and row[col] == "" else int(row[col])
    row["published"] = float(row["published"])
    mem = row["memory_per_gpu_bytes"]
    row["memory_per_gpu_bytes"] = float(mem) if mem else None
    row["options"] = parse_options(row["options"])
    return row


def parse_options(text: str) -> dict:
    """``key=value;key=value`` Strategy overrides a row states: booleans, numbers, words, and
    ``pp_layers`` as ``auto`` or a comma list of blocks per stage."""
    out: dict = {}
    for item in filter(None, (t.strip() for t in text.split(";"))):
        key, _, value = item.partition("=")
        if value in ("true", "false"):
            out[key] = value == "true"
        elif key == "pp_layers" and value != "auto":
            out[key] = tuple(int(n) for n in value.split(","))
        else:
            try:
                out[key] = float(value)
            except ValueError:
                out[key] = value
    return out


def row_model(row: dict) -> ModelConfig:
    """The row's model: a definition of the sources file (whole, or a preset named by ``base``
    with the fields it replaces), else a preset. A learned position table is sized to the run's
    sequence (llm-foundry sets max_seq_len to it)."""
    models = training_sources()["models"]
    key = row["model"]
    if key in models and "base" in models[key]:
        fields = {k: v for k, v in models[key].items() if k != "base"}
        cfg = dataclasses.replace(get_model(models[key]["base"]), **fields)
    else:
        cfg = ModelConfig(**models[key]) if key in models else get_model(key)
    if cfg.position == "learned":
        cfg = dataclasses.replace(cfg, max_seq_len=row["seq"])
    return cfg


def row_strategy(row: dict, cfg: ModelConfig, stack=None) -> Strategy:
    """The layout the row states (its ``options`` override the columns); what it leaves unset
    (an empty ``zero``, no ``sp`` option, no state precision or overlap) is Strategy's
    default, or, with ``stack``, the stack's framework's, filled by the same function as
    ``gpuplan train``'s (``sim.stacks.training_defaults.fill_defaults``); ``pp_layers=auto``
    is Llama 3's rule (``auto_pp_layers``)."""
    fields = {k: row[k] for k in ("tp", "pp", "dp", "cp", "ep", "zero", "micro_batch",
                                  "global_batch", "schedule", "virtual_stages", "recompute",
                                  "precision")}  # fmt: skip
    options = dict(row["options"])
    options.pop("attention_kernel", None)  # the stack's, not the layout's (``row_stack``)
    options.pop("power_limit_w", None)  # the board's (``predict_row``)
    options.pop("launch_blocking", None)  # the job's environment (``row_stack``)
    options.pop("impl", None)  # the stack's elementwise kernels (``row_stack``)
    if options.get("pp_layers") == "auto":
        options["pp_layers"] = auto_pp_layers(cfg.n_layers, row["pp"])
    stated = {k: v for k, v in (fields | options).items() if v is not None}
    if stack is None:
        return Strategy(**stated)
    given = {f: stated.pop(f, None) for f in FIELDS}
    filled = fill_defaults(stack, given, tp=row["tp"], pp=row["pp"],
                           virtual_stages=row["virtual_stages"], ranks=row["dp"] * row["cp"])  # fmt: skip
    return Strategy(**stated | filled.fields)


def row_cluster(row: dict):
    """A preset, a preset with the fields a source states (the sources file's ``clusters``),
    or 8-GPU nodes of the row's accelerator."""
    custom = training_sources().get("clusters", {})
    key = row["cluster"]
    if key in custom:
        fields = {k: v for k, v in custom[key].items() if k != "base"}
        return dataclasses.replace(get_cluster(custom[key]["base"]), key=key, **fields)
    return get_cluster(key) if key else cluster_for(row["gpu"])


def metric_value(row: dict, est, cfg: ModelConfig) -> float:
    """gpuplan's estimate in the metric the row publishes."""
    metric = row["metric"]
    if metric == "tokens_per_s_per_gpu":
        return est.tokens_per_s / row["gpus"]
    if metric == "step_time_s":
        return est.step_time_s
    if metric == "tflops_per_gpu":
        return est.model_flops_per_step / est.step_time_s / row["gpus"] / TFLOPS
    if metric == "tflops_per_gpu_megatron":  # Narayanan et al. 2021 eq. 3, recomputation in
        flops = paper_flops(cfg, row["global_batch"], row["seq"])
        return flops / est.step_time_s / row["gpus"] / TFLOPS
    raise GpuplanError(f"{row['id']}: metric={metric!r} is unknown; valid: {', '.join(METRICS)}")


def row_stack(row: dict):
    """The stack that ran the row (its ``stack`` column; the old Megatron rows: megatron-te),
    with the attention kernel its ``attention_kernel`` option names for training and prefill,
    ``launch_blocking=true`` where the job ran under CUDA_LAUNCH_BLOCKING=1, and the elementwise
    kernels ``impl`` names (``compiled``: the source ran torch.compile)."""
    stack = get_stack("megatron-te" if row["stack"] == "megatron" else row["stack"])
    # the same calls as ``gpuplan train --launch-blocking --attention-kernel``
    stack = with_launch_blocking(stack, bool(row["options"].get("launch_blocking")))
    stack = with_elementwise(stack, row["options"].get("impl"))
    return with_overrides(stack, attention_kernel=row["options"].get("attention_kernel"))


def predict_row(row: dict, caches: dict, *, stacks: bool = True, stack_for=None):
    """(status, predicted metric, predicted memory per GPU in bytes) of one row, as its stack
    runs it (``stacks=False``: every row as ``megatron-te`` with Strategy's defaults, the
    prediction before stacks were passed; ``stack_for``: row -> Stack, a variant to price)."""
    try:
        cfg = row_model(row)
        cluster = row_cluster(row)
        stack = (stack_for or row_stack)(row) if stacks else get_stack("megatron-te")
        strategy = row_strategy(row, cfg, stack if stacks else None)
        limit_w = row["options"].get("power_limit_w")
        eff = power_capped(efficiency_for(cluster.gpu), cluster.accelerator.tdp_w, limit_w)
        key = (cfg, cluster.gpu, stack, stacks, limit_w)
        if key not in caches:  # the costs of the efficiency the estimate prices with
            run_eff = training_efficiency(stack, eff, cluster.accelerator) if stacks else eff
            impl = stack.elementwise if stacks else "fused"
            caches[key] = CostCache(cfg, cluster.accelerator, run_eff, impl)
        est = estimate_training(cfg, strategy, cluster=cluster, seq=row["seq"], gpus=row["gpus"],
                                eff=eff, costs=caches[key], stack=stack)  # fmt: skip
    except GpuplanError as err:
        return f"not expressible: {err}", None, None
    return "ok", metric_value(row, est, cfg), est.peak_memory_per_gpu_bytes


def split_sources(sources, seed: int = DEFAULT_SEED, fraction: float = HELD_OUT_FRACTION):
    """The held-out sources: the ``round(fraction * n)`` (at least one) whose SHA-256 of
    ``"seed:name"`` ranks lowest. Each source's rank depends on its name and the seed only, so
    the split ignores row order and repeats, and a new source never moves an old one from the
    fit part to the held-out part while the held-out count stays the same."""
    names = sorted(set(sources))
    if not 0 < fraction < 1:
        raise GpuplanError(f"held-out fraction={fraction!r} is invalid: it must be in (0, 1)")
    k = max(1, round(fraction * len(names)))
    ranked = sorted(names, key=lambda n: hashlib.sha256(f"{seed}:{n}".encode()).hexdigest())
    return frozenset(ranked[:k])


def _new_rows(caches: dict, stacks: bool = True) -> list[dict]:
    out = []
    for row in training_rows():
        status, predicted, memory = predict_row(row, caches, stacks=stacks)
        base = {"id": row["id"], "source": row["source"], "table": row["table"],
                "model": row["model"], "gpu": row["gpu"], "gpus": row["gpus"],
                "layout": _layout(row), "stack": row["stack"], "status": status}  # fmt: skip
        out.append(base | {"kind": "time", "metric": row["metric"], "published": row["published"],
                           "predicted": predicted})  # fmt: skip
        if row["memory_per_gpu_bytes"]:
            out.append(base | {"kind": "memory", "metric": "memory_per_gpu_bytes",
                               "published": row["memory_per_gpu_bytes"], "predicted": memory})  # fmt: skip
    return out


def _layout(row: dict) -> str:
    """The Strategy label, with the overlaps the row switches on (the label omits them)."""
    extra = [k for k, v in row["options"].items() if k.startswith("overlap") and v is True]
    try:
        label = row_strategy(row, row_model(row)).label
    except GpuplanError as err:
        label = f"(invalid: {err})"
    return " ".join([label, *extra])


def _old_rows() -> list[dict]:
    """The runs of ``published_runs.json`` in this frame's shape (sources by paper)."""
    from gpuplan.validate.published.megatron import reproduce

    frame = reproduce()
    out = []
    for r in frame.to_dict("records"):
        family = next(k for k in OLD_SOURCES if r["source"].startswith(k))
        memory = r["kind"] == "memory"
        out.append({"id": r["id"], "source": OLD_SOURCES[family], "table": r["source"],
                    "model": r["id"], "gpu": "a100-sxm-80gb", "gpus": r["gpus"],
                    "layout": r["layout"], "stack": "megatron", "status": "ok",
                    "kind": r["kind"], "metric": r["metric"],
                    "published": r["measured"],
                    "predicted": r["predicted"] * GiB if memory else r["predicted"]})  # fmt: skip
        if memory:
            out[-1]["published"] = r["measured"] * GiB
    return out


def reproduce_training(seed: int = DEFAULT_SEED, *, stacks: bool = True) -> pd.DataFrame:
    """Every published row (new and old), predicted: published, predicted, signed and absolute
    % error, status and the held-out flag of its source; ``stacks=False`` prices every new row
    as ``megatron-te`` with Strategy's defaults (the figures before the rows' stacks were
    passed)."""
    return _reproduce(seed, stacks).copy()


@functools.cache
def _reproduce(seed: int, stacks: bool = True) -> pd.DataFrame:
    frame = pd.DataFrame(_new_rows({}, stacks) + _old_rows())
    ok = frame["status"] == "ok"
    pred = frame["predicted"].where(ok).astype(float)
    frame["error_pct"] = 100 * (pred - frame["published"]) / frame["published"]
    frame["abs_error_pct"] = frame["error_pct"].abs()
    held = split_sources(frame["source"], seed)
    frame["held_out"] = frame["source"].isin(held)
    return frame


def source_summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Per source and kind: rows, rows not expressible, median and p90 absolute error, the
    held-out flag; then one line per kind over all sources."""
    ok = frame[frame["status"] == "ok"]
    keys = ["source", "kind"]
    counts = frame.groupby(keys).size().rename("n")
    bad = (frame["status"] != "ok").groupby([frame["source"], frame["kind"]]).sum()
    stats = ok.groupby(keys)["abs_error_pct"].agg(
        median_abs_pct_error="median", p90_abs_pct_error=lambda s: s.quantile(0.9)
    )
    held = frame.groupby(keys)["held_out"].first()
    out = pd.concat([counts, bad.rename("not_expressible"), stats, held], axis=1).reset_index()
    total = ok.groupby("kind")["abs_error_pct"].agg(
        median_abs_pct_error="median", p90_abs_pct_error=lambda s: s.quantile(0.9)
    )
    total["n"] = frame.groupby("kind").size()
    total["not_expressible"] = (frame["status"] != "ok").groupby(frame["kind"]).sum()
    total = total.reset_index().assign(source="all", held_out=None)
    return pd.concat([out, total[out.columns]], ignore_index=True)
