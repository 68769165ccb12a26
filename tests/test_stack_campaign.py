"""The stack campaign at tiny sizes on the CPU, and the stack fit on synthetic records."""

from __future__ import annotations

import json

import pytest

from gpuplan.validate.fit_stacks import cases as fit_cases
from gpuplan.validate.fit_stacks import kernels as fit_stacks
from gpuplan.validate.records import parse_record, read_records

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def campaign(tmp_path_factory):
    from gpuplan.validate.stack_campaign import hf, runner

    out = tmp_path_factory.mktemp("campaign")
    hf_available = hf.transformers_or_none() is not None
    parts = ["sdpa", "ops"] + (["hf"] if hf_available else [])
    summary = runner.run(out, device="cpu", budget_s=60, only=parts, ceilings=False)
    return out, summary


def test_every_part_writes_records_of_the_contract_with_stack_and_timing(campaign):
    out, summary = campaign
    for name in ("attention", "ops"):
        records, errors = read_records(out / f"{name}.jsonl")
        assert errors == [] and records
        assert {r.params["stack"] for r in records} == {"pytorch"}
        assert {r.params["timing"] for r in records} == {"isolated", "device"}
    attention, _ = read_records(out / "attention.jsonl")
    kernels = {r.params.get("attention_kernel") for r in attention}
    assert None in kernels and "flash2" in kernels and "math" in kernels  # default + forced
    ops, _ = read_records(out / "ops.jsonl")
    assert {r.kind for r in ops} == {"gemm", "elementwise"}
    assert summary["sdpa"]["shapes"] == 3


def test_environment_names_the_versions_and_the_host_probes(campaign):
    out, _ = campaign
    env = json.loads((out / "environment.json").read_text())
    for key in ("torch", "transformers", "python", "host_probe_start_s_per_launch",
                "host_probe_end_s_per_launch", "summary"):
        assert key in env
    assert env["host_probe_start_s_per_launch"] > 0


def test_hf_parts_say_why_they_are_skipped_without_transformers(tmp_path, monkeypatch, capsys):
    from gpuplan.validate.stack_campaign import hf
    from gpuplan.validate.stack_campaign.common import TimeBox

    monkeypatch.setattr(hf, "transformers_or_none", lambda: None)
    for compiled in (False, True):
        got = hf.run(torch, "cpu", "cpu", tmp_path, TimeBox(5), True, compiled=compiled)
        assert got == {"skipped": "transformers is not installed"}
    assert "transformers is not installed here" in capsys.readouterr().out
    assert not list(tmp_path.iterdir())


def test_a_record_with_keys_other_than_its_kinds_is_refused():
    from gpuplan.validate.stack_campaign.common import make_record

    params = {"model": "llama3-8b", "layers": 2, "batch": 1, "seq": 16, "dtype": "bf16"}
    rec = make_record("prefill_step", "h200", params | {"stack": "hf-transformers"},
                      {"time_s": 0.1, "peak_bytes": 10}, "x")
    assert parse_record(rec).params["stack"] == "hf-transformers"
    with pytest.raises(ValueError, match="differ"):
        make_record("prefill_step", "h200", params | {"note": 1}, {"time_s": 0.1}, "x")


def test_the_cli_refuses_unknown_parts_and_models(capsys):
    from gpuplan.validate.stack_campaign.runner import main

    for argv in (["--out", "x", "--only", "nope"], ["--out", "x", "--models", "gpt-9"],
                 ["--out", "x", "--budget-s", "0"]):
        with pytest.raises(SystemExit) as err:
            main(argv)
        assert err.value.code == 2
    assert "choose among" in capsys.readouterr().err


# --- the fit ------------------------------------------------------------------------------

