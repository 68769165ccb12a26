"""serve plan's shortcuts change no answer: a settled miss is a miss, a capped search returns
the uncapped answer within its cap, and the pruned plan equals the plan without pruning."""

import math

import numpy as np
import pandas as pd
import pytest

from gpuplan.sim.runtime.serving.deployment import deployment
from gpuplan.sim.runtime.serving.plan import plan
from gpuplan.sim.runtime.serving.plan_probe import MissWatch, Probe, verdict
from gpuplan.sim.runtime.serving.plan_search import ABOVE_CAP, fewest_units
from gpuplan.sim.runtime.serving.plan_space import Candidate, SearchSpace, Slo
from gpuplan.sim.runtime.serving.step_model import StepModel


class _Table:
    """A probe whose verdict at each unit count is given (any pattern, monotone or not)."""

    def __init__(self, meets: dict[int, bool]):
        self.meets, self.seen = meets, {}

    def __call__(self, units: int):
        self.seen[units] = (self.meets[units], 0.0, 0.0)
        return self.seen[units]


@pytest.mark.parametrize("seed", range(40))
def test_a_capped_search_is_the_uncapped_one_within_its_cap(seed):
    rng = np.random.default_rng(seed)
    most = int(rng.integers(1, 40))
    threshold = int(rng.integers(1, most + 2))
    # mostly monotone, with flips: the shortcut must not rely on monotony
    meets = {u: (u >= threshold) != (rng.random() < 0.15) for u in range(1, most + 1)}
    start = int(rng.integers(1, most + 1))
    plain = _Table(meets)
    answer = fewest_units(plain, start, most)
    for cap in range(0, most + 1):
        capped = _Table(meets)
        got = fewest_units(capped, start, most, cap)
        if answer is not None and answer <= cap:
            assert got == answer
        else:
            assert got in (ABOVE_CAP, None)
        if answer is not None:  # it probes no unit the uncapped search skips
            assert set(capped.seen) <= set(plain.seen)


def test_a_settled_miss_is_the_full_runs_miss():
    dep = deployment("llama3-8b", "h100-sxm")
    c = Candidate(tp=1, weight_dtype="bf16", kv_dtype="bf16", max_seqs=64, policy="chunked")
    lengths = (np.full(200, 512), np.full(200, 128))
    slo = Slo(ttft_s=0.3, tpot_s=0.03, percentile=90)
    step = StepModel(dep)
    for rate in (8.0, 30.0, 120.0):
        quick = Probe(c, dep, step, rate_per_s=rate, lengths=lengths, slo=slo, n_requests=200,
                       seed=0)  # fmt: skip
        full = Probe(c, dep, step, rate_per_s=rate, lengths=lengths, slo=slo, n_requests=200,
                      seed=0, settle=False)  # fmt: skip
        assert quick(1)[0] == full(1)[0]
        if quick(1)[0]:  # a pass is never cut short: its percentiles are the full run's
            assert quick(1) == full(1)
    assert not full(1)[0] and math.isnan(quick(1)[1])  # 120/s on one GPU: settled early
    assert quick.exact(1) == full(1)


def test_the_settle_rule_matches_numpys_percentile_at_its_edge():
    # N kept values, _needed of them above the target: the percentile exceeds it, and it asks
    # at most one more than the fewest that do (integer ranks such as 0.99 x 900 included)
    for n, p in ((90, 99.0), (180, 90.0), (7, 50.0), (901, 99.0), (101, 90.0), (1, 99.0)):
        need = MissWatch._needed(n, p)
        x = np.zeros(n)
        x[n - need :] = 2.0
        assert np.percentile(x, p) > 1.0
        fewest = min(k for k in range(1, n + 1)
                     if np.percentile(np.r_[np.zeros(n - k), np.full(k, 2.0)], p) > 1.0)  # fmt: skip
        assert fewest <= need <= fewest + 1
    frame = pd.DataFrame({"status": ["finished", "rejected"], "ttft_s": [0.1, math.nan],
                          "tpot_s": [0.01, math.nan]})  # fmt: skip
    assert verdict(frame, Slo(ttft_s=1, tpot_s=1))[0] is False


def test_the_pruned_plan_is_the_plan():
    lengths = (np.full(100, 1024), np.full(100, 128))
    space = SearchSpace(tps=(1, 2), formats=(("bf16", "bf16"), ("fp8", "fp8"), ("int4", "bf16")),
                        max_seqs=(64,), ratios=((1, 1),), max_gpus=16)  # fmt: skip
    kw = {"rate_per_s": 100.0, "slo": Slo(ttft_s=0.3, tpot_s=0.025, percentile=90),
          "lengths": lengths, "requests": 100, "space": space, "top": 2}  # fmt: skip
    pruned, full = plan("llama3-8b", "h100-sxm", **kw), plan("llama3-8b", "h100-sxm", **kw,
                                                              prune=False)  # fmt: skip
    assert pruned.evaluated["above_top_cost"].sum() >= 3  # the caps did cut searches short
    assert not full.evaluated["above_top_cost"].any()
    pd.testing.assert_frame_equal(pruned.best, full.best)
    assert len(pruned.evaluated) == len(full.evaluated)
