"""A stack's layout defaults are its framework's (sim.stacks.training_defaults): a flag given wins,
every default applied is listed, and train, search and the published runs fill a layout through
the same function."""

import json

import pytest

from gpuplan.cli import main
from gpuplan.errors import GpuplanError
from gpuplan.sim.diagnose.layers import layout_edits
from gpuplan.sim.parallel.search import SearchSpace
from gpuplan.sim.parallel.strategy import Strategy
from gpuplan.sim.stacks import get_stack
from gpuplan.sim.stacks.training_defaults import FIELDS, LayoutDefaults, fill_defaults
from gpuplan.validate.published.training import row_model, row_strategy, training_rows

GPT3 = ["train", "--model", "gpt3-175b", "--gpu", "h100-sxm", "--gpus", "512", "--tp", "4",
        "--pp", "8", "--seq", "2048", "--global-batch", "2048", "--precision", "fp8", "--json"]  # fmt: skip


def train_doc(capsys, *argv) -> dict:
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(("stack", "zero", "sp", "recompute"), [
    ("megatron-te", 1, True, "none"), ("fsdp2", 3, True, "selective"),
    ("composer-fsdp", 3, False, "full"), ("deepspeed", 0, False, "none"),
    ("pytorch", 0, False, "none"),
])  # fmt: skip
def test_each_stack_fills_a_layout_as_its_framework_ships_it(stack, zero, sp, recompute):
    filled = fill_defaults(get_stack(stack), {}, tp=4, pp=2).fields
    assert (filled["zero"], filled["sp"], filled["recompute"]) == (zero, sp, recompute)
    assert filled["schedule"] == "1f1b" and filled["micro_batch"] == 1


def test_sequence_parallelism_comes_with_tensor_parallelism_only():
    megatron = get_stack("megatron-te")
    assert fill_defaults(megatron, {}, tp=2).fields["sp"] is True
    assert fill_defaults(megatron, {}, tp=1).fields["sp"] is False


def test_a_value_given_wins_and_is_not_listed_as_a_default():
    filled = fill_defaults(get_stack("megatron-te"), {"zero": 0, "sp": False}, tp=4, pp=8)
    assert (filled.fields["zero"], filled.fields["sp"]) == (0, False)
    assert not any(a.startswith(("--zero", "--sp", "--no-sp")) for a in filled.applied)


def test_megatron_overlaps_pipeline_sends_under_the_interleaved_schedule_only():
    megatron = get_stack("megatron-te")
    assert fill_defaults(megatron, {}, pp=8, virtual_stages=6).fields["overlap_pp"] is True
    assert fill_defaults(megatron, {}, pp=8).fields["overlap_pp"] is False
    assert fill_defaults(get_stack("fsdp2"), {}, pp=8, virtual_stages=2).fields["overlap_pp"] is False


def test_train_prices_the_distributed_optimizer_and_sp_and_lists_them(capsys):
    doc = train_doc(capsys, *GPT3)
    assert doc["strategy"]["zero"] == 1 and doc["strategy"]["sp"] is True
    assert any(d.startswith("--zero 1 (megatron-te") for d in doc["defaults"])
    assert any(d.startswith("--sp (megatron-te") for d in doc["defaults"])
    assert any(d.startswith("--stack megatron-te") for d in doc["defaults"])


def test_an_explicit_zero_0_and_no_sp_win_over_the_stack(capsys):
    doc = train_doc(capsys, *GPT3, "--zero", "0", "--no-sp", "--allow-infeasible")
    assert doc["strategy"]["zero"] == 0 and doc["strategy"]["sp"] is False
    assert not any(d.startswith(("--zero", "--sp", "--no-sp")) for d in doc["defaults"])


def test_defaults_in_force_says_none_only_when_every_flag_is_given(capsys):
    given = ["--stack", "megatron-te", "--zero", "1", "--sp", "--micro-batch", "1",
             "--schedule", "1f1b", "--recompute", "none", "--state-precision",
             "bf16-mixed-megatron", "--overlap-dp", "--no-overlap-tp", "--no-overlap-pp"]  # fmt: skip
    assert main([a for a in GPT3 if a != "--json"] + given) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("defaults"))
    assert line.endswith(": none")
    assert main([a for a in GPT3 if a != "--json"] + given[2:]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("defaults"))
    assert "--stack megatron-te" in line and "none" not in line


