"""A vision-language model's image work priced on one GPU: the encoder's own forward, and what
the image tokens add to the language model's prefill (``workloads.vision`` has the styles).

vLLM runs a multimodal request's encoder as a separate forward before the language model's
forward over the chunk that holds the image's placeholder tokens (``gpu_model_runner``'s
``_execute_mm_encoder``, then the model over the scheduled tokens), so the encoder is priced as
its own pass with its own launch cost, and added to the prefill:

- inline (Qwen2-VL): the prefill runs over text + image tokens, and caches them all;
- cross-attention (Llama 3.2 Vision): the prefill runs over the text tokens through the
  self-attention blocks; each cross-attention block projects the image tokens' keys and values
  once (and caches them) and runs over the text tokens attending to them.

With no image the prefill is exactly the language model's.
"""

from __future__ import annotations

import dataclasses

from gpuplan.hwmodels.efficiency import queued
from gpuplan.sim.estimate.breakdown import Breakdown, Item, priced_items
from gpuplan.sim.estimate.composite import _as_run, _launch_item, _with_launch
from gpuplan.sim.estimate.inputs import check_seq
from gpuplan.workloads.images import Images
from gpuplan.workloads.memory import kv_cache_bytes_per_token_layer
from gpuplan.workloads.model import ModelConfig
from gpuplan.workloads.operators import backward_of
from gpuplan.workloads.vision import (
    EncoderWork,
    OpGroup,
    cross_kv_forward,
    cross_layer_forward,
    encoder_forward,
    image_tokens,
)


def group_items(groups: list[OpGroup], acc, eff, *, impl: str, phase: str = "fwd",
                price_fn=None) -> list[Item]:
    """Each group's operators priced, as ``impl`` runs elementwise kernels, times its blocks."""
    items: list[Item] = []
    for ops, repeat in groups:
        items += priced_items(_as_run(ops, impl), acc, eff, phase=phase, repeat=repeat,
                              price_fn=price_fn)
    return items


def encoder_groups(cfg: ModelConfig, work: EncoderWork, *, seqs: int, dtype: str = "bf16",
                   tp: int = 1, kv_dtype: str = "bf16") -> list[OpGroup]:
    """The encoder forward over ``seqs`` sequences' images, and for cross-attention the image
    keys and values of every cross-attention block (computed once per request)."""
    groups = encoder_forward(cfg, work, seqs=seqs, dtype=dtype, tp=tp)
    if cfg.vision_tower.style == "cross-attention":
        tokens = seqs * work.images * work.tokens_per_image
        groups += cross_kv_forward(cfg, image_tokens=tokens, dtype=dtype, kv_dtype=kv_dtype,
                                   tp=tp)
    return groups


def encoder_breakdown(acc, eff, cfg: ModelConfig, stack, work: EncoderWork, *, seqs: int = 1,
                      tp: int = 1) -> Breakdown:
    """The encoder's own forward (and image keys and values) with its launch cost."""
    eff = queued(eff)
    items = group_items(encoder_groups(cfg, work, seqs=seqs, tp=tp), acc, eff,
                        impl=stack.elementwise)
    return _with_launch(items, eff)


def vision_prefill_breakdown(acc, eff, cfg: ModelConfig, stack, *, batch: int, seq: int,
                             images: Images | None, tp: int = 1) -> Breakdown:
    """``batch`` prompts of ``seq`` text tokens, each with ``images``: encoder, then the
    language model's prefill (module docstring); peak memory adds the image tokens' cache."""
    from gpuplan.sim.estimate.inference import prefill_breakdown

    per_seq = image_tokens(cfg, images)  # checks them (``workloads.vision.check_images``)
    if not per_seq:
        return prefill_breakdown(acc, eff, cfg, stack, batch=batch, seq=seq, tp=tp)
    tower = cfg.vision_tower
    enc = encoder_breakdown(acc, eff, cfg, stack, EncoderWork.of(tower, images), seqs=batch,
                            tp=tp)
    enc = Breakdown(items=tuple(dataclasses.replace(i, phase="encoder") for i in enc.items))
    if tower.style == "inline":
        check_seq(cfg, seq + per_seq, "seq + image tokens")  # the prompt holds them all
        lm = prefill_breakdown(acc, eff, cfg, stack, batch=batch, seq=seq + per_seq, tp=tp)
        return enc + lm
    lm = prefill_breakdown(acc, eff, cfg, stack, batch=batch, seq=seq, tp=tp)
    cross = cross_layer_forward(cfg, seqs=batch, tokens_per_seq=seq, image_tokens=per_seq, tp=tp)
    q = queued(eff)
    items = group_items(cross, acc, q, impl=stack.elementwise)
    # inside the language model's forward: its kernels' issue cost, no second launch latency
    items.append(_launch_item(items, q, cuda_graph=False))
    cross_bd = Breakdown(items=tuple(items))
    memory = {"cross_kv_cache": batch * cross_kv_bytes(cfg, per_seq) / tp}
    return enc + lm + dataclasses.replace(cross_bd, memory_bytes=memory)


def cross_kv_bytes(cfg: ModelConfig, image_tokens: int, dtype: str = "bf16") -> float:
    """Cache bytes of one request's image keys and values over every cross-attention block."""
    per = kv_cache_bytes_per_token_layer(cfg, dtype)
    return image_tokens * per * len(cfg.vision_tower.cross_attention_layers)


# --- training -------------------------------------------------------------------------------


def _times(item: Item, n: int) -> Item:
    return dataclasses.replace(item, time_s=item.time_s * n, flops=item.flops * n,
                               bytes=item.bytes * n, kernels=item.kernels * n,
                               host_calls=item.host_calls * n)


