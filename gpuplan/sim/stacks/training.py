"""Presets of the stacks that train across many GPUs, and the runtime each framework brings.

A training stack is a ``Stack`` (kernels, host, optimizer, mixed precision, overlaps) with a
``TrainingRuntime``: the layouts the framework can run, what it does with a layout left unset
(``layout``: ZeRO stage, SP with TP, recomputation; ``training_defaults``), how it buckets and
types the gradient reduction, how finely ZeRO-3 gathers parameters, and what its selective
recomputation re-runs.
Every choice below is the framework's default or the setting its published runs state.

``megatron-te`` - Megatron-LM / NeMo with Transformer Engine: hand-fused elementwise kernels
(TE's fused LayerNorm/RMSNorm-linear, fused bias-GeLU/SwiGLU, fused softmax), FlashAttention-2
through TE's flash backend (cuDNN's fused attention where FlashAttention-2 does not run, as on
Blackwell), bf16 weights with fp32 main gradients and master weights in the distributed
optimizer (``bf16-mixed-megatron``: 2 + 4 + 12 bytes per parameter), a persistent contiguous
gradient buffer, fused Adam. Overlaps as Megatron-LM's arguments default them: gradient reduction
overlapped (``--overlap-grad-reduce``, on in NeMo recipes), TP communication overlap off
(``--tp-comm-overlap`` is opt-in: TE userbuffers), pipeline sends overlapped under the
interleaved schedule only (``training_defaults``). With bf16
the gradients are accumulated and all-reduced in fp32 (``megatron/training/arguments.py``: "bfloat16
requires gradient accumulation and all-reduce to be performed in fp32"), in buckets of
``max(40,000,000, 1,000,000 x dp)`` parameters (``megatron/core/distributed/
distributed_data_parallel.py``, ``bucket_size``). Selective recomputation is the attention core
(``--recompute-granularity selective``, Korthikanti et al. 2022).

``fsdp2`` - PyTorch FSDP2 as torchtitan runs it: ``fully_shard`` on every transformer block and
the model (``torchtitan/.../parallelize_llama.py``, ``apply_fsdp``), so one all-gather per
block, prefetched one block ahead, resharded after the forward (ZeRO-3; reshard_after_forward
False is ZeRO-2, and torchtitan keeps the blocks unsharded under PP); ``MixedPrecisionPolicy``
with ``param_dtype=bfloat16`` and ``reduce_dtype=float32`` (torchtitan job config
``training.mixed_precision_param`` / ``mixed_precision_reduce``): the forward runs in bf16 from
fp32 sharded parameters, gradients are reduce-scattered in fp32 (4 bytes per element). Eager ATen
elementwise kernels (torch.compile is optional: ``--stack torch-compile`` prices its fusion),
SDPA with PyTorch's default dispatch (cuDNN on Hopper), fused AdamW (torchtitan
``optimizer.implementation = "fused"``). Its selective recomputation is torchtitan's op-level
SAC (``torchtitan/.../activation_checkpoint.py``: ``_save_list`` keeps the matmuls and SDPA
outputs but saves only every other matmul, so half the matmuls and every other op re-run).
Float8 (torchao ``Float8Linear``) is ``--precision fp8``; async TP is ``--overlap-tp``.

``composer-fsdp`` - MosaicML llm-foundry on Composer: FSDP (v1) ``FULL_SHARD`` with one FSDP unit
per ``MPTBlock``, ``mixed_precision: PURE`` (bf16 parameters, bf16 gradient reduction, fp32
sharded master weights: Composer's FSDP docs), ``activation_checkpointing: true`` (full, per
block), ``limit_all_gathers: true``, backward prefetch ``BACKWARD_POST`` (gathers overlap
compute), FlashAttention through ``attn_impl: flash``, low-precision LayerNorm as eager ATen
kernels, Composer's ``DecoupledAdamW`` (a per-parameter loop: priced as the foreach passes)
(llm-foundry ``scripts/train/benchmarking/README.md`` and its yamls). No tensor or pipeline
parallelism in these runs.

``deepspeed`` - DeepSpeed ZeRO 1-3 (Megatron-DeepSpeed for the published GPT runs): defaults of
``deepspeed/runtime/zero/config.py``: ``reduce_bucket_size`` and ``allgather_bucket_size``
5e8 elements, ``stage3_prefetch_bucket_size`` 5e7, ``stage3_param_persistence_threshold`` 1e5
(norms and biases stay whole), ``overlap_comm`` on for ZeRO-3 only; its pipeline engine runs
ZeRO 0 or 1 only ("ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism",
``deepspeed/runtime/pipe/engine.py``) and reduces gradients after the pipeline flush, not behind
the backward. ZeRO-3 gathers each sub-module's parameters from hooks on that sub-module, one
all-gather per weight matrix (``partitioned_param_coordinator.fetch_sub_module``), not one per
block: each call pays the collective's latency over the whole data-parallel group, which is what
makes ZeRO-3 slower than model parallelism at scale (measured: Narayanan et al. 2021, SC21,
sec. 5.2 and Fig. 10, ZeRO-3 vs PTD-P on 175B/530B GPT up to 2,240 A100s; Wang et al. 2023,
"ZeRO++", arXiv:2306.10209, sec. 1: ZeRO-3's all-gathers are latency- and bandwidth-bound at
small per-GPU batch across nodes). Megatron's fused kernels and FusedAdam, bf16 weights with
fp32 master copies in the optimizer.

``pytorch`` (``stacks.pytorch``) trains with PyTorch's own wrappers: DDP all-reduces the
gradients in their own dtype (fp32 under autocast over fp32 weights) in 25 MB buckets overlapped
with the backward (``DistributedDataParallel(bucket_cap_mb=25)``, torch.nn.parallel docs), and
FSDP for ZeRO-2/3; that runtime is ``PYTORCH_RUNTIME``, the default of a stack without one.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

import gpuplan.sim.stacks.training_defaults as framework
from gpuplan.errors import GpuplanError, check_choice
from gpuplan.sim.stacks.kernels import SDPA_DEFAULT, TE_DEFAULT
from gpuplan.sim.stacks.stack import AttentionChoice, HostModel, Stack
from gpuplan.units import MiB

SELECTIVE = ("attention-core", "op-sac")


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainingRuntime:
    """What a training framework does with a layout beyond its kernels (module docstring)."""

    framework: str  # as an error message names it
    layout: framework.LayoutDefaults = framework.PYTORCH_LAYOUT  # what it does with one left unset
    zero_stages: tuple[int, ...] = (0, 1, 2, 3)
    max_tp: int | None = None  # None: any tensor-parallel degree; 1: none
    pipeline: bool = True  # runs pp > 1
    context_parallel: bool = True  # runs cp > 1
    max_zero_with_pp: int = 3  # the highest ZeRO stage it runs together with pp > 1
    grad_reduce_bytes: int = 2  # bytes per gradient element on the wire
    bucket_bytes: float = 25 * MiB  # gradient bucket: the last one's reduction cannot hide
    bucket_bytes_per_dp: float = 0.0  # bucket growth per data-parallel rank (Megatron)
    gathers_per_block: int = 1  # ZeRO-3 all-gather calls per block per pass
    selective: str = "attention-core"  # what recompute=selective re-runs
    overlap_zero3: bool = False  # ZeRO-3 gathers overlap compute even where overlap_dp is off
    # share of overlapped communication the compute still loses (SMs and HBM held by the
    # collectives' kernels): no cited value; fitted per stack on the fit part of the published
    # runs by benchmarks/fit_training_stacks.py, whose .json records that no stack adopts one
    comm_interference: float = 0.0
    # point-to-point transfers on a stage's path per micro-batch and chunk boundary: Megatron
    # pairs each send with a receive (``send_forward_recv_backward``, one batch_isend_irecv),
    # so 2; DeepSpeed's pipeline engine runs RecvActivation, SendActivation, RecvGrad and
    # SendGrad as separate blocking instructions (deepspeed/runtime/pipe/schedule.py
    # ``TrainSchedule``, pipe/p2p.py ``send``/``recv``), so 4
    pp_transfers: int = 2
    # CUDA_LAUNCH_BLOCKING=1 (a job's environment, e.g. BLOOM's tr11-176B-ml.slurm): every launch
    # waits for its kernel, so the host's issue time adds to the device's (``step_time``)
    launch_blocking: bool = False
    # under pp > 1 the ZeRO-2/3 blocks stay unsharded through the step and their gradients are
    # reduced once, at the last micro-batch: torchtitan's apply_fsdp sets reshard_after_forward
    # False when pp is enabled ("to avoid per-microbatch all-gathers"), and the pipelining stage
    # runs every backward but the last with set_requires_gradient_sync(False) and
    # set_reshard_after_backward(False) (torch/distributed/pipelining/stage.py,
    # backward_maybe_with_nosync), FSDP2 accumulating the whole gradient in its reduce dtype
    # (FSDPParam.to_accumulated_grad_if_needed): ZeRO-1's traffic (``pipeline_zero``)
    pp_unsharded: bool = False
    # replicated gradients (ZeRO 0/1) also live in a flat copy in DDP's buckets: PyTorch's
    # DistributedDataParallel(gradient_as_bucket_view=False), its default (torch/nn/parallel/
    # distributed.py; True "can reduce peak memory usage, where the saved memory size will be
    # equal to the total gradients size", pytorch/pytorch#41954). Megatron's and DeepSpeed's
    # contiguous gradient buffers are the gradients themselves: no copy. Priced where the model
    # is wrapped: dp > 1, or ``wrapped_one_rank`` (a data-parallel harness run on one GPU)
    ddp_bucket_copy: bool = False
    wrapped_one_rank: bool = False
    # gradients of the second and later micro-batches of a step are added into the kept ones by
    # a separate fp32 add (read 4 + 4, write 4 bytes per parameter; the first micro-batch's is
    # stolen, not added): autograd's AccumulateGrad into param.grad for replicated gradients
    # (torch/csrc/autograd/functions/accumulate_grad.h, ``variable_grad += new_grad``), FSDP2's
    # sharded gradient after each reduce-scatter (torch/distributed/fsdp/_fully_shard/
    # _fsdp_param_group.py, ``sharded_param.grad += ...`` in foreach_reduce). Megatron's and
    # DeepSpeed's wgrad GEMMs add into their main-gradient buffers instead (Strategy's
    # fused_grad_accumulation)
    autograd_accumulation: bool = False
    # FSDP2's own copies around its collectives, per micro-batch (torch/distributed/fsdp/
    # _fully_shard/_fsdp_collectives.py): each all-gather copies the bf16 shards into the
    # gathered buffer (foreach_all_gather, ``_foreach_copy_``: 2 + 2 bytes per local
    # parameter) and out of it into the unsharded parameters (foreach_all_gather_copy_out,
    # ``split_with_sizes_copy``: 2 + 2 per parameter); reshard_after_forward gathers again for
    # the backward, casting the fp32 shard to bf16 again (4 + 2); on one rank the reduce-
    # scatter's fp32 output is NCCL's copy of its input (4 + 4). FSDP1's flat parameters are
    # views of the gathered buffer: no copy-out
    fsdp2_copies: bool = False
    # FSDP2 with MixedPrecisionPolicy(param_dtype=bfloat16) computes on its gathered bf16
    # parameters, so autocast keeps no 16-bit copies; under reshard_after_forward (ZeRO-3) a
    # block's are freed after its forward, but the root module's (embedding, final norm, LM
    # head) stay: "the root FSDP state has its value specially set to False as a heuristic since
    # its parameters would typically be immediately all-gathered for backward" (fully_shard
    # docstring, torch/distributed/fsdp/_fully_shard/_fully_shard.py)
    fsdp2_root_unsharded: bool = False
    # fp8 GEMMs cache their fp8-cast inputs (1 B) for the weight gradient in place of the 16-bit
    # ones: Transformer Engine's Linear/LayerNormLinear save the quantized ``inputmat``
    # (transformer_engine/pytorch/module/linear.py); torchao's Float8Linear saves the bf16 input
    fp8_saved_inputs: bool = False

    def __post_init__(self) -> None:
        check_choice("selective", self.selective, SELECTIVE)
        if self.grad_reduce_bytes not in (2, 4):
            raise GpuplanError(f"grad_reduce_bytes={self.grad_reduce_bytes!r} is invalid: 2 or 4")
        if self.pp_transfers not in (2, 4):
            raise GpuplanError(f"pp_transfers={self.pp_transfers!r} is invalid: 2 or 4")
        if self.gathers_per_block < 1:
            raise GpuplanError(f"gathers_per_block={self.gathers_per_block!r} is invalid: >= 1")

    def bucket_fraction(self, stage_params, group):
        """The share of a stage's gradient reduction in its last bucket (numpy-friendly)."""
        bucket = np.maximum(self.bucket_bytes, self.bucket_bytes_per_dp * group)
        total = np.maximum(np.asarray(stage_params, dtype=float) * self.grad_reduce_bytes, 1.0)
        return np.minimum(1.0, bucket / total)


