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

Cross-attention models (Llama 3.2 Vision) with images are refused here: the decode cost of
their cross-attention blocks and the cache their image keys and values take are not simulated
yet (``gpuplan estimate prefill-step`` prices their prefill).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from gpuplan.errors import GpuplanError
from gpuplan.hwmodels.launch import launch_cost
from gpuplan.sim.vision_step import encoder_groups, group_items
from gpuplan.workloads.vision import EncoderWork


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
    if cfg.vision_tower.style != "inline":
        raise GpuplanError(f"{cfg.name} attends to images through cross-attention, whose decode "
                           "cost is not simulated in serve yet: serve it without images, or "
                           "price one prefill with `gpuplan estimate prefill-step --images N`")
    images = workload.images_per_request
    memo: dict[tuple[int, int], float] = {}
    seconds = np.zeros(workload.n)
    for rid in np.flatnonzero(tokens):
        key = (int(images[rid]), int(tokens[rid]))
        if key not in memo:
            memo[key] = encoder_s(dep, EncoderWork.from_image_tokens(cfg.vision_tower, *key))
        seconds[rid] = memo[key]
    return replace(workload, prompt_tokens=workload.prompt_tokens + tokens, encoder_s=seconds)


def encoder_s(dep, work: EncoderWork) -> float:
    """One request's encoder forward on ``dep``: its kernels, eagerly launched (vLLM captures
    CUDA graphs of the language model's decode only), in 16-bit weights."""
    items = group_items(encoder_groups(dep.model, work, seqs=1, tp=dep.tp), dep.acc, dep.eff,
                        impl=dep.impl)
    kernels_s = sum(i.time_s for i in items)
    cost = launch_cost(sum(i.kernels for i in items), kernels_s, dep.eff, cuda_graph=False,
                       host_calls=sum(i.host_calls for i in items), overlap=dep.host_overlap)
    return kernels_s + cost.total_s


def encoder_summary(workload) -> dict | None:
    """Image tokens and encoder time of a prepared workload, for the serving summary."""
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
    }
