"""The host probe and the reference host's speed it is measured against."""

import pytest

from gpuplan.errors import GpuplanError
from gpuplan.validate.host_reference import reference_probe


def test_the_reference_probe_is_a_fitted_runs_probe_over_its_host_factor():
    runs = {"runs": [{"folder": "a", "host_probe_s_per_launch": 6e-6},
                     {"folder": "b", "host_probe_s_per_launch": 7e-6},
                     {"folder": "ref", "host_probe_s_per_launch": None}]}
    fit = {"parameters": {"host_factor": {"a": 0.5, "b": 1.0}}}  # b's factor was not fitted
    doc = reference_probe(runs, fit)
    assert doc["reference_host_probe_s_per_launch"] == pytest.approx(12e-6)
    assert list(doc["derived_from"]) == ["a"]


def test_no_fitted_host_factor_is_a_clear_error():
    with pytest.raises(GpuplanError, match="host probe and a fitted host factor"):
        reference_probe({"runs": [{"folder": "a", "host_probe_s_per_launch": 1e-6}]},
                        {"parameters": {"host_factor": {"a": 1.0}}})


def test_the_probe_runs_on_a_cpu_and_says_its_factor_is_not_comparable():
    pytest.importorskip("torch")
    from gpuplan.validate.harness.host_probe import probe

    doc = probe("cpu", reps=1)
    assert doc["probe_s_per_launch"] > 0 and doc["host_speed"] > 0 and "note" in doc
