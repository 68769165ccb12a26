"""Presets of the stacks users run on one GPU: plain PyTorch, Hugging Face transformers,
torch.compile, and the project's own measurement harness.

Where each choice comes from:

``pytorch`` - PyTorch 2.x as a script runs it: ``F.scaled_dot_product_attention`` with no backend
named (``sdpa-default``: cuDNN on Hopper, flash on Ampere/Ada; ``stacks.kernels``), eager ATen
elementwise kernels, every op issued from Python, a preallocated (static) KV cache as
gpt-fast-style decode loops keep it, ``torch.optim.AdamW`` with its default implementation on
CUDA, which is ``foreach`` (torch.optim docs, "Algorithms": "we default to foreach ... when on
CUDA"; ``fused`` is opt-in), bf16 autocast over fp32 weights, timed in isolation (CUDA events
around one call after a synchronize; no L2 flush).

``hf-transformers`` - the library's eager models built with ``AutoModelForCausalLM``:
``config._attn_implementation == "sdpa"`` (so the same dispatch) except for a family whose
model class sets ``_supports_sdpa = False``, which falls back to ``"eager"``: gpt-oss
(models/gpt_oss/modeling_gpt_oss.py line 378; its attention appends a learned sink logit per
head, which SDPA cannot take), known from the model's ``attention_sinks`` and priced as
``eager_attention_forward``'s ATen kernels (``Stack.eager_without_sdpa``, attention kernel
``eager``; the H100 family records say ``attn_implementation: eager`` for gpt-oss-20b, ``sdpa``
for the rest, Gemma 2 included under transformers 5.17), MoE experts through
``grouped_mm`` (``experts_implementation``), decode with ``DynamicCache`` unless a cache is given,
which concatenates each layer's K/V every step, logits over every position unless
``logits_to_keep`` is passed (observed with transformers 5.17 on an H200, docs/stacks.md); the
Trainer's ``bf16=True`` is autocast over fp32 weights. Its Python modules cost the CPU on top of their ops:
``module_call_s`` per ``nn.Module`` call (PyTorch's ``Module.__call__`` with hooks, kwargs and
HF's output dataclasses; prior 8 us) and ``device_overlap``, the share of the GPU's time its
decode hides behind the CPU (prior 1), are fitted on the H200 campaign's fit part
(``stack_fit.json``), as is ``moe_block_s``, the CPU time of one MoE block beyond its modules
and ops (prior 0; observed: the MoE models' eager prefill and decode spend 30-60 ms more on the
CPU than dense models of as many modules, data/h200_stacks/run2's isolated against kernel
times), and ``attention_plan_s``, cuDNN SDPA's graph build when a decode step's cached length is
new to it (``HostModel.attention_plan_s``; prior 38 ms from the H200 profile, fitted on the
decode records whose cache grows call after call). MoE experts run as grouped GEMMs, and under a StaticCache's mask GQA
keys and values are repeated to every head (``repeat_kv_masked``).

``torch-compile`` - ``torch.compile(model)`` of a transformers model, trained with the eager
``torch.optim.AdamW`` (foreach) beside it. A gpt-oss model compiled is still built with eager
attention (the choice is the model's, made before compiling), so Dynamo traces
``eager_attention_forward``: its matmuls stay cuBLAS calls but Inductor fuses the scale, mask,
sink column and softmax into its own Triton kernels, which no kernel list here describes; the
stack keeps SDPA's pricing for it (not ``eager_without_sdpa``), a known gap with no records to
check it (none of gpt-oss compiled). Inductor fuses elementwise
ops into Triton kernels (``sim.estimate.compilation``), keeps SDPA calls (same dispatch, GQA keys and
values repeated under a StaticCache's mask as the eager model does), and its generated wrapper
still launches
each kernel from Python (``call_factor`` against eager dispatch: prior 0.3, fitted on the
campaign's compiled records); ``mode="reduce-overhead"`` replays decode from CUDA graphs
(docs/stacks.md), each call first running Dynamo's guards and CUDA-graph trees' replay
bookkeeping on the CPU (torch/_inductor/cudagraph_trees.py ``CUDAGraphNode.run``: static-input
checks, input copies, ``graph.replay()``) while the GPU waits (``graph_call_s``: prior 0, fitted
on the campaign's batch-1 compiled decodes); a compiled prefill pays its own fixed CPU cost
before its first kernel (``compiled_call_s``: prior 0, fitted on the compiled prefills), and
its MoE blocks a CPU cost each (``moe_block_s``: prior 0, fitted on the MoE models' compiled
prefills; observed: Mixtral's 2-layer 512-token compiled prefill took 4.5 ms, as long as
Llama-3-8B's 8-layer one, data/h200_stacks/run8).

``harness`` - exactly what ``validate/harness`` forces: FlashAttention-2 for every SDPA call
(``sdpa_kernel(SDPBackend.FLASH_ATTENTION)``), its own Llama-style layer code in eager ATen ops,
fused AdamW on CUDA (``harness/train_step.py``), a preallocated cache, and each timed call after an
L2 flush (``harness/timing.py``): its committed records score under this stack.
"""

