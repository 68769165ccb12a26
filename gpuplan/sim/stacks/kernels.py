"""Which attention kernels a device can run, what PyTorch's default dispatch picks there, and
the efficiency a stack's kernels are priced with.

Architectures (NVIDIA "CUDA GPUs - Compute Capability" table; AMD ROCm "GPU hardware
specifications" for gfx942 and gfx950): H100/H200 sm_90, A100 sm_80, L40S/L4 sm_89, Jetson AGX
Orin sm_87, B200/GB200 sm_100, B300/GB300 sm_103; MI300X/MI325X gfx942, MI355X gfx950. Blackwell
Ultra (sm_103) runs what sm_100 runs (``architecture.BLACKWELL``). Kernel support:

- ``flash2``: FlashAttention-2 needs Ampere, Ada or Hopper (Dao-AILab/flash-attention README,
  "Installation and features"; no Blackwell, sm_100, in its releases), and has a ROCm build for
  MI200/MI300 and MI355X (the same README, "AMD ROCm Support": the Composable Kernel backend for
  MI200x, MI250x, MI300x and MI355x); PyTorch's SDPA FLASH_ATTENTION backend is
  that kernel. A stack that names it takes its framework's own kernel on sm_100
  (``Stack.on_arch``, ``stack_attention``).
- ``flash3``: FlashAttention-3 is for Hopper (README of its ``hopper/`` folder: "H100 / H800").
- ``cudnn``: cuDNN's fused flash attention (cuDNN frontend docs, "Scaled Dot Product
  Attention": compute capability 8.0 and newer); NVIDIA only.
- ``efficient``: the memory-efficient (xformers/cutlass) kernel runs on any CUDA GPU from sm_50
  (PyTorch ``sdp_utils.cpp``, ``check_mem_efficient_hardware_support``) and on ROCm (AOTriton,
  whose 0.10 release added gfx950).
- ``math``: plain ATen ops, anywhere PyTorch runs.
- ``eager``: transformers' ``eager_attention_forward``, plain ATen ops too (``hwmodels.attention``).
- ``flashinfer``: FlashInfer's paged kernels need sm_75 or newer (FlashInfer docs, installation).
- ``triton``: llm-foundry's Triton flash attention (``attn_impl: triton``, ``flash_attn_triton``
  on the ``triton-pre-mlir`` build its setup.py pinned, with an sm_90 branch for H100), a
  training/prefill kernel only (no decode); priced at ``attn_kernel_rate`` ``triton_fwd``/``_bwd``.

PyTorch's default SDPA dispatch (``sdpa-default``): PyTorch 2.5 made cuDNN attention the first
choice on Hopper and newer ("cuDNN backend for SDPA ... enabled by default for H100 or newer",
PyTorch 2.5 release notes); observed on an H200 for bf16 prefill forward, backward and
one-query decode (docs/stacks.md). On Ampere and Ada the order starts with flash
(``sdp_utils.cpp``, ``priority_order``); elsewhere the memory-efficient kernel, then math.
"""

from __future__ import annotations

import dataclasses

from gpuplan.errors import GpuplanError
from gpuplan.hwmodels.architecture import ARCH, BLACKWELL
from gpuplan.hwmodels.gemm import GROUPED_CUTLASS_DTYPES

SDPA_DEFAULT = "sdpa-default"  # PyTorch's own dispatch: resolved per device (``sdpa_default``)
TE_DEFAULT = "te-default"  # Transformer Engine's backend choice (``te_default``)
FA_DEFAULT = "fa-default"  # a serving engine's FlashAttention build: FA3 on Hopper (``fa_default``)

_NVIDIA_SM80_UP = {"sm_80", "sm_87", "sm_89", "sm_90", *BLACKWELL}
_ROCM = {"gfx942", "gfx950"}
KERNEL_ARCHS = {
    "flash2": {"sm_80", "sm_87", "sm_89", "sm_90", *_ROCM},
    "flash3": {"sm_90"},
    "cudnn": _NVIDIA_SM80_UP,
    "efficient": _NVIDIA_SM80_UP | _ROCM,
    "flashinfer": _NVIDIA_SM80_UP,
    "triton": {"sm_80", "sm_90"},  # llm-foundry's triton-pre-mlir: A100 and (sm_90 branch) H100
    "math": None,  # anywhere
    "eager": None,  # transformers' eager attention: ATen ops, anywhere
}


