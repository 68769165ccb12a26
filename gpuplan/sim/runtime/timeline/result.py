"""What a step timeline returns: the step time, every slice, the waits, and views of them —
per-GPU summary, bubble fraction, a ``Breakdown`` of the GPU that finished last, link use.

The breakdown partitions the last GPU's compute stream: each compute slice's time is shared out
over the kernels it ran (in proportion to their priced times, so jitter and stragglers scale
them), and each wait is an item of its own (``pipeline wait`` is the bubble, a collective's name
its exposed time). The items sum to the step time.
"""

from __future__ import annotations

import contextlib
import gc
from collections import defaultdict
from dataclasses import dataclass, field

from gpuplan.sim.estimate.breakdown import Breakdown, Item

WAIT_CLASS = {  # wait reason -> (breakdown layer, category)
    "pipeline wait": ("runtime", "bubble"),
}
STREAMS = ("compute", "tp", "cp", "ep", "pp", "dp", "dp-gather")


@contextlib.contextmanager
def gc_paused():
    """The cyclic garbage collector off for the block (restored as it was): a timeline holds
    millions of live tuples and frees almost none, and each full pass would walk them all."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuInfo:
    """A simulated GPU: its data-parallel replica, pipeline stage and the global ranks it
    stands for (its TP x CP group)."""

    gid: int
    dp: int
    stage: int
    ranks: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class StepTimeline:
    """One simulated training step."""

    model: str
    strategy_label: str
    gpus: tuple[GpuInfo, ...]
    slices: list  # (gid, stream, name, start_s, end_s, work, mb, chunk)
    waits: list  # (gid, reason, start_s, end_s)
    ends: dict  # gid -> the time its optimizer step ended
    links: dict  # link name -> {"busy_s", "shared_s", "transfers"}
    world: int
    all_ranks: bool
    notes: tuple[str, ...] = field(default_factory=tuple)
    wall_s: float = 0.0
    events: int = 0

    @property
    def step_time_s(self) -> float:
        return max(self.ends.values())

    @property
    def critical_gid(self) -> int:
        """The GPU that finished last."""
        return max(self.ends, key=lambda gid: (self.ends[gid], -gid))

    def frame(self):
        """One row per slice (compute and communication), seconds."""
        import pandas as pd

        info = {g.gid: g for g in self.gpus}
        rows = [
            {
                "gpu": gid,
                "dp": info[gid].dp,
                "stage": info[gid].stage,
                "stream": stream,
                "name": name,
                "micro_batch": mb,
                "chunk": chunk,
                "start_s": start,
                "end_s": end,
                "duration_s": end - start,
            }
            for gid, stream, name, start, end, _w, mb, chunk in self.slices
        ]
        return pd.DataFrame(rows)

    def summary(self):
        """Per simulated GPU: compute busy time, waits by kind, end, bubble fraction."""
        import pandas as pd

        busy, waits = defaultdict(float), defaultdict(lambda: defaultdict(float))
        for gid, stream, _n, start, end, *_ in self.slices:
            if stream == "compute":
                busy[gid] += end - start
        for gid, reason, start, end in self.waits:
            waits[gid][reason] += end - start
        bubble = self._bubbles()
        rows = []
        for g in self.gpus:
            w = waits[g.gid]
            rows.append(
                {
                    "gpu": g.gid,
                    "dp": g.dp,
                    "stage": g.stage,
                    "compute_s": busy[g.gid],
                    "pipeline_wait_s": w.get("pipeline wait", 0.0),
                    "comm_wait_s": sum(v for k, v in w.items() if k != "pipeline wait"),
                    "end_s": self.ends[g.gid],
                    "idle_after_s": self.step_time_s - self.ends[g.gid],
                    "bubble_fraction": bubble[g.gid],
                }
            )
        return pd.DataFrame(rows)

    def bubble_fraction(self, gid: int | None = None) -> float:
        """Share of the step GPU ``gid`` lost to the pipeline: neither computing at its priced
        speed nor waiting for a collective; without ``gid``, the mean over the simulated GPUs.

        A GPU's bubble is the step time less its kernels' priced (unperturbed) time and its
        exposed communication: its waits for activations and gradients, its idle end, and the
        time a straggler's slowdown adds to its own kernels. So a straggler raises the bubble
        (its stage idles the others and itself runs long) where the idle share of the GPU that
        finished last, the straggler itself, would fall."""
        bubbles = self._bubbles(None if gid is None else (gid,))
        if gid is not None:
            return bubbles[gid]
        return sum(bubbles[g.gid] for g in self.gpus) / len(self.gpus)

    def _bubbles(self, gids=None) -> dict[int, float]:
        """gid -> bubble fraction, in one pass over the slices and the waits."""
        gids = set(self.ends if gids is None else gids)
        lost = dict.fromkeys(gids, self.step_time_s)
        for g, stream, _n, _s, _e, work, *_ in self.slices:
            if stream == "compute" and g in lost:
                lost[g] -= work.compute_s
        for g, r, s, e in self.waits:
            if r != "pipeline wait" and g in lost:
                lost[g] -= e - s
        return {g: max(lost[g], 0.0) / self.step_time_s for g in gids}

    def breakdown(self, gid: int | None = None) -> Breakdown:
        """The compute stream of GPU ``gid`` (default: the last to finish), itemized."""
        gid = self.critical_gid if gid is None else gid
        spent: dict[int, list] = {}
        for g, stream, _name, start, end, work, *_ in self.slices:
            if g == gid and stream == "compute":
                entry = spent.setdefault(id(work), [work, 0.0, 0])
                entry[1] += end - start
                entry[2] += 1
        items: dict[tuple, list] = {}
        for work, seconds, runs in spent.values():
            share = seconds / work.compute_s if work.compute_s else 0.0
            for i in work.items:
                key = (i.layer, i.category, i.op, i.phase, i.bound)
                acc = items.setdefault(key, [0.0, 0.0, 0.0, 0])
                acc[0] += i.time_s * share
                acc[1] += i.flops * runs
                acc[2] += i.bytes * runs
                acc[3] += i.kernels * runs
        out = [
            Item(
                layer=k[0],
                category=k[1],
                op=k[2],
                phase=k[3],
                time_s=v[0],
                flops=v[1],
                bytes=v[2],
                kernels=v[3],
                bound=k[4],
            )  # fmt: skip
            for k, v in items.items()
        ]
        out += self._wait_items(gid)
        return Breakdown(items=tuple(out), notes=self.notes)

    def _wait_items(self, gid: int) -> list[Item]:
        waited: dict[str, float] = defaultdict(float)
        for g, reason, start, end in self.waits:
            if g == gid:
                waited[reason] += end - start
        tail = self.step_time_s - self.ends[gid]
        if tail > 0:
            waited["pipeline wait"] += tail
        out = []
        for reason, seconds in waited.items():
            layer, category = WAIT_CLASS.get(reason, ("parallel", "communication"))
            out.append(Item(layer=layer, category=category, op=reason, phase="step",
                            time_s=seconds, bound="pipeline" if layer == "runtime" else
                            "bandwidth"))  # fmt: skip
        return out

    def to_dict(self) -> dict:
        """Headline figures for JSON."""
        return {
            "model": self.model,
            "strategy": self.strategy_label,
            "world": self.world,
            "simulated_gpus": len(self.gpus),
            "all_ranks": self.all_ranks,
            "step_time_s": self.step_time_s,
            "bubble_fraction": self.bubble_fraction(),
            "critical_gpu": self.critical_gid,
            "slices": len(self.slices),
            "events": self.events,
            "wall_s": self.wall_s,
            "links": self.links,
            "notes": list(self.notes),
        }
