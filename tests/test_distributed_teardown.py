"""harness.distributed.run_world: a rank that dies after its work is done loses nothing and is a
warning; a rank that dies during its work fails the run."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("torch.distributed")

from gpuplan.validate.harness import distributed  # noqa: E402


def _job(out, kind: str) -> distributed.Job:
    return distributed.Job(
        kind=kind, module="_teardown_kind", out_dir=str(out), device="cpu", device_key="cpu",
        tiny=True, deadline_unix=time.time() + 60, port=distributed.free_port(),
    )  # fmt: skip


def test_an_abort_after_every_rank_finished_is_a_warning(tmp_path, capfd):
    distributed.run_world(_job(tmp_path, "abort_in_teardown"), 2)
    out = capfd.readouterr().out
    assert "abort_in_teardown] warning:" in out and "SIGABRT" in out
    assert not list(tmp_path.glob(".*.done"))  # the markers are cleaned up


def test_an_abort_during_the_work_fails_the_run(tmp_path):
    import torch.multiprocessing as mp

    with pytest.raises(mp.ProcessExitedException, match="SIGABRT"):
        distributed.run_world(_job(tmp_path, "abort_in_work"), 2)
    assert not list(tmp_path.glob(".*.done"))
