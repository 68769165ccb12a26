"""Disaggregated pools of their own (``serve --prefill-gpu/--decode-gpu``, ``plan_disagg``) and
``serve plan``'s optional targets, TP lists and frontier."""

import json
import math

import numpy as np
import pytest

from gpuplan.cli import main
from gpuplan.errors import GpuplanError
from gpuplan.hwmodels.accelerators import get_accelerator
from gpuplan.sim.parallel.cost import price_for
from gpuplan.sim.runtime.serving.deployment import Deployment, serving_efficiency
from gpuplan.sim.runtime.serving.disagg import check_pool_link, kv_transfer_s
from gpuplan.sim.runtime.serving.kv_cache import kv_bytes_per_sequence
from gpuplan.sim.runtime.serving.plan import plan
from gpuplan.sim.runtime.serving.plan_disagg import PoolSpace, frontier
from gpuplan.sim.runtime.serving.plan_probe import verdict
from gpuplan.sim.runtime.serving.plan_space import SearchSpace, Slo
from gpuplan.workloads.presets import get_model

TRAFFIC = ["--rate", "2", "--prompt-tokens", "1024", "--output-tokens", "64", "--requests", "100"]


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def dep_on(gpu: str, tp: int, model: str = "llama3-70b") -> Deployment:
    acc = get_accelerator(gpu)
    return Deployment(model=get_model(model), acc=acc, eff=serving_efficiency(acc.key), tp=tp,
                      weight_dtype="fp8" if gpu != "a100-sxm-80gb" else "int8")  # fmt: skip


def test_a_mixed_gpu_disaggregated_run_prices_each_pool_on_its_own_gpu(capsys):
    code, out, err = run(capsys, "serve", "--model", "llama3-70b", "--prefill-gpu", "h100-sxm",
                         "--decode-gpu", "h200", "--prefill-tp", "4", "--decode-tp", "2",
                         "--decode-replicas", "2", "--weight-dtype", "fp8", *TRAFFIC, "--json")  # fmt: skip
    assert code == 0, err
    doc = json.loads(out)
    pre, dec = doc["pools"]["prefill"], doc["pools"]["decode"]
    assert (pre["gpu"], pre["tp"], pre["replicas"], pre["gpus"]) == ("h100-sxm", 4, 1, 4)
    assert (dec["gpu"], dec["tp"], dec["replicas"], dec["gpus"]) == ("h200", 2, 2, 4)
    for pool, gpu in ((pre, "h100-sxm"), (dec, "h200")):
        assert pool["usd_per_gpu_hour"] == price_for(gpu).usd_per_gpu_hour
        assert pool["usd_per_hour"] == pytest.approx(pool["gpus"] * pool["usd_per_gpu_hour"])
    assert pre["usd_per_gpu_hour"] != dec["usd_per_gpu_hour"]  # the two prices really differ
    assert doc["pools_total"]["usd_per_hour"] == pytest.approx(pre["usd_per_hour"] + dec["usd_per_hour"])
    assert doc["config"]["gpus"] == 8 and doc["config"]["disaggregate"] == "1:2"
    assert doc["kv_link"]["link"] == "scaleout" and doc["finished"] == 100


def test_each_pool_is_memory_checked_on_its_own_gpu(capsys):
    # bf16 Llama-3-70B at tp=1 fits an H200 (141 GB) with its cache, not an H100 (80 GB)
    code, _, err = run(capsys, "serve", "--model", "llama3-70b", "--prefill-gpu", "h100-sxm",
                       "--decode-gpu", "h200", *TRAFFIC)  # fmt: skip
    assert code == 2 and err.startswith("gpuplan: error: prefill pool: llama3-70b does not fit on h100-sxm")


def test_kv_transfer_between_gpu_types_is_bound_by_the_slower_sides_nic():
    pre, dec = dep_on("h100-sxm", 4), dep_on("a100-sxm-80gb", 2)
    tokens = 4096
    fixed = max(d.eff.collective_launch_s + d.eff.collective_latency_s for d in (pre, dec))
    side = {d.acc.key: kv_bytes_per_sequence(d.model, tokens, tp=d.tp, kv_dtype=d.kv_dtype)
            / (d.acc.scaleout_bytes_per_s * d.eff.collective_bw_fraction) for d in (pre, dec)}
    # catalogue: ConnectX-7 400 Gb/s per H100 (50e9 B/s), 200 Gb/s per A100 (25e9 B/s); and the
    # A100 side holds twice the bytes a GPU (tp=2 against 4): it binds
    assert side["a100-sxm-80gb"] > side["h100-sxm"]
    got = kv_transfer_s(pre, tokens, "scaleout", dec)
    assert got == pytest.approx(fixed + side["a100-sxm-80gb"], rel=1e-12)
    assert got > kv_transfer_s(pre, tokens, "scaleout")  # more than the prefill side alone


