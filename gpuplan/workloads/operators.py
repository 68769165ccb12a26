"""The operators of a forward and a backward pass: GEMMs, attention, norms, activations, adds.

``layer_forward`` lists the kernels of one transformer block for ``tokens = batch * seq`` tokens
in the order eager PyTorch runs them (Hugging Face's Llama, GPT-2, Mixtral and DeepSeek
modules); ``backward_of`` turns a forward list into its backward: each GEMM ``Y = X W`` into a
data-gradient GEMM (dX = dY W^T: m, k swapped with n) and a weight-gradient GEMM
(dW = X^T dY: m=k_in, n=n_out, k=tokens); each elementwise op into its ``bwd`` variant; attention
into the flash backward. ``model_forward`` and ``model_backward`` add the embedding, the final
norm, the LM head and the loss. Tensor parallelism (Megatron column/row split, Shoeybi et al.
2019) divides heads and FFN widths by ``tp``; the collectives it needs are added by ``sim``.

Assumptions, named: experts are balanced (each routed expert sees ``tokens * top_k / n_experts``
tokens); bias adds are fused into the GEMM epilogue (cuBLASLt); q, k, v are one fused GEMM and so are gate and up (Megatron-LM, vLLM); elementwise ops
are ideal single kernels unless ``sim.compilation.eager`` rewrites them as eager PyTorch runs them.
"""

from __future__ import annotations

from dataclasses import replace

from gpuplan.errors import GpuplanError
from gpuplan.workloads.dtypes import dtype_bytes
from gpuplan.workloads.memory import kv_cache_bytes_per_token_layer
from gpuplan.workloads.model import ModelConfig
from gpuplan.workloads.ops import (
    MEMCPY,
    QKV_VIEW_CALLS,
    UNVECTORIZED,
    Attention,
    Elementwise,
    Gemm,
    Memory,
    Op,
)


def _div(value: int, tp: int, what: str) -> int:
    if value % tp:
        raise GpuplanError(f"tp={tp} does not divide {what}={value}")
    return value // tp


