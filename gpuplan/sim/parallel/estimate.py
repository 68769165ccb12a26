"""The multi-GPU training estimate of one strategy: a step-time breakdown, memory per GPU, MFU, HFU.

``estimate_training`` validates the strategy, prices the kernels of one micro-batch on one GPU
with the one-GPU models (``compute``), evaluates the closed forms of communication, pipeline bubble
and memory (``evaluate``), and itemizes the step as a ``Breakdown`` whose items sum to the step
time (``step_items``): compute by kernel class (slowest stage, all micro-batches), recomputation,
exposed TP/SP, CP, EP, PP, ZeRO and DP communication, the bubble and the optimizer. MFU counts the
model's FLOPs (``workloads.operators.training_flops``: 6N plus attention, no recomputation); HFU
the FLOPs the kernels execute (recomputation and the flash backward's extra product included),
both against the dense peak of the GEMM precision.
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from gpuplan.errors import expects
from gpuplan.hwmodels.efficiency import efficiency_for, queued
from gpuplan.sim.estimate.breakdown import Breakdown
from gpuplan.sim.parallel.compute import CostCache
from gpuplan.sim.parallel.evaluate import evaluate
from gpuplan.sim.parallel.fp8 import PRECISION_CODES, RATE_DTYPE, check_precision
from gpuplan.sim.parallel.kernel_costs import MicroBatchCosts
from gpuplan.sim.parallel.kernel_lists import CORE
from gpuplan.sim.parallel.memory import RECOMPUTE_CODES, SCHEDULE_CODES
from gpuplan.sim.parallel.model_facts import autocast_stream_facts, model_facts
from gpuplan.sim.parallel.shape import Shape, stack_shape_fields
from gpuplan.sim.parallel.stage import (
    SAC_GEMM_FRACTION,
    StageKinds,
    shape_times,
    stage_kinds,
)
from gpuplan.sim.parallel.step_items import check_total, step_items
from gpuplan.sim.parallel.step_time import BF16_OPTIMIZER
from gpuplan.sim.parallel.strategy import Strategy, stage_layer_counts, validate
from gpuplan.sim.parallel.topology import Cluster
from gpuplan.sim.stacks import get_stack, stack_efficiency
from gpuplan.sim.stacks.training import check_layout, pipeline_unsharded, runtime_of
from gpuplan.sim.stacks.training_defaults import FIELDS, fill_defaults
from gpuplan.workloads.model import ModelConfig
from gpuplan.workloads.operators import training_flops


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainEstimate:
    """One strategy's predicted step: time breakdown, memory per GPU and utilizations."""

    model: str
    cluster: str
    gpus: int
    seq: int
    strategy: Strategy
    breakdown: Breakdown
    model_flops_per_step: float
    hardware_flops_per_step: float
    peak_flops_per_s: float  # per GPU, dense, in the GEMM precision
    device_memory_bytes: float
    efficiency_source: str
    notes: tuple[str, ...] = field(default_factory=tuple)
    stack: str = "megatron-te"  # the stack it priced (sim.stacks)

    @property
    def step_time_s(self) -> float:
        return self.breakdown.total_s

    @property
    def tokens_per_s(self) -> float:
        return self.strategy.global_batch * self.seq / self.step_time_s

    @property
    def mfu(self) -> float:
        return self.model_flops_per_step / (self.step_time_s * self.gpus * self.peak_flops_per_s)

    @property
    def hfu(self) -> float:
        return self.hardware_flops_per_step / (self.step_time_s * self.gpus * self.peak_flops_per_s)

    @property
    def peak_memory_per_gpu_bytes(self) -> float:
        return float(self.breakdown.peak_bytes or 0.0)

    @property
    def fits(self) -> bool:
        return self.peak_memory_per_gpu_bytes <= self.device_memory_bytes

    def to_dict(self) -> dict[str, Any]:
        """Plain numbers (SI) for JSON: the headline figures, memory terms and the breakdown."""
        return {
            "model": self.model,
            "cluster": self.cluster,
            "gpus": self.gpus,
            "seq": self.seq,
            "strategy": asdict(self.strategy) | {"label": self.strategy.label},
            "overlaps": overlaps_in_force(self.strategy),
            "step_time_s": self.step_time_s,
            "tokens_per_s": self.tokens_per_s,
            "mfu": self.mfu,
            "hfu": self.hfu,
            "model_flops_per_step": self.model_flops_per_step,
            "hardware_flops_per_step": self.hardware_flops_per_step,
            "peak_memory_per_gpu_bytes": self.peak_memory_per_gpu_bytes,
            "device_memory_bytes": self.device_memory_bytes,
            "fits": self.fits,
            "memory_bytes": dict(self.breakdown.memory_bytes),
            "efficiency_source": self.efficiency_source,
            "stack": self.stack,
            "notes": list(self.notes),
            "by_category": self.breakdown.by("layer", "category").to_dict("records"),
            "breakdown": self.breakdown.frame().to_dict("records"),
        }


