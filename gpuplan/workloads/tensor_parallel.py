"""Tensor parallelism's split of a block (Megatron-LM's column and row split, Shoeybi et al.
2019): each rank holds an equal share of the attention heads and of the feed-forward width."""

from __future__ import annotations

from gpuplan.errors import GpuplanError


def per_rank(value: int, tp: int, what: str) -> int:
    """Each of ``tp`` ranks' share of ``value`` (heads, a width); an error unless tp divides it."""
    if value % tp:
        raise GpuplanError(f"tp={tp} does not divide {what}={value}")
    return value // tp
