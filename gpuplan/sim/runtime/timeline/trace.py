"""A Chrome/Perfetto trace of a step timeline (the Trace Event Format: Google, "Trace Event
Format", 2016; opened by https://ui.perfetto.dev and chrome://tracing).

A process per GPU, a thread per stream (compute, tp, cp, ep, pp, dp, dp-gather, and ``waits``:
why the compute stream stood still), every kernel and collective a complete ("X") slice, times in
microseconds. With ``detail="kernel"`` a compute step is drawn as its kernels back to back, each
scaled by the step's jitter and straggler factor; ``detail="step"`` draws one slice per step
(a block half), for very large timelines; ``detail="task"``, for the largest, one compute slice
per task (a micro-batch's forward or backward of one model chunk), the pipeline and
data-parallel transfers and the waits for them, leaving the TP, CP and EP collectives inside the
tasks. Symmetric ranks simulated once appear once, named after the ranks they stand for; an
``all_ranks`` timeline draws every GPU (``every_rank``), or each TP x CP group once when that
would be too large (its ranks run in lock step).

``write_chrome_trace`` writes the same bytes as ``json.dumps(chrome_trace(...))`` with compact
separators, formatting each slice once however many ranks draw it; ``write_openable_trace``
writes it at the finest detail that holds at most ``MAX_TRACE_SLICES`` slices (``trace_detail``).
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from gpuplan.errors import GpuplanError, check_choice
from gpuplan.outputs import write_text
from gpuplan.sim.runtime.timeline.result import STREAMS, StepTimeline, gc_paused

US_PER_S = 1e6
WAIT_TID = len(STREAMS)
DETAILS = ("kernel", "step", "task")
TASK_STREAMS = ("compute", "pp", "dp", "dp-gather")  # what a task-detail trace draws
TASK_WAITS = ("pipeline wait", "pp send", "dp ")  # waits it draws (prefixes)
TASK_KIND = {"fwd": "F", "bwd": "B", "recompute": "B", "optimizer": "optimizer step"}


def _pids(tl: StepTimeline, every_rank: bool = True) -> dict[int, list[int]]:
    """gid -> the trace processes (global ranks) that show it."""
    every = tl.all_ranks and every_rank
    return {g.gid: (list(g.ranks) if every else [g.ranks[0]]) for g in tl.gpus}


def _metadata(tl: StepTimeline, pids: dict[int, list[int]]) -> list[dict]:
    out = []
    for g in tl.gpus:
        for pid in pids[g.gid]:
            stands = ""
            if not tl.all_ranks:
                stands = (
                    f"; stands for its TP x CP group, ranks {_ranges(g.ranks)}, and the other replicas"
                )
            elif len(pids[g.gid]) < len(g.ranks):
                stands = f"; stands for its TP x CP group, ranks {_ranges(g.ranks)}"
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
    """(gid, event) of every slice drawn; an event is ``_event``'s tuple."""
    if detail == "task":
        yield from _task_slices(tl)
        return
    tids = {s: k for k, s in enumerate(STREAMS)}
    last, events = None, []  # a copied replica's slice follows its original: the same events
    for row in tl.slices:
        gid = row[0]
        if row[1:] != last:
            last, events = row[1:], _row_events(tids, detail, row)
        for ev in events:
            yield gid, ev
    last, ev = None, None
    for gid, reason, start, end in tl.waits:
        if (reason, start, end) != last:
            last, ev = (reason, start, end), _event(reason, "wait", start, end - start, WAIT_TID, ())
        yield gid, ev


def _row_events(tids: dict, detail: str, row: tuple) -> list[tuple]:
    _gid, stream, name, start, end, work, mb, chunk = row
    args = (("micro_batch", mb), ("chunk", chunk))
    tid = tids[stream]
    if stream != "compute" or detail == "step" or not work.compute_s:
        return [_event(name, stream, start, end - start, tid, args)]
    out, scale, t = [], (end - start) / work.compute_s, start
    for item in work.items:
        dur = item.time_s * scale
        out.append(_event(item.op, item.category, t, dur, tid,
                          (*args, ("phase", item.phase), ("bound", item.bound))))  # fmt: skip
        t += dur
    return out


