"""A model whose own context cannot be cached on any layout is refused with the longest
``--max-model-len`` that fits, and that length then runs (vLLM refuses such a model the same way
until ``--max-model-len`` is lowered)."""

from __future__ import annotations

import re
from pathlib import Path

from gpuplan.cli import main

SCOUT = Path(__file__).parent / "data" / "hf_configs" / "llama-4-scout-17b-16e.json"
ARGS = ["serve", "--model", str(SCOUT), "--gpu", "h200", "--tp", "8", "--rate", "1",
        "--prompt-tokens", "500", "--output-tokens", "20", "--requests", "4", "--json"]


def _exit_code(args) -> int:
    try:
        return main(args) or 0
    except SystemExit as done:
        return done.code


def test_the_refusal_names_the_longest_context_that_fits(capsys):
    assert _exit_code(ARGS) == 1  # a plan that cannot run (cli: Infeasible)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "10485760 one request may need" in err[0]
    length = int(re.search(r"--max-model-len (\d+) or less", err[0]).group(1))
    assert length % 16 == 0 and 0 < length < 10_485_760
    assert _exit_code([*ARGS, "--max-model-len", str(length)]) == 0
    capsys.readouterr()
    assert _exit_code([*ARGS, "--max-model-len", str(length + 16)]) == 1
