"""Requests with images on a vision-language deployment (``workloads.vision`` has the styles).

``prepare_images`` puts a workload's images in the deployment's terms before a simulation:

- inline (Qwen2-VL): each request's image tokens join its prompt, so its prefill is longer
  and its KV cache holds them;
- the encoder: each request's encoder forward (and, for cross-attention, its image keys and
  values) priced once on the deployment (``encoder_s``); the replica adds it to the first
  iteration that runs a chunk of the request's prefill, as vLLM runs the encoder of a
  request's images before the language model's forward over its scheduled chunk
  (``gpu_model_runner._execute_mm_encoder``) and keeps the outputs in its encoder cache, so a
  request pays it once.

Cross-attention models (Llama 3.2 Vision): the prompt does not grow; the encoder's price holds
each cross-attention block's projection of the image keys and values, and ``CrossAttentionStep``
adds the cross-attention blocks to every iteration: over each prefill piece's tokens and over
the decoding sequences' one token each, attending to their image tokens. It needs the same
image tokens on every request (``--images-per-request``); their kernels are added to the
iteration's (not hidden under the CPU's issue time of a CUDA-graph replay).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from gpuplan.errors import GpuplanError
from gpuplan.hwmodels.launch import launch_cost
from gpuplan.sim.estimate.vision import encoder_groups, group_items
from gpuplan.workloads.vision import EncoderWork, cross_layer_forward


def prepare_images(dep, workload):
    """``workload`` as ``dep`` serves it (module docstring); the same object without images."""
    tokens = workload.image_tokens
    if tokens is None or not np.any(tokens):
        return workload
    cfg = dep.model
    if cfg.vision_tower is None:
        i = int(np.flatnonzero(tokens)[0])
        raise GpuplanError(f"request {i + 1} has image_tokens={int(tokens[i])} but {cfg.name} is "
                           "a text-only model: it takes no images; choose a vision-language "
                           "model, e.g. qwen2-vl-7b")
    inline = cfg.vision_tower.style == "inline"
    if not inline and not np.all(tokens == tokens[0]):
        i = int(np.flatnonzero(tokens != tokens[0])[0])
        raise GpuplanError(f"{cfg.name} attends to images through cross-attention blocks, which "
                           "serve prices for the same images on every request: request 1 has "
                           f"image_tokens={int(tokens[0])}, request {i + 1} {int(tokens[i])}")
    images = workload.images_per_request
    memo: dict[tuple[int, int], float] = {}
    seconds = np.zeros(workload.n)
    for rid in np.flatnonzero(tokens):
        key = (int(images[rid]), int(tokens[rid]))
        if key not in memo:
            memo[key] = encoder_s(dep, EncoderWork.from_image_tokens(cfg.vision_tower, *key))
        seconds[rid] = memo[key]
    prompt = workload.prompt_tokens + tokens if inline else workload.prompt_tokens
    return replace(workload, prompt_tokens=prompt, encoder_s=seconds)


def encoder_s(dep, work: EncoderWork) -> float:
    """One request's encoder forward on ``dep``: its kernels, eagerly launched (vLLM captures
    CUDA graphs of the language model's decode only), in 16-bit weights."""
    items = group_items(encoder_groups(dep.model, work, seqs=1, tp=dep.tp), dep.acc, dep.eff,
                        impl=dep.impl)
    kernels_s = sum(i.time_s for i in items)
    cost = launch_cost(sum(i.kernels for i in items), kernels_s, dep.eff, cuda_graph=False,
                       host_calls=sum(i.host_calls for i in items), overlap=dep.host_overlap)
    return kernels_s + cost.total_s


def encoder_summary(workload, dep) -> dict | None:
    """Image tokens and encoder time of a workload ``prepare_images`` prepared for ``dep``, for
    the serving summary; the tokens are prompt tokens (inline) or cross-attention keys and
    values (``style``, ``dep``'s tower's)."""
    if workload.encoder_s is None:
        return None
    with_images = workload.image_tokens > 0
    return {
        "requests_with_images": int(with_images.sum()),
        "images": int(workload.images_per_request.sum()),
        "image_tokens_total": int(workload.image_tokens.sum()),
        "image_tokens_mean": float(workload.image_tokens[with_images].mean()),
        "encoder_s_total": float(workload.encoder_s.sum()),
        "encoder_s_mean": float(workload.encoder_s[with_images].mean()),
        "style": dep.model.vision_tower.style,  # encoder_s is set only for a tower's images
    }