def kernel_devices(kernel: str) -> list[str]:
    """Catalogue keys of the devices that can run ``kernel``."""
    archs = KERNEL_ARCHS[kernel]
    return sorted(k for k, a in ARCH.items() if archs is None or a in archs)


def check_kernel(kernel: str, acc, *, field: str = "attention_kernel") -> None:
    """A GpuplanError unless ``acc`` can run ``kernel``: one line naming the architecture the
    kernel lacks and the kernels that run there (what ``--attention-kernel`` may force)."""
    archs = KERNEL_ARCHS[kernel]
    arch = ARCH.get(acc.key)
    if archs is None or arch in archs:
        return
    runs = [k for k, a in KERNEL_ARCHS.items() if a is None or arch in a]
    raise GpuplanError(
        f"{field}={kernel!r} cannot run on {acc.key} ({arch or 'no CUDA/ROCm architecture'}): "
        f"{kernel} has no build for it; it runs: {', '.join(runs)} (--attention-kernel forces one)"
    )


# The GPUs a stack's framework builds for (``Stack.platform``): what it needs, as a test on the
# device's architecture, and how a refusal says it. CUDA graphs and the engines' flash-attention
# builds need CUDA or HIP (vLLM and SGLang have ROCm builds: vLLM docs, "Installation: AMD ROCm";
# SGLang ``server_args.py``, ``aiter`` on HIP); TensorRT-LLM compiles CUDA kernels only
# (TensorRT-LLM docs, "Supported Hardware": NVIDIA GPUs).
PLATFORMS = {
    "any": (lambda arch: True, ""),
    "cuda-rocm": (lambda arch: arch is not None, "a CUDA or ROCm GPU (CUDA graphs, flash kernels)"),
    "cuda": (lambda arch: arch is not None and arch.startswith("sm_"),
             "an NVIDIA GPU (CUDA kernels only)"),
}


def check_platform(stack, acc) -> None:
    """A one-line GpuplanError unless ``stack``'s framework builds for ``acc`` (``PLATFORMS``),
    naming what it needs and a stack that runs there."""
    arch = ARCH.get(acc.key)
    runs, needs = PLATFORMS[stack.platform]
    if runs(arch):
        return
    other = "--stack vllm or --stack sglang" if arch else "--stack pytorch (its math attention)"
    raise GpuplanError(
        f"stack {stack.name} cannot run on {acc.key} ({arch or 'no CUDA/ROCm architecture'}): "
        f"it needs {needs}; {other} runs there"
    )


def stack_attention(stack, acc):
    """The stack's attention choice on ``acc``'s architecture: its ``on_arch`` entry there (the
    kernels its framework takes where its usual ones do not run), else ``attention``; the
    framework's platform checked first (``check_platform``)."""
    check_platform(stack, acc)
    return dict(stack.on_arch).get(ARCH.get(acc.key), stack.attention)


def sdpa_default(acc, phase: str) -> str:
    """The kernel PyTorch's SDPA dispatch picks on ``acc`` for a bf16 ``phase`` (docstring)."""
    arch = ARCH.get(acc.key)
    if arch in ("sm_90", *BLACKWELL):
        return "cudnn"
    if arch in ("sm_80", "sm_87", "sm_89", *_ROCM):
        return "flash2"
    return "math"


def te_default(acc) -> str:
    """The fused-attention backend Transformer Engine takes where the stack leaves it: its
    flash backend (FlashAttention-2) where that kernel runs, cuDNN's fused attention elsewhere
    (Blackwell: FlashAttention-2 does not run there; TE docs, "Attention backends")."""
    return "flash2" if ARCH.get(acc.key) in KERNEL_ARCHS["flash2"] else "cudnn"


