"""Every command's bands hold their own point: for each key of a document's ``error_band`` (and of
each ``serve plan`` row's), the number the document prints for that key lies inside. Over every
command that prints a band, and over random setups of the cheap ones (hypothesis)."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplan.cli import main
from gpuplan.validate.bands.documents import flat_serve_values


def _values(doc: dict) -> dict[str, float]:
    """A document's numbers by the keys its bands use."""
    out = {k: v for k, v in doc.items() if isinstance(v, int | float) and not isinstance(v, bool)}
    if isinstance(doc.get("budget"), dict):
        out |= {k: v for k, v in doc["budget"].items() if isinstance(v, int | float)}
    out |= flat_serve_values(doc)
    return out


def _check(doc: dict, where: str) -> int:
    checked = 0
    # search: the document's bands are its fastest strategy's (search_cmd)
    values = _values(doc["fastest"]) if isinstance(doc.get("fastest"), dict) else _values(doc)
    for key, band in (doc.get("error_band") or {}).items():
        if key not in values or values[key] is None or not math.isfinite(values[key]):
            continue
        lo, hi = band
        v = values[key]
        slack = 1e-9 * max(abs(v), 1e-30)
        assert lo - slack <= v <= hi + slack, f"{where}: {key}={v} outside its band [{lo}, {hi}]"
        checked += 1
    for k, row in enumerate(doc.get("configs") or []):
        checked += _check(row, f"{where} row {k}")
    for k, case in enumerate(doc.get("scenario") or []):
        checked += _check(case, f"{where} case {k}")
    return checked


def _json(capsys, argv) -> dict:
    capsys.readouterr()
    code = main([*argv, "--json"])
    out = capsys.readouterr().out
    assert code == 0, argv
    return json.loads(out)


COMMANDS = [
    ["estimate"],
    ["estimate", "decode-step", "--model", "llama3-8b", "--batch", "16", "--context", "2048"],
    ["estimate", "prefill-step", "--model", "llama3-8b", "--batch", "4", "--seq", "2048"],
    ["estimate", "gemm", "--m", "4096", "--n", "4096", "--k", "4096"],
    ["train", "--model", "llama3-8b", "--gpus", "8", "--zero", "3", "--tokens", "1e11"],
    ["train", "--model", "llama3-70b", "--gpus", "64", "--tp", "8", "--pp", "2", "--global-batch",
     "64"],
    ["search", "train", "--model", "llama3-8b", "--gpus", "8", "--global-batch", "32", "--top", "3",
     "--no-timing"],
    ["serve", "--model", "llama3-8b", "--gpu", "h200", "--rate", "4", "--prompt-tokens", "512",
     "--output-tokens", "64", "--requests", "60", "--no-timing"],
    ["serve", "plan", "--model", "llama3-8b", "--gpu", "h200", "--rate", "2", "--slo-ttft-s", "1",
     "--slo-tpot-s", "0.2", "--no-timing"],
]  # fmt: skip


@pytest.mark.parametrize("argv", COMMANDS, ids=[" ".join(a[:3]) for a in COMMANDS])
def test_every_band_of_every_command_holds_its_point(capsys, argv):
    assert _check(_json(capsys, argv), " ".join(argv)) > 0


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=st.integers(1, 64), context=st.sampled_from([256, 1024, 4096]),
       gpu=st.sampled_from(["h200", "h100-sxm", "a100-sxm-80gb"]))  # fmt: skip
def test_random_decode_steps_hold_their_points(capsys, batch, context, gpu):
    doc = _json(capsys, ["estimate", "decode-step", "--model", "llama3.2-3b", "--batch",
                         str(batch), "--context", str(context), "--gpu", gpu])  # fmt: skip
    assert _check(doc, f"decode {batch} {context} {gpu}") > 0


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(zero=st.sampled_from(["1", "2", "3"]), tp=st.sampled_from(["1", "2", "4"]),
       gpu=st.sampled_from(["h200", "h100-sxm"]))  # fmt: skip
def test_random_training_layouts_hold_their_points(capsys, zero, tp, gpu):
    doc = _json(capsys, ["train", "--model", "llama3-8b", "--gpus", "8", "--gpu", gpu, "--zero",
                         zero, "--tp", tp, "--tokens", "1e10", "--allow-infeasible"])  # fmt: skip
    assert _check(doc, f"train zero {zero} tp {tp} {gpu}") > 0
