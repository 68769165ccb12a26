"""A serving deployment and scheduler as a stack runs them (``sim.stacks``).

``stack_deployment`` prices a replica with the stack's kernels (``stack_efficiency``: its
attention kernel per phase, its host cost per call), elementwise implementation, CUDA graphs and
their buckets, and the CPU time per iteration of its runtime; ``stack_scheduler`` takes the
runtime's scheduler defaults. A stack without a serving runtime (``pytorch``, ``harness``...)
serves as the simulator's generic server: CUDA-graph decode without padding, no CPU cost per
iteration. Any keyword given overrides the stack's choice.
"""

from __future__ import annotations

import dataclasses

from gpuplan.hwmodels.accelerators import get_accelerator
from gpuplan.hwmodels.efficiency import Efficiency, efficiency_for, queued
from gpuplan.sim.runtime.serving.deployment import Deployment, SchedulerConfig
from gpuplan.sim.runtime.serving.pipeline import pipeline_fields
from gpuplan.sim.runtime.serving.quantization import served_weight_dtype
from gpuplan.sim.stacks import Stack, get_stack, stack_efficiency
from gpuplan.workloads.model import ModelConfig
from gpuplan.workloads.presets import get_model


def on_device(stack: str | Stack, gpu: str | None) -> Stack:
    """``stack`` on the machine its runtime pairs with ``gpu``: the host's speed factor times
    ``ServingRuntime.host_factor(gpu)`` (the stack itself when that is 1 or ``gpu`` None)."""
    stack = get_stack(stack)
    f = stack.serving.host_factor(gpu) if stack.serving is not None and gpu else 1.0
    if f == 1.0:
        return stack
    return dataclasses.replace(stack, host=dataclasses.replace(
        stack.host, speed_factor=stack.host.speed_factor * f))


def stack_serving_efficiency(stack: str | Stack, acc, fit: Efficiency | None = None) -> Efficiency:
    """The device's fit (``fit``, default ``efficiency_for``) with the stack's kernels and host
    cost per call (on the machine of ``acc``: ``on_device``), as a serving iteration's stream of
    kernels meets it (``queued``)."""
    return queued(stack_efficiency(on_device(stack, acc.key), fit or efficiency_for(acc.key), acc,
                                   phase="prefill"))  # fmt: skip


def deployment_fields(stack: str | Stack, *, tp: int = 1, gpu: str | None = None) -> dict:
    """The ``Deployment`` fields a stack decides: elementwise kernels, CUDA graphs and their
    buckets, CPU time per iteration and per sequence (times the host's speed factor on ``gpu``'s
    machine, ``on_device``), the paged cache and the stack's name."""
    stack = on_device(stack, gpu)
    run = stack.serving
    cpu = stack.host.speed_factor
    return {
        "impl": "fused" if stack.elementwise == "eager" and run is None else stack.elementwise,
        "cuda_graph": run.cuda_graph if run else True,
        "decode_buckets": run.decode_buckets if run and run.cuda_graph else (),
        "iteration_overhead_s": run.overhead_s(tp) * cpu if run else 0.0,
        "seq_overhead_s": run.seq_overhead_s * cpu if run else 0.0,
        # the stack's MoE implementation (vLLM/SGLang fused_moe, TensorRT-LLM's MoE plugin: one
        # grouped GEMM over the experts; Stack.moe), as the one-GPU estimate prices it
        "grouped_experts": stack.moe == "grouped_gemm",
        "moe_glue": stack.moe_glue,
        "kv_cache": "paged",
        "stack": stack.name,
        "all_reduce": run.all_reduce if run else "nccl",
        "fused_add_norm": run.fused_add_norm if run else False,
    }


def stack_deployment(model: str | ModelConfig, gpu: str, stack: str | Stack = "vllm", *,
                     fit: Efficiency | None = None, **kw) -> Deployment:  # fmt: skip
    """A ``Deployment`` of ``model`` on ``gpu`` as ``stack`` serves it (module docstring)."""
    cfg = model if isinstance(model, ModelConfig) else get_model(model)
    acc = get_accelerator(gpu)
    eff = stack_serving_efficiency(stack, acc, fit)
    choices = deployment_fields(stack, tp=kw.get("tp", 1), gpu=acc.key)
    kw["weight_dtype"] = served_weight_dtype(cfg, kw.get("weight_dtype"))
    return Deployment(model=cfg, acc=acc, eff=eff, **{**choices, **kw})


def overridden_deployment(model: str | ModelConfig, gpu: str, stack: str | Stack, *,
                          fit: Efficiency | None = None, pp: int = 1, ep: int = 1,
                          pp_layers: tuple[int, ...] | None = None, eager_decode: bool = False,
                          impl: str | None = None, **kw) -> Deployment:  # fmt: skip
    """``stack_deployment`` with the stack's choices a user overrides: the pipeline split
    (``pipeline_fields``), eager decode (no CUDA graphs, so no decode buckets) and the elementwise
    implementation (None: the stack's); ``kw`` as there."""
    kw |= pipeline_fields(pp, ep, pp_layers)
    if eager_decode:
        kw |= {"cuda_graph": False, "decode_buckets": ()}
    if impl is not None:
        kw["impl"] = impl
    return stack_deployment(model, gpu, stack, fit=fit, **kw)


def stack_scheduler(stack: str | Stack, **kw) -> SchedulerConfig:
    """The scheduler limits of ``stack``'s runtime (``SchedulerConfig``'s defaults for a stack
    without one); keywords override. A KV share of the free memory (TensorRT-LLM) is kept as
    ``memory_utilization`` of the device here: ``kv_memory_share`` converts it."""
    run = get_stack(stack).serving
    base = {} if run is None else {
        "policy": run.policy, "max_seqs": run.max_seqs,
        "max_batched_tokens": run.max_batched_tokens, "block_tokens": run.block_tokens,
        "memory_utilization": run.memory_fraction,
    }  # fmt: skip
    return SchedulerConfig(**{**base, **{k: v for k, v in kw.items() if v is not None}})


def kv_memory_share(stack: str | Stack, dep: Deployment, sched: SchedulerConfig) -> SchedulerConfig:
    """``sched`` with a free-memory KV share (``kv_memory == "free"``) turned into the device share
    it amounts to once the weights and workspace are placed."""
    from gpuplan.sim.runtime.serving.kv_cache import kv_capacity

    run = get_stack(stack).serving
    if run is None or run.kv_memory != "free":
        return sched
    whole = kv_capacity(dep, dataclasses.replace(sched, memory_utilization=1.0))
    placed = whole.weights_bytes + whole.workspace_bytes
    if placed >= whole.hbm_bytes:
        return sched  # nothing fits: kv_capacity says so in its own words
    used = placed + sched.memory_utilization * (whole.hbm_bytes - placed)
    return dataclasses.replace(sched, memory_utilization=used / whole.hbm_bytes)


def serving_scheduler(stack: str | Stack, dep: Deployment, **limits) -> SchedulerConfig:
    """``stack_scheduler``'s limits, each given overriding its own; a KV share of the free memory
    (TensorRT-LLM's) as the device share it amounts to (``kv_memory_share``), unless
    ``memory_utilization`` is given."""
    sched = stack_scheduler(stack, **limits)
    if limits.get("memory_utilization") is not None:
        return sched
    return kv_memory_share(stack, dep, sched)
