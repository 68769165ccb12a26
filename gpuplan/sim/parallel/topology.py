"""A cluster: GPUs in scale-up domains (NVLink/NVSwitch) joined by a scale-out network, and where
each parallel dimension lands on that hierarchy.

Model, named:
- A scale-up domain is the set of GPUs an NVSwitch fabric joins (8 in a DGX/HGX node, 72 in a
  GB200 NVL72 rack); inside it every GPU reaches every other at ``scaleup_bytes_per_s`` (one
  direction, per GPU). Between domains each GPU has its own NIC (a rail-optimized fat tree, as
  in NVIDIA's DGX SuperPOD reference architectures): ``scaleout_bytes_per_s`` per GPU, of which
  collectives reach ``scaleout_efficiency``; groups spanning more than ``nodes_per_leaf`` domains
  cross the spine, whose bandwidth is divided by ``oversubscription``.
- Ranks are numbered with the dimensions of ``placement`` from innermost to outermost (Megatron-
  Core's default order tp-cp-ep-dp-pp; expert parallelism lives inside the data-parallel
  dimension). A group of ``g`` ranks spaced ``stride`` apart then has ``local = min(g, D //
  stride)`` members per domain of ``D`` GPUs (at least 1) and spans ``ceil(g / local)`` domains.

Presets (datasheets): NVIDIA DGX A100 System Architecture white paper (eight A100 SXM4, NVLink 3
at 600 GB/s bidirectional per GPU through six NVSwitches, eight 200 Gb/s HDR InfiniBand ports for
compute; Selene, the cluster of Narayanan et al. 2021 sec. 5, is built of them); NVIDIA DGX H100
and DGX H200 datasheets (NVLink 4 at 900 GB/s bidirectional, eight ConnectX-7 400 Gb/s NDR); NVIDIA
GB200 NVL72 datasheet (72 Blackwell GPUs in one NVLink 5 domain at 1.8 TB/s bidirectional per GPU,
4 GPUs per compute tray, ConnectX-7 400 Gb/s per GPU for scale-out); NVIDIA GB300 NVL72 page (72
Blackwell Ultra GPUs and 36 Grace CPUs in one NVLink 5 domain, 130 TB/s = 72 x 1.8 TB/s, 18
compute trays of 4 GPUs, a ConnectX-8 800 Gb/s SuperNIC per GPU).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from gpuplan.errors import (
    GpuplanError,
    check_key,
    check_kind,
    check_number,
    check_positive,
    shown,
    unknown_key,
)
from gpuplan.hwmodels.accelerators import get_accelerator
from gpuplan.units import US

PLACEMENT_DIMS = ("tp", "cp", "dp", "pp")
# Assumptions, named: NCCL over InfiniBand/RoCE reaches about 90% of the NIC's line rate for large
# messages (64b/66b encoding and headers take a few percent, the ring the rest); one algorithm
# step between domains costs about 10 microseconds (NIC, switch hops and the NCCL proxy).
SCALEOUT_EFFICIENCY = 0.9
SCALEOUT_LATENCY_S = 10 * US


@dataclass(frozen=True, slots=True, kw_only=True)
class Cluster:
    """GPUs, their scale-up domains and the scale-out network between them."""

    key: str
    name: str
    gpu: str  # accelerator catalogue key
    gpus_per_node: int
    scaleup_size: int  # GPUs in one NVLink/NVSwitch domain
    scaleup_bytes_per_s: float  # per GPU, one direction
    scaleout_bytes_per_s: float  # NIC per GPU, one direction
    scaleout_efficiency: float = SCALEOUT_EFFICIENCY
    scaleout_latency_s: float = SCALEOUT_LATENCY_S
    oversubscription: float = 1.0  # spine taper beyond one leaf group
    nodes_per_leaf: int = 32  # domains under one leaf layer (a DGX SuperPOD scalable unit)
    placement: tuple[str, ...] = PLACEMENT_DIMS  # innermost first
    source: str = ""

    def __post_init__(self) -> None:
        for field in ("gpus_per_node", "scaleup_size", "nodes_per_leaf"):
            check_positive(field, getattr(self, field))
        for field in ("scaleup_bytes_per_s", "scaleout_bytes_per_s", "oversubscription"):
            check_positive(field, getattr(self, field))
        check_positive("scaleout_latency_s", self.scaleout_latency_s, allow_zero=True)
        for field in ("key", "name", "gpu", "source"):
            check_kind(field, getattr(self, field), str)
        check_number("scaleout_efficiency", self.scaleout_efficiency)
        if not 0 < self.scaleout_efficiency <= 1:
            raise GpuplanError(
                f"scaleout_efficiency={self.scaleout_efficiency!r} is invalid: it is a fraction "
                "in (0, 1]"
            )
        placement = self.placement
        if not isinstance(placement, tuple | list) or sorted(map(str, placement)) != sorted(
            PLACEMENT_DIMS
        ) or not all(isinstance(d, str) for d in placement):
            raise GpuplanError(
                f"placement={shown(self.placement)} is invalid: order each of "
                f"{', '.join(PLACEMENT_DIMS)} once, innermost first"
            )

    @property
    def accelerator(self):
        return get_accelerator(self.gpu)


def _nodes(
    key: str, name: str, gpu: str, *, gpus_per_node: int, scaleup_size: int, source: str, **kw
) -> Cluster:
    """A preset of ``gpu`` nodes whose links are the accelerator catalogue's (one source)."""
    acc = get_accelerator(gpu)
    return Cluster(
        key=key,
        name=name,
        gpu=gpu,
        gpus_per_node=gpus_per_node,
        scaleup_size=scaleup_size,
        scaleup_bytes_per_s=acc.scaleup_bytes_per_s,
        scaleout_bytes_per_s=acc.scaleout_bytes_per_s,
        source=source,
        **kw,
    )