def vlm_training_estimate(cfg: ModelConfig, strategy, *, cluster, seq: int, images: Images,
                          freeze_vision: bool = False, eff=None, stack=None):
    """A VLM's training step on one GPU: the language model's (``estimate_training``, over
    text + image tokens when they are inline) plus ``vision_training_breakdown``; FLOPs of
    both count toward MFU. More GPUs are an error: how a framework splits the encoder is not
    modelled yet."""
    from gpuplan.errors import GpuplanError
    from gpuplan.hwmodels.efficiency import efficiency_for
    from gpuplan.sim.parallel.estimate import (
        DEFAULT_TRAINING_STACK,
        estimate_training,
        training_efficiency,
    )
    from gpuplan.sim.stacks import get_stack

    if strategy.world != 1:
        raise GpuplanError(f"training {cfg.name} with images is priced on one GPU (--gpus 1); "
                           f"a layout of {strategy.world} GPUs is not modelled for its encoder yet")
    stack = get_stack(stack or DEFAULT_TRAINING_STACK)
    acc = cluster.accelerator
    lm_seq = seq + image_tokens(cfg, images) if cfg.vision_tower.style == "inline" else seq
    est = estimate_training(cfg, strategy, cluster=cluster, seq=lm_seq, eff=eff, stack=stack)
    vision = vision_training_breakdown(
        acc, training_efficiency(stack, eff or efficiency_for(acc.key), acc), cfg, stack,
        micro_batch=strategy.micro_batch, seq=seq, images=images,
        state_precision=strategy.state_precision, freeze_vision=freeze_vision,
        micro_batches=strategy.micro_batches)
    bd = est.breakdown + vision
    return dataclasses.replace(est, breakdown=bd,
                               model_flops_per_step=est.model_flops_per_step + vision.flops,
                               hardware_flops_per_step=est.hardware_flops_per_step + vision.flops)


def _backward(groups: list[OpGroup]) -> list[OpGroup]:
    return [(backward_of(ops), repeat) for ops, repeat in groups]


def vision_training_breakdown(acc, eff, cfg: ModelConfig, stack, *, micro_batch: int, seq: int,
                              images: Images, state_precision: str, freeze_vision: bool = False,
                              micro_batches: int = 1) -> Breakdown:
    """What a VLM's images add to a one-GPU training step of ``micro_batches`` micro-batches of
    ``micro_batch`` sequences of ``seq`` text tokens each: the encoder and projector forward,
    and unless ``freeze_vision`` their
    backward, AdamW step, gradients and optimizer state; for cross-attention the cross-attention
    blocks (the adapter, always trained) forward and backward over the text tokens, with their
    image keys and values. Activations kept for the backward: each trained encoder block's and
    cross-attention block's (``workloads.memory.layer_activation_bytes``)."""
    from gpuplan.sim.parallel.step_time import optimizer_s
    from gpuplan.workloads.memory import layer_activation_bytes, training_state_bytes
    from gpuplan.workloads.params import cross_layer_params, encoder_params, projector_params

    tower = cfg.vision_tower
    work = EncoderWork.of(tower, images)
    encoder = encoder_forward(cfg, work, seqs=micro_batch)
    per_seq_tokens = work.images * work.tokens_per_image  # the encoder's tokens of one sequence
    enc_tokens = micro_batch * per_seq_tokens
    cross: list[OpGroup] = []
    if tower.style == "cross-attention":
        cross = cross_kv_forward(cfg, image_tokens=enc_tokens) + cross_layer_forward(
            cfg, seqs=micro_batch, tokens_per_seq=seq, image_tokens=per_seq_tokens)
    trained = cross + ([] if freeze_vision else encoder)
    impl = stack.elementwise
    items = group_items(encoder + cross, acc, eff, impl=impl, phase="fwd")
    items += group_items(_backward(trained), acc, eff, impl=impl, phase="bwd")
    items = [_times(i, micro_batches) for i in items]
    n_cross = len(tower.cross_attention_layers) * cross_layer_params(cfg)
    n_tower = encoder_params(tower) + projector_params(cfg)
    n_trained = n_cross + (0 if freeze_vision else n_tower)
    opt_s = float(optimizer_s(n_trained, state_precision, acc, eff, impl=stack.optimizer))
    items.append(Item(layer="model", category="optimizer", op="vision.adamw", phase="optimizer",
                      time_s=opt_s, bound="memory"))
    items.append(_launch_item(items, eff, cuda_graph=False))
    precision = "bf16-mixed" if state_precision == "bf16-mixed" else "bf16-mixed-megatron"
    state = training_state_bytes(n_trained, precision)
    frozen_w = training_state_bytes(n_tower if freeze_vision else 0, precision).weights_bytes
    enc = tower.encoder
    acts = 0.0 if freeze_vision else (enc.n_layers + tower.global_layers) * layer_activation_bytes(
        enc, tokens=enc_tokens, impl=impl).total_bytes
    if cross:
        per = layer_activation_bytes(cfg, tokens=micro_batch * seq, impl=impl).total_bytes
        acts += len(tower.cross_attention_layers) * per + micro_batch * cross_kv_bytes(
            cfg, per_seq_tokens)
    memory = {"vision_weights": state.weights_bytes + frozen_w,
              "vision_gradients": state.grads_bytes, "vision_optimizer": state.optimizer_bytes,
              "vision_activations": acts}
    return Breakdown(items=tuple(items), memory_bytes=memory)