def _task_slices(tl: StepTimeline):
    """One compute slice per task (from its first kernel's start to its last's end), the pp and
    dp transfers, and the waits that are not inside a task."""
    tasks: list[list] = []  # [gid, kind, mb, chunk, start, end], in the order they ran
    last: dict[int, list] = {}
    for gid, stream, name, start, end, work, mb, chunk in tl.slices:
        if stream != "compute":
            if stream in TASK_STREAMS:
                yield gid, _event(name, stream, start, end - start, STREAMS.index(stream),
                                  (("micro_batch", mb), ("chunk", chunk)))  # fmt: skip
            continue
        task = last.get(gid)
        kind = TASK_KIND.get(work.phase, task[1] if task else "F")  # host issue: its task's
        if task is None or (task[1], task[2], task[3]) != (kind, mb, chunk):
            task = last[gid] = [gid, kind, mb, chunk, start, end]
            tasks.append(task)
        task[5] = end
    for gid, kind, mb, chunk, start, end in tasks:
        name = kind if mb < 0 else f"{kind} micro-batch {mb} chunk {chunk}"
        yield gid, _event(name, "task", start, end - start, 0,
                          (("micro_batch", mb), ("chunk", chunk)))  # fmt: skip
    for gid, reason, start, end in tl.waits:
        if reason.startswith(TASK_WAITS):
            yield gid, _event(reason, "wait", start, end - start, WAIT_TID, ())


def _event(name, cat, start_s, dur_s, tid, args: tuple) -> tuple:
    """(name, cat, ts, dur, tid, args as (key, value) pairs): times in microseconds."""
    return name, cat, round(start_s * US_PER_S, 4), round(dur_s * US_PER_S, 4), tid, args


def _as_dict(ev: tuple) -> dict:
    name, cat, ts, dur, tid, args = ev
    return {"name": name, "cat": cat, "ph": "X", "ts": ts, "dur": dur, "tid": tid,
            "args": dict(args)}  # fmt: skip


class _Text:
    """Events as the compact JSON ``json.dumps`` writes, each string and argument set encoded
    once (names and micro-batch numbers repeat by the thousand)."""

    def __init__(self) -> None:
        self._dumps = json.JSONEncoder(separators=(",", ":")).encode
        self._memo: dict = {}

    def _once(self, key, make):
        out = self._memo.get(key)
        if out is None:
            out = self._memo[key] = make()
        return out

    def body(self, ev: tuple) -> str:
        """The event without its closing brace (the pid goes last)."""
        name, cat, ts, dur, tid, args = ev
        head = self._once(("h", name, cat), lambda: '{"name":' + self._dumps(name) + ',"cat":'
                          + self._dumps(cat) + ',"ph":"X","ts":')  # fmt: skip
        tail = self._once(("a", tid, args), lambda: f',"tid":{tid},"args":'
                          + self._dumps(dict(args)))  # fmt: skip
        return f"{head}{ts!r},\"dur\":{dur!r}{tail}"

    def dumps(self, obj) -> str:
        return self._dumps(obj)


def _other(tl: StepTimeline) -> dict:
    return {
        "model": tl.model,
        "strategy": tl.strategy_label,
        "step_time_s": tl.step_time_s,
        "notes": list(tl.notes),
    }


def chrome_trace(tl: StepTimeline, *, detail: str = "kernel", every_rank: bool = True) -> dict:
    """The timeline as a Trace Event Format document."""
    check_choice("detail", detail, DETAILS)
    pids = _pids(tl, every_rank)
    events = _metadata(tl, pids)
    for gid, ev in _slices(tl, detail):
        event = _as_dict(ev)
        for pid in pids[gid]:
            events.append(event | {"pid": pid})
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": _other(tl)}


def write_chrome_trace(tl: StepTimeline, path: str | Path, *, detail: str = "kernel",
                       every_rank: bool = True) -> int:  # fmt: skip
    """Write the trace to ``path`` (JSON); returns the number of slices written."""
    check_choice("detail", detail, DETAILS)
    with gc_paused():
        return _write(tl, path, detail, every_rank)


