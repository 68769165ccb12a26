"""gpuplan and NVIDIA's aiconfigurator asked the same serving questions, side by side.

    python3 benchmarks/vs_aiconfigurator.py                  # aiconfigurator's recorded answers
    python3 benchmarks/vs_aiconfigurator.py --live           # ask the installed aiconfigurator
    python3 benchmarks/vs_aiconfigurator.py --record         # --live, and rewrite the answers file
    python3 benchmarks/vs_aiconfigurator.py --only qwen3-32b --markdown docs/table.md

The questions (``vs_aiconfigurator_aic.questions``): Llama-3.1-70B, Qwen3-32B and DeepSeek-V3
(FP8 checkpoints) on 8 H100, H200 or B200 (16 H100 for DeepSeek-V3), TensorRT-LLM and vLLM, every
request 1000 prompt and 1000 output tokens, at aiconfigurator's default SLO (TTFT 2 s, TPOT 30
ms) and a tighter one (300 ms, 20 ms). aiconfigurator answers with its best aggregated and
disaggregated deployments (``cli default``); gpuplan's ``serve plan`` is asked for the same load
(``vs_aiconfigurator_gpuplan``'s docstring), and aiconfigurator's picks are replayed in gpuplan's
simulator. Where a published measurement of the same model, GPU, engine, format and lengths
exists (TensorRT-LLM's perf overviews, ``gpuplan/validate/published/data``), its best tokens/s
per GPU is shown with its row id: an offline (unbounded-latency) throughput, so an upper bound
on any answer under an SLO, not a measurement of it.

aiconfigurator is an optional extra (``pip install 'gpuplan[aiconfigurator]'``); without it the
recorded answers (``data/vs_aiconfigurator_answers.json``, with the version that gave them) are
read, so the table in docs/vs_aiconfigurator.md is reproduced without it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import vs_aiconfigurator_aic as aic  # noqa: E402
import vs_aiconfigurator_gpuplan as gp  # noqa: E402

ANSWERS = HERE / "data" / "vs_aiconfigurator_answers.json"
INSTALL = "pip install 'gpuplan[aiconfigurator]'  (aiconfigurator==0.12.0)"
# the published rows that answer a question's model: Llama-3.3-70B has Llama-3.1-70B's
# architecture (its Hugging Face config.json differs in nothing the step is priced on)
PUBLISHED_MODELS = {"llama3.1-70b": ("llama3.1-70b", "llama3.3-70b")}


def read_answers(path: Path = ANSWERS) -> dict:
    """The recorded answers: {"aiconfigurator": version, "isl_osl", "answers": [...]}."""
    return json.loads(Path(path).read_text())


def record(questions, path: Path = ANSWERS) -> dict:
    """Ask the installed aiconfigurator every question and write the answers file."""
    doc = {"aiconfigurator": aic.version(), "database_mode": "SILICON", "answers": []}
    for q in questions:
        doc["answers"].append(aic.ask(q))
        print(f"  aiconfigurator: {q.key} in {doc['answers'][-1]['search_s']:.1f} s",
              file=sys.stderr, flush=True)  # fmt: skip
    Path(path).write_text(json.dumps(doc, indent=1) + "\n")
    return doc


def published(q) -> dict | None:
    """The best published output tokens/s per GPU for ``q``'s model, GPU, engine, FP8 weights
    and lengths, over deployments whose GPU count divides the question's (replicas of it)."""
    from gpuplan.validate.published.serving import load_rows

    f = load_rows()
    names = PUBLISHED_MODELS.get(q.model, (q.model,))
    f = f[f["model"].isin(names) & (f["gpu"] == q.gpu) & (f["engine"] == q.stack)
          & (f["weight_dtype"] == gp.FORMAT[0]) & (f["prompt_tokens"] == q.isl)
          & (f["output_tokens"] == q.osl) & (f["metric"] == "output_tokens_per_s")
          & (f["per"] == "total") & (q.gpus % f["gpus"] == 0)]  # fmt: skip
    if f.empty:
        return None
    per_gpu = f["value"] / f["gpus"]
    r = f.loc[per_gpu.idxmax()]  # the first of equal bests, as the row-by-row scan kept
    return {"tokens_per_s_per_gpu": float(per_gpu.max()), "id": r["id"], "tp": int(r["tp"]),
            "source": r["source"], "load": r["load"]}