def _attention(seq, pass_, kernel, causal=True):
    params = {"batch": max(1, 16384 // seq), "heads_q": 32, "heads_kv": 8, "seq_q": seq,
              "seq_kv": seq, "head_dim": 128, "causal": causal, "pass": pass_, "dtype": "bf16",
              "stack": "pytorch", "timing": "device"}
    if kernel:
        params["attention_kernel"] = kernel
    return params


def _synthetic(model, truth):
    """Records whose 'measured' times are the model's own under ``truth``."""
    cases = [("attention", _attention(s, p, k, c)) for s in (2048, 4096, 8192, 16384)
             for p in ("fwd", "fwd_bwd") for k in (None, "cudnn") for c in (True, False)]
    for layers, ctx in ((2, 1024), (4, 2048), (8, 4096), (3, 512)):
        cases.append(("model_decode_step", {"model": "llama3-8b", "layers": layers, "batch": 1,
                                            "context": ctx, "kv_cache": "dynamic",
                                            "dtype": "bf16", "stack": "hf-transformers"}))
    records = []
    for kind, params in cases:
        rec = parse_record({"kind": kind, "device": "h200", "params": params,
                            "measured": {"time_s": 1.0}})
        t = model.predict(rec, truth)["time_s"]
        records.append(parse_record({"kind": kind, "device": "h200", "params": params,
                                     "measured": {"time_s": t}}))
    return records


def test_the_fit_recovers_known_perturbations_of_the_priors():
    model = fit_stacks.Model("h200")
    truth = {"cudnn_fwd": model.values["cudnn_fwd"] * 1.3,
             "cudnn_bwd": model.values["cudnn_bwd"] * 0.8,
             "module_call_s": model.values["module_call_s"] * 2.0}
    records = _synthetic(model, truth)
    fit, held = fit_cases.split(records, seed=0)
    got = fit_stacks.fit(model, fit)
    for name, value in truth.items():
        assert got[name]["fitted"] == pytest.approx(value, rel=0.03), name
    assert got["efficient_fwd"]["fitted"] is None  # nothing measured it
    rows = fit_stacks.held_out_table(model, held, got)
    assert {(r["stack"], r["kind"]) for r in rows} == {("pytorch", "attention"),
                                                      ("hf-transformers", "model_decode_step")}
    assert all(r["fit_median_pct"] < 2 < r["prior_median_pct"] for r in rows)


def test_the_split_is_seeded_stratified_and_keeps_a_case_on_one_side():
    params = [_attention(s, p, k) for s in (512, 1024, 2048, 4096, 8192)
              for p in ("fwd", "fwd_bwd") for k in ("cudnn", "flash2")]
    records = [parse_record({"kind": "attention", "device": "h200",
                             "params": p | {"timing": t}, "measured": {"time_s": 1e-3}})
               for p in params for t in ("isolated", "device")]
    fit, held = fit_cases.split(records, seed=3)
    again = fit_cases.split(records, seed=3)
    assert [r.params for r in fit] == [r.params for r in again[0]]
    assert len(fit) == 28 and len(held) == 12  # 70% of 20 cases, both timings of each
    side = {fit_cases._case_key(r): "fit" for r in fit}
    assert all(fit_cases._case_key(r) not in side for r in held)
    assert [r.params for r in fit] != [r.params for r in fit_cases.split(records, seed=4)[0]]


def test_whole_model_param_keys_match_the_record_contract():
    # the campaign keeps its own copy (it imports nothing of gpuplan but the harness)
    from gpuplan.validate.record_kinds import MODEL_KINDS, PARAM_RULES
    from gpuplan.validate.stack_campaign.common import MODEL_PARAM_KEYS

    assert {kind: tuple(PARAM_RULES[kind]) for kind in MODEL_KINDS} == MODEL_PARAM_KEYS


def test_the_grouped_gemm_param_keys_match_the_record_contract():
    from gpuplan.validate.record_kinds import PARAM_RULES
    from gpuplan.validate.stack_campaign.common import CONTRACT_PARAM_KEYS

    assert CONTRACT_PARAM_KEYS["grouped_gemm"] == tuple(PARAM_RULES["grouped_gemm"])


def test_fit_stacks_data_errors_are_one_line_naming_the_folder(tmp_path, capsys):
    out = str(tmp_path / "fit.json")
    missing = tmp_path / "missing"
    assert fit_stacks.main(["--data", str(missing), "--out", out]) == 2
    assert capsys.readouterr().out == f"fit_stacks: error: --data {str(missing)!r}: not a folder of records\n"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert fit_stacks.main(["--data", str(empty), "--out", out]) == 2
    assert capsys.readouterr().out == f"fit_stacks: error: --data {str(empty)!r}: no records\n"


@pytest.mark.parametrize(("argv", "message"), [
    (["--only", "nope"], "--only 'nope': choose among sdpa, ops, grouped, sgemm, kprofile, hfprofile, cprofile, hostpair, hf, compile, families"),
    (["--models", "gpt-9"], "--models 'gpt-9': choose among"),
    (["--budget-s", "0"], "--budget-s 0.0: must be a positive number of seconds"),
    (["--weights", "sdpa=x"], "--weights 'sdpa=x': write part=share,... with numbers"),
    (["--only", "sdpa,ops", "--weights", "sdpa=1"],
     "--weights 'sdpa=1': give each part of --only a share > 0"),
    (["--only", "ops", "--weights", "ops=0"], "--weights 'ops=0': give each part of --only a share > 0"),
])
def test_each_cli_error_is_one_line_naming_the_flag_and_value(argv, message, capsys):
    from gpuplan.validate.stack_campaign.runner import main

    with pytest.raises(SystemExit) as err:
        main(["--out", "x", *argv])
    assert err.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert message in last