def overlaps_in_force(st) -> dict[str, bool]:
    """Which communication the estimate hides behind compute (``Strategy``'s overlap options;
    ``st`` a Strategy or a SearchSpace)."""
    return {"dp": st.overlap_dp, "tp": st.overlap_tp, "pp": st.overlap_pp, "ep": st.overlap_ep}


def strategy_arrays(st: Strategy, cfg: ModelConfig) -> dict[str, np.ndarray]:
    """The strategy as the 0-d arrays ``evaluate`` takes."""
    load = (st.capacity_factor or st.expert_imbalance) if cfg.is_moe else 1.0
    values = {
        "tp": st.tp,
        "pp": st.pp,
        "dp": st.dp,
        "cp": st.cp,
        "ep": st.ep,
        "sp": st.sp and st.tp > 1,
        "zero": st.zero,
        "mb": st.micro_batch,
        "m": st.micro_batches,
        "chunks": st.chunks,
        "sched": SCHEDULE_CODES[st.schedule],
        "rc": RECOMPUTE_CODES[st.recompute],
        "fp8": PRECISION_CODES.index(st.precision),  # the recipe's code (sim.parallel.fp8)
        "overlap_dp": st.overlap_dp,
        "overlap_tp": st.overlap_tp,
        "overlap_pp": st.overlap_pp,
        "overlap_ep": st.overlap_ep,
        "fused_accum": st.fused_grad_accumulation,
        "load": load,
    }
    return {k: np.asarray(v) for k, v in values.items()}


def strategy_kinds(st: Strategy, cfg: ModelConfig) -> StageKinds:
    """The kinds of pipeline stage ``st`` runs ``cfg`` on (even split or ``pp_layers``)."""
    return stage_kinds(model_facts(cfg).moe_flags, stage_layer_counts(st, cfg.n_layers))


def shape_of(st: Strategy, cfg: ModelConfig, seq: int, stack=None) -> Shape:
    """The per-GPU kernel shape of one micro-batch under ``st`` (on ``stack``: the fields it
    sets, ``shape.stack_shape_fields``)."""
    load = (st.capacity_factor or st.expert_imbalance) if cfg.is_moe else 1.0
    return Shape(
        micro_batch=st.micro_batch,
        seq=seq,
        tp=st.tp,
        cp=st.cp,
        sp=st.sp and st.tp > 1,
        ep=st.ep if cfg.is_moe else 1,
        load=load,
        precision=st.precision,
        attention=st.attention,
        **stack_shape_fields(stack, st.precision, cfg.is_moe),
    )


@functools.cache
def flops_per_sequence(cfg: ModelConfig, seq: int, hardware: bool) -> float:
    """Forward + backward FLOPs of one sequence (model or executed convention)."""
    return training_flops(cfg, batch=1, seq=seq, hardware=hardware)


@expects(cfg="ModelConfig", strategy="Strategy", cluster="Cluster", eff=("Efficiency", None),
         costs=("CostCache", None), stack=(str, "Stack", None))
def estimate_training(
    cfg: ModelConfig,
    strategy: Strategy,
    *,
    cluster: Cluster,
    seq: int,
    gpus: int | None = None,
    eff=None,
    costs: CostCache | None = None,
    stack=None,
) -> TrainEstimate:
    """Predicted training step of ``cfg`` under ``strategy`` on ``cluster``, as ``stack`` runs
    it (default ``megatron-te``): its attention kernel, elementwise kernels, host and optimizer
    implementation; its precision and overlap defaults are the strategy's (``stack_strategy``).
    Its kernels run as one busy stream (``hwmodels.efficiency.queued``)."""
    gpus = strategy.world if gpus is None else gpus
    validate(strategy, cfg, gpus, seq)
    acc = cluster.accelerator
    _check_precision(strategy, acc)
    stack = get_stack(stack or DEFAULT_TRAINING_STACK).for_model(cfg)
    check_layout(stack, strategy)
    runtime = runtime_of(stack)
    eff = training_efficiency(stack, eff or efficiency_for(acc.key), acc)
    costs = costs or CostCache(cfg, acc, eff, stack.elementwise)
    mbc = costs(shape_of(strategy, cfg, seq, stack))
    bd = _breakdown(cfg, strategy, mbc, cluster=cluster, acc=acc, eff=eff, seq=seq, stack=stack,
                    runtime=runtime)  # fmt: skip
    model_flops = flops_per_sequence(cfg, seq, False) * strategy.global_batch
    return TrainEstimate(
        model=cfg.name,
        cluster=cluster.key,
        gpus=gpus,
        seq=seq,
        strategy=strategy,
        breakdown=bd,
        model_flops_per_step=model_flops,
        hardware_flops_per_step=_hardware_flops(cfg, mbc, strategy, seq, runtime.selective),
        peak_flops_per_s=acc.peak(RATE_DTYPE[strategy.precision]),
        device_memory_bytes=acc.hbm_bytes,
        efficiency_source=eff.source,
        notes=bd.notes,
        stack=stack.name,
    )


def _check_precision(strategy: Strategy, acc) -> None:
    """Raise a GpuplanError where ``acc`` has no tensor-core rate in the GEMM precision."""
    check_precision(acc, strategy.precision)


