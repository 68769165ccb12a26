"""One question, one cost path (issue 11 item 5): the serving simulator's fast ``StepModel``
prices exactly what the reference ``iteration_breakdown`` prices, for every stack preset, and
``estimate decode-step --model`` is that serving iteration."""

from __future__ import annotations

import dataclasses
import json

import pytest

from gpuplan.cli import main
from gpuplan.hwmodels.accelerators import get_accelerator
from gpuplan.hwmodels.efficiency import efficiency_for
from gpuplan.sim.estimate.inference import decode_deployment
from gpuplan.sim.runtime.serving.iteration import Batch, iteration_breakdown
from gpuplan.sim.runtime.serving.step_model import StepModel
from gpuplan.sim.stacks import get_stack, list_stacks, stack_efficiency
from gpuplan.workloads.presets import get_model

H200 = get_accelerator("h200")
STACKS = [s.name for s in list_stacks()]
_LLAMA = get_model("llama3-8b")
MODELS = {  # cut to a few blocks: the costs are per block, the sweep stays fast
    "dense-gqa": dataclasses.replace(_LLAMA, n_layers=4),
    "mha": dataclasses.replace(get_model("llama2-7b"), n_layers=4),
    "moe": dataclasses.replace(get_model("mixtral-8x7b"), n_layers=4),
    "window": dataclasses.replace(_LLAMA, n_layers=4, sliding_window=1024),
    "hybrid-window": dataclasses.replace(_LLAMA, n_layers=8, sliding_window=512,
                                         local_per_global=3),  # fmt: skip
}
BATCHES = (
    Batch(decode_seqs=4, decode_kv_tokens=4 * 2049),  # decode only
    Batch(decode_seqs=1, decode_kv_tokens=3),
    Batch(prefill=((512, 0, 1),)),  # prefill only
    Batch(prefill=((128, 256, 2), (64, 0, 1)), decode_seqs=5, decode_kv_tokens=5 * 700,
          sampled=6),  # mixed  # fmt: skip
)


def _deployments(stack: str, cfg):
    """The decode deployments of ``stack`` (``decode_deployment``): each KV cache it can run,
    eager and under its CUDA graphs, one and two pipeline stages, 16-bit and 8-bit formats."""
    st = get_stack(stack)
    eff = stack_efficiency(st, efficiency_for("h200"), H200, phase="decode")
    for kv_cache, graph in (("dynamic", False), ("static", None), ("paged", None)):
        dep = decode_deployment(H200, eff, cfg, st, kv_cache=kv_cache, cuda_graph=graph,
                                max_cache_len=4096 if kv_cache == "static" else None)  # fmt: skip
        yield dep
        if kv_cache != "dynamic":
            yield dataclasses.replace(dep, pp=2)
            yield dataclasses.replace(dep, weight_dtype="fp8", kv_dtype="fp8")


@pytest.mark.parametrize("stack", STACKS)
def test_the_step_model_is_the_iteration_breakdown_for_every_stack(stack):
    checked = 0
    for name, cfg in MODELS.items():
        for dep in _deployments(stack, cfg):
            step = StepModel(dep)
            for batch in BATCHES:
                want = iteration_breakdown(dep, batch).total_s
                got = step.iteration_s(batch)
                assert got == pytest.approx(want, rel=1e-9, abs=0.0), (
                    name, dep.kv_cache, dep.pp, dep.kv_dtype, batch)
                checked += 1
    assert checked == len(MODELS) * 7 * len(BATCHES)


