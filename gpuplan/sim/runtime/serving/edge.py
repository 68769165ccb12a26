"""Edge deployment: decode tokens per second and memory of a (quantized) model on one device.

For each weight format and small batch (one stream, or a few), the decode step at a given
context comes from the same iteration model as the serving simulator (``step_model``), run on
the device's catalogue entry: its memory bandwidth, its published compute rates (a device with
no 16-bit tensor rate computes at the first rate it publishes, see ``quantization``) and the
reference efficiency fit. What limits the step is the bound holding most of its time: memory
(streaming weights and cache), compute, or launch (kernel issue and fixed costs).

Memory: weights (block projections in their format, the rest in 16 bits), the KV cache of the
batch at the context, and the activation workspace of one step, against the device memory
times ``memory_utilization``; on Jetson and Apple silicon that memory is shared with the CPU.
The CUDA-graph launch model stands for an edge runtime's low-overhead submission (llama.cpp's
CUDA graphs, Metal command buffers).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuplan.errors import check_kind
from gpuplan.hwmodels.architecture import ARCH
from gpuplan.sim.estimate.inputs import check_params
from gpuplan.sim.runtime.serving.deployment import deployment
from gpuplan.sim.runtime.serving.kv_cache import (
    kv_bytes_per_sequence,
    weights_bytes_per_gpu,
    workspace_bytes,
)
from gpuplan.sim.runtime.serving.on_stack import stack_deployment
from gpuplan.sim.runtime.serving.quantization import WEIGHT_DTYPES
from gpuplan.sim.runtime.serving.speculative import check_draft, speculative_decode
from gpuplan.sim.runtime.serving.step_model import Batch, StepModel, iteration_breakdown

if TYPE_CHECKING:
    import pandas as pd

MEMORY_UTILIZATION = 0.9  # share of the (shared) memory the model may take
BATCHES = (1, 2, 4, 8)


def stackless_device(acc) -> bool:
    """Whether ``acc`` has no CUDA or ROCm architecture (Apple silicon): its default stack is then
    none, the generic server priced as before stacks."""
    return acc.key not in ARCH


def limiting_bound(breakdown) -> str:
    """The bound (memory, compute, launch) holding most of a breakdown's time."""
    by = breakdown.frame().groupby("bound")["time_s"].sum()
    return str(by.idxmax())


def edge_row(model, gpu: str, *, weight_dtype: str, kv_dtype: str, batch: int, context: int,
             prompt_tokens: int, fit=None, stack=None, speculation=None,
             draft_model=None) -> dict:  # fmt: skip
    """Decode speed, time to first token and memory of one configuration (``fit``: the
    device's efficiency fit, default its built-in one; ``stack``: the serving stack that runs
    it, default the generic server of ``deployment``)."""
    if stack is None:
        dep = deployment(model, gpu, weight_dtype=weight_dtype, kv_dtype=kv_dtype, fit=fit)
    else:
        dep = stack_deployment(model, gpu, stack, weight_dtype=weight_dtype, kv_dtype=kv_dtype,
                               fit=fit)  # fmt: skip
    step = StepModel(dep)
    kv_read = batch * (context + 1)
    decode = Batch(decode_seqs=batch, decode_kv_tokens=kv_read)
    step_s = step.iteration_s(decode)
    cfg = dep.model
    weights = weights_bytes_per_gpu(cfg, tp=1, weight_dtype=weight_dtype)
    kv = batch * kv_bytes_per_sequence(cfg, context, tp=1, kv_dtype=kv_dtype)
    work = workspace_bytes(cfg, tp=1, tokens=max(batch, prompt_tokens), seqs=batch)
    total = weights + kv + work
    spec = {}
    if speculation is not None:
        draft = None if draft_model is None else StepModel(
            stack_deployment(draft_model, gpu, stack or "gpuplan-server", fit=fit,
                             weight_dtype=weight_dtype, kv_dtype=kv_dtype))  # fmt: skip
        if draft is not None:
            check_draft(dep.model, draft.dep.model)
        got = speculative_decode(step, speculation, seqs=batch, context=context, draft_step=draft)
        spec = {"spec_tokens_per_step": got["tokens_per_step"],
                "spec_tokens_per_s": got["tokens_per_s"], "spec_tpot_s": got["tpot_s"]}  # fmt: skip
    return {
        "device": dep.acc.key,
        "weight_dtype": weight_dtype,
        "kv_dtype": kv_dtype,
        "batch": batch,
        "context": context,
        "step_s": step_s,
        "tokens_per_s": batch / step_s,
        "stream_tokens_per_s": 1.0 / step_s,
        "ttft_s": step.iteration_s(Batch(prefill=((prompt_tokens, 0, 1),))),
        "weights_bytes": weights,
        "kv_bytes": kv,
        "total_bytes": total,
        "device_bytes": dep.acc.hbm_bytes,
        "fits": bool(total <= dep.acc.hbm_bytes * MEMORY_UTILIZATION),
        "bound": limiting_bound(iteration_breakdown(dep, decode)),
        **spec,
    }


def edge_estimates(
    model,
    gpu: str,
    *,
    weight_dtypes: tuple[str, ...] = WEIGHT_DTYPES,
    kv_dtype: str = "bf16",
    batches: tuple[int, ...] = BATCHES,
    context: int = 1024,
    prompt_tokens: int = 512,
    fit=None,
    stack=None,
    speculation=None,
    draft_model=None,
) -> pd.DataFrame:
    """One row per weight format and batch size (``edge_row``)."""
    import pandas as pd

    check_params({"context": context, "tokens": prompt_tokens})
    check_kind("weight_dtypes", weight_dtypes, (tuple, list))
    check_kind("batches", batches, (tuple, list))
    check_kind("speculation", speculation, ("Speculation", None))
    check_kind("fit", fit, ("Efficiency", None))
    for b in batches:
        check_params({"batch": b})
    rows = [
        edge_row(
            model,
            gpu,
            weight_dtype=w,
            kv_dtype=kv_dtype,
            batch=b,
            context=context,
            prompt_tokens=prompt_tokens,
            fit=fit,
            stack=stack,
            speculation=speculation,
            draft_model=draft_model,
        )  # fmt: skip
        for w in weight_dtypes
        for b in batches
    ]
    return pd.DataFrame(rows)
