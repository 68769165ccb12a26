"""A capacity plan's candidates on several GPU types, disaggregated ones whose pools differ,
and the plan's frontier.

- Several GPU types (``serve plan --gpu A B``): each other type's candidates, colocated, priced
  at its own GPU's price (``GpuCandidate``); its disaggregated pools are paired below.

- Pools of their own: a unit of P prefill and D decode replicas where the prefill replicas run
  one (GPU type, TP) and the decode replicas another (``PoolCandidate``), as Splitwise (Patel et
  al., ISCA 2024) mixes H100 prefill with A100 decode and DistServe (Zhong et al., OSDI 2024)
  sizes each phase's parallelism on its own. Each pool is a colocated candidate of the same
  weight and KV formats and ``max_seqs`` that fits on its GPU (``plan_space.candidates``); the
  KV cache crosses over the scale-out NICs, bounded by the slower side
  (``disagg.kv_transfer_s``). A unit's cost weighs each pool's GPUs by its own price.
- The frontier: of the configurations searched to the end that meet the SLO, those no other
  beats on both output tokens/s per GPU (the offered rate's output tokens over the GPUs) and
  tokens/s per user (one over TPOT at the SLO's percentile) -- the Pareto set, as aiconfigurator
  and InferenceMAX plot throughput per GPU against interactivity. Searched to the end: the
  ``top`` cheapest and every one cheaper than the ``top``-th (``searched_rows``); a costlier one
  may have been given up at the cost cap, sooner or later as the candidates were shared out, so
  it is left out and the frontier is the same in this process and on a cluster (``--top``
  widens it).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from itertools import product

from gpuplan.errors import GpuplanError
from gpuplan.sim.runtime.serving.plan_space import Candidate
from gpuplan.sim.runtime.serving.step_model import StepModel


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolSpace:
    """Which GPU types a plan tries besides its own (``gpus``), and which pools it pairs: GPU
    types and TPs of each (empty: the plan's own GPU and ``gpus``; None: the space's TPs)."""

    gpus: tuple[str, ...] = ()
    prefill_gpus: tuple[str, ...] = ()
    decode_gpus: tuple[str, ...] = ()
    prefill_tps: tuple[int, ...] | None = None
    decode_tps: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuCandidate(Candidate):
    """A colocated candidate on another GPU type than the plan's own."""

    gpu: str
    price: float = 1.0  # its price per GPU-hour over the plan's reference price

    @property
    def unit_cost_gpus(self) -> float:
        return self.unit_gpus * self.price

    @property
    def layout(self) -> str:
        return f"colocated on {self.gpu}"


def other_gpu_candidates(colocated: dict, gpus, prices: dict) -> list:
    """Each of ``gpus``' colocated candidates (``colocated``: GPU key -> its (candidate,
    deployment) pairs that fit), priced at its own GPU."""
    return [(GpuCandidate(**asdict(c), gpu=key, price=prices[key]), dep)
            for key in gpus for c, dep in colocated[key]]  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolCandidate(Candidate):
    """A disaggregated unit whose decode pool differs from its prefill pool (``tp``, the
    candidate's deployment: the prefill pool's)."""

    decode_tp: int
    prefill_gpu: str
    decode_gpu: str
    prefill_price: float = 1.0  # each pool's price per GPU-hour over the plan's reference price
    decode_price: float = 1.0
    decode_dep: object = field(default=None, compare=False, repr=False)
    decode_step: object = field(default=None, compare=False, repr=False)

    @property
    def unit_gpus(self) -> int:
        return self.prefill * self.tp + self.decode * self.decode_tp

    @property
    def layout(self) -> str:
        return (f"disaggregated {self.prefill}P({self.prefill_gpu} tp{self.tp}):"
                f"{self.decode}D({self.decode_gpu} tp{self.decode_tp})")  # fmt: skip

    @property
    def unit_cost_gpus(self) -> float:
        """The unit's GPUs at the plan's reference price (each pool at its own)."""
        return (self.prefill * self.tp * self.prefill_price
                + self.decode * self.decode_tp * self.decode_price)  # fmt: skip


def pool_candidates(colocated: dict, ratios, pools: PoolSpace, main_gpu: str,
                    prices: dict) -> list:  # fmt: skip
    """Disaggregated candidates of every prefill and decode (GPU, TP) pair of the same formats
    and ``max_seqs`` whose pools differ; ``colocated``: GPU key -> its colocated (candidate,
    deployment) pairs that fit; ``prices``: GPU key -> price over the reference price."""
    out, steps = [], {}
    gpus = (main_gpu, *pools.gpus)
    for pg, dg in product(pools.prefill_gpus or gpus, pools.decode_gpus or gpus):
        for (cp, dp), (cd, dd) in product(_bases(colocated[pg], pools.prefill_tps),
                                          _bases(colocated[dg], pools.decode_tps)):  # fmt: skip
            same_pool = (pg, cp.tp) == (dg, cd.tp)
            if (same_pool and pg == main_gpu) or not _pairs(cp, cd):
                continue  # plan_space's own disaggregated candidates
            step = steps.setdefault(id(dd), StepModel(dd))
            out += [(PoolCandidate(tp=cp.tp, weight_dtype=cp.weight_dtype, kv_dtype=cp.kv_dtype,
                                   max_seqs=cp.max_seqs, policy=cp.policy, prefill=p, decode=d,
                                   decode_tp=cd.tp, prefill_gpu=pg, decode_gpu=dg,
                                   prefill_price=prices[pg], decode_price=prices[dg],
                                   decode_dep=dd, decode_step=step), dp)
                    for p, d in ratios]  # fmt: skip
    return out


