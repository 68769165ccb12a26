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
import dataclasses

from gpuplan.cli.argtypes import gpu_count, positive_float, word
from gpuplan.cli.calibration import add_calibration_option, efficiency_from_args
from gpuplan.cli.dask_workers import add_timing_option, with_timing
from gpuplan.cli.device_args import add_gpu_argument
from gpuplan.cli.feasibility import add_allow_infeasible, as_priced, training_infeasible
from gpuplan.cli.stack_flags import add_stack_options, stack_doc, stack_from_args
from gpuplan.cli.train_args import add_strategy_options, add_timeline_options, resolve_pp_layers
from gpuplan.cli.train_render import render_estimate
from gpuplan.cli.train_reproduce import reproduce
from gpuplan.cli.train_timeline import write_timeline
from gpuplan.errors import GpuplanError
from gpuplan.outputs import check_output
from gpuplan.tables import dump_json
from gpuplan.validate.bands import documents as bands


def add_cluster_options(p) -> None:
    """--gpu, --gpus, --cluster, --placement, shared with ``gpuplan search train``."""
    add_gpu_argument(p, "accelerator key (default: the cluster's, else h200)")
    p.add_argument("--gpus", type=gpu_count, help="number of GPUs (the world size)")
    p.add_argument(
        "--cluster", type=word,
        help="cluster preset: dgx-a100, dgx-h100, dgx-h200, gb200-nvl72, gb300-nvl72 "
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
    p.add_argument(
        "--expert-gemms", dest="expert_gemms", choices=("grouped", "per-expert"), default=None,
        help="MoE routed experts: one grouped GEMM per projection, or one GEMM per expert "
        "(default: the stack's framework's; megatron-te and fsdp2 group them)",
    )
    add_calibration_option(p)
    p.add_argument(
        "--state-precision",
        choices=("bf16-mixed-megatron", "bf16-grads-megatron", "bf16-mixed", "bf16",
                 "bf16-deepspeed", "bf16-deepspeed-2022"),
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


def add_job_options(p) -> None:
    """What a job's environment sets beside the stack: the boards' power limit and
    CUDA_LAUNCH_BLOCKING (published runs state both: ``--reproduce``)."""
    p.add_argument(
        "--power-limit-w", dest="power_limit_w", type=positive_float, default=None,
        help="hold every GPU to this board power in watts, below its rated TDP (nvidia-smi -pl; "
        "default: the rated TDP)",
    )
    p.add_argument(
        "--launch-blocking", dest="launch_blocking", action="store_true",
        help="run as under CUDA_LAUNCH_BLOCKING=1: every launch waits for its kernel",
    )
    p.add_argument(
        "--electricity-price", dest="electricity_price", type=positive_float, default=None,
        help="USD per kWh: with --tokens, the run's energy priced (given by the user)",
    )


def resolve_stack(args, acc):
    """The stack of --stack, --impl and their overrides (the layout it fills where the command
    line leaves it unset is ``layout_of``'s)."""
    from gpuplan.sim.stacks.training import with_elementwise

    stack = with_elementwise(stack_from_args(args, acc), args.impl)  # add_assumption_options
    gemms = getattr(args, "expert_gemms", None)
    return stack if gemms is None else dataclasses.replace(stack, expert_gemms=gemms)


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "train",
        help="multi-GPU training estimate of one strategy (or --reproduce published runs)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--model", type=word, help="model preset or config.json")
    add_cluster_options(p)
    add_strategy_options(p)
    add_assumption_options(p)
    add_job_options(p)
    p.add_argument(
        "--reproduce",
        action="store_true",
        help="predict the published training runs and print the comparison per source",
    )
    add_timeline_options(p)
    add_timing_option(p)
    add_allow_infeasible(p)
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p.set_defaults(func=run)


def resolve_cluster(args):
    """The cluster of --cluster/--gpu/--placement."""
    from gpuplan.hwmodels.accelerators import get_accelerator
    from gpuplan.sim.parallel.topology import (
        built_of,
        cluster_for,
        get_cluster,
        with_placement,
    )

    if args.cluster:
        cluster = get_cluster(args.cluster)
        origin = getattr(args, "device_origin", None)  # a device of one's own (device_args)
        if origin is not None and origin.base == cluster.gpu:
            cluster = built_of(cluster, args.gpu)  # the preset's nodes, of the changed device
        elif args.gpu and get_accelerator(args.gpu).key != cluster.gpu:
            raise GpuplanError(
                f"--gpu {args.gpu} does not match --cluster {args.cluster}, which is built of "
                f"{cluster.gpu}; drop one of them"
            )
    else:
        cluster = cluster_for(args.gpu or "h200")
    return with_placement(cluster, args.placement) if args.placement else cluster


LAYOUT_FLAGS = ("zero", "sp", "schedule", "micro_batch", "recompute", "precision",
                "state_precision", "overlap_dp", "overlap_tp", "overlap_pp")  # fmt: skip


def layout_of(args, gpus: int | None, stack, cfg=None):
    """(the ``Strategy`` of the layout flags, the defaults it took): the flags left unset filled
    as the stack's framework ships them (``sim.stacks.training_defaults.fill_defaults``), the
    degrees and the batch as ``sim.parallel.strategy_defaults`` fills them (and, for an MoE
    ``cfg``, how its experts launch: ``experts_default``); the stage split of
    ``cfg`` when it is given."""
    from gpuplan.sim.parallel.strategy_defaults import data_parallel_degree, strategy_of
    from gpuplan.sim.stacks.training_defaults import experts_default, fill_defaults

    dp = data_parallel_degree(gpus, tp=args.tp, pp=args.pp, cp=args.cp, dp=args.dp)
    pp_layers = resolve_pp_layers(args, cfg, args.pp or 1) if cfg is not None else None
    given = {f: getattr(args, f, None) for f in LAYOUT_FLAGS}
    filled = fill_defaults(stack, given, tp=args.tp or 1, pp=args.pp or 1,
                           virtual_stages=args.virtual_stages, ranks=dp * (args.cp or 1))  # fmt: skip
    strategy = strategy_of(
        gpus, tp=args.tp, pp=args.pp, dp=dp, cp=args.cp, ep=args.ep,
        global_batch=args.global_batch, virtual_stages=args.virtual_stages,
        attention=args.attention, overlap_ep=args.overlap_ep,
        capacity_factor=args.capacity_factor, expert_imbalance=args.expert_imbalance,
        pp_layers=pp_layers, **filled.fields,
    )  # fmt: skip
    set_by_flag = getattr(stack, "expert_gemms", None) is not None
    experts = experts_default(stack) if cfg is not None and cfg.is_moe and not set_by_flag else None
    if experts is not None:
        return strategy, (*filled.applied, experts)
    return strategy, filled.applied


def _strategy(args, gpus: int | None, stack, cfg=None):
    """The ``Strategy`` of the layout flags, unset ones filled (``layout_of``)."""
    return layout_of(args, gpus, stack, cfg)[0]


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
    from gpuplan.hwmodels.power import power_capped
    from gpuplan.sim.parallel.estimate import estimate_training
    from gpuplan.sim.parallel.strategy import default_seq
    from gpuplan.sim.stacks.training import with_launch_blocking
    from gpuplan.workloads.presets import get_model

    cfg = get_model(args.model)
    cluster = resolve_cluster(args)
    stack = with_launch_blocking(resolve_stack(args, cluster.accelerator), args.launch_blocking)
    strategy, applied = layout_of(args, args.gpus, stack, cfg)
    seq = args.seq or default_seq(cfg)
    if getattr(args, "timeline", None) and len(set(strategy.pp_layers or ())) > 1:
        raise GpuplanError(
            f"--timeline plays pipelines of equal stages; pp_layers="
            f"{','.join(map(str, strategy.pp_layers))} is uneven: drop --timeline or the uneven split"
        )
    eff = efficiency_from_args(args, cluster.accelerator.key)  # --calibration, else built in
    eff = power_capped(eff, cluster.accelerator.tdp_w, args.power_limit_w)
    images = _images(args, cfg)
    if images is not None:  # a VLM's samples with images (sim.estimate.vision)
        from gpuplan.sim.estimate.vision import vlm_training_estimate

        est = vlm_training_estimate(cfg, strategy, cluster=cluster, seq=seq, images=images,
                                    freeze_vision=args.freeze_vision, eff=eff, stack=stack)
    else:
        est = estimate_training(cfg, strategy, cluster=cluster, seq=seq, gpus=args.gpus,
                                stack=stack, eff=eff)  # fmt: skip
    _check_fits(args, est, cfg, cluster, stack, strategy, seq, eff)
    doc = est.to_dict()
    doc["feasible"] = bool(est.fits)
    doc["stack"] = stack_doc(stack, cluster.accelerator)
    doc["defaults"] = train_defaults(args, cluster, strategy, seq, applied)
    timing = {}
    if getattr(args, "timeline", None):
        timeline = write_timeline(args, cfg, strategy, cluster, seq)
        doc["timeline"] = {k: v for k, v in timeline.items() if k != "wall_s"}
        timing["timeline_wall_s"] = timeline["wall_s"]
    if args.tokens:
        doc["budget"] = _budget(args, cfg, est, cluster)
    doc |= bands.train_bands({**doc, **doc.get("budget", {})}, stack=stack.name,
                             device=cluster.accelerator.key)  # fmt: skip
    if timing:
        doc = with_timing(doc, args, timing)
    if args.json:
        print(dump_json(doc))
        return 0
    print(as_priced(render_estimate(doc), bool(est.fits)))
    return 0


def _budget(args, cfg, est, cluster) -> dict:
    """The run of --tokens: time, GPU-hours, cost, energy (priced at --electricity-price)."""
    from gpuplan.sim.parallel.interruptions import training_budget

    budget = training_budget(cfg, est, cluster, tokens=args.tokens,
                             usd_per_gpu_hour=args.price_per_gpu_hour)  # fmt: skip
    if args.electricity_price is not None:
        budget["electricity_usd"] = budget["energy_kwh"] * args.electricity_price
    return budget


def _check_fits(args, est, cfg, cluster, stack, strategy, seq, eff) -> None:
    """A plan that does not fit is never priced as if it ran (``cli.feasibility``)."""
    if not est.fits and not args.allow_infeasible:
        raise training_infeasible(cfg, cluster, stack.name, gpus=strategy.world,
                                  global_batch=strategy.global_batch, seq=seq, eff=eff,
                                  peak_bytes=est.peak_memory_per_gpu_bytes, label=strategy.label)  # fmt: skip


def _images(args, cfg):
    """--images N of --image-size WxH, or None; --image-size or --freeze-vision alone is an error."""
    from gpuplan.sim.estimate.whole_model import images_of

    if args.images is None and (args.freeze_vision or args.image_size):
        raise GpuplanError("--image-size and --freeze-vision need --images N")
    params = {"images": args.images, "image_size": args.image_size}
    return images_of(cfg, {k: v for k, v in params.items() if v is not None})


def train_defaults(args, cluster, strategy, seq: int, applied=()) -> list[str]:
    """The flags left unset whose defaults change the answer, as they were filled in: the
    stack, the GPU, the layout's (``applied``, ``layout_of``), the sequence and the batch."""
    out = []
    if not getattr(args, "stack_given", True):
        out.append(f"--stack {args.stack} (train's default)")
    if not args.gpu and not args.cluster:
        out.append(f"--gpu {cluster.gpu}")
    out += applied
    if not args.seq:
        out.append(f"--seq {seq} (the model's, at most 8192)")
    if not args.global_batch:
        out.append(f"--global-batch {strategy.global_batch} (micro-batch x dp x max(1, 4 pp))")
    return out
