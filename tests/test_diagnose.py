"""gpuplan diagnose: each printed command reproduces its row; the walk only ever gains."""

from __future__ import annotations

import json
import shlex

import pytest

from gpuplan.cli import main
from gpuplan.sim.diagnose.walk import with_edits

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
    from gpuplan.sim.diagnose.walk import Candidate, LayerOffer, Limit, Priced, walk

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


FSDP = ["--model", "llama3-8b", "--gpus", "8", "--tp", "1", "--dp", "8", "--zero", "3",
        "--global-batch", "8", "--seq", "2048", "--stack", "fsdp2"]  # fmt: skip


def _resolved_stack(argv):
    from gpuplan.cli.diagnose_cmd import command_parser
    from gpuplan.cli.train_cmd import resolve_cluster, resolve_stack

    args = command_parser("train").parse_args(argv)
    stack = resolve_stack(args, resolve_cluster(args).accelerator)
    return stack, {k: getattr(args, k) for k in ("state_precision", "overlap_dp", "overlap_tp",
                                                  "overlap_pp")}  # fmt: skip


def test_train_layer4_changes_compilation_only_and_its_command_reproduces(capsys):
    import dataclasses

    from gpuplan.cli.diagnose_cmd import settings_of
    from gpuplan.sim.diagnose.layers import TRAIN_COMPILATION_FLAGS

    doc = _json(capsys, ["diagnose", "train", *FSDP, "--json"])
    before, row = doc["layers"][2], doc["layers"][3]
    assert row["gain"] > 0 and "--impl compiled" in row["change"]  # fsdp2 runs eager ops
    old, new = (shlex.split(r["command"])[2:] for r in (before, row))
    old_s, new_s = (settings_of("train", a) for a in (old, new))
    changed = {f for f in old_s.keys() | new_s.keys() if old_s.get(f) != new_s.get(f)}
    assert changed and changed <= set(TRAIN_COMPILATION_FLAGS), changed
    (s_old, opts_old), (s_new, opts_new) = _resolved_stack(old), _resolved_stack(new)
    assert s_new.name == "fsdp2" and s_new.optimizer == s_old.optimizer == "fused"
    assert s_new.elementwise == "compiled" and s_old.elementwise == "eager"
    assert dataclasses.replace(s_new, elementwise=s_old.elementwise) == s_old
    assert opts_new == opts_old  # state precision and overlaps: the stack's, as before
    rerun = _json(capsys, [*shlex.split(row["command"])[1:], "--json"])
    assert rerun["step_time_s"] == pytest.approx(row["figures"]["step_time_s"], rel=1e-12)
    assert rerun["stack"]["elementwise"] == "compiled"


def test_serve_layer4_offers_graphs_and_fusion_on_the_stack_in_force():
    from gpuplan.hwmodels.accelerators import get_accelerator
    from gpuplan.sim.diagnose.layers import SERVE_COMPILATION_FLAGS, serving_offers
    from gpuplan.workloads.presets import get_model

    offers = serving_offers(get_model("llama3-8b"), get_accelerator("h200"), gpus=1,
                            default_stack="gpuplan-server")  # fmt: skip
    off = offers(4, {"--model": "llama3-8b", "--no-cuda-graph": None}, None)
    assert [c.change for c in off.candidates][0] == "CUDA graphs for decode"
    assert all(set(c.edits) <= set(SERVE_COMPILATION_FLAGS) for c in off.candidates)
    assert {c.edits.get("--impl") for c in off.candidates} == {None, "compiled"}  # fused: own
    trt = offers(4, {"--model": "llama3-8b", "--stack": "eager-2023"}, None)
    assert "eager-2023 decodes without CUDA graphs" in trt.why


def test_a_layer_with_nothing_to_gain_says_why_for_each_candidate():
    from gpuplan.sim.diagnose.walk import Candidate, LayerOffer, Limit, Priced, walk

    def price(s):
        return Priced(metric=10.0 + (1.0 if "--slow" in s else 0.0), figures={},
                      ok="--big" not in s)  # fmt: skip

    def offers(layer, s, now):
        if layer != 4:
            return LayerOffer()
        return LayerOffer(candidates=(Candidate(change="slow", edits={"--slow": True}),
                                      Candidate(change="big", edits={"--big": True})),
                          why="as given")  # fmt: skip

    d = walk({}, price=price, offers=offers, kind="t", metric="m",
             limit=lambda s, now: Limit(metric=0.0, figures={}, basis=""))  # fmt: skip
    assert d.layers[3].change == ("nothing to gain: none is faster: slow +10.0%, "
                                  "big does not fit (as given)")  # fmt: skip


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["diagnose", "train", "--gpus", "8"], "gpuplan diagnose train needs --model"),
        (["diagnose", "serve", "--model", "llama3-8b"], "gpuplan diagnose serve needs --gpu"),
        (["diagnose", "serve", "plan", "--model", "llama3-8b"], "unrecognized arguments: plan"),
    ],
)
def test_a_setup_that_is_not_one_is_refused_in_one_line_naming_the_flag(capsys, argv, message):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and message in err
