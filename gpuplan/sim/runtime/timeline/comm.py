"""Communication as the timeline plays it: a collective or send is ``fixed_s`` (launch, per-step
latencies) plus busy seconds on the scale-up link and on the NIC (its bytes sent per rank over the
achievable bandwidth, ring terms of Thakur, Rabenseifner and Gropp 2005); alone it takes exactly
the analytical time (``sim.parallel.collectives``)."""

from __future__ import annotations

from dataclasses import dataclass

from gpuplan.sim.parallel import collectives as co


@dataclass(frozen=True, slots=True)
class Comm:
    """A collective or send: fixed seconds, then busy seconds on each link level."""

    name: str
    stream: str  # tp, cp, ep, pp, dp, dp-gather
    fixed_s: float
    intra_s: float = 0.0  # on the scale-up (NVLink) port
    inter_s: float = 0.0  # on the NIC
    group: str = ""  # "dp": spans data-parallel replicas (they meet before it starts)

    @property
    def total_s(self) -> float:
        return self.fixed_s + self.intra_s + self.inter_s


def comm_from(lk, name: str, stream: str, op: str, local: int, nodes: int, nbytes: float,
              group: str = "") -> Comm:  # fmt: skip
    """A hierarchical collective of ``nbytes`` per rank as fixed and busy seconds."""
    fn = {
        "all_reduce": co.all_reduce_s,
        "all_gather": co.all_gather_s,
        "reduce_scatter": co.reduce_scatter_s,
        "all_to_all": co.all_to_all_s,
    }[op]
    total = float(fn(lk, local, nodes, nbytes)) if local * nodes > 1 else 0.0
    intra, inter = _bytes_sent(op, local, nodes, nbytes)
    inter_bw = lk.inter_bytes_per_s / (lk.oversubscription if nodes > lk.nodes_per_leaf else 1)
    return split_comm(name, stream, total, intra / lk.intra_bytes_per_s, inter / inter_bw, group)


def send_from(lk, name: str, cross: bool, nbytes: float, extra_s: float = 0.0) -> Comm:
    """A point-to-point message (and ``extra_s`` of NVLink all-gather after it)."""
    total = float(co.send_recv_s(lk, cross, nbytes)) + extra_s
    if cross:
        return split_comm(name, "pp", total, 0.0, nbytes / lk.inter_bytes_per_s)
    return split_comm(name, "pp", total, nbytes / lk.intra_bytes_per_s, 0.0)


def split_comm(name, stream, total, intra_s, inter_s, group="") -> Comm:
    busy = intra_s + inter_s
    if busy > total > 0:  # a latency-bound protocol: the bandwidth terms are an upper bound
        intra_s, inter_s = intra_s * total / busy, inter_s * total / busy
    if total <= 0:
        intra_s = inter_s = 0.0
    return Comm(name, stream, max(total - intra_s - inter_s, 0.0), intra_s, inter_s, group)


def _bytes_sent(op: str, local: int, nodes: int, b: float) -> tuple[float, float]:
    """(bytes over NVLink, bytes over the NIC) one rank sends in the hierarchical ``op``."""
    lo, n = local, nodes
    if op == "all_reduce":
        if n == 1:
            return 2 * (lo - 1) / lo * b, 0.0
        shard = b / lo
        return (lo - 1) / lo * b + (lo - 1) * shard, 2 * (n - 1) / n * shard
    if op == "all_gather":
        return ((lo - 1) * b, 0.0) if n == 1 else ((lo - 1) * b * n, (n - 1) * b)
    if op == "reduce_scatter":
        return ((lo - 1) / lo * b, 0.0) if n == 1 else ((lo - 1) / lo * b, (n - 1) / n * b / lo)
    g = lo * n  # all_to_all: both levels at once; the larger share sets the time
    return ((lo - 1) / lo * b, 0.0) if n == 1 else (0.0, (g - lo) / g * b)
