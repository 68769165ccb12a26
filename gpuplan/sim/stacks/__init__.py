"""The stack: the software that runs the work, the fourth input beside model, hardware, strategy.

A ``Stack`` names what a framework really does where the choice changes the price: which fused
attention kernel runs in each phase, how MoE experts run, whether elementwise ops run as eager
ATen kernels, fused or compiled, what the host costs per torch call and per Python module and
how fast that host is, which KV cache a decode uses, which optimizer implementation runs, and
how a measurement of it is timed. Presets are documented in their own modules with where each
choice comes from (``pytorch``: plain PyTorch, Hugging Face transformers, torch.compile and the
project's measurement harness); ``get_stack`` returns one, ``list_stacks`` lists them.

The stack never holds a fitted number of the hardware: those stay in ``hwmodels.Efficiency``.
It holds choices and the few host-side factors a framework adds on top (named, with their
source or marked as an unmeasured prior in ``notes``). ``stack_efficiency`` turns a stack and
a device's ``Efficiency`` into the efficiency its kernels are priced with.
"""

from gpuplan.hwmodels.attention import ATTENTION_KERNELS
from gpuplan.sim.stacks.kernels import (
    FA_DEFAULT,
    SDPA_DEFAULT,
    TE_DEFAULT,
    kernel_devices,
    resolved_attention,
    stack_efficiency,
)
from gpuplan.sim.stacks.registry import get_stack, list_stacks, register, with_overrides
from gpuplan.sim.stacks.stack import (
    KV_CACHES,
    MEASURED_ON,
    MEASURED_STACKS,
    TIMINGS,
    AttentionChoice,
    HostModel,
    Stack,
)

__all__ = [
    "ATTENTION_KERNELS",
    "FA_DEFAULT",
    "KV_CACHES",
    "MEASURED_ON",
    "MEASURED_STACKS",
    "SDPA_DEFAULT",
    "TE_DEFAULT",
    "TIMINGS",
    "AttentionChoice",
    "HostModel",
    "Stack",
    "get_stack",
    "kernel_devices",
    "list_stacks",
    "register",
    "resolved_attention",
    "stack_efficiency",
    "with_overrides",
]
