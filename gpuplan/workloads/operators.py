"""The operators of a forward and a backward pass: the model's kernels assembled in order.

``layer_forward`` lists the kernels of one transformer block for ``tokens = batch * seq`` tokens
in the order eager PyTorch runs them (Hugging Face's Llama, GPT-2, Mixtral and DeepSeek
modules): a norm, the attention half (``workloads.attention_block``), a residual add, a norm, the
feed-forward half (``workloads.feed_forward``: a dense MLP or a mixture of experts) and a
residual add; a block's mixer follows its kind (``workloads.mixers``; a "none" mixer or FFN kind
drops that half with its norm and add). ``backward_of`` turns a forward list into its backward: each GEMM ``Y = X W`` into
a data-gradient GEMM (dX = dY W^T: m, k swapped with n) and a weight-gradient GEMM (dW = X^T dY:
m=k_in, n=n_out, k=tokens); each elementwise op into its ``bwd`` variant; attention into the
flash backward. ``model_forward`` (and the ``embedding_*`` and ``head_*`` functions) add the
embedding, the final norm, the LM head and the loss. Tensor parallelism (Megatron column/row
split, Shoeybi et al. 2019) divides heads and FFN widths by ``tp``
(``workloads.tensor_parallel``); the collectives it needs are added by ``sim``.

Gemma 2/3's sandwich norms (``norms_per_block=4``): a post-norm on each half's output before
its residual add (``post_attention_layernorm``, ``post_feedforward_layernorm`` in transformers'
``Gemma2DecoderLayer``). Gemma's embedding scale (``embedding_scale``: ``inputs_embeds *
normalizer``) is one multiply over the embeddings; a final logit soft-cap (``logit_softcap``:
``c tanh(logits / c)``, ``Gemma2ForCausalLM``) one over the logits kept. Multi-token-prediction
modules (``mtp_layers``) do not run in a plain prefill, decode or training step: not listed.

Assumptions, named: bias adds are fused into the GEMM epilogue (cuBLASLt); q, k, v are one fused
GEMM and so are gate and up (Megatron-LM, vLLM); elementwise ops are ideal single kernels unless
``sim.estimate.compilation.eager`` rewrites them as eager PyTorch runs them (transformers' RMSNorm:
``workloads.eager_rmsnorm``).
"""

from __future__ import annotations

from dataclasses import replace

from gpuplan.errors import GpuplanError, check_positive, check_whole, expects
from gpuplan.limits import MAX_DIM, MAX_GPUS
from gpuplan.workloads.attention_block import kv_cache_append
from gpuplan.workloads.dtypes import dtype_bytes
from gpuplan.workloads.feed_forward import mlp_block, moe_block
from gpuplan.workloads.layer_kinds import TOKEN_CACHE_KINDS
from gpuplan.workloads.mixers import mixer_forward
from gpuplan.workloads.model import ModelConfig
from gpuplan.workloads.ops import Attention, Elementwise, Gemm, Memory, Op, Scan


@expects(cfg="ModelConfig", dtype=str, moe_glue=str)
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
    check_shape(batch=batch, seq=seq, tp=tp, context=context)
    t, h = batch * seq, cfg.d_model
    norm = cfg.norm
    add = "dropout_add" if cfg.bias and not cfg.is_vision else "add"  # GPT keeps dropout
    kind = cfg.layer_kind(layer)
    ops: list[Op] = []
    if kind != "none":  # the mixer half (``workloads.mixers``: attention, a scan, ...)
        ops.append(Elementwise(name="attn_norm", op=norm, tokens=t, hidden=h, pass_="fwd",
                               dtype=dtype))
        ops += mixer_forward(cfg, layer, batch=batch, seq_q=seq, seq_kv=context + seq,
                             dtype=dtype, tp=tp)
        if context and kind in TOKEN_CACHE_KINDS:
            ops.append(kv_cache_append(cfg, tokens=t, dtype=dtype, tp=tp, indexer=kind == "dsa"))
        if cfg.norms_per_block == 4:
            ops.append(_post_norm(cfg, "attn_post_norm", t, dtype))
        ops.append(Elementwise(name="attn_residual", op=add, tokens=t, hidden=h, pass_="fwd",
                               dtype=dtype))
    ffn = cfg.ffn_kind(layer)
    if ffn == "none":
        return ops
    ops.append(Elementwise(name="mlp_norm", op=norm, tokens=t, hidden=h, pass_="fwd", dtype=dtype))
    if ffn == "moe":
        ops += moe_block(cfg, tokens=t, dtype=dtype, tp=tp, grouped=grouped_experts,
                         glue=moe_glue)
    else:
        ops += mlp_block(cfg, tokens=t, dtype=dtype, tp=tp)
    if cfg.norms_per_block == 4:
        ops.append(_post_norm(cfg, "mlp_post_norm", t, dtype))
    ops.append(
        Elementwise(name="mlp_residual", op=add, tokens=t, hidden=h, pass_="fwd", dtype=dtype)
    )
    return ops