PRESETS: dict[str, Cluster] = {
    c.key: c
    for c in (
        _nodes(
            "dgx-a100",
            "DGX A100 nodes (Selene), 8x A100 80GB, NVLink 3, 8x HDR 200 Gb/s",
            "a100-sxm-80gb",
            gpus_per_node=8,
            scaleup_size=8,
            source="NVIDIA DGX A100 System Architecture white paper; Narayanan et al. 2021 sec. 5",
        ),
        _nodes(
            "dgx-h100",
            "DGX H100 nodes, 8x H100 SXM, NVLink 4, 8x NDR 400 Gb/s",
            "h100-sxm",
            gpus_per_node=8,
            scaleup_size=8,
            source="NVIDIA DGX H100 datasheet; DGX SuperPOD reference architecture "
            "(rail-optimized)",
        ),
        _nodes(
            "dgx-h200",
            "DGX H200 nodes, 8x H200, NVLink 4, 8x NDR 400 Gb/s",
            "h200",
            gpus_per_node=8,
            scaleup_size=8,
            source="NVIDIA DGX H200 datasheet",
        ),
        _nodes(
            "gb200-nvl72",
            "GB200 NVL72 racks, 72 Blackwell GPUs per NVLink 5 domain, 400 Gb/s per GPU",
            "gb200",
            gpus_per_node=4,
            scaleup_size=72,
            nodes_per_leaf=8,
            source="NVIDIA GB200 NVL72 datasheet",
        ),
        _nodes(
            "gb300-nvl72",
            "GB300 NVL72 racks, 72 Blackwell Ultra GPUs per NVLink 5 domain, 800 Gb/s per GPU",
            "gb300",
            gpus_per_node=4,
            scaleup_size=72,
            nodes_per_leaf=8,
            source="NVIDIA GB300 NVL72 page (72 GPUs in one NVLink domain, 130 TB/s; ConnectX-8 "
            "800 Gb/s per GPU)",
        ),
    )
}


