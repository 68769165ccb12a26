"""The casts a low-precision training recipe adds around every GEMM it runs in its format:
scaling factors and low-precision copies. Recipes (``PRECISION_CODES``): ``fp8`` (per-tensor
scales), and on Blackwell (``hwmodels.formats``) ``mxfp8`` and ``nvfp4`` (below the fp8 ones).

An fp8 GEMM needs its operands in fp8 with a scale per tensor (or per row). A training step casts,
for each linear layer: its input X (m x k) and weight W (k x n) in the forward; the output
gradient dY (m x n) in the backward; and the transposed fp8 copies the backward's two GEMMs read
(X^T for the weight gradient, W^T for the input gradient, dY^T for the weight gradient).

How much HBM traffic that is depends on who casts (bytes per element of the bf16 operand):

- ``eager`` - torchao ``Float8Linear`` with dynamic tensorwise scaling as torchtitan runs it
  without compile (torchao ``float8/float8_scaling_utils.py``, ``hp_tensor_to_float8_dynamic``:
  an amax reduction over the tensor, then a scale-and-cast kernel): amax reads 2, the cast reads
  2 and writes 1 = 5; the transposed copy reads 1 and writes 1 = 2. X, W and dY each: 5 + 2.
- ``compiled`` - torch.compile fuses the amax and the cast into the kernels next to them (torchao
  README, "torch.compile is required for performance"): the cast writes its 1-byte copy and its
  transposed copy, 2; the amax reads the tensor once more, 2. X and dY: 4; W: 5 + 2 (its producer
  is the optimizer, not a fused kernel).
- ``fused`` - Transformer Engine emits fp8 from the kernel that produces the operand (fused
  LayerNorm-Linear, fused activation-cast, cast-transpose: TE docs, "Using FP8 with Transformer
  Engine"), with delayed scaling (the amax of earlier steps, ``DelayedScaling`` recipe: no extra
  pass over the tensor): writes the fp8 copy and its transpose, 2 per element of X and dY; the
  fp8 weights are cast once per step and reused by every micro-batch (``is_first_microbatch``),
  so their cast is not charged per micro-batch here (the weight cast is one pass of 2 + 2 bytes
  per parameter per step, under 1% of a step of the published runs).
"""

from __future__ import annotations

from gpuplan.errors import GpuplanError
from gpuplan.hwmodels.formats import MXFP8, NVFP4, check_format, has_format
from gpuplan.workloads.ops import Gemm, Memory

# The GEMM precisions of training, as the search encodes them (index = code); bf16 first.
PRECISION_CODES = ("bf16", "fp8", "mxfp8", "nvfp4")
BLOCK_RECIPES = ("mxfp8", "nvfp4")  # Transformer Engine's block-scaled recipes (Blackwell)
# The low-precision weight copies a recipe keeps through the step, bytes per parameter, by code:
# fp8 one (TE's fp8 weight; its transpose is not counted, as before); mxfp8 and nvfp4 both
# orientations with their scales (a block-scaled tensor's transpose needs its own layout; NVFP4's
# 2D weight scales make its values the same, but Blackwell's FP4 MMA reads K-major operands).
WEIGHT_COPY_BYTES = (0.0, 1.0, 2 * MXFP8.bytes_per_value, 2 * NVFP4.bytes_per_value)
# the catalogue peak each precision's GEMMs run at (MFU is taken against it)
RATE_DTYPE = {"bf16": "bf16", "fp8": "fp8", "mxfp8": "fp8", "nvfp4": "fp4"}

# bytes per element of each bf16 operand (X, W, dY): cast + transposed copy, by who casts
CAST_BYTES = {
    "eager": {"x": 5 + 2, "w": 5 + 2, "dy": 5 + 2},
    "compiled": {"x": 2 + 2, "w": 5 + 2, "dy": 2 + 2},
    "fused": {"x": 2, "w": 0, "dy": 2},
}
CAST_CLASS = "copy"  # priced as a bandwidth-bound copy (hwmodels efficiency class)

