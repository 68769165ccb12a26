"""An estimate is a breakdown: every second attributed to one of the five layers and an operator.

``Item.layer`` names the engineering layer a cost belongs to: ``model`` (the operators' own
kernel time), ``parallel`` (exposed communication), ``runtime`` (pipeline bubble, launch
overhead not hidden behind the GPU), ``compile`` (recomputation, what fusion or CUDA graphs
change) and ``hardware`` (nothing is attributed there directly: hardware prices the rest).
The total is the sum of the items by construction: items carry only exposed time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from gpuplan.errors import check_kind
from gpuplan.hwmodels.kernel_time import KernelTime
from gpuplan.hwmodels.price import host_calls, kernel_count, price
from gpuplan.workloads.ops import Collective, Op, op_class

LAYERS = ("model", "parallel", "runtime", "compile", "hardware")


@dataclass(frozen=True, slots=True, kw_only=True)
class Item:
    layer: str  # one of LAYERS
    category: str  # kernel class: gemm, attention, elementwise, communication, launch, ...
    op: str  # operator name
    phase: str  # fwd, bwd, recompute, optimizer, step
    time_s: float
    flops: float = 0.0
    bytes: float = 0.0
    kernels: int = 0
    host_calls: int = 0  # torch calls the CPU dispatches (eager): kernels plus views
    bound: str = ""  # compute, memory, launch (what limits the kernel)


@dataclass(frozen=True, slots=True, kw_only=True)
class Breakdown:
    """A prediction's parts: time items that sum to the total, and memory terms."""

    items: tuple[Item, ...]
    memory_bytes: dict[str, float] = field(default_factory=dict)  # named terms of peak memory
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        check_kind("items", self.items, (tuple, list))
        for item in self.items:
            if not isinstance(item, Item):
                check_kind("items[...]", item, Item)
        check_kind("memory_bytes", self.memory_bytes, dict)
        check_kind("notes", self.notes, (tuple, list))

    @property
    def total_s(self) -> float:
        return sum(i.time_s for i in self.items)

    @property
    def peak_bytes(self) -> float | None:
        return sum(self.memory_bytes.values()) if self.memory_bytes else None

    @property
    def flops(self) -> float:
        return sum(i.flops for i in self.items)

    @property
    def kernels(self) -> int:
        return sum(i.kernels for i in self.items)

    @property
    def achieved_flops_per_s(self) -> float:
        """The FLOPs over the total time (0 for no time)."""
        total = self.total_s
        return self.flops / total if total else 0.0

    def fits(self, capacity_bytes: float) -> bool | None:
        """Whether the peak memory fits in ``capacity_bytes`` (None: no memory terms)."""
        peak = self.peak_bytes
        return None if peak is None else bool(peak <= capacity_bytes)

    def frame(self):
        """One row per item (pandas DataFrame)."""
        import pandas as pd

        cols = ["layer", "category", "op", "phase", "time_s", "flops", "bytes", "kernels", "bound"]
        return pd.DataFrame([{c: getattr(i, c) for c in cols} for i in self.items], columns=cols)

    def by(self, *keys: str):
        """Time, FLOPs, bytes and kernels summed by ``keys`` (e.g. "layer", "category")."""
        df = self.frame()
        out = df.groupby(list(keys), sort=False)[["time_s", "flops", "bytes", "kernels"]].sum()
        out["share"] = out["time_s"] / max(self.total_s, 1e-300)
        return out.reset_index()

    def __add__(self, other: Breakdown) -> Breakdown:
        memory = dict(self.memory_bytes)
        for k, v in other.memory_bytes.items():
            memory[k] = memory.get(k, 0.0) + v
        return Breakdown(
            items=self.items + other.items, memory_bytes=memory, notes=self.notes + other.notes
        )


def priced_items(
    ops: Iterable[Op],
    acc,
    eff,
    *,
    phase: str,
    layer: str = "model",
    repeat: int = 1,
    price_fn: Callable[[Op], KernelTime] | None = None,
) -> list[Item]:
    """Price each operator on ``acc`` and wrap it as an item; ``repeat`` multiplies (layers).
    ``price_fn`` replaces ``hwmodels.price`` (e.g. quantized weights); collectives count as
    the parallelization layer's time."""
    items = []
    for op in ops:
        kt: KernelTime = price_fn(op) if price_fn else price(op, acc, eff)
        if kt.total_s == 0.0 and host_calls(op) == 0:
            continue
        items.append(
            Item(
                layer="parallel" if isinstance(op, Collective) else layer,
                category=op_class(op),
                op=op.name,
                phase=phase,
                time_s=kt.total_s * repeat,
                flops=op.flops * repeat,
                bytes=op.bytes * repeat,
                kernels=kernel_count(op) * repeat,
                host_calls=host_calls(op) * repeat,
                bound=kt.bound,
            )
        )
    return items
