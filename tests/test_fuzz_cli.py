"""Property: no command line, however hostile, ends in a traceback, a multi-line error or a
leftover file. Every command starts from a cheap valid line; one flag gets a hostile value.

The broad run (2,000 invocations, hangs included) is ``benchmarks/fuzz_cli.py``; this is its
bounded version for the suite.
"""

import argparse
import contextlib
import io
import os
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tiny_cluster import TINY_SCENARIO

from gpuplan.cli import build_parser, main

LENGTHS = ["--prompt-tokens", "64", "--output-tokens", "8"]
BASES = [
    ["models", "llama3-8b"],
    ["gpus"],
    ["stacks"],
    ["estimate", "gemm", "--m", "64", "--n", "64", "--k", "64"],
    ["estimate", "attention", "--seq-q", "128"],
    ["estimate", "decode-step", "--hidden", "256", "--heads-q", "4", "--heads-kv", "2",
     "--ffn", "512", "--layers", "2"],
    ["estimate", "collective", "--op", "all_reduce", "--bytes", "1e6"],
    ["train", "--model", "megatron-gpt-1.7b", "--gpus", "8", "--timeline", "t.json"],
    ["search", "train", "--model", "megatron-gpt-1.7b", "--gpus", "8", "--global-batch", "16"],
    ["serve", "--model", "llama3-8b", "--gpu", "h200", "--rate", "1", "--requests", "8",
     *LENGTHS],
    ["serve", "edge", "--model", "llama3-8b", "--gpu", "l4", "--batch", "1"],
    ["cluster", "tiny.yaml", "--no-progress"],
    ["serve", "plan", "--model", "llama3-8b", "--gpu", "h200", "--rate", "1", "--requests", "8",
     *LENGTHS, "--slo-ttft-s", "1", "--slo-tpot-s", "0.1", "--tp", "1", "--max-seqs", "8",
     "--no-disaggregation"],
    ["validate", "score", "records.jsonl"],
    ["validate", "trace", "kernels.json"],
    ["watch", "plan.json", "steps.jsonl"],
]  # fmt: skip
# fitting and the report take seconds a call: benchmarks/fuzz_cli.py covers them; diagnose and
# report price a setup many times (seconds a call): benchmarks/fuzz_cli.py covers them too
SLOW_COMMANDS = {("validate", "calibrate"), ("validate", "report"), ("diagnose", "train"),
                 ("diagnose", "serve"), ("report", "train"), ("report", "serve"),
                 ("report", "cluster")}  # fmt: skip
WATCH = Path(__file__).parent / "data" / "watch"
KERNELS = (
    '{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "sm90_gemm_bf16", "ts": 0, '
    '"dur": 5, "pid": 0, "tid": 7}]}'
)
RECORD = (
    '{"kind": "gemm", "device": "h200", "params": {"m": 512, "n": 512, "k": 512, '
    '"dtype": "bf16"}, "measured": {"time_s": 2e-5}, "source": "test"}\n'
)
# flags that start a long run whatever their value, or reach another machine
SKIPPED = {"--help", "--version", "--all-ranks", "--reproduce", "--workers", "--scheduler",
           "--progress", "--repeat", "--requests", "--global-batch", "--gpus",
           "--follow"}  # fmt: skip (watch --follow tails until stopped, by design)
HOSTILE = st.sampled_from(
    ["inf", "-inf", "nan", "1e30", str(10**30), "-1", "0", str(-(2**63)), "", "bogus", "ünï",
     "2.5", "true", "missing/dir/out.csv", "folder", "out.bogus", "uniform:1:1e30",
     "lognormal:nan:1", "0:inf", "1,0"]  # fmt: skip
) | st.text(max_size=6) | st.integers(-(2**70), 2**70).map(str) | st.floats().map(repr)


def _leaves(parser, prefix=()):
    yield prefix, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _leaves(sub, (*prefix, name))


def _flags() -> dict[tuple[str, ...], list[tuple[str, bool]]]:
    """Each command's option flags, and whether each takes a value (else it is a switch)."""
    table = {}
    for prefix, parser in _leaves(build_parser()):
        table[prefix] = [
            (a.option_strings[-1], a.nargs != 0)
            for a in parser._actions
            if a.option_strings and a.option_strings[-1] not in SKIPPED
        ]
    return table


FLAGS = _flags()


def _command(base: list[str]) -> tuple[str, ...]:
    return max((p for p in FLAGS if tuple(base[: len(p)]) == p), key=len)


def _run(argv: list[str]) -> tuple[int, str, set[str], set[str]]:
    """Run ``gpuplan argv`` in a fresh folder: (exit code, stderr, files before, files after)."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "tiny.yaml").write_text(TINY_SCENARIO)
        (folder / "records.jsonl").write_text(RECORD)
        (folder / "kernels.json").write_text(KERNELS)
        (folder / "plan.json").write_text((WATCH / "plan_llama3_8b_8xh100.json").read_text())
        (folder / "steps.jsonl").write_text((WATCH / "steps.jsonl").read_text())
        (folder / "folder").mkdir()
        before = {str(p.relative_to(folder)) for p in folder.rglob("*")}
        here = os.getcwd()
        out, err = io.StringIO(), io.StringIO()
        try:
            os.chdir(folder)
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = main(argv)
        finally:
            os.chdir(here)
        after = {str(p.relative_to(folder)) for p in folder.rglob("*")}
    return code, err.getvalue(), before, after


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_no_flag_value_ends_in_a_traceback_a_long_error_or_a_leftover_file(data):
    base = data.draw(st.sampled_from(BASES), label="base")
    flag, takes_value = data.draw(st.sampled_from(FLAGS[_command(base)]), label="flag")
    argv = list(base)
    if not takes_value:
        argv.append(flag)
    elif flag in argv:
        argv[argv.index(flag) + 1] = data.draw(HOSTILE, label="value")
    else:
        argv += [flag, data.draw(HOSTILE, label="value")]
    code, err, before, after = _run(argv)
    assert code in (0, 1, 2), err
    if code == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("gpuplan: error:"), err
    assert not [n for n in after if Path(n).name.startswith(".") and n.endswith(".tmp")]
    if code != 0:
        assert after == before, f"a failed command left {sorted(after - before)}"


def test_every_command_is_covered_by_a_base():
    covered = {_command(base) for base in BASES}
    groups = {(), ("search",), ("validate",), ("diagnose",), ("report",)}  # they only choose
    assert set(FLAGS) - groups - covered == SLOW_COMMANDS
