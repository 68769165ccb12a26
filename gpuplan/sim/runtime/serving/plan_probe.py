"""A capacity plan's probe: one candidate simulated at a number of units, its traffic split
evenly over them, and the SLO verdict on the requests after the warm-up; a run whose miss is
sure is ended early by its watch (``MissWatch``)."""

from __future__ import annotations

import math

import numpy as np

from gpuplan.sim.runtime.serving.disagg import Disaggregation, serve_disaggregated
from gpuplan.sim.runtime.serving.engine import simulate
from gpuplan.sim.runtime.serving.plan_disagg import decode_side
from gpuplan.sim.runtime.serving.plan_space import Slo, sched_of
from gpuplan.sim.runtime.serving.progress import Settled
from gpuplan.sim.runtime.serving.request_table import FINISHED
from gpuplan.sim.runtime.serving.requests import Workload

WARMUP_SHARE = 0.1  # first requests left out of the percentiles


class MissWatch:
    """A simulation's watch (``progress.Settled``): it ends the run once the SLO verdict is sure
    to be a miss, so a failing probe need not simulate its remaining requests. Sure, because
    ``verdict`` fails on any rejection, and numpy's linear percentile of N values at p lies
    between the sorted values of ranks floor(r) and ceil(r), r = p/100 (N - 1): once N -
    floor(r) of the values it will take exceed the target, both do, and so does the
    percentile. The values are those of the requests after the warm-up (every one of them must
    finish to pass, so N is known before the run: all of them for TTFT, those of more than one
    output token for TPOT). A TTFT counts at its first token, or at an arrival once its request
    has waited longer than the target with none; a TPOT at its request's end."""

    def __init__(self, output_tokens: np.ndarray, slo: Slo):
        n = len(output_tokens)
        self.first, self.slo = int(n * WARMUP_SHARE), slo
        kept = output_tokens[self.first :]
        self.ttft_left = self._needed(len(kept), slo.percentile)
        self.tpot_left = self._needed(int((kept > 1).sum()), slo.percentile)
        self.aged = self.first  # requests before it judged by age at an arrival (``arrival``)
        self.late: set[int] = set()  # counted by age, before their first token

    @staticmethod
    def _needed(n: int, percentile: float) -> float:
        """Values above the target that make the percentile of ``n`` values exceed it (the rank
        taken a hair low: numpy computes it as n q - q, which may round below (n - 1) q)."""
        return n - math.floor(percentile / 100 * (n - 1) - 1e-9) if n else math.inf

    def arrival(self, table, rid: int, at_s: float) -> None:
        """At each arrival: a request that arrived more than the TTFT target ago with no first
        token yet will exceed it (its first token comes at ``at_s`` or later)."""
        arrived, first = table.arrival_s, table.first_token_s
        # the TTFT's own subtraction: a first token at at_s or later gives at least this value
        while self.aged < rid and at_s - arrived[self.aged] > self.slo.ttft_s:
            r = self.aged
            self.aged += 1
            if math.isnan(first[r]):
                self.late.add(r)
                self._slow_first_token()

    def first_token(self, table, rid: int, at_s: float) -> None:
        """A TTFT is known at the first token, long before its request finishes."""
        late = rid >= self.first and at_s - table.arrival_s[rid] > self.slo.ttft_s
        if late and rid not in self.late:  # not counted already at an arrival
            self._slow_first_token()

    def _slow_first_token(self) -> None:
        self.ttft_left -= 1
        if self.ttft_left <= 0:
            raise Settled

    def __call__(self, table, rid: int, at_s: float) -> None:
        if table.status[rid] != FINISHED:  # rejected: a sure miss
            raise Settled
        out = table.output[rid]
        slow = out > 1 and (at_s - table.first_token_s[rid]) / (out - 1) > self.slo.tpot_s
        if rid >= self.first and slow:
            self.tpot_left -= 1
            if self.tpot_left <= 0:
                raise Settled


