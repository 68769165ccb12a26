"""A training strategy: how a model's work and state are split over GPUs, and the rules it obeys.

Degrees and their groups (Megatron-LM's conventions: Shoeybi et al. 2019; Narayanan et al. 2021;
Korthikanti et al. 2022; Megatron-Core's context and expert parallelism):

- ``tp`` tensor parallelism (column/row split of every block); ``sp`` Megatron sequence
  parallelism inside the same group; ``cp`` context parallelism (ring attention over sequence
  chunks); ``pp`` pipeline stages, with ``virtual_stages`` model chunks per GPU under the
  interleaved schedule; ``dp`` data-parallel replicas.
- The world is ``tp * cp * pp * dp``. Expert parallelism ``ep`` is carved out of the
  data-parallel group (Megatron-Core, DeepSpeed-MoE): each of ``ep`` replicas holds
  ``n_experts / ep`` experts, so ``ep`` divides ``dp`` and does not multiply the world.
- ``zero`` shards over the ``dp * cp`` gradient-reduction group: 1 the optimizer state (Megatron's
  distributed optimizer), 2 also the gradients, 3 also the weights (ZeRO-3, which is what FSDP's
  full sharding does: Rajbhandari et al. 2020; Zhao et al. 2023).
- ``global_batch`` sequences per step, ``micro_batch`` sequences per micro-batch; each replica
  runs ``global_batch / (micro_batch * dp)`` micro-batches (gradient accumulation).
- ``pp_layers`` the blocks of each pipeline stage, first to last, when they are not
  ``n_layers / pp`` each: Megatron-Core's ``num_layers_in_first_pipeline_stage`` /
  ``num_layers_in_last_pipeline_stage`` and its pipeline layouts (megatron/core/transformer/
  transformer_config.py) run such splits. ``auto_pp_layers`` is the rule that counts the
  embedding and the loss as one block each (Megatron-Core's
  ``account_for_embedding_in_pipeline_split`` and ``account_for_loss_in_pipeline_split``): the
  first and last stages hold one block fewer, as Llama 3 405B was trained, 126 layers on 16
  stages as 7, 8 x 14, 7 (Dubey et al. 2024, "The Llama 3 Herd of Models", arXiv:2407.21783,
  sec. 3.3.2, "we reduce one Transformer layer each from the first and the last stages").
  ``first_last_pp_layers`` gives the first and last stages a count each and splits the rest.

Overlap options, each a named assumption the estimate applies (``sim.parallel.estimate``):
``overlap_dp`` data-parallel communication (gradient reduction, ZeRO parameter gathers) runs in
buckets behind the backward; ``overlap_tp`` tensor-parallel collectives hide behind the GEMMs
next to them (comm-GEMM overlap, as TransformerEngine's userbuffers do); ``overlap_pp``
point-to-point sends run behind compute (Megatron-Core's overlapped interleaved schedule).
``overlap_ep`` each MoE block's all-to-all dispatch and combine run behind the computation of
another micro-batch, as DeepSeek-V3's DualPipe schedule overlaps them (Liu et al. 2024,
"DeepSeek-V3 Technical Report", arXiv:2412.19437, sec. 3.2.1: forward and backward chunks of two
micro-batches paired so that all-to-all and PP communication hide behind computation; Megatron-
Core's ``--overlap-moe-expert-parallel-comm`` does the same for 1F1B).
``fused_grad_accumulation`` the weight-gradient GEMMs add into the main-gradient buffer (Megatron's
gradient-accumulation fusion); when off, every micro-batch's gradients are added by a separate
bandwidth-bound kernel, as Megatron-LM did before that fusion (2021).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuplan.errors import (
    GpuplanError,
    check_choice,
    check_number,
    check_positive,
    check_switch,
    check_whole,
    shown,
)
from gpuplan.limits import MAX_DIM
from gpuplan.sim.estimate.inputs import check_gpus, check_seq
from gpuplan.sim.parallel.degrees import divisors, nearest, valid_pp, valid_tp, valid_virtual_stages
from gpuplan.sim.parallel.fp8 import PRECISION_CODES
from gpuplan.workloads.memory import PRECISION_BYTES, RECOMPUTE
from gpuplan.workloads.model import ModelConfig

SCHEDULES = ("gpipe", "1f1b", "interleaved")
PRECISIONS = PRECISION_CODES  # the dtype the GEMMs run in (sim.parallel.fp8: the recipes)
ATTENTION_IMPLS = (
    "flash",
    "unfused",
)  # fused kernel, or QK^T, softmax, dropout, PV (Megatron 2021)
ZERO_STAGES = (0, 1, 2, 3)


@dataclass(frozen=True, slots=True, kw_only=True)
class Strategy:
    """One way to train: degrees, batch split, schedule, recomputation, precision, overlaps."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    cp: int = 1
    ep: int = 1
    sp: bool = False
    zero: int = 0  # 0 none, 1 optimizer, 2 + gradients, 3 + weights (FSDP)
    micro_batch: int = 1
    global_batch: int = 1
    schedule: str = "1f1b"
    virtual_stages: int = 1
    recompute: str = "none"
    precision: str = "bf16"
    state_precision: str = "bf16-mixed-megatron"  # bytes per parameter of weights/grads/Adam
    attention: str = "flash"
    overlap_dp: bool = True
    overlap_tp: bool = False
    overlap_pp: bool = False
    overlap_ep: bool = False  # MoE all-to-all behind another micro-batch's compute (DualPipe)
    fused_grad_accumulation: bool = True  # wgrad GEMMs accumulate into the main gradients
    capacity_factor: float | None = None  # None: dropless MoE; else tokens padded to capacity
    expert_imbalance: float = 1.0  # busiest expert's load over the mean (dropless MoE)
    pp_layers: tuple[int, ...] | None = None  # blocks per stage, first to last; None: even

    def __post_init__(self) -> None:
        for field in ("tp", "pp", "dp", "cp", "ep", "virtual_stages"):
            check_gpus(getattr(self, field), field)
        for field in ("micro_batch", "global_batch"):
            check_whole(field, getattr(self, field), high=MAX_DIM)
        check_choice("schedule", self.schedule, SCHEDULES)
        check_choice("recompute", self.recompute, RECOMPUTE)
        check_choice("precision", self.precision, PRECISIONS)
        check_choice("state_precision", self.state_precision, PRECISION_BYTES)
        check_choice("attention", self.attention, ATTENTION_IMPLS)
        for field in ("sp", "overlap_dp", "overlap_tp", "overlap_pp", "overlap_ep",
                      "fused_grad_accumulation"):  # fmt: skip
            check_switch(field, getattr(self, field))
        if self.zero not in ZERO_STAGES:
            raise GpuplanError(
                f"zero={shown(self.zero)} is invalid: choose one of 0, 1, 2, 3 (3 = FSDP)"
            )
        if self.capacity_factor is not None:
            check_positive("capacity_factor", self.capacity_factor)
            if self.capacity_factor < 1.0:  # the MFU would count the dropped tokens' FLOPs
                raise GpuplanError(
                    f"capacity_factor={self.capacity_factor!r} is invalid: below 1.0 an expert "
                    "drops tokens even at a perfectly even load, which gpuplan does not price; "
                    "give 1.0 or more (Switch Transformer trains at 1.0-2.0, Fedus et al. 2021, "
                    "Table 1), or leave it unset for dropless MoE"
                )
        check_number("expert_imbalance", self.expert_imbalance)
        if self.expert_imbalance < 1.0:
            raise GpuplanError(
                f"expert_imbalance={self.expert_imbalance!r} is invalid: it is the busiest "
                "expert's load over the mean, 1.0 or more"
            )
        if self.pp_layers is not None:
            object.__setattr__(self, "pp_layers", _check_pp_layers(self.pp_layers, self.pp))

    @property
    def world(self) -> int:
        """GPUs the strategy occupies."""
        return self.tp * self.cp * self.pp * self.dp

    @property
    def micro_batches(self) -> int:
        """Micro-batches each replica runs per step (gradient-accumulation steps)."""
        return self.global_batch // (self.micro_batch * self.dp)

    @property
    def chunks(self) -> int:
        """Model chunks per GPU: ``virtual_stages`` under the interleaved schedule, else 1."""
        return self.virtual_stages if self.schedule == "interleaved" else 1

    @property
    def label(self) -> str:
        """A short human name: tp8 pp4 dp32 mb2 1f1b full z1 ..."""
        parts = [f"tp{self.tp}", f"pp{self.pp}", f"dp{self.dp}"]
        parts += [f"cp{self.cp}"] * (self.cp > 1) + [f"ep{self.ep}"] * (self.ep > 1)
        parts += ["sp"] * self.sp + [f"mb{self.micro_batch}"]
        sched = f"interleaved(v={self.virtual_stages})" if self.chunks > 1 else self.schedule
        if self.pp_layers is not None:
            parts.append("layers:" + ",".join(str(n) for n in self.pp_layers))
        parts += [sched, f"rc:{self.recompute}", f"zero{self.zero}", self.precision]
        return " ".join(parts)