def attention_block(
    cfg: ModelConfig,
    *,
    batch: int,
    seq_q: int,
    seq_kv: int,
    dtype: str,
    tp: int = 1,
    causal: bool | None = None,
    window: int = 0,
) -> list[Op]:
    """Projections, RoPE, fused attention (through a sliding ``window`` of keys when > 0) and
    output projection of one block (forward)."""
    t, h = batch * seq_q, cfg.d_model
    hq, hkv = _div(cfg.n_heads, tp, "n_heads"), max(1, cfg.n_kv_heads // tp)
    dqk, dv = cfg.qk_head_dim, cfg.v_dim_per_head
    ops: list[Op] = []
    if cfg.is_mla:  # DeepSeek-V2 sec. 2.1: low-rank query and joint key-value compression
        if cfg.q_lora_rank:
            ops += [
                Gemm(name="q_a_proj", m=t, n=cfg.q_lora_rank, k=h, dtype=dtype),
                Gemm(name="q_b_proj", m=t, n=hq * dqk, k=cfg.q_lora_rank, dtype=dtype),
            ]
        else:
            ops.append(Gemm(name="q_proj", m=t, n=hq * dqk, k=h, dtype=dtype))
        ops += [
            Gemm(
                name="kv_a_proj", m=t, n=cfg.kv_lora_rank + cfg.qk_rope_head_dim, k=h, dtype=dtype
            ),
            Gemm(
                name="kv_b_proj",
                m=t,
                n=hq * (cfg.qk_nope_head_dim + dv),
                k=cfg.kv_lora_rank,
                dtype=dtype,
            ),
        ]
    else:
        # one fused projection, as Megatron-LM and vLLM run q, k and v
        ops.append(Gemm(name="qkv_proj", m=t, n=hq * dqk + hkv * (dqk + dv), k=h, dtype=dtype))
        # views only: no kernel, but a CPU dispatch each in eager PyTorch
        ops.append(Memory(name="qkv_views", op="view", bytes_moved=0, calls=QKV_VIEW_CALLS))
    if cfg.position == "rope":
        rope_k = hkv * (cfg.qk_rope_head_dim if cfg.is_mla else dqk)
        ops += [
            Elementwise(
                name="rope_q", op="rope", tokens=t, hidden=hq * dqk, pass_="fwd", dtype=dtype
            ),
            Elementwise(
                name="rope_k", op="rope", tokens=t, hidden=rope_k, pass_="fwd", dtype=dtype
            ),
        ]
    ops += [
        Attention(
            name="attention",
            batch=batch,
            heads_q=hq,
            heads_kv=hkv,
            seq_q=seq_q,
            seq_kv=seq_kv,
            head_dim=dqk,
            v_head_dim=dv,
            causal=cfg.causal if causal is None else causal,
            pass_="fwd",
            dtype=dtype,
            window=window,
        ),
        Elementwise(
            name="attn_out_layout", op="copy", tokens=t, hidden=hq * dv, pass_="fwd", dtype=dtype
        ),  # (b, h, s, d) -> (b, s, h*d) made contiguous for o_proj
        Gemm(name="o_proj", m=t, n=h, k=hq * dv, dtype=dtype),
    ]
    return ops


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
    """A dense feed-forward (SwiGLU or GELU) of ``width`` (default d_ff) split over ``tp``."""
    f = _div(width or cfg.d_ff, tp, "d_ff")
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
    return [
        Gemm(name=f"{prefix}fc1", m=t, n=f, k=h, dtype=dtype, count=count),
        Elementwise(
            name=f"{prefix}gelu",
            op="gelu",
            tokens=t,
            hidden=f,
            pass_="fwd",
            dtype=dtype,
            count=count,
        ),
        Gemm(name=f"{prefix}fc2", m=t, n=h, k=f, dtype=dtype, count=count),
    ]


def experts_hit(cfg: ModelConfig, tokens: int) -> int:
    """Routed experts that receive a token when ``tokens`` tokens each pick ``top_k`` of
    ``n_experts`` uniformly: the expected count n (1 - (1 - k/n)^tokens), rounded."""
    n, k = cfg.n_experts, cfg.top_k
    return max(1, min(n, round(n * (1.0 - (1.0 - k / n) ** tokens))))


def moe_block(cfg: ModelConfig, *, tokens: int, dtype: str, tp: int = 1,
              grouped: bool = False, glue: str = "none") -> list[Op]:
    """Router, token permutation, balanced routed experts and shared experts (forward).

    ``grouped``: the routed experts run as one grouped GEMM per projection over the experts
    that received tokens (``torch.nn.functional.grouped_mm``, Hugging Face transformers'
    ``experts_implementation="grouped_mm"``, docs/source/en/experts_interface.md), so their
    weights are read only for those experts and each projection and the activation launch one
    kernel; otherwise every expert runs its own GEMMs over an equal share of the tokens.

    ``glue="transformers"`` (grouped, 16-bit): what transformers 5.17's grouped_mm experts
    forward runs besides, in a torch.profiler trace of Mixtral-8x7B and DeepSeek-V2-Lite
    prefills on an H200 (data/h200_stacks/run6/hf_kernel_profile.json): three ``masked_fill``
    passes over the grouped GEMMs' rows in and out, the activation's ``silu`` and multiply over
    the strided halves of the gate+up output (TensorIterator's unvectorized kernels), the routing
    weights' multiply (promoted to fp32), the sum over each token's experts and three
    device-to-device copies of the fp32 hidden states, as the kernel families ``UNVECTORIZED``
    and ``MEMCPY`` (``workloads.ops``)."""
    h, e = cfg.d_model, dtype
    routed_tokens = max(1, round(tokens * cfg.top_k / cfg.n_experts))
    n_run = cfg.n_experts
    if grouped:
        n_run = experts_hit(cfg, tokens)
        routed_tokens = max(1, round(tokens * cfg.top_k / n_run))
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
        Elementwise(
            name="permute", op="copy", tokens=tokens * cfg.top_k, hidden=h, pass_="fwd", dtype=e
        ),
    ]
    experts = mlp_block(
        cfg,
        tokens=routed_tokens,
        dtype=dtype,
        tp=tp,
        width=cfg.d_ff_expert,
        prefix="expert_",
        count=n_run,
    )
    if grouped:  # one kernel per projection; the activation over every routed row at once
        experts = [replace(op, launches=1) if isinstance(op, Gemm)
                   else replace(op, tokens=op.tokens * n_run, count=1) for op in experts]
        rows = tokens * cfg.top_k
        ops += [  # transformers' grouped_mm_experts_forward (integrations/moe.py) beyond these:
            # zeros_like, arange, the expanded index's copy, two argsorts (two kernels each),
            # the routing weights' gather, three gathers by the permutation, float, histc,
            # cumsum, the weights' multiply and the inverse permutation's gather: 16 kernels,
            # whose bytes are the four gathers of the routed rows (each read and written)
            Memory(name="expert_grouping", op="copy",
                   bytes_moved=8 * rows * h * dtype_bytes(e) / 16, count=16),
            # and views that launch nothing: reshape, unsqueeze, two transposes, chunk
            Memory(name="expert_grouping_views", op="copy", bytes_moved=0.0, calls=5),
        ]
    if grouped and glue == "transformers" and dtype_bytes(e) == 2:
        experts = _transformers_glue(experts, cfg, tokens=tokens, rows=tokens * cfg.top_k,
                                     dtype=e, tp=tp)
    ops += experts
    ops.append(
        Elementwise(
            name="unpermute", op="copy", tokens=tokens * cfg.top_k, hidden=h, pass_="fwd", dtype=e
        )
    )
    if cfg.n_shared_experts:
        ops += mlp_block(
            cfg,
            tokens=tokens,
            dtype=dtype,
            tp=tp,
            width=cfg.d_ff_expert * cfg.n_shared_experts,
            prefix="shared_",
        )
    return ops


