"""The serving simulation, correct by test: nothing lost, Little's law, a lone request's exact
latency, M/D/1 at low load, determinism, and event skipping equal to stepping every iteration."""

import numpy as np
import pandas as pd
import pytest

from gpuplan.errors import GpuplanError
from gpuplan.sim.runtime.serving.deployment import SchedulerConfig, deployment
from gpuplan.sim.runtime.serving.disagg import Disaggregation, kv_transfer_s, simulate_disaggregated
from gpuplan.sim.runtime.serving.engine import simulate
from gpuplan.sim.runtime.serving.metrics import time_average
from gpuplan.sim.runtime.serving.requests import Workload, make_workload
from gpuplan.sim.runtime.serving.step_model import Batch, StepModel, iteration_breakdown

DEP = deployment("llama2-7b", "a100-sxm-80gb")


def conversation_load(n=400, rate=6.0, seed=0):
    return make_workload(rate_per_s=rate, n=n, prompt_tokens="conversation",
                         output_tokens="conversation", seed=seed)  # fmt: skip


def one_request(prompt, output):
    return Workload(arrival_s=np.zeros(1), prompt_tokens=np.array([prompt]),
                    output_tokens=np.array([output]))  # fmt: skip


@pytest.mark.parametrize("policy", ["continuous", "chunked", "static", "dynamic"])
def test_every_request_that_arrived_is_finished_rejected_or_in_flight(policy):
    load = conversation_load(n=300, rate=8.0)
    load = Workload(arrival_s=load.arrival_s,
                    prompt_tokens=np.where(np.arange(300) % 50 == 7, 5000, load.prompt_tokens),
                    output_tokens=load.output_tokens)  # fmt: skip
    horizon = float(load.arrival_s[200])
    res = simulate(DEP, SchedulerConfig(policy=policy, max_seqs=32), load, horizon_s=horizon)
    counts = res.requests["status"].value_counts()
    # the request arriving at the very instant the simulation stops is not offered to a replica
    arrived = int((load.arrival_s < res.end_s).sum())
    assert counts.get("finished", 0) + counts.get("rejected", 0) + counts.get("in_flight", 0) == (
        arrived
    )
    assert counts.get("not_arrived", 0) == 300 - arrived
    assert counts.get("rejected", 0) >= 1  # 5,000-token prompts exceed the 4,096 context


@pytest.mark.parametrize(("policy", "router"), [("continuous", "least_outstanding"),
                                                ("chunked", "round_robin")])  # fmt: skip
def test_littles_law_holds_between_the_queue_timeline_and_the_request_table(policy, router):
    load = conversation_load(n=500, rate=14.0, seed=1)
    res = simulate(DEP, SchedulerConfig(policy=policy, max_seqs=24), load, replicas=2,
                   router=router)  # fmt: skip
    done = res.requests[res.requests["status"] == "finished"]
    assert len(done) == 500
    in_system = time_average(res.timeline, "in_system", end_s=res.end_s)
    throughput = len(done) / res.end_s
    assert in_system == pytest.approx(throughput * done["e2e_s"].mean(), rel=1e-9)
    assert in_system > 2  # the queues were not trivially empty
    assert 0 < res.summary["kv_use_mean"] < 1 and res.summary["waiting_mean"] >= 0


@pytest.mark.parametrize(
    ("model", "gpu", "kw", "policy", "prompt"),
    [
        ("llama2-7b", "a100-sxm-80gb", {}, "continuous", 500),
        ("llama3-8b", "h200", {"tp": 2, "weight_dtype": "fp8", "kv_dtype": "fp8"},
         "continuous", 1000),
        ("llama3-8b", "h100-sxm", {"weight_dtype": "int4"}, "chunked", 3000),
    ],
)  # fmt: skip
def test_a_lone_request_takes_its_prefill_plus_its_decode_iterations(model, gpu, kw, policy,
                                                                     prompt):  # fmt: skip
    dep = deployment(model, gpu, **kw)
    sched = SchedulerConfig(policy=policy)
    output = 120
    res = simulate(dep, sched, one_request(prompt, output))
    budget = sched.batched_tokens(dep.model)
    pieces, done = [], 0
    while done < prompt:  # chunked prefill cuts a long prompt into budget-sized chunks
        chunk = min(budget, prompt - done)
        pieces.append(Batch(prefill=((chunk, done, 1),), sampled=int(done + chunk == prompt)))
        done += chunk
    prefill_s = sum(iteration_breakdown(dep, b).total_s for b in pieces)
    decode_s = sum(
        iteration_breakdown(dep, Batch(decode_seqs=1, decode_kv_tokens=prompt + j + 1)).total_s
        for j in range(output - 1)
    )
    row = res.requests.iloc[0]
    assert row["ttft_s"] == pytest.approx(prefill_s, rel=1e-9)
    assert row["e2e_s"] == pytest.approx(prefill_s + decode_s, rel=1e-9)


def test_one_sequence_at_a_time_at_low_load_is_an_md1_queue():
    prompt, output, n = 256, 32, 4000
    step = StepModel(DEP)
    service = step.iteration_s(Batch(prefill=((prompt, 0, 1),))) + step.decode_run_s(
        1, prompt + 1, output - 1
    )
    rate = 0.3 / service
    load = make_workload(rate_per_s=rate, n=n, prompt_tokens=prompt, output_tokens=output, seed=4)
    res = simulate(DEP, SchedulerConfig(max_seqs=1), load, timeline=False)
    rho = rate * service
    md1_response = service + rho * service / (2 * (1 - rho))  # Pollaczek-Khinchine, M/D/1
    assert res.requests["e2e_s"].mean() == pytest.approx(md1_response, rel=0.05)


