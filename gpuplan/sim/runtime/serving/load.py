"""Whether a serving run kept up with the load offered to it, and the rates it may claim.

Offered load: the request rate asked (``--rate``) or, for a trace at its own arrival times, the
rate its arrivals make (requests less one over the arrival window); the output tokens per second
it implies are that rate times the mean output tokens of the requests offered. An offline run
(every request at once) offers no rate: its rates are the deployment's capacity.

A served rate never exceeds the offered load: a deployment cannot finish requests faster than
they come, so a rate measured above it (arrivals drawn faster than asked, a window's edges) is
the offered load, and so is the top of its error band (``capped``; ``bands.documents``).

Saturation (``saturated``): an open-loop load the deployment cannot keep up with. In a stable
system the engines' waiting queue (requests waiting for admission or swapped out, every
replica's, as ``metrics.Timeline`` records them in ``waiting``) fluctuates about a level; under
overload it grows at the offered rate less the rate the deployment takes requests in. The queue
is read as each request arriving in the second half of the arrival window finds it (arrivals
that come as a Poisson process see the queue's time average: Wolff, "Poisson arrivals see time
averages", Operations Research 30(2), 1982), the first half left out as warm-up (the running batch
filling up), and a least-squares line is fitted to it: its slope is ``queue_growth_per_s``. The
run is saturated when that line rises over the half window by more than three standard
deviations of the queue about it, and by at least one request: a trend a stable queue's own
fluctuation does not make (three sigma, the usual control limit of a process chart). A run
without a timeline reads the queue from its requests: arrived, not rejected and without a first
token yet.

The rate a saturated deployment sustains (``sustainable_requests_per_s``): the rate it took
requests in while its queue held some, the first tokens from the middle of the arrival window to
the last request's first token over that span; in a saturated steady state requests are taken
in as fast as they finish. It is not read from the finishes, which come in waves when a full
batch of like requests ends together, nor over the drain, when the last requests decode alone.

Limits: a load that only lengthens the running batch (the batch limits and KV cache never
reached before the last arrival) shows as TPOT growing, not as a queue, and is not flagged; a run
whose arrival window is shorter than its requests' warm-up reads the warm-up as the trend.
"""

from __future__ import annotations

import math

import numpy as np

from gpuplan.sim.runtime.serving.metrics import summed_steps

SIGMAS = 3.0  # the control limit of a Shewhart chart: a rise beyond the queue's own noise
CAPPED_REQUEST_RATES = ("requests_per_s", "goodput_requests_per_s", "sustainable_requests_per_s")
CAPPED_TOKEN_RATES = ("output_tokens_per_s", "sustainable_output_tokens_per_s")


def offered_load(requests, rate_per_s: float | None) -> dict:
    """``offered_requests_per_s`` and ``offered_output_tokens_per_s`` (None for an offline run,
    every request at once; module docstring)."""
    arrival = np.asarray(requests["arrival_s"], dtype=float)
    window = float(arrival.max() - arrival.min()) if len(arrival) else 0.0
    if (rate_per_s is not None and math.isinf(rate_per_s)) or window <= 0:
        return {"offered_requests_per_s": None, "offered_output_tokens_per_s": None}
    rate = float(rate_per_s) if rate_per_s is not None else (len(arrival) - 1) / window
    mean_out = float(np.mean(np.asarray(requests["output_tokens"], dtype=float)))
    return {"offered_requests_per_s": rate, "offered_output_tokens_per_s": rate * mean_out}


def load_verdict(requests, timeline, *, rate_per_s: float | None) -> dict:
    """The offered load, ``saturated``, ``queue_growth_per_s`` and, when saturated,
    ``sustainable_requests_per_s`` and the output tokens per second it makes of a run (module
    docstring); ``timeline``: the run's ``Timeline.columns()`` (empty: the queue read from
    ``requests``)."""
    out = offered_load(requests, rate_per_s)
    out |= {"saturated": False, "queue_growth_per_s": None, "sustainable_requests_per_s": None,
            "sustainable_output_tokens_per_s": None}
    if out["offered_requests_per_s"] is None:
        return out
    arrival = np.sort(np.asarray(requests["arrival_s"], dtype=float))
    mid, last = (arrival[0] + arrival[-1]) / 2, arrival[-1]
    at = arrival[arrival >= mid]
    if len(at) < 3:  # too few arrivals to fit a line: not judged
        return out
    queue = _queue_found(requests, timeline, at)
    slope, intercept = np.polyfit(at - mid, queue, 1)
    noise = float(np.std(queue - (slope * (at - mid) + intercept)))
    rise = slope * (last - mid)
    out["queue_growth_per_s"] = float(slope)
    if rise > max(SIGMAS * noise, 1.0):
        out["saturated"] = True
        rate = min(_busy_rate(requests, mid), out["offered_requests_per_s"])
        mean_out = out["offered_output_tokens_per_s"] / out["offered_requests_per_s"]
        out["sustainable_requests_per_s"] = rate
        out["sustainable_output_tokens_per_s"] = rate * mean_out
    return out


def _busy_rate(requests, start_s: float) -> float:
    """Requests per second a saturated run took in from ``start_s`` to its last first token:
    the first tokens in that span over its length (module docstring)."""
    first = np.asarray(requests["first_token_s"], dtype=float)
    first = first[(np.asarray(requests["status"]) == "finished") & (first >= start_s)]
    if len(first) < 2:
        return 0.0
    return (len(first) - 1) / float(first.max() - start_s)


def _queue_found(requests, timeline, at: np.ndarray) -> np.ndarray:
    """The waiting queue as a request arriving at each instant of ``at`` finds it (just before
    its own arrival): the timeline's ``waiting`` summed over replicas, or without a timeline the
    requests arrived, not rejected and without a first token."""
    if timeline is not None and len(timeline["time_s"]):
        times, total = summed_steps(timeline, "waiting")
        i = np.searchsorted(times, at, side="left") - 1
        return np.where(i >= 0, total[np.maximum(i, 0)], 0.0)
    arrival = np.asarray(requests["arrival_s"], dtype=float)
    status = np.asarray(requests["status"])
    first = np.asarray(requests["first_token_s"], dtype=float)
    left = np.where(status == "rejected", arrival, np.where(np.isfinite(first), first, np.inf))
    arrived = np.searchsorted(np.sort(arrival), at, side="left")
    started = np.searchsorted(np.sort(left), at, side="left")
    return (arrived - started).astype(float)


def capped(summary: dict, verdict: dict) -> dict:
    """``summary``'s served rates, none above the offered load (module docstring)."""
    req, tok = verdict["offered_requests_per_s"], verdict["offered_output_tokens_per_s"]
    out = dict(summary)
    for keys, top in ((CAPPED_REQUEST_RATES, req), (CAPPED_TOKEN_RATES, tok)):
        for k in keys:
            if top is not None and k in out and math.isfinite(out[k]):
                out[k] = min(out[k], top)
    return out


def offered_cap(key: str, doc: dict) -> float | None:
    """The offered load that bounds a served rate ``key`` of a document, or None."""
    if key in CAPPED_REQUEST_RATES:
        return doc.get("offered_requests_per_s")
    if key in CAPPED_TOKEN_RATES:
        return doc.get("offered_output_tokens_per_s")
    return None
