"""What a serving simulation measured: per-request outcomes, latency statistics, throughput,
goodput under an SLO, and KV-cache use and queue length over time.

Definitions (as vLLM's and DistServe's benchmarks use them):
- TTFT: first token minus arrival; TPOT: (finish - first token) / (output tokens - 1), for
  requests of more than one output token; end-to-end latency: finish minus arrival.
- Output tokens per second over the span from the first arrival to the last finish; the
  achieved request rate over the arrival window (the requests finished between the first
  arrival and the last, over that window; over the span when all arrive at once), so the drain
  after the last arrival does not count against the rate (``summarize``).
- Goodput (DistServe, Zhong et al. OSDI 2024): finished requests per second that met every SLO
  given, over the same window; ``slo_attainment`` is their share of the finished requests.
Percentiles are numpy's (linear interpolation) over finished requests.
- Conservation (as the cluster simulation checks it): at the end every request is in exactly
  one place, finished, running, queued, rejected, transferring or not yet arrived.
"""

from __future__ import annotations

import math
from array import array
from typing import TYPE_CHECKING

import numpy as np

from gpuplan.sim.runtime.serving.request_table import FINISHED, REJECTED

if TYPE_CHECKING:  # pandas only where a frame is asked for: `gpuplan serve` never imports it
    import pandas as pd

STATUS = {0: "in_flight", FINISHED: "finished", REJECTED: "rejected"}
PERCENTILES = (50, 90, 99)
REQUEST_COLUMNS = (
    "request_id",
    "replica",
    "decode_replica",
    "arrival_s",
    "first_token_s",
    "finish_s",
    "prompt_tokens",
    "output_tokens",
    "preemptions",
    "status",
    "ttft_s",
    "tpot_s",
    "e2e_s",
)


def request_frame(table, *, end_s: float) -> pd.DataFrame:
    """One row per request; ``status`` is finished, rejected, in_flight or not_arrived (not yet
    offered to a replica: arriving after ``end_s``, or at the instant the simulation stopped)."""
    import pandas as pd

    return pd.DataFrame(request_columns(table, end_s=end_s))


def request_columns(table, *, end_s: float) -> dict[str, np.ndarray]:
    """``request_frame``'s columns (in ``REQUEST_COLUMNS`` order) as numpy arrays."""
    arrival = np.asarray(table.arrival_s)
    first = np.asarray(table.first_token_s)
    finish = np.asarray(table.finish_s)
    output = np.asarray(table.output, dtype=np.int64)
    code = np.asarray(table.status)
    status = np.array([STATUS[c] for c in range(3)], dtype=object)[code]
    routed = np.asarray(table.replica) >= 0
    status[(code == 0) & ((arrival > end_s) | ~routed)] = "not_arrived"
    done = code == FINISHED
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(done & (output > 1), (finish - first) / (output - 1), np.nan)
    cols = {
            "request_id": np.arange(table.n),
            "replica": np.asarray(table.replica),
            "decode_replica": np.asarray(table.decode_replica),
            "arrival_s": arrival,
            "first_token_s": first,
            "finish_s": np.where(code == REJECTED, np.nan, finish),
            "prompt_tokens": np.asarray(table.prompt, dtype=np.int64),
            "output_tokens": output,
            "preemptions": np.asarray(table.preemptions),
            "status": status,
            "ttft_s": np.where(done, first - arrival, np.nan),
            "tpot_s": tpot,
            "e2e_s": np.where(done, finish - arrival, np.nan),
    }  # fmt: skip
    return {c: cols[c] for c in REQUEST_COLUMNS}


def prefix_cache_summary(table) -> dict:
    """Prompt tokens found in the prefix cache: in all, as a share of the prompt tokens of the
    requests that began a prefill, and the requests that found any."""
    started = [r for r in range(table.n) if table.status[r] == FINISHED or table.prefix_hit[r]]
    prompt = sum(table.prompt[r] for r in started)
    saved = sum(table.prefix_hit)
    return {"saved_prefill_tokens": int(saved),
            "hit_rate": saved / prompt if prompt else 0.0,
            "requests_hit": int(sum(1 for h in table.prefix_hit if h))}  # fmt: skip


