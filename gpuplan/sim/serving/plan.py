"""Capacity planning: the cheapest ways to serve a request rate under latency SLOs.

The search covers, for one model on one kind of GPU: tensor parallelism (every divisor of the
query heads up to 8 at which the model fits), weight and KV formats (bf16; fp8 weights with an
fp8 cache; int8 and int4 weights), the scheduler's ``max_seqs``, and colocated replicas or
disaggregated units of P prefill and D decode replicas. For each candidate it finds the fewest
units that meet the SLOs by simulation and prices them.

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
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING

import numpy as np
from tqdm import tqdm

from gpuplan.errors import GpuplanError, check_positive
from gpuplan.hwmodels.accelerators import get_accelerator
from gpuplan.hwmodels.efficiency import Efficiency
from gpuplan.sim.serving.deployment import (
    MAX_TP,
    Deployment,
    SchedulerConfig,
    serving_efficiency,
)
from gpuplan.sim.serving.disagg import Disaggregation, simulate_disaggregated
from gpuplan.sim.serving.engine import Settled, simulate
from gpuplan.sim.serving.kv_cache import kv_capacity
from gpuplan.sim.serving.on_stack import deployment_fields, stack_serving_efficiency
from gpuplan.sim.serving.request_table import FINISHED
from gpuplan.sim.serving.requests import Workload
from gpuplan.sim.serving.step_model import Batch, StepModel
from gpuplan.sim.sweep import InProcess, Pool
from gpuplan.units import HOUR
from gpuplan.workloads.presets import get_model

if TYPE_CHECKING:
    import pandas as pd

WARMUP_SHARE = 0.1  # first requests left out of the percentiles
FORMATS = (("bf16", "bf16"), ("fp8", "fp8"), ("int8", "bf16"), ("int4", "bf16"))
RATIOS = ((1, 1), (1, 2), (1, 3))
LOWER_BOUND_MARGIN = 0.5  # the throughput bound is not strict: start the search below it


@dataclass(frozen=True, slots=True, kw_only=True)
class Slo:
    ttft_s: float
    tpot_s: float
    percentile: float = 99.0

    def __post_init__(self) -> None:
        check_positive("slo_ttft_s", self.ttft_s)
        check_positive("slo_tpot_s", self.tpot_s)
        if not 0 < self.percentile <= 100:
            raise GpuplanError(f"percentile={self.percentile} is invalid: give one in (0, 100]")


@dataclass(frozen=True, slots=True, kw_only=True)
class SearchSpace:
    tps: tuple[int, ...] | None = None  # None: every divisor of the heads up to 8
    formats: tuple[tuple[str, str], ...] = FORMATS
    max_seqs: tuple[int, ...] = (64, 256)
    policy: str = "chunked"
    ratios: tuple[tuple[int, int], ...] = RATIOS  # () leaves disaggregation out
    max_gpus: int = 64
    attention_kernel: str = "flash2"  # hwmodels.attention.ATTENTION_KERNELS
    stack: object | None = None  # a serving stack (sim.stacks): its kernels, graphs and CPU cost
    # (speculative.Speculation, draft model name or None): each colocated candidate also tried
    # with speculative decoding (``serve plan --speculative``); None: not offered
    speculation: tuple | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Candidate:
    tp: int
    weight_dtype: str
    kv_dtype: str
    max_seqs: int
    policy: str
    prefill: int = 0  # replicas of a disaggregated unit (0: one colocated replica)
    decode: int = 0
    pp: int = 1  # pipeline stages of tp GPUs (``_pipeline_candidates``)
    speculative: bool = False  # decoding with ``SearchSpace.speculation``

    @property
    def unit_replicas(self) -> int:
        return self.prefill + self.decode if self.prefill else 1

    @property
    def unit_gpus(self) -> int:
        return self.tp * self.pp * self.unit_replicas

    @property
    def layout(self) -> str:
        return f"disaggregated {self.prefill}P:{self.decode}D" if self.prefill else "colocated"


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanResult:
    """The plan's rows as dicts; ``best`` and ``evaluated`` are their DataFrames, built when
    asked for (so ``serve plan``, which reads ``best_rows``, never loads pandas: about 0.9 s
    of CPU on the shared 2-core machine)."""

    rows: list  # every candidate simulated, met or not, in the order simulated (``_row``)
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


def candidates(cfg, acc, eff, space: SearchSpace) -> list[tuple[Candidate, Deployment]]:
    """Every candidate of the space whose model fits (with its deployment)."""
    tps = space.tps or tuple(t for t in range(1, MAX_TP + 1) if cfg.n_heads % t == 0)
    out = []
    for tp in tps:
        for weight, kv in space.formats:
            dep = _deployment(cfg, acc, eff, space, tp=tp, weight_dtype=weight, kv_dtype=kv)
            spec = speculator_for(space, dep)
            for seqs in space.max_seqs:
                base = Candidate(tp=tp, weight_dtype=weight, kv_dtype=kv, max_seqs=seqs,
                                 policy=space.policy)  # fmt: skip
                if not _fits(dep, _sched(base)):
                    continue
                out.append((base, dep))
                out += [(replace(base, prefill=p, decode=d), dep) for p, d in space.ratios]
                if spec is not None and _fits(dep, _sched(base), spec):
                    out.append((replace(base, speculative=True), dep))
    # a format no node's TP holds gets pipelines of nodes (``_pipeline_candidates``)
    held = {(c.weight_dtype, c.kv_dtype) for c, _ in out}
    rest = tuple(f for f in space.formats if f not in held)
    return out + (_pipeline_candidates(cfg, acc, eff, replace(space, formats=rest)) if rest else [])


def _deployment(cfg, acc, eff, space: SearchSpace, **fields) -> Deployment:
    """A candidate's deployment: ``fields`` (tp, formats, pipeline) over the space's stack's."""
    stack = {} if space.stack is None else deployment_fields(space.stack, tp=fields["tp"],
                                                             gpu=acc.key)  # fmt: skip
    return Deployment(model=cfg, acc=acc, eff=eff, **fields, **stack)


