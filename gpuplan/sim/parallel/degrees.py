"""The degrees a model allows: divisors, the tensor-parallel, pipeline and virtual-stage degrees
that split it evenly, and the valid values nearest a given one (what an error names).
"""

from __future__ import annotations

import math

from gpuplan.workloads.model import ModelConfig


def divisors(n: int) -> list[int]:
    """Every positive divisor of ``n``, ascending."""
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def nearest(value: int, valid: list[int], k: int = 4) -> str:
    """The ``k`` valid values closest to ``value`` (by ratio), ascending, as text."""
    if not valid:
        return "none"
    ranked = sorted(valid, key=lambda v: (abs(v / value - 1) + abs(value / v - 1), v))
    return ", ".join(str(v) for v in sorted(ranked[:k]))


def valid_tp(cfg: ModelConfig, limit: int) -> list[int]:
    """TP degrees that split heads and FFN widths evenly, up to ``limit`` GPUs."""
    widths = [cfg.d_ff] + ([cfg.d_ff_expert] if cfg.is_moe else [])
    return [
        t
        for t in divisors(cfg.n_heads)
        if t <= limit
        and all(w % t == 0 for w in widths)
        and (cfg.n_kv_heads % t == 0 or t % cfg.n_kv_heads == 0)
    ]


def valid_virtual_stages(counts) -> list[int]:
    """Virtual-stage counts above 1 that split every stage's blocks into equal chunks, or every
    stage's slots (its blocks, plus one for the embedding on the first stage and one for the loss
    on the last), as Llama 3 405B ran: its first chunk held the embedding only and its last the
    output projection and loss (Dubey et al. 2024, sec. 3.3.2)."""
    slots = [n + (i == 0) + (i == len(counts) - 1) for i, n in enumerate(counts)]
    both = set(divisors(math.gcd(*counts))) | set(divisors(math.gcd(*slots)))
    return sorted(v for v in both if v > 1)


def valid_pp(cfg: ModelConfig, limit: int) -> list[int]:
    """Pipeline degrees that split the layers evenly (Megatron-LM requires it)."""
    return [p for p in divisors(cfg.n_layers) if p <= limit]
