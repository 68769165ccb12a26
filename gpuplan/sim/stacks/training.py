"""Presets of the stacks that train across many GPUs.

``megatron-te`` - Megatron-LM / NeMo with Transformer Engine, as ``gpuplan train`` priced it
before stacks were an input: hand-fused elementwise kernels (TE's fused LayerNorm/RMSNorm-linear,
fused bias-GeLU/SwiGLU, fused softmax), FlashAttention-2 through TE's flash backend (cuDNN's
fused attention where FlashAttention-2 does not run, as on Blackwell), bf16 weights
with fp32 main gradients and master weights in the distributed optimizer (``bf16-mixed-megatron``:
2 + 4 + 12 bytes per parameter), a persistent contiguous gradient buffer (``--use-distributed-
optimizer`` with ``overlap_grad_reduce``), fused Adam (apex/TE ``FusedAdam``). Overlaps as
Megatron-LM's arguments default them: gradient reduction overlapped (``--overlap-grad-reduce``,
on in NeMo recipes), TP communication overlap off (``--tp-comm-overlap`` is opt-in: TE
userbuffers), pipeline sends not overlapped. Sources: Megatron-LM ``megatron/training/
arguments.py``; Transformer Engine docs, "Attention backends".
"""

from __future__ import annotations

from gpuplan.sim.stacks import TE_DEFAULT, AttentionChoice, HostModel, Stack, register

MEGATRON_TE = Stack(
    name="megatron-te",
    title="Megatron-LM / NeMo with Transformer Engine: fused kernels, distributed optimizer",
    attention=AttentionChoice(prefill=TE_DEFAULT, train=TE_DEFAULT, decode=TE_DEFAULT),
    elementwise="fused",
    host=HostModel(mode="eager"),
    kv_cache="static",
    optimizer="fused",
    mixed_precision="bf16-params",
    timing="device",
    overlap_dp=True,
    overlap_tp=False,
    overlap_pp=False,
    grads_persist=True,
    sources=(
        "Megatron-LM megatron/training/arguments.py (overlap and optimizer defaults)",
        "Transformer Engine documentation, 'Attention backends'",
    ),
)

register(MEGATRON_TE)