def _transformers_glue(experts: list[Op], cfg: ModelConfig, *, tokens: int, rows: int,
                       dtype: str, tp: int) -> list[Op]:
    """The grouped experts as transformers' grouped_mm forward runs them (``moe_block``):
    the GEMMs kept, the activation replaced by its unvectorized silu and multiply, the rest
    added."""
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


def layer_forward(
    cfg: ModelConfig,
    *,
    batch: int,
    seq: int,
    dtype: str = "bf16",
    layer: int = 0,
    tp: int = 1,
    context: int = 0,
    grouped_experts: bool = False,
    moe_glue: str = "none",
) -> list[Op]:
    """Kernels of block ``layer`` for ``batch`` sequences of ``seq`` new tokens each, after
    ``context`` tokens already in a KV cache (decode: seq=1, context>0); ``grouped_experts``:
    MoE experts as grouped GEMMs (``moe_block``), with ``moe_glue``'s library code around
    them."""
    t, h = batch * seq, cfg.d_model
    norm = cfg.norm
    add = "dropout_add" if cfg.bias and not cfg.is_vision else "add"  # GPT keeps dropout
    ops: list[Op] = [
        Elementwise(name="attn_norm", op=norm, tokens=t, hidden=h, pass_="fwd", dtype=dtype)
    ]
    window = cfg.sliding_window if cfg.is_windowed_layer(layer) else 0
    ops += attention_block(cfg, batch=batch, seq_q=seq, seq_kv=context + seq, dtype=dtype, tp=tp,
                           window=window)  # fmt: skip
    if context:
        ops.append(kv_cache_append(cfg, tokens=t, dtype=dtype, tp=tp))
    ops += [
        Elementwise(name="attn_residual", op=add, tokens=t, hidden=h, pass_="fwd", dtype=dtype),
        Elementwise(name="mlp_norm", op=norm, tokens=t, hidden=h, pass_="fwd", dtype=dtype),
    ]
    if cfg.is_moe_layer(layer):
        ops += moe_block(cfg, tokens=t, dtype=dtype, tp=tp, grouped=grouped_experts,
                         glue=moe_glue)
    else:
        ops += mlp_block(cfg, tokens=t, dtype=dtype, tp=tp)
    ops.append(
        Elementwise(name="mlp_residual", op=add, tokens=t, hidden=h, pass_="fwd", dtype=dtype)
    )
    return ops


def kv_cache_append(cfg: ModelConfig, *, tokens: int, dtype: str, tp: int = 1) -> Memory:
    """Writing the new tokens' keys and values into the cache (read once, written once)."""
    per_token = kv_cache_bytes_per_token_layer(cfg, dtype) / tp
    return Memory(name="kv_cache_append", op="copy", bytes_moved=2 * tokens * per_token, calls=6)


def backward_of(ops: list[Op]) -> list[Op]:
    """The backward kernels of a forward list, in reverse order."""
    out: list[Op] = []
    for op in reversed(ops):
        if isinstance(op, Gemm):
            # a grouped GEMM's backward is two grouped GEMMs (torch._grouped_mm's derivative,
            # tools/autograd/derivatives.yaml): the launches carry over
            out += [
                Gemm(
                    name=f"{op.name}.dgrad", m=op.m, n=op.k, k=op.n, dtype=op.dtype, count=op.count,
                    launches=op.launches,
                ),
                Gemm(
                    name=f"{op.name}.wgrad", m=op.k, n=op.n, k=op.m, dtype=op.dtype, count=op.count,
                    launches=op.launches,
                ),
            ]
        elif isinstance(op, Attention | Elementwise):
            out.append(_replace_pass(op, "bwd"))
    return out


