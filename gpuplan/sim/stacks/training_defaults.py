"""What a training framework does with the parts of a layout its user leaves unset, as it ships.

A stack's runtime (``stacks.training.TrainingRuntime``) carries its framework's ``LayoutDefaults``:
the ZeRO stage, whether sequence parallelism comes with tensor parallelism, the recomputation,
whether pipeline sends overlap compute under the interleaved schedule; the stack itself
carries its mixed precision and its data-parallel and tensor-parallel overlaps. ``fill_defaults``
is the one function every caller fills a layout with (``gpuplan train``, ``search train``,
``diagnose``, the published runs of ``train --reproduce``, the one-GPU training step): what a
caller gives wins, what it leaves None is the framework's, and each default it applies comes
back as the flag that would set it, for the ``defaults in force`` line.

The frameworks' defaults, each cited where its preset is built below:

- ``megatron-te`` (Megatron-LM / NeMo): ZeRO-1, NeMo's distributed optimizer (every NeMo 2.0
  recipe's optimizer is ``distributed_fused_adam_with_cosine_annealing``, whose
  ``OptimizerConfig`` sets ``use_distributed_optimizer=True``: nemo/collections/llm/recipes/
  optim/adam.py; MLPerf's NeMo GPT-3 runs ``USE_DIST_OPTIMIZER:=True``, mlcommons
  training_results_v4.0 NVIDIA/benchmarks/gpt3/implementations/nemo/run_and_time.sh);
  sequence parallelism with TP (``sequence_parallelism: bool = True`` in the recipes' trainers,
  e.g. nemo/collections/llm/recipes/gpt3_175b.py and nemotron4_340b.py; Megatron-LM turns it
  off at tp=1, megatron/training/arguments.py "Disabling sequence parallelism because tensor
  model parallelism is disabled"); no recomputation (``--recompute-granularity`` unset);
  pipeline sends overlapped under the interleaved schedule (``--no-overlap-p2p-communication``
  is the opt-out, arguments.py; only ``forward_backward_pipelining_with_interleaving`` reads
  ``overlap_p2p_comm``, megatron/core/pipeline_parallel/schedules.py).
- ``fsdp2`` (torchtitan): ZeRO-3 (``data_parallel_shard_degree = -1``: every leftover rank
  shards, torchtitan/config/job_config.py), none on one rank (``fully_shard`` is applied only
  ``if parallel_dims.fsdp_enabled``, torchtitan/models/llama3/infra/parallelize.py); sequence parallelism whenever TP is on (its TP plan
  puts ``SequenceParallel()`` on every norm, torchtitan/models/llama3/infra/parallelize.py
  ``apply_tp``); selective recomputation (``ActivationCheckpoint.mode = "selective"``,
  job_config.py; gpuplan prices it as the op-level policy the llama3_8b.toml ships,
  ``selective_ac_option = "op"``); schedule ``pipeline_parallel_schedule = "1F1B"``.
- ``composer-fsdp`` (llm-foundry): ZeRO-3 (``sharding_strategy: FULL_SHARD``) and full
  recomputation (``activation_checkpointing: true``) as its pretraining yamls ship them
  (mosaicml/llm-foundry scripts/train/yamls/pretrain/mpt-3b.yaml to mpt-70b.yaml).
- ``deepspeed``: ZeRO 0 (``stage: ZeroStageEnum = 0``, deepspeed/runtime/zero/config.py); no
  sequence parallelism (Megatron-DeepSpeed's ``--sequence-parallel`` is opt-in); no
  recomputation (``--checkpoint-activations`` is opt-in).
- PyTorch DDP/FSDP (``PYTORCH_LAYOUT``, stacks without a training runtime): DDP, nothing sharded,
  nothing recomputed.

Every stack's GEMMs run in bf16 unless fp8 is asked for (NeMo's recipes default to
``bf16-mixed``; torchtitan's ``mixed_precision_param = "bfloat16"``; llm-foundry's ``precision:
amp_bf16``), one sequence per micro-batch (gpuplan's own default: Megatron-LM has none,
``assert args.micro_batch_size is not None``), and pipelines run 1F1B unless virtual stages are
given (Megatron-LM interleaves exactly when ``--num-layers-per-virtual-pipeline-stage`` is set).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuplan.errors import GpuplanError, check_choice, check_whole
from gpuplan.workloads.memory import RECOMPUTE

ZERO_STAGES = (0, 1, 2, 3)
# the strategy fields a caller may leave unset (None) for the stack to fill
FIELDS = ("zero", "sp", "schedule", "micro_batch", "recompute", "precision", "state_precision",
          "overlap_dp", "overlap_tp", "overlap_pp")  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class LayoutDefaults:
    """A framework's defaults for a training layout (module docstring), each with the word the
    framework uses for it (``why``), printed beside the default in ``defaults in force``."""

    framework: str
    zero: int = 0
    zero_why: str = "DDP: nothing sharded"
    zero_one_rank: int | None = None  # the stage with one data-parallel rank (None: ``zero``)
    sp_with_tp: bool = False  # sequence parallelism wherever tp > 1
    sp_why: str = "no sequence parallelism"
    recompute: str = "none"
    recompute_why: str = "nothing recomputed"
    overlap_pp_interleaved: bool = False  # pipeline sends behind compute, interleaved only
    # an MoE block's routed experts as one grouped GEMM per projection (``--expert-gemms
    # grouped``), else one GEMM per expert (``per-expert``): ``stack.EXPERT_GEMMS``
    grouped_experts: bool = False
    experts_why: str = "one GEMM per expert"

    def __post_init__(self) -> None:
        if self.zero not in ZERO_STAGES:
            raise GpuplanError(
                f"{self.framework}: zero={self.zero!r} is invalid: choose one of 0, 1, 2, 3"
            )
        check_choice(f"{self.framework}: recompute", self.recompute, RECOMPUTE)


PYTORCH_LAYOUT = LayoutDefaults(framework="PyTorch DDP/FSDP")

MEGATRON_LAYOUT = LayoutDefaults(
    framework="Megatron-LM / NeMo",
    # NeMo 2.0 recipes: OptimizerConfig(use_distributed_optimizer=True) (recipes/optim/adam.py)
    zero=1,
    zero_why="NeMo's distributed optimizer",
    # NeMo recipes' trainers: sequence_parallelism=True (recipes/gpt3_175b.py, nemotron4_340b.py)
    sp_with_tp=True,
    sp_why="NeMo recipes' sequence_parallel with TP",
    recompute_why="Megatron-LM's recompute_granularity unset",
    # NeMo's and Megatron-Bridge's MoE recipes set moe_grouped_gemm=True (NVIDIA-NeMo/Megatron-
    # Bridge src/megatron/bridge/recipes/qwen/h100/qwen3_moe.py, every Qwen3-MoE config; the
    # Mixtral, DeepSeek and Qwen3 model providers' ``moe_grouped_gemm: bool = True``) with
    # moe_token_dispatcher_type="alltoall": Megatron-Core's TEGroupedMLP (megatron/core/
    # transformer/moe/experts.py), two Transformer Engine GroupedLinear calls per pass (fc1,
    # fc2). Megatron-LM's own default (moe_grouped_gemm False) is SequentialMLP, a loop over
    # the local experts. GroupedLinear is one host call; on the device TE runs it as
    # nvte_multi_tensor_gemm: a CUTLASS grouped GEMM on Hopper under
    # NVTE_USE_CUTLASS_GROUPED_GEMM=1, else one cuBLAS GEMM per expert issued from C++ over 4
    # streams (transformer_engine/common/gemm/cublaslt_gemm.cu, multi_stream_cublas_gemm).
    # Priced as one grouped GEMM (``stack.EXPERT_GEMMS``): the host cost is one call either way
    grouped_experts=True,
    experts_why="NeMo recipes' moe_grouped_gemm",
    # Megatron-LM arguments.py: --no-overlap-p2p-communication is the opt-out; read by the
    # interleaved schedule only (core/pipeline_parallel/schedules.py)
    overlap_pp_interleaved=True,
)

FSDP2_LAYOUT = LayoutDefaults(
    framework="FSDP2 (torchtitan)",
    zero=3,  # job_config.py: data_parallel_shard_degree = -1, every leftover rank shards
    zero_why="torchtitan's fully_shard",
    # parallelize.py: fully_shard only ``if parallel_dims.fsdp_enabled`` (dp_shard or cp > 1)
    zero_one_rank=0,
    sp_with_tp=True,  # parallelize.py apply_tp: SequenceParallel() on every norm
    sp_why="torchtitan's TP plan is sequence-parallel",
    recompute="selective",  # job_config.py: ActivationCheckpoint.mode = "selective"
    recompute_why="torchtitan's activation_checkpoint.mode",
    # torchtitan/models/moe/moe.py: MoEArgs.use_grouped_mm = True, GroupedExperts runs
    # torch._grouped_mm over bf16 weights and inputs (``_run_experts_grouped_mm``: w1, w3, w2)
    grouped_experts=True,
    experts_why="torchtitan's MoEArgs.use_grouped_mm",
)

COMPOSER_LAYOUT = LayoutDefaults(
    framework="Composer FSDP (llm-foundry)",
    zero=3,  # yamls/pretrain/mpt-*.yaml: sharding_strategy: FULL_SHARD
    zero_why="llm-foundry's FULL_SHARD",
    recompute="full",  # yamls/pretrain/mpt-3b..70b.yaml: activation_checkpointing: true
    recompute_why="llm-foundry's activation_checkpointing",
    experts_why="llm-foundry's MoE (MegaBlocks) not modelled: gpuplan's default",
)

DEEPSPEED_LAYOUT = LayoutDefaults(
    framework="DeepSpeed",
    zero_why="DeepSpeed's zero_optimization.stage 0",  # runtime/zero/config.py: stage = 0
    sp_why="Megatron-DeepSpeed's --sequence-parallel is opt-in",
    recompute_why="--checkpoint-activations is opt-in",
    # DeepSpeed-MoE's Experts.forward loops over its local experts, one nn.Module each
    # (deepspeed/moe/experts.py): one GEMM per expert
    experts_why="DeepSpeed-MoE's loop over experts",
)


@dataclass(frozen=True, slots=True)
class Filled:
    """A layout's fields with every unset one filled (``fields``), and the defaults applied as
    the flags that would set them, each with the framework's word for it (``applied``)."""

    fields: dict[str, Any]
    applied: tuple[str, ...]


