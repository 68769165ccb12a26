"""Layer 2 strategies: validity rules whose errors name the degree, the value and what is valid."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.errors import GpuplanError
from gpuplan.sim.parallel.degrees import divisors, nearest
from gpuplan.sim.parallel.strategy import Strategy, validate
from gpuplan.workloads.presets import get_model

LLAMA70 = get_model("llama3-70b")  # 64 heads, 8 KV heads, 80 layers
MIXTRAL = get_model("mixtral-8x7b")  # 8 experts


def test_a_tp_that_does_not_divide_the_heads_is_an_error_listing_valid_tp():
    with pytest.raises(
        GpuplanError, match=r"tp=3 does not divide n_heads=64; valid tp: .*\b2\b.*\b4\b"
    ):
        validate(Strategy(tp=3, dp=1), LLAMA70, 3, 4096)


def test_a_pp_that_does_not_divide_the_layers_is_an_error_listing_valid_pp():
    with pytest.raises(
        GpuplanError, match=r"pp=3 does not divide n_layers=80; valid pp: .*\b2\b.*\b4\b"
    ):
        validate(Strategy(pp=3), LLAMA70, 3, 4096)


@settings(max_examples=40, deadline=None)
@given(
    tp=st.sampled_from([1, 2, 4, 8]),
    pp=st.sampled_from([1, 2, 4, 5]),
    dp=st.integers(1, 16),
    gpus=st.integers(1, 1024),
)
def test_degrees_must_multiply_to_the_world_size_or_it_is_an_error(tp, pp, dp, gpus):
    s = Strategy(tp=tp, pp=pp, dp=dp, micro_batch=1, global_batch=dp * 8 * pp)
    if tp * pp * dp == gpus:
        validate(s, LLAMA70, gpus, 4096)
    else:
        with pytest.raises(GpuplanError, match="is not the world size"):
            validate(s, LLAMA70, gpus, 4096)


def test_a_global_batch_that_does_not_split_into_micro_batches_is_an_error():
    with pytest.raises(GpuplanError, match=r"global_batch=10 is not a multiple of micro_batch\*dp"):
        validate(Strategy(dp=4, micro_batch=1, global_batch=10), LLAMA70, 4, 4096)


def test_virtual_stages_need_the_interleaved_schedule():
    with pytest.raises(GpuplanError, match="needs schedule='interleaved'"):
        validate(Strategy(pp=4, virtual_stages=2, global_batch=16), LLAMA70, 4, 4096)


def test_virtual_stages_must_divide_a_stage_and_the_error_lists_valid_ones():
    s = Strategy(pp=4, schedule="interleaved", virtual_stages=3, global_batch=16)
    with pytest.raises(
        GpuplanError, match=r"does not divide the 20 layers .* valid virtual_stages"
    ):
        validate(s, LLAMA70, 4, 4096)


def test_the_interleaved_schedule_needs_micro_batches_a_multiple_of_pp():
    s = Strategy(pp=4, schedule="interleaved", virtual_stages=2, global_batch=6)
    with pytest.raises(GpuplanError, match="multiple of pp=4"):
        validate(s, LLAMA70, 4, 4096)


def test_expert_parallelism_on_a_dense_model_is_an_error():
    with pytest.raises(GpuplanError, match="ep=2 needs a mixture-of-experts model"):
        validate(Strategy(dp=2, ep=2, global_batch=2), LLAMA70, 2, 4096)


def test_expert_parallelism_must_divide_experts_and_dp():
    with pytest.raises(GpuplanError, match=r"ep=4 must divide n_experts=8 and dp=2; valid ep"):
        validate(Strategy(dp=2, ep=4, global_batch=2), MIXTRAL, 2, 4096)


def test_context_parallelism_needs_the_flash_kernel():
    s = Strategy(cp=2, attention="unfused")
    with pytest.raises(GpuplanError, match="cp=2 needs attention='flash'"):
        validate(s, LLAMA70, 2, 4096)


def test_unknown_choices_and_bad_numbers_are_errors_naming_the_field():
    with pytest.raises(GpuplanError, match="schedule='zigzag'"):
        Strategy(schedule="zigzag")
    with pytest.raises(GpuplanError, match="zero=4"):
        Strategy(zero=4)
    with pytest.raises(GpuplanError, match="tp=0"):
        Strategy(tp=0)
    with pytest.raises(GpuplanError, match="expert_imbalance"):
        Strategy(expert_imbalance=0.5)


def test_a_valid_strategy_reports_its_world_and_micro_batches():
    s = Strategy(tp=8, pp=4, dp=32, micro_batch=2, global_batch=1024)
    validate(s, LLAMA70, 1024, 4096)
    assert s.world == 1024 and s.micro_batches == 16 and s.chunks == 1


def test_divisors_and_nearest_valid_values():
    assert divisors(12) == [1, 2, 3, 4, 6, 12]
    assert nearest(3, [1, 2, 4, 8, 16, 32, 64]) == "1, 2, 4, 8"


def test_a_vision_encoder_is_not_a_training_target_here():
    with pytest.raises(GpuplanError, match="vit-l-14 is a vision encoder"):
        validate(Strategy(), get_model("vit-l-14"), 1, 257)


LLAMA405 = get_model("llama3.1-405b")  # 126 layers


def test_a_pp_that_does_not_divide_the_layers_suggests_pp_layers():
    with pytest.raises(GpuplanError, match=r"pp=16 does not divide n_layers=126.*--pp-layers"):
        validate(Strategy(pp=16, global_batch=16), LLAMA405, 16, 4096)


def test_llama3_405b_runs_126_layers_on_16_stages_with_one_block_fewer_at_each_end():
    from gpuplan.sim.parallel.strategy import auto_pp_layers

    layers = auto_pp_layers(126, 16)
    assert layers == (7,) + (8,) * 14 + (7,)  # Dubey et al. 2024, sec. 3.3.2
    validate(Strategy(pp=16, global_batch=16, pp_layers=layers), LLAMA405, 16, 4096)


def test_a_pp_layers_list_that_does_not_sum_to_the_layers_is_an_error_naming_the_total():
    s = Strategy(pp=4, global_batch=16, pp_layers=(20, 20, 20, 21))
    with pytest.raises(GpuplanError, match=r"sums to 81 blocks .* must add up to 80"):
        validate(s, LLAMA70, 4, 4096)


def test_a_pp_layers_list_of_the_wrong_length_is_an_error():
    with pytest.raises(GpuplanError, match=r"has 3 stages but pp=4"):
        Strategy(pp=4, pp_layers=(20, 30, 30))


@pytest.mark.parametrize("bad", [(40, 0, 20, 20), (50, -10, 20, 20), (20.0, 20, 20, 20)])
def test_a_pp_layers_entry_that_is_not_a_positive_whole_number_is_an_error(bad):
    with pytest.raises(GpuplanError, match=r"every stage needs a whole number of blocks"):
        Strategy(pp=4, pp_layers=bad)


def test_first_last_counts_whose_middle_does_not_split_evenly_list_valid_last_counts():
    from gpuplan.sim.parallel.strategy import first_last_pp_layers

    assert first_last_pp_layers(126, 16, 6, 8) == (6,) + (8,) * 15
    with pytest.raises(GpuplanError, match=r"pp_first_last=6,7 .* valid last: .*\b8\b"):
        first_last_pp_layers(126, 16, 6, 7)


def test_auto_split_on_more_stages_than_it_can_fill_is_an_error():
    from gpuplan.sim.parallel.strategy import auto_pp_layers

    with pytest.raises(GpuplanError, match=r"pp_layers=auto cannot split n_layers=4 over pp=4"):
        auto_pp_layers(4, 4)


def test_virtual_stages_must_divide_every_uneven_stage():
    s = Strategy(pp=4, global_batch=16, schedule="interleaved", virtual_stages=2,
                 pp_layers=(19, 21, 21, 19))  # fmt: skip
    with pytest.raises(GpuplanError, match=r"does not divide every stage's blocks"):
        validate(s, LLAMA70, 4, 4096)
    ok = Strategy(pp=4, global_batch=16, schedule="interleaved", virtual_stages=3,
                  pp_layers=(18, 21, 21, 20))  # fmt: skip
    with pytest.raises(GpuplanError, match=r"valid virtual_stages: none"):
        validate(ok, LLAMA70, 4, 4096)
    good = Strategy(pp=4, global_batch=16, schedule="interleaved", virtual_stages=2,
                    pp_layers=(18, 22, 22, 18))  # fmt: skip
    validate(good, LLAMA70, 4, 4096)


@settings(max_examples=60, deadline=None)
@given(n_layers=st.integers(2, 200), pp=st.integers(1, 64))
def test_the_auto_split_sums_to_the_layers_and_unloads_the_ends(n_layers, pp):
    from gpuplan.sim.parallel.strategy import auto_pp_layers

    if pp > (n_layers + 2) // 2:
        with pytest.raises(GpuplanError):
            auto_pp_layers(n_layers, pp)
        return
    layers = auto_pp_layers(n_layers, pp)
    assert len(layers) == pp and sum(layers) == n_layers and min(layers) >= 1
    if pp > 2:
        assert max(layers[0], layers[-1]) <= min(layers[1:-1])
        assert max(layers) - min(layers[1:-1]) <= 1