def _sched(c: Candidate) -> SchedulerConfig:
    return SchedulerConfig(policy=c.policy, max_seqs=c.max_seqs)


def _fits(dep: Deployment, sched: SchedulerConfig, speculator=None) -> bool:
    try:
        kv_capacity(dep, sched, speculator)
    except GpuplanError:
        return False
    return True


def speculator_for(space: SearchSpace, dep: Deployment):
    """The space's speculation on ``dep`` (its draft model on the same GPUs, formats and stack
    fields), or None."""
    if space.speculation is None:
        return None
    from gpuplan.sim.serving.speculative import Speculator

    spec, draft_name = space.speculation
    draft = None if draft_name is None else replace(dep, model=get_model(draft_name))
    return Speculator(spec, dep, draft=draft)


def unit_rate_bound(c: Candidate, dep: Deployment, step: StepModel, lengths,
                    spec_tokens: int = 0) -> float:  # fmt: skip
    """Requests per second one unit could not exceed by much (module docstring); a speculative
    candidate's decode as if every step of ``spec_tokens`` proposals emitted all and the bonus
    token at a decode iteration's price."""
    prompt, output = float(np.mean(lengths[0])), float(np.mean(lengths[1]))
    cap = kv_capacity(dep, _sched(c))
    seqs = max(1, min(c.max_seqs, cap.sequences(prompt + output)))
    p, o = max(1, round(prompt)), max(1, round(output))
    prefill_s = step.iteration_s(Batch(prefill=((p, 0, 1),)))
    context = seqs * round(prompt + output / 2)
    decode_s = (o - 1) * step.decode_s(seqs, context) / seqs
    if c.speculative:  # at most k + 1 tokens a step, each step at least a decode's price
        decode_s /= spec_tokens + 1
    if not c.prefill:
        return 1.0 / (prefill_s + decode_s)
    return min(c.prefill / prefill_s, c.decode / max(decode_s, 1e-12))


