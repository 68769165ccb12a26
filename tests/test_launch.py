"""Launch commands (sim.runtime.serving.launch, cli.serve_emit): each engine's flags for a plan
row, expert parallelism, one command per disaggregated pool, and every printed flag in the
committed list copied from the engine's sources (data/engine_flags.json)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gpuplan.cli.serve_emit import EMIT_ENGINES
from gpuplan.errors import GpuplanError
from gpuplan.sim.runtime.serving.launch import (
    ENGINES,
    engine_flags,
    launch_commands,
    model_id,
    pools_from_row,
)
from gpuplan.sim.runtime.serving.launch_engines import render_yaml
from gpuplan.sim.runtime.serving.plan_space import SearchSpace
from gpuplan.sim.runtime.serving.speculative import Speculation
from gpuplan.sim.stacks import get_stack
from gpuplan.validate.published.serving import row_model
from gpuplan.workloads.presets import get_model

LLAMA = row_model("llama3.1-70b")  # hf.co/meta-llama/Llama-3.1-70B (the published rows' model)
SPACE = SearchSpace(stack=get_stack("vllm"))


def _row(**kw) -> dict:
    """A plan row as plan_search._row writes it."""
    row = {"layout": "colocated", "tp": 8, "pp": 1, "weight_dtype": "fp8", "kv_dtype": "fp8",
           "max_seqs": 256, "units": 2, "replicas": 2, "gpus": 16, "speculative": False}  # fmt: skip
    return row | kw


def _commands(engine, row=None, cfg=LLAMA, gpu="h100-sxm", space=SPACE):
    pools = pools_from_row(row or _row(), cfg=cfg, gpu=gpu, space=space)
    return launch_commands(engine, cfg, pools, stack=space.stack.name)


def _flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def _check_listed(cmd) -> None:
    """Every flag of ``cmd`` is one the engine's sources define (engine_flags.json), and every
    TensorRT-LLM YAML key one of its checked keys."""
    known = engine_flags()[cmd.engine]
    flags = set(known["flags"]) | set(known.get("disaggregated_flags", []))
    assert cmd.argv[: len(known["command"])] == known["command"]
    for token in cmd.argv[len(known["command"]):]:
        if token.startswith("-") and not token.lstrip("-").isdigit():
            assert token in flags, f"{cmd.engine}: {token} is not a flag of {known['version']}"
    if cmd.yaml:
        for line in cmd.yaml.splitlines():
            key = line.strip().split(":")[0]
            if not line.strip().startswith("- "):
                assert key in known["yaml_keys"], f"{cmd.engine}: YAML key {key} unchecked"
    for flag, keys in known.get("json_keys", {}).items():
        if flag in cmd.argv:
            assert set(json.loads(_flag(cmd.argv, flag))) <= set(keys)


def test_engine_lists_agree():
    assert EMIT_ENGINES == ENGINES
    assert set(ENGINES) <= set(engine_flags())


def test_hf_repo_from_the_source():
    assert model_id(LLAMA)[0] == "meta-llama/Llama-3.1-70B"
    assert model_id(get_model("deepseek-v3"))[0] == "deepseek-ai/DeepSeek-V3"
    repo, notes = model_id(get_model("gpt3-175b"))  # a paper's table: no checkpoint
    assert repo.startswith("<") and "no Hugging Face checkpoint" in notes[0]


def test_vllm_tp8_fp8_llama():
    (cmd,) = _commands("vllm")
    argv = cmd.argv
    assert argv[:3] == ["vllm", "serve", "meta-llama/Llama-3.1-70B"]
    assert _flag(argv, "--tensor-parallel-size") == "8"
    assert _flag(argv, "--quantization") == "fp8" and _flag(argv, "--kv-cache-dtype") == "fp8"
    assert _flag(argv, "--max-num-seqs") == "256"
    assert _flag(argv, "--max-num-batched-tokens") == "2048"  # the plan's chunked budget
    assert _flag(argv, "--max-model-len") == "131072"
    assert _flag(argv, "--gpu-memory-utilization") == "0.9"
    assert "--enable-chunked-prefill" in argv and "--pipeline-parallel-size" not in argv
    assert any("2 instance(s)" in c for c in cmd.comments)  # two replicas: said, not dropped
    assert "vLLM 0.11" in cmd.version
    _check_listed(cmd)


def test_sglang_tp8_fp8_llama():
    (cmd,) = _commands("sglang")
    argv = cmd.argv
    assert argv[:5] == ["python3", "-m", "sglang.launch_server", "--model-path", "meta-llama/Llama-3.1-70B"]
    assert _flag(argv, "--tp-size") == "8" and _flag(argv, "--kv-cache-dtype") == "fp8_e4m3"
    assert _flag(argv, "--max-running-requests") == "256"
    assert _flag(argv, "--chunked-prefill-size") == "2048"
    assert _flag(argv, "--mem-fraction-static") == "0.9"
    _check_listed(cmd)


def test_trtllm_tp8_fp8_llama():
    (cmd,) = _commands("trt-llm")
    argv = cmd.argv
    assert argv[:4] == ["trtllm-serve", "meta-llama/Llama-3.1-70B", "--backend", "pytorch"]
    assert _flag(argv, "--tp_size") == "8" and _flag(argv, "--max_batch_size") == "256"
    assert _flag(argv, "--max_num_tokens") == "2048"
    assert "dtype: fp8" in cmd.yaml and "--extra_llm_api_options" in argv
    # fp8 weights: no trtllm-serve flag quantizes on load, so a comment says so
    assert any("weight_dtype=fp8" in c for c in cmd.comments)
    # the KV share of the memory left after the weights is below the device share 0.9
    share = float(_flag(argv, "--kv_cache_free_gpu_memory_fraction"))
    assert 0 < share < 0.9
    _check_listed(cmd)


@pytest.mark.parametrize("engine", ENGINES)
def test_moe_expert_parallel_row(engine):
    cfg = get_model("mixtral-8x7b")
    (cmd,) = _commands(engine, _row(tp=4, ep=4, weight_dtype="bf16", kv_dtype="bf16"), cfg=cfg)
    argv = cmd.argv
    expected = {"vllm": "--enable-expert-parallel", "sglang": "--ep-size", "trt-llm": "--ep_size"}
    assert expected[engine] in argv
    if engine != "vllm":
        assert _flag(argv, expected[engine]) == "4"
    assert "--quantization" not in argv
    _check_listed(cmd)


@pytest.mark.parametrize("engine", ENGINES)
def test_attention_dp_wide_ep_row(engine):
    """A row with the wide-EP fields (attention DP over 16 GPUs, EP16, redundant experts)."""
    cfg = get_model("deepseek-v3")
    row = _row(tp=1, ep=16, dp_attention=True, redundant_experts=32, max_seqs=64, replicas=1)
    (cmd,) = _commands(engine, row, cfg=cfg, gpu="h200")
    argv = cmd.argv
    if engine == "vllm":
        assert _flag(argv, "--data-parallel-size") == "16" and "--enable-expert-parallel" in argv
        assert json.loads(_flag(argv, "--eplb-config")) == {"num_redundant_experts": 32}
    elif engine == "sglang":
        assert _flag(argv, "--dp-size") == "16" and "--enable-dp-attention" in argv
        assert _flag(argv, "--ep-num-redundant-experts") == "32"
    else:
        assert _flag(argv, "--tp_size") == "16" and _flag(argv, "--ep_size") == "16"
        assert "enable_attention_dp: true" in cmd.yaml
        assert any("redundant_experts=32" in c for c in cmd.comments)
    assert any("spans 2 nodes" in c for c in cmd.comments)
    _check_listed(cmd)


@pytest.mark.parametrize("engine", ENGINES)
def test_disaggregated_row_one_command_per_pool(engine):
    row = _row(layout="disaggregated 1P:2D", units=2, replicas=6, gpus=48)
    cmds = _commands(engine, row)
    pools = [c.pool for c in cmds]
    assert pools[:2] == ["prefill", "decode"]
    assert pools[2:] == (["frontend"] if engine == "trt-llm" else [])
    assert any("2 instance(s)" in c for c in cmds[0].comments)  # 1P x 2 units
    assert any("4 instance(s)" in c for c in cmds[1].comments)  # 2D x 2 units
    if engine == "vllm":
        assert all("NixlConnector" in _flag(c.argv, "--kv-transfer-config") for c in cmds)
    if engine == "sglang":
        assert [_flag(c.argv, "--disaggregation-mode") for c in cmds] == ["prefill", "decode"]
    if engine == "trt-llm":
        assert cmds[2].argv == ["trtllm-serve", "disaggregated", "-c", "disagg.yaml"]
        assert "num_instances: 4" in cmds[2].yaml and "localhost:8203" in cmds[2].yaml
    for cmd in cmds:
        _check_listed(cmd)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("method", ["ngram", "eagle", "draft"])
def test_speculative_row(engine, method):
    spec = (Speculation(method=method, k=3, acceptance=0.7), "llama3-8b" if method == "draft" else None)
    space = SearchSpace(stack=get_stack("vllm"), speculation=spec)
    (cmd,) = _commands(engine, _row(speculative=True), space=space)
    text = " ".join(cmd.argv) + (cmd.yaml or "")
    assert "3" in text and ("speculative" in text.lower())
    if method == "draft" and engine != "trt-llm":
        assert "meta-llama/Meta-Llama-3-8B" in text  # the draft's own repository
    _check_listed(cmd)


def test_unknown_engine_is_one_line():
    with pytest.raises(GpuplanError, match="--emit 'tgi' is invalid: give one of vllm, sglang, trt-llm"):
        launch_commands("tgi", LLAMA, [])
    done = subprocess.run([sys.executable, "-m", "gpuplan.cli", "serve", "plan", "--model", "llama3-8b",
                           "--gpu", "h100-sxm", "--rate", "1", "--slo-ttft-s", "1",
                           "--slo-tpot-s", "0.1", "--emit", "tgi"],
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and "--emit" in done.stderr


def test_a_misspelt_flag_fails_the_check():
    """The check can fail: a flag one letter off is not in the engine's list."""
    (cmd,) = _commands("vllm")
    bad = type(cmd)(engine="vllm", version=cmd.version, pool="colocated",
                    argv=[*cmd.argv, "--max-num-seq", "8"])  # fmt: skip
    with pytest.raises(AssertionError, match="--max-num-seq is not a flag"):
        _check_listed(bad)