def stats(values) -> dict[str, float]:
    """mean, p50, p90, p99 of the finite values (NaN when there are none)."""
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    if not len(x):
        return {"mean": math.nan, **{f"p{p}": math.nan for p in PERCENTILES}}
    return {"mean": float(x.mean()), **{f"p{p}": float(np.percentile(x, p)) for p in PERCENTILES}}


def summarize(
    requests, *, slo_ttft_s: float | None = None, slo_tpot_s: float | None = None
) -> dict:
    """Latency statistics, throughput, counts and goodput of a request frame.

    Output tokens/s is over the whole run (first arrival to last finish, ``span_s``). The
    achieved request rate (and goodput) is over the arrival window: the requests that finished
    between the first arrival and the last, over that window (``arrival_window_s``), so the
    drain after the last arrival neither lowers a rate the system kept up with nor lets an
    overloaded one claim the offered rate. With every request at once (``--rate inf``) the
    window is empty and the rates are over the span (an offline throughput)."""
    col = {c: np.asarray(requests[c]) for c in ("status", "arrival_s", "finish_s", "ttft_s",
                                                 "tpot_s", "e2e_s", "output_tokens", "preemptions")}  # fmt: skip
    status = col["status"]
    done = status == "finished"
    arrival, finish = col["arrival_s"], col["finish_s"]
    span = float(finish[done].max() - arrival.min()) if done.any() else math.nan
    first, last = float(arrival.min()), float(arrival.max())
    window = last - first
    counted = done & (finish <= last) if window > 0 else done
    per = window if window > 0 else span
    out = {
        "ttft_s": stats(col["ttft_s"][done]),
        "tpot_s": stats(col["tpot_s"][done]),
        "e2e_s": stats(col["e2e_s"][done]),
        "output_tokens_per_s": float(col["output_tokens"][done].sum()) / span if span else math.nan,
        "requests_per_s": int(counted.sum()) / per if per else math.nan,
        "finished": int(done.sum()),
        "rejected": int((status == "rejected").sum()),
        "in_flight": int((status == "in_flight").sum()),
        "preemptions": int(col["preemptions"].sum()),
        "span_s": span,
        "arrival_window_s": window,
    }
    if slo_ttft_s is not None or slo_tpot_s is not None:
        met = _meets(col["ttft_s"], col["tpot_s"], slo_ttft_s, slo_tpot_s)
        out["slo_attainment"] = float(met[done].mean()) if done.any() else math.nan
        good = int((met & counted).sum())
        out["goodput_requests_per_s"] = good / per if per else math.nan
    return out


def _meets(ttft, tpot, slo_ttft_s, slo_tpot_s) -> np.ndarray:
    """Per request: TTFT and TPOT within the SLOs given (a one-token request has no TPOT)."""
    ok = np.ones(len(ttft), dtype=bool)
    if slo_ttft_s is not None:
        ok &= ttft <= slo_ttft_s
    if slo_tpot_s is not None:
        ok &= np.nan_to_num(tpot, nan=0.0) <= slo_tpot_s
    return ok