class _Failing:
    """A simulation's watch (``engine.Settled``): it ends the run once the SLO verdict is sure
    to be a miss, so a failing probe need not simulate its remaining requests. Sure, because
    ``_verdict`` fails on any rejection, and numpy's linear percentile of N values at p lies
    between the sorted values of ranks floor(r) and ceil(r), r = p/100 (N - 1): once N -
    floor(r) of the values it will take exceed the target, both do, and so does the
    percentile. The values are those of the requests after the warm-up (every one of them must
    finish to pass, so N is known before the run: all of them for TTFT, those of more than one
    output token for TPOT). A TTFT counts at its first token, or at an arrival once its request
    has waited longer than the target with none; a TPOT at its request's end."""

    def __init__(self, output_tokens: np.ndarray, slo: Slo):
        n = len(output_tokens)
        self.first, self.slo = int(n * WARMUP_SHARE), slo
        kept = output_tokens[self.first :]
        self.ttft_left = self._needed(len(kept), slo.percentile)
        self.tpot_left = self._needed(int((kept > 1).sum()), slo.percentile)
        self.aged = self.first  # requests before it judged by age at an arrival (``arrival``)
        self.late: set[int] = set()  # counted by age, before their first token

    @staticmethod
    def _needed(n: int, percentile: float) -> float:
        """Values above the target that make the percentile of ``n`` values exceed it (the rank
        taken a hair low: numpy computes it as n q - q, which may round below (n - 1) q)."""
        return n - math.floor(percentile / 100 * (n - 1) - 1e-9) if n else math.inf

    def arrival(self, table, rid: int, at_s: float) -> None:
        """At each arrival: a request that arrived more than the TTFT target ago with no first
        token yet will exceed it (its first token comes at ``at_s`` or later)."""
        arrived, first = table.arrival_s, table.first_token_s
        # the TTFT's own subtraction: a first token at at_s or later gives at least this value
        while self.aged < rid and at_s - arrived[self.aged] > self.slo.ttft_s:
            r = self.aged
            self.aged += 1
            if math.isnan(first[r]):
                self.late.add(r)
                self._slow_first_token()

    def first_token(self, table, rid: int, at_s: float) -> None:
        """A TTFT is known at the first token, long before its request finishes."""
        late = rid >= self.first and at_s - table.arrival_s[rid] > self.slo.ttft_s
        if late and rid not in self.late:  # not counted already at an arrival
            self._slow_first_token()

    def _slow_first_token(self) -> None:
        self.ttft_left -= 1
        if self.ttft_left <= 0:
            raise Settled

    def __call__(self, table, rid: int, at_s: float) -> None:
        if table.status[rid] != FINISHED:  # rejected: a sure miss
            raise Settled
        out = table.output[rid]
        slow = out > 1 and (at_s - table.first_token_s[rid]) / (out - 1) > self.slo.tpot_s
        if rid >= self.first and slow:
            self.tpot_left -= 1
            if self.tpot_left <= 0:
                raise Settled


class _Probe:
    """Simulations of one candidate at a given number of units (memoized). A run whose miss is
    settled early (``_Failing``) is kept as a miss with no percentiles (NaN); ``exact`` runs it
    to the end when its percentiles are wanted."""

    def __init__(self, c, dep, step, *, rate_per_s, lengths, slo, n_requests, seed, settle=True,
                 speculator=None):  # fmt: skip
        self.c, self.dep, self.step, self.rate, self.slo = c, dep, step, rate_per_s, slo
        self.lengths, self.n, self.seed, self.settle = lengths, n_requests, seed, settle
        self.speculator = speculator
        self.sched = _sched(c)
        self.seen: dict[int, tuple[bool, float, float]] = {}

    def __call__(self, units: int) -> tuple[bool, float, float]:
        """(meets, TTFT and TPOT at the percentile) with traffic split over ``units``."""
        if units not in self.seen:
            self.seen[units] = self._run(self.rate / units, settle=self.settle)
        return self.seen[units]

    def exact(self, units: int) -> tuple[bool, float, float]:
        """``self(units)`` with its percentiles, even of a miss."""
        if math.isnan(self(units)[1]):
            self.seen[units] = self._run(self.rate / units, settle=False)
        return self.seen[units]

    def _run(self, rate: float, *, settle: bool) -> tuple[bool, float, float]:
        rng = np.random.default_rng(self.seed)
        gaps = rng.exponential(1.0 / rate, self.n) if math.isfinite(rate) else np.zeros(self.n)
        times = np.cumsum(gaps) - gaps[0]
        load = Workload(arrival_s=times, prompt_tokens=self.lengths[0][: self.n],
                        output_tokens=self.lengths[1][: self.n])  # fmt: skip
        c = self.c
        watch = _Failing(load.output_tokens, self.slo) if settle else None
        try:
            if c.prefill:
                dis = Disaggregation(prefill_replicas=c.prefill, decode_replicas=c.decode)
                pre = replace(self.sched, policy="continuous")
                res = simulate_disaggregated(self.dep, self.sched, load, dis, prefill_sched=pre,
                                             timeline=False, step=self.step, watch=watch)  # fmt: skip
            else:
                res = simulate(self.dep, self.sched, load, timeline=False, step=self.step,
                               watch=watch, speculator=self.speculator)  # fmt: skip
        except Settled:
            return False, math.nan, math.nan
        return _verdict(res.request_columns, self.slo)


