"""Reading measurement records: every key of the contract checked, every bad line reported."""

import copy
import json
from pathlib import Path

import pytest

from gpuplan.errors import GpuplanError
from gpuplan.validate.record_kinds import KINDS, MEASURED, PARAM_RULES
from gpuplan.validate.records import Record, parse_lines, parse_record, read_records

DATA = Path(__file__).parent / "data"
SAMPLE = Path(__file__).parents[1] / "data" / "sample.jsonl"
SAMPLE_MODELS = SAMPLE.with_name("sample_models.jsonl")  # the whole-model kinds
DEVICES = ("h200", "h100-sxm", "a100-sxm-80gb")


def known() -> tuple[str, ...]:
    return DEVICES


def sample_objects() -> dict[str, dict]:
    """The first sample record of each kind, as decoded JSON."""
    out = {}
    for line in (SAMPLE.read_text() + SAMPLE_MODELS.read_text()).splitlines():
        obj = json.loads(line)
        out.setdefault(obj["kind"], obj)
    return out


def reason_of(obj) -> str:
    with pytest.raises(GpuplanError) as err:
        parse_record(obj, devices=DEVICES)
    return str(err.value)


def test_the_sample_file_reads_without_errors_and_holds_every_kind():
    records, errors = read_records(SAMPLE, known_devices=known)
    models, model_errors = read_records(SAMPLE_MODELS, known_devices=known)
    assert errors == [] and model_errors == []
    assert {r.kind for r in records + models} == set(KINDS)
    assert all("not a measurement" in r.source for r in records)
    assert [r.line_no for r in records] == list(range(1, len(records) + 1))


def test_a_record_keeps_the_contract_keys_and_drops_extra_ones():
    obj = sample_objects()["gemm"]
    obj = obj | {"params": obj["params"] | {"note": "x"}, "extra": 1}
    obj["measured"] = obj["measured"] | {"time_std_s": 1e-6}
    record = parse_record(obj, line_no=7)
    assert record == Record(
        kind="gemm",
        device="h200",
        params={"m": 4096, "n": 11008, "k": 4096, "dtype": "bf16", "stack": "harness"},
        measured={"time_s": 0.000545},
        source=obj["source"],
        line_no=7,
    )


def test_peak_bytes_is_kept_for_layer_and_optional():
    obj = sample_objects()["layer"]
    assert parse_record(obj).measured["peak_bytes"] == 723517440
    del obj["measured"]["peak_bytes"]
    assert parse_record(obj).measured == {"time_s": obj["measured"]["time_s"]}


@pytest.mark.parametrize(
    ("kind", "name"), [(k, n) for k in KINDS for n in PARAM_RULES[k]], ids=lambda x: x
)
def test_every_missing_param_is_named(kind, name):
    obj = copy.deepcopy(sample_objects()[kind])
    del obj["params"][name]
    reason = reason_of(obj)
    assert f"params.{name} is missing" in reason
    assert kind in reason


def _bad_value(rule):
    """A value that breaks the rule: a float for an integer, a string for a boolean."""
    if rule == "positive integer":
        return 4096.0
    if rule == "boolean":
        return "true"
    return "nonsense"


@pytest.mark.parametrize(
    ("kind", "name"), [(k, n) for k in KINDS for n in PARAM_RULES[k]], ids=lambda x: x
)
def test_every_invalid_param_is_named_with_its_value_and_what_is_valid(kind, name):
    obj = copy.deepcopy(sample_objects()[kind])
    rule = PARAM_RULES[kind][name]
    obj["params"][name] = _bad_value(rule)
    reason = reason_of(obj)
    assert f"params.{name}={_bad_value(rule)!r} is invalid" in reason
    if isinstance(rule, tuple):
        assert ", ".join(rule) in reason
    else:
        assert rule.split()[-1] in reason  # "integer" or "boolean"


@pytest.mark.parametrize("value", [0, -4, True, None, "4096"])
def test_an_integer_must_be_a_positive_json_integer(value):
    obj = sample_objects()["gemm"]
    obj["params"]["m"] = value
    assert "params.m=" in reason_of(obj)


def test_a_boolean_must_be_a_json_boolean_not_a_number():
    obj = sample_objects()["decode_step"]
    obj["params"]["cuda_graph"] = 1
    assert "params.cuda_graph=1 is invalid: it must be a JSON boolean" in reason_of(obj)


def test_heads_q_must_be_a_multiple_of_heads_kv():
    obj = sample_objects()["attention"]
    obj["params"]["heads_kv"] = 6
    assert "params.heads_q=32 is invalid: it must be a multiple of params.heads_kv=6" in (
        reason_of(obj)
    )


def test_ffn_must_split_evenly_over_tp_ranks():
    obj = sample_objects()["tp_mlp"]
    obj["params"]["tp"] = 3
    assert "params.ffn=14336" in reason_of(obj)


@pytest.mark.parametrize("kind", KINDS)
def test_every_missing_or_invalid_metric_is_named(kind):
    obj = sample_objects()[kind]
    for metric in MEASURED[kind][0]:
        broken = copy.deepcopy(obj)
        del broken["measured"][metric]
        assert f"measured.{metric} is missing" in reason_of(broken)
    for metric in MEASURED[kind][0] + MEASURED[kind][1]:
        for value in (0, -1.0, "fast", float("nan"), float("inf"), True):
            broken = copy.deepcopy(obj)
            broken["measured"][metric] = value
            assert f"measured.{metric}={value!r} is invalid" in reason_of(broken)


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"kind": "conv2d"}, "kind='conv2d' is invalid: choose one of gemm, attention"),
        ({"kind": ["gemm"]}, "kind=['gemm'] is invalid"),
        ({"device": "h300"}, "unknown device 'h300'; did you mean h200"),
        ({"device": 200}, "device=200 is invalid: it must be a string"),
        ({"source": 3}, "source=3 is invalid: it must be a string"),
        ({"params": [1, 2]}, "params must be a JSON object, got an array"),
        ({"measured": 0.1}, "measured must be a JSON object, got a number"),
    ],
)
def test_every_invalid_top_level_key_is_named(change, expected):
    assert expected in reason_of(sample_objects()["gemm"] | change)


