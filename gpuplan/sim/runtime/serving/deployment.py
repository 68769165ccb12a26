"""How one replica runs a model: the GPU, tensor parallelism, formats and runtime options.

A ``Deployment`` is everything the time of an iteration depends on; the scheduler's limits
(``SchedulerConfig``) are everything the order of work depends on. Both are frozen and checked
on construction, with messages that name the field, the value and what is valid.

Decode padding (what a server that replays captured CUDA graphs computes; vLLM captures one
graph per batch size of a list and pads a decode batch up to the next one): with
``decode_buckets`` set, a decode-only iteration of B sequences runs the smallest bucket >= B
(B itself when it exceeds them all) for every operator, the padding rows included; with
``decode_context_tokens`` set, every row of such an iteration attends over that fixed span
(a mask hides the positions past its own length, but the kernel still reads them all).
Iterations with prefill work run eagerly and are never padded.

Tensor parallelism stays inside one node (Megatron column/row split, Shoeybi et al. 2019): ``tp``
must divide the query heads and be at most ``MAX_TP`` (an 8-GPU node: DGX/HGX). Pipeline
parallelism (``pp`` stages of ``tp`` GPUs, ``pp_layers`` for an uneven split) and expert
parallelism (``ep`` GPUs of a stage sharing the experts) are ``pipeline``'s: a replica is
``tp * pp`` GPUs. With ``dp_attention`` a replica is a wide-EP group of ``ep`` GPUs, attention
data-parallel over ``ep / tp`` ranks (``wide_ep``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from gpuplan.errors import GpuplanError, check_choice, check_kind, check_positive, unknown_key
from gpuplan.hwmodels.accelerators import Accelerator, get_accelerator
from gpuplan.hwmodels.attention import ATTENTION_KERNELS
from gpuplan.hwmodels.efficiency import Efficiency, efficiency_for, queued
from gpuplan.sim.estimate.compilation import IMPLS
from gpuplan.sim.runtime.serving.all_reduce import check_all_reduce
from gpuplan.sim.runtime.serving.pipeline import (
    NODE_GPUS,
    Stage,
    auto_split,
    check_ep,
    stage_split,
    stages,
)
from gpuplan.sim.runtime.serving.quantization import check_formats, served_weight_dtype
from gpuplan.sim.runtime.serving.wide_ep import check_wide_ep_fields, dp_ranks
from gpuplan.workloads.model import ModelConfig
from gpuplan.workloads.presets import get_model

MAX_TP = NODE_GPUS  # GPUs of one node joined by the scale-up link
POLICIES = ("static", "dynamic", "continuous", "chunked")
PREEMPTION = ("recompute", "swap")
VLLM_MIN_BATCHED_TOKENS = 2048  # vLLM's floor for max_num_batched_tokens without chunking
CHUNKED_BATCHED_TOKENS = 2048  # token budget per iteration under chunked prefill


@dataclass(frozen=True, slots=True, kw_only=True)
class Deployment:
    """A model on one replica of ``tp`` GPUs of one kind."""

    model: ModelConfig
    acc: Accelerator
    eff: Efficiency
    tp: int = 1
    weight_dtype: str = "bf16"
    kv_dtype: str = "bf16"
    act_dtype: str = "bf16"
    cuda_graph: bool = True  # decode-only iterations replay a CUDA graph (vLLM's default)
    impl: str = "fused"  # how elementwise ops run: fused kernels, eager PyTorch, torch.compile
    iteration_overhead_s: float = 0.0  # CPU time per iteration not hidden (scheduler, sampler)
    decode_buckets: tuple[int, ...] = ()  # decode batch sizes run (padded up to); () no padding
    decode_context_tokens: int | None = None  # fixed span every padded decode row attends over
    cross_kv_tokens: int = 0  # a cross-attention VLM's image tokens cached per request
    # The KV cache as the stack keeps it: ``paged`` (serving engines), ``static`` (preallocated),
    # or ``dynamic`` (HF DynamicCache: a torch.cat of every block's cache per decode iteration,
    # priced by ``iteration_breakdown``; the simulator's StepModel refuses it).
    kv_cache: str = "paged"
    host_extra_s: float = 0.0  # CPU time per iteration beyond the torch calls (Python modules)
    stack: str = ""  # the stack this deployment prices (sim.stacks), for printouts
    grouped_experts: bool = False  # MoE experts as grouped GEMMs (workloads.feed_forward.moe_block)
    moe_glue: str = "none"  # the library code around them (``Stack.moe_glue``)
    repeat_kv_masked: bool = False  # a masked decode (static span) repeats K/V to every head
    host_overlap: float = 1.0  # share of device time hidden behind the host (launch_cost)
    fused_add_norm: bool = True  # residual adds inside the next RMSNorm (ServingRuntime's)
    all_reduce: str = "nccl"  # the engine's TP all-reduce kernels (``all_reduce``): nccl, custom, fusion
    seq_overhead_s: float = 0.0  # CPU time per iteration per running sequence not hidden
    pp: int = 1  # pipeline stages of tp GPUs each (pipeline.py)
    pp_layers: tuple[int, ...] | str | None = None  # blocks per stage, first to last; None:
    # even; "auto": training's split with the embedding and the LM head counted as blocks
    ep: int = 1  # GPUs of a stage the MoE experts are sharded over (pipeline.check_ep)
    # wide expert parallelism (``wide_ep``): a group of ``ep`` GPUs, attention data-parallel
    # over ``ep / tp`` ranks of ``tp`` GPUs, the experts over all ``ep``
    dp_attention: bool = False
    expert_imbalance: float | None = None  # busiest EP rank's routed rows over the mean (None:
    # the expectation under uniform routing, ``wide_ep.expert_imbalance``)
    redundant_experts: int = 0  # EPLB's extra expert copies over the group
    two_batch_overlap: bool = False  # two micro-batches hide each other's all-to-alls

    def __post_init__(self) -> None:
        check_positive("tp", self.tp)
        if self.tp > MAX_TP:
            raise GpuplanError(
                f"tp={self.tp} is invalid: tensor parallelism stays inside one node of "
                f"{MAX_TP} GPUs; serve more traffic with more replicas"
            )
        if self.model.n_heads % self.tp:
            raise GpuplanError(
                f"tp={self.tp} does not divide {self.model.name}'s n_heads={self.model.n_heads}"
            )
        check_formats(self.weight_dtype, self.kv_dtype, self.acc, stack=self.stack)
        if self.model.expert_weight_dtype:  # a model's own expert format (gpt-oss: mxfp4;
            # its name is checked with the model: ``workloads.structure.check_structure``)
            check_formats(self.model.expert_weight_dtype, self.kv_dtype, self.acc, stack=self.stack)
        check_choice("impl", self.impl, IMPLS)
        check_positive("iteration_overhead_s", self.iteration_overhead_s, allow_zero=True)
        check_positive("host_extra_s", self.host_extra_s, allow_zero=True)
        check_all_reduce(self.all_reduce)
        check_positive("seq_overhead_s", self.seq_overhead_s, allow_zero=True)
        check_choice("kv_cache", self.kv_cache, ("dynamic", "static", "paged"))
        self._check_padding()
        if self.model.is_vision:
            raise GpuplanError(f"{self.model.name} is a vision encoder: it generates no tokens")
        self._check_parallel()

    def _check_parallel(self) -> None:
        check_positive("pp", self.pp)
        check_positive("ep", self.ep)
        if isinstance(self.pp_layers, str) and self.pp_layers != "auto":
            raise GpuplanError(f"pp_layers={self.pp_layers!r} is invalid: give one block count "
                               "per stage (e.g. (30, 31)) or 'auto'")  # fmt: skip
        if self.pp == 1 and self.pp_layers not in (None, "auto") and tuple(self.pp_layers) != (
            self.model.n_layers,
        ):
            raise GpuplanError(
                f"pp_layers={self.pp_layers!r} is given but pp=1: give --pp with one block "
                "count per stage"
            )
        if self.pp_layers == "auto":  # training's rule: the ends count as a block each
            object.__setattr__(self, "pp_layers", auto_split(self.model.n_layers, self.pp))
        if self.pp > 1 or self.pp_layers is not None:
            counts = stage_split(self.model, self.pp, self.pp_layers)
            object.__setattr__(self, "pp_layers", counts)
        check_wide_ep_fields(self)
        if not self.dp_attention:
            check_ep(self.model, self.tp, self.ep)

    def _check_padding(self) -> None:
        buckets = self.decode_buckets
        if not isinstance(buckets, tuple) or any(
            not isinstance(b, int) or isinstance(b, bool) or b <= 0 for b in buckets
        ):
            raise GpuplanError(
                f"decode_buckets={buckets!r} is invalid: give a tuple of positive integers"
            )
        if list(buckets) != sorted(set(buckets)):
            raise GpuplanError(
                f"decode_buckets={buckets!r} is invalid: the sizes must be strictly increasing"
            )
        if self.decode_context_tokens is not None:
            check_positive("decode_context_tokens", self.decode_context_tokens)

    @property
    def gpus(self) -> int:
        """GPUs of one simulated replica: ``tp * pp``, or a wide-EP group's ``ep``."""
        return self.ep if self.dp_attention else self.tp * self.pp

    @property
    def dp(self) -> int:
        """Attention data-parallel ranks of the replica (``wide_ep``; 1 without)."""
        return dp_ranks(self)

    @property
    def stages(self) -> tuple[Stage, ...]:
        """The pipeline stages, first to last (one stage of every block when pp=1)."""
        return stages(self.model, self.pp_layers or (self.model.n_layers,))

    @property
    def pads_decode(self) -> bool:
        return bool(self.decode_buckets) or self.decode_context_tokens is not None

    def decode_bucket(self, seqs: int) -> int:
        """The batch size a decode-only iteration of ``seqs`` sequences runs."""
        for b in self.decode_buckets:
            if b >= seqs:
                return b
        return seqs

    def padded_decode(self, seqs: int, kv_tokens: float) -> tuple[int, float]:
        """(rows, cached tokens read in all) of a decode-only iteration of ``seqs`` sequences
        reading ``kv_tokens`` (each padding row reads one position unless the span is fixed)."""
        rows = self.decode_bucket(seqs)
        if self.decode_context_tokens is not None:
            return rows, rows * self.decode_context_tokens
        return rows, kv_tokens + (rows - seqs)


