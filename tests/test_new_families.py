"""The campaign's ``families`` part (decoder families no fit has read) and their scoring
(``benchmarks/new_families.py``): configs that keep each layer pattern whole, records that carry
the config they were built from, and a score per device, family and kind."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from gpuplan.errors import GpuplanError
from gpuplan.validate.record_prediction import record_model
from gpuplan.validate.records import parse_record
from gpuplan.validate.stack_campaign.families import reduced_config, tiny_config, tiny_layers
from gpuplan.validate.stack_campaign.family_configs import FAMILIES

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import new_families  # noqa: E402


def _pattern_ok(cfg: dict, layers: int) -> bool:
    kind = cfg["model_type"]
    if kind == "gemma2" or kind == "gpt_oss":
        return layers % 2 == 0
    if kind == "gemma3_text":
        return layers % cfg.get("sliding_window_pattern", 6) == 0
    if kind == "qwen3_next":
        return layers % cfg["full_attention_interval"] == 0
    if kind == "glm4_moe":
        return layers > cfg["first_k_dense_replace"]  # the dense block and at least one MoE
    return True


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_each_family_keeps_its_layer_pattern_whole(name):
    entry = FAMILIES[name]
    full = entry["hf_config"]
    for phase, layers in entry["layers"].items():
        assert 0 < layers <= full["num_hidden_layers"], (name, phase)
        assert _pattern_ok(full, layers), (name, phase, layers)
        cfg = reduced_config(name, layers)
        assert cfg["num_hidden_layers"] == layers
        if "layer_types" in full:
            assert cfg["layer_types"] == full["layer_types"][:layers]
        same = {k: v for k, v in cfg.items() if k not in ("num_hidden_layers", "layer_types")}
        assert same == {k: v for k, v in full.items() if k in same} and set(same) | {
            "num_hidden_layers", *(["layer_types"] if "layer_types" in full else [])} == set(full)
    assert full is not reduced_config(name, 2)  # the published config is never changed
    tiny = tiny_config(name)
    assert tiny["model_type"] == full["model_type"] and tiny["vocab_size"] == 256
    assert _pattern_ok(tiny, tiny_layers(name))
    assert "typed" in entry["source"] or "config.json" in entry["source"]


def _record(name: str, kind: str = "prefill_step", device: str = "h200", **extra) -> dict:
    layers = FAMILIES[name]["layers"]["infer"]
    params = {"model": name, "layers": layers, "batch": 1, "seq": 512, "dtype": "bf16",
              "stack": "hf-transformers", "timing": "isolated",
              "hf_config": reduced_config(name, layers)} | extra
    if kind == "model_decode_step":
        params = {k: v for k, v in params.items() if k != "seq"} | {"context": 1024,
                                                                     "kv_cache": "static"}
    return {"kind": kind, "device": device, "params": params,
            "measured": {"time_s": 0.05, "peak_bytes": 10**10}, "source": "test"}


def test_a_record_keeps_the_config_it_was_built_from_and_the_pricing_reads_it():
    rec = parse_record(_record("gemma2-9b"))
    assert rec.params["hf_config"]["num_hidden_layers"] == 42
    assert record_model("gemma2-9b", rec.params["hf_config"]).n_layers == 42
    small = reduced_config("gemma2-9b", 6)
    assert record_model("gemma2-9b", small).n_layers == 6
    bad = _record("gemma2-9b") | {}
    bad["params"] = bad["params"] | {"hf_config": [1, 2]}
    with pytest.raises(GpuplanError, match=r"params.hf_config is an array: it must be a JSON"):
        parse_record(bad)
    fallback = _record("qwen3-next-80b-a3b", impl="torch-fallback")
    assert parse_record(fallback).params["impl"] == "torch-fallback"
    with pytest.raises(GpuplanError, match="params.impl='fast' is invalid"):
        parse_record(_record("qwen3-next-80b-a3b", impl="fast"))


def test_the_score_is_per_device_family_and_kind_with_unread_and_fallback(tmp_path):
    lines = [_record("gemma2-9b"), _record("gemma2-9b", "model_decode_step"),
             _record("gemma2-9b", device="h100-sxm"),
             _record("qwen3-next-80b-a3b", impl="torch-fallback"),
             _record("gemma3-12b-text") | {"params": {"model": "gemma3-12b-text"}}]  # bad line
    unread = _record("olmo2-7b")
    unread["params"]["hf_config"] = dict(unread["params"]["hf_config"], model_type="olmo9")
    del unread["params"]["hf_config"]["hidden_size"]  # an unknown type reads only whole (a note)
    lines.append(unread)
    (tmp_path / "families.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    out = tmp_path / "s.json"
    assert new_families.main([str(tmp_path), "--json", str(out)]) == 0
    got = json.loads(out.read_text())
    assert set(got) == {"h200", "h100-sxm"}
    cell = got["h200"]["gemma2"]["prefill"]
    assert cell["status"] == "scored" and cell["n"] == 1 and cell["median_pct"] >= 0
    assert set(cell) == {"n", "median_pct", "p90_pct", "signed_median_pct", "status",
                         "not_priced"}
    assert got["h200"]["gemma2"]["decode-static"]["status"] == "scored"
    assert got["h100-sxm"]["gemma2"]["prefill"]["status"] == "scored"
    assert got["h200"]["qwen3_next"]["prefill"]["status"] == "fallback"
    olmo = got["h200"]["olmo9"]["prefill"]
    assert olmo["status"].startswith("unread") and "hidden_size" in olmo["status"]
    assert olmo["median_pct"] is None
    pooled = got["h200"]["all"]  # the scored records alone
    assert pooled["prefill"]["n"] == 1 and set(pooled) == {"prefill", "decode-static"}


def test_a_missing_folder_is_one_line_and_exit_2(tmp_path, capsys):
    assert new_families.main([str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no record folder" in err[0]


@pytest.mark.skipif(importlib.util.find_spec("torch") is None
                    or importlib.util.find_spec("transformers") is None,
                    reason="torch and transformers are not installed here")
def test_the_families_part_builds_and_measures_tiny_models_on_the_cpu(tmp_path):
    import torch

    from gpuplan.validate.records import read_records
    from gpuplan.validate.stack_campaign import families
    from gpuplan.validate.stack_campaign.common import TimeBox

    names = ("qwen3-8b", "mamba-codestral-7b")
    got = families.run(torch, "cpu", "cpu", tmp_path, TimeBox(120), True, models=names)
    assert got["failed"] == {}
    records, errors = read_records(tmp_path / "families.jsonl")
    assert errors == [] and {r.params["model"] for r in records} == set(names)
    for r in records:
        assert r.params["hf_config"]["num_hidden_layers"] == r.params["layers"]
        fallback = r.params["model"] == "mamba-codestral-7b"
        assert (r.params.get("impl") in ("torch-fallback", "kernels")) == fallback
    kinds = {(r.params["model"], r.kind) for r in records}
    assert ("qwen3-8b", "model_train_step") in kinds
    assert kinds - {("qwen3-8b", k) for k in ("prefill_step", "model_decode_step",
                                            "model_train_step")} == {
        ("mamba-codestral-7b", "prefill_step")}  # a hybrid: no training, here no decode