def test_plan_json_has_launch_key():
    done = subprocess.run([sys.executable, "-m", "gpuplan.cli", "serve", "plan", "--model", "llama3-8b",
                           "--gpu", "h100-sxm", "--rate", "1", "--slo-ttft-s", "2",
                           "--slo-tpot-s", "0.1", "--tp", "1", "--requests", "100",
                           "--no-disaggregation", "--top", "1", "--emit", "vllm", "--json"],
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    (launch,) = doc["launch"]
    assert set(launch) >= {"engine", "version", "pool", "argv"}
    first = doc["configs"][0]
    assert _flag(launch["argv"], "--tensor-parallel-size") == str(first["tp"])
    assert _flag(launch["argv"], "--max-num-seqs") == str(first["max_seqs"])


def test_render_yaml_nested():
    text = render_yaml({"a": {"b": True, "c": None}, "d": [1, 2]})
    assert text == "a:\n  b: true\n  c: null\nd:\n  - 1\n  - 2"


@pytest.mark.parametrize("engine", ENGINES)
def test_mtp_row(engine):
    """MTP (``--speculative mtp``, another part's method): read by name, K tokens a step."""
    from types import SimpleNamespace

    space = SearchSpace(stack=get_stack("vllm"), speculation=(SimpleNamespace(method="mtp", k=2), None))
    (cmd,) = _commands(engine, _row(speculative=True), cfg=get_model("deepseek-v3"), gpu="h200",
                       space=space)  # fmt: skip
    if engine == "vllm":
        assert json.loads(_flag(cmd.argv, "--speculative-config")) == {
            "method": "mtp", "num_speculative_tokens": 2}
    elif engine == "sglang":
        assert _flag(cmd.argv, "--speculative-algorithm") == "EAGLE"
        assert _flag(cmd.argv, "--speculative-num-steps") == "2"
        assert _flag(cmd.argv, "--speculative-num-draft-tokens") == "3"
        assert "--speculative-draft-model-path" not in cmd.argv  # the model's own MTP layers
    else:
        assert "decoding_type: MTP" in cmd.yaml and "max_draft_len: 2" in cmd.yaml
    _check_listed(cmd)


def test_a_policy_the_engine_lacks_is_a_comment():
    import dataclasses

    (pool,) = pools_from_row(_row(), cfg=LLAMA, gpu="h100-sxm", space=SPACE)
    static = dataclasses.replace(pool, sched=dataclasses.replace(pool.sched, policy="static"))
    (cmd,) = launch_commands("vllm", LLAMA, [static])
    assert any("policy=static" in c for c in cmd.comments)
    assert "--enable-chunked-prefill" not in cmd.argv


def test_another_stack_is_said():
    (cmd,) = _commands("sglang")  # SPACE prices the vllm stack
    assert any("priced as the vllm stack, not sglang's own" in c for c in cmd.comments)
    (same,) = _commands("vllm")
    assert not any("priced as" in c for c in same.comments)


def test_serve_emit_json_and_text():
    base = [sys.executable, "-m", "gpuplan.cli", "serve", "--model", "llama3-8b", "--gpu", "h100-sxm",
            "--rate", "1", "--prompt-tokens", "128", "--output-tokens", "16", "--requests", "20",
            "--tp", "2", "--kv-dtype", "fp8", "--emit", "sglang"]  # fmt: skip
    done = subprocess.run([*base, "--json"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    (launch,) = json.loads(done.stdout)["launch"]
    assert _flag(launch["argv"], "--tp-size") == "2"
    assert _flag(launch["argv"], "--kv-cache-dtype") == "fp8_e4m3"
    text = subprocess.run(base, capture_output=True, text=True).stdout
    assert "launch on sglang" in text and "--model-path meta-llama/Meta-Llama-3-8B" in text


def test_pools_of_their_own():
    """A row with its own pools (prefill on one GPU type, decode on another): one command each,
    with that pool's GPU, TP and replicas."""
    row = _row(layout="disaggregated", pools=[
        {"role": "prefill", "gpu": "h200", "tp": 4, "replicas": 2},
        {"role": "decode", "gpu": "h100-sxm", "tp": 8, "replicas": 3}])  # fmt: skip
    cmds = _commands("vllm", row)
    assert [c.pool for c in cmds] == ["prefill", "decode"]
    assert [_flag(c.argv, "--tensor-parallel-size") for c in cmds] == ["4", "8"]
    assert "2 instance(s) of this command, 4 h200" in cmds[0].comments[0]
    assert "3 instance(s) of this command, 8 h100-sxm" in cmds[1].comments[0]


@pytest.mark.parametrize("engine", ENGINES)
def test_pipeline_row_with_an_uneven_split(engine):
    """DeepSeek-V3's 61 blocks on 2 stages (the plan's pipeline candidate): the PP flag, and the
    uneven split the plan priced said in a comment."""
    (cmd,) = _commands(engine, _row(tp=8, pp=2, replicas=1), cfg=get_model("deepseek-v3"))
    flag = {"vllm": "--pipeline-parallel-size", "sglang": "--pp-size", "trt-llm": "--pp_size"}[engine]
    assert _flag(cmd.argv, flag) == "2"
    assert any(c.startswith("pp_layers=") for c in cmd.comments)
    assert any("spans 2 nodes" in c for c in cmd.comments)
    _check_listed(cmd)
