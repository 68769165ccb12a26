"""What a stack is: the ``Stack`` of choices a framework makes (attention kernel per phase,
elementwise implementation, MoE, KV cache, optimizer, timing), its ``HostModel`` (what the CPU
costs) and the names each choice may take. The presets are in ``pytorch``, ``training`` and
``serving``; ``registry`` finds them by name."""


from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from gpuplan.errors import GpuplanError, check_choice
from gpuplan.hwmodels.attention import ATTENTION_KERNELS  # the kernels priced
from gpuplan.sim.stacks.kernels import (
    FA_DEFAULT,
    PLATFORMS,
    SDPA_DEFAULT,
    TE_DEFAULT,
    resolved_attention,
)

# Training-only kernels (no decode): llm-foundry's Triton flash attention (``attn_impl: triton``)
TRAIN_ONLY_KERNELS = ("triton",)
ELEMENTWISE_IMPLS = ("eager", "fused", "compiled")
HOST_MODES = ("eager", "cuda_graph", "compiled")
KV_CACHES = ("dynamic", "static", "paged")
MOE_IMPLS = ("grouped_gemm", "expert_loop")
MOE_GLUES = ("none", "transformers", "fused-moe-triton", "cutlass-moe")
# How a training step runs an MoE block's routed experts (``--expert-gemms``): ``grouped``,
# one grouped GEMM per expert projection per layer per pass over the experts that receive
# tokens, one kernel and one host call each, priced by ``hwmodels.gemm.grouped_gemm_time``
# (torch._grouped_mm's CUTLASS kernel, measured on the H200; its efficiency for many small
# groups in a training step is not measured); ``per-expert``, every expert's GEMMs launched
# apart (a plain loop over nn.Linear experts).
EXPERT_GEMMS = ("grouped", "per-expert")
MOE_AUTOCAST_DTYPES = ("bf16", "fp32")  # the dtype MoE experts' GEMMs run in under autocast
RESIDUAL_DTYPES = ("bf16", "fp32")  # the residual stream's dtype under autocast
OPTIMIZERS = ("foreach", "fused")
TIMINGS = ("isolated", "device")
MIXED_PRECISION = ("autocast", "bf16-params")


@dataclass(frozen=True, slots=True, kw_only=True)
class AttentionChoice:
    """The fused-attention kernel of each phase (a name of ``ATTENTION_KERNELS`` or
    ``sdpa-default``): a prefill forward, a training forward+backward, a one-query decode."""

    prefill: str
    train: str
    decode: str

    def __post_init__(self) -> None:
        for phase in ("prefill", "train", "decode"):
            extra = TRAIN_ONLY_KERNELS if phase != "decode" else ()
            check_choice(f"attention.{phase}", getattr(self, phase),
                         (*ATTENTION_KERNELS, *extra, SDPA_DEFAULT, TE_DEFAULT, FA_DEFAULT))


@dataclass(frozen=True, slots=True, kw_only=True)
class HostModel:
    """What the CPU costs: per torch call (a factor on the fitted eager issue time), per Python
    module call of a framework's model code, and the host's speed against the reference host
    (a factor on every host cost: 2.0 is a CPU twice as slow; measured by
    ``python3 -m gpuplan.validate.harness.host_probe`` on the user's machine)."""

    mode: str = "eager"  # eager: every op issued from Python; cuda_graph: one replay per step
    call_factor: float = 1.0
    module_call_s: float = 0.0  # CPU time of one nn.Module.__call__ beyond its ops
    # CPU time of one MoE block beyond its modules and ops (a framework's routing on the host)
    moe_block_s: float = 0.0
    speed_factor: float = 1.0
    # share of the device's time the CPU's issue time hides behind (``launch.launch_cost``)
    device_overlap: float = 1.0
    # CPU time of one call of a compiled model replayed from CUDA graphs, before its graph
    # launches: Dynamo's guards and CUDA-graph trees' own bookkeeping per replay (not hidden:
    # the GPU has nothing queued until the replay)
    graph_call_s: float = 0.0
    # CPU time of one call of a compiled model run without CUDA graphs (a prefill) before its
    # first kernel: Dynamo's guards and the compiled wrapper's entry, the GPU waiting
    compiled_call_s: float = 0.0
    # CPU time of cuDNN SDPA's graph build for an attention shape it has not run yet: PyTorch
    # caches the cuDNN MHA graphs by shape (aten/src/ATen/native/cudnn/MHA.cpp), so an eager
    # decode step whose cached length is new (a DynamicCache in a generate loop) builds one,
    # once a step (every layer shares the shape); a static or paged cache's length does not
    # change. The H200 profile (data/h200_stacks/run12): 38 ms of CPU in
    # aten::_cudnn_attention_forward a step at a new length, 0.2 ms at a repeated one
    attention_plan_s: float = 0.0

    def __post_init__(self) -> None:
        check_choice("host.mode", self.mode, HOST_MODES)
        if not (0 <= self.device_overlap <= 1):
            raise GpuplanError(f"host.device_overlap={self.device_overlap!r} is invalid: it "
                               "must be in [0, 1]")
        for name in ("call_factor", "speed_factor"):
            value = getattr(self, name)
            if not (value > 0 and value < float("inf")):
                raise GpuplanError(f"host.{name}={value!r} is invalid: it must be a finite "
                                   "number greater than zero")
        for name in ("module_call_s", "moe_block_s", "graph_call_s", "compiled_call_s",
                     "attention_plan_s"):
            if not (0 <= getattr(self, name) < 1):
                raise GpuplanError(f"host.{name}={getattr(self, name)!r} is invalid: it must "
                                   "be in [0, 1) seconds")