def gpuplan_side(q, answer: dict, requests: int) -> dict:
    """gpuplan's plan at aiconfigurator's claimed load (p50 and p99), and aiconfigurator's
    picks replayed; {"error"} where aiconfigurator gave no load to ask at."""
    rate = gp.cluster_rate(answer, q)
    if rate is None:
        return {"error": "aiconfigurator found no deployment: no load to ask gpuplan at"}
    out = {"rate_per_s": rate}
    for pct in gp.PERCENTILES:
        out[f"plan_p{pct:g}"] = gp.plan_answer(q, rate, pct, requests)
    for mode, best in answer.get("best", {}).items():
        mode_rate = best["tokens/s/gpu_cluster"] * q.gpus / q.osl
        out[f"replay_{mode}"] = gp.replay(q, best, mode, mode_rate, requests)
    return out


def _aic_pick(best: dict | None, mode: str, gpus: int) -> str:
    """aiconfigurator's pick in a few characters: parallelism x replicas (or workers per pool),
    and the batch (the decode pool's)."""
    if not best:
        return "none"
    if mode == "agg":
        par = f"TP{best['tp']}" + (f"DP{best['dp']}" if best["dp"] > 1 else "") + (
            f"EP{best['moe_ep']}" if best["moe_ep"] > 1 else "")  # fmt: skip
        return f"{gpus // best['num_total_gpus']}x{par} bs{best['bs']}"

    def pool(p):
        ep = f"EP{p['moe_ep']}" if p["moe_ep"] > 1 else ""
        dp = f"DP{p['dp']}" if p["dp"] > 1 else ""
        return f"{p['workers']}xTP{p['tp']}{dp}{ep}"

    return f"{pool(best['p'])}P+{pool(best['d'])}D bs{best['d']['bs']}"


def _plan_cell(p: dict) -> str:
    if "error" in p:
        return "none (below)"
    lay = "agg" if p["layout"] == "colocated" else p["layout"].replace("disaggregated ", "")
    pp = f"PP{p['pp']}" if p["pp"] > 1 else ""
    return (f"{lay} TP{p['tp']}{pp} x{p['replicas']} = {p['gpus']} GPUs: "
            f"{p['tokens_per_s_per_gpu']:.0f}")  # fmt: skip


def _replay_cell(r: dict | None) -> str:
    if r is None:
        return "-"
    if "skipped" in r:
        return "not replayable"
    return "; ".join(f"{'meets' if v['meets'] else 'misses'} {v['ttft_s']:.2g} s/"
                     f"{v['tpot_s'] * 1e3:.0f} ms" for v in (r[f"p{p:g}"] for p in gp.PERCENTILES))


def row(q, answer: dict, side: dict, pub: dict | None) -> dict:
    """One question's table row (strings), from aiconfigurator's answer, gpuplan's side and the
    published measurement."""
    best = answer.get("best", {})
    chosen = answer.get("chosen")
    tput = best[chosen]["tokens/s/gpu_cluster"] if chosen in best else None
    cells = {
        "model": q.model, "gpu": q.gpu, "stack": q.stack, "gpus": str(q.gpus),
        "slo_ms": f"{q.ttft_ms:g}/{q.tpot_ms:g}",
        "aic_agg": _aic_pick(best.get("agg"), "agg", q.gpus),
        "aic_disagg": _aic_pick(best.get("disagg"), "disagg", q.gpus),
        "aic_tok_s_gpu": "no answer" if tput is None else f"{tput:.0f} ({chosen})",
        "aic_s": f"{answer['search_s']:.1f}",
    }  # fmt: skip
    for pct in gp.PERCENTILES:
        p = side.get(f"plan_p{pct:g}")
        cells[f"gpuplan_p{pct:g}"] = "-" if p is None else _plan_cell(p)
    cells["gpuplan_s"] = "-" if "error" in side else "{:.1f}".format(
        sum(side[f"plan_p{p:g}"]["search_s"] for p in gp.PERCENTILES))  # fmt: skip
    cells["replay_agg"] = _replay_cell(side.get("replay_agg"))
    cells["replay_disagg"] = _replay_cell(side.get("replay_disagg"))
    cells["published"] = "-" if pub is None else (
        f"{pub['tokens_per_s_per_gpu']:.0f} (TP{pub['tp']}, {pub['id']})")  # fmt: skip
    return cells


