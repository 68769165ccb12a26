"""Passes over a GPU's share of the parameters, gradients and optimizer state: the optimizer step,
autocast's weight and gradient casts and gradient accumulation, each one bandwidth-bound kernel
(or, for ``torch.optim.AdamW(foreach=True)``, several) whose bytes per parameter are counted below
from the framework's code. ``step_time`` adds their times to a step."""

from __future__ import annotations

import numpy as np

# fused AdamW per parameter: read gradient, master weight and both moments, write master weight
# and moments, and the 16-bit copy (Megatron mixed precision: 4 + 4 + 4 + 4 + 12 + 2)
OPTIMIZER_BYTES = {"bf16-mixed-megatron": 30, "bf16-mixed": 28, "bf16": 14, "bf16-deepspeed": 30,
                   "bf16-deepspeed-2022": 30, "bf16-grads-megatron": 28}  # bf16 grads: read 2
# torch.optim.AdamW(foreach=True), ``_multi_tensor_adamw`` in torch/optim/adamw.py: eight passes
# over fp32 parameter-sized lists instead of one fused kernel: param *= 1 - lr wd (r/w p: 8),
# m.lerp_(g) (r m, r g, w m: 12), v *= b2 (8), v.addcmul_(g, g) (r v, r g, w v: 12),
# denom = v.sqrt() (r v, w tmp: 8, a new tensor), denom /= c2 (8), denom += eps (8),
# p.addcdiv_(m, denom) (r p, r m, r tmp, w p: 16) = 80 bytes per fp32 parameter (half for bf16
# state), plus the 16-bit copy where there is one.
FOREACH_OPTIMIZER_BYTES = {"bf16-mixed-megatron": 82, "bf16-mixed": 80, "bf16": 40, "bf16-deepspeed": 82,
                           "bf16-deepspeed-2022": 82, "bf16-grads-megatron": 82}  # fmt: skip
# autocast over fp32 weights: each forward (and each full recompute) casts every weight to bf16
# (read 4, write 2 bytes), and each weight gradient is cast back to fp32 (read 2, write 4)
CAST_BYTES = 6
ACCUMULATE_BYTES = {"bf16-mixed-megatron": 10, "bf16-mixed": 10, "bf16": 6, "bf16-grads-megatron": 6}  # dW, main grad r/w
# DeepSpeed's BF16_Optimizer (``bf16-deepspeed``, deepspeed/runtime/bf16_optimizer.py) adds each
# micro-batch's bf16 gradient into its fp32 buffer after every backward (``update_hp_grads``:
# ``hp_grad.add_(lp.grad.to(float32))``): the cast reads 2 and writes 4 bytes, the add reads 4 + 4
# and writes 4, so 18 bytes per parameter; it is a separate pass, never fused into the GEMMs.
CAST_ADD_BYTES = 18
ACCUMULATE_BYTES["bf16-deepspeed"] = ACCUMULATE_BYTES["bf16-deepspeed-2022"] = CAST_ADD_BYTES
# (FSDP2 accumulating whole gradients between reductions does the same: cast_add_s.) DeepSpeed
# reduces that fp32 buffer whole (the pipeline engine's ``_bf16_reduce_grads``:
# ``buffered_allreduce_fallback(grads=optimizer.get_grads_for_reduction())``, an all-reduce) and
# the tied embedding's fp32 gradient (``_exec_reduce_tied_grads``: ``weight._hp_grad``), then
# all-gathers the updated bf16 partitions (``update_lp_params``, ``all_gather_dp_groups``)
FP32_GRAD_BYTES = 4
BF16_OPTIMIZER = ("bf16-deepspeed", "bf16-deepspeed-2022")  # its state precisions (memory.py)


def optimizer_bytes(params_local, state_precision: str, impl: str = "fused"):
    """The HBM bytes one AdamW step moves over ``params_local`` parameters (``OPTIMIZER_BYTES``,
    or the foreach implementation's passes)."""
    table = FOREACH_OPTIMIZER_BYTES if impl == "foreach" else OPTIMIZER_BYTES
    return params_local * table[state_precision]


def optimizer_s(params_local, state_precision: str, acc, eff, impl: str = "fused"):
    """One AdamW step over ``params_local`` parameters: a fused kernel, or the foreach
    implementation's passes (``FOREACH_OPTIMIZER_BYTES``); bandwidth-bound either way."""
    nbytes = optimizer_bytes(params_local, state_precision, impl)
    return (
        nbytes / (acc.hbm_bytes_per_s * eff.elementwise_fraction("adamw")) + eff.kernel_overhead_s
    )


def cast_bytes(params_local, state_precision: str, rc):
    """The HBM bytes of autocast's weight and gradient casts of one micro-batch (``CAST_BYTES``)
    where the weights are fp32 (``bf16-mixed``); none where they are kept in 16 bits."""
    if state_precision != "bf16-mixed":
        return np.zeros_like(np.asarray(params_local, dtype=float))
    passes = 2 + np.where(np.asarray(rc) == 2, 1, 0)  # weights per forward, gradients once
    return params_local * CAST_BYTES * passes


def cast_s(params_local, state_precision: str, rc, acc, eff):
    """Autocast's weight and gradient casts of one micro-batch (``cast_bytes``)."""
    nbytes = cast_bytes(params_local, state_precision, rc)
    return nbytes / (acc.hbm_bytes_per_s * eff.elementwise_fraction("copy"))


def accumulate_s(params_local, state_precision: str, acc, eff):
    """One separate gradient-accumulation kernel over ``params_local`` parameters."""
    return gradient_pass_s(params_local, ACCUMULATE_BYTES[state_precision], acc, eff)


def cast_add_s(params_local, acc, eff):
    """Adding each micro-batch's 16-bit gradient into an fp32 buffer by a cast and an add
    (``CAST_ADD_BYTES``): DeepSpeed's BF16_Optimizer, FSDP2 without gradient sync."""
    return gradient_pass_s(params_local, CAST_ADD_BYTES, acc, eff)


def gradient_pass_s(params_local, bytes_per_param, acc, eff):
    """One bandwidth-bound kernel moving ``bytes_per_param`` for each local parameter."""
    nbytes = params_local * bytes_per_param
    return nbytes / pass_bytes_per_s(acc, eff) + eff.kernel_overhead_s


def pass_bytes_per_s(acc, eff):
    """The rate of an elementwise pass over gradients or parameters (an ``add``'s fraction of
    HBM bandwidth)."""
    return acc.hbm_bytes_per_s * eff.elementwise_fraction("add")