def _cross_images(dep, workload) -> bool:
    """Whether ``workload`` carries image tokens for ``dep``'s cross-attention blocks."""
    tower = dep.model.vision_tower
    return (tower is not None and tower.style == "cross-attention"
            and workload.image_tokens is not None)  # fmt: skip


def cross_kv_deployment(dep, workload):
    """``dep`` whose KV cache also holds each request's image keys and values in every
    cross-attention layer (``blocks.BlockRule``), for a prepared cross-attention workload."""
    if not _cross_images(dep, workload):
        return dep
    return replace(dep, cross_kv_tokens=int(workload.image_tokens.max()))


def cross_attention_step(step, dep, workload, speculator=None, *, disaggregated=False):
    """``step`` with the cross-attention blocks of a prepared workload's images (module
    docstring), or ``step`` itself for any other model or workload."""
    if not _cross_images(dep, workload) or not np.any(workload.image_tokens):
        return step
    if disaggregated:
        raise GpuplanError(f"disaggregated serving of {dep.model.name} with images is not "
                           "simulated (the transfer of its cross-attention cache): serve it "
                           "colocated, or without images")
    if speculator is not None:
        raise GpuplanError(f"speculative decoding of {dep.model.name} with images is not "
                           "simulated (its cross-attention blocks in the draft and verify steps): "
                           "serve it without --speculative, or without images")
    return CrossAttentionStep(step, int(workload.image_tokens[0]))


class CrossAttentionStep:
    """A step model whose iterations also run the cross-attention blocks (``step_model``'s
    interface: ``mixed_s``, ``decode_run_s``, ``decode_iterations_until``; the rest is the
    wrapped model's)."""

    def __init__(self, inner, image_tokens: int):
        self.inner, self.dep, self.image_tokens = inner, inner.dep, image_tokens
        self._memo: dict[tuple[int, int], float] = {}  # (seqs, tokens a sequence): seconds

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def _priced_s(self, groups) -> float:
        from gpuplan.sim.runtime.serving.iteration import price_op

        dep = self.dep
        items = group_items(groups, dep.acc, dep.eff, impl=dep.impl,
                            price_fn=lambda op: price_op(op, dep))
        return sum(i.time_s for i in items)

    def cross_s(self, seqs: int, tokens_per_seq: int) -> float:
        """The cross-attention blocks over ``seqs`` sequences of ``tokens_per_seq`` tokens."""
        key, memo = (seqs, tokens_per_seq), self._memo
        if key not in memo:
            memo[key] = self._priced_s(cross_layer_forward(
                self.dep.model, seqs=seqs, tokens_per_seq=tokens_per_seq,
                image_tokens=self.image_tokens, dtype=self.dep.act_dtype, tp=self.dep.tp))
        return memo[key]

    def mixed_s(self, prefill, decode_seqs: int, decode_kv_tokens: int, sampled: int,
                replay: bool | None = None) -> float:
        step_s = self.inner.mixed_s(prefill, decode_seqs, decode_kv_tokens, sampled, replay)
        step_s += sum(self.cross_s(b, c) for c, _, b in prefill)
        return step_s + (self.cross_s(decode_seqs, 1) if decode_seqs else 0.0)

    def decode_run_s(self, seqs: int, kv_tokens: int, iterations: int) -> float:
        extra = iterations * self.cross_s(seqs, 1)
        return self.inner.decode_run_s(seqs, kv_tokens, iterations) + extra

    def decode_iterations_until(self, seqs: int, kv_tokens: int, elapsed_s: float) -> int:
        """The fewest iterations (at least one) that take ``elapsed_s`` or more."""
        lo, hi = 1, self.inner.decode_iterations_until(seqs, kv_tokens, elapsed_s)
        while lo < hi:  # the wrapped model's answer bounds it: each iteration costs more here
            mid = (lo + hi) // 2
            if self.decode_run_s(seqs, kv_tokens, mid) >= elapsed_s:
                hi = mid
            else:
                lo = mid + 1
        return lo