def fa_default(acc) -> str:
    """The attention a serving engine's bundled FlashAttention runs: FlashAttention-3 on Hopper,
    FlashAttention-2 elsewhere (vLLM ``vllm/attention/utils/fa_utils.py``,
    ``get_flash_attn_version``: "if hopper default to FA3, otherwise stick to FA2"); where
    neither runs (Blackwell, sm_100) the engines take their own Blackwell kernels: vLLM
    FlashInfer (``vllm/platforms/cuda.py``, ``get_attn_backend_cls``: "Prefer FlashInfer for
    Blackwell GPUs", ``is_device_capability(100)``; later ``_get_backend_priorities``, FLASHINFER
    first for ``device_capability.major == 10``), whose sm_100 kernels are TensorRT-LLM's
    (``trtllm_batch_decode_with_kv_cache``, ``trtllm_batch_context_with_kv_cache``, imported by
    ``vllm/v1/attention/backends/flashinfer.py``), and TensorRT-LLM its own FMHA. None has a rate
    of its own here: they are priced as cuDNN's fused attention, the one Blackwell kernel with
    fitted rates (``attn_kernel_rate`` ``cudnn_fwd``/``cudnn_bwd``, the cuDNN decode fraction)."""
    arch = ARCH.get(acc.key)
    if arch in KERNEL_ARCHS["flash3"]:
        return "flash3"
    if arch in KERNEL_ARCHS["flash2"]:
        return "flash2"
    return "cudnn" if arch in KERNEL_ARCHS["cudnn"] else "math"


def resolved_attention(stack, acc):
    """The stack's attention choice on ``acc`` (``stack_attention``) with ``sdpa-default``,
    ``te-default`` and ``fa-default`` resolved there, each kernel checked."""
    choice = stack_attention(stack, acc)
    out = {}
    for phase in ("prefill", "train", "decode"):
        kernel = getattr(choice, phase)
        if kernel == SDPA_DEFAULT:
            kernel = sdpa_default(acc, phase)
        elif kernel == TE_DEFAULT:
            kernel = te_default(acc)
        elif kernel == FA_DEFAULT:
            kernel = fa_default(acc)
        check_kernel(kernel, acc, field=f"stack {stack.name}: attention.{phase}")
        out[phase] = kernel
    return dataclasses.replace(choice, **out)


def stack_efficiency(stack, eff, acc, *, phase: str):
    """``eff`` with the stack's attention kernels for ``phase`` (``prefill``, ``train`` or
    ``decode``: decode-shaped calls take the decode kernel, the rest the phase's), its host
    costs scaled by the stack's host model, and its timing convention (an L2 flush or not)."""
    kernels = resolved_attention(stack, acc)
    other = kernels.train if phase == "train" else kernels.prefill
    host = stack.host
    return dataclasses.replace(
        eff,
        attention_kernel=kernels.decode,
        prefill_attention_kernel=other,
        l2_flushed=stack.l2_flush,
        host_launch_s=eff.host_launch_s * host.call_factor * host.speed_factor,
        autograd_s=eff.autograd_s * host.speed_factor,
        autograd_op_s=eff.autograd_op_s * host.speed_factor,
        collective_host_s=eff.collective_host_s * host.speed_factor,
    )


