"""``gpuplan serve plan``: the cheapest serving configurations (tensor parallelism, replicas,
batch limits, quantization, disaggregation) that meet TTFT and TPOT SLOs at a request rate
(``sim.runtime.serving.plan``), with their error bands."""

from __future__ import annotations

import sys

from gpuplan.cli.argtypes import gpu_count, percentile, positive
from gpuplan.cli.calibration import efficiency_line
from gpuplan.cli.dask_workers import add_sweep_options, open_pool, pool_label, timed, with_timing
from gpuplan.cli.serve_args import (
    DEFAULT_STACK,
    add_speculative_options,
    add_traffic_options,
    int_values,
)
from gpuplan.cli.serve_emit import plan_launch, render_launch
from gpuplan.cli.serve_inputs import (
    efficiency_fit,
    serve_defaults,
    serve_workload,
    serving_stack_from_args,
    speculation_from_args,
)
from gpuplan.cli.serve_plan_pools import (
    GPU_KW,
    add_plan_pool_options,
    frontier_doc,
    frontier_lines,
    gpu_prices,
    gpu_text,
    plan_pools,
    plan_slo,
    price_lines,
    slo_text,
    tp_list_option,
)
from gpuplan.cli.serve_render import defaults_line
from gpuplan.cli.stack_flags import add_stack_options, stack_doc, stack_line
from gpuplan.tables import band_text, dump_json, format_banded, format_seconds, render_table
from gpuplan.validate.bands import documents as bands


def register_plan(sub) -> None:
    """``serve plan`` under ``serve``'s subcommands."""
    p = sub.add_parser("plan", help="cheapest configurations that meet TTFT and TPOT SLOs")
    add_traffic_options(p, rate_required=True, gpu_kw=GPU_KW)
    add_stack_options(p, default=DEFAULT_STACK)
    p.add_argument("--slo-ttft-s", type=positive(float), help="TTFT target (either target may "
                   "be left out, not both)")  # fmt: skip
    p.add_argument("--slo-tpot-s", type=positive(float), help="TPOT target")
    p.add_argument("--percentile", type=percentile, default=99.0)
    tp_list_option(p, "--tp", "tensor-parallel degrees to try, 2 4 8 or 2,4,8 (default: all)")
    add_plan_pool_options(p)
    p.add_argument("--policy", choices=("continuous", "chunked"), default="chunked")
    p.add_argument("--max-seqs", type=int_values, default=(64, 256), help="max_seqs values to try")
    p.add_argument("--no-disaggregation", action="store_true")
    p.add_argument("--max-gpus", type=gpu_count, default=64)
    p.add_argument("--top", type=positive(int), default=5)
    p.add_argument("--price-per-gpu-hour", type=positive(float), help="USD (default: price file)")
    add_speculative_options(p, "also try each colocated candidate with speculative decoding")
    add_sweep_options(p)
    p.set_defaults(func=run_plan)


def run_plan(args) -> int:
    from gpuplan.sim.runtime.serving.plan_space import RATIOS, SearchSpace

    if args.trace:
        from gpuplan.sim.runtime.serving.requests import read_trace

        load = read_trace(args.trace, rate_per_s=args.rate, seed=args.seed, limit=args.requests)
    defaults = serve_defaults(args, tokens=(1024, 256))  # weight formats are searched
    if not args.trace:
        args.prompt_tokens = args.prompt_tokens or 1024
        args.output_tokens = args.output_tokens or 256
        load = serve_workload(args, default_requests=1000)
    space = SearchSpace(
        tps=args.tp,
        max_seqs=args.max_seqs,
        policy=args.policy,
        ratios=() if args.no_disaggregation else RATIOS,
        max_gpus=args.max_gpus,
        stack=_plan_stack(args),
        speculation=speculation_from_args(args),
    )
    slo = plan_slo(args)
    with open_pool(args) as pool:
        result = _plan(args, load, space, pool, slo)
    doc = _plan_doc(args, result, space, defaults)
    doc |= chosen_band_check(doc, pct=f"p{args.percentile:g}")
    doc |= {"launch": launch} if (launch := plan_launch(args, doc["configs"], space)) else {}
    doc["frontier"] = frontier_doc(result, args, load)
    doc["gpu_prices"] = gpu_prices(args, result)
    if args.json:
        print(dump_json(with_timing(doc, args, {"wall_s": result.wall_s,
                                                "ran_on": pool_label(args)})))  # fmt: skip
        return 0
    _print_plan(args, doc, result, space)
    print("\n".join(price_lines(doc) + frontier_lines(doc)))
    if doc.get("launch"):
        print(render_launch(doc["launch"]))
    return 0


def _plan_doc(args, result, space, defaults: list[str]) -> dict:
    """The plan's document: the best rows with their bands (``bands.plan_bands``), the counts,
    sources, stack, rate, defaults and SLO."""
    from gpuplan.hwmodels.accelerators import get_accelerator

    acc_key = get_accelerator(args.gpu).key
    return {
        **bands.plan_bands(result.best_rows, stack=space.stack.name, device=acc_key),
        "evaluated": len(result.rows),
        "candidates": result.candidates,
        "price_source": result.price_source,
        "efficiency_source": efficiency_fit(args).source,
        "stack": stack_doc(space.stack, get_accelerator(args.gpu)),
        "rate_per_s": args.rate,
        "defaults": defaults,
        "slo": {
            "ttft_s": args.slo_ttft_s,
            "tpot_s": args.slo_tpot_s,
            "percentile": args.percentile,
        },
    }


