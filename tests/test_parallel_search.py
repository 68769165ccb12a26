"""The vectorized strategy search: it equals the scalar estimate, enumerates only valid layouts,
and its Pareto front is not dominated."""

import numpy as np
import pytest

from gpuplan.errors import GpuplanError
from gpuplan.hwmodels.efficiency import efficiency_for
from gpuplan.sim.parallel.compute import CostCache
from gpuplan.sim.parallel.estimate import estimate_training, training_efficiency
from gpuplan.sim.parallel.search import SearchSpace, enumerate_space, row_strategy, search
from gpuplan.sim.parallel.strategy import validate
from gpuplan.sim.parallel.topology import get_cluster
from gpuplan.sim.stacks import get_stack
from gpuplan.workloads.presets import get_model

H100 = get_cluster("dgx-h100")
EFF = efficiency_for("h100-sxm")
SEQ, GB, GPUS = 2048, 32, 32


@pytest.fixture(scope="module")
def llama_search():
    cfg = get_model("llama2-7b")
    return cfg, search(cfg, cluster=H100, gpus=GPUS, global_batch=GB, seq=SEQ, eff=EFF,
                       tokens=1e9)  # fmt: skip


def _sample(frame, n, seed=0):
    rng = np.random.default_rng(seed)
    return frame.iloc[rng.choice(len(frame), size=min(n, len(frame)), replace=False)]


def test_the_vectorized_search_equals_the_scalar_estimate(llama_search):
    cfg, result = llama_search
    space = SearchSpace()
    costs = CostCache(cfg, H100.accelerator, training_efficiency(get_stack("megatron-te"), EFF,
                                                                 H100.accelerator))
    for _, row in _sample(result.frame, 40).iterrows():
        st = row_strategy(row, global_batch=GB, space=space)
        e = estimate_training(cfg, st, cluster=H100, seq=SEQ, eff=EFF, costs=costs)
        assert e.step_time_s == pytest.approx(row["step_time_s"], rel=1e-9)
        assert e.peak_memory_per_gpu_bytes == pytest.approx(
            row["peak_memory_per_gpu_bytes"], rel=1e-9
        )
        assert e.mfu == pytest.approx(row["mfu"], rel=1e-9)


def test_the_vectorized_search_equals_the_scalar_estimate_for_moe_models():
    cfg = get_model("mixtral-8x7b")
    space = SearchSpace(precision=("bf16",), zero=(1, 3))
    result = search(cfg, cluster=H100, gpus=16, global_batch=16, seq=SEQ, space=space, eff=EFF)
    assert (result.frame["ep"] > 1).any()
    for _, row in _sample(result.frame, 20, seed=1).iterrows():
        st = row_strategy(row, global_batch=16, space=space)
        e = estimate_training(cfg, st, cluster=H100, seq=SEQ, eff=EFF)
        assert e.step_time_s == pytest.approx(row["step_time_s"], rel=1e-9)
        assert e.peak_memory_per_gpu_bytes == pytest.approx(
            row["peak_memory_per_gpu_bytes"], rel=1e-9
        )


def test_every_enumerated_strategy_is_valid():
    cfg = get_model("llama2-7b")
    s = enumerate_space(cfg, GPUS, GB, SEQ, H100.accelerator, SearchSpace())
    rows = np.random.default_rng(2).choice(len(s["tp"]), size=200, replace=False)
    space = SearchSpace()
    for i in rows:
        row = {
            "tp": s["tp"][i], "pp": s["pp"][i], "dp": s["dp"][i], "cp": s["cp"][i],
            "ep": s["ep"][i], "sp": s["sp"][i], "zero": s["zero"][i], "micro_batch": s["mb"][i],
            "schedule": ("gpipe", "1f1b", "interleaved")[s["sched"][i]],
            "virtual_stages": s["chunks"][i], "recompute": ("none", "selective", "full")[s["rc"][i]],
            "precision": "fp8" if s["fp8"][i] else "bf16",
        }  # fmt: skip
        validate(row_strategy(row, global_batch=GB, space=space), cfg, GPUS, SEQ)


def test_only_strategies_that_fit_are_returned_fastest_first(llama_search):
    _, result = llama_search
    frame = result.frame
    assert (frame["peak_memory_per_gpu_bytes"] <= H100.accelerator.hbm_bytes).all()
    assert frame["step_time_s"].is_monotonic_increasing
    assert result.evaluated > result.fitting > 0 and result.strategies_per_s > 0
    assert {"cost_per_step_usd", "time_to_train_s", "cost_usd"} <= set(frame.columns)


def test_no_pareto_strategy_is_dominated(llama_search):
    _, result = llama_search
    cols = ["step_time_s", "peak_memory_per_gpu_bytes", "cost_per_step_usd"]
    front = result.pareto[cols].to_numpy()
    every = result.frame[cols].to_numpy()
    for v in front:
        dominated = np.all(every <= v, axis=1) & np.any(every < v, axis=1)
        assert not dominated.any()
    assert result.pareto.iloc[0]["step_time_s"] == result.frame.iloc[0]["step_time_s"]


def test_a_model_that_fits_nowhere_is_an_error_saying_what_would_be_needed():
    cfg = get_model("llama3.1-405b")
    space = SearchSpace(precision=("bf16",))
    with pytest.raises(GpuplanError, match=r"fits nowhere on 8 x h100-sxm.*try at least"):
        search(cfg, cluster=H100, gpus=8, global_batch=8, seq=SEQ, space=space, eff=EFF)


def test_a_global_batch_no_layout_can_split_is_an_error():
    cfg = get_model("llama2-7b")  # 32 layers: 37 GPUs are neither a dp of 5 nor a pipeline
    with pytest.raises(GpuplanError, match="no valid layout"):
        search(cfg, cluster=H100, gpus=37, global_batch=5, seq=SEQ, eff=EFF)


def test_seven_gpus_run_an_uneven_seven_stage_pipeline_the_estimate_agrees_with():
    cfg = get_model("llama2-7b")  # 32 layers on 7 stages: the auto split, 3,5,5,5,5,5,4
    res = search(cfg, cluster=H100, gpus=7, global_batch=14, seq=SEQ, eff=EFF)
    rows = res.frame[res.frame["pp"] == 7]
    assert len(rows) and set(rows["pp_layers"]) == {"3,5,5,5,5,5,4"}
    row = rows.iloc[0]
    st = row_strategy(row, global_batch=14, space=SearchSpace())
    assert st.pp_layers == (3, 5, 5, 5, 5, 5, 4)
    e = estimate_training(cfg, st, cluster=H100, seq=SEQ, eff=EFF)
    assert e.step_time_s == pytest.approx(row["step_time_s"], rel=1e-9)
    assert e.peak_memory_per_gpu_bytes == pytest.approx(row["peak_memory_per_gpu_bytes"], rel=1e-9)
