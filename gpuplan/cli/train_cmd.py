"""``gpuplan train``: one multi-GPU training strategy's step time, memory per GPU, MFU and cost.

Give the model, the GPUs and the layout (``--tp --pp --dp --ep --cp --zero --micro-batch
--global-batch --seq --schedule --virtual-stages --recompute --precision``); gpuplan prices each
GPU's kernels with the one-GPU models and adds communication, the pipeline bubble and the
optimizer on the cluster's topology. ``--tokens`` adds the time, GPU-hours, cost and energy of a
whole run. ``gpuplan train --reproduce`` prints gpuplan's predictions of published training runs
(Narayanan et al. 2021; Korthikanti et al. 2022; llm-foundry, Megatron-Bridge, torchtitan, Llama
3, MT-NLG: ``validate/published/data/published_training.csv``) next to what they measured, per source.

``--timeline out.json`` also plays the step out in time (``sim.runtime.timeline``: pipeline schedule,
overlaps, shared links, stragglers, jitter) and writes a Chrome/Perfetto trace that opens in
https://ui.perfetto.dev; symmetric ranks are simulated once unless ``--all-ranks``.
"""

from __future__ import annotations

import argparse
from typing import Any

from gpuplan.cli.argtypes import (
    at_least_one,
    gpu_count,
    non_negative,
    positive_float,
    positive_int,
    random_seed,
    word,
)
from gpuplan.cli.calibration import add_calibration_option, efficiency_from_args
from gpuplan.cli.dask_workers import add_timing_option, with_timing
from gpuplan.cli.stack_flags import add_stack_options, stack_doc, stack_from_args
from gpuplan.errors import GpuplanError
from gpuplan.limits import MAX_CV, MAX_GPUS
from gpuplan.outputs import check_output
from gpuplan.tables import dump_json, format_banded, format_value, render_table
from gpuplan.validate.bands import documents as bands

SCHEDULES = ("gpipe", "1f1b", "interleaved")
RECOMPUTE = ("none", "selective", "full")


def zero_stage(text: str) -> int:
    if text.lower() == "fsdp":
        return 3
    if text not in ("0", "1", "2", "3"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a ZeRO stage: 0, 1, 2, 3 or fsdp")
    return int(text)


PRECISION_WORDS = {"bf16": "bf16", "fp8": "fp8", "bf16-mixed": "bf16", "fp8-mixed": "fp8"}


def training_precision(text: str) -> str:
    """--precision of train and search: bf16 or fp8 GEMMs (``-mixed`` accepted, the same)."""
    word = text.strip().lower()
    if word not in PRECISION_WORDS:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a precision: bf16 or fp8 (bf16-mixed, fp8-mixed are the same)"
        )
    return PRECISION_WORDS[word]


def add_cluster_options(p) -> None:
    """--gpu, --gpus, --cluster, --placement, shared with ``gpuplan search train``."""
    p.add_argument("--gpu", type=word, help="accelerator key (default: the cluster's, else h200)")
    p.add_argument("--gpus", type=gpu_count, help="number of GPUs (the world size)")
    p.add_argument(
        "--cluster", type=word,
        help="cluster preset: dgx-a100, dgx-h100, dgx-h200, gb200-nvl72 "
        "(default: the preset of --gpu, else 8-GPU nodes of it)",
    )
    p.add_argument(
        "--placement", type=word,
        help="order of the parallel dimensions on the hierarchy, innermost first "
        "(default tp,cp,dp,pp)",
    )


