"""Serving under pipeline (``--pp``) and expert (``--ep``) parallelism: stages, their sends,
their memory, the micro-batches in flight, and the errors a user can meet."""

import dataclasses
import json

import pytest

from gpuplan.cli import main
from gpuplan.errors import GpuplanError
from gpuplan.sim.runtime.serving.deployment import SchedulerConfig, deployment
from gpuplan.sim.runtime.serving.engine import simulate
from gpuplan.sim.runtime.serving.iteration import Batch, iteration_breakdown
from gpuplan.sim.runtime.serving.kv_cache import kv_capacity
from gpuplan.sim.runtime.serving.pipeline import boundary_crosses_node, micro_batches, p2p_s
from gpuplan.sim.runtime.serving.requests import make_workload
from gpuplan.sim.runtime.serving.step_model import PipelineStepModel, StepModel

SCHED = SchedulerConfig(max_model_len=8192)
BATCHES = [
    Batch(decode_seqs=1, decode_kv_tokens=700),
    Batch(decode_seqs=48, decode_kv_tokens=48 * 900),
    Batch(prefill=((1024, 0, 1),)),
    Batch(prefill=((256, 512, 1),), decode_seqs=13, decode_kv_tokens=13 * 300),
]


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_one_stage_prices_as_the_whole_model():
    dep = deployment("llama3-8b", "h100-sxm", tp=2, iteration_overhead_s=1e-4)
    whole = StepModel(dep)
    stage = StepModel(dep, stage=dep.stages[0])
    assert type(whole) is StepModel and dep.gpus == 2
    for b in BATCHES:
        assert stage.iteration_s(b) + 1e-4 == pytest.approx(whole.iteration_s(b), rel=1e-12)


def test_pp1_ep1_given_explicitly_changes_nothing(capsys):
    argv = ["serve", "--model", "llama3-8b", "--gpu", "h100-sxm", "--rate", "8",
            "--prompt-tokens", "256", "--output-tokens", "32", "--requests", "40", "--json",
            "--no-timing"]  # fmt: skip
    _, plain, _ = run(capsys, *argv)
    _, given, _ = run(capsys, *argv, "--pp", "1", "--ep", "1")
    assert json.loads(plain) == json.loads(given)
    assert json.loads(plain)["config"]["pp"] == 1


def test_pp2_halves_the_weights_on_each_gpu():
    one = kv_capacity(deployment("llama3-70b", "h100-sxm", tp=4), SCHED)
    two = kv_capacity(deployment("llama3-70b", "h100-sxm", tp=4, pp=2), SCHED)
    assert 0.49 < two.weights_bytes / one.weights_bytes < 0.52
    assert two.blocks > 2 * one.blocks  # each stage caches half the layers in more free memory


def test_a_lone_sequence_pays_every_stage_and_every_send():
    dep = deployment("llama3-70b", "h100-sxm", tp=4, pp=2, iteration_overhead_s=2e-4)
    step = StepModel(dep)
    assert isinstance(step, PipelineStepModel)
    b = BATCHES[0]
    stages_s = sum(st.iteration_s(b) for st in step.stages)
    send = p2p_s(dep, 1, 0)
    assert send > 0
    assert step.iteration_s(b) == pytest.approx(stages_s + send + 2e-4, rel=1e-12)
    ops = {i.op for i in iteration_breakdown(dep, b).items}
    assert "pp send stage 0 -> 1" in ops


def test_a_full_pipeline_is_paced_by_its_busiest_stage():
    dep = deployment("llama3-70b", "h100-sxm", tp=4, pp=2)
    step = StepModel(dep)
    b = BATCHES[1]
    parts = micro_batches(b.prefill, b.decode_seqs, b.decode_kv_tokens, b.samples, dep.pp)
    assert [p[1] for p in parts] == [24, 24]
    busiest = max(sum(st.mixed_s(*p) for p in parts) for st in step.stages)
    assert step.iteration_s(b) >= busiest
    # each micro-batch is half the batch: the replica beats running it through both stages whole
    whole = sum(st.iteration_s(b) for st in step.stages)
    assert step.iteration_s(b) < whole


@pytest.mark.parametrize("batch", BATCHES)
def test_the_step_model_equals_the_priced_breakdown_under_pp_and_ep(batch):
    dep = deployment("mixtral-8x7b", "h100-sxm", tp=2, pp=2, ep=2, iteration_overhead_s=1e-4)
    assert StepModel(dep).iteration_s(batch) == pytest.approx(
        iteration_breakdown(dep, batch).total_s, rel=1e-12
    )


@pytest.mark.parametrize("seqs", [3, 50, 161])
def test_each_micro_batch_is_padded_as_its_own_graph_runs_it(seqs):
    from gpuplan.sim.runtime.serving.on_stack import stack_deployment

    dep = stack_deployment("llama3-70b", "h100-sxm", "vllm", tp=4, pp=2)
    assert dep.decode_buckets  # vLLM's captured batch sizes
    batch = Batch(decode_seqs=seqs, decode_kv_tokens=seqs * 700)
    assert StepModel(dep).iteration_s(batch) == pytest.approx(
        iteration_breakdown(dep, batch).total_s, rel=1e-12
    )