PYTORCH_RUNTIME = TrainingRuntime(
    framework="PyTorch DDP/FSDP",
    ddp_bucket_copy=True,  # DistributedDataParallel's default gradient_as_bucket_view=False
    autograd_accumulation=True,  # param.grad += under no_sync() (TrainingRuntime)
    grad_reduce_bytes=4,  # DDP reduces the gradients in their dtype: fp32 weights under autocast
    bucket_bytes=25 * MiB,  # DistributedDataParallel(bucket_cap_mb=25)
)

MEGATRON_RUNTIME = TrainingRuntime(
    framework="Megatron-LM",
    layout=framework.MEGATRON_LAYOUT,  # stacks.training_defaults
    grad_reduce_bytes=4,  # bf16: accumulate and all-reduce in fp32 (arguments.py)
    bucket_bytes=40_000_000 * 4,  # max(40M, 1M x dp) parameters of fp32 gradients
    bucket_bytes_per_dp=1_000_000 * 4,
    fp8_saved_inputs=True,  # Transformer Engine
)

FSDP2_RUNTIME = TrainingRuntime(
    framework="FSDP2 (torchtitan)",
    layout=framework.FSDP2_LAYOUT,  # stacks.training_defaults
    zero_stages=(0, 2, 3),  # DDP (dp_replicate), fully_shard without / with reshard after forward
    grad_reduce_bytes=4,  # MixedPrecisionPolicy(reduce_dtype=torch.float32)
    bucket_bytes=25 * MiB,  # DDP's bucket where it replicates; FSDP reduces block by block
    selective="op-sac",
    pp_unsharded=True,  # torchtitan's FSDP under PP (TrainingRuntime.pp_unsharded)
    autograd_accumulation=True,  # the sharded gradient += after each reduce-scatter
    fsdp2_copies=True,
    fsdp2_root_unsharded=True,
)

