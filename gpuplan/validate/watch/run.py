"""Following a source: a log file read whole or tailed as it grows, or a ``/metrics`` endpoint
polled every ``interval_s``. Both sleep between reads (a tail reads only the new bytes), so
following a job costs a parse of its new lines and nothing more."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gpuplan.errors import GpuplanError
from gpuplan.validate.watch import prometheus
from gpuplan.validate.watch.drift import Tracker
from gpuplan.validate.watch.logs import parse_line

CHUNK_BYTES = 1 << 20


@dataclass
class Outcome:
    """What the watch saw: records (log lines known) or polls, and the last gauges."""

    records: int = 0
    lines: int = 0
    polls: int = 0
    formats: set[str] = field(default_factory=set)
    gauges: dict[str, float | None] = field(default_factory=dict)
    stopped: str = ""  # why the watch ended


def is_url(source: str) -> bool:
    return source.startswith(("http://", "https://"))


def follow_log(path: str, tracker: Tracker, *, follow: bool, interval_s: float,
               idle_s: float | None, on_batch: Callable[[], None] | None = None,
               out: Outcome | None = None) -> Outcome:  # fmt: skip
    """Read ``path`` (and, with ``follow``, its growth until ``idle_s`` without any, or a
    breach); every known line is a record for ``tracker``."""
    p = Path(path)
    if not p.is_file():
        raise GpuplanError(f"SOURCE={path!r} is not a file or an http(s) URL")
    out = out if out is not None else Outcome()
    offset, rest, quiet_s = 0, b"", 0.0
    while True:
        with p.open("rb") as fh:
            fh.seek(offset)
            chunk = fh.read(CHUNK_BYTES)
        offset += len(chunk)
        lines = (rest + chunk).split(b"\n")
        rest = lines.pop()  # a line still being written
        for raw in lines:
            out.lines += 1
            _feed(raw, tracker, out)
        if lines and on_batch is not None:
            on_batch()
        if tracker.breached:
            out.stopped = "left its band"
            return out
        if len(chunk) == CHUNK_BYTES:
            continue  # more to read now
        if not follow:
            if rest.strip():  # a last line without its newline
                _feed(rest, tracker, out)
            out.stopped = "end of file"
            return out
        quiet_s = 0.0 if chunk else quiet_s + interval_s
        if idle_s is not None and quiet_s >= idle_s:
            out.stopped = f"no new lines for {idle_s:g} s"
            return out
        time.sleep(interval_s)


def _feed(raw: bytes, tracker: Tracker, out: Outcome) -> None:
    """One log line: a record for ``tracker`` where gpuplan knows its format."""
    rec = parse_line(raw.decode("utf-8", "replace"))
    if rec is not None:
        out.records += 1
        out.formats.add(rec.source)
        tracker.observe_record(rec)


def poll_metrics(url: str, tracker: Tracker, *, interval_s: float, duration_s: float | None,
                 on_batch: Callable[[], None] | None = None,
                 out: Outcome | None = None) -> Outcome:  # fmt: skip
    """Poll ``url`` every ``interval_s`` until ``duration_s`` or a breach; each interval is one
    observation of the figures that changed in it."""
    out = out if out is not None else Outcome()
    t0 = time.monotonic()
    before, t_before = prometheus.fetch(url), t0
    while True:
        time.sleep(interval_s)
        now = time.monotonic()
        after = prometheus.fetch(url)
        poll = prometheus.between(before, after, now - t_before, now - t0)
        out.polls += 1
        out.gauges = {"running": poll.running, "waiting": poll.waiting, "kv_use": poll.kv_use}
        tracker.observe({"ttft_s": poll.ttft_s, "tpot_s": poll.tpot_s, "e2e_s": poll.e2e_s,
                         "output_tokens_per_s": poll.output_tokens_per_s,
                         "requests_per_s": poll.requests_per_s})  # fmt: skip
        before, t_before = after, now
        if on_batch is not None:
            on_batch()
        if tracker.breached:
            out.stopped = "left its band"
            return out
        if duration_s is not None and now - t0 >= duration_s:
            out.stopped = f"{duration_s:g} s polled"
            return out
