"""What a capacity plan need not search: a bound on a unit's throughput orders the candidates
cheapest floor first, scouts (the candidates guessed cheapest) cap every search, and the stop
rule ends the plan once ``top`` configurations cost no more than the next candidate's floor."""

from __future__ import annotations

import math

import numpy as np

from gpuplan.sim.runtime.serving.deployment import Deployment
from gpuplan.sim.runtime.serving.kv_cache import kv_capacity
from gpuplan.sim.runtime.serving.plan_disagg import decode_side
from gpuplan.sim.runtime.serving.plan_space import Candidate, Slo, sched_of
from gpuplan.sim.runtime.serving.step_model import Batch, StepModel

LOWER_BOUND_MARGIN = 0.5  # the throughput bound is not strict: start the search below it
TAIL_FACTOR = math.log(100)  # an M/M/1 queue's p99 sojourn is ln(100) service times / (1 - load)


def unit_rate_bound(c: Candidate, dep: Deployment, step: StepModel, lengths,
                    spec_tokens: int = 0) -> float:  # fmt: skip
    """Requests per second one unit could not exceed by much (``plan``'s docstring); a speculative
    candidate's decode as if every step of ``spec_tokens`` proposals emitted all and the bonus
    token at a decode iteration's price."""
    prompt, output = float(np.mean(lengths[0])), float(np.mean(lengths[1]))
    dec_dep, dec_step = decode_side(c, dep, step)  # a pool of its own, or the same replica
    cap = kv_capacity(dec_dep, sched_of(c))
    seqs = max(1, min(c.max_seqs, cap.sequences(prompt + output)))
    p, o = max(1, round(prompt)), max(1, round(output))
    prefill_s = step.iteration_s(Batch(prefill=((p, 0, 1),)))
    context = seqs * round(prompt + output / 2)
    decode_s = (o - 1) * dec_step.decode_s(seqs, context) / seqs
    if c.speculative:  # at most k + 1 tokens a step, each step at least a decode's price
        decode_s /= spec_tokens + 1
    if not c.prefill:
        return 1.0 / (prefill_s + decode_s)
    return min(c.prefill / prefill_s, c.decode / max(decode_s, 1e-12))


def candidate_order(found, lengths, rate_per_s: float, spec_tokens: int) -> tuple[list, dict]:
    """The candidates as (floor GPUs, start units, candidate, deployment), cheapest floor first
    (ties: narrower TP, fewer replicas a unit), and the step model of each deployment by id."""
    steps = {}
    ordered = []
    for c, dep in found:
        step = steps.setdefault(id(dep), StepModel(dep))
        bound = unit_rate_bound(c, dep, step, lengths, spec_tokens)
        start = max(1, math.floor(LOWER_BOUND_MARGIN * rate_per_s / bound))
        ordered.append((start * c.unit_cost_gpus, start, c, dep))
    ordered.sort(key=lambda x: (x[0], x[2].tp, x[2].unit_replicas))
    return ordered, steps


def scout(ordered, steps, evaluate, piece, lengths, slo: Slo, top: int, price: tuple,
           rate, spec_tokens: int):  # fmt: skip
    """Before the search proper, the ``top`` candidates guessed cheapest (``_guess_gpus``) are
    searched in full: ({index in ``ordered``: their runs}, X), X the ``top``-th lowest of
    max(floor, cost) among those that meet (inf if fewer meet). No candidate costing more
    than X can be among the ``top``: the ``top`` scouts cost X or less and, their floors being X
    or less, come before any candidate the stop rule could end the search at with fewer than
    ``top`` costs at or below X met. So X caps every search, and the stop rule and the
    configurations kept are those of the search without it. ``piece(k, caps, runs)``: what
    ``evaluate`` takes for the ``k``-th candidate; ``price``: (USD per GPU-hour, per million
    tokens per USD an hour), multiplied in the order the search and its rows multiply them, so
    that a scout's cost X and a candidate's cost at X are the same float."""
    hourly, per_m = price
    guesses = [(_guess_gpus(c, dep, steps[id(dep)], lengths, slo, rate, spec_tokens), k)
               for k, (_, _, c, dep) in enumerate(ordered)]  # fmt: skip
    chosen = [k for gpus, k in sorted(guesses) if math.isfinite(gpus)][:top]
    known, usd = {}, []
    for k in sorted(chosen):
        row = evaluate(piece(k, (math.inf, math.inf), None))
        floor_gpus = ordered[k][0]
        known[k] = row["_seen"]
        if row["meets"]:
            cost_gpus = max(floor_gpus, row["units"] * ordered[k][2].unit_cost_gpus)
            usd.append(cost_gpus * hourly * per_m)
    return known, top_cost(usd, top)


def _guess_gpus(c: Candidate, dep, step: StepModel, lengths, slo: Slo, rate: float,
                spec_tokens: int) -> float:  # fmt: skip
    """A rough guess at the GPUs a candidate needs, only to choose the scouts (``scout``):
    its throughput bound (``unit_rate_bound``) at the highest load that keeps an M/M/1 queue
    of mean-prompt prefills within the TTFT target at p99; inf where a lone decode step misses
    the TPOT target, or no load would do."""
    prompt, output = max(1, round(float(np.mean(lengths[0])))), float(np.mean(lengths[1]))
    prefill_s = step.iteration_s(Batch(prefill=((prompt, 0, 1),)))
    load = 1 - TAIL_FACTOR * prefill_s / slo.ttft_s
    if load <= 0:
        return math.inf
    if decode_side(c, dep, step)[1].decode_s(1, prompt + round(output / 2)) > slo.tpot_s:
        return math.inf
    units = max(1, math.ceil(rate / (load * unit_rate_bound(c, dep, step, lengths, spec_tokens))))
    return units * c.unit_cost_gpus


def top_cost(met: list[float], top: int) -> float:
    """The ``top``-th lowest cost met so far (inf before ``top`` have met): a candidate that
    costs more at its fewest units cannot be among the ``top``, so its search stops there."""
    return sorted(met)[top - 1] if len(met) >= top else math.inf


def enough_met(met: list[float], top: int, floor_usd: float) -> bool:
    """Whether ``top`` configurations already cost no more than a candidate's floor."""
    return len(met) >= top and floor_usd > sorted(met)[top - 1]
