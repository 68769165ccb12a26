"""Collectives across a cluster's hierarchy: rings inside a scale-up domain, rings between domains
over each GPU's own NIC, and the hierarchical compositions NCCL-style libraries use.

Each function takes numpy arrays or plain numbers (the search evaluates thousands of groups at
once; the scalar estimate one) and returns seconds. ``local`` is the group's members per domain,
``nodes`` the domains it spans; ``nbytes`` follows the measurement contract (each rank's input
buffer). Formulas:

- inside one domain: the one-host model, ``hwmodels.collectives.collective_time`` on the domain's
  link (the model scored against two-GPU measurements), evaluated once per distinct (ranks,
  bytes) pair of an array; a group of one rank costs nothing.
- between domains: a ring on each GPU's NIC: launch + steps * latency + bytes sent / bandwidth
  (Thakur, Rabenseifner and Gropp 2005).
- all-reduce across domains: reduce-scatter inside the domain, all-reduce of each 1/local shard
  between domains (every GPU on its own rail, concurrently), all-gather inside the domain — the
  standard hierarchical all-reduce (e.g. Jia et al. 2018, "Highly scalable deep learning training
  system with mixed-precision", sec. 4; NCCL's tree/ring over NVLink + IB does the same traffic).
- all-gather: between domains first, then inside on the gathered buffer; reduce-scatter: inside
  first, then between domains on the shard.
- all-to-all: every rank sends (g-1)/g of its buffer; the part for other domains goes over the NIC,
  the rest over NVLink, concurrently: the slower of the two sets the time.
- send/recv: one message over NVLink (the one-host model) or over the NIC.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gpuplan.hwmodels.bulk import collective_times
from gpuplan.hwmodels.collectives import collective_time
from gpuplan.sim.parallel.topology import Cluster


@dataclass(frozen=True, slots=True)
class Links:
    """Achievable bandwidths and per-step latencies of the two levels of a cluster."""

    intra_bytes_per_s: float
    inter_bytes_per_s: float
    intra_latency_s: float
    inter_latency_s: float
    launch_s: float
    nodes_per_leaf: int
    oversubscription: float
    acc: object = field(default=None, compare=False)
    eff: object = field(default=None, compare=False)
    scaleup_bytes_per_s: float = 0.0

    def one_host_s(self, op: str, n: int, nbytes: float) -> float:
        """The one-host model's time of ``op`` on ``n`` GPUs of a domain."""
        return collective_time(
            self.acc, op, n, nbytes, self.eff, link_bytes_per_s_override=self.scaleup_bytes_per_s
        ).total_s

    def one_host_many_s(self, op: str, n, nbytes) -> np.ndarray:
        """``one_host_s`` of arrays of ranks and bytes, in one call (``hwmodels.bulk``)."""
        return collective_times(
            self.acc, op, n, nbytes, self.eff, link_bytes_per_s_override=self.scaleup_bytes_per_s
        ).total_s


def links(cluster: Cluster, eff) -> Links:
    """The cluster's links at the fractions collectives reach (``eff`` for NVLink)."""
    return Links(
        intra_bytes_per_s=cluster.scaleup_bytes_per_s * eff.collective_bw_fraction,
        inter_bytes_per_s=cluster.scaleout_bytes_per_s * cluster.scaleout_efficiency,
        intra_latency_s=eff.collective_latency_s,
        inter_latency_s=cluster.scaleout_latency_s,
        launch_s=eff.collective_launch_s,
        nodes_per_leaf=cluster.nodes_per_leaf,
        oversubscription=cluster.oversubscription,
        acc=cluster.accelerator,
        eff=eff,
        scaleup_bytes_per_s=cluster.scaleup_bytes_per_s,
    )


def ring_terms(op: str, n, nbytes):
    """(steps, bytes each rank sends) of a ring ``op``: ``hwmodels.collectives.ring_terms`` for
    numpy arrays."""
    if op == "all_reduce":
        return 2 * (n - 1), 2.0 * (n - 1) / n * nbytes
    if op == "all_gather":
        return n - 1, (n - 1) * nbytes
    if op == "reduce_scatter":
        return n - 1, (n - 1) / n * nbytes
    if op == "all_to_all":
        return 1, (n - 1) / n * nbytes
    raise ValueError(f"no ring for {op!r}")