def add_assumption_options(p) -> None:
    """Options that are assumptions rather than choices, shared with the search."""
    p.add_argument(
        "--attention",
        choices=("flash", "unfused"),
        default="flash",
        help="attention kernels: flash (default) or unfused (QK^T/softmax/PV, Megatron 2021)",
    )
    add_stack_options(p, default=DEFAULT_TRAINING_STACK)
    p.add_argument(
        "--impl",
        choices=("eager", "fused", "compiled"),
        default=None,
        help="elementwise kernels: eager ATen ops, hand-fused kernels, or torch.compile's "
        "Inductor fusion of the model (default: the stack's; the rest of the stack, its "
        "optimizer and runtime, stays as it is)",
    )
    add_calibration_option(p)
    p.add_argument(
        "--state-precision",
        choices=("bf16-mixed-megatron", "bf16-mixed", "bf16", "bf16-deepspeed",
                 "bf16-deepspeed-2022"),
        default=None,
        help="bytes per parameter of weights, gradients and Adam state (default: the stack's; "
        "megatron-te: 2+4+12, autocast stacks: bf16-mixed 4+4+8)",
    )
    p.add_argument(
        "--overlap-dp",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="hide data-parallel communication behind the backward (default: the stack's)",
    )
    p.add_argument(
        "--overlap-tp",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="hide TP collectives behind the GEMMs (default: the stack's)",
    )
    p.add_argument(
        "--overlap-pp",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="hide pipeline sends behind compute (default: the stack's)",
    )
    p.add_argument(
        "--overlap-ep",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="hide MoE all-to-all behind another micro-batch's compute, as DeepSeek-V3's "
        "DualPipe does (default: off)",
    )
    p.add_argument("--tokens", type=positive_float, help="token budget of the whole run")
    p.add_argument(
        "--price-per-gpu-hour", type=positive_float, help="USD per GPU-hour (default: price file)"
    )


DEFAULT_TRAINING_STACK = "megatron-te"


def resolve_stack(args, acc):
    """The stack of --stack and its overrides; the strategy options it sets by default
    (precision of the state, overlaps) filled in where the command line left them unset."""
    stack = stack_from_args(args, acc)
    if args.impl is not None and args.impl != stack.elementwise:  # add_assumption_options
        import dataclasses

        stack = dataclasses.replace(stack, elementwise=args.impl)
    state = "bf16-mixed" if stack.mixed_precision == "autocast" else "bf16-mixed-megatron"
    defaults = {"state_precision": state, "overlap_dp": stack.overlap_dp,
                "overlap_tp": stack.overlap_tp, "overlap_pp": stack.overlap_pp}  # fmt: skip
    for name, value in defaults.items():
        if getattr(args, name, None) is None:
            setattr(args, name, value)
    return stack


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "train",
        help="multi-GPU training estimate of one strategy (or --reproduce published runs)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--model", type=word, help="model preset or config.json")
    add_cluster_options(p)
    for name in ("tp", "pp", "dp", "ep", "cp"):
        p.add_argument(f"--{name}", type=gpu_count, help=f"{name} degree")
    p.add_argument("--sp", action="store_true", help="Megatron sequence parallelism (tp > 1)")
    p.add_argument("--zero", type=zero_stage, default=0, help="ZeRO stage 0-3 or fsdp (= 3)")
    p.add_argument("--micro-batch", type=positive_int, default=1, help="sequences per micro-batch")
    p.add_argument(
        "--global-batch",
        type=positive_int,
        help="sequences per step (default: micro-batch x dp x max(1, 4 pp))",
    )
    p.add_argument("--seq", type=positive_int, help="sequence length (default: model's, <= 8192)")
    p.add_argument("--images", type=positive_int, default=None,
                   help="vision-language models, one GPU: images per sequence (the encoder and "
                   "projector are trained with it; --seq is the text tokens)")
    p.add_argument("--image-size", type=word, default=None, metavar="WxH",
                   help="pixels of each image (default: the encoder's own square)")
    p.add_argument("--freeze-vision", action="store_true",
                   help="with --images: encoder and projector frozen (forward only)")
    p.add_argument("--schedule", choices=SCHEDULES, default="1f1b")
    p.add_argument("--virtual-stages", type=positive_int, default=1)
    p.add_argument(
        "--pp-layers",
        type=pp_layers_arg,
        metavar="N,N,...|auto",
        help="blocks on each pipeline stage, first to last (e.g. 7,8,...,8,7), or auto: the "
        "embedding and the loss count as a block each (Llama 3 405B's split)",
    )
    p.add_argument(
        "--pp-first-last",
        type=first_last_arg,
        metavar="N,M",
        help="N blocks on the first stage, M on the last, the rest split evenly",
    )
    p.add_argument("--recompute", choices=RECOMPUTE, default="none")
    p.add_argument("--precision", type=training_precision, default="bf16",
                   help="GEMM precision of mixed-precision training: bf16 (default) or fp8; "
                   "weights, gradients and Adam state per --state-precision. bf16-mixed and "
                   "fp8-mixed are the same words (estimate train-step's bf16-mixed is bf16)")  # fmt: skip
    p.add_argument(
        "--expert-imbalance",
        type=at_least_one,
        default=1.0,
        help="MoE: busiest expert's load over the mean (default 1.0)",
    )
    p.add_argument("--capacity-factor", type=positive_float, help="MoE: pad to this capacity")
    add_assumption_options(p)
    p.add_argument(
        "--reproduce",
        action="store_true",
        help="predict the published training runs and print the comparison per source",
    )
    add_timeline_options(p)
    add_timing_option(p)
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p.set_defaults(func=run)