COMPOSER_RUNTIME = TrainingRuntime(
    framework="Composer FSDP (llm-foundry)",
    layout=framework.COMPOSER_LAYOUT,  # stacks.training_defaults
    zero_stages=(2, 3),  # SHARD_GRAD_OP, FULL_SHARD
    max_tp=1,
    pipeline=False,
    context_parallel=False,
    grad_reduce_bytes=2,  # mixed_precision: PURE reduces in bf16
)

DEEPSPEED_RUNTIME = TrainingRuntime(
    framework="DeepSpeed",
    layout=framework.DEEPSPEED_LAYOUT,  # stacks.training_defaults
    max_zero_with_pp=1,
    grad_reduce_bytes=2,  # the bf16 model dtype (communication_data_type unset)
    bucket_bytes=500_000_000 * 2,  # reduce_bucket_size 5e8 elements
    gathers_per_block=7,  # one per weight matrix of a Llama/GPT block: q, k, v, o, gate, up, down
    overlap_zero3=True,
    pp_transfers=4,  # blocking sends and receives, one instruction each (TrainingRuntime)
)


def runtime_of(stack) -> TrainingRuntime:
    """The stack's training runtime (``PYTORCH_RUNTIME`` where it names none)."""
    runtime = getattr(stack, "training", None)
    return runtime if isinstance(runtime, TrainingRuntime) else PYTORCH_RUNTIME


