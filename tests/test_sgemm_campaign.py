"""The campaign's fp32 SIMT GEMM part (stack_campaign/sgemm.py) at tiny sizes on the CPU."""

from __future__ import annotations

import pytest

from gpuplan.validate.records import read_records

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def campaign(tmp_path_factory):
    from gpuplan.validate.stack_campaign import runner

    out = tmp_path_factory.mktemp("sgemm")
    summary = runner.run(out, device="cpu", budget_s=30, only=["sgemm"], ceilings=False)
    return out, summary


def test_the_part_writes_fp32_gemm_and_grouped_records_in_both_timings(campaign):
    out, summary = campaign
    records, errors = read_records(out / "sgemm.jsonl")
    assert errors == [] and summary["sgemm"]["failed"] == 0
    assert summary["sgemm"]["records"] == len(records) == 4  # two cases, two timings
    assert {r.kind for r in records} == {"gemm", "grouped_gemm"}
    assert {r.params["dtype"] for r in records} == {"fp32"}
    assert {r.params["stack"] for r in records} == {"pytorch"}
    assert {r.params["timing"] for r in records} == {"isolated", "device"}
    assert all(r.measured["time_s"] > 0 for r in records)


def test_the_part_leaves_the_tf32_setting_as_it_found_it(tmp_path):
    from gpuplan.validate.stack_campaign import sgemm
    from gpuplan.validate.stack_campaign.common import TimeBox

    matmul = torch.backends.cuda.matmul
    before = matmul.allow_tf32
    matmul.allow_tf32 = True
    try:
        with sgemm._NoTF32(torch):
            assert matmul.allow_tf32 is False
        assert matmul.allow_tf32 is True
        sgemm.run(torch, "cpu", "cpu", tmp_path, TimeBox(10), True)
        assert matmul.allow_tf32 is True
    finally:
        matmul.allow_tf32 = before


def test_the_h200_grid_caps_the_slow_calls_and_adds_only_new_grouped_shapes():
    from gpuplan.validate.stack_campaign import grouped, sgemm

    got = sgemm.cases(False)
    flops = lambda c: 2 * c.get("groups", 1) * c["m"] * c["n"] * c["k"]  # noqa: E731
    squares = [c for c in got if c["m"] == c["n"] == c["k"]]
    assert {c["m"] for c in squares} == set(sgemm._SQUARES)
    assert all(flops(c) <= sgemm._MAX_FLOPS for c in got if c not in squares)
    old = {(c["groups"], c["m"], c["n"], c["k"]) for c in grouped.cases(False)
           if c["dtype"] == "fp32"}
    new = [c for c in got if c["kind"] == "grouped_gemm"]
    assert new and not {(c["groups"], c["m"], c["n"], c["k"]) for c in new} & old
    assert {c["m"] for c in got if c["kind"] == "gemm"} >= {1, 4, 16, 64, 256, 1024, 4096}
    assert len(got) == len({tuple(sorted(c.items())) for c in got})  # no case twice
