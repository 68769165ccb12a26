"""Decode padding (what a server replaying CUDA graphs computes): a decode-only iteration runs
its batch bucket over a fixed attention span, in the fast model, the reference and the
simulation alike."""

import numpy as np
import pytest

from gpuplan.errors import GpuplanError
from gpuplan.sim.runtime.serving.deployment import SchedulerConfig, deployment
from gpuplan.sim.runtime.serving.engine import simulate
from gpuplan.sim.runtime.serving.requests import make_workload
from gpuplan.sim.runtime.serving.step_model import Batch, StepModel, iteration_breakdown

BUCKETS = (1, 2, 4, 8, 16, 32)
SPAN = 1152
PADDED = deployment("llama2-7b", "h200", impl="eager", decode_buckets=BUCKETS,
                    decode_context_tokens=SPAN)  # fmt: skip
PLAIN = deployment("llama2-7b", "h200", impl="eager")


@pytest.mark.parametrize(
    "batch",
    [
        Batch(decode_seqs=3, decode_kv_tokens=3 * 1030),
        Batch(decode_seqs=17, decode_kv_tokens=17 * 1100),
        Batch(decode_seqs=32, decode_kv_tokens=32 * 1024),
        Batch(prefill=((1024, 0, 2),)),
        Batch(prefill=((512, 0, 1),), decode_seqs=5, decode_kv_tokens=5 * 700),
    ],
)
def test_the_fast_model_equals_the_reference_under_padding(batch):
    reference = iteration_breakdown(PADDED, batch).total_s
    assert StepModel(PADDED).iteration_s(batch) == pytest.approx(reference, rel=1e-9)


def test_a_padded_decode_costs_what_its_bucket_over_the_whole_span_costs():
    padded, plain = StepModel(PADDED), StepModel(PLAIN)
    for seqs, bucket in ((1, 1), (3, 4), (9, 16), (17, 32), (32, 32)):
        got = padded.iteration_s(Batch(decode_seqs=seqs, decode_kv_tokens=seqs * 1030))
        want = plain.iteration_s(Batch(decode_seqs=bucket, decode_kv_tokens=bucket * SPAN))
        assert got == pytest.approx(want, rel=1e-12)
        assert got > plain.iteration_s(Batch(decode_seqs=seqs, decode_kv_tokens=seqs * 1030))


def test_prefill_iterations_are_never_padded():
    batch = Batch(prefill=((1024, 0, 3),))
    assert StepModel(PADDED).iteration_s(batch) == StepModel(PLAIN).iteration_s(batch)


def test_a_padded_decode_run_costs_the_same_every_iteration():
    step = StepModel(PADDED)
    for seqs, kv, k in ((1, 1025, 127), (5, 5 * 1100, 40), (20, 20 * 1030, 90)):
        each = sum(step.decode_s(seqs, kv + seqs * j) for j in range(k))
        assert step.decode_run_s(seqs, kv, k) == pytest.approx(each, rel=1e-12)
        assert step.decode_s(seqs, kv) == step.decode_s(seqs, kv + 50 * seqs)
        n = step.decode_iterations_until(seqs, kv, 0.1)
        assert step.decode_run_s(seqs, kv, n) >= 0.1 > step.decode_run_s(seqs, kv, n - 1)


def test_a_batch_beyond_the_last_bucket_runs_unpadded_in_rows():
    assert PADDED.decode_bucket(40) == 40
    assert PADDED.padded_decode(40, 40 * 900) == (40, 40 * SPAN)


def test_skipping_from_event_to_event_equals_stepping_every_iteration_under_padding():
    sched = SchedulerConfig(max_seqs=32, max_batched_tokens=4096, max_model_len=SPAN)
    load = make_workload(rate_per_s=12.0, n=120, prompt_tokens=1024, output_tokens=128, seed=3)
    fast = simulate(PADDED, sched, load, timeline=False)
    slow = simulate(PADDED, sched, load, timeline=False, max_run_iterations=1)
    cols = ["first_token_s", "finish_s"]
    np.testing.assert_allclose(fast.requests[cols], slow.requests[cols], rtol=1e-12, atol=1e-9)
    plain = simulate(PLAIN, sched, load, timeline=False)
    assert fast.summary["tpot_s"]["p50"] > plain.summary["tpot_s"]["p50"]


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"decode_buckets": (4, 2)}, "decode_buckets"),
        ({"decode_buckets": (0, 2)}, "decode_buckets"),
        ({"decode_buckets": [1, 2]}, "decode_buckets"),
        ({"decode_context_tokens": 0}, "decode_context_tokens"),
    ],
)
def test_a_bad_padding_is_an_error_naming_the_field(kw, field):
    with pytest.raises(GpuplanError, match=field):
        deployment("llama2-7b", "h200", **kw)
