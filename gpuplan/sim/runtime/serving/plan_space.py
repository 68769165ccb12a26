"""The capacity plan's search space and its candidates: the SLO, the space (TP, formats,
``max_seqs``, colocated or disaggregated units, speculation), and every candidate of it whose
model fits in memory, with pipelines of nodes for a format no node's TP holds."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from gpuplan.errors import GpuplanError, check_positive
from gpuplan.hwmodels.formats import has_format
from gpuplan.sim.runtime.serving.deployment import (
    CHUNKED_BATCHED_TOKENS,
    MAX_TP,
    Deployment,
    SchedulerConfig,
)
from gpuplan.sim.runtime.serving.kv_cache import kv_capacity
from gpuplan.sim.runtime.serving.on_stack import deployment_fields
from gpuplan.workloads.presets import get_model

FORMATS = (("bf16", "bf16"), ("fp8", "fp8"), ("int8", "bf16"), ("int4", "bf16"))
# where the device has NVFP4 tensor cores (hwmodels.formats) the plan also tries W4A4 weights
BLOCK_FORMATS = (("nvfp4", "fp8"),)
RATIOS = ((1, 1), (1, 2), (1, 3))


@dataclass(frozen=True, slots=True, kw_only=True)
class Slo:
    """Latency targets at a percentile; either may be left out (inf: no target)."""

    ttft_s: float = math.inf
    tpot_s: float = math.inf
    percentile: float = 99.0

    def __post_init__(self) -> None:
        check_positive("slo_ttft_s", self.ttft_s, allow_inf=True)
        check_positive("slo_tpot_s", self.tpot_s, allow_inf=True)
        if math.isinf(self.ttft_s) and math.isinf(self.tpot_s):
            raise GpuplanError("give a TTFT target, a TPOT target or both (--slo-ttft-s, "
                               "--slo-tpot-s)")  # fmt: skip
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
    ep: int = 1  # a wide-EP group's GPUs (``dp_attention``; ``wide_ep_candidates``)
    dp_attention: bool = False

    @property
    def unit_replicas(self) -> int:
        """Replicas of a unit: a disaggregated unit's, a wide-EP group's attention ranks, or 1."""
        if self.dp_attention:
            return self.ep // self.tp
        return self.prefill + self.decode if self.prefill else 1

    @property
    def unit_gpus(self) -> int:
        return self.ep if self.dp_attention else self.tp * self.pp * self.unit_replicas

    @property
    def unit_cost_gpus(self) -> float:
        """The unit's GPUs at the plan's price (``plan_disagg.PoolCandidate``: each pool at its
        own GPU's)."""
        return self.unit_gpus

    @property
    def layout(self) -> str:
        if self.dp_attention:
            return f"dp-attention ep={self.ep}"
        return f"disaggregated {self.prefill}P:{self.decode}D" if self.prefill else "colocated"


def candidates(cfg, acc, eff, space: SearchSpace) -> list[tuple[Candidate, Deployment]]:
    """Every candidate of the space whose model fits (with its deployment)."""
    tps = space.tps or tuple(t for t in range(1, MAX_TP + 1) if cfg.n_heads % t == 0)
    out = []
    if space.formats == FORMATS and has_format(acc, "nvfp4"):
        space = replace(space, formats=FORMATS + BLOCK_FORMATS)
    for tp in tps:
        for weight, kv in space.formats:
            dep = _deployment(cfg, acc, eff, space, tp=tp, weight_dtype=weight, kv_dtype=kv)
            spec = speculator_for(space, dep)
            for seqs in space.max_seqs:
                base = Candidate(tp=tp, weight_dtype=weight, kv_dtype=kv, max_seqs=seqs,
                                 policy=space.policy)  # fmt: skip
                if not _fits(dep, sched_of(base)):
                    continue
                out.append((base, dep))
                out += [(replace(base, prefill=p, decode=d), dep) for p, d in space.ratios]
                if spec is not None and _fits(dep, sched_of(base), spec):
                    out.append((replace(base, speculative=True), dep))
    # a format no node's TP holds gets pipelines of nodes (``_pipeline_candidates``)
    held = {(c.weight_dtype, c.kv_dtype) for c, _ in out}
    rest = tuple(f for f in space.formats if f not in held)
    out += _pipeline_candidates(cfg, acc, eff, replace(space, formats=rest)) if rest else []
    return out + list(wide_ep_candidates(cfg, acc, eff, space))


# wide-EP groups the plan tries: whole nodes of 8 up to 8 nodes (DeepSeek's prefill EP32 and the
# LMSYS 96-GPU deployment's EP32 prefill / EP72 decode lie in this range; wider is --max-gpus's)
WIDE_EP_GPUS = (8, 16, 32, 64)


def wide_ep_candidates(cfg, acc, eff, space: SearchSpace):
    """A MoE model's wide-EP groups (``wide_ep``): attention data-parallel at tp=1 over ``ep``
    GPUs of ``WIDE_EP_GPUS`` within ``max_gpus`` that divide the experts, in each format and
    per-rank ``max_seqs`` of the space whose weights and one request fit."""
    if not cfg.is_moe:
        return
    for ep in WIDE_EP_GPUS:
        if ep > space.max_gpus or cfg.n_experts % ep:
            continue
        for weight, kv in space.formats:
            dep = _deployment(cfg, acc, eff, space, tp=1, ep=ep, dp_attention=True,
                              weight_dtype=weight, kv_dtype=kv)  # fmt: skip
            for seqs in space.max_seqs:
                c = Candidate(tp=1, ep=ep, dp_attention=True, weight_dtype=weight, kv_dtype=kv,
                              max_seqs=seqs, policy=space.policy)  # fmt: skip
                if _fits(dep, sched_of(c)):
                    yield c, dep


def _deployment(cfg, acc, eff, space: SearchSpace, **fields) -> Deployment:
    """A candidate's deployment: ``fields`` (tp, formats, pipeline) over the space's stack's."""
    stack = {} if space.stack is None else deployment_fields(space.stack, tp=fields["tp"],
                                                             gpu=acc.key)  # fmt: skip
    return Deployment(model=cfg, acc=acc, eff=eff, **fields, **stack)


def sched_of(c: Candidate) -> SchedulerConfig:
    """The scheduler of a candidate's replica (a wide-EP group: its ranks' limits together)."""
    n = c.ep // c.tp if c.dp_attention else 1
    chunked = n > 1 and c.policy == "chunked"  # each rank its own chunk budget
    budget = {"max_batched_tokens": CHUNKED_BATCHED_TOKENS * n} if chunked else {}
    return SchedulerConfig(policy=c.policy, max_seqs=c.max_seqs * n, **budget)


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
    from gpuplan.sim.runtime.serving.speculative import Speculator

    spec, draft_name = space.speculation
    draft = None if draft_name is None else replace(dep, model=get_model(draft_name))
    return Speculator(spec, dep, draft=draft)


def _pipeline_candidates(cfg, acc, eff, space: SearchSpace) -> list[tuple[Candidate, Deployment]]:
    """For formats in which no node's TP holds the model: colocated replicas of ``pp`` stages of
    the widest TP of the space, for the shallowest pipeline that holds it and the next deeper
    one (more KV blocks per stage), split evenly or by ``strategy.auto_pp_layers``."""
    from gpuplan.sim.runtime.serving.pipeline import MAX_PP_ADVICE, even_or_auto_split

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
                if _fits(dep, sched_of(c)):
                    out.append((c, dep))
        depths += len(out) > found or depths > 0
    return out