def _replace_pass(op, pass_: str):
    return replace(op, name=f"{op.name}.bwd", pass_=pass_)


def embedding_forward(cfg: ModelConfig, *, tokens: int, dtype: str) -> list[Op]:
    """Token (and learned position) embedding lookup: rows gathered, output written."""
    e = dtype_bytes(dtype)
    ops: list[Op] = [
        Memory(name="embedding", op="embedding", bytes_moved=2 * tokens * cfg.d_model * e)
    ]
    if cfg.position == "learned":
        ops.append(
            Elementwise(
                name="position_add",
                op="add",
                tokens=tokens,
                hidden=cfg.d_model,
                pass_="fwd",
                dtype=dtype,
            )
        )
    return ops


def head_forward(cfg: ModelConfig, *, tokens: int, dtype: str) -> list[Op]:
    """Final norm, LM head GEMM and the cross-entropy loss over fp32 logits."""
    v = cfg.vocab_size
    return [
        Elementwise(
            name="final_norm",
            op=cfg.norm,
            tokens=tokens,
            hidden=cfg.d_model,
            pass_="fwd",
            dtype=dtype,
        ),
        Gemm(name="lm_head", m=tokens, n=v, k=cfg.d_model, dtype=dtype),
        # logits read in 16 bits, upcast to fp32, log-softmax written and read for the loss
        Memory(name="cross_entropy", op="cross_entropy", bytes_moved=tokens * v * (2 + 4 + 4)),
    ]


def head_backward(cfg: ModelConfig, *, tokens: int, dtype: str) -> list[Op]:
    """Loss gradient (softmax minus one-hot, fp32 to 16 bits), LM head and final norm backward."""
    v = cfg.vocab_size
    fwd = head_forward(cfg, tokens=tokens, dtype=dtype)
    return [
        Memory(name="cross_entropy.bwd", op="cross_entropy", bytes_moved=tokens * v * (4 + 4 + 2))
    ] + backward_of(fwd[:2])


def embedding_backward(cfg: ModelConfig, *, tokens: int, dtype: str) -> list[Op]:
    """Scatter-add of the output gradient into the (fp32) embedding-table gradient."""
    table = cfg.vocab_size * cfg.d_model * 4
    grad = tokens * cfg.d_model * dtype_bytes(dtype)
    return [Memory(name="embedding.bwd", op="embedding", bytes_moved=table + 2 * grad)]


def model_forward(
    cfg: ModelConfig, *, batch: int, seq: int, dtype: str = "bf16", tp: int = 1
) -> list[Op]:
    """Every kernel of one forward pass of the whole model."""
    t = batch * seq
    ops = embedding_forward(cfg, tokens=t, dtype=dtype)
    for layer in range(cfg.n_layers):
        ops += layer_forward(cfg, batch=batch, seq=seq, dtype=dtype, layer=layer, tp=tp)
    return ops + head_forward(cfg, tokens=t, dtype=dtype)


def model_flops(op: Op) -> float:
    """FLOPs the math of ``op`` needs, without any recomputation inside its kernel."""
    return getattr(op, "model_flops", op.flops)


def training_flops(
    cfg: ModelConfig, *, batch: int, seq: int, dtype: str = "bf16", hardware: bool = False
) -> float:
    """FLOPs of one forward and backward pass over batch x seq tokens: model FLOPs (the MFU
    convention), or with ``hardware`` the FLOPs the kernels execute (flash recomputation too)."""
    fwd = model_forward(cfg, batch=batch, seq=seq, dtype=dtype)
    ops = fwd + backward_of(fwd)
    return sum(op.flops if hardware else model_flops(op) for op in ops)


# transformers' eager RMSNorm (``LlamaRMSNorm.forward``; Qwen2's, Mistral's, Mixtral's and
# DeepSeek-V2's are the same code):
#     input_dtype = x.dtype; x = x.to(float32); v = x.pow(2).mean(-1, keepdim=True)
#     x = x * torch.rsqrt(v + eps); return self.weight * x.to(input_dtype)
# Forward pieces: (kernel, bytes per element, bytes per row) on an ``e``-byte input. The casts
# read e and write 4 (and back); on an fp32 input (the residual stream under autocast over fp32
# weights, ``Stack.residual_dtype``) ``Tensor.to`` of the same dtype returns the tensor itself:
# a torch call, no kernel.
def rmsnorm_pieces(e: int = 2) -> tuple:
    """(kernel, bytes per element, bytes per row) of transformers' RMSNorm on ``e``-byte input."""
    return (("to_float32", e + 4, 0), ("pow", 8, 0), ("mean", 4, 4), ("add_eps", 0, 8),
            ("rsqrt", 0, 8), ("mul_rsqrt", 8, 4), ("to_dtype", 4 + e, 0), ("mul_weight", 2 * e, 0))