def layout_defaults_of(stack) -> LayoutDefaults:
    """The stack's framework's layout defaults (``PYTORCH_LAYOUT`` for a stack without a
    training runtime)."""
    layout = getattr(getattr(stack, "training", None), "layout", None)
    return layout if isinstance(layout, LayoutDefaults) else PYTORCH_LAYOUT


def experts_default(stack) -> str | None:
    """The framework's way of launching an MoE step's routed experts as the flag that sets it:
    ``--expert-gemms grouped (megatron-te: NeMo recipes' moe_grouped_gemm)``; None for a stack
    without a training framework (its experts run as its ``moe`` and ``moe_autocast_dtype``
    say: ``sim.parallel.shape.grouped_experts_of``)."""
    layout = layout_defaults_of(stack)
    if layout is PYTORCH_LAYOUT:
        return None
    choice = "grouped" if layout.grouped_experts else "per-expert"
    return f"--expert-gemms {choice} ({getattr(stack, 'name', stack)}: {layout.experts_why})"


def strategy_defaults(stack) -> dict[str, Any]:
    """The strategy fields the stack itself sets: the state's precision of its mixed precision
    (autocast over fp32 weights is ``bf16-mixed``; 16-bit weights with fp32 master copies
    ``bf16-mixed-megatron``) and the data-parallel, tensor-parallel and pipeline overlaps it
    performs under a 1F1B schedule."""
    state = "bf16-mixed" if stack.mixed_precision == "autocast" else "bf16-mixed-megatron"
    return {"state_precision": state, "overlap_dp": stack.overlap_dp,
            "overlap_tp": stack.overlap_tp, "overlap_pp": stack.overlap_pp}  # fmt: skip


