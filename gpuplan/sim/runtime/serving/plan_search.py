"""A capacity plan's search of one candidate: the fewest units that meet the SLO (doubling,
then bisection), capped at the cost the plan can still use, and the candidate's row."""

from __future__ import annotations

import math

from gpuplan.sim.runtime.serving.plan_disagg import pool_columns
from gpuplan.sim.runtime.serving.plan_probe import Probe
from gpuplan.sim.runtime.serving.plan_space import Candidate, Slo

ABOVE_CAP = -1  # fewest_units: the answer is sure to exceed the cap


def fewest_units(probe: Probe, start: int, most: int, cap: int | None = None) -> int | None:
    """The fewest units in [1, most] that meet the SLO, searching from ``start`` (doubling,
    then bisection); None if none does. With ``cap`` below ``most``, only an answer of at most
    ``cap`` units is wanted: the same search, with the lightest load (``most``) probed last, is
    given up as ``ABOVE_CAP`` once the failures already seen put the answer above ``cap``. Where
    the uncapped search finds an answer, the units this one probes are among those it probes,
    so an answer within the cap is the uncapped answer; where it finds none, neither does this
    one (it ends with the same lightest-load probe, or above the cap)."""
    if cap is not None and cap < most:
        return _fewest_capped(probe, start, most, cap)
    if not probe(most)[0]:  # not even at the lightest load
        return None
    lo, hi = 0, max(1, min(start, most))
    while not probe(hi)[0]:
        if hi >= most:
            return None
        lo, hi = hi, min(2 * hi, most)
    while hi - lo > 1:  # probe(lo) fails (or lo = 0), probe(hi) meets
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if probe(mid)[0] else (mid, hi)
    return hi


def _fewest_capped(probe: Probe, start: int, most: int, cap: int) -> int:
    lo, hi = 0, max(1, min(start, most))
    while True:  # doubling; every answer of this search is above lo
        if lo >= cap:
            return ABOVE_CAP
        if probe(hi)[0]:
            break
        lo, hi = hi, min(2 * hi, most)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if probe(mid)[0] else (mid, hi)
        if lo >= cap:
            return ABOVE_CAP
    return hi if probe(most)[0] else None  # the uncapped search asks this first


def _cap_units(c: Candidate, cap_usd: float, hourly: float, per_m: float, *,
               strict: bool = False) -> int | None:  # fmt: skip
    """The most units of ``c`` whose cost (as ``_row`` prices it) is within ``cap_usd`` (below
    it, ``strict``); None for no cap."""
    if math.isinf(cap_usd):
        return None

    def within(units: int) -> bool:
        usd = units * c.unit_cost_gpus * hourly * per_m
        return usd < cap_usd if strict else usd <= cap_usd

    units = math.floor(cap_usd / (c.unit_cost_gpus * hourly * per_m))
    while within(units + 1):
        units += 1
    while units > 0 and not within(units):
        units -= 1
    return units


def evaluate_candidate(piece, *, rate_per_s, lengths, slo, requests, seed, max_gpus, hourly,
                        per_m, prune=True) -> dict:  # fmt: skip
    """The fewest units of one candidate that meet the SLO, as a row: one piece of the plan."""
    c, dep, start, step, cap_usd, seen, speculator = piece
    probe = Probe(c, dep, step, rate_per_s=rate_per_s, lengths=lengths, slo=slo,
                   n_requests=requests, seed=seed, settle=prune, speculator=speculator)  # fmt: skip
    probe.seen.update(seen or {})  # the scouting's runs of this candidate
    caps = (_cap_units(c, cap_usd[0], hourly, per_m),
            _cap_units(c, cap_usd[1], hourly, per_m, strict=True))  # fmt: skip
    cap = min((u for u in caps if u is not None), default=None)
    units = fewest_units(probe, start, max(1, max_gpus // c.unit_gpus), cap)
    row = _row(c, units, probe, hourly, per_m, slo)
    return row | pool_columns(c, dep) | {"_seen": probe.seen}


def _row(c: Candidate, units, probe: Probe, hourly: float, per_m: float, slo: Slo) -> dict:
    """The candidate's row; one given up above the top cost (``ABOVE_CAP``) is a miss at the
    most units it tried, its percentiles NaN where that run was settled early."""
    above = units == ABOVE_CAP
    units = None if above else units
    tried = units if units is not None else max(probe.seen, default=0)
    if above:  # none tried when even one unit costs more (0 units, no percentiles)
        ttft, tpot = (math.nan, math.nan) if not tried else probe(tried)[1:]
    else:
        _, ttft, tpot = probe.exact(tried)
    gpus = tried * c.unit_gpus
    cost_gpus = tried * c.unit_cost_gpus  # each pool at its own GPU's price
    pct = f"p{slo.percentile:g}"
    return {
        "layout": c.layout,
        "tp": c.tp,
        "pp": c.pp,
        "weight_dtype": c.weight_dtype,
        "kv_dtype": c.kv_dtype,
        "max_seqs": c.max_seqs,
        "units": tried,
        "replicas": tried * c.unit_replicas,
        "gpus": gpus,
        f"ttft_{pct}_s": ttft,
        f"tpot_{pct}_s": tpot,
        "usd_per_hour": cost_gpus * hourly,
        "usd_per_m_output_tokens": cost_gpus * hourly * per_m,
        "speculative": c.speculative,
        "meets": units is not None,
        "above_top_cost": above,  # not searched past the top-th cost met (``top_cost``)
    }