def serving_efficiency(
    acc_key: str, attention_kernel: str = "flash2", fit: Efficiency | None = None
) -> Efficiency:
    """The GPU's efficiency fit (``fit``, default ``efficiency_for``) as a serving iteration
    meets it: a stream of kernels, each keeping only the queued share of its fixed cost, with the
    fused-attention kernels the server runs (``ATTENTION_KERNELS``)."""
    check_choice("attention_kernel", attention_kernel, ATTENTION_KERNELS)
    check_kind("fit", fit, ("Efficiency", None))
    base = fit or efficiency_for(acc_key)
    return dataclasses.replace(queued(base), attention_kernel=attention_kernel)


def deployment(
    model: str | ModelConfig,
    gpu: str,
    *,
    attention_kernel: str = "flash2",
    fit: Efficiency | None = None,
    **kw,
) -> Deployment:
    """A ``Deployment`` from catalogue keys (or a ModelConfig), with ``serving_efficiency`` of
    ``fit`` (default: the device's built-in fit)."""
    options = {f.name for f in dataclasses.fields(Deployment)} - {"model", "acc", "eff"}
    for name in kw:
        if name not in options:
            raise unknown_key("deployment option", name, options)
    cfg = model if isinstance(model, ModelConfig) else get_model(model)
    acc = get_accelerator(gpu)
    eff = serving_efficiency(acc.key, attention_kernel, fit)
    kw["weight_dtype"] = served_weight_dtype(cfg, kw.get("weight_dtype"))
    return Deployment(model=cfg, acc=acc, eff=eff, **kw)