def with_elementwise(stack: Stack, impl: str | None) -> Stack:
    """The stack with its elementwise kernels run as ``impl`` (eager, fused, compiled); the rest
    of it, its optimizer and runtime, as it is (``impl`` None: the stack's own)."""
    if impl is not None and impl != stack.elementwise:
        return dataclasses.replace(stack, elementwise=impl)
    return stack


def with_launch_blocking(stack: Stack, blocking: bool = True) -> Stack:
    """The stack run under CUDA_LAUNCH_BLOCKING=1 (``TrainingRuntime.launch_blocking``: every
    launch waits for its kernel), as a job's environment sets it; ``blocking`` False: as it is."""
    if not blocking:
        return stack
    return dataclasses.replace(stack, training=dataclasses.replace(runtime_of(stack),
                                                                   launch_blocking=True))


def check_layout(stack, strategy) -> None:
    """A one-line GpuplanError where ``stack`` cannot run ``strategy``, saying what would run."""
    rt = runtime_of(stack)
    name = getattr(stack, "name", str(stack))
    if strategy.zero not in rt.zero_stages:
        raise GpuplanError(
            f"stack {name} ({rt.framework}) cannot run zero={strategy.zero}: it runs zero "
            f"{', '.join(map(str, rt.zero_stages))}"
        )
    if rt.max_tp is not None and strategy.tp > rt.max_tp:
        raise GpuplanError(
            f"stack {name} ({rt.framework}) cannot run tp={strategy.tp}: it has no tensor "
            f"parallelism; use tp=1 or --stack megatron-te/fsdp2"
        )
    if strategy.pp > 1 and not rt.pipeline:
        raise GpuplanError(
            f"stack {name} ({rt.framework}) cannot run pp={strategy.pp}: it has no pipeline "
            "parallelism; use pp=1 or --stack megatron-te/fsdp2/deepspeed"
        )
    if strategy.cp > 1 and not rt.context_parallel:
        raise GpuplanError(
            f"stack {name} ({rt.framework}) cannot run cp={strategy.cp}: it has no context "
            "parallelism; use cp=1 or --stack megatron-te/fsdp2"
        )
    if strategy.pp > 1 and strategy.zero > rt.max_zero_with_pp:
        raise GpuplanError(
            f"stack {name} ({rt.framework}) cannot run zero={strategy.zero} with pp="
            f"{strategy.pp}: with pipeline parallelism it runs zero 0 to {rt.max_zero_with_pp}; "
            f"use zero<={rt.max_zero_with_pp}, pp=1, or --stack fsdp2/megatron-te"
        )


