"""Command-line number types: the message names the value and what would be valid."""

import argparse
import re

import pytest

from gpuplan.cli.argtypes import (
    at_least_one,
    byte_count,
    fraction,
    gpu_count,
    int_list,
    non_negative,
    open_fraction,
    percentile,
    positive,
    positive_int,
    random_seed,
    word,
)


@pytest.mark.parametrize(
    ("parse", "text", "message"),
    [
        (positive_int, "x", "'x' is not a whole number"),
        (positive_int, "0", "must be greater than zero"),
        (positive(float), "-1.5", "must be greater than zero"),
        (positive(float), "ten", "'ten' is not a number"),
        (non_negative(int), "-1", "must be zero or more"),
        (open_fraction, "1", "must lie between 0 and 1"),
    ],
)
def test_a_bad_number_is_refused_with_a_message_naming_it(parse, text, message):
    with pytest.raises(argparse.ArgumentTypeError, match=message):
        parse(text)


def test_good_numbers_come_back_in_their_type():
    assert positive_int("8") == 8 and positive(float)("0.5") == 0.5
    assert non_negative(int)("0") == 0 and open_fraction("0.7") == 0.7


@pytest.mark.parametrize(
    ("parse", "text", "message"),
    [
        (positive(float), "inf", "must be a finite number"),
        (positive(float), "nan", "must be a finite number"),
        (non_negative(float), "-inf", "must be a finite number"),
        (positive_int, str(10**30), "at most 2,147,483,647"),
        (positive_int, "true", "'true' is not a whole number"),
        (positive_int, "", "an empty value is not a whole number"),
        (gpu_count, str(2**20 + 1), "at most 1,048,576"),
        (random_seed, "-1", "a seed is a whole number from 0 to 18,446,744,073,709,551,615"),
        (random_seed, str(2**64), "a seed is a whole number from 0"),
        (byte_count, "1.5", "a whole number of bytes"),
        (byte_count, "inf", "must be a finite number"),
        (int_list(), "1,0", "'1,0': '0' is invalid: it must be greater than zero"),
        (word, " ", "an empty value is invalid"),
        (percentile, "101", "at most 100"),
        (fraction, "0", "above 0 and at most 1"),
        (at_least_one, "0.5", "at least 1"),
    ],
)
def test_a_hostile_value_is_refused_naming_it_and_the_valid_range(parse, text, message):
    with pytest.raises(argparse.ArgumentTypeError, match=re.escape(message)):
        parse(text)


def test_bounds_and_spellings_that_are_valid_come_back():
    assert random_seed("0") == 0 and random_seed(str(2**64 - 1)) == 2**64 - 1
    assert byte_count("1e6") == 1_000_000 and int_list()("1,2,4") == (1, 2, 4)
    assert positive_int("2147483647") == 2**31 - 1 and gpu_count(str(2**20)) == 2**20


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["estimate", "gemm", "--m", "8", "--n", "8", "--k", "8", "--pass", "bogus"],
         "--pass: invalid choice"),  # refused, not priced as fwd
        (["estimate", "attention", "--seq-q", "8", "--pass", "bogus"], "--pass: invalid choice"),
        (["estimate", "train-step", "--model", "llama3-8b", "--optimizer", "bogus"],
         "--optimizer: invalid choice"),
        (["estimate", "layer", "--hidden", "4096", "--heads-q", "32", "--heads-kv", "7",
          "--ffn", "1024"], "--heads-q=32 is invalid: it must be a multiple of --heads-kv=7"),
        (["estimate", "train-step", "--model", "llama3-8b", "--seq", "1000000"],
         "max_seq_len=8,192"),
        (["train", "--model", "llama3-8b", "--gpus", str(10**30)], "at most 1,048,576"),
        (["train", "--model", "llama3-8b", "--gpus", "8", "--straggler", "0:nan"],
         "'0:nan' (RANK:SLOWDOWN)"),
        (["train", "--model", "llama3-8b", "--gpus", "8", "--seed", "-1"], "a seed is"),
        (["serve", "--model", "llama3-8b", "--gpu", "h200", "--rate", "1", "--requests", "4",
          "--prompt-tokens", "8", "--output-tokens", "8", "--disaggregate", "1:1",
          "--replicas", "4"], "--replicas 4 disagrees with --disaggregate 1:1"),
        (["serve", "--model", "llama3-8b", "--gpu", "h200", "--rate", "1", "--requests", "4",
          "--prompt-tokens", "uniform:1:1e30", "--output-tokens", "8"], "finite token counts"),
        (["cluster", "llama3-405b", "--repeat", "0"], "--repeat: '0' is invalid"),
    ],
)  # fmt: skip
def test_a_bad_command_line_is_one_line_and_exit_2(capsys, argv, message):
    from gpuplan.cli import main

    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("gpuplan: error:") and message in err


def test_an_unknown_plot_extension_is_refused_before_any_simulation(tmp_path, capsys):
    from gpuplan.cli import main

    jobs = tmp_path / "jobs.csv"
    # llama3-405b takes minutes to simulate: a refusal in well under that is a check first
    code = main(["cluster", "llama3-405b", "--plot", str(tmp_path / "t.bogus"), "--jobs", str(jobs)])
    err = capsys.readouterr().err
    assert code == 2 and "--plot" in err and ".png" in err and list(tmp_path.iterdir()) == []


def test_an_empty_cluster_calibration_is_refused_before_any_simulation(capsys):
    from gpuplan.cli import main

    assert main(["cluster", "thousand-gpu", "--calibration", ""]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--calibration '' is empty: give a fit file" in err