def get_cluster(key: str) -> Cluster:
    """A preset cluster by key (dgx-a100, dgx-h100, dgx-h200, gb200-nvl72, gb300-nvl72)."""
    check_key("cluster", key)
    try:
        return PRESETS[key.strip().lower()]
    except KeyError:
        raise unknown_key("cluster", key, PRESETS) from None


def cluster_for(gpu: str) -> Cluster:
    """The preset built of ``gpu``, else 8-GPU nodes of it with its catalogue links."""
    acc = get_accelerator(gpu)
    for preset in PRESETS.values():
        if preset.gpu == acc.key:
            return preset
    up = acc.scaleup_bytes_per_s or acc.pcie_bytes_per_s
    out = acc.scaleout_bytes_per_s or acc.pcie_bytes_per_s
    if not (up and out):
        raise GpuplanError(f"accelerator {acc.key!r} has no known GPU-to-GPU link bandwidth")
    return Cluster(
        key=f"{acc.key}-x8",
        name=f"8x {acc.name} per node (catalogue links)",
        gpu=acc.key,
        gpus_per_node=8,
        scaleup_size=8,
        scaleup_bytes_per_s=up,
        scaleout_bytes_per_s=out,
        source=f"accelerator catalogue row {acc.key!r}: {acc.source}",
    )


def built_of(cluster: Cluster, gpu: str) -> Cluster:
    """``cluster``'s nodes (their size, scale-up domain, leaves and placement) built of
    accelerator ``gpu`` instead, with its links where the catalogue or its file gives them (a
    what-if of a preset: ``--cluster dgx-h200 --gpu h200 --override ...``)."""
    acc = get_accelerator(gpu)
    return replace(
        cluster,
        key=f"{cluster.key}-of-{acc.key}",
        name=f"{cluster.name}, built of {acc.key}",
        gpu=acc.key,
        scaleup_bytes_per_s=acc.scaleup_bytes_per_s or cluster.scaleup_bytes_per_s,
        scaleout_bytes_per_s=acc.scaleout_bytes_per_s or cluster.scaleout_bytes_per_s,
        source=f"{cluster.source}; accelerator {acc.key}: {acc.source}",
    )


def with_placement(cluster: Cluster, order: str) -> Cluster:
    """``cluster`` with a placement given as text, innermost first: 'tp,cp,dp,pp'."""
    dims = tuple(d.strip() for d in order.replace("-", ",").split(",") if d.strip())
    return replace(cluster, placement=dims)


def strides(cluster: Cluster, sizes: dict) -> dict:
    """Rank stride of each dimension: the product of the sizes placed inside it."""
    out, inner = {}, 1
    for dim in cluster.placement:
        out[dim] = inner
        inner = inner * sizes[dim]
    return out


def span(cluster: Cluster, group, stride):
    """(members per scale-up domain, domains spanned) of groups of ``group`` ranks ``stride``
    apart; numpy arrays or ints."""
    d = cluster.scaleup_size
    local = np.minimum(group, np.maximum(1, d // stride))
    nodes = -(-np.asarray(group) // local)
    return local, nodes


def spans(cluster: Cluster, tp, cp, dp, pp, ep) -> dict:
    """(local, nodes) of the tp, cp, dp*cp (gradient reduction), ep groups, and whether a
    pipeline send leaves the domain."""
    st = strides(cluster, {"tp": tp, "cp": cp, "dp": dp, "pp": pp})
    out = {
        name: span(cluster, size, st[dim])
        for name, size, dim in (
            ("tp", tp, "tp"),
            ("cp", cp, "cp"),
            ("dp", dp, "dp"),
            ("ep", ep, "dp"),
        )
    }
    # the gradient-reduction group is dp x cp: it spans what both span
    dl, dn = out["dp"]
    cl, cn = out["cp"]
    out["dpcp"] = (dl * cl, dn * cn)
    out["pp_cross"] = np.asarray(st["pp"]) >= cluster.scaleup_size
    return out


def nodes_needed(cluster: Cluster, n_gpus: int) -> int:
    """Scale-up domains ``n_gpus`` GPUs fill."""
    return math.ceil(n_gpus / cluster.scaleup_size)
