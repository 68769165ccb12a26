"""SIGTERM ends a command cleanly: exit 143, one line, and no hidden temporary file left where
an output was being written (cli.main's handler raises, so every ``finally`` runs)."""

from __future__ import annotations

import os
import signal

from gpuplan.cli import main


def test_sigterm_while_writing_leaves_nothing_behind(tmp_path, capsys, monkeypatch):
    real_chmod = os.chmod

    def chmod_then_term(path, mode, *a, **kw):  # the temporary file is written, not yet moved
        real_chmod(path, mode, *a, **kw)
        os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(os, "chmod", chmod_then_term)
    out = tmp_path / "r.md"
    code = main(["report", "train", "--model", "llama3-8b", "--gpus", "8", "--zero", "3",
                 "--out", str(out)])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 128 + signal.SIGTERM and err.count("\n") == 1 and "SIGTERM" in err
    assert list(tmp_path.iterdir()) == []  # neither the report nor its hidden temporary file


def test_the_handler_is_put_back(capsys):
    before = signal.getsignal(signal.SIGTERM)
    assert main(["estimate", "gemm", "--m", "64", "--n", "64", "--k", "64"]) == 0
    assert signal.getsignal(signal.SIGTERM) is before
