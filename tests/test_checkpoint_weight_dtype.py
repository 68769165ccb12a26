"""A checkpoint's own weight format: read from quantization_config, served by default (CLI and
API alike), named in the defaults line, and the nearest fix when 16-bit weights do not fit."""

from __future__ import annotations

import json

import pytest

from gpuplan.cli import main
from gpuplan.errors import GpuplanError
from gpuplan.sim.runtime.serving.deployment import deployment
from gpuplan.sim.runtime.serving.on_stack import stack_deployment
from gpuplan.workloads.hf_config import from_hf_config
from gpuplan.workloads.model import ModelConfig
from gpuplan.workloads.presets import get_model

LLAMA = {"model_type": "llama", "hidden_size": 512, "intermediate_size": 1024,
         "num_attention_heads": 8, "num_key_value_heads": 8, "num_hidden_layers": 2,
         "vocab_size": 1000, "max_position_embeddings": 2048}  # fmt: skip
SERVE = ["serve", "--model", "deepseek-v3", "--gpu", "h200", "--tp", "8", "--stack", "sglang",
         "--rate", "2", "--prompt-tokens", "512", "--output-tokens", "32", "--requests", "20",
         "--no-timing"]  # fmt: skip


@pytest.mark.parametrize(("quant", "dtype"), [
    ({"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}, "fp8"),
    ({"quant_method": "awq", "bits": 4, "group_size": 128}, "int4"),
    ({"quant_method": "gptq", "bits": 8}, "int8"),
    ({"quant_method": "bitsandbytes"}, ""),
    (None, ""),
])  # fmt: skip
def test_the_reader_takes_the_checkpoint_format_from_quantization_config(quant, dtype):
    raw = LLAMA | ({"quantization_config": quant} if quant else {})
    assert from_hf_config(raw, "m").checkpoint_weight_dtype == dtype


def test_a_wrapped_config_keeps_its_top_level_quantization_config():
    raw = {"model_type": "some_vlm", "text_config": LLAMA,
           "quantization_config": {"quant_method": "fp8"}}  # fmt: skip
    assert from_hf_config(raw, "m").checkpoint_weight_dtype == "fp8"


def test_an_unknown_checkpoint_format_is_one_line_naming_the_choices():
    with pytest.raises(GpuplanError, match=r"checkpoint_weight_dtype.*'fp4'.*fp8"):
        ModelConfig(name="m", n_layers=2, d_model=512, n_heads=8, n_kv_heads=8, d_ff=1024,
                    vocab_size=1000, checkpoint_weight_dtype="fp4")  # fmt: skip


def test_the_api_serves_deepseek_v3_in_its_fp8_unless_told_otherwise():
    assert get_model("deepseek-v3").checkpoint_weight_dtype == "fp8"
    assert deployment("deepseek-v3", "h200", tp=8).weight_dtype == "fp8"
    assert stack_deployment("deepseek-v3", "h200", "sglang", tp=8).weight_dtype == "fp8"
    assert deployment("deepseek-v3", "h200", tp=8, weight_dtype="bf16").weight_dtype == "bf16"
    assert deployment("llama3-8b", "h200").weight_dtype == "bf16"


def test_the_cli_serves_the_checkpoint_format_and_says_it_is_a_default(capsys):
    assert main(SERVE + ["--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["config"]["weight_dtype"] == "fp8"
    assert "--weight-dtype fp8 (the checkpoint's own format)" in doc["config"]["defaults"]
    api = deployment("deepseek-v3", "h200", tp=8)  # one cost path: the same replica's weights
    from gpuplan.sim.runtime.serving.kv_cache import weights_bytes_per_gpu

    assert doc["kv_cache"]["weights_bytes_per_gpu"] == pytest.approx(
        weights_bytes_per_gpu(api.model, tp=8, weight_dtype=api.weight_dtype), rel=0.02)


def test_16_bit_weights_that_do_not_fit_point_at_the_checkpoint_format(capsys):
    assert main(SERVE + ["--weight-dtype", "bf16", "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["feasible"] is False and doc["nearest_fix"] == {"--weight-dtype": "fp8"}


def test_a_cache_paged_per_layer_says_its_blocks_are_one_layers(capsys):
    """gpt-oss's sliding-window layers page the cache per layer (blocks.py): the count is of
    one-layer blocks, and 36 of them (its layers) hold one block of tokens everywhere."""
    args = ["serve", "--model", "tests/data/hf_configs/gpt-oss-120b.json", "--gpu", "h200",
            "--tp", "2", "--rate", "1", "--prompt-tokens", "256", "--output-tokens", "16",
            "--requests", "5", "--no-timing"]  # fmt: skip
    assert main(args + ["--json"]) == 0
    kv = json.loads(capsys.readouterr().out)["kv_cache"]
    assert kv["layer_blocks_per_block"] == 36
    assert kv["blocks"] == pytest.approx(kv["tokens"] * 36 / kv["block_tokens"], rel=1e-3)
    assert main(args) == 0
    assert f"{kv['blocks']:,} one-layer blocks of {kv['block_tokens']} tokens, 36 to a" in capsys.readouterr().out


def test_a_model_with_its_own_expert_format_names_it_beside_the_weights(capsys):
    args = ["serve", "--model", "tests/data/hf_configs/gpt-oss-120b.json", "--gpu", "h200",
            "--tp", "2", "--rate", "1", "--prompt-tokens", "64", "--output-tokens", "4",
            "--requests", "2", "--no-timing"]  # fmt: skip
    assert main(args) == 0
    assert "bf16 weights (routed experts mxfp4), bf16 KV cache" in capsys.readouterr().out


def test_a_plan_searches_weight_formats_so_names_no_default_for_them(capsys):
    args = ["serve", "plan", "--model", "deepseek-v3", "--gpu", "h200", "--rate", "2",
            "--prompt-tokens", "512", "--output-tokens", "32", "--slo-ttft-s", "5",
            "--max-gpus", "8", "--stack", "sglang", "--requests", "30"]  # fmt: skip
    assert main(args) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("defaults")]
    assert len(lines) == 1 and "--weight-dtype" not in lines[0]