def test_pools_of_different_gpu_types_are_refused_a_scaleup_link(capsys):
    with pytest.raises(GpuplanError, match="different GPU types are different nodes"):
        check_pool_link(dep_on("h100-sxm", 4), dep_on("h200", 2), "scaleup")
    check_pool_link(dep_on("h200", 4), dep_on("h200", 2), "scaleup")  # one node: allowed
    code, _, err = run(capsys, "serve", "--model", "llama3-70b", "--prefill-gpu", "h100-sxm",
                       "--decode-gpu", "h200", "--prefill-tp", "4", "--weight-dtype", "fp8",
                       "--kv-link", "scaleup", *TRAFFIC)  # fmt: skip
    assert code == 2 and "--kv-link scaleout" in err and "\n" not in err.strip()


def test_pool_replicas_that_disagree_with_disaggregate_are_refused(capsys):
    code, _, err = run(capsys, "serve", "--model", "llama3-8b", "--gpu", "h200",
                       "--disaggregate", "1:2", "--decode-replicas", "3", *TRAFFIC)  # fmt: skip
    assert code == 2 and "--decode-replicas 3 disagrees with --disaggregate 1:2" in err


def test_disaggregate_alone_runs_as_before(capsys):
    args = ["serve", "--model", "llama3-8b", "--gpu", "h200", *TRAFFIC, "--json"]
    code, out, _ = run(capsys, *args, "--disaggregate", "1:2")
    code2, out2, _ = run(capsys, *args, "--prefill-replicas", "1", "--decode-replicas", "2")
    assert code == code2 == 0
    one, two = json.loads(out), json.loads(out2)
    assert one["ttft_s"] == two["ttft_s"] and one["tpot_s"] == two["tpot_s"]
    assert one["pools"]["decode"]["gpus"] == 2 and one["kv_link"]["bound_by"] == "both sides"


PLAN = ["serve", "plan", "--model", "llama3-8b", "--gpu", "h100-sxm", "--rate", "4",
        "--prompt-tokens", "512", "--output-tokens", "64", "--requests", "100", "--max-gpus", "8",
        "--no-timing"]  # fmt: skip


