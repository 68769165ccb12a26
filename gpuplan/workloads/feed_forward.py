"""The feed-forward half of a transformer block, forward: a dense MLP (SwiGLU, Shazeer 2020,
gate and up as one fused GEMM; or GELU) or a mixture of experts (router, token permutation,
routed and shared experts).

Assumption, named: experts are balanced (each routed expert sees ``tokens * top_k / n_experts``
tokens, or its share among the experts that receive any when they run as grouped GEMMs).
"""

from __future__ import annotations

from dataclasses import replace

from gpuplan.workloads.dtypes import dtype_bytes
from gpuplan.workloads.model import ModelConfig
from gpuplan.workloads.ops import MEMCPY, UNVECTORIZED, Elementwise, Gemm, Memory, Op
from gpuplan.workloads.tensor_parallel import per_rank


def mlp_block(
    cfg: ModelConfig,
    *,
    tokens: int,
    dtype: str,
    tp: int = 1,
    width: int | None = None,
    prefix: str = "",
    count: int = 1,
) -> list[Op]:
    """A dense feed-forward (SwiGLU, GELU or squared ReLU) of ``width`` (default d_ff) split over ``tp``."""
    f = per_rank(width or cfg.d_ff, tp, "d_ff")
    t, h = tokens, cfg.d_model
    if cfg.activation == "swiglu":  # Shazeer 2020: down(silu(gate x) * up x)
        return [
            Gemm(name=f"{prefix}gate_up_proj", m=t, n=2 * f, k=h, dtype=dtype, count=count),
            Elementwise(
                name=f"{prefix}silu_mul",
                op="silu_mul",
                tokens=t,
                hidden=f,
                pass_="fwd",
                dtype=dtype,
                count=count,
            ),
            Gemm(name=f"{prefix}down_proj", m=t, n=h, k=f, dtype=dtype, count=count),
        ]
    # GELU, or Nemotron-H's squared ReLU (transformers' ReLUSquaredActivation: relu, then
    # torch.square): two matrices either way
    act = "relu2" if cfg.activation == "relu2" else "gelu"
    return [
        Gemm(name=f"{prefix}fc1", m=t, n=f, k=h, dtype=dtype, count=count),
        Elementwise(
            name=f"{prefix}{act}",
            op=act,
            tokens=t,
            hidden=f,
            pass_="fwd",
            dtype=dtype,
            count=count,
        ),
        Gemm(name=f"{prefix}fc2", m=t, n=h, k=f, dtype=dtype, count=count),
    ]


def expert_hit_share(cfg: ModelConfig, tokens: float) -> float:
    """The chance that one routed expert receives a token when ``tokens`` tokens each pick
    ``top_k`` of ``n_experts`` uniformly: 1 - (1 - k/n)^tokens (a token picks k distinct experts,
    so it misses a given one with chance 1 - k/n)."""
    return 1.0 - (1.0 - cfg.top_k / cfg.n_experts) ** tokens


def experts_hit(cfg: ModelConfig, tokens: int) -> int:
    """Routed experts that receive a token when ``tokens`` tokens each pick ``top_k`` of
    ``n_experts`` uniformly: the expected count n (1 - (1 - k/n)^tokens), rounded."""
    n = cfg.n_experts
    return max(1, min(n, round(n * expert_hit_share(cfg, tokens))))