def _bases(found, tps) -> list:
    """The plain colocated candidates of ``found`` (one pipeline stage, no speculation, not a
    wide-EP group: a pool counts ``tp`` GPUs a replica) at ``tps`` (None: all)."""
    return [(c, dep) for c, dep in found
            if not c.prefill and not c.speculative and c.pp == 1 and not c.dp_attention
            and (tps is None or c.tp in tps)]  # fmt: skip


def _pairs(cp: Candidate, cd: Candidate) -> bool:
    """Two pools of one unit: the same weights, KV format and batch limits."""
    return (cp.weight_dtype, cp.kv_dtype, cp.max_seqs) == (cd.weight_dtype, cd.kv_dtype,
                                                           cd.max_seqs)  # fmt: skip


def decode_side(c, dep, step):
    """The decode pool's deployment and step model of candidate ``c``."""
    if isinstance(c, PoolCandidate):
        return c.decode_dep, c.decode_step
    return dep, step


def pool_columns(c, dep) -> dict:
    """A row's GPU type (a colocated candidate's; "" for a disaggregated one) and its pools:
    each one's GPU type and TP (a colocated candidate has none: "" and 0, which a DataFrame
    keeps as they are, where None would become NaN)."""
    if not c.prefill:
        return {"gpu": dep.acc.key, "prefill_gpu": "", "decode_gpu": "", "prefill_tp": 0,
                "decode_tp": 0}  # fmt: skip
    if isinstance(c, PoolCandidate):
        return {"gpu": "", "prefill_gpu": c.prefill_gpu, "decode_gpu": c.decode_gpu,
                "prefill_tp": c.tp, "decode_tp": c.decode_tp}  # fmt: skip
    return {"gpu": "", "prefill_gpu": dep.acc.key, "decode_gpu": dep.acc.key, "prefill_tp": c.tp,
            "decode_tp": c.tp}  # fmt: skip


def check_pool_gpus(pools: PoolSpace, prices: dict) -> None:
    """Every pool GPU has a price to weigh it by (--price-per-gpu-hour is --gpu's first's)."""
    given = (("--gpu", pools.gpus), ("--prefill-gpu", pools.prefill_gpus),
             ("--decode-gpu", pools.decode_gpus))  # fmt: skip
    for flag, key in ((flag, key) for flag, keys in given for key in keys):
        if prices.get(key) is None:
            raise GpuplanError(f"{flag} {key}: the price file has no price for it, and the plan "
                               "weighs each GPU type beside --gpu's first by it: give a GPU "
                               "type the price file prices")  # fmt: skip


def searched_rows(rows: list[dict], top: int) -> list[dict]:
    """The rows that meet the SLO and were searched to the end however the candidates were
    shared out: the ``top`` cheapest (``plan.PlanResult``'s order) and those cheaper than the
    ``top``-th (whose cap never cut their search: it stays at or above that cost)."""
    met = sorted((i for i, r in enumerate(rows) if r["meets"]),
                 key=lambda i: (rows[i]["usd_per_m_output_tokens"], rows[i]["gpus"]))  # fmt: skip
    best = set(met[:top])
    bar = rows[met[top - 1]]["usd_per_m_output_tokens"] if len(met) >= top else math.inf
    return [rows[i] for i in met if i in best or rows[i]["usd_per_m_output_tokens"] < bar]


def frontier(rows: list[dict], *, rate_per_s: float, mean_output_tokens: float,
             percentile: float) -> list[dict]:  # fmt: skip
    """The Pareto set of the rows that meet the SLO on (tokens/s per GPU, tokens/s per user),
    per GPU descending; ties on both: the cheaper, then the first in ``rows``."""
    tpot_key = f"tpot_p{percentile:g}_s"
    points = []
    for r in rows:
        tpot = r[tpot_key]
        if not r["meets"] or not (tpot > 0 and math.isfinite(tpot)):
            continue  # a miss, or no decode to time (one output token)
        points.append({**r, "tokens_per_s_per_gpu": rate_per_s * mean_output_tokens / r["gpus"],
                       "tokens_per_s_per_user": 1.0 / tpot})  # fmt: skip
    points.sort(key=lambda p: (-p["tokens_per_s_per_gpu"], -p["tokens_per_s_per_user"]))
    out, best = [], -math.inf
    for p in points:  # per GPU descending: kept when faster per user than every one before
        if p["tokens_per_s_per_user"] > best:
            out.append(p)
            best = p["tokens_per_s_per_user"]
    return out