def fill_defaults(stack, given: Mapping[str, Any], *, tp: int = 1, pp: int = 1,
                  virtual_stages: int = 1, fields: tuple[str, ...] = FIELDS,
                  ranks: int | None = None) -> Filled:  # fmt: skip
    """``given``'s values of ``fields`` (all of ``FIELDS`` unless named), each None (or absent)
    one as ``stack``'s framework ships it on a layout of ``tp`` and ``pp`` with
    ``virtual_stages`` chunks per GPU and ``ranks`` data-parallel x context-parallel ranks
    (None: not known, as many as the framework's default wants)."""
    unknown = sorted((set(given) | set(fields)) - set(FIELDS))
    if unknown:
        raise GpuplanError(f"fill_defaults: {', '.join(unknown)} cannot be defaulted; "
                           f"valid fields: {', '.join(FIELDS)}")  # fmt: skip
    check_whole("virtual_stages", virtual_stages)
    rules = _rules(stack, tp, virtual_stages, ranks)
    out, applied = {}, []
    for field in (f for f in FIELDS if f in fields):  # in order: overlap_pp reads the schedule
        out[field] = given.get(field)
        if out[field] is None:
            out[field], why = rules[field](out)
            applied += [_flag(field, out[field], why)] * _shown(field, tp, pp)
    return Filled(fields=out, applied=tuple(applied))