def _verdict(frame, slo: Slo) -> tuple[bool, float, float]:
    """(meets, TTFT and TPOT at the percentile) of a run's requests: its ``request_columns``
    (numpy arrays, as the engine keeps them) or their DataFrame, the same numbers."""
    status = np.asarray(frame["status"])
    if (status != "finished").any():
        return False, math.inf, math.inf
    first = int(len(status) * WARMUP_SHARE)
    ttft = float(np.nanpercentile(np.asarray(frame["ttft_s"], dtype=float)[first:],
                                  slo.percentile))  # fmt: skip
    tpots = np.asarray(frame["tpot_s"], dtype=float)[first:]
    tpots = tpots[~np.isnan(tpots)]
    tpot = float(np.percentile(tpots, slo.percentile)) if len(tpots) else 0.0
    return ttft <= slo.ttft_s and tpot <= slo.tpot_s, ttft, tpot


ABOVE_CAP = -1  # fewest_units: the answer is sure to exceed the cap


def fewest_units(probe: _Probe, start: int, most: int, cap: int | None = None) -> int | None:
    """The fewest units in [1, most] that meet the SLO, searching from ``start`` (doubling,
    then bisection); None if none does. With ``cap`` below ``most``, only an answer of at most
    ``cap`` units is wanted: the same search, with the lightest load (``most``) probed last, is
    given up as ``ABOVE_CAP`` once the failures already seen put the answer above ``cap``. Where
    the uncapped search finds an answer, the units this one probes are among those it probes,
    so an answer within the cap is the uncapped answer; where it finds none, neither does this
    one (it ends with the same lightest-load probe, or above the cap)."""
    if cap is not None and cap < most:
        return _fewest_capped(probe, start, most, cap)
    if not probe(most)[0]:  # not even at the lightest load
        return None
    lo, hi = 0, max(1, min(start, most))
    while not probe(hi)[0]:
        if hi >= most:
            return None
        lo, hi = hi, min(2 * hi, most)
    while hi - lo > 1:  # probe(lo) fails (or lo = 0), probe(hi) meets
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if probe(mid)[0] else (mid, hi)
    return hi


def _fewest_capped(probe: _Probe, start: int, most: int, cap: int) -> int:
    lo, hi = 0, max(1, min(start, most))
    while True:  # doubling; every answer of this search is above lo
        if lo >= cap:
            return ABOVE_CAP
        if probe(hi)[0]:
            break
        lo, hi = hi, min(2 * hi, most)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if probe(mid)[0] else (mid, hi)
        if lo >= cap:
            return ABOVE_CAP
    return hi if probe(most)[0] else None  # the uncapped search asks this first


