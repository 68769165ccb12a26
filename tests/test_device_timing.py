"""Device timing (a profiler's kernel durations in a busy stream) for elementwise kernels."""

import json
import math
import statistics
from pathlib import Path

from gpuplan.hwmodels.device_timing import device_efficiency, device_timing_data
from gpuplan.hwmodels.efficiency import efficiency_for, queued
from gpuplan.validate.device_timing import DEFAULT_RECORDS, derive
from gpuplan.validate.record_prediction import predict_breakdown, predict_record
from gpuplan.validate.records import read_records

ROOT = Path(__file__).parents[1]


def _ew(op, tokens, hidden, timing):
    return {"op": op, "tokens": tokens, "hidden": hidden, "pass": "fwd", "dtype": "bf16",
            "timing": timing}  # fmt: skip


def test_the_committed_constants_are_what_the_h200_profiler_records_give():
    records = [json.loads(line) for line in (ROOT / DEFAULT_RECORDS).read_text().splitlines()]
    derived = derive(records, efficiency_for("h200"))
    data = device_timing_data()
    assert math.isclose(derived["stream_gap_s"], data["stream_gap_s"], rel_tol=1e-9)
    assert derived["row_reduction_s_per_elem"].keys() == data["row_reduction_s_per_elem"].keys()
    for op, value in derived["row_reduction_s_per_elem"].items():
        assert math.isclose(value, data["row_reduction_s_per_elem"][op], rel_tol=1e-9)


def test_a_kernel_in_device_timing_costs_the_queued_fixed_cost_less_the_stream_gap():
    eff = efficiency_for("h200")
    dev = device_efficiency(eff)
    gap = device_timing_data()["stream_gap_s"]
    assert dev.steady_state
    assert math.isclose(dev.kernel_overhead_s, queued(eff).kernel_overhead_s - gap)
    assert 0 < dev.kernel_overhead_s < eff.kernel_overhead_s


def test_device_timing_drops_launch_items_and_prices_a_small_add_below_its_isolated_time():
    iso = predict_breakdown("elementwise", "h200", _ew("add", 16, 4096, "isolated"))
    dev = predict_breakdown("elementwise", "h200", _ew("add", 16, 4096, "device"))
    assert not [i for i in dev.items if i.category == "launch"]
    assert dev.total_s < iso.total_s


def test_gemm_device_timing_keeps_the_isolated_kernel_price():
    p = {"m": 4096, "n": 4096, "k": 4096, "dtype": "bf16"}
    iso = predict_breakdown("gemm", "h200", p | {"timing": "isolated"})
    dev = predict_breakdown("gemm", "h200", p | {"timing": "device"})
    kernel = [i.time_s for i in iso.items if i.category != "launch"]
    assert math.isclose(dev.total_s, sum(kernel))


def test_the_h200_profiler_elementwise_records_score_within_8_percent_median():
    records, _ = read_records(ROOT / DEFAULT_RECORDS)
    errors = [abs(predict_record(r)["time_s"] / r.measured["time_s"] - 1) for r in records
              if r.kind == "elementwise" and r.params.get("timing") == "device"]
    assert len(errors) == 84
    assert statistics.median(errors) < 0.08


def test_device_timing_cli_errors_are_one_line(tmp_path, capsys):
    from gpuplan.validate.device_timing import main

    missing = str(tmp_path / "missing.jsonl")
    assert main([missing]) == 2
    assert capsys.readouterr().err == f"error: RECORDS={missing!r}: No such file or directory\n"
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    assert main([str(empty)]) == 2
    assert capsys.readouterr().err == f"error: RECORDS={str(empty)!r}: no records\n"
    isolated = tmp_path / "isolated.jsonl"
    isolated.write_text(json.dumps({"kind": "elementwise", "device": "h200",
                                    "params": _ew("add", 16, 4096, "isolated"),
                                    "measured": {"time_s": 1e-5}, "stats": {}}) + "\n")
    assert main([str(isolated)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no device-timed single-kernel record" in err
    garbled = tmp_path / "garbled.jsonl"
    garbled.write_text("{\n")
    assert main([str(garbled)]) == 2
    assert capsys.readouterr().err == (f"error: RECORDS={str(garbled)!r}: not JSON Lines: give "
                                       "the stack campaign's ops.jsonl\n")
