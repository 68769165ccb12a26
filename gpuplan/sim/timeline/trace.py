"""A Chrome/Perfetto trace of a step timeline (the Trace Event Format: Google, "Trace Event
Format", 2016; opened by https://ui.perfetto.dev and chrome://tracing).

A process per GPU, a thread per stream (compute, tp, cp, ep, pp, dp, dp-gather, and ``waits``:
why the compute stream stood still), every kernel and collective a complete ("X") slice, times in
microseconds. With ``detail="kernel"`` a compute step is drawn as its kernels back to back, each
scaled by the step's jitter and straggler factor; ``detail="step"`` draws one slice per step
(a block half), for very large timelines. Symmetric ranks simulated once appear once, named after
the ranks they stand for; an ``all_ranks`` timeline draws every GPU.
"""

from __future__ import annotations

import json
from pathlib import Path

from gpuplan.errors import check_choice
from gpuplan.outputs import write_text
from gpuplan.sim.timeline.result import STREAMS, StepTimeline

US_PER_S = 1e6
WAIT_TID = len(STREAMS)


def _pids(tl: StepTimeline) -> dict[int, list[int]]:
    """gid -> the trace processes (global ranks) that show it."""
    return {g.gid: (list(g.ranks) if tl.all_ranks else [g.ranks[0]]) for g in tl.gpus}


def _metadata(tl: StepTimeline, pids: dict[int, list[int]]) -> list[dict]:
    out = []
    for g in tl.gpus:
        for pid in pids[g.gid]:
            stands = (
                ""
                if tl.all_ranks
                else (
                    f"; stands for its TP x CP group, ranks {_ranges(g.ranks)}, and the other replicas"
                )
            )
            name = f"GPU {pid} (pp stage {g.stage}, dp replica {g.dp}{stands})"
            out.append({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": name}})
            out.append({"ph": "M", "name": "process_sort_index", "pid": pid,
                        "args": {"sort_index": pid}})  # fmt: skip
            for tid, stream in enumerate((*STREAMS, "waits")):
                out.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                            "args": {"name": stream}})  # fmt: skip
    return out


def _ranges(ranks) -> str:
    ranks = list(ranks)
    return str(ranks[0]) if len(ranks) == 1 else f"{ranks[0]}..{ranks[-1]}"


def _slices(tl: StepTimeline, detail: str):
    tids = {s: k for k, s in enumerate(STREAMS)}
    for gid, stream, name, start, end, work, mb, chunk in tl.slices:
        args = {"micro_batch": mb, "chunk": chunk}
        tid = tids[stream]
        if stream != "compute" or detail == "step" or not work.compute_s:
            yield gid, _event(name, stream, start, end - start, tid, args)
            continue
        scale, t = (end - start) / work.compute_s, start
        for item in work.items:
            dur = item.time_s * scale
            yield gid, _event(item.op, item.category, t, dur, tid,
                              args | {"phase": item.phase, "bound": item.bound})  # fmt: skip
            t += dur
    for gid, reason, start, end in tl.waits:
        yield gid, _event(reason, "wait", start, end - start, WAIT_TID, {})


def _event(name, cat, start_s, dur_s, tid, args) -> dict:
    return {
        "name": name,
        "cat": cat,
        "ph": "X",
        "ts": round(start_s * US_PER_S, 4),
        "dur": round(dur_s * US_PER_S, 4),
        "tid": tid,
        "args": args,
    }


def chrome_trace(tl: StepTimeline, *, detail: str = "kernel") -> dict:
    """The timeline as a Trace Event Format document."""
    check_choice("detail", detail, ("kernel", "step"))
    pids = _pids(tl)
    events = _metadata(tl, pids)
    for gid, ev in _slices(tl, detail):
        for pid in pids[gid]:
            events.append(ev | {"pid": pid})
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "model": tl.model,
            "strategy": tl.strategy_label,
            "step_time_s": tl.step_time_s,
            "notes": list(tl.notes),
        },  # fmt: skip
    }


def write_chrome_trace(tl: StepTimeline, path: str | Path, *, detail: str = "kernel") -> int:
    """Write the trace to ``path`` (JSON); returns the number of slices written."""
    doc = chrome_trace(tl, detail=detail)
    write_text(path, json.dumps(doc, separators=(",", ":")))
    return sum(1 for e in doc["traceEvents"] if e["ph"] == "X")


def trace_slices(tl: StepTimeline, detail: str = "kernel") -> int:
    """How many slices ``chrome_trace`` would draw (to choose the detail before writing)."""
    per_gpu = {g.gid: (len(g.ranks) if tl.all_ranks else 1) for g in tl.gpus}
    n = sum(per_gpu[w[0]] for w in tl.waits)
    for gid, stream, *_rest in tl.slices:
        work = _rest[3]
        k = len(work.items) if (stream == "compute" and detail == "kernel") else 1
        n += k * per_gpu[gid]
    return n