# --- The fixed cost of one call timed in isolation on an idle GPU ------------------------------
#
# A call timed ``isolated`` (ARCHITECTURE.md ``params.timing``: a synchronize, a CUDA event, the
# call, a CUDA event, a synchronize) starts on an idle GPU: the start event fires at once, and
# the first kernel cannot start before the CPU has issued it, so the CPU's time from the event
# to that kernel's launch is never hidden (CUDA Programming Guide, "Events": an event completes
# when the stream reaches it; "Asynchronous Concurrent Execution": the host issues, the device
# runs what was issued). What that costs depends on what the call does before its first kernel:
# a Python op's dispatch (``elementwise``), cuBLAS's heuristic and launch (``gemm``), SDPA's
# backend checks (``attention``), the autograd engine's start before a backward's first kernel
# (``backward``, added for ``pass: fwd_bwd``), and, where one SDPA backend is forced,
# ``torch.nn.attention.sdpa_kernel``'s enter and exit around the call (``forced_kernel``).
# The measured H200 host's values (``ISOLATED_PRIORS``: rounded medians of isolated minus
# device time of the same case in data/h200_stacks; fitted on the campaign's fit part by
# ``python3 -m gpuplan.validate.fit_stacks`` into ``data/stack_fit.json``, key ``isolated``),
# scaled by the stack's host speed. The harness stack times each call after an L2 flush, which
# gives the CPU a head start instead (``Efficiency.timer_headstart_s``): no cost here.
ISOLATED_KINDS = ("gemm", "elementwise", "attention", "grouped_gemm")
# ``grouped_gemm`` (``torch._grouped_mm``): its prior is the GEMM's; bf16 calls measured 66 us
# more isolated than in a busy stream (median, data/h200_stacks/run4/grouped.jsonl), and it is
# fitted on those; fp32's fallback (a synchronizing copy of the offsets to the host, then one
# mm per group issued from C++) measured 50, 89, 228 and 398 us more at 2, 8, 32 and 64 groups
# (medians, data/h200_stacks run4/grouped.jsonl and run9/sgemm.jsonl): its own fixed cost,
# ``grouped_fallback`` (the GEMM's prior), and ``fallback_group`` per group (prior: a few
# microseconds, about what one cuBLAS launch costs the CPU), fitted on the fp32 calls.
# ``simt_gemm``: a plain fp32 ``mm`` (TF32 off) measured 25 us more isolated than in a busy
# stream against bf16's 46 (medians, data/h200_stacks); its own cost, the GEMM's prior,
# fitted on the fp32 calls
ISOLATED_PRIORS = {"gemm": 40e-6, "elementwise": 25e-6, "attention": 40e-6,
                   "backward": 120e-6, "forced_kernel": 30e-6, "grouped_gemm": 40e-6,
                   "grouped_fallback": 40e-6, "fallback_group": 5e-6, "simt_gemm": 40e-6}


def stack_fit(section: str) -> dict:
    """One section of the committed H200 stack-campaign fit (``data/stack_fit.json``, written by
    ``python3 -m gpuplan.validate.fit_stacks``): ``isolated`` here, ``stacks`` for the presets'
    host factors (``stacks.pytorch``); {} without the file."""
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parent / "data" / "stack_fit.json"
    try:
        return dict(json.loads(path.read_text()).get(section, {}))
    except FileNotFoundError:
        return {}


ISOLATED_CALL_S = ISOLATED_PRIORS | stack_fit("isolated")


def isolated_call_s(stack, kind: str, params, values: dict | None = None) -> float:
    """CPU time before the first kernel of one isolated call of ``kind`` (section above); 0 for
    kinds outside ``ISOLATED_KINDS`` and for a stack that flushes L2 before each call."""
    if kind not in ISOLATED_KINDS or stack.l2_flush:
        return 0.0
    v = ISOLATED_CALL_S | (values or {})
    cost = v[kind]
    if kind == "gemm" and params.get("dtype") == "fp32":
        cost = v["simt_gemm"]
    if kind == "grouped_gemm" and params.get("dtype") not in GROUPED_CUTLASS_DTYPES:
        # torch._grouped_mm's fallback: a fixed cost and each group's mm issued in turn
        cost = v["grouped_fallback"] + params["groups"] * v["fallback_group"]
    if params.get("pass") == "fwd_bwd":
        cost += v["backward"]
    if kind == "attention" and params.get("attention_kernel") is not None:
        cost += v["forced_kernel"]
    return cost * stack.host.speed_factor


def with_isolated_call(bd, stack, kind: str, params, values: dict | None = None):
    """``bd`` with the isolated call's fixed cost as a ``launch`` item (dropped, like every
    launch item, in device timing). It is added to the breakdown's exposed host issue time,
    whose first call it partly repeats: taking that call's eager dispatch out of the issue time
    (the cost counted once) scored the held-out pytorch elementwise records worse on the H200
    campaign (median/p90 8.0/35.2% -> 11.0/37.6%, the fixed cost refitted), so it stays."""
    from gpuplan.sim.estimate.breakdown import Item

    cost = isolated_call_s(stack, kind, params, values)
    if cost <= 0:
        return bd
    item = Item(layer="runtime", category="launch", op="isolated_call", phase="fwd",
                time_s=cost, bound="launch")
    return dataclasses.replace(bd, items=(*bd.items, item))