def _write(tl: StepTimeline, path, detail: str, every_rank: bool) -> int:
    pids = _pids(tl, every_rank)
    text = _Text()
    dumps = text.dumps
    parts = [dumps(e) for e in _metadata(tl, pids)]
    n = 0
    last, body = None, ""
    for gid, ev in _slices(tl, detail):
        if ev is not last:  # copies of a replica share their events
            last, body = ev, text.body(ev)
        ranks = pids[gid]
        parts.extend(f'{body},"pid":{pid}}}' for pid in ranks)
        n += len(ranks)
    head = '{"traceEvents":['
    tail = '],"displayTimeUnit":"ms","otherData":' + dumps(_other(tl)) + "}"
    write_text(path, head + ",".join(parts) + tail)
    return n


def trace_slices(tl: StepTimeline, detail: str = "kernel", every_rank: bool = True) -> int:
    """How many slices ``chrome_trace`` would draw (to choose the detail before writing)."""
    check_choice("detail", detail, DETAILS)
    pids = _pids(tl, every_rank)
    return _drawn(_task_counts(tl) if detail == "task" else _counts(tl)[detail], pids)


def _drawn(per_gpu: dict[int, int], pids) -> int:
    """Slices in the trace: each simulated GPU's, once for every rank it is drawn as."""
    return sum(k * len(pids[gid]) for gid, k in per_gpu.items())


def _counts(tl: StepTimeline) -> dict[str, dict[int, int]]:
    """gid -> slices drawn at kernel and at step detail, in one pass."""
    kernel: dict[int, int] = defaultdict(int)
    step: dict[int, int] = defaultdict(int)
    for w in tl.waits:
        step[w[0]] += 1
    for gid, stream, _n, _s, _e, work, *_ in tl.slices:
        step[gid] += 1
        if stream == "compute" and work.compute_s:
            kernel[gid] += len(work.items) - 1
    for gid, k in step.items():
        kernel[gid] += k
    return {"kernel": kernel, "step": step}


def _task_counts(tl: StepTimeline) -> dict[int, int]:
    """gid -> slices drawn at task detail (counted, not formatted)."""
    out: dict[int, int] = defaultdict(int)
    last: dict[int, tuple] = {}
    for gid, stream, _n, _s, _e, work, mb, chunk in tl.slices:
        if stream != "compute":
            out[gid] += stream in TASK_STREAMS
            continue
        prev = last.get(gid)
        kind = TASK_KIND.get(work.phase, prev[0] if prev else "F")
        if prev != (kind, mb, chunk):
            last[gid] = (kind, mb, chunk)
            out[gid] += 1
    for gid, reason, *_ in tl.waits:
        out[gid] += reason.startswith(TASK_WAITS)
    return out


LADDER = (("kernel", True), ("step", True), ("step", False), ("task", False))
MAX_TRACE_SLICES = 2_000_000  # about 250 MB of JSON, written in seconds; a viewer opens it


def choose_detail(tl: StepTimeline, max_slices: int) -> tuple[str, bool, int]:
    """The finest (detail, every rank) of ``LADDER`` whose trace holds at most ``max_slices``
    slices, and that count; the coarsest when none does."""
    counts = _counts(tl)
    n = 0
    for detail, every_rank in LADDER:
        n = _drawn(_task_counts(tl) if detail == "task" else counts[detail],
                   _pids(tl, every_rank))
        if n <= max_slices:
            break
    return detail, every_rank, n


def trace_detail(tl: StepTimeline) -> tuple[str, bool]:
    """The finest (detail, every rank) whose trace holds at most ``MAX_TRACE_SLICES`` slices:
    kernels, then steps (block halves), then each TP x CP group drawn once, then tasks."""
    detail, every_rank, n = choose_detail(tl, MAX_TRACE_SLICES)
    if n > MAX_TRACE_SLICES:
        raise GpuplanError(
            f"the trace would hold {n:,} slices even one per task (at most {MAX_TRACE_SLICES:,}); "
            "drop --all-ranks to draw each symmetric group once"
        )
    return detail, every_rank


def write_openable_trace(tl: StepTimeline, path: str | Path) -> dict[str, Any]:
    """Write the trace at the finest detail that stays openable (``trace_detail``); where it
    went, its slices and its detail."""
    detail, every_rank = trace_detail(tl)
    slices = write_chrome_trace(tl, path, detail=detail, every_rank=every_rank)
    return {"trace": path, "trace_slices": slices, "trace_detail": detail,
            "trace_every_rank": every_rank and tl.all_ranks}  # fmt: skip