HEADERS = {
    "model": "model", "gpu": "GPU", "stack": "stack", "gpus": "GPUs", "slo_ms": "TTFT/TPOT ms",
    "aic_agg": "aic agg pick", "aic_disagg": "aic disagg pick",
    "aic_tok_s_gpu": "aic tok/s/GPU", "aic_s": "aic s",
    "gpuplan_p50": "gpuplan p50 pick: tok/s/GPU", "gpuplan_p99": "gpuplan p99 pick: tok/s/GPU",
    "gpuplan_s": "gpuplan s", "replay_agg": "aic agg in gpuplan: p50; p99 TTFT/TPOT",
    "replay_disagg": "aic disagg in gpuplan: p50; p99 TTFT/TPOT", "published": "published tok/s/GPU",
}  # fmt: skip


def markdown(rows: list[dict]) -> str:
    head = "| " + " | ".join(HEADERS.values()) + " |"
    rule = "|" + "---|" * len(HEADERS)
    body = ["| " + " | ".join(r[k] for k in HEADERS) + " |" for r in rows]
    return "\n".join([head, rule, *body])


def summary(results: list[tuple]) -> list[str]:
    """The headline lines: gpuplan's tokens/s/GPU over aiconfigurator's at the same load, the
    replays that miss the SLO in gpuplan, the answers above the published offline peak, and
    each tool's total search time. ``results``: (question, answer, gpuplan side, published)."""
    import numpy as np

    lines = []
    for pct in gp.PERCENTILES:
        # the same load on both sides, so the ratio of tokens/s/GPU is that of GPUs, inverted
        ratios = [q.gpus / side[f"plan_p{pct:g}"]["gpus"] for q, _, side, _ in results
                  if "error" not in side and "error" not in side[f"plan_p{pct:g}"]]  # fmt: skip
        unmet = sum(1 for _, _, side, _ in results
                    if "error" not in side and "error" in side[f"plan_p{pct:g}"])  # fmt: skip
        if ratios:
            lines.append(f"gpuplan tokens/s/GPU over aiconfigurator's at p{pct:g}: median "
                         f"{np.median(ratios):.2f}, {min(ratios):.2f}-{max(ratios):.2f} over "
                         f"{len(ratios)} questions; no plan within {gp.MAX_GPUS_FACTOR}x the GPUs "
                         f"in {unmet}")  # fmt: skip
        replays = [side[k][f"p{pct:g}"]["meets"] for _, _, side, _ in results
                   for k in ("replay_agg", "replay_disagg")
                   if k in side and "skipped" not in side[k]]  # fmt: skip
        lines.append(f"aiconfigurator's picks replayed in gpuplan miss the SLO at p{pct:g} in "
                     f"{replays.count(False)} of {len(replays)}")  # fmt: skip
    skipped = sum(1 for _, _, side, _ in results for k in ("replay_agg", "replay_disagg")
                  if "skipped" in side.get(k, {}))  # fmt: skip
    lines.append(f"picks gpuplan cannot replay (attention DP, TP above a node, pools of "
                 f"different TP, a model that does not fit): {skipped}")  # fmt: skip
    above = {"aiconfigurator": 0, "gpuplan p50": 0}
    for _q, a, side, pub in results:
        if pub is None or a.get("chosen") not in a.get("best", {}):
            continue
        above["aiconfigurator"] += a["best"][a["chosen"]]["tokens/s/gpu_cluster"] > pub[
            "tokens_per_s_per_gpu"]  # fmt: skip
        p50 = side.get("plan_p50", {})
        above["gpuplan p50"] += "gpus" in p50 and p50["tokens_per_s_per_gpu"] > pub[
            "tokens_per_s_per_gpu"]  # fmt: skip
    n_pub = sum(pub is not None for *_, pub in results)
    lines.append(f"questions with a published offline peak: {n_pub}; answers above it: "
                 + ", ".join(f"{k} {v}" for k, v in above.items()))  # fmt: skip
    aic_s = sum(a["search_s"] for _, a, _, _ in results)
    gp_s = sum(side[f"plan_p{p:g}"]["search_s"] for _, _, side, _ in results
               if "error" not in side for p in gp.PERCENTILES)  # fmt: skip
    lines.append(f"search time: aiconfigurator {aic_s:.0f} s (recorded), gpuplan {gp_s:.0f} s "
                 f"(both percentiles, this run)")  # fmt: skip
    return lines


