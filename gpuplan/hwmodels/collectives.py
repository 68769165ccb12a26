"""Collectives between GPUs of one host: ring algorithms with latency and bandwidth terms.

Bandwidth terms follow the ring algorithms NCCL uses inside a node (Thakur, Rabenseifner and
Gropp, IJHPCA 2005; NCCL's "performance.md" bus-bandwidth definitions), for ``n`` ranks and
``B`` bytes in each rank's input buffer (the measurement contract's convention):

| op             | steps      | bytes each rank sends      |
|----------------|------------|----------------------------|
| all_reduce     | 2(n-1)     | 2 (n-1)/n * B              |
| all_gather     | n-1        | (n-1) * B   (output is nB) |
| reduce_scatter | n-1        | (n-1)/n * B                |
| all_to_all     | 1 (pairwise, concurrent) | (n-1)/n * B  |
| send_recv      | 1          | B                          |

Time = fixed call cost + steps * per-step latency + bytes / (link bandwidth * fraction). The link
is the accelerator's scale-up link (NVLink, Infinity Fabric, ICI) one direction, or PCIe when it
has none. One rank costs nothing: there is no one to talk to.
"""

from __future__ import annotations

from gpuplan.errors import GpuplanError
from gpuplan.hwmodels.efficiency import Efficiency
from gpuplan.hwmodels.kernel_time import ZERO, KernelTime

COLLECTIVE_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")


def ring_terms(op: str, world: int, bytes_per_rank: float) -> tuple[int, float]:
    """(algorithm steps, bytes each rank sends) of ``op`` on ``world`` ranks."""
    n = world
    table = {
        "all_reduce": (2 * (n - 1), 2.0 * (n - 1) / n * bytes_per_rank),
        "all_gather": (n - 1, (n - 1) * bytes_per_rank),
        "reduce_scatter": (n - 1, (n - 1) / n * bytes_per_rank),
        "all_to_all": (1, (n - 1) / n * bytes_per_rank),
        "send_recv": (1, float(bytes_per_rank)),
    }
    if op not in table:
        raise GpuplanError(f"collective op={op!r} is unknown: choose one of {', '.join(table)}")
    return table[op]


def link_bytes_per_s(acc) -> float:
    """One-direction bandwidth between two GPUs of one host: scale-up link, else PCIe."""
    for value in (acc.scaleup_bytes_per_s, acc.pcie_bytes_per_s):
        if value:
            return value
    raise GpuplanError(f"accelerator {acc.key!r} has no known GPU-to-GPU link bandwidth")


def collective_time(
    acc,
    op: str,
    world: int,
    bytes_per_rank: float,
    eff: Efficiency,
    *,
    link_bytes_per_s_override: float | None = None,
) -> KernelTime:
    """Time of one collective call among ``world`` GPUs of one host."""
    if world < 1:
        raise GpuplanError(f"world={world} is invalid: a collective needs at least 1 rank")
    if world == 1:
        return ZERO
    steps, sent = ring_terms(op, world, bytes_per_rank)
    bw = (link_bytes_per_s_override or link_bytes_per_s(acc)) * eff.collective_bw_fraction
    latency_s = eff.collective_launch_s + steps * eff.collective_latency_s
    return KernelTime(0.0, sent / bw, latency_s)
