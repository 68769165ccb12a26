"""Search every valid strategy for a model on N GPUs, vectorized: the fastest that fit, and the
Pareto front of step time, memory per GPU and cost.

How it stays fast (no per-strategy call of the per-kernel model):
1. enumerate the valid degree combinations (tp, cp, pp, dp, ep), then each micro-batch size and
   schedule (GPipe, 1F1B, interleaved with every valid virtual-stage count) as base rows, then
   the product with recomputation, ZeRO stage, sequence parallelism and precision as numpy arrays;
2. price the few distinct per-GPU kernel shapes (micro-batch, tp, cp, sp, ep, precision) in
   bulk (``shape_pricing``): each shape's kernels are listed as numbers of one table of distinct
   kernels (``op_memo.ShapeKernels``), the new kernels priced in a few numpy calls of the one-GPU
   kernel models' array mirrors (``hwmodels.bulk``), and every shape's times summed at once
   (``op_memo.shape_time_table``: the same doubles as ``compute.CostCache`` + ``shape_times``);
3. evaluate the closed form of memory for all strategies at once (``evaluate.memory_of``), and
   those of communication and bubble for the strategies that fit (``evaluate.time_terms``), in
   chunks, with a progress bar when the space is large.

Pricing and evaluation are cut into pieces of a fixed size and merged in order, so that they can
run on Dask workers (``sim.sweep``) and give the same bytes as in this process.

The space and its pruning rules are in ``space``.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

import numpy as np

from gpuplan.errors import GpuplanError, check_positive, check_whole, expects
from gpuplan.hwmodels.efficiency import efficiency_for
from gpuplan.limits import MAX_DIM
from gpuplan.sim.estimate.inputs import check_gpus, check_seq
from gpuplan.sim.parallel.cost import usd_per_hour
from gpuplan.sim.parallel.estimate import (
    TrainEstimate,
    estimate_training,
    flops_per_sequence,
    training_efficiency,
)
from gpuplan.sim.parallel.evaluate import memory_of, time_terms
from gpuplan.sim.parallel.fp8 import PRECISION_CODES, RATE_DTYPE
from gpuplan.sim.parallel.interruptions import Interruptions, expected_interruptions
from gpuplan.sim.parallel.model_facts import autocast_stream_facts, model_facts
from gpuplan.sim.parallel.shape_pricing import price_shapes
from gpuplan.sim.parallel.space import (
    RECOMPUTE_NAMES,
    SCHEDULE_NAMES,
    SearchSpace,
    enumerate_space,
    row_strategy,
    search_layouts,
    split_label,
)
from gpuplan.sim.parallel.stage import TIME_FIELDS
from gpuplan.sim.parallel.step_time import step_total
from gpuplan.sim.parallel.strategy import Strategy, validate
from gpuplan.sim.parallel.topology import Cluster
from gpuplan.sim.stacks import get_stack
from gpuplan.sim.stacks.training import layout_mask, runtime_of
from gpuplan.sim.sweep import InProcess, Pool, check_pool, chunks
from gpuplan.units import HOUR

if TYPE_CHECKING:
    import pandas as pd

CHUNK = 65_536  # strategies evaluated per numpy pass (a piece of work of the sweep)
__all__ = ["SearchResult", "SearchSpace", "distinct_layouts", "enumerate_space", "fastest_estimate",
           "pareto_front", "row_strategy", "search", "with_mfu_pct"]  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class SearchResult:
    frame: pd.DataFrame  # every strategy that fits, fastest first
    pareto: pd.DataFrame  # the fitting strategies no other beats on time, memory and cost
    evaluated: int
    fitting: int
    shapes_priced: int
    pricing_s: float
    evaluation_s: float
    interruptions: Interruptions | None = None  # the failure model behind --tokens

    @property
    def strategies_per_s(self) -> float:
        return self.evaluated / max(self.evaluation_s, 1e-12)

    @property
    def total_s(self) -> float:
        return self.pricing_s + self.evaluation_s



def _progress(total: int):
    """A tqdm bar on stderr over the pieces of a large search run here, on a terminal only."""

    def wrap(items, desc, pool):
        if total < 400_000 or not isinstance(pool, InProcess) or not sys.stderr.isatty():
            return items
        from tqdm import tqdm

        return tqdm(items, desc=desc, leave=False)

    return wrap


@expects(cfg="ModelConfig", cluster="Cluster", space=("SearchSpace", None),
         eff=("Efficiency", None))
def search(
    cfg,
    *,
    cluster: Cluster,
    gpus: int,
    global_batch: int,
    seq: int,
    space: SearchSpace | None = None,
    eff=None,
    tokens: float | None = None,
    usd_per_gpu_hour: float | None = None,
    pool: Pool | None = None,
) -> SearchResult:
    """Evaluate every valid strategy; return those that fit and their Pareto front (``pool``:
    where the pieces of the search run, ``sim.sweep``; in this process by default)."""
    check_gpus(gpus)
    check_pool(pool)
    check_whole("global_batch", global_batch, high=MAX_DIM)
    check_seq(cfg, seq)
    if tokens is not None:
        check_positive("tokens", tokens)
    if usd_per_gpu_hour is not None:
        check_positive("usd_per_gpu_hour", usd_per_gpu_hour)
    space = space or SearchSpace()
    validate(Strategy(), cfg, 1, seq)  # model-level rules (a text decoder)
    acc = cluster.accelerator
    stack = get_stack(space.stack)
    eff = training_efficiency(stack, eff or efficiency_for(acc.key), acc)
    s = _runnable_rows(cfg, gpus, global_batch, seq, acc, space, stack)
    total = len(s["tp"])
    pool = pool or InProcess()
    progress = _progress(total)
    t0 = time.perf_counter()
    index, table, n_shapes = price_shapes(cfg, s, seq, acc, eff, space, pool, progress)
    t1 = time.perf_counter()
    fits, leanest = _evaluate_all(cfg, s, index, table, cluster=cluster, acc=acc, eff=eff,
                                  seq=seq, space=space, gpus=gpus, pool=pool,
                                  progress=progress)  # fmt: skip
    t2 = time.perf_counter()
    if fits is None:
        raise _fits_nowhere(cfg, leanest, total, gpus, acc)
    interruptions = (
        expected_interruptions(cfg, gpus=gpus, gpus_per_node=cluster.gpus_per_node, acc=acc,
                               state_precision=space.state_precision)
        if tokens else None
    )  # fmt: skip
    fits = _with_cost(fits, gpus=gpus, acc=acc, tokens=tokens, usd=usd_per_gpu_hour,
                      global_batch=global_batch, seq=seq, interruptions=interruptions)  # fmt: skip
    fits = fits.sort_values("step_time_s", kind="stable").reset_index(drop=True)
    return SearchResult(
        frame=fits,
        pareto=pareto_front(fits),
        evaluated=total,
        fitting=len(fits),
        shapes_priced=n_shapes,
        pricing_s=t1 - t0,
        evaluation_s=t2 - t1,
        interruptions=interruptions,
    )


def _runnable_rows(cfg, gpus: int, global_batch: int, seq: int, acc, space: SearchSpace,
                   stack) -> dict:  # fmt: skip
    """The strategy columns of the space that ``stack`` runs (``stacks.training.layout_mask``);
    a GpuplanError where there is none."""
    s = enumerate_space(cfg, gpus, global_batch, seq, acc, space)
    keep = layout_mask(runtime_of(stack), s["tp"], s["pp"], s["zero"], s["cp"])  # it runs
    s = _rows(s, keep)
    if len(s["tp"]) == 0:
        raise GpuplanError(
            f"no valid layout of {cfg.name} on gpus={gpus} with global_batch={global_batch}: "
            "the data-parallel degree must divide the global batch; try a global_batch that is "
            "a multiple of a power of two"
        )
    return s


def _evaluate_all(cfg, s, index, table, *, cluster, acc, eff, seq, space, gpus, pool, progress):
    """Every strategy's memory, and the step time, throughput and MFU of those that fit, in
    pieces of ``CHUNK`` rows concatenated in order (each row depends on its own inputs only):
    (the strategies that fit, the leanest strategy of each piece)."""
    import pandas as pd  # here: a serve plan pricing GPUs by cost.price_for never loads it
    facts = autocast_stream_facts(model_facts(cfg), cfg, get_stack(space.stack))
    flops = flops_per_sequence(cfg, seq, False)
    # each recipe's peak, by its code (sim.parallel.fp8); nan where the device has none
    peaks = np.array([acc.peak_flops_per_s.get(RATE_DTYPE[p], np.nan) for p in PRECISION_CODES])
    pieces = [({k: v[sl] for k, v in s.items()}, index[sl]) for sl in chunks(len(index), CHUNK)]
    layouts = search_layouts(cfg, np.unique(s["pp"]))
    piece = partial(_evaluate_piece, facts, table=table, cluster=cluster, acc=acc, eff=eff,
                    seq=seq, space=space, gpus=gpus, flops=flops, peaks=peaks,
                    layouts=layouts)  # fmt: skip
    parts = pool.map(piece, progress(pieces, "evaluating strategies", pool))
    leanest = pd.DataFrame([lean for _frame, lean in parts])
    leanest["recompute"] = leanest["recompute"].map(RECOMPUTE_NAMES)
    frames = [f for f, _lean in parts if f is not None]
    if not frames:
        return None, leanest
    frame = pd.concat(frames, ignore_index=True)
    frame["schedule"] = frame["schedule"].map(SCHEDULE_NAMES)
    frame["recompute"] = frame["recompute"].map(RECOMPUTE_NAMES)
    labels = {int(p): split_label(cfg, int(p)) for p in np.unique(s["pp"])}
    frame.insert(frame.columns.get_loc("pp") + 1, "pp_layers", frame["pp"].map(labels))
    return frame, leanest


def _evaluate_piece(facts, arrays, *, table, cluster, acc, eff, seq, space, gpus, flops, peaks,
                    layouts):  # fmt: skip
    """One piece of the evaluation: (strategy columns, each one's shape) -> (a frame of those
    that fit or None, the leanest strategy). Memory is evaluated for every strategy, the step
    time for those that fit (what the search returns); ``table``: each shape's times;
    ``layouts``: the stage kinds of each pipeline degree (``space.search_layouts``)."""
    import pandas as pd  # here: a serve plan pricing GPUs by cost.price_for never loads it
    sc, shape_index = arrays
    stack = get_stack(space.stack)
    opts = dict(state_precision=space.state_precision, optimizer=stack.optimizer,
                runtime=runtime_of(stack))  # fmt: skip
    mem = memory_of(facts, sc, kinds=layouts.take(sc["pp"]), seq=seq, attention=space.attention,
                    grads_persist=stack.grads_persist, **opts)  # fmt: skip
    peak_mem = sum(mem.values())
    lean = int(np.argmin(peak_mem))
    leanest = {k: sc[k][lean] for k in ("tp", "pp", "dp", "zero")} | {
        "recompute": sc["rc"][lean], "peak_memory_per_gpu_bytes": peak_mem[lean]}  # fmt: skip
    fits = peak_mem <= acc.hbm_bytes
    if not fits.any():
        return None, leanest
    sc = _rows(sc, fits)
    t = {f: table[f][shape_index[fits]] for f in TIME_FIELDS}
    _c, terms = time_terms(facts, sc, t, kinds=layouts.take(sc["pp"]), cluster=cluster, acc=acc,
                           eff=eff, seq=seq, **opts)  # fmt: skip
    step = step_total(terms)
    gb = sc["mb"] * sc["m"] * sc["dp"]
    peak_flops = peaks[np.asarray(sc["fp8"], dtype=np.int64)]
    frame = pd.DataFrame(
        {
            "tp": sc["tp"],
            "pp": sc["pp"],
            "dp": sc["dp"],
            "cp": sc["cp"],
            "ep": sc["ep"],
            "sp": sc["sp"],
            "zero": sc["zero"],
            "micro_batch": sc["mb"],
            "micro_batches": sc["m"],
            "schedule": sc["sched"],
            "virtual_stages": sc["chunks"],
            "recompute": sc["rc"],
            "precision": np.array(PRECISION_CODES)[np.asarray(sc["fp8"], dtype=np.int64)],
            "step_time_s": step,
            "bubble_s": terms["bubble"],
            "tokens_per_s": gb * seq / step,
            "mfu": flops * gb / (step * gpus * peak_flops),
            "peak_memory_per_gpu_bytes": peak_mem[fits],
        }
    )
    return frame, leanest


def _rows(columns: dict, mask: np.ndarray) -> dict:
    """The strategy columns at the rows ``mask`` keeps (scalars, one for all rows, stay)."""
    n = len(mask)
    return {k: v[mask] if np.ndim(v) and len(v) == n else v for k, v in columns.items()}


def _with_cost(fits, *, gpus, acc, tokens, usd, global_batch, seq, interruptions=None):
    rate = usd_per_hour(acc.key, usd)
    out = fits.copy()
    out["cost_per_step_usd"] = out["step_time_s"] * gpus * rate / HOUR
    if tokens:
        out["time_to_train_s"] = tokens / out["tokens_per_s"]
        out["time_to_train_with_failures_s"] = interruptions.with_failures_s(
            out["time_to_train_s"]
        )
        out["cost_usd"] = out["time_to_train_s"] * gpus * rate / HOUR
        out["cost_with_failures_usd"] = out["time_to_train_with_failures_s"] * gpus * rate / HOUR
    return out


def layout_key(frame: pd.DataFrame, seq: int) -> pd.DataFrame:
    """What makes two rows the same layout (``distinct_layouts``), as columns."""
    import pandas as pd  # here: a serve plan pricing GPUs by cost.price_for never loads it
    return pd.DataFrame(
        {
            "tp": frame["tp"],
            "pp": frame["pp"],
            "pp_layers": frame["pp_layers"],
            "dp_x_cp": frame["dp"] * frame["cp"],
            "ep": frame["ep"],
            "tokens_per_micro_batch": frame["micro_batch"] * seq // frame["cp"],
            "schedule": frame["schedule"],
            "recompute": frame["recompute"],
        }
    )


def distinct_layouts(frame: pd.DataFrame, seq: int) -> pd.DataFrame:
    """The fastest row of each distinct layout, in the frame's order (fastest first).

    Two rows are one layout when they share tp, pp and its stage split, ep, the schedule, the
    recomputation, the data-parallel-like group dp x cp and the tokens of a micro-batch on one
    GPU (micro_batch x seq / cp): each GPU then holds the same shard of the model and runs the
    same kernels, and the rows differ only in how that group splits into replicas and sequence
    chunks, the virtual-stage count, the ZeRO stage, sequence parallelism or the precision —
    options of one layout, not layouts. Rows differing in any key are distinct.
    """
    keep = ~layout_key(frame, seq).duplicated(keep="first")
    return frame[keep.to_numpy()].reset_index(drop=True)


def fastest_estimate(cfg, result: SearchResult, *, cluster: Cluster, gpus: int,
                     global_batch: int, seq: int, space: SearchSpace, stack=None,
                     eff=None) -> TrainEstimate:  # fmt: skip
    """The fastest row's strategy estimated in full (``estimate_training``), as ``gpuplan
    train`` prices it."""
    best = row_strategy(result.frame.iloc[0], global_batch=global_batch, space=space)
    return estimate_training(cfg, best, cluster=cluster, seq=seq, gpus=gpus, stack=stack, eff=eff)


def with_mfu_pct(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows with their MFU in percent as one more column, ``mfu_pct``."""
    return frame.assign(mfu_pct=lambda f: 100 * f["mfu"])


