"""A deployment as an engine's own launch command: ``vllm serve``, SGLang's ``launch_server`` or
``trtllm-serve``, with the engine version the flags were read from.

A deployment is one or more ``Pool``s (one colocated pool, or a prefill and a decode pool when
disaggregated), each a replica's parallelism, formats, scheduler limits and speculation, run
``replicas`` times. ``launch_commands`` turns it into one ``Launch`` per pool (and, for
TensorRT-LLM's disaggregation, one for its front end): the argv, the LLM-API YAML where the
engine takes one, and comment lines for every choice the engine's flags cannot express (never
dropped silently). The flags of each engine are in ``data/engine_flags.json``, copied from the
engine's sources at the commit named there; the per-engine mapping is ``launch_engines``.

Fields that other parts of the serving model may add to a plan's row (attention data
parallelism, expert parallelism over the deployment, redundant experts, two-batch overlap,
disaggregated pools of their own) are read by ``pools_from_row`` with defaults, one line each.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from gpuplan.errors import GpuplanError
from gpuplan.sim.runtime.serving.deployment import Deployment, SchedulerConfig
from gpuplan.sim.runtime.serving.kv_cache import kv_capacity
from gpuplan.sim.runtime.serving.launch_engines import BUILDERS, model_id, trtllm_frontend
from gpuplan.sim.runtime.serving.pipeline import NODE_GPUS
from gpuplan.workloads.model import ModelConfig

ENGINES = ("vllm", "sglang", "trt-llm")
_FLAGS = Path(__file__).parent / "data" / "engine_flags.json"


@functools.cache
def engine_flags() -> dict:
    """``data/engine_flags.json``: each engine's version, source, command and flags."""
    return json.loads(_FLAGS.read_text())


def engine_version(engine: str) -> str:
    return engine_flags()[check_engine(engine)]["version"]


def check_engine(engine: str) -> str:
    if engine not in ENGINES:
        raise GpuplanError(f"--emit {engine!r} is invalid: give one of {', '.join(ENGINES)}")
    return engine


@dataclass(frozen=True, slots=True, kw_only=True)
class Pool:
    """One kind of replica of a deployment, run ``replicas`` times, an engine instance each (with
    attention data parallelism an instance is the whole expert-parallel group of ``ep`` GPUs)."""

    role: str  # "colocated", "prefill" or "decode"
    gpu: str
    tp: int
    pp: int = 1
    pp_layers: tuple[int, ...] | None = None
    ep: int = 1  # GPUs the experts are sharded over
    replicas: int = 1
    weight_dtype: str = "bf16"
    kv_dtype: str = "bf16"
    sched: SchedulerConfig = field(default_factory=SchedulerConfig)
    model_len: int = 0  # the scheduler's max_model_len resolved against the model
    batched_tokens: int | None = None  # the scheduler's token budget an iteration
    cuda_graph: bool = True
    kv_free_share: float | None = None  # the KV cache's share of memory left after the weights
    speculation: tuple | None = None  # (speculative.Speculation, draft model name or None)
    dp_attention: bool = False
    redundant_experts: int = 0
    two_batch_overlap: bool = False
    expert_imbalance: float | None = None  # a modelling assumption: no engine flag sets it

    @property
    def instance_gpus(self) -> int:
        """GPUs of one engine instance: a replica, or with attention DP the whole EP group."""
        return max(self.ep, self.tp * self.pp) if self.dp_attention else self.tp * self.pp

    @property
    def attention_dp(self) -> int:
        """Attention data-parallel ranks of one instance (1 without attention DP)."""
        return self.instance_gpus // self.tp if self.dp_attention else 1


@dataclass(frozen=True, slots=True, kw_only=True)
class Launch:
    """One command: the engine, the version its flags were read from, the pool it starts."""

    engine: str
    version: str
    pool: str
    argv: list[str]
    yaml: str | None = None  # the LLM-API options file the argv names (TensorRT-LLM)
    comments: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        out = {"engine": self.engine, "version": self.version, "pool": self.pool,
               "argv": self.argv, "comments": self.comments}  # fmt: skip
        return out | ({"yaml": self.yaml} if self.yaml is not None else {})


