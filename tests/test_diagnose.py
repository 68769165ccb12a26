"""gpuplan diagnose: each printed command reproduces its row; the walk only ever gains."""

from __future__ import annotations

import json
import shlex

import pytest

from gpuplan.cli import main
from gpuplan.sim.diagnose import with_edits

TRAIN = ["--model", "llama3-8b", "--gpus", "16", "--tp", "2", "--pp", "2", "--global-batch",
         "32", "--seq", "2048", "--attention", "unfused"]  # fmt: skip
SERVE = ["--model", "llama3-8b", "--gpu", "h200", "--tp", "1", "--replicas", "2", "--rate",
         "20", "--prompt-tokens", "512", "--output-tokens", "64", "--requests", "240"]  # fmt: skip


def _json(capsys, argv) -> dict:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def _check_walk(capsys, kind: str, flags: list[str], key: str) -> dict:
    doc = _json(capsys, ["diagnose", kind, *flags, "--json"])
    assert [r["layer"] for r in doc["layers"]] == [1, 2, 3, 4, 5]
    before = doc["baseline"]["metric"]
    for r in doc["layers"]:
        assert r["gain"] >= 0 and r["metric_after"] == pytest.approx(before - r["gain"])
        before = r["metric_after"]
        if r["gain"] == 0:
            assert r["change"].startswith("nothing to gain: ")
        argv = shlex.split(r["command"])[1:]
        assert argv[0] == kind
        rerun = _json(capsys, [*argv, "--json"])
        got = rerun[key]["mean"] if kind == "serve" else rerun[key]
        assert got == pytest.approx(r["figures"][key], rel=1e-9), r["command"]
    gains = sum(r["gain"] for r in doc["layers"])
    assert sum(r["share"] for r in doc["layers"]) == pytest.approx(1.0 if gains else 0.0)
    assert 0 < doc["limit"]["metric"] < doc["layers"][-1]["metric_after"]
    return doc


@pytest.mark.slow
def test_train_walk_commands_reproduce_each_row(capsys):
    doc = _check_walk(capsys, "train", TRAIN, "step_time_s")
    assert doc["layers"][0]["change"].startswith("fused attention")  # unfused was given
    assert doc["layers"][0]["gain"] > 0


@pytest.mark.slow
def test_serve_walk_commands_reproduce_each_row(capsys):
    _check_walk(capsys, "serve", SERVE, "e2e_s")


def test_a_second_setup_flag_is_refused_in_one_line(capsys):
    assert main(["diagnose", "train", *TRAIN, "--reproduce"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--reproduce" in err


def test_with_edits_switches_and_their_no_twins():
    s = {"--model": "m", "--no-overlap-tp": None, "--sp": None}
    assert with_edits(s, {"--overlap-tp": True}) == {"--model": "m", "--sp": None,
                                                     "--overlap-tp": None}  # fmt: skip
    assert with_edits(s, {"--sp": None, "--tp": 4}) == {"--model": "m", "--no-overlap-tp": None,
                                                        "--tp": "4"}  # fmt: skip


def test_screening_keeps_only_what_the_full_price_confirms():
    from gpuplan.sim.diagnose import Candidate, LayerOffer, Limit, Priced, walk

    full = {"a": 1.0, "b": 3.0}  # b looks best when screened, but is worse in full

    def price(s):
        return Priced(metric=10.0 - sum(full[k[2:]] for k in s if k[2:] in full), figures={})

    def screen(s):
        return Priced(metric=10.0 - sum({"a": 1.0, "b": 5.0}[k[2:]] for k in s if k[2:] in full),
                      figures={})  # fmt: skip

    def price_b_worse(s):
        p = price(s)
        return Priced(metric=p.metric + (6.0 if "--b" in s else 0.0), figures={})

    def offers(layer, s, now):
        if layer != 1:
            return LayerOffer()
        return LayerOffer(candidates=(Candidate(change="a", edits={"--a": True}),
                                      Candidate(change="b", edits={"--b": True})))  # fmt: skip

    d = walk({}, price=price_b_worse, screen=screen, offers=offers, kind="t", metric="m",
             limit=lambda s, now: Limit(metric=0.0, figures={}, basis=""))  # fmt: skip
    assert d.layers[0].change == "a" and d.layers[0].metric_after == 9.0
    assert d.layers[1].change.startswith("nothing to gain")
