"""--precision is one vocabulary: the GEMMs' precision under mixed-precision training, in
``estimate train-step``, ``train`` and ``search train`` alike (``-mixed`` words the same)."""

import json

import pytest

from gpuplan.cli import main


def doc(capsys, *argv) -> dict:
    code = main([*argv, "--json", "--no-timing"] if argv[0] == "search" else [*argv, "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def test_estimate_takes_bf16_as_the_contracts_bf16_mixed(capsys):
    base = ["estimate", "train-step", "--model", "llama3.2-3b", "--seq", "1024"]
    assert doc(capsys, *base, "--precision", "bf16") == doc(capsys, *base, "--precision", "bf16-mixed")


@pytest.mark.parametrize("word,same", [("bf16-mixed", "bf16"), ("fp8-mixed", "fp8")])
def test_train_takes_the_mixed_words_as_their_gemm_precision(capsys, word, same):
    base = ["train", "--model", "llama3-8b", "--gpus", "8", "--gpu", "h100-sxm", "--zero", "3"]
    assert doc(capsys, *base, "--precision", word) == doc(capsys, *base, "--precision", same)


def test_an_unknown_precision_is_one_line_naming_the_words(capsys):
    assert main(["train", "--model", "llama3-8b", "--precision", "int4"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "bf16, fp8, mxfp8 or nvfp4" in err and "bf16-mixed" in err


@pytest.mark.parametrize("command", [["estimate"], ["train"], ["search", "train"]])
def test_every_help_says_what_precision_means(capsys, command):
    assert main([*command, "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "--precision" in text and "mixed precision" in text.replace("mixed-precision", "mixed precision")