def test_the_same_seed_gives_the_same_dataframe():
    a = simulate(DEP, SchedulerConfig(policy="chunked"), conversation_load(seed=9))
    b = simulate(DEP, SchedulerConfig(policy="chunked"), conversation_load(seed=9))
    pd.testing.assert_frame_equal(a.requests, b.requests)
    pd.testing.assert_frame_equal(a.timeline, b.timeline)


@pytest.mark.parametrize(
    ("policy", "preemption", "replicas", "router"),
    [
        ("continuous", "recompute", 1, "round_robin"),
        ("continuous", "swap", 2, "least_outstanding"),
        ("chunked", "recompute", 1, "round_robin"),
        ("chunked", "swap", 1, "round_robin"),
        ("static", "recompute", 1, "round_robin"),
        ("dynamic", "recompute", 2, "round_robin"),
    ],
)
def test_skipping_from_event_to_event_equals_stepping_every_iteration(policy, preemption,
                                                                      replicas, router):  # fmt: skip
    sched = SchedulerConfig(policy=policy, max_seqs=48, memory_utilization=0.3,
                            preemption=preemption)  # fmt: skip
    load = conversation_load(n=250, rate=10.0, seed=2)
    fast = simulate(DEP, sched, load, replicas=replicas, router=router)
    slow = simulate(DEP, sched, load, replicas=replicas, router=router, max_run_iterations=1)
    cols = ["first_token_s", "finish_s"]
    np.testing.assert_allclose(fast.requests[cols], slow.requests[cols], rtol=1e-12, atol=1e-9)
    assert (fast.requests["preemptions"] == slow.requests["preemptions"]).all()
    if policy in ("continuous", "chunked"):
        assert fast.summary["preemptions"] > 0  # the small cache did force preemptions


def test_an_offline_run_offers_everything_at_time_zero_and_beats_online_throughput():
    sched = SchedulerConfig(max_seqs=128)
    offline = simulate(DEP, sched, make_workload(rate_per_s=float("inf"), n=300,
                                                 prompt_tokens=256, output_tokens=64))  # fmt: skip
    online = simulate(DEP, sched, make_workload(rate_per_s=2.0, n=300, prompt_tokens=256,
                                                output_tokens=64))  # fmt: skip
    assert (offline.requests["arrival_s"] == 0).all()
    assert offline.summary["output_tokens_per_s"] > 3 * online.summary["output_tokens_per_s"]


def test_more_replicas_never_raise_the_latency():
    load = conversation_load(n=400, rate=10.0, seed=5)
    p90 = [
        simulate(
            DEP, SchedulerConfig(max_seqs=64), load, replicas=r, router="least_outstanding"
        ).summary["e2e_s"]["p90"]  # fmt: skip
        for r in (1, 2, 4)
    ]
    assert p90[0] >= p90[1] >= p90[2]


def test_goodput_counts_the_requests_within_the_slo():
    res = simulate(DEP, SchedulerConfig(), conversation_load(seed=6), slo_ttft_s=0.2,
                   slo_tpot_s=0.06)  # fmt: skip
    done = res.requests[res.requests["status"] == "finished"]
    met = ((done["ttft_s"] <= 0.2) & (done["tpot_s"].fillna(0) <= 0.06)).sum()
    assert res.summary["slo_attainment"] == pytest.approx(met / len(done))
    assert 0 < res.summary["goodput_requests_per_s"] <= res.summary["requests_per_s"]


def test_disaggregation_emits_the_first_token_on_the_prefill_replica_then_transfers():
    dep = deployment("llama3-8b", "h100-sxm")
    sched = SchedulerConfig(policy="chunked")
    dis = Disaggregation(prefill_replicas=1, decode_replicas=1, link="scaleout")
    prompt, output = 1000, 50
    res = simulate_disaggregated(dep, sched, one_request(prompt, output), dis,
                                 prefill_sched=SchedulerConfig(policy="continuous"))  # fmt: skip
    row = res.requests.iloc[0]
    prefill_s = iteration_breakdown(dep, Batch(prefill=((prompt, 0, 1),))).total_s
    assert row["ttft_s"] == pytest.approx(prefill_s, rel=1e-9)
    decode_s = sum(
        iteration_breakdown(dep, Batch(decode_seqs=1, decode_kv_tokens=prompt + j + 1)).total_s
        for j in range(output - 1)
    )
    transfer_s = kv_transfer_s(dep, prompt, "scaleout")
    assert row["e2e_s"] == pytest.approx(prefill_s + transfer_s + decode_s, rel=1e-9)
    assert row["replica"] == 0 and row["decode_replica"] == 1


def test_disaggregation_loses_no_request_and_static_batching_cannot_disaggregate():
    dep = deployment("llama3-8b", "h100-sxm")
    dis = Disaggregation(prefill_replicas=1, decode_replicas=2)
    res = simulate_disaggregated(dep, SchedulerConfig(), conversation_load(n=300, rate=12), dis)
    assert res.summary["finished"] == 300
    with pytest.raises(GpuplanError, match="cannot run disaggregated"):
        simulate_disaggregated(dep, SchedulerConfig(policy="static"), conversation_load(), dis)
    with pytest.raises(GpuplanError, match="kv_link"):
        Disaggregation(prefill_replicas=1, decode_replicas=1, link="carrier-pigeon")