def _check_pp_layers(value, pp: int) -> tuple[int, ...]:
    """``value`` as a tuple of positive whole numbers, one per pipeline stage."""
    if not isinstance(value, tuple | list):
        raise GpuplanError(f"pp_layers={shown(value)} is invalid: give a tuple of blocks per "
                           "stage, e.g. (10, 12, 12, 10)")  # fmt: skip
    layers = tuple(value)
    text = ",".join(str(n) for n in layers)
    if any(not isinstance(n, int) or isinstance(n, bool) or n < 1 for n in layers):
        raise GpuplanError(
            f"pp_layers={text} is invalid: every stage needs a whole number of blocks, 1 or more"
        )
    if len(layers) != pp:
        raise GpuplanError(
            f"pp_layers={text} has {len(layers)} stages but pp={pp}: give one block count per "
            "pipeline stage"
        )
    return layers


def stage_layer_counts(strategy: Strategy, n_layers: int) -> tuple[int, ...]:
    """Blocks on each pipeline stage, first to last: ``pp_layers`` or the even split."""
    if strategy.pp_layers is not None:
        return strategy.pp_layers
    return (n_layers // strategy.pp,) * strategy.pp


def auto_pp_layers(n_layers: int, pp: int) -> tuple[int, ...]:
    """The embedding and the loss each count as a block (Megatron-Core's
    ``account_for_embedding/loss_in_pipeline_split``; Llama 3's rule): n_layers + 2 slots split
    as evenly as they go, and the first and last stages give their end one slot. A remainder
    goes to the last middle stages (they keep the fewest micro-batches in flight under 1F1B),
    then to the last stage."""
    check_positive("pp", pp)
    if pp == 1:
        return (n_layers,)
    base, extra = divmod(n_layers + 2, pp)
    middles = pp - 2
    to_middles = min(extra, middles)
    mid = [base] * (middles - to_middles) + [base + 1] * to_middles
    last = base + (extra - to_middles)
    layers = (base - 1, *mid, last - 1)
    if min(layers) < 1:
        raise GpuplanError(
            f"pp_layers=auto cannot split n_layers={n_layers} over pp={pp} stages: an end "
            f"stage would hold no block; use pp <= {(n_layers + 2) // 2} or list the blocks "
            "of each stage"
        )
    return layers


def first_last_pp_layers(n_layers: int, pp: int, first: int, last: int) -> tuple[int, ...]:
    """``first`` blocks on the first stage, ``last`` on the last, the rest split evenly over the
    middle stages (Megatron-Core's num_layers_in_first/last_pipeline_stage)."""
    check_positive("pp", pp)
    middles = pp - 2

    def fits(f: int, lst: int) -> bool:
        rest = n_layers - f - lst
        return f >= 1 and lst >= 1 and (rest == 0 if middles == 0 else rest >= middles
                                         and rest % middles == 0)  # fmt: skip

    if pp < 2 or not fits(first, last):
        valid = [lst for lst in range(1, n_layers) if pp >= 2 and fits(first, lst)]
        hint = (
            f"with first={first}, valid last: {nearest(last, valid)}"
            if valid
            else "choose first and last so the middle stages split the rest evenly"
        )
        raise GpuplanError(
            f"pp_first_last={first},{last} is invalid for n_layers={n_layers} on pp={pp}: the "
            f"{max(middles, 0)} middle stages must hold the other {n_layers - first - last} "
            f"blocks evenly, 1 or more each (pp >= 2); {hint}"
        )
    rest = n_layers - first - last
    return (first, *([rest // middles] * middles if middles else []), last)


def validate(strategy: Strategy, cfg: ModelConfig, n_gpus: int, seq: int) -> None:
    """Raise a GpuplanError naming the first rule ``strategy`` breaks, with the valid values."""
    s = strategy
    if cfg.is_vision:
        raise GpuplanError(
            f"{cfg.name} is a vision encoder: training estimates cover text decoders (a "
            "vocabulary, an LM head and a loss); choose a decoder model"
        )
    check_gpus(n_gpus)
    check_seq(cfg, seq)
    _check_degrees(s, cfg, n_gpus, seq)
    _check_world(s, n_gpus)
    _check_batch(s)
    _check_schedule(s, cfg)
    _check_experts(s, cfg)


def _check_degrees(s: Strategy, cfg: ModelConfig, n_gpus: int, seq: int) -> None:
    tps = valid_tp(cfg, cfg.n_heads)
    if s.tp not in tps:
        why = _tp_reason(s.tp, cfg)
        raise GpuplanError(f"tp={s.tp} {why}; valid tp: {nearest(s.tp, tps)}")
    check_stages(s, cfg)
    if seq % s.cp:
        cps = [c for c in divisors(seq) if c <= n_gpus]
        raise GpuplanError(f"cp={s.cp} does not divide seq={seq}; valid cp: {nearest(s.cp, cps)}")
    if s.cp > 1 and s.attention != "flash":
        raise GpuplanError(
            f"cp={s.cp} needs attention='flash' (ring attention runs a fused kernel per chunk); "
            f"got attention={s.attention!r}"
        )


def check_stages(s: Strategy, cfg: ModelConfig) -> None:
    """``s``'s pipeline split checked against ``cfg``: one rule for training and serving."""
    if s.pp > cfg.n_layers:
        raise GpuplanError(
            f"pp={s.pp} is more pipeline stages than n_layers={cfg.n_layers} blocks; valid pp: "
            f"1 to {cfg.n_layers}"
        )
    if s.pp_layers is None:
        if cfg.n_layers % s.pp:
            pps = valid_pp(cfg, cfg.n_layers)
            raise GpuplanError(
                f"pp={s.pp} does not divide n_layers={cfg.n_layers}; valid pp: "
                f"{nearest(s.pp, pps)}, or give each stage's blocks with --pp-layers "
                f"(e.g. --pp-layers auto: {','.join(map(str, _auto_or_none(cfg, s.pp)))})"
            )
        return
    total = sum(s.pp_layers)
    if total != cfg.n_layers:
        text = ",".join(str(n) for n in s.pp_layers)
        raise GpuplanError(
            f"pp_layers={text} sums to {total} blocks but {cfg.name} has n_layers="
            f"{cfg.n_layers}: the {s.pp} stage counts must add up to {cfg.n_layers}"
        )


def _auto_or_none(cfg: ModelConfig, pp: int) -> tuple[int, ...]:
    try:
        return auto_pp_layers(cfg.n_layers, pp)
    except GpuplanError:
        return ()


def _tp_reason(tp: int, cfg: ModelConfig) -> str:
    if cfg.n_heads % tp:
        return f"does not divide n_heads={cfg.n_heads}"
    if cfg.d_ff % tp:
        return f"does not divide d_ff={cfg.d_ff}"
    if cfg.is_moe and cfg.d_ff_expert % tp:
        return f"does not divide d_ff_expert={cfg.d_ff_expert}"
    if cfg.n_kv_heads % tp and tp % cfg.n_kv_heads:
        return f"neither divides nor is a multiple of n_kv_heads={cfg.n_kv_heads}"
    return "is not a valid tensor-parallel degree"


def _check_world(s: Strategy, n_gpus: int) -> None:
    if s.world != n_gpus:
        inner = s.tp * s.cp * s.pp
        hint = (
            f"dp={n_gpus // inner} would fill them"
            if n_gpus % inner == 0
            else f"tp*cp*pp={inner} does not divide {n_gpus}"
        )
        raise GpuplanError(
            f"tp*cp*pp*dp = {s.tp}*{s.cp}*{s.pp}*{s.dp} = {s.world} is not the world size "
            f"gpus={n_gpus}; {hint}"
        )


def _check_batch(s: Strategy) -> None:
    per_replica = s.micro_batch * s.dp
    if s.global_batch % per_replica:
        mbs = [
            m for m in divisors(max(1, s.global_batch // s.dp)) if s.global_batch % (m * s.dp) == 0
        ]
        hint = (
            f"valid micro_batch: {nearest(s.micro_batch, mbs)}"
            if s.global_batch % s.dp == 0
            else f"global_batch must be a multiple of dp={s.dp}"
        )
        raise GpuplanError(
            f"global_batch={s.global_batch} is not a multiple of micro_batch*dp = "
            f"{s.micro_batch}*{s.dp} = {per_replica}; {hint}"
        )


def _check_schedule(s: Strategy, cfg: ModelConfig) -> None:
    if s.schedule != "interleaved":
        if s.virtual_stages != 1:
            raise GpuplanError(
                f"virtual_stages={s.virtual_stages} needs schedule='interleaved' "
                f"(got schedule={s.schedule!r})"
            )
        return
    if s.pp == 1:
        raise GpuplanError("schedule='interleaved' needs pp > 1; use '1f1b' with pp=1")
    counts = stage_layer_counts(s, cfg.n_layers)
    vs = valid_virtual_stages(counts)
    if s.virtual_stages not in vs:
        where = (
            f"the {counts[0]} layers of a stage (n_layers={cfg.n_layers}, pp={s.pp})"
            if s.pp_layers is None
            else f"every stage's blocks (pp_layers={','.join(map(str, counts))})"
        )
        raise GpuplanError(
            f"virtual_stages={s.virtual_stages} does not divide {where}; valid virtual_stages: "
            f"{nearest(s.virtual_stages, vs) if vs else 'none (use 1f1b)'}"
        )
    if s.micro_batches % s.pp:
        raise GpuplanError(
            f"the interleaved schedule needs the micro-batches per replica "
            f"({s.micro_batches} = global_batch/(micro_batch*dp)) to be a multiple of pp={s.pp}"
        )


def _check_experts(s: Strategy, cfg: ModelConfig) -> None:
    if s.ep == 1:
        return
    if not cfg.is_moe:
        raise GpuplanError(f"ep={s.ep} needs a mixture-of-experts model; {cfg.name} is dense")
    eps = [e for e in divisors(cfg.n_experts) if s.dp % e == 0]
    if cfg.n_experts % s.ep or s.dp % s.ep:
        raise GpuplanError(
            f"ep={s.ep} must divide n_experts={cfg.n_experts} and dp={s.dp}; "
            f"valid ep: {nearest(s.ep, eps)}"
        )


def default_seq(cfg) -> int:
    """The sequence length a training run takes when none is given: the model's own, at most
    8,192 tokens."""
    return min(cfg.max_seq_len, 8192)