from __future__ import annotations

from gpuplan.sim.stacks.kernels import SDPA_DEFAULT, stack_fit
from gpuplan.sim.stacks.stack import AttentionChoice, HostModel, Stack

# The unmeasured priors of the host-side factors below, and the values fitted on the fit part
# (70%, seeded, stratified) of the H200 stack campaign (data/h200_stacks) by
# ``python3 -m gpuplan.validate.fit_stacks --package gpuplan/sim/stacks/data/stack_fit.json``;
# the presets use the fitted value where the file has one.
PRIORS = {
    # attention_plan_s: the H200 profile's cuDNN CPU time at a new decode length (run12: 38 ms
    # over a 4-layer step's 4 calls, one graph build; HostModel.attention_plan_s)
    "hf-transformers": {"module_call_s": 8e-6, "device_overlap": 1.0, "moe_block_s": 0.0,
                        "attention_plan_s": 0.038},
    "torch-compile": {"call_factor": 0.3, "graph_call_s": 0.0, "compiled_call_s": 0.0,
                      "moe_block_s": 0.0},
}
_FIT = stack_fit("stacks")


def _fit(stack: str, name: str) -> float:
    """The committed fitted value of ``stack``'s ``name``, or its prior."""
    return float(_FIT.get(stack, {}).get(name, PRIORS[stack][name]))


_DEFAULT = AttentionChoice(prefill=SDPA_DEFAULT, train=SDPA_DEFAULT, decode=SDPA_DEFAULT)

PYTORCH = Stack(
    name="pytorch",
    title="plain PyTorch 2.x, eager, SDPA default dispatch",
    attention=_DEFAULT,
    elementwise="eager",
    # cuDNN SDPA's graph build at a new decode length is PyTorch's own cost (fitted on the
    # hf-transformers records, whose dynamic caches show it)
    host=HostModel(mode="eager", attention_plan_s=_fit("hf-transformers", "attention_plan_s")),
    kv_cache="static",
    optimizer="foreach",
    moe_autocast_dtype="fp32",  # F.grouped_mm experts under autocast stay fp32 (Stack field)
    sources=(
        "PyTorch 2.5 release notes (cuDNN SDPA default on H100 and newer)",
        "PyTorch aten/src/ATen/native/transformers/cuda/sdp_utils.cpp (priority order)",
        "torch.optim documentation, 'Algorithms' (foreach default on CUDA)",
    ),
)

HF_TRANSFORMERS = Stack(
    name="hf-transformers",
    title="Hugging Face transformers eager models (SDPA, DynamicCache, grouped_mm experts)",
    attention=_DEFAULT,
    elementwise="eager",
    moe="grouped_gemm",
    moe_glue="transformers",
    # training under autocast over fp32 weights (the Trainer's bf16=True): the experts'
    # torch._grouped_mm calls run in fp32 (Stack.moe_autocast_dtype); the H200 campaign's
    # Mixtral steps grow 92 ms per 1,000 tokens over 4.2 TFLOP of expert work: ~46 TFLOP/s
    moe_autocast_dtype="fp32",
    residual_dtype="fp32",  # its models' residual stream under autocast (Stack.residual_dtype)
    host=HostModel(mode="eager", module_call_s=_fit("hf-transformers", "module_call_s"),
                   device_overlap=_fit("hf-transformers", "device_overlap"),
                   moe_block_s=_fit("hf-transformers", "moe_block_s"),
                   attention_plan_s=_fit("hf-transformers", "attention_plan_s")),
    kv_cache="dynamic",
    optimizer="foreach",
    logits="all",
    repeat_kv_masked=True,
    # gpt-oss (attention sinks) runs transformers' eager attention: GptOssPreTrainedModel sets
    # _supports_sdpa = False (Stack.eager_without_sdpa, hwmodels.attention "eager")
    eager_without_sdpa=True,
    sources=(
        "observed with transformers 5.17 on an H200 (docs/stacks.md)",
        "transformers models/gpt_oss/modeling_gpt_oss.py line 378 (_supports_sdpa = False) and "
        "lines 225-253 (eager_attention_forward with sinks), transformers 5.25",
        "transformers DynamicCache.update: torch.cat of each layer's keys and values",
        "transformers integrations/sdpa_attention.py use_gqa_in_sdpa, repeat_kv",
    ),
    notes=("module_call_s (prior 8 us) and device_overlap (prior 1: the CPU runs ahead) fitted "
           "on the H200 campaign's fit part (sim/stacks/data/stack_fit.json)",),
)

