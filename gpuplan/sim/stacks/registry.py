"""The stack presets by name: ``get_stack``, ``list_stacks``, ``register`` (a variant, as a fit
or a test does) and ``with_overrides`` (a kernel, KV cache or host speed forced)."""

from __future__ import annotations

import dataclasses

from gpuplan.errors import GpuplanError, check_choice, shown, unknown_key
from gpuplan.hwmodels.attention import ATTENTION_KERNELS
from gpuplan.sim.stacks.stack import KV_CACHES, TRAIN_ONLY_KERNELS, AttentionChoice, Stack

_REGISTRY: dict[str, Stack] = {}


def register(*stacks: Stack) -> None:
    """Add stacks to the registry (or put a variant in a preset's place)."""
    for stack in stacks:
        _REGISTRY[stack.name] = stack


def _load() -> dict[str, Stack]:
    if "pytorch" not in _REGISTRY:  # the presets, in the order of their modules
        from gpuplan.sim.stacks import pytorch, serving, training

        register(*pytorch.PRESETS, *training.PRESETS, *serving.PRESETS)
    return _REGISTRY


def list_stacks() -> list[Stack]:
    return sorted(_load().values(), key=lambda s: s.name)


def get_stack(name: str | Stack) -> Stack:
    """The preset called ``name`` (a ``Stack`` is returned as it is)."""
    if isinstance(name, Stack):
        return name
    if not isinstance(name, str) or not name:
        raise GpuplanError(f"stack={shown(name)} is invalid: choose one of {', '.join(_load())}")
    stacks = _load()
    if name not in stacks:
        raise unknown_key("stack", name, stacks)
    return stacks[name]


def with_overrides(stack: Stack, *, attention_kernel: str | None = None,
                   kv_cache: str | None = None, host_speed: float | None = None) -> Stack:
    """The stack with a kernel forced in every phase (a training-only kernel, ``triton``, in
    training and prefill: the stack keeps its own decode kernel), another KV cache or another
    host speed."""
    changes = {}
    if attention_kernel is not None:
        check_choice("attention_kernel", attention_kernel, (*ATTENTION_KERNELS, *TRAIN_ONLY_KERNELS))
        decode = stack.attention.decode if attention_kernel in TRAIN_ONLY_KERNELS else attention_kernel
        changes["attention"] = AttentionChoice(
            prefill=attention_kernel, train=attention_kernel, decode=decode
        )
        # a forced kernel holds on every architecture, where the device runs it; a training-only
        # one keeps the stack's decode kernel, which is the architecture's own where it has one
        changes["on_arch"] = tuple(
            (arch, AttentionChoice(prefill=attention_kernel, train=attention_kernel,
                                   decode=c.decode))
            for arch, c in stack.on_arch) if attention_kernel in TRAIN_ONLY_KERNELS else ()
    if kv_cache is not None:
        check_choice("kv_cache", kv_cache, KV_CACHES)
        changes["kv_cache"] = kv_cache
    if host_speed is not None:
        changes["host"] = dataclasses.replace(stack.host, speed_factor=host_speed)
    return dataclasses.replace(stack, **changes) if changes else stack
