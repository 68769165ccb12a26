"""The casts an fp8 training recipe adds around every fp8 GEMM: scaling factors and fp8 copies.

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

from gpuplan.workloads.ops import Gemm, Memory

# bytes per element of each bf16 operand (X, W, dY): cast + transposed copy, by who casts
CAST_BYTES = {
    "eager": {"x": 5 + 2, "w": 5 + 2, "dy": 5 + 2},
    "compiled": {"x": 2 + 2, "w": 5 + 2, "dy": 2 + 2},
    "fused": {"x": 2, "w": 0, "dy": 2},
}
CAST_CLASS = "copy"  # priced as a bandwidth-bound copy (hwmodels efficiency class)


def fp8_cast_ops(ops, impl: str) -> tuple[list[Memory], list[Memory]]:
    """(forward, backward) cast kernels of the fp8 GEMMs among ``ops`` (a forward list)."""
    table = CAST_BYTES[impl]
    fwd: list[Memory] = []
    bwd: list[Memory] = []
    for op in ops:
        if not isinstance(op, Gemm) or op.dtype != "fp8":
            continue
        x, w, dy = op.m * op.k, op.k * op.n, op.m * op.n
        nbytes_fwd = x * table["x"] + w * table["w"]
        if nbytes_fwd:
            fwd.append(Memory(name=f"fp8_cast.{op.name}", op=CAST_CLASS, bytes_moved=nbytes_fwd,
                              count=op.count))  # fmt: skip
        bwd.append(Memory(name=f"fp8_cast.{op.name}.bwd", op=CAST_CLASS,
                          bytes_moved=dy * table["dy"], count=op.count))  # fmt: skip
    return fwd, bwd