# Block-scaled recipes, Transformer Engine's own quantize kernels whatever the elementwise
# implementation (bytes per element of the bf16 operand; a block format's bytes include its
# scales: MXFP8 1 + 1/32, NVFP4 0.5 + 1/16):
# - ``mxfp8`` (TE ``MXFP8BlockScaling``: E4M3 values, one E8M0 scale per 32 values, Blackwell
#   only; OCP MX v1.0): the scale of a block is its own amax, so no amax pass over the tensor;
#   a block runs along one dimension, so the transposed copy the backward reads needs its own
#   scales: one quantize kernel reads the bf16 tensor (2) and writes both orientations
#   (2 x 1.03125), for X and dY; weights are quantized once per step (as under fp8).
# - ``nvfp4`` (TE ``NVFP4BlockScaling``; NVIDIA, "Pretraining Large Language Models with NVFP4",
#   arXiv:2509.25149, sec. 4): E2M1 values with an E4M3 scale per 16 and an FP32 scale per tensor,
#   so a per-tensor amax pass first (read 2); the weight gradient's inputs (X^T and dY^T) go
#   through a 16 x 16 random Hadamard transform before they are quantized, with an amax of the
#   transformed tensor of their own (read 2 more); gradients are rounded stochastically inside
#   the quantize kernel (no extra pass); then one kernel reads the tensor (2) and writes the
#   row-wise and the transformed column-wise copies (2 x 0.5625). X and dY: 2 + 2 + 2 + 1.125.
#   Weights take 2D 16 x 16 block scales so the transpose reuses them (the paper, sec. 4.3),
#   quantized once per step. The paper keeps a few last layers in BF16; every GEMM runs in
#   NVFP4 here.
_MXFP8_CAST = 2 + 2 * MXFP8.bytes_per_value  # read bf16, write both orientations
_NVFP4_CAST = 2 + 2 + 2 + 2 * NVFP4.bytes_per_value  # amax, Hadamard amax, read; write both
BLOCK_CAST_BYTES = {
    "mxfp8": {"x": _MXFP8_CAST, "w": 0, "dy": _MXFP8_CAST},
    "nvfp4": {"x": _NVFP4_CAST, "w": 0, "dy": _NVFP4_CAST},
}


def supports_precision(acc, precision: str) -> bool:
    """Whether ``acc`` trains with GEMMs in ``precision``: a catalogue rate for bf16 and fp8, the
    block-scaled tensor cores (``hwmodels.formats``) for mxfp8 and nvfp4."""
    if precision in BLOCK_RECIPES:
        return has_format(acc, precision)
    return acc.supports(precision)


def check_precision(acc, precision: str) -> None:
    """A one-line GpuplanError unless ``acc`` trains in ``precision``, naming what it lacks."""
    if precision in BLOCK_RECIPES:
        runs = [p for p in PRECISION_CODES if supports_precision(acc, p)]
        check_format(acc, precision, field="precision", listed=tuple(runs))
    elif not acc.supports(precision):
        raise GpuplanError(f"precision={precision!r} is not supported by {acc.key}: it has no "
                           f"{precision} tensor-core rate; use bf16")  # fmt: skip


def fp8_cast_ops(ops, impl: str) -> tuple[list[Memory], list[Memory]]:
    """(forward, backward) cast kernels of the low-precision GEMMs among ``ops`` (a forward
    list): fp8 by who casts (``CAST_BYTES``), mxfp8 and nvfp4 by their recipe."""
    fwd: list[Memory] = []
    bwd: list[Memory] = []
    for op in ops:
        if not isinstance(op, Gemm) or op.dtype not in ("fp8", *BLOCK_RECIPES):
            continue
        table = BLOCK_CAST_BYTES.get(op.dtype) or CAST_BYTES[impl]
        x, w, dy = op.m * op.k, op.k * op.n, op.m * op.n
        nbytes_fwd = x * table["x"] + w * table["w"]
        if nbytes_fwd:
            fwd.append(Memory(name=f"fp8_cast.{op.name}", op=CAST_CLASS, bytes_moved=nbytes_fwd,
                              count=op.count))  # fmt: skip
        bwd.append(Memory(name=f"fp8_cast.{op.name}.bwd", op=CAST_CLASS,
                          bytes_moved=dy * table["dy"], count=op.count))  # fmt: skip
    return fwd, bwd
