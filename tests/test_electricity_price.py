"""--electricity-price on every command that prices energy: train (its --tokens run) and cluster
(each run's energy), as report already took it."""

from __future__ import annotations

import json

import pytest
from tiny_cluster import TINY_SCENARIO

from gpuplan.cli import main


def _doc(capsys, *argv) -> dict:
    capsys.readouterr()
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_train_prices_its_runs_energy(capsys):
    doc = _doc(capsys, "train", "--model", "llama3-8b", "--gpus", "8", "--zero", "3", "--tokens",
               "1e10", "--electricity-price", "0.2")  # fmt: skip
    b = doc["budget"]
    assert b["electricity_usd"] == pytest.approx(0.2 * b["energy_kwh"])
    assert "electricity_usd" not in _doc(capsys, "train", "--model", "llama3-8b", "--gpus", "8",
                                         "--zero", "3", "--tokens", "1e10")["budget"]  # fmt: skip


def test_cluster_prices_each_runs_energy(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny.yaml").write_text(TINY_SCENARIO)
    doc = _doc(capsys, "cluster", "tiny.yaml", "--no-progress", "--electricity-price", "0.1")
    for run in doc["runs"]:
        s = run["summary"]
        assert s["electricity_usd"] == pytest.approx(0.1 * s["energy_kwh"])


def test_a_negative_price_is_one_line(capsys):
    assert main(["train", "--model", "llama3-8b", "--electricity-price", "-1"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
