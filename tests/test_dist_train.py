"""Data-parallel training steps (harness.dist_train) on gloo CPU ranks, and their pricing."""

from __future__ import annotations

import datetime
import json
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

from gpuplan.errors import GpuplanError  # noqa: E402
from gpuplan.validate.harness import dist_train, distributed  # noqa: E402
from gpuplan.validate.records import parse_record  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
H200_RECORDS = ROOT / "data" / "h200_dist_train" / "train_step.jsonl"


def _job(out: Path, world: int = 1) -> distributed.Job:
    return distributed.Job(
        kind="train_step", module="gpuplan.validate.harness.dist_train", out_dir=str(out),
        device="cpu", device_key="cpu", tiny=True, deadline_unix=time.time() + 60,
        port=distributed.free_port(),
    )  # fmt: skip


@pytest.fixture(scope="module")
def rank0(tmp_path_factory):
    """This process as the one gloo rank of a world of one."""
    out = tmp_path_factory.mktemp("dist_train")
    job = _job(out)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{job.port}", rank=0,
                            world_size=1, timeout=datetime.timedelta(seconds=60))  # fmt: skip
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the spawned ranks do (distributed._entry)
    yield distributed.Rank(rank=0, world=1, device="cpu", job=job)
    torch.set_num_threads(threads)
    dist.destroy_process_group()


@pytest.mark.parametrize("layout", list(dist_train.LAYOUTS))
def test_every_layout_writes_a_contract_record_with_its_stack_and_stage(rank0, layout):
    params = dist_train._params(dist_train.TINY[0], layout, 2, rank0.world)
    record = dist_train.measure_rank(rank0, layout, params)
    stack, zero, _ = dist_train.LAYOUTS[layout]
    checked = parse_record(record)  # the contract's reader keeps dp, accumulation, zero_stage
    assert checked.params["stack"] == stack and checked.params["zero_stage"] == zero
    assert checked.params["optimizer_impl"] == "foreach"  # the CPU run's AdamW
    assert checked.params["accumulation"] == 2 and checked.params["dp"] == 1
    assert record["layout"] == layout and record["tokens_per_step"] == 2 * 2 * 16
    assert checked.measured["time_s"] > 0 and checked.measured["peak_bytes"] > 0


def test_a_zero1_rank_keeps_the_optimizer_state_a_ddp_rank_keeps(rank0):
    """At world size 1 the sharded optimizer holds every parameter's AdamW state."""
    p = dist_train._params(dist_train.TINY[0], "ddp", 1, 1)
    peaks = {}
    for layout in ("ddp", "ddp-zero1"):
        step, module, opt = dist_train.make_step(rank0, layout, p)
        step()
        peaks[layout] = dist_train._state_bytes(module, opt)
    assert peaks["ddp"] == peaks["ddp-zero1"] > 0


def test_cases_span_every_layout_and_accumulation_at_the_world_size():
    cases = dist_train.cases(False, "cuda", 2)
    assert {(layout, p["accumulation"]) for layout, p in cases} == {
        (layout, a) for layout in dist_train.LAYOUTS for a in dist_train.ACCUMULATIONS
    }
    assert {p["dp"] for _, p in cases} == {2}
    assert len(cases) == len(dist_train.MODELS) * len(dist_train.LAYOUTS) * 2


def _record(**params) -> dict:
    base = dist_train._params(dist_train.MODELS[0], "ddp", 1, 1)
    return {"kind": "train_step", "device": "h200", "params": base | params,
            "measured": {"time_s": 0.05, "peak_bytes": 2**34}}  # fmt: skip


def test_a_bad_zero_stage_is_an_error_naming_the_field():
    with pytest.raises(GpuplanError, match=r"params.zero_stage=4 is invalid: choose one of 0, 1"):
        parse_record(_record(zero_stage=4))
    with pytest.raises(GpuplanError, match=r"params.accumulation=0 is invalid"):
        parse_record(_record(accumulation=0))


