"""Capacity planning and edge estimates: the cheapest configurations really meet the SLO and
one fewer unit does not; errors for SLOs nobody meets and GPUs without a price."""

import math

import numpy as np
import pytest

from gpuplan.errors import GpuplanError
from gpuplan.sim.runtime.serving.deployment import deployment
from gpuplan.sim.runtime.serving.edge import edge_estimates
from gpuplan.sim.runtime.serving.plan import plan
from gpuplan.sim.runtime.serving.plan_probe import Probe
from gpuplan.sim.runtime.serving.plan_space import Candidate, SearchSpace, Slo
from gpuplan.sim.runtime.serving.step_model import StepModel

LENGTHS = (np.full(300, 512), np.full(300, 128))
SMALL = SearchSpace(tps=(1,), formats=(("bf16", "bf16"), ("int4", "bf16")), max_seqs=(64,),
                    ratios=((1, 1),), max_gpus=16)  # fmt: skip
SLO = Slo(ttft_s=0.3, tpot_s=0.03, percentile=90)
RATE = 40.0


@pytest.fixture(scope="module")
def result():
    return plan("llama3-8b", "h100-sxm", rate_per_s=RATE, slo=SLO, lengths=LENGTHS,
                requests=300, space=SMALL, top=3)  # fmt: skip


def test_the_cheapest_configurations_come_first_and_meet_the_slo(result):
    best = result.best
    assert len(best) >= 1 and best["meets"].all()
    assert best["usd_per_m_output_tokens"].is_monotonic_increasing
    assert (best["ttft_p90_s"] <= SLO.ttft_s).all() and (best["tpot_p90_s"] <= SLO.tpot_s).all()


def test_the_price_per_million_tokens_is_gpus_times_the_hourly_price_over_tokens(result):
    row = result.best.iloc[0]
    tokens_per_hour = RATE * 128 * 3600
    assert row["usd_per_m_output_tokens"] == pytest.approx(
        row["gpus"] * 3.00 / tokens_per_hour * 1e6
    )
    assert "Mercatus" in result.price_source


def test_one_unit_fewer_than_the_plan_misses_the_slo(result):
    several = result.best[(result.best["units"] > 1) & (result.best["layout"] == "colocated")]
    assert len(several), "the space should need more than one replica somewhere"
    row = several.iloc[0]
    c = Candidate(tp=int(row["tp"]), weight_dtype=row["weight_dtype"], kv_dtype=row["kv_dtype"],
                  max_seqs=int(row["max_seqs"]), policy="chunked")  # fmt: skip
    dep = deployment("llama3-8b", "h100-sxm", weight_dtype=c.weight_dtype, kv_dtype=c.kv_dtype)
    probe = Probe(c, dep, StepModel(dep), rate_per_s=RATE, lengths=LENGTHS, slo=SLO,
                   n_requests=300, seed=0)  # fmt: skip
    assert probe(int(row["units"]))[0]
    assert not probe(int(row["units"]) - 1)[0]


def test_an_slo_no_configuration_meets_is_an_error_naming_the_closest():
    with pytest.raises(GpuplanError, match="no configuration .* the closest .* relax the SLO"):
        plan("llama3-8b", "h100-sxm", rate_per_s=12.0, slo=Slo(ttft_s=1e-4, tpot_s=0.03),
             lengths=LENGTHS, requests=100, space=SMALL)  # fmt: skip


def test_a_gpu_without_a_price_needs_one_given():
    with pytest.raises(GpuplanError, match="--price-per-gpu-hour"):
        plan("llama3-8b", "l40s", rate_per_s=1.0, slo=SLO, lengths=LENGTHS, requests=50,
             space=SMALL)  # fmt: skip


def test_a_bad_slo_is_an_error():
    with pytest.raises(GpuplanError, match="slo_ttft_s"):
        Slo(ttft_s=0, tpot_s=1)
    with pytest.raises(GpuplanError, match="percentile"):
        Slo(ttft_s=1, tpot_s=1, percentile=120)
    with pytest.raises(GpuplanError, match="finite"):
        plan("llama3-8b", "h100-sxm", rate_per_s=math.inf, slo=SLO, lengths=LENGTHS)


def test_an_slo_without_any_target_names_the_two_flags():
    with pytest.raises(GpuplanError, match=r"a TTFT target, a TPOT target or both "
                                           r"\(--slo-ttft-s, --slo-tpot-s\)"):
        Slo(percentile=90)


def test_quantized_weights_decode_faster_on_edge_devices_and_memory_bounds_them():
    frame = edge_estimates("llama3-8b", "jetson-agx-orin-64gb", batches=(1,), context=512)
    by = frame.set_index("weight_dtype")
    assert by.loc["int4", "tokens_per_s"] > 2 * by.loc["bf16", "tokens_per_s"]
    assert (frame["bound"] == "memory").all()
    assert by.loc["int4", "weights_bytes"] < 0.4 * by.loc["bf16", "weights_bytes"]


def test_edge_memory_says_when_a_model_does_not_fit_and_batches_raise_throughput():
    frame = edge_estimates("llama3-70b", "jetson-agx-orin-64gb", weight_dtypes=("bf16", "int4"),
                           batches=(1, 4))  # fmt: skip
    by = frame.set_index(["weight_dtype", "batch"])
    assert not by.loc[("bf16", 1), "fits"] and by.loc[("int4", 1), "fits"]
    assert by.loc[("int4", 4), "tokens_per_s"] > by.loc[("int4", 1), "tokens_per_s"]


def test_an_unknown_attention_kernel_is_named_with_the_valid_ones():
    space = SearchSpace(tps=(1,), max_seqs=(64,), ratios=(), attention_kernel="fa9")
    with pytest.raises(GpuplanError, match="attention_kernel.*fa9.*flash2.*cudnn"):
        plan("llama3-8b", "h100-sxm", rate_per_s=RATE, slo=SLO, lengths=LENGTHS,
             requests=300, space=space)  # fmt: skip


def test_a_deployment_names_an_unknown_attention_kernel():
    with pytest.raises(GpuplanError, match="attention_kernel='fa9' is invalid"):
        deployment("llama3-8b", "h100-sxm", attention_kernel="fa9")
