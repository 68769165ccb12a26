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

Time = fixed call cost + steps * per-step latency + bytes / (link bandwidth * fraction), for the
faster of NCCL's Simple and LL protocols (``_protocols``); point-to-point calls pay their own
setup on top (``p2p_launch_s``). Each collective's kernel moves data at its own share of the
link (a copy, a reduction, a transpose: ``collective_op_bw_factor``, fitted). The link
is the accelerator's scale-up link (NVLink, Infinity Fabric, ICI) one direction, or PCIe when it
has none. One rank costs nothing: there is no one to talk to.

All-reduce may also run as a (double binary) tree, as NCCL does (Sanders, Speck and Traeff,
"Two-tree algorithms for full bandwidth broadcast, reduction and scan", Parallel Computing 2009;
NCCL 2.4 release notes): 2 ceil(log2 n) steps, and each rank sends its buffer up and down the
tree, 2 B in all. A tree trades bandwidth for latency; ``algorithm="auto"`` takes the faster of
the two for each size, as NCCL's tuner chooses per message size.

Serving engines reduce small messages with their own kernels over peer memory (CUDA IPC on
NVLink) instead of NCCL (``custom_all_reduce_time``): vLLM's and SGLang's ``custom_all_reduce``
(``cross_device_reduce_1stage`` / ``_2stage``, vllm csrc/custom_all_reduce.cuh) and TensorRT-LLM's
all-reduce fusion kernels (``allreduce_fusion_kernel_oneshot`` / ``_twoshot``,
cpp/tensorrt_llm/kernels/communicationKernels/allReduceFusionKernels.cu). One kernel each: a
one-shot reads the n - 1 peers' whole buffers and sums them between two barriers; a two-shot
reduces its 1/n share from every peer, then gathers the other shares, between three barriers. A
barrier is one flag written to and polled from every peer over the link: priced as one step of
NCCL's LL protocol (the same flag-and-data exchange), its bytes at NCCL's Simple share of the link.
"""

from __future__ import annotations

import math

from gpuplan.errors import GpuplanError
from gpuplan.hwmodels.efficiency import Efficiency
from gpuplan.hwmodels.kernel_time import ZERO, KernelTime

COLLECTIVE_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")
ALGORITHMS = ("ring", "tree", "auto")


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


def tree_terms(world: int, bytes_per_rank: float) -> tuple[int, float]:
    """(steps, bytes each rank sends) of a double-binary-tree all-reduce on ``world`` ranks."""
    return 2 * math.ceil(math.log2(world)), 2.0 * bytes_per_rank


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
    algorithm: str = "ring",
) -> KernelTime:
    """Time of one collective call among ``world`` GPUs of one host."""
    if world < 1:
        raise GpuplanError(f"world={world} is invalid: a collective needs at least 1 rank")
    if algorithm not in ALGORITHMS:
        raise GpuplanError(
            f"algorithm={algorithm!r} is unknown: choose one of {', '.join(ALGORITHMS)}"
        )
    if world == 1:
        return ZERO
    link = link_override_or_default(acc, link_bytes_per_s_override)
    options = [ring_terms(op, world, bytes_per_rank)]
    if op == "all_reduce" and algorithm != "ring":
        options = [tree_terms(world, bytes_per_rank)] + (options if algorithm == "auto" else [])
    launch_s = eff.collective_launch_s + (eff.p2p_launch_s if op == "send_recv" else 0.0)
    op_factor = eff.collective_op_bw_factor.get(op, 1.0)
    times = [
        KernelTime(0.0, sent / (link * fraction * op_factor), launch_s + steps * step_s)
        for steps, sent in options
        for fraction, step_s in _protocols(eff)
    ]
    return min(times, key=lambda t: t.total_s)


def _protocols(eff: Efficiency) -> tuple[tuple[float, float], ...]:
    """(bandwidth fraction, latency per step) of NCCL's protocols: Simple (full bandwidth,
    higher latency) and LL (low latency, a fraction of the bandwidth: it moves 8 bytes of
    flags with every 8 bytes of data). NCCL's tuner takes the faster for each size
    (NCCL documentation, NCCL_PROTO; src/graph/tuning.cc)."""
    return (
        (eff.collective_bw_fraction, eff.collective_latency_s),
        (eff.collective_ll_bw_fraction, eff.collective_ll_latency_s),
    )


def link_override_or_default(acc, override: float | None) -> float:
    return override or link_bytes_per_s(acc)


# (barriers, bytes each rank reads from its peers per byte of its buffer, as a function of n)
_CUSTOM_TERMS = {
    "one_shot": (2, lambda n: n - 1.0),
    "two_shot": (3, lambda n: 2.0 * (n - 1) / n),
}
CUSTOM_KERNELS = tuple(_CUSTOM_TERMS)


def custom_all_reduce_time(acc, world: int, bytes_per_rank: float, eff: Efficiency,
                           kernel: str) -> KernelTime:
    """One serving engine's all-reduce kernel over peer memory (module docstring): a kernel's
    fixed cost, its barriers at NCCL LL's step latency, the peer reads over the link."""
    if kernel not in _CUSTOM_TERMS:
        raise GpuplanError(f"all-reduce kernel={kernel!r} is unknown: choose one of "
                           f"{', '.join(CUSTOM_KERNELS)}")
    if world == 1:
        return ZERO
    barriers, per_byte = _CUSTOM_TERMS[kernel]
    read = per_byte(world) * bytes_per_rank
    link = link_bytes_per_s(acc)
    return KernelTime(0.0, read / (link * eff.collective_bw_fraction),
                      eff.kernel_overhead_s + barriers * eff.collective_ll_latency_s)