def test_search_takes_the_stacks_sp_rule_from_the_same_function(capsys):
    argv = ["search", "train", "--model", "llama3-8b", "--gpus", "8", "--global-batch", "32",
            "--json"]  # fmt: skip
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    assert any(d.startswith("--sp with-tp (megatron-te") for d in doc["defaults"])
    assert all(row["sp"] == (row["tp"] > 1) for row in doc["top"])
    assert main(argv + ["--stack", "deepspeed"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert not any(row["sp"] for row in doc["top"])


def test_a_published_row_keeps_the_zero_and_sp_it_states_and_takes_the_stacks_otherwise():
    row = next(r for r in training_rows() if r["id"] == "nemo2407-gpt3-175b-g512")
    stack = get_stack("megatron-te")
    stated = row_strategy(row, row_model(row), stack)
    assert (stated.zero, stated.sp) == (1, True)
    unstated = dict(row, zero=None, options={})
    assert row_strategy(unstated, row_model(row), stack).zero == 1  # the distributed optimizer
    assert row_strategy(unstated, row_model(row), stack).sp is True
    told = dict(row, zero=0, options={"sp": False})
    told_strategy = row_strategy(told, row_model(row), stack)
    assert (told_strategy.zero, told_strategy.sp) == (0, False)


def test_diagnose_says_no_sp_where_the_stack_would_turn_it_on():
    edits = layout_edits(Strategy(tp=4, dp=2, sp=False, global_batch=8))
    assert edits["--no-sp"] is True and edits["--sp"] is None


def test_an_unknown_field_is_a_one_line_error_naming_the_valid_ones():
    with pytest.raises(GpuplanError, match=r"fill_defaults: tp cannot be defaulted; valid fields: "
                       + ", ".join(FIELDS)):  # fmt: skip
        fill_defaults(get_stack("megatron-te"), {"tp": None})


def test_a_bad_framework_default_is_a_one_line_error():
    with pytest.raises(GpuplanError, match=r"Acme: zero=5 is invalid: choose one of 0, 1, 2, 3"):
        LayoutDefaults(framework="Acme", zero=5)
    with pytest.raises(GpuplanError, match=r"Acme: recompute"):
        LayoutDefaults(framework="Acme", recompute="some")


def test_a_bad_sp_rule_is_refused_naming_the_rules(capsys):
    with pytest.raises(GpuplanError, match=r"sp.*'on'.*any, with-tp, off"):
        SearchSpace(sp="on")
    assert main(["search", "train", "--model", "llama3-8b", "--gpus", "8", "--global-batch",
                 "32", "--sp", "on"]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert "argument --sp: invalid choice: 'on'" in err and err.count("\n") == 1


def test_torchtitan_shards_nothing_on_one_data_parallel_rank():
    fsdp2 = get_stack("fsdp2")
    assert fill_defaults(fsdp2, {}, ranks=1).fields["zero"] == 0
    assert fill_defaults(fsdp2, {}, ranks=8).fields["zero"] == 3
    assert fill_defaults(get_stack("megatron-te"), {}, ranks=1).fields["zero"] == 1


def test_a_whole_models_train_step_recomputes_as_its_stack_does(capsys):
    case = ["--model", "llama3-8b", "--gpu", "h200", "--seq", "2048", "--stack", "fsdp2",
            "--json"]  # fmt: skip
    step = train_doc(capsys, "estimate", "train-step", *case)
    assert step["params"]["recompute"] == "selective" and "--recompute selective" in step["defaults"]
    train = train_doc(capsys, "train", "--gpus", "1", "--global-batch", "1", *case)
    assert train["step_time_s"] == step["time_s"]
    given = train_doc(capsys, "estimate", "train-step", *case, "--recompute", "none")
    assert given["params"]["recompute"] == "none"
