"""Every answer of the fixed command list is the recorded one, byte for byte
(benchmarks/golden_outputs.py; re-record with --record in the commit that moves a price)."""

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("golden_outputs",
                                               ROOT / "benchmarks" / "golden_outputs.py")
golden = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(golden)


def test_every_listed_command_prints_its_recorded_answer():
    commands = golden.read_commands()
    got = golden.run_all(commands, workers=2)
    assert golden.differences(got, json.loads(golden.OUTPUTS.read_text())) == []


def test_every_listed_command_is_recorded():
    recorded = json.loads(golden.OUTPUTS.read_text())
    assert set(golden.read_commands(include_slow=True)) == set(recorded)


def test_a_changed_answer_is_named():
    got = {"models": {"rc": 0, "sha256": "x", "bytes": 1}}
    want = {"models": {"rc": 0, "sha256": "y", "bytes": 1}}
    assert golden.differences(got, want) == ["changed (rc 0 -> 0, 1 -> 1 bytes): models"]
    assert golden.differences(got, {}) == ["not recorded: models"]
