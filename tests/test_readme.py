"""Every ``gpuplan ...`` command of the README runs as written: each is read out of the README's
bash blocks and run in-process, at smaller sizes where the README's would take minutes (fewer
requests, GPUs or repeats; the rewrites are listed in ``SHRINK``) and with placeholders (DIR,
KEY, TRACE.json, fit.json) filled in. A command whose comment says ``(minutes)`` is only parsed
(``--help`` after its flags checks every flag and value it gives)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from gpuplan.cli import main

ROOT = Path(__file__).resolve().parents[1]
FIT = ROOT / "gpuplan" / "hwmodels" / "data" / "calibration_h200.json"
README = ROOT / "README.md"
LONG = "minutes)"  # a README comment ending "(minutes)" or "(...; minutes)"


def commands() -> list[tuple[str, bool]]:
    """(command, long) for each ``gpuplan`` line of the README's bash blocks."""
    out, block = [], False
    lines = README.read_text().splitlines()
    text = []
    for line in lines:
        if line.startswith("```"):
            block = line.strip() == "```bash"
            continue
        if block:
            text.append(line)
    joined = "\n".join(text).replace("\\\n", " ")
    for line in joined.splitlines():
        line = line.strip()
        if line.startswith("gpuplan "):
            out.append((line, LONG in line))
    return out


def argv_of(line: str, tmp: Path) -> list[str]:
    """The command's arguments: comment and redirection cut, placeholders filled in, inputs
    from the checkout, outputs into ``tmp``."""
    line = line.split(" #", 1)[0].split(" > ", 1)[0]
    argv = shlex.split(line)[1:]
    fill = {"DIR": str(ROOT / "data" / "h200"), "KEY": "h200",
            "TRACE.json": str(ROOT / "data" / "h200" / "trace" / "layer_fwd_bwd.trace.json.gz")}  # fmt: skip
    out = []
    for a in argv:
        a = fill.get(a, a)
        if (ROOT / a).exists() and not a.startswith("-") and "/" in a:
            a = str(ROOT / a)  # an input shipped with the checkout
        elif re.fullmatch(r"[\w.-]+\.(json|png|csv)", a) or a == "docs":
            a = str(tmp / a)  # an output (or the fit written by an earlier line)
        out.append(a)
    return shrink(out)


SHRINK = {  # flag -> the largest value the test runs (sizes only: the same code paths)
    "--requests": 60,
    "--repeat": 2,
    "--workers": 1,
}
TIMELINE = {"--gpus": "128", "--global-batch": "16"}  # dp 2 of the README's tp 8 x pp 8


def shrink(argv: list[str]) -> list[str]:
    out = list(argv)
    for i, a in enumerate(out[:-1]):
        if a in SHRINK and out[i + 1].replace(".", "").isdigit():
            out[i + 1] = str(min(float(out[i + 1]), SHRINK[a])).removesuffix(".0")
        if "--timeline" in out and a in TIMELINE:
            out[i + 1] = TIMELINE[a]
    simulates = out[:1] == ["serve"] and out[1:2] != ["edge"]
    if simulates and "--requests" not in out and "--trace" not in out:
        out += ["--requests", str(SHRINK["--requests"])]
    return out


CASES = commands()


def test_the_readme_has_its_commands():
    assert len(CASES) >= 25
    assert any("--hf-config examples/config.json" in c for c, _ in CASES)
    assert any("--straggler" in c and "--all-ranks" in c for c, _ in CASES)


@pytest.mark.slow
@pytest.mark.parametrize("line,long", CASES, ids=[c[:60] for c, _ in CASES])
def test_every_readme_command_runs(line, long, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = argv_of(line, tmp_path)
    if "--calibration" in argv:  # the fit an earlier (minutes-long) line writes: the package's
        argv[argv.index("--calibration") + 1] = str(FIT)
    if long:
        argv.append("--help")
    code = main(argv)
    _out, err = capsys.readouterr()
    assert code == 0, f"gpuplan {' '.join(argv)}: exit {code}: {err.strip()}"


PINNED = ("python3 -m pip install torch==2.13.0 && python3 -m pip install -e '.[dev]' && "
          "python3 -m ruff check gpuplan tests && python3 -m pytest -q")  # fmt: skip


def test_the_readme_keeps_the_pinned_test_command_and_says_how_to_get_torchs_cpu_build():
    text = README.read_text()
    assert PINNED in text  # the command .ci/run runs, as it was
    assert "torch==2.13.0" in (ROOT / ".ci" / "run").read_text()
    prose = " ".join(text.split())
    assert "--index-url https://download.pytorch.org/whl/cpu" in prose and "CPU build" in prose


def test_the_shipped_config_is_tinyllama_with_its_exact_parameter_count():
    from gpuplan.workloads.hf_config import from_hf_config
    from gpuplan.workloads.params import count_params

    cfg = from_hf_config(ROOT / "examples" / "config.json")
    # TinyLlama-1.1B (huggingface.co/TinyLlama/TinyLlama-1.1B-Chat-v1.0, config.json): untied
    # 32000 x 2048 embedding and head, 22 layers of q,o 2048^2, k,v 2048 x 256, SwiGLU 3 x 2048 x
    # 5632 and two 2048 norms, a final norm: 2 * 65,536,000 + 22 * 44,044,288 + 2048
    assert count_params(cfg).total == 1_100_048_384
