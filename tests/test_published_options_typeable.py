"""Every option a published training row states is a flag of ``gpuplan train``, and the flag
builds what ``train --reproduce`` prices for that row: the same stack, efficiency and layout
fields, so a user naming the same framework gets the same answer."""

from __future__ import annotations

import pytest

from gpuplan.cli import build_parser
from gpuplan.cli.calibration import efficiency_from_args
from gpuplan.cli.train_cmd import _strategy, resolve_cluster, resolve_stack
from gpuplan.hwmodels.efficiency import efficiency_for
from gpuplan.hwmodels.power import power_capped
from gpuplan.sim.stacks.training import with_elementwise, with_launch_blocking
from gpuplan.validate.published import training as published

# the row's own columns, as the flags that set them
COLUMNS = ("tp", "pp", "dp", "cp", "ep", "zero", "micro_batch", "global_batch", "schedule",
           "virtual_stages", "recompute", "precision", "seq")  # fmt: skip


def _flag(key: str) -> str:
    return "--" + key.replace("_", "-")


def option_argv(options: dict) -> list[str]:
    """A row's ``key=value`` options as command-line flags (``true``: the bare flag)."""
    argv: list[str] = []
    for key, value in options.items():
        if value is True:
            argv.append(_flag(key))
        elif key == "pp_layers" and not isinstance(value, str):
            argv += [_flag(key), ",".join(map(str, value))]
        else:
            argv += [_flag(key), f"{value:g}" if isinstance(value, float) else str(value)]
    return argv


def row_argv(row: dict) -> list[str]:
    argv = ["train", "--gpu", row["gpu"], "--gpus", str(row["gpus"]), "--stack",
            "megatron-te" if row["stack"] == "megatron" else row["stack"]]  # fmt: skip
    if row["cluster"] and row["cluster"] not in published.training_sources().get("clusters", {}):
        argv += ["--cluster", row["cluster"]]
    for col in COLUMNS:
        argv += [_flag(col), str(row[col])]
    return argv + option_argv(row["options"])


def _one_row_per_option_set() -> list[dict]:
    seen, out = set(), []
    for row in published.training_rows():
        key = (row["stack"], tuple(sorted(row["options"])))
        if key not in seen:
            seen.add(key)
            out.append(row)
    return out


ROWS = _one_row_per_option_set()


def test_every_option_key_of_the_published_rows_is_a_train_flag():
    train = build_parser()._subparsers._group_actions[0].choices["train"]
    flags = {s for a in train._actions for s in a.option_strings}
    keys = {k for row in published.training_rows() for k in row["options"]}
    assert keys and not {_flag(k) for k in keys} - flags


@pytest.mark.parametrize("row", ROWS, ids=[f"{r['stack']}:{';'.join(r['options'])}" for r in ROWS])
def test_the_flags_of_a_row_build_what_reproduce_prices(row):
    args = build_parser().parse_args(row_argv(row))
    cluster = resolve_cluster(args)
    stack = with_launch_blocking(resolve_stack(args, cluster.accelerator), args.launch_blocking)
    stack = with_elementwise(stack, args.impl)
    assert stack == published.row_stack(row)
    acc = published.row_cluster(row).accelerator
    eff = power_capped(efficiency_from_args(args, acc.key), acc.tdp_w, args.power_limit_w)
    limit = row["options"].get("power_limit_w")
    assert eff == power_capped(efficiency_for(acc.key), acc.tdp_w, limit)
    cfg = published.row_model(row)
    strategy = _strategy(args, args.gpus, stack, cfg)
    want = published.row_strategy(row, cfg, stack)
    for key in row["options"]:
        if hasattr(want, key):
            assert getattr(strategy, key) == getattr(want, key), key


def test_a_forced_training_only_kernel_keeps_the_stacks_decode_kernel():
    from gpuplan.sim.stacks import get_stack, with_overrides

    stack = get_stack("composer-fsdp")
    forced = with_overrides(stack, attention_kernel="triton")
    assert (forced.attention.train, forced.attention.prefill) == ("triton", "triton")
    assert forced.attention.decode == stack.attention.decode