def plan(
    model: str,
    gpu: str,
    *,
    rate_per_s: float,
    slo: Slo,
    lengths: tuple[np.ndarray, np.ndarray],
    requests: int = 1000,
    seed: int = 0,
    space: SearchSpace = SearchSpace(),
    usd_per_gpu_hour: float | None = None,
    top: int = 5,
    progress: bool = False,
    pool: Pool | None = None,
    fit: Efficiency | None = None,
    prune: bool = True,
) -> PlanResult:
    """The ``top`` cheapest configurations serving ``rate_per_s`` within ``slo``; ``lengths``
    are (prompt, output) token arrays of at least ``requests`` requests; ``pool``: where the
    candidates are simulated (``sim.sweep``; in this process by default); ``fit``: the device's
    efficiency fit (default: its built-in one); ``prune`` False simulates every probe to its
    end and caps no search (the same answer, slower: for checking)."""
    check_positive("rate_per_s", rate_per_s, allow_inf=True)
    if math.isinf(rate_per_s):
        raise GpuplanError("rate_per_s=inf is invalid for planning: give a finite request rate")
    started = time.perf_counter()
    cfg, acc = get_model(model), get_accelerator(gpu)
    hourly, source = _price(acc.key, usd_per_gpu_hour)
    eff = (serving_efficiency(acc.key, space.attention_kernel, fit) if space.stack is None
           else stack_serving_efficiency(space.stack, acc, fit))  # fmt: skip
    found = candidates(cfg, acc, eff, space)
    specs = {id(dep): speculator_for(space, dep) for c, dep in found if c.speculative}
    spec_tokens = space.speculation[0].k if space.speculation else 0
    if not found:
        raise GpuplanError(f"{cfg.name} fits on no configuration of {acc.key} up to tp=8, nor "
                           f"on a pipeline of tp x pp within {space.max_gpus} GPUs")
    mean_output = float(np.mean(lengths[1][:requests]))
    per_m = 1e6 / (rate_per_s * mean_output * HOUR)  # dollars per million tokens per $/hour
    steps = {}
    ordered = []
    for c, dep in found:
        step = steps.setdefault(id(dep), StepModel(dep))
        bound = unit_rate_bound(c, dep, step, lengths, spec_tokens)
        start = max(1, math.floor(LOWER_BOUND_MARGIN * rate_per_s / bound))
        ordered.append((start * c.unit_gpus, start, c, dep))
    ordered.sort(key=lambda x: (x[0], x[2].tp, x[2].unit_replicas))
    pool = pool or InProcess()
    evaluate = partial(_evaluate_candidate, rate_per_s=rate_per_s, lengths=lengths, slo=slo,
                       requests=requests, seed=seed, max_gpus=space.max_gpus, hourly=hourly,
                       per_m=per_m, prune=prune)  # fmt: skip

    def piece(k: int, cap_usd: tuple[float, float], seen) -> tuple:
        """What ``_evaluate_candidate`` takes for the ``k``-th candidate in ``ordered``."""
        _, start, c, dep = ordered[k]
        return (c, dep, start, steps[id(dep)], cap_usd, seen,
                specs.get(id(dep)) if c.speculative else None)

    known, scouted_usd = {}, math.inf
    if prune:
        known, scouted_usd = _scout(ordered, steps, evaluate, piece, lengths, slo, top,
                                    hourly * per_m, rate_per_s, spec_tokens)  # fmt: skip
    rows, met = [], []
    bar = tqdm(total=len(ordered), unit="config", disable=not progress, leave=False)
    # candidates in order, ``pool.width`` at a time; the stop rule reads the rows in that order,
    # and once it holds it holds for every later candidate (floors rise, the top-th cost falls),
    # so the rows kept are the same however many were simulated at once
    for lo in range(0, len(ordered), pool.width):
        if _enough(met, top, ordered[lo][0] * hourly * per_m):
            break
        batch = ordered[lo : lo + pool.width]
        # the deployment's step model goes with each piece: shared here, a copy of its memo (pure
        # prices, the same numbers either way) on a worker
        # a candidate later in the order ties with an earlier one's cost to no avail (the
        # configurations are sorted stably, the earlier first), so its cap is strictly below
        # the top-th cost met; at or below the scouts' X (a scout may come after it)
        cap = (scouted_usd, _top_cost(met, top) if prune else math.inf)
        pieces = [piece(k, cap, known.get(k)) for k in range(lo, lo + len(batch))]
        for (gpus_floor, *_), row in zip(batch, pool.map(evaluate, pieces), strict=True):
            if _enough(met, top, gpus_floor * hourly * per_m):
                break
            bar.update()
            row.pop("_seen")
            rows.append(row)
            if row["meets"]:
                met.append(row["usd_per_m_output_tokens"])
    bar.close()
    if not met:
        import pandas as pd

        raise GpuplanError(_unmet(cfg, acc, rate_per_s, slo, space, pd.DataFrame(rows)))
    return PlanResult(
        rows=rows,
        top=top,
        speculation=space.speculation is not None,
        candidates=len(found),
        price_source=source,
        wall_s=time.perf_counter() - started,
    )


