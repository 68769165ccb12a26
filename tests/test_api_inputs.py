"""The library's entry points refuse nonsense with a GpuplanError naming it, never a bare
built-in error from deep inside and never a priced answer (a negative cost for gpus=-8)."""

import math

import pytest

from gpuplan.api import (
    GpuplanError,
    Strategy,
    decode_step_breakdown,
    edge_estimates,
    efficiency_for,
    estimate_training,
    get_accelerator,
    get_cluster,
    get_model,
    make_workload,
    model_breakdown,
    predict_breakdown,
    run_budget,
    simulate_step,
)

HOSTILE = [-8, 0, math.nan, math.inf, "8", None, True, 2.5, 10**30]


@pytest.fixture(scope="module")
def setup():
    return get_model("llama3-8b"), get_cluster("dgx-h100"), get_accelerator("h200")


CALLS = {
    "Strategy(tp)": lambda m, cl, acc, v: Strategy(tp=v),
    "estimate_training(gpus)": lambda m, cl, acc, v: estimate_training(
        m, Strategy(dp=8, global_batch=8), cluster=cl, seq=2048, gpus=v),
    "estimate_training(seq)": lambda m, cl, acc, v: estimate_training(
        m, Strategy(dp=8, global_batch=8), cluster=cl, seq=v),
    "run_budget(gpus)": lambda m, cl, acc, v: run_budget(
        tokens=1e12, tokens_per_s=1e6, gpus=v, acc=acc),
    "make_workload(n)": lambda m, cl, acc, v: make_workload(
        rate_per_s=1, n=v, prompt_tokens=10, output_tokens=10),
    "make_workload(prompt_tokens)": lambda m, cl, acc, v: make_workload(
        rate_per_s=1, n=4, prompt_tokens=v, output_tokens=10),
    "decode_step_breakdown(batch)": lambda m, cl, acc, v: decode_step_breakdown(
        acc, efficiency_for("h200"), m, batch=v, context=128, cuda_graph=False),
    "predict_breakdown(m)": lambda m, cl, acc, v: predict_breakdown(
        "gemm", "h200", {"m": v, "n": 64, "k": 64, "dtype": "bf16"}),
    "model_breakdown(seq)": lambda m, cl, acc, v: model_breakdown(
        "train_step", acc, efficiency_for("h200"), m, {"seq": v, "micro_batch": 1}),
    "edge_estimates(context)": lambda m, cl, acc, v: edge_estimates("llama3-8b", "l4", context=v),
}  # fmt: skip


NONE_IS_THE_DEFAULT = {"estimate_training(gpus)"}  # None: the strategy's world size
TEXT_IS_A_SPEC = {"make_workload(prompt_tokens)"}  # "8": the length spec of 8 tokens


@pytest.mark.parametrize(
    ("name", "value"),
    [(n, v) for n in sorted(CALLS) for v in HOSTILE
     if not (v is None and n in NONE_IS_THE_DEFAULT) and not (v == "8" and n in TEXT_IS_A_SPEC)],  # fmt: skip
)
def test_a_hostile_size_is_a_named_error(setup, name, value):
    with pytest.raises(GpuplanError):
        CALLS[name](*setup, value)


@pytest.mark.parametrize("value", [-1, math.nan, "8", 2.5, None])
def test_a_seed_that_is_not_a_whole_number_from_zero_is_a_named_error(value):
    with pytest.raises(GpuplanError, match="seed"):
        make_workload(rate_per_s=1, n=4, prompt_tokens=8, output_tokens=8, seed=value)


@pytest.mark.parametrize("value", [-1, math.nan, math.inf, "8", None, 1e30])
def test_a_jitter_that_is_not_a_finite_coefficient_of_variation_is_a_named_error(setup, value):
    m, cl, _ = setup
    with pytest.raises(GpuplanError, match="jitter"):
        simulate_step(m, Strategy(dp=8, global_batch=8), cluster=cl, seq=2048, jitter=value)


@pytest.mark.parametrize("key", [5, None, "", ["h200"]], ids=repr)
@pytest.mark.parametrize("lookup", [get_accelerator, get_model, get_cluster, efficiency_for])
def test_a_key_that_is_not_a_string_is_a_named_error(lookup, key):
    with pytest.raises(GpuplanError, match="key"):
        lookup(key)


def test_a_sequence_beyond_the_models_position_table_is_refused(setup):
    m, cl, _ = setup
    with pytest.raises(GpuplanError, match="max_seq_len=8,192"):
        estimate_training(m, Strategy(dp=8, global_batch=8), cluster=cl, seq=1_000_000)


@pytest.mark.parametrize("spec", ["uniform:1:1e30", "lognormal:inf:1", "lognormal:nan:nan"])
def test_a_length_distribution_with_infinite_or_huge_parameters_is_refused(spec):
    with pytest.raises(GpuplanError, match="finite token counts"):
        make_workload(rate_per_s=1, n=4, prompt_tokens=spec, output_tokens=8)


def test_a_kv_context_beyond_the_models_position_table_is_refused(setup):
    m, _, acc = setup
    with pytest.raises(GpuplanError, match="context=1,000,000,000 is longer than"):
        model_breakdown("decode_step", acc, efficiency_for("h200"), m,
                        {"batch": 1, "context": 10**9})  # fmt: skip


@pytest.mark.parametrize(
    ("name", "value"),
    [(n, v) for n in sorted(CALLS) for v in HOSTILE
     if not (v is None and n in NONE_IS_THE_DEFAULT) and not (v == "8" and n in TEXT_IS_A_SPEC)],  # fmt: skip
)
def test_a_hostile_sizes_error_is_one_line_naming_the_field(setup, name, value):
    field = name.split("(")[1].rstrip(")")  # "estimate_training(gpus)" -> "gpus"
    with pytest.raises(GpuplanError) as err:
        CALLS[name](*setup, value)
    assert field in str(err.value) and "\n" not in str(err.value)
