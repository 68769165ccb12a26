"""Whole-model estimates on one GPU from a model preset or config.json (dense, MoE or MLA).

The record contract describes its layer by a few numbers (hidden, heads, ffn); a user asks about
a named model. This module prices that model's own operators (``workloads.operators``), with its
own attention kind, experts and vocabulary, through the same step functions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from gpuplan.errors import GpuplanError, check_choice, expects
from gpuplan.sim.estimate import composite as step
from gpuplan.sim.estimate.breakdown import Breakdown
from gpuplan.sim.estimate.inference import decode_breakdown, prefill_breakdown
from gpuplan.sim.estimate.inputs import check_params, check_seq
from gpuplan.sim.stacks import Stack, get_stack, stack_efficiency
from gpuplan.workloads.model import ModelConfig
from gpuplan.workloads.presets import get_model

MODEL_KINDS = ("layer", "prefill_step", "train_step", "decode_step")
# the params each kind cannot do without (the others have defaults)
NEEDED = {"layer": ("micro_batch", "seq", "pass", "dtype"), "prefill_step": ("batch", "seq"),
          "train_step": ("micro_batch", "seq"), "decode_step": ("batch", "context")}  # fmt: skip
_PHASE = {"prefill_step": "prefill", "decode_step": "decode", "train_step": "train"}


@expects(kind=str, acc="Accelerator", eff="Efficiency", model=(str, "ModelConfig"),
         params=dict, impl=(str, None), stack=(str, "Stack"))
def model_breakdown(
    kind: str,
    acc,
    eff,
    model: str | ModelConfig,
    params: Mapping[str, Any],
    *,
    impl: str | None = None,
    stack: str | Stack = "pytorch",
) -> Breakdown:
    """Predicted breakdown of ``kind`` for the named model (or config) on ``stack``;
    ``params`` sets batch, seq, ... (``impl`` overrides the stack's elementwise kernels)."""
    check_choice("kind", kind, MODEL_KINDS)
    check_params(params)
    missing = [name for name in NEEDED[kind] if name not in params]
    if missing:
        raise GpuplanError(f"{kind}: params lacks {', '.join(missing)} (give "
                           f"{', '.join(NEEDED[kind])})")  # fmt: skip
    cfg = model if isinstance(model, ModelConfig) else get_model(model)
    for field in ("seq", "context"):  # tokens of one sequence: within its position table
        if field in params:
            check_seq(cfg, params[field], field)
    if "layers" in params:
        cfg = replace(cfg, n_layers=params["layers"])
    stack = get_stack(stack).for_model(cfg)  # its attention as it runs this model
    if impl is not None:
        stack = replace(stack, elementwise=impl)
    if kind == "train_step":  # priced with the stack by the multi-GPU estimate itself
        images = images_of(cfg, params)
        if images is not None:  # a VLM's samples with images
            return vlm_training(acc, eff, cfg, stack, params, images)
        if params.get("freeze_vision") is not None:
            raise GpuplanError("freeze_vision is for a training step with images (--images N)")
        return one_gpu_training(acc, eff, cfg, stack, params).breakdown
    phase = _PHASE.get(kind, "train" if params.get("pass") == "fwd_bwd" else "prefill")
    eff = stack_efficiency(stack, eff, acc, phase=phase)
    if kind == "prefill_step":
        images = images_of(cfg, params)
        if images is not None:  # a VLM's prompts with images: encoder, then the prefill
            from gpuplan.sim.estimate.vision import vision_prefill_breakdown

            return vision_prefill_breakdown(acc, eff, cfg, stack, batch=params["batch"],
                                            seq=params["seq"], images=images,
                                            tp=params.get("tp", 1))
        return prefill_breakdown(acc, eff, cfg, stack, batch=params["batch"], seq=params["seq"],
                                 tp=params.get("tp", 1))
    if kind == "decode_step":
        return decode_breakdown(
            acc, eff, cfg, stack, batch=params["batch"], context=params["context"],
            dtype=params.get("dtype", "bf16"), cuda_graph=params.get("cuda_graph"),
            kv_cache=params.get("kv_cache"), max_cache_len=params.get("max_cache_len"),
            tp=params.get("tp", 1),
        )
    return config_breakdown(kind, acc, eff, cfg, params, impl=stack.elementwise)


def images_of(cfg: ModelConfig, params: Mapping[str, Any]):
    """The ``images`` (per sequence) and ``image_size`` ("WxH") of a case, or None without
    images; images for a text-only model, or a size the tower cannot cut, are an error."""
    from gpuplan.workloads.images import Images, parse_image_size
    from gpuplan.workloads.vision import check_images, default_image_size

    count, size = params.get("images"), params.get("image_size")
    if size is not None and count is None:
        raise GpuplanError(f"image_size={size!r} needs images=N (--images: images per sequence)")
    if not count:
        return None
    width, height = parse_image_size(size) if size is not None else default_image_size(cfg)
    images = Images(count=count, width=width, height=height)
    check_images(cfg, images)
    return images


def vlm_training(acc, eff, cfg: ModelConfig, stack: Stack, params: Mapping[str, Any], images):
    """A VLM's one-GPU training step with images (``sim.estimate.vision.vlm_training_estimate``)."""
    from gpuplan.sim.estimate.vision import vlm_training_estimate
    from gpuplan.sim.parallel.topology import cluster_for

    return vlm_training_estimate(
        cfg, one_gpu_strategy(stack, params), cluster=cluster_for(acc.key), seq=params["seq"],
        images=images, freeze_vision=bool(params.get("freeze_vision")), eff=eff, stack=stack,
    ).breakdown


def one_gpu_training(acc, eff, cfg: ModelConfig, stack: Stack, params: Mapping[str, Any]):
    """A whole model's training step on one GPU: the one-GPU case of the multi-GPU estimate
    (``sim.parallel.estimate_training``), one micro-batch per step, on the stack's defaults."""
    from gpuplan.sim.parallel.estimate import estimate_training
    from gpuplan.sim.parallel.topology import cluster_for

    strategy = one_gpu_strategy(stack, params)
    return estimate_training(
        cfg, strategy, cluster=cluster_for(acc.key), seq=params["seq"], eff=eff,
        stack=data_parallel_stack(stack, params),
    )


def data_parallel_stack(stack: Stack, params: Mapping[str, Any]) -> Stack:
    """``stack`` as a data-parallel record ran it: a record that names its ``dp`` (the
    ``harness.dist_train`` layouts) wrapped the model in DDP or FSDP2 even on one rank, so its
    wrapper's buffers are priced at dp=1 too (``TrainingRuntime.wrapped_one_rank``); a plain
    one-GPU step (no ``dp``) runs unwrapped."""
    from gpuplan.sim.stacks.training import runtime_of

    if "dp" not in params:
        return stack
    return replace(stack, training=replace(runtime_of(stack), wrapped_one_rank=True))


def one_gpu_strategy(stack: Stack, params: Mapping[str, Any]):
    """One micro-batch per step on one GPU, on the stack's defaults (``one_gpu_training``);
    a data-parallel record's ``dp`` replicas, ``accumulation`` micro-batches per step and
    ``zero_stage`` where its params give them (``harness.dist_train``)."""
    from gpuplan.sim.parallel.estimate import stack_strategy
    from gpuplan.sim.parallel.strategy import Strategy

    check_choice("optimizer", params.get("optimizer", "adamw"), ("adamw",))
    check_choice("precision", params.get("precision", "bf16-mixed"), ("bf16-mixed",))
    mb, dp = params["micro_batch"], params.get("dp", 1)
    batch = mb * dp * params.get("accumulation", 1)
    return stack_strategy(
        Strategy(dp=dp, zero=params.get("zero_stage", 0), micro_batch=mb, global_batch=batch,
                 recompute=params.get("recompute", "none")),
        stack,
    )  # fmt: skip


def config_breakdown(
    kind: str,
    acc,
    eff,
    cfg: ModelConfig,
    params: Mapping[str, Any],
    *,
    impl: str,
    isolated: bool = False,
) -> Breakdown:
    """The record contract's ``layer`` or ``decode_step`` (its blocks alone) of ``cfg``, as
    ``impl`` runs its kernels; ``isolated``: timed alone (after an L2 flush when the stack's
    timing has one). Whole models go through ``model_breakdown``: a training step through the
    multi-GPU estimate, a decode through the serving iteration."""
    if kind == "layer":
        return step.layer_breakdown(
            acc,
            eff,
            cfg,
            micro_batch=params["micro_batch"],
            seq=params["seq"],
            pass_=params["pass"],
            compiled=impl == "compiled",
            dtype=params["dtype"],
            tp=params.get("tp", 1),
        )
    return step.decode_step_breakdown(
        acc,
        eff,
        cfg,
        batch=params["batch"],
        context=params["context"],
        cuda_graph=params["cuda_graph"],
        dtype=params["dtype"],
        impl=impl,
        isolated=isolated,
        tp=params.get("tp", 1),
    )


@expects(acc="Accelerator", eff="Efficiency", cfg="ModelConfig", recompute=str, precision=str,
         impl=str, stack=(str, "Stack"))
def train_step_breakdown(
    acc, eff, cfg: ModelConfig, *, micro_batch: int, seq: int, recompute: str = "none",
    precision: str = "bf16-mixed", impl: str = "eager", stack: str | Stack = "pytorch",
) -> Breakdown:
    """Zero-grad, forward, backward and AdamW step of a whole model on one GPU, as ``stack``
    runs it with ``impl`` elementwise kernels: ``one_gpu_training``'s breakdown."""
    check_params({"micro_batch": micro_batch})
    check_seq(cfg, seq)
    stack = replace(get_stack(stack), elementwise=impl)
    params = {"micro_batch": micro_batch, "seq": seq, "recompute": recompute,
              "precision": precision}  # fmt: skip
    return one_gpu_training(acc, eff, cfg, stack, params).breakdown
