"""Presets of the serving engines: vLLM, SGLang and TensorRT-LLM, and the unnamed eager engine of
the Splitwise profiles. Each runs the model as ``Stack`` says (attention kernel per phase,
elementwise kernels, host) and adds a ``ServingRuntime``: its CUDA graphs and their batch-size
buckets, its scheduler's defaults and the CPU time it spends per iteration.

Where each choice comes from:

``vllm`` (V1 engine, 0.8 and later):
- attention: its bundled FlashAttention, FA3 on Hopper and FA2 elsewhere
  (``vllm/attention/utils/fa_utils.py``, ``get_flash_attn_version``; ``fa-default``), paged; on
  Blackwell FlashInfer (``vllm/platforms/cuda.py``, "Prefer FlashInfer for Blackwell GPUs"),
  priced as cuDNN's fused attention (``kernels.fa_default``); a CUDA or ROCm GPU needed;
- elementwise: the model is compiled by torch.compile (Inductor) by default
  (vLLM docs, "torch.compile integration"), so elementwise ops are fused Triton kernels;
- all-reduce: its custom one-shot/two-shot kernels under 8 MiB (``all_reduce="custom"``);
- CUDA graphs: piecewise graphs captured for the batch sizes ``[1, 2, 4]`` + multiples of 8 below
  256 + multiples of 16 up to ``min(2 * max_num_seqs, 512)`` (``set_cudagraph_sizes``,
  vllm/config; docs/design/cuda_graphs.md); a decode batch is padded up to the next size;
- scheduler: chunked prefill always on in V1, ``max_num_seqs=256``, ``max_num_batched_tokens``
  8192 for the OpenAI server on GPUs of 70 GiB or more (``EngineArgs``
  ``default_max_num_batched_tokens``), ``block_size=16``, ``gpu_memory_utilization=0.9``
  of the whole device;
- FP8: ``quantization="fp8"`` runs FP8 GEMMs (CUTLASS scaled_mm) and ``kv_cache_dtype="fp8"``
  an FP8 cache (vLLM docs, "FP8 W8A8", "Quantized KV Cache");
- CPU per iteration: the V1 engine core overlaps scheduling with the GPU, but input preparation
  and sampling bookkeeping stay on the critical path: ``iteration_overhead_s`` is an unmeasured
  prior (0.5 ms; only 3 published vLLM rows exist here, too few to fit it).

``sglang`` (0.4):
- attention: FlashInfer's paged kernels, its default backend (SGLang docs, "Attention Backend":
  "FlashInfer (Default for Non-Hopper Machines)"); its prefill kernel is priced as
  FlashAttention-2's (the tiling it follows: Ye et al., MLSys 2025). Where those do not run
  (``on_arch``): on Blackwell (sm_100) SGLang takes ``trtllm_mha``, TensorRT-LLM's FMHA through
  FlashInfer (``python/sglang/srt/server_args.py``: ``is_sm100_supported()`` ->
  ``attention_backend = "trtllm_mha"``), priced as cuDNN's fused attention like vLLM's and
  TensorRT-LLM's Blackwell kernels (``kernels.fa_default``); on ROCm (gfx942, gfx950) ``aiter``
  (the same file: ``is_hip()`` -> ``"aiter"``), AITER's Composable Kernel flash attention,
  priced as FlashAttention-2's ROCm build, itself Composable Kernel's (flash-attention README,
  "AMD ROCm Support"); a CUDA or ROCm GPU needed;
- elementwise: sgl-kernel's fused norm and activation kernels (``fused``);
- CUDA graphs: batch sizes ``[1, 2, 4, 8]`` + multiples of 8 from 16 to ``cuda_graph_max_bs``
  160 (``cuda_graph_runner.get_batch_sizes_to_capture``; docs "CUDA Graph Capture");
- all-reduce: vLLM's custom all-reduce, ported (``all_reduce="custom"``);
- scheduler: ``chunked_prefill_size=8192``, ``mem_fraction_static`` 0.88 of the device, page
  size 1 (priced as blocks of 1 token), running requests bounded by the KV pool only;
- CPU per iteration: the overlap ("zero-overhead") scheduler hides the next batch's scheduling
  behind the current one's kernels (SGLang v0.4 release blog, Dec 2024): 0.

``trt-llm`` (TensorRT-LLM):
- attention: its context FMHA kernels for prefill and XQA/masked MHA for generation
  (TensorRT-LLM docs, "Multi-Head, Multi-Query, and Group-Query Attention"); not priced on
  their own: priced as the FlashAttention build of the device (``fa-default``; cuDNN's fused
  attention on Blackwell), noted; NVIDIA GPUs only (it compiles CUDA kernels): refused on ROCm
  and on devices with neither;
- elementwise: fused into the TensorRT engine (or its PyTorch backend's custom ops);
- host: kernels issued from C++ (the TensorRT engine's enqueue), far cheaper per call than eager
  PyTorch: ``call_factor`` fitted; decode-only iterations replay CUDA graphs, as the PyTorch
  backend (the default since 1.0) does by default (tensorrt_llm/llmapi/llm_args.py
  ``TorchLlmArgs.cuda_graph_config``: ``default_factory=CudaGraphConfig``; "enabled for batches
  that consist of decoding requests only"). Its default capture list is 1-31, 32, 64 and 128
  without padding (``CudaGraphConfig._generate_cuda_graph_batch_sizes``): the other sizes run
  eagerly there, and are priced as replays here (no per-size graph choice is modelled);
- all-reduce: its all-reduce fusion kernels, one-shot up to 128 tokens, two-shot above
  (``all_reduce="fusion"``, sim/runtime/serving/all_reduce.py); the residual add runs inside
  the next RMSNorm (``fused_add_norm``, as every engine here but ``eager-2023``), but the
  all-reduce's own fusion with them (``AllReduceFusionOp.RESIDUAL_RMS_NORM``) is not modelled:
  the all-reduce stays a kernel of its own;
- scheduler: in-flight batching, ``max_batch_size=2048``, ``max_num_tokens=8192`` (BuildConfig
  defaults, tensorrt_llm/builder.py), chunked context off, the KV cache a share 0.9 of the memory
  left free after the weights (``KvCacheConfig.free_gpu_memory_fraction``);
- CPU per iteration: fitted.

``eager-2023``: the engine behind the Splitwise profiles (Patel et al., ISCA 2024; SplitwiseSim
``data/perf_model.csv``), which the file does not name: vLLM-like continuous batching
(``max_num_seqs=256``), every kernel issued eagerly from Python (no CUDA graphs), FlashAttention-2
assumed; its host cost per kernel call (against the reference host's eager PyTorch), its CPU
cost per iteration and per tensor-parallel rank (a Python driver feeding each rank) fitted.
Its prefills of 4096 tokens or more (one long prompt, or 8 and more prompts of 512) run up to
2x slower than the model prices them, worst at TP 8; the cause is not identified, and no term
stands for it (``docs/fits.md``: a slower large all-reduce once stood there, of a form chosen
without a mechanism, and NCCL's own tuning model has none: its time is latency plus bytes over a
bus bandwidth that only grows to its plateau with size, ``src/graph/tuning.cc``
``ncclTopoGetAlgoTime``). Its CPU time per iteration grows with the sequences running
(``seq_overhead_s``, fitted): the profiles' decode step of llama2-70b on H100 at TP 8 goes from
31 ms at batch 1 to 34, 39 and 50 ms at 16, 32 and 64 while its kernels' modelled time moves
by 3 ms: the per-sequence Python work (scheduling, input preparation, sampling bookkeeping) of
engines of that generation (vLLM blog, "vLLM v0.6.0: 1.8-2.7x Throughput Improvements",
2024-09-05: before 0.6, Llama 3 8B on one H100 kept the GPU busy 38% of the time). Every CPU
cost of its A100 machine is ``host_factors`` times its H100 machine's (fitted, 1.5: the DGX A100
has two AMD EPYC 7742, Zen 2, the DGX H100 two Xeon Platinum 8480C, Sapphire Rapids; NVIDIA DGX
user guides, "Hardware Overview"): the profiles' llama2-70b decode at TP 8, host-bound on both,
is 45 ms a step on the A100s against 30 ms on the H100s.

``eager-2023`` is an engine of 2023 on A100 and H100: on Blackwell, where FlashAttention-2 has
no build, it is refused (``--attention-kernel cudnn`` prices it there all the same).

``gpuplan-server``: what ``gpuplan serve`` priced before stacks, its default: FlashAttention-2
(on Blackwell, where it has no build, cuDNN's fused attention, the kernel PyTorch's SDPA takes
there: ``kernels.sdpa_default``; a CUDA or ROCm GPU needed for its CUDA-graph decode),
fused elementwise kernels, decode-only iterations replayed from CUDA graphs without padding, no
CPU time per iteration, vLLM's scheduler defaults of ``SchedulerConfig``.

Fitted values come from ``python3 -m gpuplan.validate.fit_stacks.serving`` on the fit part of the
seeded split of the published rows (``validate.published.serving``), committed in
``gpuplan/sim/runtime/serving/data/stack_fit.json``; nothing else here is fitted.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from gpuplan.errors import GpuplanError, check_choice, check_positive
from gpuplan.sim.runtime.serving.all_reduce import check_all_reduce
from gpuplan.sim.stacks.kernels import FA_DEFAULT
from gpuplan.sim.stacks.stack import AttentionChoice, HostModel, Stack

KV_MEMORY = ("device", "free")  # the KV share is of the whole device, or of what weights leave


@dataclass(frozen=True, slots=True, kw_only=True)
class ServingRuntime:
    """What a serving engine adds to its stack: CUDA graphs and their buckets, scheduler
    defaults (vLLM's names) and the CPU time per iteration not hidden behind the GPU."""

    cuda_graph: bool
    decode_buckets: tuple[int, ...] = ()
    policy: str = "chunked"
    max_seqs: int = 256
    max_batched_tokens: int | None = None  # None: the policy's default (SchedulerConfig)
    block_tokens: int = 16
    kv_memory: str = "device"
    memory_fraction: float = 0.9
    iteration_overhead_s: float = 0.0
    overhead_per_rank_s: float = 0.0  # CPU time per iteration per tensor-parallel rank beyond one
    seq_overhead_s: float = 0.0  # CPU time per iteration per running sequence, not hidden
    # (GPU key, factor): the CPU of the engine's machine with that GPU, as a factor on every host
    # cost (per call, per iteration, per rank, per sequence); a GPU not listed: 1
    host_factors: tuple[tuple[str, float], ...] = ()
    # its tensor-parallel all-reduce kernels (sim/runtime/serving/all_reduce.py): "nccl", vLLM's
    # and SGLang's "custom" one-shot/two-shot kernels, TensorRT-LLM's all-reduce "fusion" kernels
    all_reduce: str = "nccl"
    # each residual add runs inside the RMSNorm after it (compilation.fuse_residual_norms): vLLM's
    # fused_add_rms_norm (or its Inductor form), SGLang's fused_add_rmsnorm, TensorRT-LLM's
    # RMSNorm with a residual; off for an engine whose kernels no source names
    fused_add_norm: bool = True

    def __post_init__(self) -> None:
        check_choice("policy", self.policy, ("continuous", "chunked"))
        check_choice("kv_memory", self.kv_memory, KV_MEMORY)
        check_all_reduce(self.all_reduce)
        check_positive("max_seqs", self.max_seqs)
        check_positive("block_tokens", self.block_tokens)
        for name in ("iteration_overhead_s", "overhead_per_rank_s", "seq_overhead_s"):
            check_positive(name, getattr(self, name), allow_zero=True)
        for pair in self.host_factors:
            if (not isinstance(pair, tuple) or len(pair) != 2 or not isinstance(pair[0], str)
                    or not 0 < pair[1] < float("inf")):  # fmt: skip
                raise GpuplanError(f"host_factors={self.host_factors!r} is invalid: give "
                                   "(GPU key, factor > 0) pairs")
        if not 0 < self.memory_fraction <= 1:
            raise GpuplanError(f"memory_fraction={self.memory_fraction} is invalid: it must be "
                               "in (0, 1]")

    def host_factor(self, gpu: str) -> float:
        """The CPU cost factor of the engine's machine with ``gpu`` (1 when not listed)."""
        return dict(self.host_factors).get(gpu, 1.0)

    def overhead_s(self, tp: int) -> float:
        """CPU time per iteration of a replica of ``tp`` GPUs."""
        return self.iteration_overhead_s + self.overhead_per_rank_s * (tp - 1)


def vllm_buckets(max_num_seqs: int = 256) -> tuple[int, ...]:
    """vLLM's CUDA-graph capture sizes (``set_cudagraph_sizes``)."""
    top = min(2 * max_num_seqs, 512)
    sizes = [1, 2, 4, *range(8, 256, 8), *range(256, top + 1, 16)]
    return tuple(s for s in sizes if s <= top)


SGLANG_BUCKETS = (1, 2, 4, 8, *range(16, 161, 8))


# the serving engines' fit (``python3 -m gpuplan.validate.fit_stacks.serving`` writes it), beside
# the serving simulator, read without importing it (the registry stays light)
FIT_PATH = Path(__file__).resolve().parents[1] / "runtime" / "serving" / "data" / "stack_fit.json"


def _fitted() -> dict:
    try:
        return json.loads(FIT_PATH.read_text())["stacks"]
    except FileNotFoundError:
        return {}


_FIT = _fitted()


# every fitted field's prior, by stack: the value before any fit, which a stack takes where
# no source but the one left out runs it (``validate.fit_stacks.serving_loso``)
PRIORS: dict[str, dict[str, object]] = {}


def _fit(stack: str, name: str, prior: float) -> float:
    """The committed fitted value of ``stack``'s ``name``, or its prior before any fit."""
    PRIORS.setdefault(stack, {})[name] = prior
    return float(_FIT.get(stack, {}).get(name, prior))


def _fit_pairs(stack: str, name: str) -> tuple[tuple[str, float], ...]:
    """The committed fitted (key, value) pairs of ``stack``'s ``name`` (none before any fit)."""
    PRIORS.setdefault(stack, {})[name] = ()
    return tuple((k, float(v)) for k, v in _FIT.get(stack, {}).get(name, ()))


_FA = AttentionChoice(prefill=FA_DEFAULT, train=FA_DEFAULT, decode=FA_DEFAULT)


def _all(kernel: str) -> AttentionChoice:
    return AttentionChoice(prefill=kernel, train=kernel, decode=kernel)


# the engines' Blackwell kernels (sm_100, and sm_103 which runs them), priced as cuDNN
_CUDNN_ON_BLACKWELL = (("sm_100", _all("cudnn")), ("sm_103", _all("cudnn")))

VLLM = Stack(
    name="vllm",
    title="vLLM V1: FlashAttention (FA3 on Hopper), torch.compile, CUDA-graph buckets, chunked",
    attention=_FA,
    elementwise="compiled",
    moe_glue="fused-moe-triton",
    host=HostModel(mode="cuda_graph"),
    kv_cache="paged",
    logits="last",
    cuda_graph_decode=True,
    platform="cuda-rocm",
    serving=ServingRuntime(cuda_graph=True, decode_buckets=vllm_buckets(256), policy="chunked",
                           max_seqs=256, max_batched_tokens=8192, iteration_overhead_s=5e-4,
                           all_reduce="custom"),
    sources=("vllm/attention/utils/fa_utils.py get_flash_attn_version",
             "vllm/platforms/cuda.py get_attn_backend_cls (FlashInfer on Blackwell)",
             "vllm docs/design/cuda_graphs.md; vllm/config set_cudagraph_sizes",
             "vllm EngineArgs default_max_num_batched_tokens, max_num_seqs, block_size",
             "vllm/model_executor/layers/fused_moe/fused_moe.py fused_experts_impl (MoE)"),
    notes=("iteration_overhead_s=0.5 ms is an unmeasured prior",),
)

SGLANG = Stack(
    name="sglang",
    title="SGLang: FlashInfer attention, fused kernels, CUDA-graph buckets to 160, overlap scheduler",
    attention=AttentionChoice(prefill="flash2", train="flash2", decode="flashinfer"),
    on_arch=(*_CUDNN_ON_BLACKWELL, ("gfx942", _all("flash2")), ("gfx950", _all("flash2"))),
    platform="cuda-rocm",
    elementwise="fused",
    moe_glue="fused-moe-triton",
    host=HostModel(mode="cuda_graph"),
    kv_cache="paged",
    logits="last",
    cuda_graph_decode=True,
    serving=ServingRuntime(cuda_graph=True, decode_buckets=SGLANG_BUCKETS, policy="chunked",
                           max_seqs=4096, max_batched_tokens=8192, block_tokens=1,
                           memory_fraction=0.88, iteration_overhead_s=0.0, all_reduce="custom"),
    sources=("SGLang docs, 'Attention Backend' and 'CUDA Graph Capture'",
             "sglang/srt/server_args.py (chunked_prefill_size, mem_fraction_static)",
             "sglang/srt/server_args.py attention_backend: trtllm_mha on sm100, aiter on HIP",
             "SGLang v0.4 release blog (zero-overhead batch scheduler)",
             "sglang/srt/layers/moe/fused_moe_triton/fused_moe.py fused_experts_impl (MoE)"),
    notes=("FlashInfer's prefill kernel priced as FlashAttention-2, the design it follows "
           "(Ye et al., FlashInfer, MLSys 2025)",
           "Blackwell: trtllm_mha priced as cuDNN's fused attention; ROCm: aiter priced as "
           "FlashAttention-2's ROCm build"),
)

TRT_LLM = Stack(
    name="trt-llm",
    title="TensorRT-LLM: fused engine, C++ runtime, in-flight batching, FP8 kernels",
    attention=_FA,
    elementwise="fused",
    moe_glue="cutlass-moe",
    host=HostModel(mode="eager", call_factor=_fit("trt-llm", "call_factor", 0.2)),
    platform="cuda",
    kv_cache="paged",
    logits="last",
    cuda_graph_decode=True,
    serving=ServingRuntime(cuda_graph=True, policy="continuous", max_seqs=2048,
                           max_batched_tokens=8192, block_tokens=64, kv_memory="free",
                           memory_fraction=0.9,
                           iteration_overhead_s=_fit("trt-llm", "iteration_overhead_s", 0.0),
                           all_reduce="fusion"),
    sources=("TensorRT-LLM docs, 'Multi-Head, Multi-Query, and Group-Query Attention' (XQA)",
             "tensorrt_llm/builder.py BuildConfig (max_batch_size, max_num_tokens)",
             "TensorRT-LLM KvCacheConfig.free_gpu_memory_fraction (0.9)",
             "cpp/tensorrt_llm/kernels/cutlass_kernels/moe_gemm/moe_kernels.cu runMoe (MoE)"),
    notes=("context FMHA and XQA priced as the device's FlashAttention build (not fitted apart)",
           "call_factor and iteration_overhead_s fitted on published rows (stack_fit.json)"),
)

EAGER_2023 = Stack(
    name="eager-2023",
    title="the Splitwise profiles' engine (not named): eager PyTorch, continuous batching",
    attention=AttentionChoice(prefill="flash2", train="flash2", decode="flash2"),
    elementwise="fused",
    host=HostModel(mode="eager", call_factor=_fit("eager-2023", "call_factor", 1.0)),
    platform="cuda-rocm",
    kv_cache="paged",
    logits="last",
    serving=ServingRuntime(cuda_graph=False, policy="continuous", max_seqs=256,
                           fused_add_norm=False,  # the engine is not named: no fusion claimed
                           iteration_overhead_s=_fit("eager-2023", "iteration_overhead_s", 0.0),
                           overhead_per_rank_s=_fit("eager-2023", "overhead_per_rank_s", 0.0),
                           seq_overhead_s=_fit("eager-2023", "seq_overhead_s", 0.0),
                           host_factors=_fit_pairs("eager-2023", "host_factors")),
    sources=("Patel et al., Splitwise, ISCA 2024; SplitwiseSim data/perf_model.csv",),
    notes=("engine not stated by its source: FlashAttention-2 and fused kernels assumed",
           "call_factor, iteration_overhead_s and overhead_per_rank_s fitted on published rows",
           "seq_overhead_s (CPU per running sequence per iteration) fitted",
           "host_factors: the A100 machine's CPU costs against the H100 machine's, fitted"),
)

GPUPLAN_SERVER = Stack(
    name="gpuplan-server",
    title="the simulator's generic server: FlashAttention-2, fused kernels, CUDA-graph decode",
    attention=AttentionChoice(prefill="flash2", train="flash2", decode="flash2"),
    on_arch=_CUDNN_ON_BLACKWELL,
    platform="cuda-rocm",
    elementwise="fused",
    host=HostModel(mode="eager"),
    kv_cache="paged",
    logits="last",
    cuda_graph_decode=True,
    serving=ServingRuntime(cuda_graph=True, policy="continuous", max_seqs=256),
    sources=("gpuplan serve's behaviour before stacks (docs/serving_validation.md)",),
    notes=("no padding to graph buckets and no CPU time per iteration",),
)

# registered by ``registry``, in this order
PRESETS = (VLLM, SGLANG, TRT_LLM, EAGER_2023, GPUPLAN_SERVER)