def pipeline_unsharded(runtime, pp, zero):
    """Where ``runtime`` keeps ZeRO-2/3 blocks whole through a pipelined step
    (``TrainingRuntime.pp_unsharded``): a boolean array of the layouts."""
    on = runtime is not None and runtime.pp_unsharded
    return np.asarray(on) & (np.asarray(pp) > 1) & (np.asarray(zero) >= 2)


def pipeline_zero(runtime, pp, zero):
    """The ZeRO stage whose communication a layout has: ZeRO-1's (one parameter all-gather and
    one gradient reduce-scatter per step) where the blocks stay whole (``pipeline_unsharded``),
    else ``zero``."""
    return np.where(pipeline_unsharded(runtime, pp, zero), 1, zero)


def layout_mask(runtime: TrainingRuntime, tp, pp, zero, cp=1):
    """Which layouts (arrays of degrees) the runtime runs: ``check_layout``'s rules, vectorized."""
    tp, pp, zero, cp = (np.asarray(a) for a in (tp, pp, zero, cp))
    ok = np.isin(zero, runtime.zero_stages) & (runtime.context_parallel | (cp == 1))
    if runtime.max_tp is not None:
        ok &= tp <= runtime.max_tp
    if not runtime.pipeline:
        ok &= pp == 1
    return ok & ((pp == 1) | (zero <= runtime.max_zero_with_pp))


