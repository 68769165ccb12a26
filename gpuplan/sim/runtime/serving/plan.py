"""Capacity planning: the cheapest ways to serve a request rate under latency SLOs.

The search covers, for one model on one kind of GPU: tensor parallelism (every divisor of the
query heads up to 8 at which the model fits), weight and KV formats (bf16; fp8 weights with an
fp8 cache; int8 and int4 weights), the scheduler's ``max_seqs``, and colocated replicas or
disaggregated units of P prefill and D decode replicas, whose pools may differ in TP and GPU
type (``plan_disagg``; each pool priced at its own GPU's price). For each candidate it finds the
fewest units that meet the SLOs (a TTFT target, a TPOT target or both) by simulation and
prices them.

Method, with its assumptions named:
- traffic splits evenly over units, and each unit is simulated alone at ``rate / units`` with
  Poisson arrivals (random routing; round robin would be smoother, so this errs on the safe
  side); a unit meets the SLO when the ``percentile`` of TTFT and of TPOT over its requests
  after the first 10% (warm-up) are within the targets and none is rejected or left waiting;
- the fewest units: doubling from a lower bound, then bisection (latency falls as units are
  added, for a fixed candidate);
- candidates are tried cheapest-bound first: a bound on a unit's throughput (prefill work plus
  decode iterations shared by ``max_seqs`` sequences, or by as many as the KV cache holds) gives
  a floor on its cost, and the search stops once ``top`` configurations cost no more than the
  next candidate's floor;
- cost: GPUs x price per GPU-hour (the parallelization price file, or one given), per million
  output tokens at the offered rate.

The space and its candidates are ``plan_space``'s, a simulation of a candidate and its verdict
``plan_probe``'s, the fewest units of a candidate ``plan_search``'s, and the order, the scouts
and the stop rule ``plan_pruning``'s.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING

import numpy as np
from tqdm import tqdm

from gpuplan.errors import GpuplanError, check_kind, check_positive, check_whole, shown
from gpuplan.hwmodels.accelerators import get_accelerator
from gpuplan.hwmodels.efficiency import Efficiency
from gpuplan.limits import MAX_FLOAT, MAX_REQUESTS, MAX_SEED
from gpuplan.sim.runtime.serving.deployment import serving_efficiency
from gpuplan.sim.runtime.serving.on_stack import stack_serving_efficiency
from gpuplan.sim.runtime.serving.plan_disagg import (
    PoolSpace,
    check_pool_gpus,
    other_gpu_candidates,
    pool_candidates,
)
from gpuplan.sim.runtime.serving.plan_pruning import candidate_order, enough_met, scout, top_cost
from gpuplan.sim.runtime.serving.plan_search import evaluate_candidate
from gpuplan.sim.runtime.serving.plan_space import SearchSpace, Slo, candidates, speculator_for
from gpuplan.sim.sweep import InProcess, Pool, check_pool
from gpuplan.units import HOUR
from gpuplan.workloads.presets import get_model

if TYPE_CHECKING:
    import pandas as pd

DEFAULT_SPACE = SearchSpace()  # ``plan``'s search space when none is given
DEFAULT_POOLS = PoolSpace()  # pools on ``plan``'s GPU, at the space's TPs


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanResult:
    """The plan's rows as dicts; ``best`` and ``evaluated`` are their DataFrames, built when
    asked for (so ``serve plan``, which reads ``best_rows``, never loads pandas: about 0.9 s
    of CPU on the shared 2-core machine)."""

    rows: list  # every candidate simulated, met or not, in the order simulated (``plan_search._row``)
    top: int
    speculation: bool  # whether the space offered speculative decoding (its column is kept)
    candidates: int  # candidates that fit in memory
    price_source: str
    wall_s: float

    def _best(self) -> tuple[list[int], list[str]]:
        """(indices in ``rows`` of the cheapest configurations that meet the SLO, cheapest
        first, ties: fewer GPUs, then the order simulated; the columns they do not show)."""
        rows = self.rows
        met = sorted((i for i, r in enumerate(rows) if r["meets"]),
                     key=lambda i: (rows[i]["usd_per_m_output_tokens"], rows[i]["gpus"]))
        return met[: self.top], ["above_top_cost"] + ([] if self.speculation else ["speculative"])

    @property
    def best_rows(self) -> list[dict]:
        """The cheapest configurations that meet the SLO (``_best``): ``best.to_dict("records")``
        without pandas."""
        kept, gone = self._best()
        return [{k: v for k, v in self.rows[i].items() if k not in gone} for i in kept]

    @property
    def evaluated(self) -> pd.DataFrame:
        """Every candidate simulated, met or not."""
        import pandas as pd

        return pd.DataFrame(self.rows)

    @property
    def best(self) -> pd.DataFrame:
        """``best_rows`` as a DataFrame (columns typed as in ``evaluated``)."""
        kept, gone = self._best()
        return self.evaluated.iloc[kept].drop(columns=gone).reset_index(drop=True)


def plan(
    model: str,
    gpu: str,
    *,
    rate_per_s: float,
    slo: Slo,
    lengths: tuple[np.ndarray, np.ndarray],
    requests: int = 1000,
    seed: int = 0,
    space: SearchSpace = DEFAULT_SPACE,
    usd_per_gpu_hour: float | None = None,
    top: int = 5,
    progress: bool = False,
    pool: Pool | None = None,
    fit: Efficiency | None = None,
    prune: bool = True,
    pools: PoolSpace = DEFAULT_POOLS,
) -> PlanResult:
    """The ``top`` cheapest configurations serving ``rate_per_s`` within ``slo``; ``lengths``
    are (prompt, output) token arrays of at least ``requests`` requests; ``pool``: where the
    candidates are simulated (``sim.sweep``; in this process by default); ``fit``: the device's
    efficiency fit (default: its built-in one); ``prune`` False simulates every probe to its
    end and caps no search (the same answer, slower: for checking); ``pools``: the prefill and
    decode GPU types and TPs that disaggregated units pair (``plan_disagg``)."""
    _check_inputs(rate_per_s=rate_per_s, slo=slo, lengths=lengths, requests=requests, seed=seed, space=space, top=top,
                  pool=pool, pools=pools)  # fmt: skip
    started = time.perf_counter()
    cfg, acc = get_model(model), get_accelerator(gpu)
    hourly, source = _price(acc.key, usd_per_gpu_hour)
    eff = _efficiency(acc, space, fit)
    found = candidates(cfg, acc, eff, space)
    found += _pooled(cfg, acc, space, pools, found, hourly)
    specs = {id(dep): speculator_for(space, dep) for c, dep in found if c.speculative}
    spec_tokens = space.speculation[0].k if space.speculation else 0
    if not found:
        raise GpuplanError(f"{cfg.name} fits on no configuration of {acc.key} up to tp=8, nor "
                           f"on a pipeline of tp x pp within {space.max_gpus} GPUs")
    mean_output = float(np.mean(lengths[1][:requests]))
    per_m = 1e6 / (rate_per_s * mean_output * HOUR)  # dollars per million tokens per $/hour
    ordered, steps = candidate_order(found, lengths, rate_per_s, spec_tokens)
    evaluate = partial(evaluate_candidate, rate_per_s=rate_per_s, lengths=lengths, slo=slo,
                       requests=requests, seed=seed, max_gpus=space.max_gpus, hourly=hourly,
                       per_m=per_m, prune=prune)  # fmt: skip
    piece = partial(_piece, ordered, steps, specs)
    scouted = {}, math.inf
    if prune:
        scouted = scout(ordered, steps, evaluate, piece, lengths, slo, top, (hourly, per_m),
                        rate_per_s, spec_tokens)  # fmt: skip
    rows, met = _search(ordered, pool or InProcess(), evaluate, piece, scouted, top=top,
                        hourly=hourly, per_m=per_m, prune=prune, progress=progress)  # fmt: skip
    if not met:
        import pandas as pd

        raise GpuplanError(_unmet(cfg, acc, rate_per_s, slo, space, pd.DataFrame(rows)))
    return PlanResult(rows=rows, top=top, speculation=space.speculation is not None,
                      candidates=len(found), price_source=source,
                      wall_s=time.perf_counter() - started)  # fmt: skip


def _check_inputs(*, rate_per_s, slo, lengths, requests, seed, space, top, pool, pools) -> None:
    """A plan's rate finite, its objects of their kinds, its counts whole, and ``lengths`` two
    arrays of at least ``requests`` whole token counts (a GpuplanError naming the first that is
    not)."""
    check_positive("rate_per_s", rate_per_s, allow_inf=True)
    if math.isinf(rate_per_s):
        raise GpuplanError("rate_per_s=inf is invalid for planning: give a finite request rate")
    if rate_per_s > MAX_FLOAT:
        raise GpuplanError(f"rate_per_s={rate_per_s:g} is invalid: it must be at most "
                           f"{MAX_FLOAT:g} requests/s")  # fmt: skip
    check_kind("slo", slo, "Slo")
    check_kind("space", space, "SearchSpace")
    check_kind("pools", pools, "PoolSpace")
    check_pool(pool)
    check_whole("requests", requests, high=MAX_REQUESTS)
    check_whole("seed", seed, low=0, high=MAX_SEED)
    check_whole("top", top, high=MAX_REQUESTS)
    check_kind("lengths", lengths, (tuple, list))
    if len(lengths) != 2:
        raise GpuplanError(f"lengths has {len(lengths)} parts: give (prompt, output) arrays")
    for name, column in zip(("prompt", "output"), lengths, strict=True):
        values = np.asarray(column) if isinstance(column, np.ndarray | list | tuple) else None
        whole = values is not None and values.ndim == 1 and values.dtype.kind in "iuf" and bool(
            np.all(np.isfinite(values) & (values >= 0) & (values == np.round(values))))
        if not whole:
            raise GpuplanError(f"lengths ({name})={shown(column)} is invalid: give a 1-D array "
                               "of whole token counts")  # fmt: skip
        if len(values) < requests:
            raise GpuplanError(f"lengths ({name}) has {len(values)} entries, fewer than "
                               f"requests={requests}: give at least that many")  # fmt: skip


def _pooled(cfg, acc, space: SearchSpace, pools: PoolSpace, found, hourly: float) -> list:
    """The candidates on ``pools.gpus`` and the disaggregated ones whose pools differ in GPU
    type or TP (``plan_disagg``), each GPU priced from the price file relative to ``hourly``
    (``acc``'s)."""
    from gpuplan.sim.parallel.cost import price_for

    def keys_of(names) -> tuple[str, ...]:
        return tuple(dict.fromkeys(get_accelerator(k).key for k in names))

    named = PoolSpace(gpus=tuple(k for k in keys_of(pools.gpus) if k != acc.key),
                      prefill_gpus=keys_of(pools.prefill_gpus),
                      decode_gpus=keys_of(pools.decode_gpus), prefill_tps=pools.prefill_tps,
                      decode_tps=pools.decode_tps)  # fmt: skip
    keys = sorted({*named.gpus, *named.prefill_gpus, *named.decode_gpus} - {acc.key})
    prices = {acc.key: 1.0} | {k: (p.usd_per_gpu_hour / hourly if (p := price_for(k)) else None)
                               for k in keys}  # fmt: skip
    check_pool_gpus(named, prices)
    colocated = {acc.key: found}
    for key in keys:  # each other GPU's colocated candidates, on its built-in efficiency fit
        other = get_accelerator(key)
        colocated[key] = candidates(cfg, other, _efficiency(other, space, None),
                                    replace(space, ratios=(), speculation=None))  # fmt: skip
    out = other_gpu_candidates(colocated, named.gpus, prices)
    return out + (pool_candidates(colocated, space.ratios, named, acc.key, prices)
                  if space.ratios else [])  # fmt: skip


def _efficiency(acc, space: SearchSpace, fit: Efficiency | None) -> Efficiency:
    """``acc``'s serving efficiency: its stack's when the space has one, else the attention
    kernel's (``fit``: a fitted one in place of the built-in)."""
    if space.stack is None:
        return serving_efficiency(acc.key, space.attention_kernel, fit)
    return stack_serving_efficiency(space.stack, acc, fit)


def _piece(ordered, steps, specs, k: int, cap_usd: tuple[float, float], seen) -> tuple:
    """What ``evaluate_candidate`` takes for the ``k``-th candidate in ``ordered``."""
    _, start, c, dep = ordered[k]
    return (c, dep, start, steps[id(dep)], cap_usd, seen,
            specs.get(id(dep)) if c.speculative else None)  # fmt: skip


def _search(ordered, pool: Pool, evaluate, piece, scouted, *, top: int, hourly: float,
            per_m: float, prune: bool, progress: bool) -> tuple[list[dict], list[float]]:  # fmt: skip
    """The rows of the candidates simulated in order, and the costs of those that met, until the
    stop rule (``enough_met``) holds; ``scouted``: ``scout``'s runs and cap (module docstring)."""
    known, scouted_usd = scouted
    rows, met = [], []
    bar = tqdm(total=len(ordered), unit="config", disable=not progress, leave=False)
    # candidates in order, ``pool.width`` at a time; the stop rule reads the rows in that order,
    # and once it holds it holds for every later candidate (floors rise, the top-th cost falls),
    # so the rows kept are the same however many were simulated at once
    for lo in range(0, len(ordered), pool.width):
        if enough_met(met, top, ordered[lo][0] * hourly * per_m):
            break
        batch = ordered[lo : lo + pool.width]
        # the deployment's step model goes with each piece: shared here, a copy of its memo (pure
        # prices, the same numbers either way) on a worker
        # a candidate later in the order ties with an earlier one's cost to no avail (the
        # configurations are sorted stably, the earlier first), so its cap is strictly below
        # the top-th cost met; at or below the scouts' X (a scout may come after it)
        cap = (scouted_usd, top_cost(met, top) if prune else math.inf)
        pieces = [piece(k, cap, known.get(k)) for k in range(lo, lo + len(batch))]
        for (gpus_floor, *_), row in zip(batch, pool.map(evaluate, pieces), strict=True):
            if enough_met(met, top, gpus_floor * hourly * per_m):
                break
            bar.update()
            row.pop("_seen")
            rows.append(row)
            if row["meets"]:
                met.append(row["usd_per_m_output_tokens"])
    bar.close()
    return rows, met


def _price(gpu: str, override: float | None) -> tuple[float, str]:
    from gpuplan.sim.parallel.cost import price_for

    if override is not None:
        check_positive("price_per_gpu_hour", override)
        if override > MAX_FLOAT:  # a price beyond it makes every cost per token infinite
            raise GpuplanError(f"price_per_gpu_hour={override:g} is invalid: it must be at most "
                               f"{MAX_FLOAT:g} USD")  # fmt: skip
        return override, "given by the user"
    price = price_for(gpu)
    if price is None:
        raise GpuplanError(
            f"the price file has no price for {gpu}: give --price-per-gpu-hour (USD)"
        )
    return price.usd_per_gpu_hour, f"{price.source} ({price.date})"


def _unmet(cfg, acc, rate, slo: Slo, space: SearchSpace, evaluated: pd.DataFrame) -> str:
    pct = f"p{slo.percentile:g}"
    targets = " and ".join(f"{name} {pct} <= {value:g} s" for name, value in
                           (("TTFT", slo.ttft_s), ("TPOT", slo.tpot_s)) if math.isfinite(value))
    head = (
        f"no configuration of {cfg.name} on {acc.key} serves {rate:g} requests/s with "
        f"{targets} within {space.max_gpus} GPUs"
    )
    if evaluated.empty:
        return head
    ttft, tpot = evaluated[f"ttft_{pct}_s"], evaluated[f"tpot_{pct}_s"]
    closest = evaluated.loc[(ttft / slo.ttft_s).clip(lower=tpot / slo.tpot_s).idxmin()]
    return (
        f"{head}; the closest ({closest['layout']}, tp={closest['tp']}, "
        f"{closest['weight_dtype']} weights, {closest['gpus']} GPUs) reached TTFT "
        f"{closest[f'ttft_{pct}_s']:.3g} s and TPOT {closest[f'tpot_{pct}_s']:.3g} s: relax the "
        "SLO, raise --max-gpus or choose a faster GPU"
    )
