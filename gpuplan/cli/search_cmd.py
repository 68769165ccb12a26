"""``gpuplan search train``: every valid training strategy of a model on N GPUs, evaluated at once.

Enumerates TP, CP, PP, DP, EP, micro-batch, schedule (GPipe, 1F1B, interleaved with every valid
virtual-stage count), recomputation, ZeRO stage, sequence parallelism and precision; drops what
does not fit; prints how many strategies were evaluated and how many per second, the fastest, and
the Pareto front of step time, memory per GPU and cost.
"""

from __future__ import annotations

import argparse

from gpuplan.cli import require_subcommand
from gpuplan.cli.argtypes import at_least_one, gpu_count, positive_int, word
from gpuplan.cli.calibration import efficiency_from_args
from gpuplan.cli.dask_workers import (
    add_sweep_options,
    add_timing_option,
    open_pool,
    pool_label,
    timed,
    with_timing,
)
from gpuplan.cli.stack_flags import stack_doc
from gpuplan.cli.train_args import training_precision, zero_stage
from gpuplan.cli.train_cmd import (
    add_assumption_options,
    add_cluster_options,
    resolve_cluster,
    resolve_stack,
)
from gpuplan.cli.train_render import render_estimate, render_overlaps
from gpuplan.errors import GpuplanError
from gpuplan.tables import dump_json, format_value, render_table
from gpuplan.validate.bands import documents as band_docs
from gpuplan.validate.bands import lookup as bands

COLUMNS = [
    "tp", "pp", "pp_layers", "dp", "cp", "ep", "sp", "zero", "micro_batch", "schedule",
    "virtual_stages",
    "recompute", "precision", "step_time_s", "tokens_per_s", "mfu_pct",
    "peak_memory_per_gpu_bytes", "cost_per_step_usd",
]  # fmt: skip


PRECISION_CHOICES = {"bf16": ("bf16",), "fp8": ("fp8",), "mxfp8": ("mxfp8",), "nvfp4": ("nvfp4",),
                     "any": ("bf16", "fp8")}