def unplanned(results: list[tuple]) -> list[str]:
    """gpuplan's one-line reason for each plan it could not make, and its closest candidate."""
    return [f"gpuplan, no plan: {q.model} {q.gpu} {q.stack} {q.ttft_ms:g}/{q.tpot_ms:g} ms "
            f"p{pct:g}: {side[f'plan_p{pct:g}']['error'].split('; ', 1)[-1]}"
            for q, _, side, _ in results if "error" not in side for pct in gp.PERCENTILES
            if "error" in side[f"plan_p{pct:g}"]]  # fmt: skip


def data_lines(doc: dict, questions) -> list[str]:
    """Which data each tool priced with."""
    from gpuplan.hwmodels.efficiency import efficiency_for

    versions = sorted({f"{a['question']['stack']} {b.get('version') or b['d']['version']} on "
                       f"{a['question']['gpu']}" for a in doc["answers"]
                       for b in a.get("best", {}).values()})  # fmt: skip
    lines = [f"aiconfigurator {doc['aiconfigurator']} ({doc.get('database_mode', 'SILICON')} "
             "database: its per-kernel measurements in aiconfigurator-core's tables): "
             + "; ".join(versions)]  # fmt: skip
    for gpu in sorted({q.gpu for q in questions}):
        lines.append(f"gpuplan on {gpu}: analytical step model on the stack's kernels, "
                     f"hardware efficiency {efficiency_for(gpu).source}")  # fmt: skip
    lines.append("gpuplan prices nothing from aiconfigurator's measurements (held out: "
                 "docs/aiconfigurator.md)")
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--live", action="store_true", help="ask the installed aiconfigurator")
    p.add_argument("--record", action="store_true", help="--live, and rewrite the answers file")
    p.add_argument("--answers", type=Path, default=ANSWERS)
    p.add_argument("--only", help="questions whose key contains this text (e.g. qwen3-32b)")
    p.add_argument("--requests", type=int, default=gp.REQUESTS)
    p.add_argument("--markdown", type=Path, help="also write the table to this file")
    args = p.parse_args(argv)
    questions = [q for q in aic.questions() if args.only is None or args.only in q.key]
    if (args.live or args.record) and not aic.installed():
        print(f"error: aiconfigurator is not installed: {INSTALL}", file=sys.stderr)
        return 2
    if args.live or args.record:
        doc = record(questions, args.answers) if args.record else {
            "aiconfigurator": aic.version(), "answers": [aic.ask(q) for q in questions]}
        source = f"asked now (aiconfigurator {doc['aiconfigurator']})"
    else:
        doc = read_answers(args.answers)
        source = (f"recorded with aiconfigurator {doc['aiconfigurator']} ({args.answers.name}); "
                  + ("--live asks the installed one" if aic.installed() else
                     f"to ask it live: {INSTALL}"))  # fmt: skip
    by_key = {aic.Question(**a["question"]).key: a for a in doc["answers"]}
    results = []
    started = time.perf_counter()
    for q in questions:
        answer = by_key.get(q.key)
        if answer is None:
            print(f"  no recorded answer for {q.key}: --record asks it", file=sys.stderr)
            continue
        results.append((q, answer, gpuplan_side(q, answer, args.requests), published(q)))
        print(f"  gpuplan: {q.key}", file=sys.stderr, flush=True)
    table = markdown([row(*r) for r in results])
    print(f"aiconfigurator's answers: {source}")
    print(f"every request {aic.ISL} prompt + {aic.OSL} output tokens; FP8 weights and KV cache; "
          f"gpuplan asked at the load of aiconfigurator's chosen deployment, "
          f"{args.requests} requests, p50 and p99\n")  # fmt: skip
    print(table + "\n")
    print("\n".join(summary(results) + unplanned(results) + data_lines(doc, questions)))
    print(f"gpuplan's side took {time.perf_counter() - started:.0f} s")
    if args.markdown:
        args.markdown.write_text(table + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
