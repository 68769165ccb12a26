"""Scheduling policies on a bare replica state, without simpy: admission, budgets, preemption,
chunking, padding, timeouts."""

import numpy as np
import pytest

from gpuplan.sim.runtime.serving.policies import (
    IDLE,
    ChunkedPolicy,
    ContinuousPolicy,
    DecodeRun,
    Iteration,
    StaticPolicy,
    WaitUntil,
)
from gpuplan.sim.runtime.serving.request_table import FINISHED, RequestTable
from gpuplan.sim.runtime.serving.requests import Workload
from gpuplan.sim.runtime.serving.state import ReplicaState


def state_of(prompts, outputs, *, blocks=1000, block=16, max_seqs=8, arrivals=None):
    n = len(prompts)
    load = Workload(
        arrival_s=np.asarray(arrivals if arrivals is not None else np.zeros(n), dtype=float),
        prompt_tokens=np.asarray(prompts),
        output_tokens=np.asarray(outputs),
    )
    table = RequestTable(load)
    st = ReplicaState(0, table, total_blocks=blocks, block_tokens=block, block_bytes=1.0,
                      max_seqs=max_seqs)  # fmt: skip
    for rid in range(n):
        st.enqueue(rid)
    return st


def continuous(budget=4096, max_seqs=8, preemption="recompute"):
    return ContinuousPolicy(max_seqs=max_seqs, budget=budget, model_len=4096,
                            preemption=preemption)  # fmt: skip


def test_continuous_batching_admits_first_come_first_served_within_the_token_budget():
    st = state_of([100, 200, 300], [5, 5, 5])
    plan = continuous(budget=350).schedule(st, 0.0)
    assert isinstance(plan, Iteration)
    assert plan.pieces == [(0, 100), (1, 200)]  # the third would pass 350 tokens
    assert plan.prefill == ((100, 0, 1), (200, 0, 1)) and plan.decode_seqs == 0
    assert continuous().schedule(state_of([64] * 3, [2] * 3), 0.0).prefill == ((64, 0, 3),)
    assert list(st.waiting) == [2]


def test_continuous_batching_stops_admitting_at_max_seqs():
    st = state_of([10] * 5, [5] * 5, max_seqs=3)
    plan = continuous(max_seqs=3).schedule(st, 0.0)
    assert len(plan.pieces) == 3


def test_after_a_prefill_everyone_decodes_until_the_first_is_done():
    st = state_of([100, 50], [4, 9])
    policy = continuous()
    plan = policy.schedule(st, 0.0)
    st.finish_prefill_chunks(plan.pieces, 1.0)
    assert st.table.first_token_s[:2] == [1.0, 1.0]
    run = policy.schedule(st, 1.0)
    assert isinstance(run, DecodeRun)
    assert run.iterations == 3  # request 0 has 3 tokens left to emit
    assert run.seqs == 2 and run.kv_tokens == (100 + 1) + (50 + 1)
    assert run.interruptible  # nobody waits, seats are free
    st.run_decode(run.iterations, lambda j: 1.0 + j)
    assert st.table.status[0] == FINISHED and st.table.finish_s[0] == 4.0
    assert len(st.decoding) == 1 and st.table.status[1] == 0


def test_a_decode_that_finds_no_free_block_preempts_the_last_admitted_by_recomputation():
    # 4 blocks of 4 tokens: two requests of 7 tokens hold 2 blocks each, then need a third
    st = state_of([7, 7], [20, 20], blocks=4, block=4)
    policy = continuous()
    plan = policy.schedule(st, 0.0)
    st.finish_prefill_chunks(plan.pieces, 1.0)
    run = policy.schedule(st, 1.0)
    assert run.iterations == 1  # the 8th token fits; the 9th needs new blocks
    st.run_decode(1, lambda j: 2.0)
    step = policy.schedule(st, 2.0)
    assert isinstance(step, Iteration) and step.decode_seqs == 1
    assert st.table.preemptions == [0, 1]
    assert list(st.waiting) == [1]  # requeued at the front, to recompute 7 + 2 tokens
    assert st.table.prefill_target(1) == 9