def _post_norm(cfg: ModelConfig, name: str, tokens: int, dtype: str) -> Elementwise:
    """A sandwich block's norm of one half's output (Gemma 2/3, module docstring)."""
    return Elementwise(name=name, op=cfg.norm, tokens=tokens, hidden=cfg.d_model, pass_="fwd",
                       dtype=dtype)


@expects(ops=(list, tuple))
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
        elif isinstance(op, Attention | Elementwise | Scan):
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
    if cfg.embedding_scale != 1.0:  # Gemma: inputs_embeds * normalizer (sqrt(d_model))
        ops.append(Elementwise(name="embedding_scale", op="scale", tokens=tokens,
                               hidden=cfg.d_model, pass_="fwd", dtype=dtype))
    return ops


def logit_softcap(cfg: ModelConfig, *, tokens: int, dtype: str,
                  vocab: int | None = None) -> list[Op]:
    """The final logit soft-cap over ``tokens`` rows of ``vocab`` (default the whole vocabulary)
    logits, if the model has one (module docstring); else nothing."""
    if not cfg.final_logit_softcap:
        return []
    return [Elementwise(name="logit_softcap", op="softcap", tokens=tokens,
                        hidden=vocab or cfg.vocab_size, pass_="fwd", dtype=dtype)]


def head_forward(cfg: ModelConfig, *, tokens: int, dtype: str) -> list[Op]:
    """Final norm, LM head GEMM (its logits soft-capped if the model does) and the
    cross-entropy loss over fp32 logits."""
    v = cfg.vocab_size
    softcap = logit_softcap(cfg, tokens=tokens, dtype=dtype)
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
        *softcap,
        # logits read in 16 bits, upcast to fp32, log-softmax written and read for the loss
        Memory(name="cross_entropy", op="cross_entropy", bytes_moved=tokens * v * (2 + 4 + 4)),
    ]


def head_backward(cfg: ModelConfig, *, tokens: int, dtype: str) -> list[Op]:
    """Loss gradient (softmax minus one-hot, fp32 to 16 bits), LM head and final norm backward."""
    v = cfg.vocab_size
    fwd = head_forward(cfg, tokens=tokens, dtype=dtype)
    return [
        Memory(name="cross_entropy.bwd", op="cross_entropy", bytes_moved=tokens * v * (4 + 4 + 2))
    ] + backward_of(fwd[:-1])


def embedding_backward(cfg: ModelConfig, *, tokens: int, dtype: str) -> list[Op]:
    """Scatter-add of the output gradient into the (fp32) embedding-table gradient."""
    table = cfg.vocab_size * cfg.d_model * 4
    grad = tokens * cfg.d_model * dtype_bytes(dtype)
    return [Memory(name="embedding.bwd", op="embedding", bytes_moved=table + 2 * grad)]


@expects(cfg="ModelConfig", dtype=str)
def model_forward(
    cfg: ModelConfig, *, batch: int, seq: int, dtype: str = "bf16", tp: int = 1
) -> list[Op]:
    """Every kernel of one forward pass of the whole model."""
    check_shape(batch=batch, seq=seq, tp=tp)
    t = batch * seq
    ops = embedding_forward(cfg, tokens=t, dtype=dtype)
    for layer in range(cfg.n_layers):
        ops += layer_forward(cfg, batch=batch, seq=seq, dtype=dtype, layer=layer, tp=tp)
    return ops + head_forward(cfg, tokens=t, dtype=dtype)


def model_flops(op: Op) -> float:
    """FLOPs the math of ``op`` needs, without any recomputation inside its kernel."""
    return getattr(op, "model_flops", op.flops)


def check_shape(*, batch: float, seq: float, tp: int = 1, context: float = 0) -> None:
    """A GpuplanError unless the sizes of a forward are positive and at most ``MAX_DIM`` (a
    batch may be a mean, so a fraction) and ``tp`` a whole number of ranks."""
    for field, value in (("batch", batch), ("seq", seq), ("context", context)):
        check_positive(field, value, allow_zero=field == "context")
        if value > MAX_DIM:
            raise GpuplanError(f"{field}={value:g} is invalid: it must be at most {MAX_DIM:,}")
    check_whole("tp", tp, high=MAX_GPUS)


@expects(cfg="ModelConfig", dtype=str)
def training_flops(
    cfg: ModelConfig, *, batch: int, seq: int, dtype: str = "bf16", hardware: bool = False
) -> float:
    """FLOPs of one forward and backward pass over batch x seq tokens: model FLOPs (the MFU
    convention), or with ``hardware`` the FLOPs the kernels execute (flash recomputation too)."""
    fwd = model_forward(cfg, batch=batch, seq=seq, dtype=dtype)
    ops = fwd + backward_of(fwd)
    return sum(op.flops if hardware else model_flops(op) for op in ops)
