"""The cluster's GPU books: each node's allocated GPUs, down and spare nodes, the free GPUs the
scheduler may use, the allocated, idle and down GPU-time integrals and their samples."""

from __future__ import annotations


class GpuBooks:
    """``ClusterSim``'s GPU accounting (mixed in: it reads the simulation's environment, node
    arrays and counters, set up by ``ClusterSim.__init__``)."""

    def _tick(self) -> None:
        now = self.env.now
        dt = now - self._last
        if dt > 0:
            self.gpu_s["allocated"] += self.alloc_gpus * dt
            self.gpu_s["idle"] += self.idle_gpus * dt
            self.gpu_s["down"] += self.down_gpus * dt
            self._last = now

    def _sample(self) -> None:
        self.samples.append((self.env.now, self.alloc_gpus, self.idle_gpus, self.down_gpus))

    def _alloc(self, node: int, delta: int) -> None:
        """Allocate (``delta`` > 0) or free GPUs of ``node``."""
        self.node_alloc[node] += delta
        self.alloc_gpus += delta
        if self.down[node]:
            self.down_gpus -= delta
        else:
            self.idle_gpus -= delta
            if not self.spare[node]:
                self.free_usable -= delta

    def _set_down(self, node: int, down: bool) -> None:
        free = self.gpn - int(self.node_alloc[node])
        sign = 1 if down else -1
        self.down_gpus += sign * free
        self.idle_gpus -= sign * free
        if not self.spare[node]:
            self.free_usable -= sign * free
        self.down[node] = down

    def _set_spare(self, node: int, spare: bool) -> None:
        if not self.down[node]:
            self.free_usable += (-1 if spare else 1) * (self.gpn - int(self.node_alloc[node]))
        self.spare[node] = spare


def spread_spares(count: int, nodes: int, npl: int) -> list[int]:
    """``count`` spare nodes, taken round-robin from the ends of the leaf groups."""
    groups = -(-nodes // npl)
    out: list[int] = []
    k = 0
    while len(out) < count and k < npl:
        for g in range(groups):
            node = min((g + 1) * npl, nodes) - 1 - k
            if node >= g * npl and len(out) < count:
                out.append(node)
        k += 1
    return sorted(out)
