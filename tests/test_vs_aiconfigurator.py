"""benchmarks/vs_aiconfigurator.py: its table built from the committed answers of aiconfigurator
(never imported here), the published column, and gpuplan's side on one question."""

import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import vs_aiconfigurator as vs  # noqa: E402
import vs_aiconfigurator_aic as aic  # noqa: E402
import vs_aiconfigurator_gpuplan as gp  # noqa: E402

DOC = vs.read_answers()
BY_KEY = {aic.Question(**a["question"]).key: a for a in DOC["answers"]}


def test_every_question_has_a_recorded_answer_with_the_version_that_gave_it():
    assert DOC["aiconfigurator"] == "0.12.0"
    assert set(BY_KEY) == {q.key for q in aic.questions()}
    for a in DOC["answers"]:
        assert a["search_s"] > 0
        assert ("error" in a) != ("chosen" in a)
        if "chosen" in a:
            assert a["chosen"] in a["best"]
    assert "aiconfigurator" not in sys.modules  # the table needs no aiconfigurator


def _fake_side(q, answer, gpus_p50, gpus_p99):
    rate = gp.cluster_rate(answer, q)
    plan = {p: {"layout": "colocated", "tp": 2, "pp": 1, "replicas": g // 2, "max_seqs": 64,
                "gpus": g, "ttft_s": 0.1, "tpot_s": 0.01, "search_s": 1.0,
                "tokens_per_s_per_gpu": rate * q.osl / g}
            for p, g in (("plan_p50", gpus_p50), ("plan_p99", gpus_p99))}  # fmt: skip
    return {"rate_per_s": rate, **plan}


def test_a_row_shows_both_answers_and_the_summary_compares_them_at_the_same_load():
    q = aic.questions()[0]  # Llama-3.1-70B on 8 H100, TensorRT-LLM, aiconfigurator's default SLO
    answer = BY_KEY[q.key]
    agg = answer["best"]["agg"]
    side = _fake_side(q, answer, gpus_p50=4, gpus_p99=16)
    side["replay_agg"] = {"p50": {"meets": True, "ttft_s": 0.5, "tpot_s": 0.02},
                          "p99": {"meets": False, "ttft_s": 3.0, "tpot_s": 0.04}}  # fmt: skip
    r = vs.row(q, answer, side, vs.published(q))
    assert r["aic_agg"] == f"{8 // agg['num_total_gpus']}xTP{agg['tp']} bs{agg['bs']}"
    chosen = answer["best"][answer["chosen"]]["tokens/s/gpu_cluster"]
    assert r["aic_tok_s_gpu"] == f"{chosen:.0f} ({answer['chosen']})"
    assert r["gpuplan_p50"].endswith(f"= 4 GPUs: {2 * chosen:.0f}")  # half the GPUs, same load
    assert r["replay_agg"].startswith("meets 0.5 s/20 ms; misses 3 s/40 ms")
    lines = vs.summary([(q, answer, side, None)])
    assert lines[0].startswith("gpuplan tokens/s/GPU over aiconfigurator's at p50: median 2.00")
    assert "miss the SLO at p99 in 1 of 1" in "\n".join(lines)
    table = vs.markdown([r]).splitlines()
    assert len(table) == 3 and table[0].count("|") == table[2].count("|") == len(vs.HEADERS) + 1


def test_a_disaggregated_pick_with_pools_of_different_tp_is_said_not_replayable():
    pool = {"tp": 1, "pp": 1, "dp": 1, "moe_tp": 1, "moe_ep": 1, "bs": 1, "workers": 2}
    best = {"p": pool, "d": {**pool, "tp": 2, "bs": 160, "workers": 3}}
    assert "share one TP" in gp._replay_candidate(best, "disagg")
    c, ep = gp._replay_candidate({"p": pool, "d": {**pool, "bs": 160, "workers": 3}}, "disagg")
    assert (c.prefill, c.decode, c.tp, c.max_seqs, ep) == (2, 3, 1, 160, 1)
    wide = {**pool, "tp": 8, "moe_ep": 8, "moe_tp": 1, "bs": 64}
    assert gp._replay_candidate(wide, "agg")[1] == 8  # experts over the TP group: gpuplan's ep
    assert "attention DP 8" in gp._replay_candidate({**wide, "tp": 1, "dp": 8}, "agg")


def test_the_published_column_is_the_best_per_gpu_row_of_the_same_setting():
    q = aic.Question(model="llama3.1-70b", gpu="h200", stack="trt-llm", gpus=8, ttft_ms=2000,
                     tpot_ms=30)  # fmt: skip
    pub = vs.published(q)
    # TensorRT-LLM 1.0's perf overview: Llama-3.3-70B FP8, 1 H200, 1000/1000: 2909 tokens/s
    assert pub["id"] == "trtllm-1.0-0019" and pub["tokens_per_s_per_gpu"] == pytest.approx(2909)
    assert vs.published(aic.Question(model="qwen3-32b", gpu="h200", stack="trt-llm", gpus=8,
                                     ttft_ms=2000, tpot_ms=30)) is None  # fmt: skip


def test_gpuplan_side_on_one_question_is_consistent_with_its_slo():
    q = next(q for q in aic.questions() if q.key.startswith("qwen3-32b|h200|trt-llm|8|1000/1000|2000"))
    side = vs.gpuplan_side(q, BY_KEY[q.key], requests=200)
    for pct in gp.PERCENTILES:
        p = side[f"plan_p{pct:g}"]
        if "error" in p:
            continue
        assert p["gpus"] <= gp.MAX_GPUS_FACTOR * q.gpus
        assert p["tokens_per_s_per_gpu"] == pytest.approx(side["rate_per_s"] * q.osl / p["gpus"])
        assert p["ttft_s"] <= q.ttft_ms / 1e3 and p["tpot_s"] <= q.tpot_ms / 1e3
    for key in ("replay_agg", "replay_disagg"):
        r = side.get(key, {"skipped": ""})
        for v in ([] if "skipped" in r else [r[f"p{p:g}"] for p in gp.PERCENTILES]):
            within = v["ttft_s"] <= q.ttft_ms / 1e3 and v["tpot_s"] <= q.tpot_ms / 1e3
            assert v["meets"] == (within and math.isfinite(v["ttft_s"]))


@pytest.mark.skipif(aic.installed(), reason="aiconfigurator is installed")
def test_asking_aiconfigurator_live_without_it_says_how_to_install_it(capsys):
    assert vs.main(["--live", "--only", "qwen3-32b|h200"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install 'gpuplan[aiconfigurator]'" in err