def pp_layers_arg(text: str):
    """'auto' or a comma-separated list of block counts."""
    if text.strip().lower() == "auto":
        return "auto"
    try:
        return tuple(int(n) for n in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a list of block counts per stage (e.g. 7,8,8,7) or auto"
        ) from None


def first_last_arg(text: str) -> tuple[int, int]:
    """N,M: blocks on the first and on the last pipeline stage."""
    try:
        first, last = (int(n) for n in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not FIRST,LAST (blocks on the first and last stage, e.g. 7,7)"
        ) from None
    return first, last


def resolve_pp_layers(args, cfg, pp: int) -> tuple[int, ...] | None:
    """The stage split of --pp-layers / --pp-first-last (None: even)."""
    from gpuplan.sim.parallel.strategy import auto_pp_layers, first_last_pp_layers

    given, first_last = getattr(args, "pp_layers", None), getattr(args, "pp_first_last", None)
    if given is not None and first_last is not None:
        raise GpuplanError("--pp-layers and --pp-first-last both set the stage split; give one")
    if given == "auto":
        return auto_pp_layers(cfg.n_layers, pp)
    if first_last is not None:
        return first_last_pp_layers(cfg.n_layers, pp, *first_last)
    return given


def straggler(text: str):
    """RANK:SLOWDOWN, e.g. 12:0.1 for GPU 12 computing 10% slower."""
    rank, sep, slowdown = text.partition(":")
    if not sep:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not RANK:SLOWDOWN (e.g. 12:0.1 for GPU 12 computing 10% slower)"
        )
    try:
        return non_negative(int, MAX_GPUS - 1)(rank), non_negative(float)(slowdown)
    except argparse.ArgumentTypeError as err:
        raise argparse.ArgumentTypeError(f"{text!r} (RANK:SLOWDOWN): {err}") from None


def add_timeline_options(p) -> None:
    """--timeline, --all-ranks and the timeline's perturbations."""
    p.add_argument("--timeline", metavar="OUT.json", type=word,
                   help="simulate the step in time and write a Chrome/Perfetto trace")  # fmt: skip
    p.add_argument("--all-ranks", action="store_true",
                   help="simulate (and draw) every GPU, not one per symmetric group")  # fmt: skip
    p.add_argument("--straggler", type=straggler, action="append", default=[],
                   metavar="RANK:SLOWDOWN", help="a GPU that computes slower (repeatable)")  # fmt: skip
    p.add_argument("--jitter", type=non_negative(float, MAX_CV), default=0.0,
                   help="kernel-time jitter, coefficient of variation (default 0)")  # fmt: skip
    p.add_argument("--seed", type=random_seed, default=0,
                   help="seed of the jitter (0 to 2^64 - 1; default 0)")  # fmt: skip


def resolve_cluster(args):
    """The cluster of --cluster/--gpu/--placement."""
    from gpuplan.hwmodels.accelerators import get_accelerator
    from gpuplan.sim.parallel.topology import cluster_for, get_cluster, with_placement

    if args.cluster:
        cluster = get_cluster(args.cluster)
        if args.gpu and get_accelerator(args.gpu).key != cluster.gpu:
            raise GpuplanError(
                f"--gpu {args.gpu} does not match --cluster {args.cluster}, which is built of "
                f"{cluster.gpu}; drop one of them"
            )
    else:
        cluster = cluster_for(args.gpu or "h200")
    return with_placement(cluster, args.placement) if args.placement else cluster


def default_seq(cfg) -> int:
    return min(cfg.max_seq_len, 8192)