def _scout(ordered, steps, evaluate, piece, lengths, slo: Slo, top: int, usd_per_gpu: float,
           rate, spec_tokens: int):  # fmt: skip
    """Before the search proper, the ``top`` candidates guessed cheapest (``_guess_gpus``) are
    searched in full: ({index in ``ordered``: their runs}, X), X the ``top``-th lowest of
    max(floor, cost) among those that meet (inf if fewer meet). No candidate costing more
    than X can be among the ``top``: the ``top`` scouts cost X or less and, their floors being X
    or less, come before any candidate the stop rule could end the search at with fewer than
    ``top`` costs at or below X met. So X caps every search, and the stop rule and the
    configurations kept are those of the search without it. ``piece(k, caps, runs)``: what
    ``evaluate`` takes for the ``k``-th candidate."""
    guesses = [(_guess_gpus(c, dep, steps[id(dep)], lengths, slo, rate, spec_tokens), k)
               for k, (_, _, c, dep) in enumerate(ordered)]  # fmt: skip
    chosen = [k for gpus, k in sorted(guesses) if math.isfinite(gpus)][:top]
    known, usd = {}, []
    for k in sorted(chosen):
        row = evaluate(piece(k, (math.inf, math.inf), None))
        floor_gpus = ordered[k][0]
        known[k] = row["_seen"]
        if row["meets"]:
            usd.append(max(floor_gpus * usd_per_gpu, row["gpus"] * usd_per_gpu))
    return known, _top_cost(usd, top)


TAIL_FACTOR = math.log(100)  # an M/M/1 queue's p99 sojourn is ln(100) service times / (1 - load)


def _guess_gpus(c: Candidate, dep, step: StepModel, lengths, slo: Slo, rate: float,
                spec_tokens: int) -> float:  # fmt: skip
    """A rough guess at the GPUs a candidate needs, only to choose the scouts (``_scout``):
    its throughput bound (``unit_rate_bound``) at the highest load that keeps an M/M/1 queue
    of mean-prompt prefills within the TTFT target at p99; inf where a lone decode step misses
    the TPOT target, or no load would do."""
    prompt, output = max(1, round(float(np.mean(lengths[0])))), float(np.mean(lengths[1]))
    prefill_s = step.iteration_s(Batch(prefill=((prompt, 0, 1),)))
    load = 1 - TAIL_FACTOR * prefill_s / slo.ttft_s
    if load <= 0:
        return math.inf
    if step.decode_s(1, prompt + round(output / 2)) > slo.tpot_s:
        return math.inf
    units = max(1, math.ceil(rate / (load * unit_rate_bound(c, dep, step, lengths, spec_tokens))))
    return units * c.unit_gpus


def _top_cost(met: list[float], top: int) -> float:
    """The ``top``-th lowest cost met so far (inf before ``top`` have met): a candidate that
    costs more at its fewest units cannot be among the ``top``, so its search stops there."""
    return sorted(met)[top - 1] if len(met) >= top else math.inf


def _cap_units(c: Candidate, cap_usd: float, hourly: float, per_m: float, *,
               strict: bool = False) -> int | None:  # fmt: skip
    """The most units of ``c`` whose cost (as ``_row`` prices it) is within ``cap_usd`` (below
    it, ``strict``); None for no cap."""
    if math.isinf(cap_usd):
        return None

    def within(units: int) -> bool:
        usd = units * c.unit_gpus * hourly * per_m
        return usd < cap_usd if strict else usd <= cap_usd

    units = math.floor(cap_usd / (c.unit_gpus * hourly * per_m))
    while within(units + 1):
        units += 1
    while units > 0 and not within(units):
        units -= 1
    return units


def _enough(met: list[float], top: int, floor_usd: float) -> bool:
    """Whether ``top`` configurations already cost no more than a candidate's floor."""
    return len(met) >= top and floor_usd > sorted(met)[top - 1]