# Backward pieces, as autograd runs the forward's (tools/autograd/derivatives.yaml and
# FunctionsManual.cpp): ``mul`` gives ``grad * other`` and ``grad * self`` (the weight's summed
# back to its shape by ``sum_to_size``: a multiply and a reduction); ``rsqrt``:
# ``-0.5 * grad * result.pow(3)`` (three kernels over one value per row); ``add`` of a scalar
# passes the gradient through; ``mean``: ``grad.expand(sizes) / n`` (one kernel writing every
# element); ``pow(2)``: ``pow_backward`` = ``grad * (2 * self.pow(1))`` (``pow`` of exponent 1
# is a copy in ATen's pow_Tensor_Scalar_out, then two multiplies); the two uses of the fp32
# input (``pow`` and the multiply) add their gradients (one add); each ``to`` casts its gradient
# back (none on an fp32 input). (kernel, bytes per element, bytes per row), ``e``: input bytes.
def rmsnorm_backward_pieces(e: int = 2) -> tuple:
    casts = e != 4
    return tuple(p for p in (
        ("mul_weight.dinput", 2 * e, 0), ("mul_weight.dweight", 3 * e, 0),
        ("mul_weight.dweight_sum", e, 0),
        ("to_dtype.bwd", e + 4, 0) if casts else None,
        ("mul_rsqrt.dinput", 8, 4), ("mul_rsqrt.drsqrt", 12, 0), ("mul_rsqrt.drsqrt_sum", 4, 4),
        ("rsqrt.bwd_pow", 0, 8), ("rsqrt.bwd_scale", 0, 8), ("rsqrt.bwd_mul", 0, 12),
        ("mean.bwd", 4, 4),
        ("pow.bwd_copy", 8, 0), ("pow.bwd_scale", 8, 0), ("pow.bwd_mul", 12, 0),
        ("accumulate", 12, 0),
        ("to_float32.bwd", 4 + e, 0) if casts else None,
    ) if p is not None)  # fmt: skip


def eager_rmsnorm(op: Elementwise) -> tuple[list[Op], list[Op]]:
    """(forward, backward) kernels of RMSNorm ``op`` (a forward ``Elementwise``) as
    transformers' eager ``LlamaRMSNorm`` runs it: 36 B per element of a 16-bit input forward
    (one fused kernel: 4), 28 B on an fp32 input (its casts launch nothing, and their torch
    calls ride on the neighbouring pieces); the backward is autograd over those ops
    (``rmsnorm_backward_pieces``: 92 B per element in fp32 against a fused kernel's 12)."""
    n, rows, e = op.tokens * op.hidden * op.count, op.tokens * op.count, dtype_bytes(op.dtype)
    noop = e == 4  # x.to(float32) and x.to(input_dtype) of an fp32 input: calls, no kernels
    fwd: list[Op] = []
    for piece, per_elem, per_row in rmsnorm_pieces(e):
        if noop and piece in ("to_float32", "to_dtype"):
            continue
        calls = 2 if noop and piece in ("pow", "mul_weight") else 1
        fwd.append(Memory(name=f"{op.name}.{piece}", op="copy", calls=calls,
                          bytes_moved=per_elem * n + per_row * rows))
    bwd: list[Op] = [Memory(name=f"{op.name}.{piece}", op="copy",
                            bytes_moved=per_elem * n + per_row * rows)
                     for piece, per_elem, per_row in rmsnorm_backward_pieces(e)]
    return fwd, bwd


def with_eager_rmsnorm(ops: list[Op]) -> tuple[list[Op], list[Op]]:
    """``ops`` with every forward RMSNorm as ``eager_rmsnorm``'s pieces, and the backward
    pieces of those norms (in reverse order; ``backward_of`` lists no backward for a
    ``Memory``)."""
    fwd: list[Op] = []
    bwd: list[Op] = []
    for op in ops:
        if isinstance(op, Elementwise) and op.op == "rmsnorm" and op.pass_ == "fwd":
            f, b = eager_rmsnorm(op)
            fwd += f
            bwd = b + bwd
        else:
            fwd.append(op)
    return fwd, bwd