def _strategy(args, gpus: int | None, cfg=None):
    from gpuplan.sim.parallel.strategy import Strategy

    tp, pp, cp, ep = args.tp or 1, args.pp or 1, args.cp or 1, args.ep or 1
    dp = args.dp
    if dp is None:
        inner = tp * pp * cp
        if gpus is None:
            dp = 1
        elif gpus % inner:
            raise GpuplanError(
                f"tp*cp*pp = {tp}*{cp}*{pp} = {inner} does not divide gpus={gpus}; "
                "choose degrees whose product divides the GPUs"
            )
        else:
            dp = gpus // inner
    gb = args.global_batch or args.micro_batch * dp * max(1, 4 * pp)
    return Strategy(
        tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, sp=args.sp, zero=args.zero,
        micro_batch=args.micro_batch, global_batch=gb, schedule=args.schedule,
        virtual_stages=args.virtual_stages, recompute=args.recompute, precision=args.precision,
        state_precision=args.state_precision, attention=args.attention,
        overlap_dp=args.overlap_dp, overlap_tp=args.overlap_tp, overlap_pp=args.overlap_pp,
        overlap_ep=args.overlap_ep,
        capacity_factor=args.capacity_factor, expert_imbalance=args.expert_imbalance,
        pp_layers=resolve_pp_layers(args, cfg, pp) if cfg is not None else None,
    )  # fmt: skip


def run(args) -> int:
    if args.reproduce:
        if getattr(args, "calibration", None) is not None:
            raise GpuplanError("--reproduce prices the published runs with gpuplan's own fits; "
                               "drop --calibration")  # fmt: skip
        return reproduce(args)
    if not args.model:
        raise GpuplanError("gpuplan train needs --model (or --reproduce)")
    if getattr(args, "timeline", None):
        check_output(args.timeline, "--timeline")  # before any work
    from gpuplan.sim.parallel.cost import run_budget
    from gpuplan.sim.parallel.estimate import estimate_training
    from gpuplan.workloads.presets import get_model

    cfg = get_model(args.model)
    cluster = resolve_cluster(args)
    stack = resolve_stack(args, cluster.accelerator)
    strategy = _strategy(args, args.gpus, cfg)
    seq = args.seq or default_seq(cfg)
    if getattr(args, "timeline", None) and len(set(strategy.pp_layers or ())) > 1:
        raise GpuplanError(
            f"--timeline plays pipelines of equal stages; pp_layers="
            f"{','.join(map(str, strategy.pp_layers))} is uneven: drop --timeline or the uneven split"
        )
    eff = efficiency_from_args(args, cluster.accelerator.key)  # --calibration, else built in
    images = _images(args, cfg)
    if images is not None:  # a VLM's samples with images (sim.estimate.vision)
        from gpuplan.sim.estimate.vision import vlm_training_estimate

        est = vlm_training_estimate(cfg, strategy, cluster=cluster, seq=seq, images=images,
                                    freeze_vision=args.freeze_vision, eff=eff, stack=stack)
    else:
        est = estimate_training(cfg, strategy, cluster=cluster, seq=seq, gpus=args.gpus,
                                stack=stack, eff=eff)  # fmt: skip
    doc = est.to_dict()
    doc["stack"] = stack_doc(stack, cluster.accelerator)
    doc["defaults"] = train_defaults(args, cluster, strategy, seq)
    timing = {}
    if getattr(args, "timeline", None):
        timeline = write_timeline(args, cfg, strategy, cluster, seq)
        doc["timeline"] = {k: v for k, v in timeline.items() if k != "wall_s"}
        timing["timeline_wall_s"] = timeline["wall_s"]
    if args.tokens:
        budget = run_budget(
            tokens=args.tokens, tokens_per_s=est.tokens_per_s, gpus=est.gpus,
            acc=cluster.accelerator, usd_per_gpu_hour=args.price_per_gpu_hour,
        )  # fmt: skip
        doc["budget"] = budget.to_dict() | with_interruptions(
            cfg, est, cluster, budget.time_to_train_s
        )
    doc |= bands.train_bands({**doc, **doc.get("budget", {})}, stack=stack.name,
                             device=cluster.accelerator.key)  # fmt: skip
    if timing:
        doc = with_timing(doc, args, timing)
    if args.json:
        print(dump_json(doc))
        return 0
    print(render_estimate(doc))
    return 0


