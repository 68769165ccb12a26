"""transformers' eager RMSNorm as the kernels it launches: the forward's eight pieces and
autograd's backward over them, where a fused norm is one kernel each way (``eager_rmsnorm``;
``with_eager_rmsnorm`` rewrites a forward list's norms so)."""

from __future__ import annotations

from gpuplan.workloads.dtypes import dtype_bytes
from gpuplan.workloads.ops import Elementwise, Memory, Op


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
