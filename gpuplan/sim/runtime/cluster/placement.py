"""Where a job's GPUs land: topology-aware, first-fit or random placement on the cluster's nodes.

The cluster is nodes of ``gpus_per_node`` GPUs under leaf switches, ``nodes_per_leaf`` nodes per
leaf group (a rack or DGX SuperPOD scalable unit); groups meet at the spine, which may be
oversubscribed. State is per node: GPUs free and whether the node may be used.

- ``topology``: a job of a node or more takes whole free nodes, all in one leaf group when one
  has room (the fullest such group: best fit), else in as few groups as possible; a smaller job
  takes the free GPUs of the fullest node that has room (best fit, so whole nodes stay free for
  large jobs). TP groups stay inside a node and data-parallel and pipeline groups inside as few
  leaf groups as the cluster allows (the placement of Jeon et al. 2019's locality-aware scheduler
  and of topology-aware Slurm ``--switches``).
- ``first-fit``: blind to leaf groups and to packing: a job of a node or more takes the first
  whole free nodes in node order, wherever they are; a smaller job the first node with room.
- ``random``: the same granularity, nodes drawn in a seeded random order (no packing: small jobs
  scatter over the nodes, leaving fewer whole nodes for large ones).
- ``gpu-first-fit``: free GPUs in node order, as many from each node as it has (GPU-granular, the
  naive allocator): TP groups may straddle nodes and then talk over the NIC.

``PlacementShape`` summarizes an allocation for the step-time model: the GPUs that sit together
on every node (the largest aligned group: the GCD of the per-node counts), nodes, leaf groups
spanned and nodes per leaf group.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import reduce

import numpy as np

from gpuplan.errors import check_choice

PLACEMENTS = ("topology", "first-fit", "random", "gpu-first-fit")


@dataclass(frozen=True, slots=True)
class PlacementShape:
    """What an allocation means for communication."""

    gpus: int
    nodes: int
    aligned: int  # GPUs of one node every node holds a multiple of (NVLink groups fit in it)
    leaf_groups: int
    nodes_per_leaf: int  # nodes per leaf group spanned (groups larger than this cross the spine)


@dataclass(frozen=True, slots=True)
class Allocation:
    """The nodes a job holds and how many GPUs on each."""

    nodes: tuple[int, ...]
    counts: tuple[int, ...]

    @property
    def gpus(self) -> int:
        return sum(self.counts)

    def shape(self, nodes_per_leaf: int, nodes_per_domain: int = 1) -> PlacementShape:
        """The allocation's shape; ``nodes_per_leaf`` counts nodes, the result's
        ``nodes_per_leaf`` scale-up domains (NVLink domains span several nodes in NVL72)."""
        per_domain: dict[int, int] = {}
        for node, count in zip(self.nodes, self.counts, strict=True):
            per_domain[node // nodes_per_domain] = (
                per_domain.get(node // nodes_per_domain, 0) + count
            )
        leafs = len({n // nodes_per_leaf for n in self.nodes})
        domains = len(per_domain)
        return PlacementShape(
            gpus=self.gpus,
            nodes=domains,
            aligned=reduce(math.gcd, per_domain.values()),
            leaf_groups=leafs,
            nodes_per_leaf=max(1, nodes_per_leaf // nodes_per_domain)
            if leafs == 1
            else max(1, domains // leafs),
        )

    def replace_node(self, old: int, new: int) -> Allocation:
        return Allocation(tuple(new if n == old else n for n in self.nodes), self.counts)


def place(policy: str, gpus: int, free: np.ndarray, usable: np.ndarray, *, gpus_per_node: int,
          nodes_per_leaf: int, rng=None, nodes_per_domain: int = 1) -> Allocation | None:  # fmt: skip
    """An allocation of ``gpus`` GPUs under ``policy``, or None when they do not fit.
    ``nodes_per_domain``: nodes of one scale-up (NVLink) domain; topology-aware placement keeps
    a job that fits in one domain inside one."""
    check_choice("placement", policy, PLACEMENTS)
    avail = np.where(usable, free, 0)
    if avail.sum() < gpus:
        return None
    if policy == "gpu-first-fit":
        return _take_in_order(gpus, avail, np.flatnonzero(avail > 0))
    if policy == "topology":
        if gpus < gpus_per_node:
            return _best_fit_node(gpus, avail)
        if nodes_per_domain > 1 and gpus <= nodes_per_domain * gpus_per_node:
            inside = _whole_nodes(gpus, avail, gpus_per_node, nodes_per_domain)
            if inside is not None and len({n // nodes_per_domain for n in inside.nodes}) == 1:
                return inside
        return _whole_nodes(gpus, avail, gpus_per_node, nodes_per_leaf)
    order = np.arange(len(avail)) if policy == "first-fit" else rng.permutation(len(avail))
    if gpus < gpus_per_node:
        fits = order[avail[order] >= gpus]
        return Allocation((int(fits[0]),), (gpus,)) if len(fits) else None
    return _nodes_in_order(gpus, avail, order, gpus_per_node)


def _nodes_in_order(gpus: int, avail: np.ndarray, order: np.ndarray, gpn: int) -> Allocation | None:
    k, rest = divmod(gpus, gpn)
    whole = order[avail[order] == gpn]
    if len(whole) < k + (rest > 0):
        return None
    nodes, sizes = [int(n) for n in whole[:k]], [gpn] * k
    if rest:
        left = avail.copy()
        left[whole[:k]] = 0
        fits = order[left[order] >= rest]
        nodes.append(int(fits[0]))
        sizes.append(rest)
    return Allocation(tuple(nodes), tuple(sizes))


def _take_in_order(gpus: int, avail: np.ndarray, order: np.ndarray) -> Allocation:
    cum = np.cumsum(avail[order])
    last = int(np.searchsorted(cum, gpus))
    nodes = order[: last + 1]
    counts = avail[nodes].copy()
    counts[-1] -= int(cum[last]) - gpus
    return Allocation(tuple(int(n) for n in nodes), tuple(int(c) for c in counts))


def _best_fit_node(gpus: int, avail: np.ndarray) -> Allocation | None:
    fits = np.flatnonzero(avail >= gpus)
    if not len(fits):
        return None
    node = int(fits[np.argmin(avail[fits])])  # the fullest node that has room; lowest index
    return Allocation((node,), (gpus,))


def _whole_nodes(gpus: int, avail: np.ndarray, gpn: int, npl: int) -> Allocation | None:
    k, rest = divmod(gpus, gpn)
    whole = np.flatnonzero(avail == gpn)
    if len(whole) < k + (rest > 0):
        return None
    leaf = whole // npl
    counts = np.bincount(leaf, minlength=int(leaf.max()) + 1 if len(leaf) else 1)
    enough = np.flatnonzero(counts >= k + (rest > 0))
    if len(enough):  # one group: the fullest that fits (fewest free nodes)
        groups = [int(enough[np.argmin(counts[enough])])]
    else:  # fewest groups: the emptiest first
        by_room = np.argsort(-counts, kind="stable")
        need = np.searchsorted(np.cumsum(counts[by_room]), k + (rest > 0)) + 1
        groups = [int(g) for g in by_room[:need]]
    chosen = whole[np.isin(leaf, groups)][:k]
    nodes, sizes = [int(n) for n in chosen], [gpn] * k
    if rest:
        left = avail.copy()
        left[chosen] = 0
        same = np.flatnonzero((left >= rest) & np.isin(np.arange(len(left)) // npl, groups))
        pool = same if len(same) else np.flatnonzero(left >= rest)
        node = int(pool[np.argmin(left[pool])])
        nodes.append(node)
        sizes.append(rest)
    return Allocation(tuple(nodes), tuple(sizes))