def register(subparsers) -> None:
    group = subparsers.add_parser(
        "search", help="search strategies (see 'gpuplan search train --help')"
    )
    sub = group.add_subparsers(title="search commands", metavar="COMMAND")
    p = sub.add_parser(
        "train",
        help="every valid training strategy of a model on N GPUs: the fastest and the Pareto front",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--model", type=word, required=True, help="model preset or config.json")
    add_cluster_options(p)
    p.add_argument("--global-batch", type=positive_int, required=True, help="sequences per step")
    p.add_argument("--seq", type=positive_int, help="sequence length (default: model's, <= 8192)")
    p.add_argument("--top", type=positive_int, default=10, help="rows of the fastest to show")
    p.add_argument(
        "--recompute",
        nargs="+",
        choices=("none", "selective", "full"),
        default=["none", "selective", "full"],
    )
    p.add_argument("--zero", nargs="+", type=zero_stage, default=[0, 1, 2, 3])
    p.add_argument(
        "--precision",
        type=lambda t: "any" if t.strip().lower() == "any" else training_precision(t),
        default="bf16",
        help="GEMM precision under mixed precision searched: bf16 (default), fp8, or any "
        "(both); as in `gpuplan train` (bf16-mixed, fp8-mixed are the same words)",
    )
    p.add_argument(
        "--sp",
        choices=("any", "with-tp", "off"),
        default=None,
        help="sequence parallelism: any (searched), with-tp (on wherever tp > 1) or off "
        "(default: the stack's: with-tp for megatron-te and fsdp2, else off)",
    )
    p.add_argument("--max-cp", type=gpu_count, default=16, help="largest context-parallel size")
    p.add_argument(
        "--expert-imbalance", type=at_least_one, default=1.0, help="MoE: busiest expert's load / mean"
    )
    add_assumption_options(p)
    add_sweep_options(p)
    add_timing_option(p)
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p.set_defaults(func=run)
    require_subcommand(group, sub)


def run(args) -> int:
    from gpuplan.sim.parallel.search import distinct_layouts, search, with_mfu_pct
    from gpuplan.sim.parallel.strategy import default_seq
    from gpuplan.workloads.presets import get_model

    if not args.gpus:
        raise GpuplanError("gpuplan search train needs --gpus")
    cfg = get_model(args.model)
    cluster = resolve_cluster(args)
    stack = resolve_stack(args, cluster.accelerator)
    seq = args.seq or default_seq(cfg)
    eff = efficiency_from_args(args, cluster.accelerator.key)  # --calibration, else built in
    space = _space(args, stack)
    with open_pool(args) as pool:
        result = search(
            cfg, cluster=cluster, gpus=args.gpus, global_batch=args.global_batch, seq=seq,
            space=space, tokens=args.tokens, usd_per_gpu_hour=args.price_per_gpu_hour, pool=pool,
            eff=eff,
        )  # fmt: skip
    fastest = _fastest(args, cfg, cluster, stack, seq, eff, space, result)
    layouts = distinct_layouts(result.frame, seq)
    top, pareto = with_mfu_pct(layouts.head(args.top)), with_mfu_pct(result.pareto)
    stats = _stats(args, cfg, cluster, (stack, seq, eff, space), result, len(layouts))
    if args.json:
        doc = stats | {"top": top, "pareto": pareto, "fastest": fastest}
        doc |= {k: fastest[k] for k in ("error_band", "error_band_label", "error_band_words")
                if k in fastest}  # the fastest's
        # every row's band: its value times these factors (one family, stack and device)
        doc["error_band_row_factors"] = {k: _factors(k, stack.name, cluster.accelerator.key)
                                         for k in ("step_time_s", "tokens_per_s", "mfu",
                                                   "peak_memory_per_gpu_bytes",
                                                   "cost_per_step_usd")}  # fmt: skip
        print(dump_json(with_timing(doc, args, _timing(args, result))))
        return 0
    _print_summary(args, cluster, stack, space, result, stats)
    _print_tables(args, top, pareto, fastest, len(layouts))
    return 0


def _space(args, stack):
    """The search space of the flags: recomputation, ZeRO, precision, SP, CP and the
    assumptions; the state precision, overlaps and SP rule left unset are the stack's, filled
    by the same function as ``gpuplan train``'s (``search_defaults``)."""
    from gpuplan.sim.parallel.search import SearchSpace

    fields, _ = search_defaults(args, stack)
    return SearchSpace(
        recompute=tuple(args.recompute), zero=tuple(sorted(set(args.zero))),
        precision=PRECISION_CHOICES[args.precision], max_cp=args.max_cp, attention=args.attention,
        overlap_ep=args.overlap_ep, load=args.expert_imbalance, stack=stack, **fields,
    )  # fmt: skip


def search_defaults(args, stack) -> tuple[dict, list[str]]:
    """(the ``SearchSpace`` fields the stack fills where the flags leave them unset, the
    defaults applied as flags): its state precision and overlaps
    (``sim.stacks.training_defaults.fill_defaults``, as ``train`` fills them), its SP rule and
    the overlap of pipeline sends its interleaved schedule makes."""
    from gpuplan.sim.stacks.training_defaults import fill_defaults, layout_defaults_of

    own = ("state_precision", "overlap_dp", "overlap_tp", "overlap_pp")
    filled = fill_defaults(stack, {k: getattr(args, k) for k in own}, tp=2, pp=2, fields=own)
    layout = layout_defaults_of(stack)
    fields = {k: filled.fields[k] for k in own}
    fields["overlap_pp_interleaved"] = args.overlap_pp is None and layout.overlap_pp_interleaved
    applied = [f"--stack {stack.name} (train's default)"] * (not getattr(args, "stack_given", True))
    fields["sp"] = args.sp or ("with-tp" if layout.sp_with_tp else "off")
    if args.sp is None:
        applied.append(f"--sp {fields['sp']} ({stack.name}: {layout.sp_why})")
    applied += [a for a in filled.applied if not a.startswith(("--overlap-pp", "--no-overlap-pp"))]
    if args.overlap_pp is None:
        pp = "--overlap-pp" if fields["overlap_pp"] else "--no-overlap-pp"
        why = "overlapped p2p of the interleaved schedule"
        how = (f", on under the interleaved schedule ({stack.name}: {why})"
               if fields["overlap_pp_interleaved"] else f" ({stack.name}: the stack's)")  # fmt: skip
        applied.append(pp + how)
    return fields, applied


def _fastest(args, cfg, cluster, stack, seq, eff, space, result) -> dict:
    """The fastest strategy's full estimate, with its stack and bands as train prints it."""
    from gpuplan.sim.parallel.search import fastest_estimate

    fastest = fastest_estimate(cfg, result, cluster=cluster, gpus=args.gpus,
                               global_batch=args.global_batch, seq=seq, space=space, stack=stack,
                               eff=eff).to_dict()  # fmt: skip
    fastest["stack"] = stack_doc(stack, cluster.accelerator)  # as train prints it
    fastest |= band_docs.train_bands(fastest, stack=stack.name, device=cluster.accelerator.key)
    return fastest


def _stats(args, cfg, cluster, setup, result, distinct_layouts: int) -> dict:
    """What was searched and what came of it; ``setup`` is (stack, seq, eff, space)."""
    from gpuplan.sim.parallel.estimate import overlaps_in_force
    from gpuplan.sim.stacks.training_defaults import experts_default

    stack, seq, eff, space = setup
    # how an MoE's experts launch, where no --expert-gemms set it (as train's layout_of says)
    experts = experts_default(stack) if cfg.is_moe and stack.expert_gemms is None else None
    stats = {
        "model": cfg.name,
        "cluster": cluster.key,
        "gpus": args.gpus,
        "global_batch": args.global_batch,
        "seq": seq,
        "evaluated": result.evaluated,
        "fitting": result.fitting,
        "shapes_priced": result.shapes_priced,
        "distinct_layouts": distinct_layouts,
        "precision": list(space.precision),
        "overlaps": overlaps_in_force(space),
        "defaults": search_defaults(args, stack)[1] + ([experts] if experts else []),
        "stack": stack_doc(stack, cluster.accelerator),
        "efficiency_source": eff.source,
    }
    if result.interruptions is not None:
        stats["interruptions"] = result.interruptions.to_dict()
    return stats


def _timing(args, result) -> dict:
    """The search's own timing: pricing, evaluation, strategies per second, where it ran."""
    return {
        "pricing_s": result.pricing_s,
        "evaluation_s": result.evaluation_s,
        "strategies_per_s": result.strategies_per_s,
        "ran_on": pool_label(args),
    }


def _print_summary(args, cluster, stack, space, result, stats: dict) -> None:
    """How many strategies were evaluated and fit, what was searched, the interruptions and
    the rows' error band."""
    took = (
        f" in {format_value('evaluation_s', result.evaluation_s)} "
        f"({result.strategies_per_s:,.0f} strategies/s; {pool_label(args)})"
        if timed(args) else ""
    )  # fmt: skip
    priced = f" in {format_value('pricing_s', result.pricing_s)}" if timed(args) else ""
    print(
        f"evaluated {result.evaluated:,} strategies of {stats['model']} on {args.gpus} x "
        f"{cluster.gpu}{took}; {result.shapes_priced} kernel shapes priced{priced}; "
        f"{result.fitting:,} fit in memory"
    )
    if stats["defaults"]:
        print("defaults in force (not given): " + ", ".join(stats["defaults"]))
    print(
        f"precision searched: {', '.join(space.precision)}; overlaps in force: "
        f"{render_overlaps(stats['overlaps'])}"
        f"{' (pp on under interleaving)' if space.overlap_pp_interleaved else ''}; "
        f"stack {stats['stack']['name']}"
    )
    if result.interruptions is not None:
        i = result.interruptions
        print(
            f"interruptions: one every {i.mtbf_s / 3600:.1f} h on {args.gpus} GPUs, a "
            f"{i.checkpoint_s:.0f} s checkpoint every {i.checkpoint_interval_s / 60:.0f} min "
            f"(Young), {i.restart_s:.0f} s per restart: {100 * i.waste:.1f}% of wall time "
            f"lost (rates: {i.source})"
        )
    print(_row_band_line(stack.name, cluster.accelerator.key))


def _print_tables(args, top, pareto, fastest: dict, distinct_layouts: int) -> None:
    """The fastest distinct layouts, the Pareto front and the fastest strategy in full."""
    train_cols = ["time_to_train_s", "time_to_train_with_failures_s", "cost_with_failures_usd"]
    cols = COLUMNS + (train_cols if args.tokens else [])
    days = lambda v: f"{v / 86400:.1f} d"  # noqa: E731
    fmt = {"mfu_pct": lambda v: f"{v:.1f}%", "cost_per_step_usd": lambda v: f"${v:.3g}"}
    fmt |= {"cost_with_failures_usd": lambda v: f"${v:,.0f}", "time_to_train_s": days,
            "time_to_train_with_failures_s": days}  # fmt: skip
    print(f"\nfastest {len(top)} distinct layouts (of {distinct_layouts:,}):")
    print(render_table(top, cols, formats=fmt))
    print(f"\nPareto front (step time, memory per GPU, cost): {len(pareto)} strategies")
    print(render_table(pareto, cols, formats=fmt))
    print("\nthe fastest in full:\n")
    print(render_estimate(fastest))


def _row_band_line(stack: str, device: str) -> str:
    """Every row's step-time band, as factors on its value (one family, stack and device)."""
    b = bands.interval(1.0, bands.residuals("train.time", stack, device))
    label = bands.join_labels([b.label])
    return (f"error band p10-p90 of each row's step time: x{b.low:.2f}-x{b.high:.2f} "
            f"(throughput, MFU: the inverse)" + (f"; {label}" if label else ""))


def _factors(key: str, stack: str, device: str) -> list[float]:
    family, power = band_docs.TRAIN_KEYS.get(key, ("train.time", 1))
    return bands.interval(1.0, bands.residuals(family, stack, device), power=power).as_list()
