"""Launch overhead: what the CPU costs a stream of kernels, and what a CUDA graph removes.

Eager PyTorch issues each op from the CPU; while the GPU runs kernels longer than that issue time
the CPU runs ahead and its cost hides, but a stream of short kernels (a decode step) waits on the
CPU. The model: the GPU's busy time is the kernels plus one device-side gap each; the CPU's is one
issue time per kernel; the step takes the longer of the two (the CPU enqueues asynchronously). A CUDA graph
replays the whole stream with one launch, leaving only the device-side gap between kernels
(Nguyen et al., "Accelerating PyTorch with CUDA Graphs", PyTorch blog 2021).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuplan.hwmodels.efficiency import Efficiency


@dataclass(frozen=True, slots=True)
class LaunchCost:
    gaps_s: float  # device-side gaps between kernels (graph replay) - always paid
    host_exposed_s: float  # CPU issue time not hidden behind GPU work

    @property
    def total_s(self) -> float:
        return self.gaps_s + self.host_exposed_s


def launch_cost(
    n_kernels: int,
    kernels_s: float,
    eff: Efficiency,
    *,
    cuda_graph: bool,
    backward_passes: int = 0,
    headstart: bool = False,
    collectives: int = 0,
    host_calls: int | None = None,
    backward_calls: int = 0,
    extra_host_s: float = 0.0,
    overlap: float = 1.0,
) -> LaunchCost:
    """Launch cost of ``n_kernels`` kernels whose device time adds up to ``kernels_s``; each
    backward pass also costs the CPU the start of the autograd engine, and each collective call
    the CPU work of issuing it through torch.distributed and NCCL. ``headstart``: the call
    is timed in isolation after the GPU was kept busy (an L2 flush), so the CPU had
    ``timer_headstart_s`` to queue work before the timed region began. ``host_calls``: the
    torch calls the CPU dispatches, when they outnumber the kernels (views, no-op casts).
    ``backward_calls``: those of them that the autograd engine runs in a backward pass, each
    costing the engine's own per-node work on top of the dispatch. ``extra_host_s``: CPU time
    a framework adds beyond its torch calls (its Python modules), hidden like the rest.
    ``overlap``: the share of the device's time that the CPU's issue time hides behind (1: the
    CPU runs ahead of the GPU; 0: the two take turns, as under a synchronizing framework)."""
    gaps_s = n_kernels * eff.graph_launch_s  # the device's own gap between kernels
    if cuda_graph:  # one launch from the CPU, before any of the graph's kernels can start
        host_s = eff.host_launch_s
        hidden_s = eff.timer_headstart_s if headstart else 0.0
    else:
        calls = n_kernels if host_calls is None else host_calls
        host_s = (
            calls * eff.host_launch_s
            + backward_passes * eff.autograd_s
            + backward_calls * eff.autograd_op_s
            + collectives * eff.collective_host_s
            + extra_host_s
        )
        hidden_s = overlap * (kernels_s + gaps_s) + (eff.timer_headstart_s if headstart else 0.0)
    return LaunchCost(gaps_s, max(0.0, host_s - hidden_s))