def _fits_nowhere(cfg, leanest, total: int, gpus, acc) -> GpuplanError:
    """The error of a search none of whose ``total`` strategies fits (``leanest``: each
    piece's leanest strategy)."""
    least = leanest["peak_memory_per_gpu_bytes"].min()
    row = leanest.loc[leanest["peak_memory_per_gpu_bytes"].idxmin()]
    need = int(np.ceil(gpus * least / acc.hbm_bytes))
    return GpuplanError(
        f"{cfg.name} fits nowhere on {gpus} x {acc.key}: the leanest of {total} strategies "
        f"(tp={row.tp} pp={row.pp} dp={row.dp} zero={row.zero} recompute={row.recompute}) needs "
        f"{least / 1e9:.1f} GB per GPU, the device has {acc.hbm_bytes / 1e9:.0f} GB; "
        f"try at least ~{need} GPUs or a smaller global batch"
    )


def pareto_front(
    frame: pd.DataFrame,
    columns=("step_time_s", "peak_memory_per_gpu_bytes", "cost_per_step_usd"),
) -> pd.DataFrame:
    """Rows no other row matches or beats on every column (lower is better), by time."""
    cols = [c for c in columns if c in frame and frame[c].notna().all()]
    values = frame[cols].to_numpy()
    order = np.lexsort(values.T[::-1])  # by time, then memory, then cost
    values = values[order]
    if values.shape[1] >= 2 and np.all(np.diff(values[:, 2:], axis=0) >= 0):
        # the columns after the second never fall in this order (the cost of a step is its
        # time times a fixed rate): an earlier row is then no worse on every column but the
        # second, so a row survives exactly when its second column beats every earlier row's
        # (the loop below gives the same rows; tests/test_search_pareto.py)
        second = values[:, 1]
        best_before = np.minimum.accumulate(np.concatenate([[np.inf], second[:-1]]))
        return frame.iloc[order[second < best_before]].reset_index(drop=True)
    alive = np.ones(len(values), dtype=bool)
    keep: list[int] = []
    # the first live row in this order is dominated by no other row; drop all it dominates (only
    # rows after it can be: an earlier row is no worse on the first column it differs in)
    while alive.any():
        j = int(np.argmax(alive))
        keep.append(int(order[j]))
        alive[j:] &= ~np.all(values[j:] >= values[j], axis=1)
    return frame.iloc[keep].reset_index(drop=True)
