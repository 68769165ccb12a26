"""The flags of ``gpuplan train`` that describe its strategy, pipeline split and timeline: their
argument types (ZeRO stage, precision, stage splits, stragglers) and the split they resolve to."""

from __future__ import annotations

import argparse

from gpuplan.cli.argtypes import (
    at_least_one,
    gpu_count,
    non_negative,
    positive_float,
    positive_int,
    random_seed,
    word,
)
from gpuplan.errors import GpuplanError
from gpuplan.limits import MAX_CV, MAX_GPUS

SCHEDULES = ("gpipe", "1f1b", "interleaved")
RECOMPUTE = ("none", "selective", "full")


def zero_stage(text: str) -> int:
    if text.lower() == "fsdp":
        return 3
    if text not in ("0", "1", "2", "3"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a ZeRO stage: 0, 1, 2, 3 or fsdp")
    return int(text)


PRECISION_WORDS = {"bf16": "bf16", "fp8": "fp8", "bf16-mixed": "bf16", "fp8-mixed": "fp8",
                   "mxfp8": "mxfp8", "nvfp4": "nvfp4"}


def training_precision(text: str) -> str:
    """--precision of train and search: bf16, fp8, or on Blackwell the block-scaled mxfp8 and
    nvfp4 recipes (``sim.parallel.fp8``) (``-mixed`` accepted, the same)."""
    word = text.strip().lower()
    if word not in PRECISION_WORDS:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a precision: bf16, fp8, mxfp8 or nvfp4 (bf16-mixed, fp8-mixed are "
            "the same as bf16, fp8)"
        )
    return PRECISION_WORDS[word]


def add_strategy_options(p) -> None:
    """The strategy of ``gpuplan train``: degrees, batch, sequence, images, schedule, stage split,
    recomputation, precision and the MoE load."""
    for name in ("tp", "pp", "dp", "ep", "cp"):
        p.add_argument(f"--{name}", type=gpu_count, help=f"{name} degree")
    p.add_argument("--sp", action=argparse.BooleanOptionalAction, default=None,
                   help="Megatron sequence parallelism, tp > 1 (default: the stack's: on with TP "
                   "for megatron-te and fsdp2)")  # fmt: skip
    p.add_argument("--zero", type=zero_stage, default=None,
                   help="ZeRO stage 0-3 or fsdp (= 3) (default: the stack's: megatron-te 1, "
                   "fsdp2 and composer-fsdp 3, deepspeed and pytorch 0)")  # fmt: skip
    p.add_argument("--micro-batch", type=positive_int, default=None,
                   help="sequences per micro-batch (default 1)")  # fmt: skip
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
    p.add_argument("--schedule", choices=SCHEDULES, default=None,
                   help="pipeline schedule (default: interleaved with --virtual-stages > 1, "
                   "else 1f1b)")  # fmt: skip
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
    p.add_argument("--recompute", choices=RECOMPUTE, default=None,
                   help="activation recomputation (default: the stack's: none; fsdp2 selective; "
                   "composer-fsdp full)")  # fmt: skip
    p.add_argument("--precision", type=training_precision, default=None,
                   help="GEMM precision of mixed-precision training: bf16 (default), fp8, or "
                   "Transformer Engine's block-scaled mxfp8 and nvfp4 recipes (Blackwell); "
                   "weights, gradients and Adam state per --state-precision. bf16-mixed and "
                   "fp8-mixed are the same words (estimate train-step's bf16-mixed is bf16)")  # fmt: skip
    p.add_argument(
        "--expert-imbalance",
        type=at_least_one,
        default=1.0,
        help="MoE: busiest expert's load over the mean (default 1.0)",
    )
    p.add_argument("--capacity-factor", type=positive_float, help="MoE: pad to this capacity")


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
