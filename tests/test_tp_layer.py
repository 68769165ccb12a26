"""The tensor-parallel decoder layer of the harness (tp_layer): its slices compute the whole
layer, its cases split over the world, its records are read and predicted."""

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from gpuplan.errors import GpuplanError
from gpuplan.validate.record_prediction import predict_breakdown
from gpuplan.validate.records import parse_record

ROOT = Path(__file__).resolve().parents[1]
LLAMA3_8B = {"hidden": 4096, "heads_q": 32, "heads_kv": 8, "ffn": 14336}

# Each rank builds the same whole layer (fp32, seed 0), takes its slice, and compares the
# output, the input gradient and its slice of the down projection's gradient with the whole's.
RANK_SCRIPT = """
import datetime, json, sys
import torch, torch.distributed as dist
from gpuplan.validate.harness.model import DecoderLayer, rope_tables
from gpuplan.validate.harness.tp_layer import shard
rank, world, port = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
torch.set_num_threads(1)
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                        world_size=world, timeout=datetime.timedelta(seconds=60))
torch.manual_seed(0)
full = DecoderLayer(64, 8, 4, 96)
with torch.no_grad():
    full.attn_norm.uniform_(0.5, 1.5)
    full.mlp_norm.uniform_(0.5, 1.5)
x = torch.randn(2, 8, 64, requires_grad=True)
g = torch.randn(2, 8, 64)
cos, sin = rope_tables(8, 8)
y = full(x, cos, sin)
dx, dw_down = torch.autograd.grad(y, [x, full.w_down.weight], g)
part = shard(full, rank, world)
x2 = x.detach().clone().requires_grad_()
y2 = part(x2, cos, sin)
dx2, dw2 = torch.autograd.grad(y2, [x2, part.w_down.weight], g)
f = 96 // world
err = {"y": (y2 - y).abs().max().item(), "dx": (dx2 - dx).abs().max().item(),
       "dw_down": (dw2 - dw_down[:, rank * f:(rank + 1) * f]).abs().max().item()}
print(json.dumps(err))
dist.destroy_process_group()
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("world", [2, 4])
def test_the_slices_on_every_rank_compute_the_whole_layer_and_its_gradients(tmp_path, world):
    pytest.importorskip("torch")
    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT)
    port = str(_free_port())
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(r), str(world), port],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in range(world)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err[-2000:]
        errors = json.loads(out.strip().splitlines()[-1])
        assert max(errors.values()) < 1e-4, errors


def test_the_sharded_layer_refuses_key_value_heads_that_do_not_split():
    pytest.importorskip("torch")
    from gpuplan.validate.harness.tp_layer import TPDecoderLayer

    with pytest.raises(ValueError, match="heads_kv=2"):
        TPDecoderLayer(64, 4, 2, 128, tp=4)


@pytest.mark.parametrize("world", [2, 4, 8])
def test_cases_pair_tp_world_with_tp_one_and_keep_only_shapes_that_split(world):
    pytest.importorskip("torch")
    from gpuplan.validate.harness.tp_layer import cases

    found = cases(False, "cuda", world)
    assert found and {c["tp"] for c in found} == {1, world}
    assert all(c["heads_kv"] % c["tp"] == 0 and c["ffn"] % c["tp"] == 0 for c in found)
    assert [c["tp"] for c in found[:2]] == [world, 1]
    assert {c["pass"] for c in found} == {"fwd", "fwd_bwd"}


def _record(**params) -> dict:
    p = LLAMA3_8B | {"seq": 4096, "micro_batch": 1, "tp": 4, "pass": "fwd_bwd", "dtype": "bf16"}
    return {"kind": "tp_layer", "device": "h200", "params": p | params,
            "measured": {"time_s": 0.004}, "source": "test"}  # fmt: skip


def test_a_tp_layer_record_reads_with_its_params():
    rec = parse_record(_record())
    assert rec.params["tp"] == 4 and list(rec.measured) == ["time_s"]


def test_key_value_heads_must_split_evenly_over_tp_ranks():
    with pytest.raises(GpuplanError, match="params.heads_kv=8 is invalid: it must be a multiple"):
        parse_record(_record(tp=16))


def test_the_prediction_has_two_all_reduces_each_way_under_tp():
    bd = predict_breakdown("tp_layer", "h200", _record()["params"])
    comm = bd.frame().query("category == 'communication'")
    assert sorted(comm["phase"]) == ["bwd", "bwd", "fwd", "fwd"]
    assert bd.frame()["time_s"].sum() == pytest.approx(bd.total_s)


def test_tp_one_predicts_the_eager_layer():
    p = _record(tp=1)["params"]
    layer = {k: v for k, v in p.items() if k != "tp"} | {"compiled": False}
    tp1 = predict_breakdown("tp_layer", "h200", p).total_s
    assert tp1 == pytest.approx(predict_breakdown("layer", "h200", layer).total_s)


def test_more_ranks_make_the_layer_faster_but_less_than_linearly():
    # 16k tokens: enough GPU work per rank at TP 8 that the CPU's issue of an eager step does
    # not set the pace (with fewer tokens TP 4 and TP 8 both wait on the CPU)
    t = {tp: predict_breakdown("tp_layer", "h200", _record(tp=tp, seq=16384)["params"]).total_s
         for tp in (1, 2, 4, 8)}  # fmt: skip
    assert t[1] > t[2] > t[4] > t[8]
    assert t[8] > t[1] / 8


def test_more_ranks_never_make_an_eager_layer_slower():
    t = {tp: predict_breakdown("tp_layer", "h200", _record(tp=tp)["params"]).total_s
         for tp in (1, 2, 4, 8)}  # fmt: skip
    assert t[1] > t[2] > t[4] >= t[8]


def test_calibration_loads_tp_layer_records_beside_the_contract_kinds_and_fits_none_on_them(
    tmp_path,
):
    from gpuplan.hwmodels.efficiency import prior_efficiency
    from gpuplan.validate import calibrate

    folder = tmp_path / "h200x4"
    folder.mkdir()
    lines = [_record(tp=tp, seq=seq) for tp in (1, 4) for seq in (2048, 4096)]
    (folder / "tp_layer.jsonl").write_text("\n".join(json.dumps(r) for r in lines) + "\n")
    pipeline = tmp_path / "pipeline_h200x4"  # not a run the manifest names: never loaded
    pipeline.mkdir()
    (pipeline / "pipeline.jsonl").write_text('{"kind": "pipeline_step"}\n')
    runs = [{"folder": "h200x4", "device": "h200", "host": "reference"}]
    (tmp_path / "runs.json").write_text(json.dumps({"runs": runs}))
    records, files = calibrate.load_measurements(tmp_path, "h200")
    assert [Path(f).parent.name for f in files] == ["h200x4"]
    assert {r.kind for r in records} == {"tp_layer"} and len(records) == 4
    prior = prior_efficiency()
    assert calibrate.fit(records, prior=prior, sweeps=1) == prior  # no stage takes tp_layer
    scored = calibrate.score(records, prior)
    assert list(scored.summary["kind"]) == ["tp_layer"] and not scored.errors