TORCH_COMPILE = Stack(
    name="torch-compile",
    title="torch.compile (Inductor): fused elementwise, CUDA-graph decode (reduce-overhead)",
    attention=_DEFAULT,
    elementwise="compiled",
    host=HostModel(mode="compiled", call_factor=_fit("torch-compile", "call_factor"),
                   graph_call_s=_fit("torch-compile", "graph_call_s"),
                   compiled_call_s=_fit("torch-compile", "compiled_call_s"),
                   moe_block_s=_fit("torch-compile", "moe_block_s")),
    kv_cache="static",
    # training over fp32 weights, the MoE experts break the graph: transformers' grouped_mm
    # path refuses non-bf16 weights under compile and its own fallback
    # (``torch.ops.transformers.grouped_mm_fallback``, which casts the input to the weights'
    # dtype) fails in Inductor on ``aten._local_scalar_dense`` and runs eagerly
    # (data/h200_stacks/run5/campaign.log.gz): under autocast its mms are fp32, as in the
    # eager model (Mixtral's compiled steps: -46..-72% priced bf16, within 3% priced fp32)
    moe_autocast_dtype="fp32",
    # ``torch.compile(model)`` compiles the model, not the optimizer: ``torch.optim.AdamW`` runs
    # eagerly in its CUDA default, foreach (torch.optim docs, "Algorithms"), as the campaign's
    # compiled training steps ran it (validate/stack_campaign/hf.py ``_train``; priced fused,
    # they were 23-38% under the measured step, foreach +4..+11% for the dense models)
    optimizer="foreach",
    cuda_graph_decode=True,
    # the compiled model is still transformers' modelling code: under a StaticCache's mask its
    # sdpa_attention_forward repeats GQA keys and values (use_gqa_in_sdpa), and Inductor keeps
    # SDPA as an extern call on materialized inputs (the GQA models' compiled decodes at batch
    # 4-32 went from -45..-73% to -22..-37%, priced with the committed fit, data/h200_stacks)
    repeat_kv_masked=True,
    # and its prefill's causal mask is materialized (Dynamo traces transformers' masking_utils,
    # which keeps the mask while tracing): SDPA computes every score under an explicit mask.
    # The compiled profile (data/h200_stacks/run9/compiled_kernel_profile.json): cuDNN's
    # prefill kernel ran 3.5-3.8 ms a layer at 8,192 tokens against 0.97 ms priced causal
    traced_causal_mask=True,
    sources=(
        "observed with torch 2.11 on an H200: reduce-overhead captures CUDA graphs "
        "(docs/stacks.md)",
        "transformers masking_utils._ignore_causal_mask_sdpa (no skip while tracing)",
        "transformers integrations/sdpa_attention.py use_gqa_in_sdpa, repeat_kv",
    ),
    notes=("call_factor (Inductor wrapper launch vs eager dispatch; prior 0.3), graph_call_s "
           "(a CUDA-graph decode call's fixed CPU cost) and compiled_call_s (a compiled "
           "prefill's) fitted on the H200 campaign's fit part (sim/stacks/data/stack_fit.json)",),
)

HARNESS = Stack(
    name="harness",
    title="the measurement harness: FlashAttention-2 forced, eager layer code, L2 flush",
    attention=AttentionChoice(prefill="flash2", train="flash2", decode="flash2"),
    elementwise="eager",
    # cuDNN SDPA's graph build at a new decode length is PyTorch's own cost (fitted on the
    # hf-transformers records, whose dynamic caches show it)
    host=HostModel(mode="eager", attention_plan_s=_fit("hf-transformers", "attention_plan_s")),
    kv_cache="static",
    optimizer="fused",
    l2_flush=True,
    sources=("gpuplan/validate/harness (timing.py, model.py, train_step.py)",),
)

# registered by ``registry``, in this order
PRESETS = (PYTORCH, HF_TRANSFORMERS, TORCH_COMPILE, HARNESS)