def _ring(op: str, n, nbytes, bw, latency_s, launch_s):
    n = np.asarray(n)
    steps, sent = ring_terms(op, np.maximum(n, 1), nbytes)
    return np.where(n > 1, launch_s + steps * latency_s + sent / bw, 0.0)


def _intra(op, n, nbytes, lk: Links):
    """The one-host model, once per distinct (ranks, bytes) pair."""
    n, nbytes = np.broadcast_arrays(np.asarray(n), np.asarray(nbytes, dtype=float))
    if n.ndim == 0:
        return np.asarray(lk.one_host_s(op, int(n), float(nbytes)) if n > 1 else 0.0)
    # 1-D sorts only (a row-wise unique of pairs is ten times slower)
    sizes, size_idx = np.unique(nbytes.ravel(), return_inverse=True)
    key = size_idx.ravel() * (int(n.max()) + 1) + n.ravel()
    keys, inverse = np.unique(key, return_inverse=True)
    ranks, which = keys % (int(n.max()) + 1), keys // (int(n.max()) + 1)
    values = lk.one_host_many_s(op, ranks, sizes[which])  # 0 where one rank
    return values[inverse.ravel()].reshape(n.shape)


def _inter(op, n, nbytes, lk: Links):
    bw = np.where(
        np.asarray(n) > lk.nodes_per_leaf,
        lk.inter_bytes_per_s / lk.oversubscription,
        lk.inter_bytes_per_s,
    )
    return _ring(op, n, nbytes, bw, lk.inter_latency_s, lk.launch_s)


def all_reduce_s(lk: Links, local, nodes, nbytes):
    """Hierarchical all-reduce of ``nbytes`` per rank."""
    flat = _intra("all_reduce", local, nbytes, lk)
    shard = nbytes / local
    hier = (
        _intra("reduce_scatter", local, nbytes, lk)
        + _inter("all_reduce", nodes, shard, lk)
        + _intra("all_gather", local, shard, lk)
    )
    return np.where(np.asarray(nodes) > 1, hier, flat)


def all_gather_s(lk: Links, local, nodes, nbytes):
    """Hierarchical all-gather; ``nbytes`` is each rank's input (the output is group x that)."""
    flat = _intra("all_gather", local, nbytes, lk)
    hier = _inter("all_gather", nodes, nbytes, lk) + _intra("all_gather", local, nbytes * nodes, lk)
    return np.where(np.asarray(nodes) > 1, hier, flat)


def reduce_scatter_s(lk: Links, local, nodes, nbytes):
    """Hierarchical reduce-scatter of ``nbytes`` per rank into 1/group shards."""
    flat = _intra("reduce_scatter", local, nbytes, lk)
    hier = _intra("reduce_scatter", local, nbytes, lk) + _inter(
        "reduce_scatter", nodes, nbytes / local, lk
    )
    return np.where(np.asarray(nodes) > 1, hier, flat)


def all_to_all_s(lk: Links, local, nodes, nbytes):
    """All-to-all of ``nbytes`` per rank; NVLink and NIC traffic run concurrently."""
    local, nodes = np.asarray(local), np.asarray(nodes)
    group = local * nodes
    flat = _intra("all_to_all", local, nbytes, lk)
    intra_s = nbytes * (local - 1) / group / lk.intra_bytes_per_s
    inter_bw = np.where(
        nodes > lk.nodes_per_leaf, lk.inter_bytes_per_s / lk.oversubscription, lk.inter_bytes_per_s
    )
    inter_s = nbytes * (group - local) / group / inter_bw
    hier = lk.launch_s + lk.inter_latency_s + np.maximum(intra_s, inter_s)
    return np.where(nodes > 1, hier, flat)


def send_recv_s(lk: Links, cross, nbytes):
    """One point-to-point message of ``nbytes``, leaving the domain where ``cross``."""
    intra = _intra("send_recv", 2, nbytes, lk)
    inter = lk.launch_s + lk.inter_latency_s + nbytes / lk.inter_bytes_per_s
    return np.where(cross, inter, intra)