def _images(args, cfg):
    """--images N of --image-size WxH, or None; --image-size or --freeze-vision alone is an error."""
    from gpuplan.sim.estimate.whole_model import images_of

    if args.images is None and (args.freeze_vision or args.image_size):
        raise GpuplanError("--image-size and --freeze-vision need --images N")
    params = {"images": args.images, "image_size": args.image_size}
    return images_of(cfg, {k: v for k, v in params.items() if v is not None})


def write_timeline(args, cfg, strategy, cluster, seq) -> dict[str, Any]:
    """Simulate the step, write its trace; the timeline's headline figures."""
    from gpuplan.sim.runtime.timeline import Straggler, simulate_step
    from gpuplan.sim.runtime.timeline.trace import write_chrome_trace

    tl = simulate_step(
        cfg, strategy, cluster=cluster, seq=seq, all_ranks=args.all_ranks, jitter=args.jitter,
        seed=args.seed, stragglers=tuple(Straggler(rank=r, slowdown=s) for r, s in args.straggler),
        eff=efficiency_from_args(args, cluster.accelerator.key),
    )  # fmt: skip
    detail, every_rank = trace_detail(tl)
    slices = write_chrome_trace(tl, args.timeline, detail=detail, every_rank=every_rank)
    return tl.to_dict() | {"trace": args.timeline, "trace_slices": slices, "trace_detail": detail,
                           "trace_every_rank": every_rank and tl.all_ranks}  # fmt: skip


MAX_TRACE_SLICES = 2_000_000  # about 250 MB of JSON, written in seconds; a viewer opens it


def trace_detail(tl) -> tuple[str, bool]:
    """The finest (detail, every rank) whose trace holds at most ``MAX_TRACE_SLICES`` slices:
    kernels, then steps (block halves), then each TP x CP group drawn once, then tasks."""
    from gpuplan.sim.runtime.timeline.trace import choose_detail

    detail, every_rank, n = choose_detail(tl, MAX_TRACE_SLICES)
    if n > MAX_TRACE_SLICES:
        raise GpuplanError(
            f"the trace would hold {n:,} slices even one per task (at most {MAX_TRACE_SLICES:,}); "
            "drop --all-ranks to draw each symmetric group once"
        )
    return detail, every_rank


def render_timeline(t: dict[str, Any], estimate_s: float, wall_s: float | None = None) -> list[str]:
    diff = 100 * (t["step_time_s"] / estimate_s - 1)
    took = "" if wall_s is None else f" in {wall_s:.2f} s"
    return [
        "",
        f"timeline        {format_value('step_time_s', t['step_time_s'])} ({diff:+.1f}% vs the "
        f"closed form), bubble {100 * t['bubble_fraction']:.1f}% (mean of the simulated GPUs)",
        f"                {t['simulated_gpus']} TP x CP groups simulated for {t['world']} GPUs, "
        f"{t['events']:,} events{took}",
        *[f"                {n}" for n in t["notes"][1:]],
        f"trace           {t['trace']} ({t['trace_slices']:,} slices, {t['trace_detail']} "
        f"detail{_drawn(t)}; open in https://ui.perfetto.dev)",
    ]


def with_interruptions(cfg, est, cluster, time_to_train_s: float) -> dict[str, Any]:
    """The budget's keys for the expected interruptions of the run (sim.parallel.interruptions)."""
    from gpuplan.sim.parallel.interruptions import expected_interruptions

    i = expected_interruptions(cfg, gpus=est.gpus, gpus_per_node=cluster.gpus_per_node,
                               acc=cluster.accelerator,
                               state_precision=est.strategy.state_precision)  # fmt: skip
    return {
        "interruptions": i.to_dict(),
        "time_to_train_with_failures_s": i.with_failures_s(time_to_train_s),
    }


def render_interruptions(i: dict[str, Any], with_failures_s: float) -> str:
    """One line: the interruptions' rate, checkpoints, restarts and the time they add."""
    return (
        f"with interruptions: {with_failures_s / 86400:.1f} days (one every "
        f"{i['mtbf_s'] / 3600:.1f} h, a {i['checkpoint_s']:.0f} s checkpoint every "
        f"{i['checkpoint_interval_s'] / 60:.0f} min, {i['restart_s']:.0f} s per restart: "
        f"{100 * i['waste']:.1f}% of wall time lost; rates: {i['source']})"
    )


