"""After a plain ``pip install .`` the package holds no measurements: the commands that need them
read the checkout the user runs from, or say in one line how to get them."""

from __future__ import annotations

import pytest

import gpuplan
from gpuplan.errors import GpuplanError
from gpuplan.validate import runs


def test_an_installed_package_reads_the_checkout_it_runs_from(tmp_path, monkeypatch):
    site = tmp_path / "site" / "gpuplan"
    site.mkdir(parents=True)
    monkeypatch.setattr(gpuplan, "__file__", str(site / "__init__.py"))  # not a checkout
    checkout = tmp_path / "repo"
    (checkout / "data").mkdir(parents=True)
    (checkout / "pyproject.toml").write_text('[project]\nname = "gpuplan"\n')
    (checkout / "data" / "runs.json").write_text('{"runs": []}')
    monkeypatch.chdir(checkout / "data")  # anywhere inside it
    assert runs.checkout_data_dir() == checkout.resolve() / "data"
    monkeypatch.chdir(tmp_path)
    assert runs.checkout_data_dir() is None
    with pytest.raises(GpuplanError, match="run from the checkout, or give --data DIR"):
        runs.resolve_data_dir(None)


def test_another_project_is_not_a_checkout(tmp_path, monkeypatch):
    monkeypatch.setattr(gpuplan, "__file__", str(tmp_path / "x" / "gpuplan" / "__init__.py"))
    (tmp_path / "data").mkdir()
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "other"\n')
    (tmp_path / "data" / "runs.json").write_text('{"runs": []}')
    monkeypatch.chdir(tmp_path)
    assert runs.checkout_data_dir() is None