def moe_block(cfg: ModelConfig, *, tokens: int, dtype: str, tp: int = 1,
              grouped: bool = False, glue: str = "none") -> list[Op]:
    """Router, token permutation, balanced routed experts and shared experts (forward).

    ``grouped``: the routed experts run as one grouped GEMM per projection over the experts
    that received tokens (``torch.nn.functional.grouped_mm``, Hugging Face transformers'
    ``experts_implementation="grouped_mm"``, docs/source/en/experts_interface.md), so their
    weights are read only for those experts and each projection and the activation launch one
    kernel; otherwise every expert runs its own GEMMs over an equal share of the tokens.
    ``glue`` (grouped): the code around the grouped GEMMs. ``none`` and ``transformers``: the
    routed rows sorted as transformers' grouped_mm forward sorts them (``_expert_grouping``);
    ``transformers`` (16-bit) also its unvectorized activation and copies
    (``_transformers_glue``). ``fused-moe-triton`` and ``cutlass-moe``: a serving engine's fused
    MoE (``_fused_moe_glue``)."""
    e, rows = dtype, tokens * cfg.top_k
    fused = grouped and glue in FUSED_MOE_GLUES
    ops = _routing(cfg, tokens=tokens, dtype=dtype, permute=not (
        fused and glue == "fused-moe-triton"))
    experts = _routed_experts(cfg, tokens=tokens, dtype=dtype, tp=tp, grouped=grouped)
    if fused:
        ops += _fused_moe_glue(cfg, tokens=tokens, glue=glue)
    elif grouped:
        ops += _expert_grouping(cfg, tokens=tokens, dtype=dtype)
    if grouped and glue == "transformers" and dtype_bytes(e) == 2:
        experts = _transformers_glue(experts, cfg, tokens=tokens, rows=rows, dtype=e, tp=tp)
    ops += experts
    # the rows back to their tokens: a copy of the routed rows; a fused engine's reduce
    # (vLLM moe_sum, SGLang moe_sum_reduce, TensorRT-LLM finalizeMoeRouting) reads the rows and
    # writes the tokens, priced as a copy over their mean
    back = -(-(rows + tokens) // 2) if fused else rows
    ops.append(Elementwise(name="unpermute", op="copy", tokens=back, hidden=cfg.d_model,
                           pass_="fwd", dtype=e))
    if cfg.n_shared_experts:
        ops += mlp_block(
            cfg,
            tokens=tokens,
            dtype=dtype,
            tp=tp,
            width=cfg.d_ff_expert * cfg.n_shared_experts,
            prefix="shared_",
        )
    if cfg.n_shared_experts and cfg.shared_expert_gate:
        ops += _shared_expert_gate(cfg, tokens=tokens, dtype=dtype)
    return ops


def _shared_expert_gate(cfg: ModelConfig, *, tokens: int, dtype: str) -> list[Op]:
    """Qwen2-MoE's gate on the shared expert (``Qwen2MoeSparseMoeBlock``:
    ``sigmoid(shared_expert_gate(x)) * shared_expert_output``): a one-column GEMM, and the
    shared output scaled by one value per token (the sigmoid of a column is negligible)."""
    return [
        Gemm(name="shared_expert_gate", m=tokens, n=1, k=cfg.d_model, dtype=dtype),
        Elementwise(name="shared_expert_gate_mul", op="scale", tokens=tokens, hidden=cfg.d_model,
                    pass_="fwd", dtype=dtype),
    ]


def _routing(cfg: ModelConfig, *, tokens: int, dtype: str, permute: bool = True) -> list[Op]:
    """The router's GEMM and softmax (a fused engine's top-k softmax kernel), and the
    permutation of each token's copies to its experts (``permute``: vLLM's fused_moe GEMM
    gathers the rows itself)."""
    h = cfg.d_model
    ops: list[Op] = [
        Gemm(name="router", m=tokens, n=cfg.n_experts, k=h, dtype=dtype),
        Elementwise(
            name="router_softmax",
            op="softmax",
            tokens=tokens,
            hidden=cfg.n_experts,
            pass_="fwd",
            dtype=dtype,
        ),
    ]
    if permute:
        ops.append(Elementwise(name="permute", op="copy", tokens=tokens * cfg.top_k, hidden=h,
                               pass_="fwd", dtype=dtype))
    return ops


def _routed_experts(cfg: ModelConfig, *, tokens: int, dtype: str, tp: int,
                    grouped: bool) -> list[Op]:
    """The routed experts' MLPs: one per expert over an equal share of the tokens, or (grouped)
    one kernel per projection over the experts that receive tokens (``experts_hit``), the
    activation over every routed row at once."""
    n_run = experts_hit(cfg, tokens) if grouped else cfg.n_experts
    routed_tokens = max(1, round(tokens * cfg.top_k / n_run))
    experts = mlp_block(
        cfg,
        tokens=routed_tokens,
        dtype=dtype,
        tp=tp,
        width=cfg.d_ff_expert,
        prefix="expert_",
        count=n_run,
    )
    if not grouped:
        return experts
    return [replace(op, launches=1) if isinstance(op, Gemm)
            else replace(op, tokens=op.tokens * n_run, count=1) for op in experts]


# the serving engines' fused MoE paths (``Stack.moe_glue``)
FUSED_MOE_GLUES = ("fused-moe-triton", "cutlass-moe")
_INDEX_BYTES = 4  # int32 expert ids and row indices (both engines' index buffers)


def _fused_moe_glue(cfg: ModelConfig, *, tokens: int, glue: str) -> list[Op]:
    """What a serving engine's fused MoE runs beyond the router, the top-k softmax, the
    permutation, the two grouped GEMMs, their activation and the reduce back to the tokens
    (all priced in ``moe_block``): the kernels that sort the routed rows by expert, over int32
    indices (each moves about one index per routed row in and out).

    ``fused-moe-triton``: vLLM ``fused_experts_impl`` (vllm/model_executor/layers/fused_moe/
    fused_moe.py, commit 000d1458): ``moe_align_block_size``, ``fused_moe_kernel`` (w1, rows
    gathered by ``sorted_token_ids``: no permutation copy), ``silu_and_mul``,
    ``fused_moe_kernel`` (w2, the routing weight applied), ``moe_sum``; SGLang's default
    Triton runner the same (python/sglang/srt/layers/moe/fused_moe_triton/fused_moe.py,
    adapted from vLLM's; ``moe_sum_reduce``). ``moe_align_block_size``
    (fused_moe/moe_align_block_size.py, commit 05be9924) launches three kernels:
    ``sorted_ids.fill_``, the ``torch.zeros`` of ``expert_ids`` and the align kernel
    (``ops.moe_align_block_size``; ``sgl_moe_align_block_size`` at 256 experts).

    ``cutlass-moe``: TensorRT-LLM ``CutlassMoeFCRunner::runMoe``: the top-k softmax, the sort
    of the routed rows by expert (v0.9, cpp/tensorrt_llm/kernels/mixtureOfExperts/
    moe_kernels.cu commit 03cff08f: ``CubKeyValueSorter::run`` and
    ``computeTotalRowsBeforeExpert``; 1.x, cutlass_kernels/moe_gemm/moe_kernels.cu:
    ``threeStepBuildExpertMapsSortFirstToken``, three kernels: blockExpertPrefixSum,
    globalExpertPrefixSum, mergeExpertPrefixSum), ``expandInputRowsKernel`` (the
    permutation), the first grouped GEMM, ``doGatedActivation``, the second grouped GEMM and
    ``finalizeMoeRoutingKernel`` (the reduce): three sorting kernels (1.x; v0.9's CUB radix
    sort and offsets kernel, two or more).

    The fp8 paths' activation quantization (vLLM ``per_token_group_quant_fp8`` before each
    grouped GEMM; TensorRT-LLM's fused into the expansion) is not priced here, as no fp8 GEMM's
    is (``sim.runtime.serving.quantization``: W8A8 taken at the GEMM)."""
    rows = tokens * cfg.top_k
    name = "moe_align_block_size" if glue == "fused-moe-triton" else "moe_sort_rows"
    return [Memory(name=name, op="copy", bytes_moved=2 * _INDEX_BYTES * rows, count=3)]


def _expert_grouping(cfg: ModelConfig, *, tokens: int, dtype: str) -> list[Op]:
    """What transformers' grouped_mm_experts_forward (integrations/moe.py) runs beyond the
    routing and the grouped GEMMs to sort the routed rows by expert."""
    rows, h = tokens * cfg.top_k, cfg.d_model
    return [
        # zeros_like, arange, the expanded index's copy, two argsorts (two kernels each),
        # the routing weights' gather, three gathers by the permutation, float, histc,
        # cumsum, the weights' multiply and the inverse permutation's gather: 16 kernels,
        # whose bytes are the four gathers of the routed rows (each read and written)
        Memory(name="expert_grouping", op="copy",
               bytes_moved=8 * rows * h * dtype_bytes(dtype) / 16, count=16),
        # and views that launch nothing: reshape, unsqueeze, two transposes, chunk
        Memory(name="expert_grouping_views", op="copy", bytes_moved=0.0, calls=5),
    ]


def _transformers_glue(experts: list[Op], cfg: ModelConfig, *, tokens: int, rows: int,
                       dtype: str, tp: int) -> list[Op]:
    """The grouped experts as transformers 5.17's grouped_mm forward runs them: the GEMMs kept,
    the activation replaced by its unvectorized silu and multiply, the rest added.

    Seen in a torch.profiler trace of Mixtral-8x7B and DeepSeek-V2-Lite prefills on an H200
    (data/h200_stacks/run6/hf_kernel_profile.json): three ``masked_fill`` passes over the
    grouped GEMMs' rows in and out, the activation's ``silu`` and multiply over the strided
    halves of the gate+up output (TensorIterator's unvectorized kernels), the routing weights'
    multiply (promoted to fp32), the sum over each token's experts and three device-to-device
    copies of the fp32 hidden states, as the kernel families ``UNVECTORIZED`` and ``MEMCPY``
    (``workloads.ops``)."""
    h, f, b = cfg.d_model, cfg.d_ff_expert // tp, dtype_bytes(dtype)
    gemms = [op for op in experts if isinstance(op, Gemm)]
    return [
        # over the rows into and out of each grouped GEMM: [rows, h], [rows, 2f], [rows, h]
        Memory(name="expert_masked_fill", op=UNVECTORIZED,
               bytes_moved=2 * b * rows * (2 * f + 2 * h) / 3, count=3),
        gemms[0],
        Memory(name="expert_silu", op=UNVECTORIZED, bytes_moved=2 * b * rows * f),
        Memory(name="expert_mul", op=UNVECTORIZED, bytes_moved=3 * b * rows * f),
        *gemms[1:],
        Memory(name="expert_weights_mul", op=UNVECTORIZED, bytes_moved=(b + 4) * rows * h),
        Memory(name="expert_combine", op="add", bytes_moved=4 * (rows + tokens) * h),
        Memory(name="expert_copies", op=MEMCPY, bytes_moved=2 * 4 * tokens * h, count=3),
    ]
