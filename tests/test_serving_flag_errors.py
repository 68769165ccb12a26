"""Serving flags that do not go together: each a one-line error naming the flags (exit 2)."""

import pytest

from gpuplan.cli import main

SERVE = ["serve", "--model", "llama3-8b", "--gpu", "h100-sxm", "--rate", "5", "--prompt-tokens",
         "256", "--output-tokens", "16", "--requests", "4"]
SPEC = ["--speculative", "ngram", "--spec-tokens", "3", "--accept-rate", "0.6"]
EDGE = ["serve", "edge", "--model", "llama3-8b", "--gpu", "jetson-agx-orin-64gb"]
VLM = ["serve", "--model", "llama3.2-11b-vision", "--gpu", "h100-sxm", "--rate", "5",
       "--prompt-tokens", "256", "--output-tokens", "16", "--requests", "4"]


@pytest.mark.parametrize("argv, needle", [
    (SERVE + SPEC + ["--pp", "2"], "speculative decoding with pp=2 is not modelled: give --pp 1"),
    (SERVE + ["--image-size", "448x448"], "--image-size needs --images-per-request N"),
    (SERVE + SPEC + ["--disaggregate", "1:1"], "--speculative with --disaggregate is not modelled"),
    (VLM + SPEC + ["--images-per-request", "1"],
     "speculative decoding of llama3.2-11b-vision with images is not simulated"),
    (EDGE + ["--draft-model", "llama3.2-1b"], "--draft-model is used by --speculative draft"),
    (EDGE + ["--speculative", "eagle"], "--speculative 'eagle' is invalid: give METHOD:K:ACCEPTANCE"),
    (EDGE + ["--speculative", "eagle:4:x"], "acceptance='x' is invalid: give a rate in [0, 1]"),
    (EDGE + ["--speculative", "draft:4:0.5"], "needs a draft model (--draft-model)"),
])  # fmt: skip
def test_flags_that_do_not_go_together_are_a_one_line_error(capsys, argv, needle):
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2 and needle in err and err.count("\n") == 1, err