def kv_free_share(dep: Deployment, sched: SchedulerConfig) -> float | None:
    """``sched.memory_utilization`` (weights and KV cache as a share of the device, vLLM's and
    SGLang's meaning) as the share of the memory left after the weights and workspace that the
    KV cache takes (TensorRT-LLM's ``free_gpu_memory_fraction``: "Free GPU memory fraction
    reserved for KV Cache, after allocating model weights and buffers", commands/serve.py);
    the inverse of ``on_stack.kv_memory_share``. None where nothing is left."""
    try:
        whole = kv_capacity(dep, dataclasses.replace(sched, memory_utilization=1.0))
    except GpuplanError:  # the replica as built here does not hold the model
        return None
    placed = whole.weights_bytes + whole.workspace_bytes
    if placed >= whole.hbm_bytes:
        return None
    return max(0.0, (sched.memory_utilization * whole.hbm_bytes - placed) / (whole.hbm_bytes - placed))


def pool_of(dep: Deployment, sched: SchedulerConfig, *, role: str, replicas: int,
            speculation=None, **wide) -> Pool:  # fmt: skip
    """The pool of ``replicas`` replicas of ``dep`` scheduled by ``sched``; ``wide``: the
    attention-DP and expert fields (``Pool``) where the deployment has them."""
    wide = {"ep": dep.ep} | wide
    return Pool(role=role, gpu=dep.acc.key, tp=dep.tp, pp=dep.pp,
                pp_layers=tuple(dep.pp_layers) if dep.pp > 1 else None, replicas=replicas, weight_dtype=dep.weight_dtype, kv_dtype=dep.kv_dtype,
                sched=sched, model_len=sched.model_len(dep.model),
                batched_tokens=sched.batched_tokens(dep.model), cuda_graph=dep.cuda_graph,
                kv_free_share=kv_free_share(dep, sched), speculation=speculation,
                **wide)  # fmt: skip


def row_replicas(row: dict) -> dict[str, int]:
    """A plan row's replicas by role: ``{"colocated": R}``, or ``{"prefill": P * units,
    "decode": D * units}`` for a disaggregated row (``plan_space.Candidate.layout``)."""
    found = re.fullmatch(r"disaggregated (\d+)P:(\d+)D", str(row.get("layout", "")))
    if not found:
        return {"colocated": int(row["replicas"])}
    units = int(row["units"])
    return {"prefill": int(found.group(1)) * units, "decode": int(found.group(2)) * units}


def row_wide(row: dict) -> dict:
    """The attention-DP and expert fields of a plan row (absent: off)."""
    return {
        "dp_attention": bool(row.get("dp_attention", False)),
        "redundant_experts": int(row.get("redundant_experts", 0) or 0),
        "two_batch_overlap": bool(row.get("two_batch_overlap", False)),
        "expert_imbalance": row.get("expert_imbalance"),
    }


def pool_rows(row: dict) -> list[dict]:
    """The row once per pool, each pool's own fields over the row's: a ``pools`` list where the
    row has one (``{role, gpu, tp, replicas, ...}`` each), else ``row_replicas``'s roles."""
    if row.get("pools"):
        return [row | {"role": "colocated"} | dict(p) for p in row["pools"]]
    return [row | {"role": role, "replicas": n} for role, n in row_replicas(row).items()]


def pools_from_row(row: dict, *, cfg: ModelConfig, gpu: str, space) -> list[Pool]:
    """The pools of a plan row (``plan_search._row``) as the plan simulated them: its
    candidate's deployment on the space's stack (``plan_space``) and scheduler (``sched_of``:
    the policy and ``max_seqs``, the rest at their defaults), its speculation if it used one;
    ``gpu`` where a pool names none."""
    speculation = space.speculation if row.get("speculative") else None
    return [_row_pool(r, cfg=cfg, gpu=r.get("gpu") or gpu, space=space, speculation=speculation)
            for r in pool_rows(row)]  # fmt: skip


