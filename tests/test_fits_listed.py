"""Every fitted value in the package is listed in docs/fits.json with its mechanism, and
docs/fits.md is the table written from it (``gpuplan.validate.fits_registry``)."""

from __future__ import annotations

import json
import shutil

import pytest

from gpuplan.validate import fits_registry as fr


def test_every_fitted_value_is_listed_and_every_listed_value_exists():
    assert fr.check() == {"unlisted": [], "gone": [], "unknown_files": []}


def test_docs_fits_md_is_the_table_written_from_the_registry():
    assert (fr.ROOT / fr.DOC).read_text() == fr.render()


def test_every_listed_value_names_a_mechanism_and_its_records():
    for g in fr.load_registry()["groups"]:
        assert g["records"] and g["fitted_by"] and g["loo"], g["file"]
        for key, entry in g["keys"].items():
            assert entry["mechanism"].strip(), f"{g['file']}: {key}"


@pytest.fixture
def copy_of_the_package(tmp_path):
    """The registry and the data files it walks, copied under ``tmp_path``."""
    registry = fr.load_registry()
    for rel in [str(fr.REGISTRY), *fr.data_files(fr.ROOT)]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(fr.ROOT / rel, tmp_path / rel)
    return tmp_path, registry


def _edit(path, change):
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def test_a_planted_unlisted_fitted_value_is_found(copy_of_the_package):
    root, registry = copy_of_the_package
    registry["groups"] = [g for g in registry["groups"] if not g["file"].endswith(".py")]
    fit = root / "gpuplan/sim/runtime/serving/data/stack_fit.json"
    _edit(fit, lambda d: d["stacks"]["eager-2023"].update(large_allreduce_factor=5.0))
    _edit(root / "gpuplan/hwmodels/data/calibration_h200.json",
          lambda d: d.update(new_term=1.0))
    found = fr.check(root, registry)
    assert found["unlisted"] == [
        "gpuplan/hwmodels/data/calibration_h200.json: new_term",
        "gpuplan/sim/runtime/serving/data/stack_fit.json: stacks.eager-2023.large_allreduce_factor",
    ]


def test_a_listed_value_that_is_gone_is_found(copy_of_the_package):
    root, registry = copy_of_the_package
    registry["groups"] = [g for g in registry["groups"] if not g["file"].endswith(".py")]
    fit = root / "gpuplan/sim/runtime/serving/data/stack_fit.json"
    _edit(fit, lambda d: d["stacks"]["trt-llm"].pop("call_factor"))
    assert fr.check(root, registry)["gone"] == [
        "gpuplan/sim/runtime/serving/data/stack_fit.json: stacks.trt-llm.call_factor"]


def test_a_new_data_file_must_be_registered_or_declared_not_fitted(copy_of_the_package):
    root, registry = copy_of_the_package
    registry["groups"] = [g for g in registry["groups"] if not g["file"].endswith(".py")]
    (root / "gpuplan/hwmodels/data/calibration_b200.json").write_text("{}")
    assert fr.check(root, registry)["unknown_files"] == [
        "gpuplan/hwmodels/data/calibration_b200.json"]


def test_a_new_key_of_a_fitted_python_dict_is_found(monkeypatch):
    from gpuplan.hwmodels import efficiency

    monkeypatch.setitem(efficiency.MEASURED_FRACTION, "planted", 0.5)
    assert "gpuplan/hwmodels/efficiency.py: MEASURED_FRACTION.planted" in fr.check()["unlisted"]