def test_plan_with_only_a_ttft_target_answers(capsys):
    code, out, err = run(capsys, *PLAN, "--slo-ttft-s", "0.5", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["slo"]["tpot_s"] is None and doc["configs"]
    assert all(row["ttft_p99_s"] <= 0.5 for row in doc["configs"])


def test_plan_without_any_target_is_refused(capsys):
    code, _, err = run(capsys, *PLAN)
    assert code == 2 and "needs --slo-ttft-s, --slo-tpot-s or both" in err


def test_tp_lists_parse_with_spaces_commas_or_both(capsys):
    from gpuplan.cli import build_parser

    parser = build_parser()
    for given in (["2", "4", "8"], ["2,4,8"], ["2,4", "8"]):
        args = parser.parse_args([*PLAN, "--slo-ttft-s", "1", "--tp", *given])
        assert args.tp == (2, 4, 8)
    code, _, err = run(capsys, *PLAN, "--slo-ttft-s", "1", "--tp", "2", "0")
    assert code == 2 and "--tp" in err


def test_plan_skips_a_tp_that_cannot_hold_the_model_and_still_answers():
    # bf16 Llama-3-70B (141 GB of weights) cannot sit on one 80 GB H100; tp=4 holds it
    lengths = (np.full(100, 512), np.full(100, 64))
    space = SearchSpace(tps=(1, 4), formats=(("bf16", "bf16"),), max_seqs=(64,), ratios=(),
                        max_gpus=16)  # fmt: skip
    got = plan("llama3-70b", "h100-sxm", rate_per_s=1.0, lengths=lengths, requests=100,
               slo=Slo(ttft_s=2.0), space=space, top=2)  # fmt: skip
    assert got.best_rows and all(r["tp"] == 4 for r in got.rows)


def test_a_plan_prices_each_pool_of_a_mixed_unit_at_its_own_gpu():
    lengths = (np.full(100, 1024), np.full(100, 64))
    space = SearchSpace(tps=(1, 2), formats=(("fp8", "fp8"),), max_seqs=(64,), ratios=((1, 1),),
                        max_gpus=16)  # fmt: skip
    pools = PoolSpace(prefill_gpus=("h100-sxm",), decode_gpus=("h200",))
    got = plan("llama3-8b", "h200", rate_per_s=8.0, lengths=lengths, requests=100,
               slo=Slo(ttft_s=0.5, tpot_s=0.03, percentile=90), space=space, top=50,
               pools=pools, prune=False)  # fmt: skip
    mixed = [r for r in got.rows if r["prefill_gpu"] == "h100-sxm"]
    assert mixed and all(r["decode_gpu"] == "h200" for r in mixed)
    h100, h200 = price_for("h100-sxm").usd_per_gpu_hour, price_for("h200").usd_per_gpu_hour
    for r in mixed:
        units = r["units"]
        want = units * (r["prefill_tp"] * h100 + r["decode_tp"] * h200)  # 1P:1D units
        assert r["usd_per_hour"] == pytest.approx(want, rel=1e-12)
        assert r["gpus"] == units * (r["prefill_tp"] + r["decode_tp"])


def test_the_frontier_is_pareto():
    rng = np.random.default_rng(7)
    rows = [{"meets": bool(m), "gpus": int(g), "tpot_p99_s": float(t)}
            for m, g, t in zip(rng.random(300) < 0.8, rng.integers(1, 40, 300),
                               rng.uniform(0.005, 0.2, 300), strict=True)]  # fmt: skip
    rows.append({"meets": True, "gpus": 1, "tpot_p99_s": math.nan})  # settled early: left out
    front = frontier(rows, rate_per_s=4.0, mean_output_tokens=100.0, percentile=99)
    met = [r for r in rows if r["meets"] and math.isfinite(r["tpot_p99_s"])]

    def point(r):
        return 400.0 / r["gpus"], 1.0 / r["tpot_p99_s"]

    def dominates(a, b):
        (ga, ua), (gb, ub) = point(a), point(b)
        return ga >= gb and ua >= ub and (ga, ua) != (gb, ub)

    assert front and all(f["meets"] for f in front)
    for f in front:  # nothing simulated that met beats a frontier row on both
        assert not any(dominates(r, f) for r in met)
    for r in met:  # and every row left out is beaten, or ties one kept
        assert any(dominates(f, r) or point(f) == point(r) for f in front)
    assert [f["tokens_per_s_per_gpu"] for f in front] == sorted(
        (f["tokens_per_s_per_gpu"] for f in front), reverse=True)


def test_the_plan_json_lists_its_frontier(capsys):
    code, out, err = run(capsys, *PLAN, "--slo-ttft-s", "0.5", "--slo-tpot-s", "0.05", "--json")
    assert code == 0, err
    front = json.loads(out)["frontier"]
    assert front and {"tokens_per_s_per_gpu", "tokens_per_s_per_user", "gpus"} <= set(front[0])
    users = [f["tokens_per_s_per_user"] for f in front]
    assert users == sorted(users)  # per GPU falls, per user rises along the frontier


def test_without_a_ttft_target_a_unit_whose_queue_grows_misses():
    # four requests, two still waiting for their first token when the last one arrives
    frame = {"status": np.array(["finished"] * 4), "arrival_s": np.array([0.0, 1, 2, 3]),
             "first_token_s": np.array([0.5, 1.5, 9.0, 10.0]),
             "ttft_s": np.array([0.5, 0.5, 7.0, 7.0]), "tpot_s": np.array([0.01] * 4)}  # fmt: skip
    slo = Slo(tpot_s=0.02)
    assert verdict(frame, slo, max_waiting=2)[0] is True
    assert verdict(frame, slo, max_waiting=1)[0] is False
    assert verdict(frame, Slo(ttft_s=100.0, tpot_s=0.02), max_waiting=1)[0] is True  # TTFT rules


def test_a_plan_whose_scouts_tie_at_the_cap_still_answers():
    # three scouts meet at 3 H200s; the cap they set and each candidate's cost at it must be the
    # same float ((3 x 4.54) x k rounds above 3 x (4.54 x k)), else all three were given up
    from gpuplan.sim.runtime.serving.requests import make_workload

    load = make_workload(rate_per_s=8, n=1000, prompt_tokens=1024, output_tokens=256, seed=0)
    got = plan("llama3-70b", "h200", rate_per_s=8.0, lengths=(load.prompt_tokens,
               load.output_tokens), requests=1000, slo=Slo(ttft_s=2.0, tpot_s=0.05),
               space=SearchSpace(max_gpus=32), top=3)  # fmt: skip
    assert [r["gpus"] for r in got.best_rows] == [3, 3, 3]


def test_a_plan_over_several_gpus_prices_each_at_its_own(capsys):
    code, out, err = run(capsys, "serve", "plan", "--model", "llama3-8b", "--gpu", "h200",
                         "h100-sxm", "--rate", "4", "--prompt-tokens", "512", "--output-tokens",
                         "64", "--requests", "100", "--max-gpus", "8", "--slo-ttft-s", "0.5",
                         "--top", "40", "--no-timing", "--json")  # fmt: skip
    assert code == 0, err
    doc = json.loads(out)
    prices = {k: v["usd_per_gpu_hour"] for k, v in doc["gpu_prices"].items()}
    assert prices == {k: price_for(k).usd_per_gpu_hour for k in ("h200", "h100-sxm")}
    on_h100 = [r for r in doc["configs"] if r["layout"] == "colocated on h100-sxm"]
    on_h200 = [r for r in doc["configs"] if r["layout"] == "colocated"]
    assert on_h100 and on_h200 and all(r["gpu"] == "h100-sxm" for r in on_h100)
    for rows, gpu in ((on_h100, "h100-sxm"), (on_h200, "h200")):
        for r in rows:
            assert r["usd_per_hour"] == pytest.approx(r["gpus"] * prices[gpu], rel=1e-12)


def test_several_gpus_pair_every_prefill_type_with_every_decode_type():
    lengths = (np.full(60, 512), np.full(60, 32))
    space = SearchSpace(tps=(1,), formats=(("fp8", "fp8"),), max_seqs=(64,), ratios=((1, 1),),
                        max_gpus=4)  # fmt: skip
    got = plan("llama3-8b", "h200", rate_per_s=2.0, lengths=lengths, requests=60,
               slo=Slo(ttft_s=1.0), space=space, top=50, pools=PoolSpace(gpus=("h100-sxm",)),
               prune=False)  # fmt: skip
    pairs = {(r["prefill_gpu"], r["decode_gpu"]) for r in got.rows if r["prefill_gpu"]}
    assert pairs == {(p, d) for p in ("h200", "h100-sxm") for d in ("h200", "h100-sxm")}
    assert {r["gpu"] for r in got.rows if r["gpu"]} == {"h200", "h100-sxm"}


def test_a_disaggregated_unit_never_pairs_a_wide_ep_group():
    """A pool counts tp GPUs a replica; a wide-EP group is ep GPUs, so it is left out of the
    pairing (else the unit's GPUs and cost would be a fraction of what it runs on)."""
    from gpuplan.sim.runtime.serving.plan_disagg import _bases
    from gpuplan.sim.runtime.serving.plan_space import Candidate

    plain = Candidate(tp=8, weight_dtype="fp8", kv_dtype="fp8", max_seqs=64, policy="chunked")
    wide = Candidate(tp=1, ep=16, dp_attention=True, weight_dtype="fp8", kv_dtype="fp8",
                     max_seqs=64, policy="chunked")  # fmt: skip
    assert [c for c, _ in _bases([(plain, None), (wide, None)], None)] == [plain]


def test_plan_pool_gpu_without_a_price_is_a_one_line_error_naming_its_flag(capsys):
    # l40s: the price file has none, and only --gpu's first takes --price-per-gpu-hour
    assert price_for("l40s") is None
    for flag in ("--prefill-gpu", "--decode-gpu"):
        code, _, err = run(capsys, *PLAN, "--slo-ttft-s", "1", flag, "l40s")
        assert code == 2 and f"{flag} l40s: the price file has no price" in err, err
        assert err.count("\n") == 1
    code, _, err = run(capsys, *PLAN[:5], "h100-sxm", "l40s", *PLAN[6:], "--slo-ttft-s", "1")
    assert code == 2 and "--gpu l40s: the price file has no price" in err, err


def test_pools_with_dp_attention_are_a_one_line_error(capsys):
    moe = ["serve", "--model", "deepseek-v3", "--gpu", "h200", "--weight-dtype", "fp8",
           "--kv-dtype", "fp8", "--tp", "4", "--ep", "8", "--dp-attention",
           "--max-model-len", "8192", *TRAFFIC]  # fmt: skip
    for pools in (["--disaggregate", "1:1"], ["--decode-replicas", "2"]):
        code, _, err = run(capsys, *moe, *pools)
        assert code == 2 and "--dp-attention with disaggregated pools" in err, err
        assert err.count("\n") == 1


def test_an_unknown_pool_gpu_is_a_one_line_error_naming_its_flag(capsys):
    code, _, err = run(capsys, "serve", "--model", "llama3-8b", "--prefill-gpu", "nope",
                       "--decode-gpu", "h200", *TRAFFIC)  # fmt: skip
    assert code == 2 and "--prefill-gpu 'nope': unknown accelerator 'nope'" in err, err
    assert err.count("\n") == 1
    code, _, err = run(capsys, *PLAN, "--slo-ttft-s", "1", "--decode-gpu", "nope")
    assert code == 2 and "--decode-gpu 'nope': unknown accelerator" in err, err
    assert err.count("\n") == 1