def conservation(requests, table, states) -> dict:
    """Where every request is at the end: finished, running (prefilling or decoding), queued
    (waiting or swapped out), rejected, transferring (its KV cache on the link from a prefill to
    a decode replica) or not yet arrived — each exactly once. Counts are taken from the replicas'
    queues, independently of the request table's status, and must agree with it; raises
    RuntimeError when a request is counted twice, nowhere, or where its status says it is not."""
    status = np.asarray(requests["status"])
    in_flight = set(np.flatnonzero(status == "in_flight").tolist())
    running, queued = [], []
    for st in states:
        queued += [*st.waiting, *st.swapped]
        # a static batch keeps its finished sequences as padding until the batch ends
        running += st.prefilling + [r for r in st.decoding.members if table.status[r] != FINISHED]
    placed = set(running) | set(queued)
    transferring = {r for r in in_flight - placed if table.remote[r]}
    counts = {
        "requests": int(len(status)),
        "finished": int((status == "finished").sum()),
        "running": len(running),
        "queued": len(queued),
        "rejected": int((status == "rejected").sum()),
        "transferring": len(transferring),
        "not_arrived": int((status == "not_arrived").sum()),
    }
    out = counts | {
        "counted_twice": len(running) + len(queued) - len(placed),
        "unaccounted": len(in_flight - placed - transferring),
        "misplaced": len(placed - in_flight),  # in a queue, yet finished, rejected or not arrived
        "in_system_residual": sum(st.in_system for st in states) - len(placed),
    }
    parts = sum(v for k, v in counts.items() if k != "requests")
    out["sum_residual"] = parts - counts["requests"]
    broken = [k for k in ("counted_twice", "unaccounted", "misplaced", "in_system_residual",
                          "sum_residual") if out[k]]  # fmt: skip
    if broken:
        raise RuntimeError(f"serving conservation broken ({', '.join(broken)}): {out}")
    out["ok"] = True
    return out


class Timeline:
    """Queue length and KV-cache use, appended at every event (compact arrays)."""

    COLUMNS = ("time_s", "replica", "in_system", "waiting", "running", "kv_blocks_used")

    def __init__(self, enabled: bool = True):
        self.enabled = enabled
        self._cols = {c: array("d") for c in self.COLUMNS}
        # the columns' appends, bound once (``record`` runs at every event of a simulation)
        self._appends = tuple(self._cols[c].append for c in self.COLUMNS)

    def record(self, now_s: float, st) -> None:
        if not self.enabled:
            return
        at, replica, in_system, waiting, running, used = self._appends
        at(now_s)
        replica(st.index)
        in_system(st.in_system)
        waiting(len(st.waiting) + len(st.swapped))
        decoding = st.decoding
        running(len(st.prefilling) + len(decoding.members))
        used(st.prefill_blocks + decoding.blocks + st.reserved_blocks)  # total less free

    def frame(self) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame(self.columns())

    def columns(self) -> dict[str, np.ndarray]:
        """The records as numpy arrays (counts as int64)."""
        cols = {c: np.frombuffer(v, dtype=float) for c, v in self._cols.items()}
        for c in ("replica", "in_system", "waiting", "running", "kv_blocks_used"):
            cols[c] = cols[c].astype(np.int64)
        return cols


def summed_steps(timeline, column: str) -> tuple[np.ndarray, np.ndarray]:
    """``column`` summed over replicas as a step function (a frame or ``Timeline.columns()``):
    the instants at which it changes, in time order, and its value from each until the next.
    Each replica holds its last recorded value until its next record, and counts 0 before its
    first; of several records at one instant, the last wins."""
    times = np.asarray(timeline["time_s"], dtype=float)
    order = np.argsort(times, kind="stable")  # records in time order; the last at a time wins
    times = times[order]
    replicas = np.asarray(timeline["replica"])[order]
    values = np.asarray(timeline[column], dtype=float)[order]
    last = np.append(times[1:] != times[:-1], True)  # the last record of each instant
    total = np.zeros(int(last.sum()))
    positions = np.arange(len(times))
    for r in sorted(set(replicas.tolist())):  # summed replica by replica, in id order
        # the replica's latest record at or before each record (-1: none yet, it counts 0)
        latest = np.maximum.accumulate(np.where(replicas == r, positions, -1))[last]
        total = total + np.where(latest >= 0, values[np.maximum(latest, 0)], 0.0)
    return times[last], total


def time_average(timeline, column: str, *, end_s: float) -> float:
    """Time average of ``column`` summed over replicas, from time zero to ``end_s`` (a frame or
    ``Timeline.columns()``; ``summed_steps``)."""
    if not len(timeline["time_s"]) or end_s <= 0:
        return math.nan
    times, total = summed_steps(timeline, column)
    edges = np.append(times, end_s)
    return float((total * np.diff(edges)).sum() / end_s)
