"""The paired host-probe part of the stack campaign: rounds of probes and calls, and its skip."""

import pytest

torch = pytest.importorskip("torch")

from gpuplan.validate.stack_campaign import hostpair  # noqa: E402
from gpuplan.validate.stack_campaign.common import Timer  # noqa: E402


class _Part:
    def __init__(self):
        self.torch, self.device, self.tiny = torch, "cpu", False
        self.timer = Timer(torch, "cpu", max_reps=3)


def test_paired_keeps_each_round_probes_and_calls_and_their_medians():
    calls, probes = [], iter([0.002, 0.001, 0.003, 0.004, 0.005])
    befores = []
    got = hostpair.paired(_Part(), lambda: next(probes), lambda: calls.append(1),
                          before=lambda: befores.append(1))
    assert len(got["rounds"]) == hostpair.ROUNDS
    assert [r["module_probe_s"] for r in got["rounds"]] == [0.002, 0.001, 0.003, 0.004, 0.005]
    assert got["module_probe_s"] == 0.003
    # 2 warm-up calls, then REPS timed calls a round, each after its untimed ``before``
    assert len(calls) == len(befores) == 2 + hostpair.ROUNDS * hostpair.REPS
    assert got["stats"]["reps"] == hostpair.ROUNDS * hostpair.REPS
    assert all(len(r["times_s"]) == hostpair.REPS for r in got["rounds"])
    assert got["host_probe_s"] > 0


def test_the_part_skips_with_its_reason_without_transformers(tmp_path, monkeypatch):
    from gpuplan.validate.stack_campaign import common, hf

    monkeypatch.setattr(hf, "transformers_or_none", lambda: None)
    got = hostpair.run(torch, "cpu", "cpu", tmp_path, common.TimeBox(5), True)
    assert got == {"skipped": "transformers is not installed"}
    assert not (tmp_path / "hostpair.jsonl").exists()