@pytest.mark.parametrize("stack", ["hf-transformers", "torch-compile", "vllm", "trt-llm"])
def test_a_decode_run_is_its_iterations_one_by_one(stack):
    # the engine's closed form (decode_run_s, decode_iterations_until) against iteration_s
    # summed: hf-transformers' host hides behind only part of the device's time
    for cfg in (MODELS["dense-gqa"], MODELS["window"]):
        for dep in list(_deployments(stack, cfg))[:3]:
            step = StepModel(dep)
            for seqs, kv in ((2, 2 * 50), (48, 48 * 1500)):
                grow = 0 if dep.decode_context_tokens else seqs
                each = [step.iteration_s(Batch(decode_seqs=seqs, decode_kv_tokens=kv + j * grow))
                        for j in range(30)]  # fmt: skip
                assert step.decode_s(seqs, kv) == pytest.approx(each[0], rel=1e-9)
                assert step.decode_run_s(seqs, kv, 30) == pytest.approx(sum(each), rel=1e-9)
                target = 0.613 * sum(each)  # off any boundary of a constant cost
                n = next(i for i in range(1, 31) if sum(each[:i]) >= target)
                assert step.decode_iterations_until(seqs, kv, target) == n


def _cli_decode_s(capsys, argv: list[str]) -> float:
    assert main(["estimate", "decode-step", "--model", "llama3-8b", "--gpu", "h200",
                 "--layers", "4", *argv, "--json"]) == 0  # fmt: skip
    return json.loads(capsys.readouterr().out)["time_s"]


@pytest.mark.parametrize("stack", STACKS)
def test_estimate_decode_step_is_the_serving_iteration(stack, capsys):
    st = get_stack(stack)
    eff = stack_efficiency(st, efficiency_for("h200"), H200, phase="decode")
    cfg = dataclasses.replace(_LLAMA, n_layers=4)
    for batch, context in ((1, 100), (8, 4096)):
        for kv_cache in ("static", "paged"):
            argv = ["--batch", str(batch), "--context", str(context), "--stack", stack,
                    "--kv-cache", kv_cache]  # fmt: skip
            dep = decode_deployment(H200, eff, cfg, st, kv_cache=kv_cache)
            served = StepModel(dep).iteration_s(
                Batch(decode_seqs=batch, decode_kv_tokens=batch * (context + 1)))
            assert _cli_decode_s(capsys, argv) == pytest.approx(served, rel=0.005), kv_cache


def test_a_dynamic_cache_is_priced_but_not_simulated_as_traffic():
    from gpuplan.errors import GpuplanError
    from gpuplan.sim.runtime.serving.deployment import SchedulerConfig
    from gpuplan.sim.runtime.serving.disagg import Disaggregation, simulate_disaggregated
    from gpuplan.sim.runtime.serving.engine import simulate
    from gpuplan.sim.runtime.serving.requests import make_workload

    st = get_stack("hf-transformers")  # DynamicCache by default
    eff = stack_efficiency(st, efficiency_for("h200"), H200, phase="decode")
    dep = decode_deployment(H200, eff, MODELS["dense-gqa"], st)
    assert dep.kv_cache == "dynamic" and StepModel(dep).decode_s(2, 200) > 0
    load = make_workload(rate_per_s=1, n=3, prompt_tokens=64, output_tokens=4, seed=0)
    with pytest.raises(GpuplanError, match="kv_cache='dynamic'"):
        simulate(dep, SchedulerConfig(), load)
    with pytest.raises(GpuplanError, match="kv_cache='dynamic'"):
        simulate_disaggregated(dep, SchedulerConfig(), load, Disaggregation(prefill_replicas=1, decode_replicas=1))


@pytest.mark.parametrize("stack", [s.name for s in list_stacks() if s.serving is not None])
def test_estimate_decode_step_on_a_serving_stack_is_what_serve_prices(stack, capsys):
    # a serving engine's runtime (CPU per iteration and per sequence, graph buckets) is in both
    from gpuplan.sim.runtime.serving.on_stack import stack_deployment

    cfg = dataclasses.replace(_LLAMA, n_layers=4)
    for batch, context, tp in ((3, 200, 1), (8, 2048, 2)):
        dep = stack_deployment(cfg, "h200", stack, tp=tp)
        served = StepModel(dep).iteration_s(
            Batch(decode_seqs=batch, decode_kv_tokens=batch * (context + 1)))
        argv = ["--batch", str(batch), "--context", str(context), "--stack", stack,
                "--kv-cache", "paged", "--tp", str(tp)]  # fmt: skip
        assert _cli_decode_s(capsys, argv) == pytest.approx(served, rel=0.005), (batch, tp)