def test_a_one_rank_ddp_record_is_priced_as_the_one_gpu_training_step():
    """One cost path: dp 1, accumulation 1, ZeRO 0 is the one-GPU train_step's price, plus
    what the DDP wrapper adds on one rank: its buckets' copy of the fp32 gradients."""
    from gpuplan.validate.record_prediction import predict_breakdown, predict_record

    plain = {k: v for k, v in _record()["params"].items()
             if k not in ("dp", "accumulation", "zero_stage")}  # fmt: skip
    one = predict_record(parse_record(_record()))
    same = predict_record(parse_record(_record() | {"params": plain}))
    rec = parse_record(_record())
    buckets = predict_breakdown(rec.kind, rec.device, rec.params).memory_bytes["grad_buckets"]
    assert buckets > 0
    assert one["peak_bytes"] - same["peak_bytes"] == pytest.approx(buckets, rel=1e-6)


def test_accumulation_adds_micro_batches_but_not_the_optimizer_step():
    from gpuplan.validate.record_prediction import predict_record

    t1 = predict_record(parse_record(_record(accumulation=1)))["time_s"]
    t4 = predict_record(parse_record(_record(accumulation=4)))["time_s"]
    assert t1 < t4 < 4 * t1


def test_the_committed_h200_records_score_on_every_line():
    rows = dist_train.score_rows(H200_RECORDS)
    lines = [json.loads(x) for x in H200_RECORDS.read_text().splitlines() if x.strip()]
    assert len(rows) == len(lines) == 32
    assert {r["layout"] for r in rows} == set(dist_train.LAYOUTS)
    assert all(abs(r["time_error_pct"]) < 100 and abs(r["peak_error_pct"]) < 100 for r in rows)


def test_score_keeps_each_layout_past_a_blank_line(tmp_path):
    lines = H200_RECORDS.read_text().splitlines()
    gapped = tmp_path / "train_step.jsonl"
    gapped.write_text(lines[0] + "\n\n" + "\n".join(lines[1:]) + "\n")
    want = [r["layout"] for r in dist_train.score_rows(H200_RECORDS)]
    assert [r["layout"] for r in dist_train.score_rows(gapped)] == want


def test_score_names_a_missing_records_file_on_one_line(tmp_path):
    missing = str(tmp_path / "missing.jsonl")
    with pytest.raises(SystemExit) as exc:
        dist_train.main(["score", missing])
    assert exc.value.code == f"error: records file {missing!r} does not exist"


@pytest.mark.slow
def test_two_gloo_ranks_write_one_record_per_case(tmp_path):
    path = dist_train.measure(str(tmp_path), device="cpu", world=2, tiny=True, budget_s=120)
    records = [json.loads(x) for x in path.read_text().splitlines()]
    assert len(records) == len(dist_train.LAYOUTS) * len(dist_train.ACCUMULATIONS)
    assert {r["params"]["dp"] for r in records} == {2}
    assert all(len(r["peak_bytes_per_rank"]) == 2 for r in records)
    shard = {r["layout"]: r["peak_bytes_per_rank"][0] for r in records}
    assert shard["ddp-zero1"] < shard["ddp"]  # each rank holds half the AdamW state
    assert shard["fsdp2"] < shard["ddp"]  # and half the weights and gradients


def test_a_record_is_priced_with_the_adamw_it_ran():
    """The pytorch stack's own AdamW is foreach; a record that ran fused says so."""
    from gpuplan.validate.record_prediction import predict_record

    fused = predict_record(parse_record(_record(optimizer_impl="fused")))["time_s"]
    foreach = predict_record(parse_record(_record(optimizer_impl="foreach")))["time_s"]
    assert fused < foreach == predict_record(parse_record(_record()))["time_s"]
    with pytest.raises(GpuplanError, match=r"params.optimizer_impl='adam' is invalid: choose one"):
        parse_record(_record(optimizer_impl="adam"))


def _priced(layout: str, dp: int) -> dict:
    from gpuplan.validate.record_prediction import predict_record

    params = dist_train._params(dist_train.MODELS[1], layout, 1, dp) | {"optimizer_impl": "fused"}
    return predict_record(parse_record(_record() | {"params": params}))


@pytest.mark.parametrize("layout", ["ddp-zero1", "fsdp2", "fsdp2-keep"])
def test_a_sharded_layout_holds_fewer_bytes_per_rank_on_more_ranks(layout):
    peaks = [_priced(layout, dp)["peak_bytes"] for dp in (1, 2, 8)]
    assert peaks[0] > peaks[1] > peaks[2]


def test_ddp_on_more_ranks_is_never_faster_and_holds_the_same_bytes():
    one, two = _priced("ddp", 1), _priced("ddp", 2)
    assert two["time_s"] >= one["time_s"] and two["peak_bytes"] == one["peak_bytes"]