def _rules(stack, tp: int, virtual_stages: int, ranks: int | None) -> dict:
    """Each field's default as a function of the fields filled before it: (value, why)."""
    layout, own = layout_defaults_of(stack), strategy_defaults(stack)
    name = getattr(stack, "name", str(stack))
    zero, zero_why = layout.zero, layout.zero_why
    if ranks == 1 and layout.zero_one_rank is not None:
        zero, zero_why = layout.zero_one_rank, "one data-parallel rank: nothing to shard over"

    def overlap_pp(done):
        sched = done.get("schedule") or ("interleaved" if virtual_stages > 1 else "1f1b")
        interleaved = layout.overlap_pp_interleaved and sched == "interleaved"
        why = "overlapped p2p of the interleaved schedule" if interleaved else "the stack's"
        return own["overlap_pp"] or interleaved, f"{name}: {why}"

    fixed = {
        "zero": (zero, f"{name}: {zero_why}"),
        "sp": (layout.sp_with_tp and tp > 1, f"{name}: {layout.sp_why}"),
        "schedule": ("interleaved" if virtual_stages > 1 else "1f1b",
                     "interleaved with --virtual-stages, else 1F1B"),
        "micro_batch": (1, "gpuplan's default"),
        "recompute": (layout.recompute, f"{name}: {layout.recompute_why}"),
        "precision": ("bf16", "bf16 GEMMs unless fp8 is asked for"),
        "state_precision": (own["state_precision"], f"{name}: the stack's mixed precision"),
        "overlap_dp": (own["overlap_dp"], f"{name}: the stack's"),
        "overlap_tp": (own["overlap_tp"], f"{name}: the stack's"),
    }  # fmt: skip
    rules = {k: (lambda _, v=v, why=why: (v, why)) for k, (v, why) in fixed.items()}
    return rules | {"overlap_pp": overlap_pp}


def _shown(field: str, tp: int, pp: int) -> bool:
    """Whether a default of ``field`` changes anything on a layout of ``tp`` and ``pp``: SP only
    with TP, a schedule and pipeline overlap only with a pipeline."""
    return {"sp": tp > 1, "schedule": pp > 1, "overlap_tp": tp > 1,
            "overlap_pp": pp > 1}.get(field, True)  # fmt: skip


def _flag(field: str, value, why: str) -> str:
    """A default as the flag that sets it: ``--zero 1 (megatron-te: ...)``, ``--no-sp (...)``."""
    flag = "--" + field.replace("_", "-")
    if isinstance(value, bool):
        flag = flag if value else "--no-" + flag[2:]
        return f"{flag} ({why})"
    return f"{flag} {value} ({why})"