def test_swap_preemption_moves_the_blocks_out_and_back_before_new_prefills():
    st = state_of([7, 7, 3], [20, 20, 2], blocks=4, block=4)
    policy = continuous(preemption="swap", max_seqs=2)
    st.finish_prefill_chunks(policy.schedule(st, 0.0).pieces, 1.0)
    st.run_decode(policy.schedule(st, 1.0).iterations, lambda j: 2.0)
    step = policy.schedule(st, 2.0)
    assert step.swap_bytes == 2.0 and list(st.swapped) == [1]
    plan = policy.schedule(st, 3.0)
    assert not isinstance(plan, Iteration) or not plan.pieces  # no prefill while one is out


def test_chunked_prefill_decodes_everyone_and_fills_the_budget_with_chunks():
    st = state_of([10, 3000, 500], [50, 5, 5])
    policy = ChunkedPolicy(max_seqs=8, budget=1024, model_len=4096)
    first = policy.schedule(st, 0.0)
    assert first.pieces == [(0, 10), (1, 1014)]
    st.finish_prefill_chunks(first.pieces, 1.0)
    second = policy.schedule(st, 1.0)
    assert second.decode_seqs == 1  # request 0 decodes beside the chunks
    assert second.pieces == [(1, 1023)]
    assert second.prefill == ((1023, 1014, 1),)  # the chunk attends to the 1014 before it


def test_a_request_whose_last_chunk_ends_emits_its_first_token_then():
    st = state_of([1500], [3])
    policy = ChunkedPolicy(max_seqs=8, budget=1024, model_len=4096)
    plan = policy.schedule(st, 0.0)
    assert plan.sampled == 0
    st.finish_prefill_chunks(plan.pieces, 1.0)
    assert np.isnan(st.table.first_token_s[0])
    plan = policy.schedule(st, 1.0)
    assert plan.pieces == [(0, 476)] and plan.sampled == 1
    st.finish_prefill_chunks(plan.pieces, 2.0)
    assert st.table.first_token_s[0] == 2.0


def test_static_batching_pads_prompts_and_runs_until_the_longest_output():
    st = state_of([100, 300], [3, 10])
    policy = StaticPolicy(max_seqs=8, budget=None, model_len=4096)
    st.use_static_batches()
    plan = policy.schedule(st, 0.0)
    assert plan.prefill == ((300, 0, 2),) and plan.padded_to == 300
    st.finish_prefill_chunks(plan.pieces, 1.0, padded_to=plan.padded_to)
    run = policy.schedule(st, 1.0)
    assert run.iterations == 9 and run.seqs == 2 and not run.interruptible
    assert run.kv_tokens == 2 * (300 + 1)  # padding: both read the longest prompt
    st.run_decode(run.iterations, lambda j: 1.0 + j, keep_done=True)
    assert st.table.finish_s[:2] == [3.0, 10.0]  # each streams its own last token
    assert policy.schedule(st, 10.0) is IDLE


def test_dynamic_batching_waits_for_a_full_batch_or_the_timeout():
    st = state_of([10, 10], [2, 2], arrivals=[0.0, 0.01])
    policy = StaticPolicy(max_seqs=4, budget=None, model_len=4096, timeout_s=0.5)
    st.use_static_batches()
    assert policy.schedule(st, 0.02) == WaitUntil(0.5)
    assert isinstance(policy.schedule(st, 0.5), Iteration)


def test_requests_that_cannot_ever_run_are_rejected():
    st = state_of([4000, 100, 1000], [200, 10, 10], blocks=50, block=16)
    policy = continuous()
    assert policy.rejects(st, 0)  # longer than the model's context
    assert not policy.rejects(st, 1)
    assert policy.rejects(st, 2)  # needs 63 blocks of the 50 there are


@pytest.mark.parametrize("policy", [continuous(), ChunkedPolicy(max_seqs=8, budget=512,
                                                                model_len=4096)])  # fmt: skip
def test_a_replica_with_nothing_left_to_run_is_idle(policy):
    st = state_of([5], [1])
    plan = policy.schedule(st, 0.0)
    st.finish_prefill_chunks(plan.pieces, 1.0)
    assert st.table.status[0] == FINISHED  # one output token: done at its prefill
    assert policy.schedule(st, 1.0) is IDLE