def test_a_pipelined_decode_run_is_the_sum_of_its_iterations():
    dep = deployment("llama3-70b", "h100-sxm", tp=4, pp=2)
    step = StepModel(dep)
    each = [step.decode_s(40, 40 * 500 + 40 * j) for j in range(30)]
    assert step.decode_run_s(40, 40 * 500, 30) == pytest.approx(sum(each), rel=1e-12)
    n = step.decode_iterations_until(40, 40 * 500, sum(each[:17]) - 1e-9)
    assert n == 17


def test_sends_leave_the_node_only_where_a_stage_starts_a_new_one():
    assert not boundary_crosses_node(4, 0)  # tp4 x pp2: both stages in one node
    assert boundary_crosses_node(8, 0)  # tp8 x pp2: two nodes
    assert [boundary_crosses_node(4, b) for b in range(3)] == [False, True, False]
    inside = deployment("llama3-70b", "h100-sxm", tp=4, pp=2)
    across = deployment("llama3-70b", "h100-sxm", tp=8, pp=2)
    assert p2p_s(across, 4096, 0) > p2p_s(inside, 4096, 0) > 0


def test_expert_parallelism_cuts_expert_kernels_and_combines_by_the_all_reduce():
    tp = deployment("mixtral-8x7b", "h100-sxm", tp=2)
    ep = dataclasses.replace(tp, ep=2)
    b = BATCHES[1]
    ops = {i.op: i for i in iteration_breakdown(ep, b).items}
    # every GPU of the TP group holds every token: no all-to-all (vLLM's use_all2all_kernels
    # and TensorRT-LLM's alltoall need attention DP); the MoE all-reduce combines, as under TP
    assert not [op for op in ops if "all_to_all" in op or "dispatch" in op]
    tp_ops = {i.op: i for i in iteration_breakdown(tp, b).items}
    assert ops["tp all_reduce"].time_s == pytest.approx(tp_ops["tp all_reduce"].time_s)
    kernels = [sum(i.kernels for i in iteration_breakdown(d, b).items if "expert_" in i.op)
               for d in (tp, ep)]  # fmt: skip
    assert kernels[1] < kernels[0]
    assert kv_capacity(ep, SCHED).weights_bytes == kv_capacity(tp, SCHED).weights_bytes


def test_deepseek_v3_fits_two_h100_nodes_as_tp8_pp2_and_is_refused_on_one():
    two = deployment("deepseek-v3", "h100-sxm", tp=8, pp=2, pp_layers=(30, 31), ep=8,
                     weight_dtype="fp8")  # fmt: skip
    cap = kv_capacity(two, SCHED)
    assert two.gpus == 16 and cap.blocks > 0 and cap.weights_bytes < 0.9 * two.acc.hbm_bytes
    one = deployment("deepseek-v3", "h100-sxm", tp=8, weight_dtype="fp8")
    with pytest.raises(GpuplanError, match=r"it needs tp=8 x pp=2 \(16 GPUs per replica: "
                       r"--tp 8 --pp 2 --pp-layers 30,31\)") as err:  # fmt: skip
        kv_capacity(one, SCHED)
    assert err.value.fix == {"--tp": "8", "--pp": "2", "--pp-layers": "30,31"}  # the same flags


def test_a_pipelined_replica_serves_a_workload_deterministically():
    dep = deployment("llama3-8b", "h100-sxm", pp=2)
    load = make_workload(rate_per_s=20, n=60, prompt_tokens=300, output_tokens=40, seed=3)
    first = simulate(dep, SchedulerConfig(), load, timeline=False)
    again = simulate(dep, SchedulerConfig(), load, timeline=False)
    assert first.summary["finished"] == 60
    assert json.dumps(first.summary, default=str) == json.dumps(again.summary, default=str)


@pytest.mark.parametrize(
    ("model", "argv", "message"),
    [
        ("deepseek-v3", ["--tp", "8", "--pp", "2"],
         "pp=2 does not divide n_layers=61; valid pp: 1, 61, or give each stage's blocks with "
         "--pp-layers (e.g. --pp-layers auto: 30,31)"),
        ("deepseek-v3", ["--tp", "8", "--pp", "2", "--pp-layers", "30,30"],
         "pp_layers=30,30 sums to 60 blocks but deepseek-v3 has n_layers=61"),
        ("llama3-8b", ["--pp", "2", "--pp-layers", "16,8,8"], "has 3 stages but pp=2"),
        ("deepseek-v3", ["--tp", "8", "--ep", "3"], "ep=3 does not divide deepseek-v3's "
         "n_experts=256; valid ep at tp=8: 1, 2, 4, 8"),
        ("deepseek-v3", ["--tp", "4", "--ep", "8"], "ep=8 is invalid at tp=4"),
        ("llama3-8b", ["--tp", "2", "--ep", "2"], "ep=2 is invalid for llama3-8b: expert "
         "parallelism needs a MoE model"),
    ],
)  # fmt: skip
def test_bad_pipeline_or_expert_input_is_one_line(capsys, model, argv, message):
    code, out, err = run(capsys, "serve", "--model", model, "--gpu", "h100-sxm", "--rate", "1",
                         "--prompt-tokens", "8", "--output-tokens", "8", *argv)  # fmt: skip
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and message in err and "Traceback" not in err


