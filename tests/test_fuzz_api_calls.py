"""The valid calls ``benchmarks/fuzz_api.py`` starts from stay valid: one for every public name
of ``gpuplan.api``, and each returns a sane result (the fuzzer's own judgement: no exception,
no NaN, no negative or infinite duration), so a changed signature cannot rot the table."""

import sys
from pathlib import Path

import pytest

import gpuplan.api as api

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from fuzz_api import run_one  # noqa: E402
from fuzz_api_calls import base_calls  # noqa: E402


@pytest.fixture(scope="module")
def calls(tmp_path_factory):
    return base_calls(tmp_path_factory.mktemp("fuzz-api"))


def test_every_public_name_has_a_base_call(calls):
    public = set(api.__all__) - {"GpuplanError"}  # an exception class, not fuzzed
    assert public == {c.name for c in calls}


def test_every_base_call_is_valid(calls):
    bad = {c.name: run_one(getattr(api, c.name), c, [], {}) for c in calls}
    assert {name: r for name, r in bad.items() if r != ("ok", "")} == {}
