"""Defaults that change the answer are printed in every table's header lines, and only the
ones the command line left unset."""

import pytest

from gpuplan.cli import main


def header(capsys, *argv) -> str:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 0, err
    return next(line for line in out.splitlines() if line.startswith("defaults in force"))


def test_the_default_scenario_names_its_gpu_model_sequence_batch_context_and_cuda_graphs(capsys):
    code = main(["estimate"])
    out = capsys.readouterr().out
    assert code == 0
    train, decode = [line for line in out.splitlines() if line.startswith("defaults in force")]
    for flag in ("--gpu h200", "--model llama3.2-3b", "--seq 4096", "--micro-batch 1",
                 "--recompute full"):  # fmt: skip
        assert flag in train
    for flag in ("--gpu h200", "--batch 32", "--context 4096", "--cuda-graph"):
        assert flag in decode


def test_a_flag_given_is_not_listed_as_a_default(capsys):
    line = header(capsys, "estimate", "decode-step", "--model", "llama3-8b", "--gpu", "h100-sxm",
                  "--batch", "8")  # fmt: skip
    assert "--gpu" not in line and "--batch" not in line
    assert "--context 2048" in line and "CUDA graphs" in line  # the stack's choice, said so


def test_train_names_the_gpu_sequence_and_global_batch_it_chose(capsys):
    line = header(capsys, "train", "--model", "llama3-8b", "--gpus", "8")
    assert "--gpu h200" in line and "--seq 8192" in line and "--global-batch 32" in line
    line = header(capsys, "train", "--model", "llama3-8b", "--gpus", "8", "--gpu", "h100-sxm",
                  "--seq", "2048", "--global-batch", "16")  # fmt: skip
    assert "--gpu" not in line and "--seq" not in line and "--global-batch" not in line


@pytest.mark.parametrize("eager", [False, True])
def test_serve_says_whether_decode_replays_cuda_graphs(capsys, eager):
    argv = ["serve", "--model", "llama3-8b", "--gpu", "h200", "--rate", "5", "--prompt-tokens",
            "256", "--output-tokens", "16"] + ["--no-cuda-graph"] * eager  # fmt: skip
    line = header(capsys, *argv)
    assert ("CUDA graphs on" in line) is not eager and "--requests 1000" in line


@pytest.mark.parametrize(("stack", "graphs"), [("vllm", True), ("trt-llm", True), ("eager-2023", False)])
def test_serve_names_cuda_graphs_only_for_a_stack_that_replays_them(capsys, stack, graphs):
    line = header(capsys, "serve", "--model", "llama3-8b", "--gpu", "h200", "--rate", "5",
                  "--prompt-tokens", "256", "--output-tokens", "16", "--requests", "20",
                  "--stack", stack)  # fmt: skip
    assert ("CUDA graphs on" in line) is graphs