@pytest.mark.parametrize("model", ["llama3-70b", "qwen2-vl-7b"])
def test_the_stages_weights_add_up_to_the_whole_replicas(model):
    from gpuplan.sim.runtime.serving.kv_cache import weights_bytes_per_gpu
    from gpuplan.sim.runtime.serving.pipeline import stage_weights_bytes

    dep = deployment(model, "h100-sxm", tp=2, pp=4, pp_layers=None if model != "qwen2-vl-7b"
                     else (7, 7, 7, 7))  # fmt: skip
    parts = sum(stage_weights_bytes(dep, st, tp=2) for st in dep.stages)
    whole = weights_bytes_per_gpu(dep.model, tp=2, weight_dtype="bf16")
    # the final norm is counted once in both; a tied head (qwen2-vl-7b: untied) would add one copy
    assert parts == pytest.approx(whole, rel=1e-12)


def test_plan_offers_pipelines_for_formats_no_node_holds():
    from gpuplan.hwmodels.accelerators import get_accelerator
    from gpuplan.sim.runtime.serving.plan_space import SearchSpace, candidates

    dep = deployment("deepseek-v3", "h100-sxm", tp=8, weight_dtype="fp8")
    space = SearchSpace(formats=(("fp8", "fp8"),), max_seqs=(64,), ratios=())
    found = candidates(dep.model, get_accelerator("h100-sxm"), dep.eff, space)
    # (a MoE model's wide-EP groups are offered beside them: tests/test_wide_ep.py)
    found = [(c, d) for c, d in found if not c.dp_attention]
    assert {(c.tp, c.pp) for c, _ in found} == {(8, 2), (8, 3)}
    assert all(d.pp == c.pp and c.unit_gpus == 8 * c.pp for c, d in found)
    small = candidates(deployment("llama3-8b", "h100-sxm").model, get_accelerator("h100-sxm"),
                       dep.eff, space)  # fmt: skip
    assert {c.pp for c, _ in small} == {1}


def test_the_api_takes_training_s_auto_split():
    dep = deployment("deepseek-v3", "h100-sxm", tp=8, pp=2, pp_layers="auto", weight_dtype="fp8")
    assert dep.pp_layers == (30, 31) and [st.n_layers for st in dep.stages] == [30, 31]


def test_a_pipelined_kv_transfer_moves_each_stage_s_share():
    from gpuplan.sim.runtime.serving.disagg import kv_transfer_s

    one = deployment("llama3-70b", "h100-sxm", tp=4)
    two = deployment("llama3-70b", "h100-sxm", tp=4, pp=2)
    fixed = kv_transfer_s(one, 0, "scaleout")
    assert kv_transfer_s(two, 4096, "scaleout") - fixed == pytest.approx(
        (kv_transfer_s(one, 4096, "scaleout") - fixed) / 2, rel=1e-12
    )


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"pp": 2, "pp_layers": "bogus"}, "pp_layers='bogus' is invalid: give one block count"),
        ({"pp_layers": (16, 16)}, "is given but pp=1"),
        ({"pp": 40}, "pp=40 is more pipeline stages than n_layers=32"),
        ({"pp": 0}, "pp=0 is invalid"),
    ],
)
def test_bad_pipeline_input_to_the_api_is_a_gpuplan_error(kw, message):
    with pytest.raises(GpuplanError, match=message):
        deployment("llama3-8b", "h100-sxm", **kw)


def test_the_cpu_cost_per_sequence_is_paid_once_per_pipelined_iteration():
    base = deployment("llama3-70b", "h100-sxm", tp=4, pp=2)
    dep = dataclasses.replace(base, seq_overhead_s=1e-5)
    for b in BATCHES:
        running = b.decode_seqs + sum(s for _, _, s in b.prefill)
        with_cpu = StepModel(dep).iteration_s(b)
        assert with_cpu == pytest.approx(iteration_breakdown(dep, b).total_s, rel=1e-12)
        assert with_cpu - StepModel(base).iteration_s(b) == pytest.approx(1e-5 * running)


@pytest.mark.parametrize("pp", [1, 2])
def test_a_step_model_survives_pickling_as_dask_workers_receive_it(pp):
    import pickle

    dep = deployment("llama3-8b", "h100-sxm", pp=pp)
    step = StepModel(dep)
    back = pickle.loads(pickle.dumps(step))
    assert type(back) is type(step)
    assert back.iteration_s(BATCHES[0]) == step.iteration_s(BATCHES[0])