def _row_pool(r: dict, *, cfg: ModelConfig, gpu: str, space, speculation) -> Pool:
    from gpuplan.hwmodels.accelerators import get_accelerator
    from gpuplan.sim.runtime.serving.deployment import serving_efficiency
    from gpuplan.sim.runtime.serving.on_stack import deployment_fields
    from gpuplan.sim.runtime.serving.pipeline import even_or_auto_split

    acc = get_accelerator(gpu)
    sched = SchedulerConfig(policy=r.get("policy", space.policy), max_seqs=int(r["max_seqs"]))
    tp, pp, ep, wide = int(r["tp"]), int(r.get("pp", 1)), int(r.get("ep", 1)), row_wide(r)
    stack = {} if space.stack is None else deployment_fields(space.stack, tp=tp, gpu=acc.key)
    # experts over attention-DP ranks (ep > tp) are the pool's; the replica is built with the
    # experts its own TP holds (``pipeline.check_ep``)
    dep = Deployment(model=cfg, acc=acc, eff=serving_efficiency(acc.key), tp=tp, pp=pp,
                     pp_layers=even_or_auto_split(cfg.n_layers, pp) if pp > 1 else None,
                     ep=1 if wide["dp_attention"] else ep, weight_dtype=r["weight_dtype"],
                     kv_dtype=r["kv_dtype"], **stack)  # fmt: skip
    return pool_of(dep, sched, role=r["role"], replicas=int(r["replicas"]),
                   speculation=speculation, **wide, ep=ep)  # fmt: skip


def launch_commands(engine: str, cfg: ModelConfig, pools: list[Pool], *, model_arg: str | None = None,
                    stack: str = "") -> list[Launch]:  # fmt: skip
    """The commands that start ``pools`` on ``engine`` (``launch_engines``), one per pool, and
    TensorRT-LLM's disaggregated front end where there are two pools."""
    check_engine(engine)
    model, notes = model_id(cfg, model_arg)
    if stack and _stack_engine(stack) != engine:
        notes = [*notes, f"priced as the {stack} stack, not {engine}'s own: {engine} may run "
                 "faster or slower (--stack " + engine + " prices it)"]
    version = engine_version(engine)
    disagg = len(pools) > 1
    out = []
    for i, pool in enumerate(pools):
        argv, yaml, comments = BUILDERS[engine](cfg, model, pool, disagg=disagg, index=i)
        out.append(Launch(engine=engine, version=version, pool=pool.role, argv=argv, yaml=yaml,
                          comments=[*notes, *_pool_notes(pool), *comments]))  # fmt: skip
    if disagg and engine == "trt-llm":
        argv, yaml = trtllm_frontend(pools)
        out.append(Launch(engine=engine, version=version, pool="frontend", argv=argv, yaml=yaml))
    return out


def _stack_engine(stack: str) -> str | None:
    """The engine a serving stack stands for (``sim.stacks``: vllm, sglang, trt-llm), or None
    (gpuplan-server, eager-2023)."""
    return stack if stack in ENGINES else None


def _pool_notes(pool: Pool) -> list[str]:
    """The comments every engine shares: the pool's size, its nodes, modelling assumptions."""
    gpus = pool.instance_gpus
    instances = pool.replicas
    notes = [f"{pool.role} pool: {instances} instance(s) of this command, {gpus} {pool.gpu} GPU(s) "
             f"each ({instances * gpus} in all); more than one: put a router in front"]  # fmt: skip
    if gpus > NODE_GPUS:
        notes.append(f"one instance spans {-(-gpus // NODE_GPUS)} nodes of {NODE_GPUS} GPUs: "
                     "start it on each node as the engine's multi-node guide says")  # fmt: skip
    if pool.expert_imbalance is not None:
        notes.append(f"expert_imbalance={pool.expert_imbalance:g} is a modelling assumption of "
                     "the load on the busiest expert rank: no engine flag sets it")  # fmt: skip
    if pool.sched.preemption == "swap":
        notes.append("preemption=swap: the engine preempts by recomputation")
    return notes
