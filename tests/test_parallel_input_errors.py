"""A training strategy, search or run budget given a value it cannot use says so in one line,
naming the field, the value and what is valid."""

import math

import pytest

from gpuplan.errors import GpuplanError
from gpuplan.hwmodels.accelerators import get_accelerator
from gpuplan.sim.parallel.cost import run_budget
from gpuplan.sim.parallel.search import search
from gpuplan.sim.parallel.strategy import Strategy
from gpuplan.sim.parallel.topology import get_cluster
from gpuplan.workloads.presets import get_model


def _one_line(excinfo) -> str:
    text = str(excinfo.value)
    assert "\n" not in text
    return text


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"expert_imbalance": math.nan}, "expert_imbalance=nan is invalid: it must be a finite number"),
        ({"expert_imbalance": "2"}, "expert_imbalance='2' is invalid: it must be a number"),
        ({"micro_batch": 1.5}, "micro_batch=1.5 is invalid: it must be a whole number"),
        ({"global_batch": True}, "global_batch=True is invalid: it must be a whole number"),
        ({"virtual_stages": 0}, "virtual_stages=0 is invalid: it must be from 1 to 1,048,576"),
        ({"tp": True}, "tp=True is invalid: it must be a whole number"),
    ],
)
def test_a_strategy_field_out_of_range_is_a_one_line_error(fields, message):
    with pytest.raises(GpuplanError) as excinfo:
        Strategy(**fields)
    assert _one_line(excinfo) == message


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"global_batch": 2.5}, "global_batch=2.5 is invalid: it must be a whole number"),
        ({"seq": 0}, "seq=0 is invalid: it must be from 1 to"),
        ({"gpus": 0}, "gpus=0 is invalid: it must be from 1 to"),
    ],
)
def test_a_search_of_an_unusable_size_is_a_one_line_error(kw, message):
    args = {"gpus": 8, "global_batch": 8, "seq": 4096} | kw
    with pytest.raises(GpuplanError) as excinfo:
        search(get_model("llama3-8b"), cluster=get_cluster("dgx-h200"), **args)
    assert _one_line(excinfo).startswith(message)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"pue": 0}, "pue=0 is invalid: it must be greater than zero"),
        ({"power_fraction": -0.5}, "power_fraction=-0.5 is invalid: it must be greater than zero"),
        ({"gpus": 0}, "gpus=0 is invalid: it must be from 1 to"),
    ],
)
def test_a_run_budget_of_an_unusable_value_is_a_one_line_error(kw, message):
    args = {"tokens": 1e9, "tokens_per_s": 1e5, "gpus": 8, "acc": get_accelerator("h200")} | kw
    with pytest.raises(GpuplanError) as excinfo:
        run_budget(**args)
    assert _one_line(excinfo).startswith(message)


@pytest.mark.parametrize("key", ["", " ", None])
def test_an_empty_cluster_key_is_a_one_line_error(key):
    # only an accelerator or device key carries the example ('h200'): a cluster's would mislead
    with pytest.raises(GpuplanError) as excinfo:
        get_cluster(key)
    assert _one_line(excinfo) == f"cluster key {key!r} is invalid: give a non-empty string"