@dataclass(frozen=True, slots=True, kw_only=True)
class SchedulerConfig:
    """The limits and rules of one replica's scheduler (vLLM's names where it has them).

    ``max_batched_tokens`` None takes the policy's default: ``max(max_model_len, 2048)`` for
    continuous batching (vLLM without chunking), 2048 for chunked prefill, no limit for static
    and dynamic batching (the batch is one padded rectangle).
    """

    policy: str = "continuous"
    max_seqs: int = 256  # vLLM max_num_seqs
    max_batched_tokens: int | None = None
    block_tokens: int = 16  # vLLM block_size
    preemption: str = "recompute"
    batch_timeout_s: float = 0.1  # dynamic batching: longest wait for a full batch
    memory_utilization: float = 0.9  # vLLM gpu_memory_utilization
    max_model_len: int | None = None  # None: the model's max_seq_len
    watermark: float = 0.01  # share of blocks a new prefill must leave free (vLLM)

    def __post_init__(self) -> None:
        check_choice("policy", self.policy, POLICIES)
        check_choice("preemption", self.preemption, PREEMPTION)
        for name in ("max_seqs", "block_tokens", "batch_timeout_s"):
            check_positive(name, getattr(self, name))
        for name in ("max_batched_tokens", "max_model_len"):
            if getattr(self, name) is not None:
                check_positive(name, getattr(self, name))
        if not 0 < self.memory_utilization <= 1:
            raise GpuplanError(
                f"memory_utilization={self.memory_utilization} is invalid: it must be in (0, 1]"
            )
        if not 0 <= self.watermark < 1:
            raise GpuplanError(f"watermark={self.watermark} is invalid: it must be in [0, 1)")

    def model_len(self, cfg: ModelConfig) -> int:
        return self.max_model_len or cfg.max_seq_len

    def batched_tokens(self, cfg: ModelConfig) -> int | None:
        """The token budget of one iteration (None: unlimited)."""
        if self.max_batched_tokens is not None:
            return self.max_batched_tokens
        if self.policy == "continuous":
            return max(self.model_len(cfg), VLLM_MIN_BATCHED_TOKENS)
        if self.policy == "chunked":
            return CHUNKED_BATCHED_TOKENS
        return None