class Probe:
    """Simulations of one candidate at a given number of units (memoized). A run whose miss is
    settled early (``MissWatch``) is kept as a miss with no percentiles (NaN); ``exact`` runs it
    to the end when its percentiles are wanted."""

    def __init__(self, c, dep, step, *, rate_per_s, lengths, slo, n_requests, seed, settle=True,
                 speculator=None):  # fmt: skip
        self.c, self.dep, self.step, self.rate, self.slo = c, dep, step, rate_per_s, slo
        self.lengths, self.n, self.seed, self.settle = lengths, n_requests, seed, settle
        self.speculator = speculator
        self.sched = sched_of(c)
        self.seen: dict[int, tuple[bool, float, float]] = {}

    def __call__(self, units: int) -> tuple[bool, float, float]:
        """(meets, TTFT and TPOT at the percentile) with traffic split over ``units``."""
        if units not in self.seen:
            self.seen[units] = self._run(self.rate / units, settle=self.settle)
        return self.seen[units]

    def exact(self, units: int) -> tuple[bool, float, float]:
        """``self(units)`` with its percentiles, even of a miss."""
        if math.isnan(self(units)[1]):
            self.seen[units] = self._run(self.rate / units, settle=False)
        return self.seen[units]

    def _run(self, rate: float, *, settle: bool) -> tuple[bool, float, float]:
        rng = np.random.default_rng(self.seed)
        gaps = rng.exponential(1.0 / rate, self.n) if math.isfinite(rate) else np.zeros(self.n)
        times = np.cumsum(gaps) - gaps[0]
        load = Workload(arrival_s=times, prompt_tokens=self.lengths[0][: self.n],
                        output_tokens=self.lengths[1][: self.n])  # fmt: skip
        c = self.c
        watch = MissWatch(load.output_tokens, self.slo) if settle else None
        try:
            if c.prefill:
                dis = Disaggregation(prefill_replicas=c.prefill, decode_replicas=c.decode)
                dec_dep, dec_step = decode_side(c, self.dep, self.step)
                res = serve_disaggregated(self.dep, self.sched, load, dis, timeline=False,
                                          step=self.step, watch=watch, decode_dep=dec_dep,
                                          decode_step=dec_step)  # fmt: skip
            else:
                res = simulate(self.dep, self.sched, load, timeline=False, step=self.step,
                               watch=watch, speculator=self.speculator)  # fmt: skip
        except Settled:
            return False, math.nan, math.nan
        return verdict(res.request_columns, self.slo, max_waiting=c.max_seqs * (c.prefill or 1))


def verdict(frame, slo: Slo, *, max_waiting: int | None = None) -> tuple[bool, float, float]:
    """(meets, TTFT and TPOT at the percentile) of a run's requests: its ``request_columns``
    (numpy arrays, as the engine keeps them) or their DataFrame, the same numbers. Without a
    TTFT target a unit must still keep up: at the last arrival no more than ``max_waiting``
    requests (the sequences its prefill replicas admit at once) may wait for a first token,
    else the arrivals outran admission and the queue grows with the run (``backlog``)."""
    status = np.asarray(frame["status"])
    if (status != "finished").any():
        return False, math.inf, math.inf
    first = int(len(status) * WARMUP_SHARE)
    ttft = float(np.nanpercentile(np.asarray(frame["ttft_s"], dtype=float)[first:],
                                  slo.percentile))  # fmt: skip
    tpots = np.asarray(frame["tpot_s"], dtype=float)[first:]
    tpots = tpots[~np.isnan(tpots)]
    tpot = float(np.percentile(tpots, slo.percentile)) if len(tpots) else 0.0
    meets = ttft <= slo.ttft_s and tpot <= slo.tpot_s
    if math.isinf(slo.ttft_s) and max_waiting is not None:
        meets = meets and backlog(frame) <= max_waiting
    return meets, ttft, tpot


def backlog(frame) -> int:
    """Requests still waiting for a first token when the last one arrives."""
    last = float(np.max(np.asarray(frame["arrival_s"], dtype=float)))
    return int((np.asarray(frame["first_token_s"], dtype=float) > last).sum())