def _print_plan(args, doc: dict, result, space) -> None:
    """The plan as people read it: the question, the cheapest configurations, how many were
    simulated, the price, stack and efficiency sources."""
    from gpuplan.hwmodels.accelerators import get_accelerator

    pct = f"p{args.percentile:g}"
    cols = ["layout", "tp", "pp", "weight_dtype", "kv_dtype", "max_seqs", "replicas", "gpus",
            f"ttft_{pct}_s", f"tpot_{pct}_s", "usd_per_hour", "usd_per_m_output_tokens"]  # fmt: skip
    money = {c: (lambda v: f"${v:,.2f}") for c in ("usd_per_hour", "usd_per_m_output_tokens")}
    print(
        f"cheapest ways to serve {args.model} at {args.rate:g} requests/s on {gpu_text(args)} with "
        f"{slo_text(args)}\n{defaults_line(doc['defaults'])}\n"
    )
    banded = {c: money.get(c, format_seconds) for c in cols[8:]}
    shown = [{**row, **{c: format_banded(c, row[c], row["error_band"].get(c), banded[c])
                        for c in cols[8:] if c in row}} for row in doc["configs"]]  # fmt: skip
    if space.speculation is not None:
        cols.insert(1, "speculative")
    print(render_table(shown, cols))
    if doc["configs"]:
        print(_chosen_line(doc))
    if text := band_text(doc):
        print(f"band p10-p90: {text}")
    took = f" in {format_seconds(result.wall_s)} ({pool_label(args)})" if timed(args) else ""
    print(
        f"\n{len(result.rows)} of {result.candidates} candidates simulated{took}; "
        f"price: {result.price_source}"
    )
    print(stack_line(space.stack, get_accelerator(args.gpu)))
    print(efficiency_line(doc["efficiency_source"]))


def chosen_band_check(doc: dict, *, pct: str) -> dict:
    """Whether the chosen (first, cheapest) row keeps its whole p10-p90 band within the SLO:
    ``chosen_band_within_slo``, and ``chosen_band_crossings``, each latency whose band's top
    passes its target (``metric``, ``value``, ``band_high``, ``slo``). A row meets the SLO on its
    point prediction; its band says whether the truth may not."""
    if not doc["configs"]:
        return {"chosen_band_within_slo": None, "chosen_band_crossings": []}
    crossings = _crossings(doc["configs"][0], doc["slo"], pct)
    return {"chosen_band_within_slo": not crossings, "chosen_band_crossings": crossings}


def _crossings(row: dict, slo: dict, pct: str) -> list[dict]:
    """Each latency of ``row`` whose band's top passes its target in ``slo``."""
    crossings = []
    for metric, target in (("ttft", slo["ttft_s"]), ("tpot", slo["tpot_s"])):
        key = f"{metric}_{pct}_s"
        band = row.get("error_band", {}).get(key)
        if target is not None and band and band[1] > target:
            crossings.append({"metric": key, "value": row[key], "band_high": band[1], "slo": target})
    return crossings


def _chosen_line(doc: dict) -> str:
    """The chosen row's band against the SLO, in words."""
    if doc["chosen_band_within_slo"]:
        return "chosen (first row): its whole p10-p90 band is within the SLO"
    parts = [f"{c['metric']} {format_seconds(c['value'])} reaches {format_seconds(c['band_high'])}"
             f" at the band's top, against {format_seconds(c['slo'])}"
             for c in doc["chosen_band_crossings"]]
    pct = f"p{doc['slo']['percentile']:g}"
    safe = next((i + 1 for i, r in enumerate(doc["configs"]) if not _crossings(r, doc["slo"], pct)),
                None)  # fmt: skip
    return ("chosen (first row): meets the SLO as predicted but its p10-p90 band does not: "
            + "; ".join(parts) + " - it may miss the SLO when deployed; "
            + (f"row {safe} keeps its whole band within" if safe else
               "no row shown keeps its whole band within (tighten the search or add GPUs)"))


def _plan_stack(args):
    from gpuplan.hwmodels.accelerators import get_accelerator

    return serving_stack_from_args(args, get_accelerator(args.gpu))


def _plan(args, load, space, pool, slo):
    from gpuplan.sim.runtime.serving.plan import plan

    return plan(
        args.model,
        args.gpu,
        rate_per_s=args.rate,
        slo=slo,
        lengths=(load.prompt_tokens, load.output_tokens),
        requests=load.n,
        seed=args.seed,
        space=space,
        usd_per_gpu_hour=args.price_per_gpu_hour,
        top=args.top,
        progress=not args.json and sys.stderr.isatty(),
        pool=pool,
        fit=efficiency_fit(args),
        pools=plan_pools(args),
    )