def render_overlaps(overlaps: dict[str, bool]) -> str:
    """The overlaps in force, e.g. 'dp on, tp off, pp off'."""
    return ", ".join(f"{k} {'on' if v else 'off'}" for k, v in overlaps.items())


def train_defaults(args, cluster, strategy, seq: int) -> list[str]:
    """The flags left unset whose defaults change the answer, as they were filled in."""
    out = []
    if not args.gpu and not args.cluster:
        out.append(f"--gpu {cluster.gpu}")
    if not args.seq:
        out.append(f"--seq {seq} (the model's, at most 8192)")
    if not args.global_batch:
        out.append(f"--global-batch {strategy.global_batch} (micro-batch x dp x max(1, 4 pp))")
    return out


def _drawn(t: dict[str, Any]) -> str:
    if not t["all_ranks"]:
        return ""
    return ", every rank" if t.get("trace_every_rank") else ", each TP x CP group once"


def _pct(value: float) -> str:
    return f"{100 * value:.1f}%"


def _banded(doc: dict[str, Any], key: str, fmt=None) -> str:
    return format_banded(key, doc[key], doc.get("error_band", {}).get(key), fmt)


def render_estimate(doc: dict[str, Any]) -> str:
    """The estimate as people read it: headline, breakdown by class, memory terms."""
    st = doc["strategy"]
    fits = "fits" if doc["fits"] else "DOES NOT FIT"
    lines = [
        f"{doc['model']} on {doc['gpus']} GPUs of {doc['cluster']}: {st['label']}, "
        f"global batch {st['global_batch']} x {doc['seq']} tokens",
        *(["defaults in force (not given): " + (", ".join(doc["defaults"]) or "none")]
          if "defaults" in doc else []),  # fmt: skip
        "",
        f"step time       {_banded(doc, 'step_time_s')}",
        f"tokens/s        {_banded(doc, 'tokens_per_s', lambda v: f'{v:,.0f}')}",
        f"MFU / HFU       {_banded(doc, 'mfu', _pct)} / {_banded(doc, 'hfu', _pct)}",
        f"memory per GPU  {_banded(doc, 'peak_memory_per_gpu_bytes')} of "
        f"{format_value('bytes', doc['device_memory_bytes'])} ({fits})",
        f"overlaps        {render_overlaps(doc['overlaps'])}",
    ]
    if doc.get("error_band_label"):
        lines.append(f"error band      p10-p90; {doc['error_band_label']}")
    if "stack" in doc:
        s = doc["stack"]
        measured = "" if s.get("measured") else "; not measured as a whole"
        lines.append(f"stack           {s['name']} (attention {s['attention']['train']}, "
                     f"elementwise {s['elementwise']}, host {s['host']['mode']}{measured})")
    lines.append("")
    rows = [dict(r, share_pct=100 * r["share"]) for r in doc["by_category"]]
    rows.sort(key=lambda r: -r["time_s"])
    lines.append(render_table(rows, ["layer", "category", "time_s", "share_pct"]))
    lines.append("")
    mem = [{"term": k, "bytes": v} for k, v in doc["memory_bytes"].items()]
    lines.append(render_table(mem, ["term", "bytes"]))
    if "budget" in doc:
        b = doc["budget"]
        band = {**b, **doc}
        cost = "-" if b["cost_usd"] is None else _banded(band, "cost_usd", lambda v: f"${v:,.0f}")
        lines += [
            "",
            f"{b['tokens']:.3g} tokens: "
            f"{_banded(band, 'time_to_train_s', lambda v: f'{v / 86400:.1f}')} days, "
            f"{_banded(band, 'gpu_hours', lambda v: f'{v:,.0f}')} GPU-hours, {cost}, "
            f"{_banded(band, 'energy_kwh', lambda v: f'{v:,.0f}')} kWh "
            f"(power {b['power_fraction']:.0%} of TDP, PUE {b['pue']})",
            f"price: {b['price_source']}",
            render_interruptions(b["interruptions"], b["time_to_train_with_failures_s"]),
        ]
    if "timeline" in doc:
        wall_s = doc.get("timing", {}).get("timeline_wall_s")
        lines += render_timeline(doc["timeline"], doc["step_time_s"], wall_s)
    lines += ["", *[f"note: {n}" for n in doc["notes"]]]
    return "\n".join(lines)