@pytest.mark.parametrize("key", ["kind", "device", "params", "measured"])
def test_every_missing_top_level_key_is_named(key):
    obj = sample_objects()["gemm"]
    del obj[key]
    assert f"{key} is missing" in reason_of(obj)


def test_an_unknown_device_lists_the_known_ones():
    obj = sample_objects()["gemm"] | {"device": "b300"}
    assert "known: a100-sxm-80gb, h100-sxm, h200" in reason_of(obj)


def test_without_a_catalogue_any_device_name_is_accepted():
    assert parse_record(sample_objects()["gemm"] | {"device": "my-gpu"}).device == "my-gpu"


def test_a_line_with_several_problems_names_them_all():
    obj = sample_objects()["gemm"]
    obj["params"] = {"m": 0, "n": 1, "k": 1, "dtype": "bf8"}
    reason = reason_of(obj)
    assert "params.m=0" in reason and "params.dtype='bf8'" in reason


def test_a_bad_file_reports_each_bad_line_and_reads_the_others():
    records, errors = read_records(DATA / "bad_records.jsonl", known_devices=known)
    assert [(r.line_no, r.kind) for r in records] == [(1, "gemm"), (11, "collective")]
    by_line = {e.line_no: e.reason for e in errors}
    assert sorted(by_line) == [2, 3, 5, 6, 7, 8, 9, 10]  # line 4 is blank: skipped
    assert by_line[2].startswith("not valid JSON")
    assert "kind='conv2d'" in by_line[3]
    assert "params.k is missing" in by_line[5]
    assert "params.dtype='bf8'" in by_line[6]
    assert "params.causal='true'" in by_line[7]
    assert "unknown device 'h300'" in by_line[8]
    assert "measured.time_s=-1" in by_line[9]
    assert "must be a JSON object, got an array" in by_line[10]
    assert str(errors[0]).startswith("line 2: not valid JSON")


def test_a_line_that_is_not_utf8_is_reported():
    records, errors = parse_lines([b"\xff\xfe{}"])
    assert records == []
    assert errors[0].line_no == 1 and "not UTF-8" in errors[0].reason


def test_a_missing_file_is_an_error_naming_it(tmp_path):
    with pytest.raises(GpuplanError, match="nothere.jsonl' does not exist"):
        read_records(tmp_path / "nothere.jsonl")


def test_a_directory_is_not_a_records_file(tmp_path):
    with pytest.raises(GpuplanError, match="is a directory"):
        read_records(tmp_path)


@pytest.mark.parametrize("text", ["", "\n  \n\n"])
def test_an_empty_file_is_an_error(tmp_path, text):
    path = tmp_path / "empty.jsonl"
    path.write_text(text)
    with pytest.raises(GpuplanError, match="is empty"):
        read_records(path)


def test_an_integer_beyond_what_a_float_holds_is_refused():
    obj = sample_objects()["gemm"]
    obj = obj | {"params": obj["params"] | {"m": 10**30}}
    assert "params.m=1000000000000000000000000000000 is invalid" in reason_of(obj)
    assert "at most 2**53" in reason_of(obj)


@pytest.mark.parametrize("line", ['{"kind": "gemm", "x": ' + "9" * 5000 + "}",
                                  "[" * 100_000 + "]" * 100_000])  # fmt: skip
def test_a_line_json_cannot_hold_is_a_bad_line_and_the_others_still_read(line):
    good = json.dumps(sample_objects()["gemm"])
    records, errors = parse_lines([good, line, good])
    assert [r.line_no for r in records] == [1, 3]
    assert errors[0].line_no == 2 and errors[0].reason.startswith("not valid JSON")
    assert "\n" not in errors[0].reason


def test_a_binary_file_is_one_error_not_a_line_each(tmp_path):
    path = tmp_path / "blob.jsonl"
    path.write_bytes(bytes(range(128, 256)) * 8 + b"\n\xff\xfe\n")
    with pytest.raises(GpuplanError, match="not UTF-8 text on any line"):
        read_records(path)


def test_one_binary_line_among_good_ones_loses_nothing_else(tmp_path):
    good = json.dumps(sample_objects()["gemm"]).encode()
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(good + b"\n\xff\xfe\x00\n" + good + b"\n")
    records, errors = read_records(path, known_devices=known)
    assert [r.line_no for r in records] == [1, 3]
    assert [e.line_no for e in errors] == [2] and "not UTF-8" in errors[0].reason


def test_an_integer_too_long_to_print_is_named_by_its_size():
    obj = sample_objects()["gemm"]
    obj = obj | {"params": obj["params"] | {"m": 10**5000}}
    assert "params.m=an integer of 16,610 bits is invalid" in reason_of(obj)


def test_a_whole_model_record_naming_an_unknown_model_is_one_line_naming_it():
    rec = {"kind": "prefill_step", "device": "h200", "source": "x", "measured": {"time_s": 0.1},
           "params": {"model": "gpt-9", "layers": 2, "batch": 1, "seq": 16, "dtype": "bf16"}}
    with pytest.raises(GpuplanError) as err:
        parse_record(rec)
    message = str(err.value)
    assert "\n" not in message
    assert "params.model='gpt-9' is invalid: choose a model name among" in message
    assert "llama3-8b" in message