def _evaluate_candidate(piece, *, rate_per_s, lengths, slo, requests, seed, max_gpus, hourly,
                        per_m, prune=True) -> dict:  # fmt: skip
    """The fewest units of one candidate that meet the SLO, as a row: one piece of the plan."""
    c, dep, start, step, cap_usd, seen, speculator = piece
    probe = _Probe(c, dep, step, rate_per_s=rate_per_s, lengths=lengths, slo=slo,
                   n_requests=requests, seed=seed, settle=prune, speculator=speculator)  # fmt: skip
    probe.seen.update(seen or {})  # the scouting's runs of this candidate
    caps = (_cap_units(c, cap_usd[0], hourly, per_m),
            _cap_units(c, cap_usd[1], hourly, per_m, strict=True))  # fmt: skip
    cap = min((u for u in caps if u is not None), default=None)
    units = fewest_units(probe, start, max(1, max_gpus // c.unit_gpus), cap)
    return _row(c, units, probe, hourly, per_m, slo) | {"_seen": probe.seen}


def _row(c: Candidate, units, probe: _Probe, hourly: float, per_m: float, slo: Slo) -> dict:
    """The candidate's row; one given up above the top cost (``ABOVE_CAP``) is a miss at the
    most units it tried, its percentiles NaN where that run was settled early."""
    above = units == ABOVE_CAP
    units = None if above else units
    tried = units if units is not None else max(probe.seen, default=0)
    if above:  # none tried when even one unit costs more (0 units, no percentiles)
        ttft, tpot = (math.nan, math.nan) if not tried else probe(tried)[1:]
    else:
        _, ttft, tpot = probe.exact(tried)
    gpus = tried * c.unit_gpus
    pct = f"p{slo.percentile:g}"
    return {
        "layout": c.layout,
        "tp": c.tp,
        "pp": c.pp,
        "weight_dtype": c.weight_dtype,
        "kv_dtype": c.kv_dtype,
        "max_seqs": c.max_seqs,
        "units": tried,
        "replicas": tried * c.unit_replicas,
        "gpus": gpus,
        f"ttft_{pct}_s": ttft,
        f"tpot_{pct}_s": tpot,
        "usd_per_hour": gpus * hourly,
        "usd_per_m_output_tokens": gpus * hourly * per_m,
        "speculative": c.speculative,
        "meets": units is not None,
        "above_top_cost": above,  # not searched past the top-th cost met (``_top_cost``)
    }


def _price(gpu: str, override: float | None) -> tuple[float, str]:
    from gpuplan.sim.parallel.cost import price_for

    if override is not None:
        check_positive("price_per_gpu_hour", override)
        return override, "given by the user"
    price = price_for(gpu)
    if price is None:
        raise GpuplanError(
            f"the price file has no price for {gpu}: give --price-per-gpu-hour (USD)"
        )
    return price.usd_per_gpu_hour, f"{price.source} ({price.date})"


def _unmet(cfg, acc, rate, slo: Slo, space: SearchSpace, evaluated: pd.DataFrame) -> str:
    pct = f"p{slo.percentile:g}"
    head = (
        f"no configuration of {cfg.name} on {acc.key} serves {rate:g} requests/s with TTFT "
        f"{pct} <= {slo.ttft_s:g} s and TPOT {pct} <= {slo.tpot_s:g} s within "
        f"{space.max_gpus} GPUs"
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


def _pipeline_candidates(cfg, acc, eff, space: SearchSpace) -> list[tuple[Candidate, Deployment]]:
    """For formats in which no node's TP holds the model: colocated replicas of ``pp`` stages of
    the widest TP of the space, for the shallowest pipeline that holds it and the next deeper
    one (more KV blocks per stage), split evenly or by ``strategy.auto_pp_layers``."""
    from gpuplan.sim.serving.pipeline import MAX_PP_ADVICE, even_or_auto_split

    tp = max(t for t in (space.tps or range(1, MAX_TP + 1)) if cfg.n_heads % t == 0)
    out: list[tuple[Candidate, Deployment]] = []
    depths = 0
    for pp in range(2, min(cfg.n_layers, MAX_PP_ADVICE) + 1):
        if depths == 2 or tp * pp > space.max_gpus:
            break
        layers = even_or_auto_split(cfg.n_layers, pp)
        found = len(out)
        for weight, kv in space.formats:
            dep = _deployment(cfg, acc, eff, space, tp=tp, pp=pp, pp_layers=layers,
                              weight_dtype=weight, kv_dtype=kv)  # fmt: skip
            for seqs in space.max_seqs:
                c = Candidate(tp=tp, pp=pp, weight_dtype=weight, kv_dtype=kv, max_seqs=seqs,
                              policy=space.policy)  # fmt: skip
                if _fits(dep, _sched(c)):
                    out.append((c, dep))
        depths += len(out) > found or depths > 0
    return out