@dataclass(frozen=True, slots=True, kw_only=True)
class Stack:
    """One named software stack: its choices, and where they come from (``sources``)."""

    name: str
    title: str
    attention: AttentionChoice
    elementwise: str = "eager"  # eager ATen kernels, hand-fused, or torch.compile's Triton
    moe: str = "grouped_gemm"
    # the library code around the grouped GEMMs (``workloads.feed_forward.moe_block``'s
    # ``glue``): ``none`` (the routing's gathers and the sort of the routed rows as
    # transformers' grouped_mm forward runs it: the stacks whose MoE glue is not modelled
    # apart), ``transformers`` (its grouped_mm experts forward, as an H200 profile of
    # transformers 5.17 shows it), ``fused-moe-triton`` (vLLM's and SGLang's Triton fused_moe)
    # or ``cutlass-moe`` (TensorRT-LLM's CUTLASS MoE runner)
    moe_glue: str = "none"
    # the dtype the routed experts' GEMMs run in when training under autocast over fp32 weights
    # (``mixed_precision='autocast'``): ``fp32`` where they are ``torch._grouped_mm`` calls,
    # which autocast leaves in the inputs' dtype (``_grouped_mm`` is on none of the CUDA cast
    # lists of aten/src/ATen/autocast_mode.cpp, torch 2.9-2.11) and whose CUDA kernel is
    # CUTLASS for bf16 only: fp32 runs ``_grouped_mm_fallback`` (ATen native/GroupedMMUtils.h),
    # one fp32 ``mm`` per expert (SIMT SGEMM: ``allow_tf32`` is False by default)
    moe_autocast_dtype: str = "bf16"
    # training: how the routed experts' GEMMs launch (``EXPERT_GEMMS``);
    # None: as the stack's framework ships it (``LayoutDefaults.grouped_experts``)
    expert_gemms: str | None = None
    # training under autocast over fp32 weights that nothing else casts (transformers' eager
    # models under the Trainer's bf16=True): the residual stream is fp32 (the embedding's
    # output), so the norms, the residual adds and RoPE (cos and sin take the hidden states'
    # dtype, LlamaRotaryEmbedding.forward) run in fp32 and each Linear casts its fp32 input to
    # bf16 (autocast caches the casts of leaf weights only); ``bf16``: none of that
    residual_dtype: str = "bf16"
    host: HostModel = HostModel()
    kv_cache: str = "static"  # of a decode: dynamic (torch.cat per step), static, paged
    optimizer: str = "fused"  # AdamW: foreach (temporaries of every parameter) or fused
    mixed_precision: str = "autocast"  # autocast over fp32 weights, or bf16 weights + fp32 master
    logits: str = "all"  # a prefill's LM head over every token (``all``) or the last (``last``)
    timing: str = "isolated"  # how its measurements are taken (ARCHITECTURE.md record contract)
    l2_flush: bool = False  # its timed calls follow an L2 flush (a harness convention)
    cuda_graph_decode: bool = False  # decode replayed from a CUDA graph by default
    overlap_tp: bool = False  # training: TP collectives hidden behind GEMMs
    overlap_dp: bool = True  # training: gradient reduction hidden behind the backward
    overlap_pp: bool = False  # training: pipeline sends hidden behind compute
    # training: gradients kept in a buffer between steps (Megatron's and DDP's buckets) rather
    # than freed by zero_grad(set_to_none=True), PyTorch's default for a plain training loop
    grads_persist: bool = False
    # attention under an explicit mask copies K/V to every query head first (GQA through
    # ``repeat_kv``): transformers' ``sdpa_attention_forward`` passes ``enable_gqa`` only when
    # ``attention_mask is None`` (integrations/sdpa_attention.py ``use_gqa_in_sdpa``), and a
    # StaticCache decode always has a mask (the positions past the context are masked)
    repeat_kv_masked: bool = False
    # a prefill's causal attention takes a materialized mask: transformers' masking_utils skips
    # the mask for SDPA's ``is_causal`` only when not tracing (``_ignore_causal_mask_sdpa``;
    # under Dynamo before torch 2.14 it never skips), so a compiled model's SDPA gets an
    # ``attn_mask`` and no ``is_causal`` (``sim.estimate.inference.sliding_window_masked``)
    traced_causal_mask: bool = False
    # the framework builds transformers' models, which run ``eager_attention_forward`` where the
    # family does not support SDPA (``PreTrainedModel._supports_sdpa = False``: transformers
    # falls back to eager, modeling_utils.py ``get_correct_attn_implementation``). Known from a
    # model's structure: attention sinks (gpt-oss, modeling_gpt_oss.py line 378: SDPA cannot
    # take the sink column). ``for_model`` applies it to the phases left to SDPA's dispatch
    eager_without_sdpa: bool = False
    # a serving engine's runtime: CUDA-graph buckets, scheduler defaults, CPU cost per iteration
    # (``stacks.serving.ServingRuntime``); None for the stacks that are not serving engines
    serving: object | None = None
    # a training framework's runtime: the layouts it runs, gradient buckets and reduction dtype,
    # ZeRO-3 gather granularity, selective recomputation (``stacks.training.TrainingRuntime``);
    # None: PyTorch's own DDP/FSDP wrappers (``stacks.training.PYTORCH_RUNTIME``)
    training: object | None = None
    # the attention the framework takes on an architecture where ``attention`` does not run
    # (the kernel that exists there): (architecture, AttentionChoice) pairs, sourced in the
    # preset's docstring (``sim.stacks.kernels.stack_attention``)
    on_arch: tuple[tuple[str, AttentionChoice], ...] = ()
    # the GPUs the framework builds for (``kernels.PLATFORMS``): ``any`` (PyTorch: its math
    # attention runs anywhere), ``cuda-rocm`` (CUDA or HIP kernels and graphs), ``cuda``
    platform: str = "any"
    sources: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        check_choice("platform", self.platform, tuple(PLATFORMS))
        check_choice("elementwise", self.elementwise, ELEMENTWISE_IMPLS)
        check_choice("moe", self.moe, MOE_IMPLS)
        check_choice("moe_glue", self.moe_glue, MOE_GLUES)
        if self.expert_gemms is not None:
            check_choice("expert_gemms", self.expert_gemms, EXPERT_GEMMS)
        check_choice("moe_autocast_dtype", self.moe_autocast_dtype, MOE_AUTOCAST_DTYPES)
        check_choice("residual_dtype", self.residual_dtype, RESIDUAL_DTYPES)
        check_choice("kv_cache", self.kv_cache, KV_CACHES)
        check_choice("optimizer", self.optimizer, OPTIMIZERS)
        check_choice("mixed_precision", self.mixed_precision, MIXED_PRECISION)
        check_choice("logits", self.logits, ("all", "last"))
        check_choice("timing", self.timing, TIMINGS)

    @property
    def measured(self) -> bool:
        """Whether committed measurements of this stack's own runs back its choices: the
        harness's records, and the H200 stack campaign's (``data/runs.json``, ``stack_runs``)."""
        return self.name in MEASURED_STACKS

    def for_model(self, cfg) -> Stack:
        """This stack as it runs ``cfg``: under ``eager_without_sdpa``, a model whose family
        has no SDPA path (``sdpa_unsupported``) takes transformers' eager attention in every
        phase left to SDPA's default dispatch (a kernel forced by the user stays)."""
        if not (self.eager_without_sdpa and sdpa_unsupported(cfg)):
            return self
        pick = {p: "eager" for p in ("prefill", "train", "decode")
                if getattr(self.attention, p) == SDPA_DEFAULT}
        if not pick:
            return self
        return dataclasses.replace(self, attention=dataclasses.replace(self.attention, **pick),
                                   on_arch=())

    def describe(self, acc=None) -> str:
        """One line for a printout: the stack and, on a device, the kernels it resolves to."""
        what = f"stack {self.name}"
        if acc is not None:
            k = resolved_attention(self, acc)
            what += (f" (attention prefill {k.prefill}, train {k.train}, decode {k.decode}; "
                     f"elementwise {self.elementwise}; host {self.host.mode})")
        return what


def sdpa_unsupported(cfg) -> bool:
    """Whether transformers' modelling code of ``cfg``'s family refuses SDPA (``_supports_sdpa
    = False``), as far as the model's structure tells: attention sinks (gpt-oss,
    models/gpt_oss/modeling_gpt_oss.py line 378, transformers 5.17 to 5.25; the H100 family
    records' ``hf.attn_implementation`` is ``eager`` for gpt-oss-20b). Gemma-2's logit
    softcapping is not here: its records ran ``sdpa`` under transformers 5.17
    (data/families_h100/families.jsonl), though 5.25 sets ``_supports_sdpa = False`` for it."""
    return bool(getattr(cfg, "attention_sinks", False))


# stacks whose own runs are committed measurements (docs/validation.md, a table per stack)
MEASURED_STACKS = ("harness", "pytorch", "hf-transformers", "torch-compile")
MEASURED_ON = "h200"  # the device those runs were measured on