MEGATRON_TE = Stack(
    name="megatron-te",
    title="Megatron-LM / NeMo with Transformer Engine: fused kernels, distributed optimizer",
    attention=AttentionChoice(prefill=TE_DEFAULT, train=TE_DEFAULT, decode=TE_DEFAULT),
    elementwise="fused",
    host=HostModel(mode="eager"),
    kv_cache="static",
    optimizer="fused",
    mixed_precision="bf16-params",
    timing="device",
    overlap_dp=True,
    overlap_tp=False,
    overlap_pp=False,
    grads_persist=True,
    training=MEGATRON_RUNTIME,
    sources=(
        "Megatron-LM megatron/training/arguments.py (overlap, optimizer, fp32 grad reduction)",
        "Megatron-LM megatron/core/distributed/distributed_data_parallel.py (bucket_size)",
        "Transformer Engine documentation, 'Attention backends'",
    ),
)

FSDP2 = Stack(
    name="fsdp2",
    title="PyTorch FSDP2 / torchtitan: per-block all-gather, fp32 reduce-scatter, eager ops",
    attention=AttentionChoice(prefill=SDPA_DEFAULT, train=SDPA_DEFAULT, decode=SDPA_DEFAULT),
    elementwise="eager",
    host=HostModel(mode="eager"),
    kv_cache="static",
    optimizer="fused",
    mixed_precision="autocast",  # fp32 sharded parameters, bf16 compute copies (param_dtype)
    timing="device",
    overlap_dp=True,  # prefetched all-gathers, reduce-scatters on their own stream
    overlap_tp=False,  # async TP is opt-in (experimental.enable_async_tensor_parallel)
    overlap_pp=False,
    grads_persist=False,  # sharded gradients freed by zero_grad
    training=FSDP2_RUNTIME,
    sources=(
        "pytorch/torchtitan torchtitan/models/llama3/infra/parallelize.py (apply_fsdp, mp_policy)",
        "pytorch/torchtitan torchtitan/config/job_config.py (mixed_precision_reduce=float32, "
        "optimizer implementation fused)",
        "pytorch/torchtitan torchtitan/distributed/activation_checkpoint.py (op-level SAC)",
        "PyTorch docs, torch.distributed.fsdp.fully_shard and MixedPrecisionPolicy",
    ),
)

COMPOSER_FSDP = Stack(
    name="composer-fsdp",
    title="MosaicML llm-foundry on Composer: FSDP FULL_SHARD, FlashAttention, full checkpointing",
    attention=AttentionChoice(prefill="flash2", train="flash2", decode="flash2"),
    elementwise="eager",
    host=HostModel(mode="eager"),
    kv_cache="static",
    optimizer="foreach",
    mixed_precision="autocast",
    timing="device",
    overlap_dp=True,
    overlap_tp=False,
    overlap_pp=False,
    grads_persist=False,
    training=COMPOSER_RUNTIME,
    sources=(
        "mosaicml/llm-foundry scripts/train/benchmarking/README.md and its yamls (fsdp_config)",
        "Composer documentation, 'FSDP' (sharding_strategy, mixed_precision PURE, prefetch)",
    ),
)

DEEPSPEED = Stack(
    name="deepspeed",
    title="DeepSpeed ZeRO 1-3 (Megatron-DeepSpeed): bucketed reductions, per-module ZeRO-3 gathers",
    attention=AttentionChoice(prefill="flash2", train="flash2", decode="flash2"),
    elementwise="fused",
    host=HostModel(mode="eager"),
    kv_cache="static",
    optimizer="fused",
    mixed_precision="bf16-params",
    timing="device",
    overlap_dp=False,  # overlap_comm defaults off below ZeRO-3; the pipe engine reduces after
    overlap_tp=False,
    overlap_pp=False,
    grads_persist=True,  # contiguous_gradients
    training=DEEPSPEED_RUNTIME,
    sources=(
        "microsoft/DeepSpeed deepspeed/runtime/zero/config.py (bucket sizes, overlap_comm)",
        "microsoft/DeepSpeed deepspeed/runtime/pipe/engine.py (ZeRO-2/3 incompatible with PP)",
        "Narayanan et al. 2021 (SC21) sec. 5.2, Fig. 10: ZeRO-3 vs PTD-P",
    ),
)

# registered by ``registry``, in this order
PRESETS = (MEGATRON_TE, FSDP2, COMPOSER_FSDP, DEEPSPEED)