def _breakdown(cfg: ModelConfig, strategy: Strategy, mbc: MicroBatchCosts, *, cluster: Cluster,
               acc, eff, seq: int, stack, runtime) -> Breakdown:  # fmt: skip
    """The step of ``strategy`` itemized (``step_items``), with the memory terms of the GPU
    that needs the most and the estimate's notes; its items add up to the closed form's step."""
    facts = autocast_stream_facts(model_facts(cfg), cfg, stack, strategy.precision)
    s = strategy_arrays(strategy, cfg)
    kinds = strategy_kinds(strategy, cfg)
    c, terms, mem = evaluate(
        facts,
        s,
        shape_times(mbc),
        kinds=kinds,
        cluster=cluster,
        acc=acc,
        eff=eff,
        seq=seq,
        state_precision=strategy.state_precision,
        attention=strategy.attention,
        optimizer=stack.optimizer,
        grads_persist=stack.grads_persist,
        runtime=runtime,
    )
    items = step_items(mbc, kinds, strategy, terms, runtime.selective)
    memory = {k: float(v) for k, v in mem.items()}
    notes = (f"stack: {stack.describe(acc)}", *_notes(strategy, eff),
             *_runtime_notes(runtime, strategy))  # fmt: skip
    bd = Breakdown(items=tuple(items), memory_bytes=memory, notes=notes)
    check_total(bd, terms)
    return bd


DEFAULT_TRAINING_STACK = "megatron-te"


def training_efficiency(stack, eff, acc):
    """The efficiency a training step on ``stack`` is priced with: the stack's kernels and host
    (``sim.stacks.stack_efficiency``), in a busy stream."""
    return stack_efficiency(stack, queued(eff), acc, phase="train")


STACK_OWN = ("state_precision", "overlap_dp", "overlap_tp", "overlap_pp")


def stack_strategy(strategy: Strategy, stack) -> Strategy:
    """``strategy`` with the stack's own state precision and the overlaps it performs on this
    layout, whatever ``strategy`` says of them (``sim.stacks.training_defaults.fill_defaults``)."""
    given = {f: getattr(strategy, f) for f in FIELDS} | dict.fromkeys(STACK_OWN)
    filled = fill_defaults(get_stack(stack), given, tp=strategy.tp, pp=strategy.pp,
                           virtual_stages=strategy.chunks)  # fmt: skip
    return replace(strategy, **filled.fields)


def _hardware_flops(cfg, mbc: MicroBatchCosts, st: Strategy, seq: int,
                    selective: str = "attention-core") -> float:  # fmt: skip
    """FLOPs the kernels execute per step, recomputation included."""
    base = flops_per_sequence(cfg, seq, True) * st.global_batch
    per_gpu_to_seq = st.tp * st.cp / st.micro_batch
    rec = 0.0
    for cost, count in ((mbc.dense, cfg.n_layers - cfg.n_moe_layers), (mbc.moe, cfg.n_moe_layers)):
        if cost is None or not count:
            continue
        if st.recompute == "full":
            rec += cost.flops("fwd") * count
        elif st.recompute == "selective" and selective == "op-sac":
            rec += sum(i.flops for i in cost.fwd if i.category == "gemm") * SAC_GEMM_FRACTION * count
        elif st.recompute == "selective":
            rec += sum(i.flops for i in cost.fwd if i.op.startswith(CORE)) * count
    return base + rec * per_gpu_to_seq * st.global_batch


def _runtime_notes(runtime, st: Strategy) -> tuple[str, ...]:
    """What the stack's runtime does to this layout beyond its defaults (stacks.training)."""
    out = []
    if st.state_precision in BF16_OPTIMIZER:
        out.append("DeepSpeed BF16_Optimizer: fp32 gradients accumulated after every micro-batch "
                   "and all-reduced whole")  # fmt: skip
    if bool(pipeline_unsharded(runtime, st.pp, st.zero)):
        out.append(f"zero={st.zero} under pp={st.pp}: blocks kept whole through the step, "
                   "gradients reduced once (torchtitan's FSDP under PP)")  # fmt: skip
    if runtime.launch_blocking:
        out.append("CUDA_LAUNCH_BLOCKING=1: the host's issue time is not hidden")
    return tuple(out)


def _notes(st: Strategy, eff) -> tuple[str, ...]:
    notes = [f"hardware efficiency: {eff.source}"]
    notes.append(
        "assumption overlap_dp: gradient reduction hides behind one micro-batch's backward"
        if st.overlap_dp
        else "assumption: data-parallel communication is not overlapped"
    )
    if st.overlap_tp:
        notes.append("assumption overlap_tp: TP collectives hide behind the block's GEMMs")
    if st.overlap_pp:
        notes.append("assumption overlap_pp: pipeline sends hide behind compute")
    if st.overlap_ep:
        notes.append("assumption overlap_ep: MoE all-to-all hides behind another micro-batch")
    if not st.fused_grad_accumulation:
        notes.append("gradients accumulate by a separate kernel every micro-batch (unfused)")
    if st.attention == "unfused":
        notes.append("attention: unfused QK^T/softmax/dropout/PV kernels (pre-flash Megatron)")
    return tuple(notes)
