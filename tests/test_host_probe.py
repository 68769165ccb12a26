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


def test_the_reference_module_probe_is_the_median_round_of_the_paired_records(tmp_path):
    from gpuplan.validate.host_reference import module_reference

    path = tmp_path / "hostpair.jsonl"
    rows = [{"rounds": [{"module_probe_s": 2e-3}, {"module_probe_s": 4e-3}]},
            {"rounds": [{"module_probe_s": 3e-3}]}]
    path.write_text("\n".join(__import__("json").dumps(r) for r in rows) + "\nnot json\n")
    doc = module_reference(path)
    assert doc["reference_module_probe_s"] == pytest.approx(3e-3)
    assert doc["module_probe_from"]["rounds"] == 3


def test_paired_records_without_module_probes_are_a_clear_error(tmp_path):
    from gpuplan.validate.host_reference import module_reference

    path = tmp_path / "ops.jsonl"
    path.write_text('{"kind": "gemm"}\n')
    with pytest.raises(GpuplanError, match="no record has rounds with a module_probe_s"):
        module_reference(path)


def test_the_module_probe_without_transformers_is_a_one_line_error(monkeypatch, capsys):
    pytest.importorskip("torch")
    from gpuplan.validate.harness import host_probe
    from gpuplan.validate.stack_campaign import hf

    monkeypatch.setattr(hf, "transformers_or_none", lambda: None)
    assert host_probe.main(["--kind", "module", "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --kind module needs Hugging Face transformers")
    assert err.count("\n") == 1