def reproduce(args) -> int:
    """Predict the published runs; print the comparison tables and the errors per source."""
    from gpuplan.hwmodels.efficiency import efficiency_for
    from gpuplan.validate.published.megatron import reproduce as predict
    from gpuplan.validate.published.megatron import summary
    from gpuplan.validate.published.training import (
        DEFAULT_SEED,
        reproduce_training,
        source_summary,
        training_sources,
    )

    frame = predict()
    summ = summary(frame)
    source = efficiency_for("a100-sxm-80gb").source
    runs = reproduce_training(DEFAULT_SEED)
    by_source = source_summary(runs)
    held = sorted(set(runs.loc[runs["held_out"], "source"]))
    if args.json:
        print(dump_json({
            "rows": frame, "summary": summ, "efficiency_source": source,
            "published_training": {"rows": runs, "summary": by_source, "seed": DEFAULT_SEED,
                                   "held_out_sources": held},
        }))  # fmt: skip
        return 0
    print(render_reproduction(frame, summ))
    print(f"\nA100 kernel efficiencies: {source}")
    print(render_training(runs, by_source, training_sources()["sources"], held))
    return 0


def _shown(row, value) -> str:
    """A published or predicted value: bytes for memory, else 4 digits in the metric's unit."""
    return format_value("bytes", value) if row["kind"] == "memory" else f"{value:.4g}"


def render_source(name: str, rows, reference: str) -> list[str]:
    """One source's rows that gpuplan predicts, then its rows it cannot express, by reason."""
    ok = rows[rows["status"] == "ok"].to_dict("records")
    for r in ok:
        for col in ("published", "predicted"):
            r[f"{col}_"] = _shown(r, r[col])
    lines = ["", f"== {name}: {reference}"]
    if ok:
        lines.append(render_table(
            ok, ["model", "gpus", "layout", "metric", "published_", "predicted_", "error_pct"],
            headers={"published_": "published", "predicted_": "predicted"},
            formats={"error_pct": lambda v: f"{v:+.1f}%"},
        ))  # fmt: skip
    bad = rows[rows["status"] != "ok"].groupby("status").size()
    lines += [f"{n} row(s) {status}" for status, n in bad.items()]
    return lines


SUMMARY_COLUMNS = ("source", "kind", "n", "not_expressible", "median_abs_pct_error",
                   "p90_abs_pct_error", "held_out")  # fmt: skip


def render_training(runs, by_source, sources: dict, held: list[str]) -> str:
    """Per-source tables of the published training runs and the summary per source."""
    lines = ["", "Published training runs (data/published_training.csv) against gpuplan"]
    for name, rows in runs[~runs["source"].isin(("narayanan2021", "korthikanti2022"))].groupby(
        "source", sort=True
    ):
        lines += render_source(name, rows, sources.get(name, {}).get("reference", ""))
    summ = by_source.assign(held_out=by_source["held_out"].map({True: "held out", False: "fit"}))
    lines += [
        "",
        f"Summary per source (absolute % error; held-out sources: {', '.join(held)})",
        render_table(
            summ,
            SUMMARY_COLUMNS,
        ),
    ]
    return "\n".join(lines)


def render_reproduction(frame, summ) -> str:
    cols = ["id", "metric", "gpus", "measured", "predicted", "error_pct"]
    fmt = {"measured": lambda v: f"{v:.4g}", "predicted": lambda v: f"{v:.4g}",
           "error_pct": lambda v: f"{v:+.1f}%"}  # fmt: skip
    kinds = summ[summ["by"] == "kind"]
    sources = summ[summ["by"] == "source"]
    lines = [
        "Published runs (A100 80GB, DGX A100 / Selene) against gpuplan's predictions",
        "",
        render_table(frame, cols, formats=fmt),
        "",
        render_table(
            sources.rename(columns={"median": "median_abs_pct_error", "max": "max_abs_pct_error"}),
            ["kind", "group", "count", "median_abs_pct_error", "max_abs_pct_error"],
            headers={"group": "source"},
        ),
        "",
        render_table(
            kinds.rename(columns={"median": "median_abs_pct_error", "max": "max_abs_pct_error"}),
            ["group", "count", "median_abs_pct_error", "max_abs_pct_error", "target_pct", "met"],
            headers={"group": "kind"},
        ),
    ]
    return "\n".join(lines)
