"""The flags of ``gpuplan serve`` and ``serve plan``: their argument types (rates, token-length
specs, P:D ratios, shared prefixes), the flags both take, and the single simulation's own."""

from __future__ import annotations

import argparse
import math

from gpuplan.cli.argtypes import (
    fraction,
    gpu_count,
    int_list,
    non_negative,
    positive,
    random_seed,
    request_count,
    word,
)
from gpuplan.cli.calibration import add_calibration_option
from gpuplan.cli.dask_workers import add_timing_option
from gpuplan.cli.device_args import add_gpu_argument
from gpuplan.cli.serve_emit import add_emit_option
from gpuplan.cli.train_args import first_last_arg, pp_layers_arg
from gpuplan.limits import MAX_CV

POLICIES = ("static", "dynamic", "continuous", "chunked")
EDGE_ALL = ("bf16", "fp8", "int8", "int4")  # serve edge --weight-dtype all
# the block-scaled 4-bit formats beside them (sim.runtime.serving.quantization: NVFP4 W4A4 where
# the device has FP4 tensor cores, weight-only elsewhere; MXFP4 weight-only, as vLLM runs it)
WEIGHT_DTYPES = (*EDGE_ALL, "nvfp4", "mxfp4")
KV_DTYPES = ("bf16", "fp8")
ROUTERS = ("round_robin", "least_outstanding", "shortest_queue_tokens")
DEFAULT_STACK = "gpuplan-server"  # what serve priced before stacks (sim.stacks.serving)


def rate_arg(text: str) -> float:
    if text.strip().lower() in ("inf", "infinity"):
        return math.inf
    return positive(float)(text)


def tokens_arg(text: str):
    """A whole number of tokens (> 0) or a length spec, checked when the workload is made."""
    if text.strip().lstrip("-").isdigit():
        return positive(int)(text)
    return word(text)


def ratio_arg(text: str) -> tuple[int, int]:
    p, sep, d = text.partition(":")
    if not sep or not p.isdigit() or not d.isdigit() or int(p) < 1 or int(d) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is invalid: give P:D, e.g. 1:2")
    return gpu_count(p), gpu_count(d)


def prefix_arg(text: str) -> tuple[int, int]:
    tokens, sep, groups = text.partition(":")
    if not sep or not tokens.isdigit() or not groups.isdigit() or min(int(tokens), int(groups)) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is invalid: give TOKENS:GROUPS, whole numbers "
                                         "of at least 1, e.g. 1024:8")  # fmt: skip
    return positive(int)(tokens), request_count(groups)


int_values = int_list()  # comma-separated whole numbers, each at least 1


def add_traffic_options(p, *, rate_required: bool, gpu_kw: dict | None = None) -> None:
    """The model, the GPU and the traffic (rate, lengths or a trace), seed, --json, timing,
    --calibration and --emit: the flags serve and serve plan share (``gpu_kw``: --gpu's own, as
    serve plan takes several)."""
    # the parent ``serve`` parser cannot require them: ``serve plan`` passes them to its own
    p.add_argument("--model", type=word, required=rate_required, help="model preset or config.json")
    add_gpu_argument(p, "accelerator key (see `gpuplan gpus`)", required=rate_required,
                     **(gpu_kw or {}))  # fmt: skip
    p.add_argument("--rate", type=rate_arg, required=rate_required, help="requests per second, or inf")
    p.add_argument("--prompt-tokens", type=tokens_arg, default=None, help="prompt length spec")
    p.add_argument("--output-tokens", type=tokens_arg, default=None, help="output length spec")
    p.add_argument(
        "--trace", type=word, help="CSV or JSON Lines trace: arrival_s, prompt_tokens, output_tokens"
    )
    p.add_argument("--requests", type=request_count, default=None, help="requests to simulate")
    p.add_argument("--seed", type=random_seed, default=0,
                   help="random seed, 0 to 2^64 - 1 (default 0)")  # fmt: skip
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    add_timing_option(p)
    add_calibration_option(p)
    add_emit_option(p)


def add_pipeline_options(p) -> None:
    """--pp, --pp-layers, --pp-first-last (training's parsing and rule) and --ep."""
    p.add_argument("--pp", type=gpu_count, default=1,
                   help="pipeline stages per replica, of --tp GPUs each")  # fmt: skip
    p.add_argument("--pp-layers", type=pp_layers_arg, metavar="N,N,...|auto",
                   help="blocks on each pipeline stage, first to last, or auto (as train's)")  # fmt: skip
    p.add_argument("--pp-first-last", type=first_last_arg, metavar="N,M",
                   help="N blocks on the first stage, M on the last, the rest split evenly")  # fmt: skip
    p.add_argument("--ep", type=gpu_count, default=1,
                   help="MoE: GPUs of a stage the experts are sharded over (divides --tp; "
                   "--ep = --tp is vLLM's --enable-expert-parallel; with --dp-attention the "
                   "GPUs of a wide-EP group, up to the whole deployment)")  # fmt: skip
    add_wide_ep_options(p)


def add_wide_ep_options(p) -> None:
    """--dp-attention, --expert-imbalance, --redundant-experts, --two-batch-overlap."""
    p.add_argument("--dp-attention", action="store_true",
                   help="MoE: attention data-parallel over --replicas ranks of --tp GPUs, the "
                   "experts over groups of --ep GPUs (SGLang --enable-dp-attention)")  # fmt: skip
    p.add_argument("--expert-imbalance", type=positive(float), default=None,
                   help="busiest EP rank's routed tokens over the mean (default: expected "
                   "under uniform top-k routing of each batch)")  # fmt: skip
    p.add_argument("--redundant-experts", type=non_negative(int, 1 << 16), default=0,
                   help="extra expert copies over each group (EPLB)")  # fmt: skip
    p.add_argument("--two-batch-overlap", action="store_true",
                   help="two micro-batches hide each other's all-to-alls")  # fmt: skip


def accept_rate_arg(text: str) -> float | tuple[float, ...]:
    """``A`` or ``A1,A2,...``: numbers, their range checked with the speculation."""
    from gpuplan.sim.runtime.serving.speculative import parse_rates

    try:
        return parse_rates(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is invalid: give a rate in [0, 1], or one a "
                                         "position, e.g. 0.9,0.75,0.6") from None  # fmt: skip


def add_speculative_options(p, what: str) -> None:
    """``--speculative``, ``--spec-tokens`` and ``--accept-rate`` (serve and serve plan)."""
    p.add_argument("--speculative", type=word, default=None,
                   help=f"{what}: ngram, eagle, draft:MODEL or mtp (the model's own MTP layers), "
                   "with --spec-tokens and --accept-rate (mtp: published acceptance by default)")  # fmt: skip
    p.add_argument("--spec-tokens", type=int, default=None, help="tokens proposed a step (K >= 1)")
    p.add_argument("--accept-rate", type=accept_rate_arg, default=None, metavar="A|A1,...,AK",
                   help="acceptance of the proposals, in [0, 1]: one rate for every position, or "
                   "one a position, each given the ones before it were accepted")  # fmt: skip


def add_replica_options(p) -> None:
    """The replicas of one simulation: parallelism, routing, batching, formats, memory."""
    p.add_argument("--tp", type=gpu_count, default=1, help="tensor-parallel GPUs per replica")
    add_pipeline_options(p)
    p.add_argument("--replicas", type=gpu_count, default=1)
    p.add_argument("--router", choices=ROUTERS, default="round_robin")
    p.add_argument("--policy", choices=POLICIES, default=None, help="default: the stack's")
    p.add_argument("--weight-dtype", choices=WEIGHT_DTYPES, default=None,
                   help="default: the checkpoint's own format (fp8 for deepseek-v3 and configs "
                        "whose quantization_config says fp8), else bf16")
    p.add_argument("--kv-dtype", choices=KV_DTYPES, default="bf16")
    p.add_argument("--max-seqs", type=positive(int), default=None, help="default: the stack's")
    p.add_argument("--max-batched-tokens", type=positive(int), default=None,
                   help="default: the stack's")  # fmt: skip
    p.add_argument("--max-model-len", type=positive(int), default=None)
    p.add_argument("--block-tokens", type=positive(int), default=None, help="default: the stack's")
    p.add_argument("--preemption", choices=("recompute", "swap"), default="recompute")
    p.add_argument("--batch-timeout-s", type=positive(float), default=0.1)
    p.add_argument("--memory-utilization", type=fraction, default=None,
                   help="share of the device for weights and KV cache (default: the stack's)")


def add_simulation_options(p) -> None:
    """The rest of one simulation: arrivals, prefixes, images, disaggregation, kernels, SLOs,
    outputs, --reproduce and speculative decoding."""
    p.add_argument("--arrival", choices=("poisson", "gamma"), default="poisson")
    p.add_argument("--cv", type=positive(float, MAX_CV), default=1.0, help="gamma arrivals' burstiness")
    p.add_argument("--shared-prefix", type=prefix_arg, default=None, metavar="TOKENS:GROUPS",
                   help="prefix caching: each request shares its first TOKENS prompt tokens "
                   "with one of GROUPS prefixes (a trace gives prefix_id, prefix_tokens columns)")
    p.add_argument("--images-per-request", type=non_negative(int, 1024), default=None,
                   metavar="N", help="vision-language models: images on every request (their "
                   "tokens join the prompt, their encoder the prefill; a trace gives "
                   "image_tokens and images columns)")
    p.add_argument("--image-size", type=word, default=None, metavar="WxH",
                   help="pixels of each image (default: the encoder's own square)")
    p.add_argument("--disaggregate", type=ratio_arg, help="P:D prefill and decode replicas")
    p.add_argument("--kv-link", choices=("scaleout", "scaleup"), default="scaleout")
    p.add_argument("--no-cuda-graph", action="store_true", help="decode iterations run eagerly")
    p.add_argument("--impl", choices=("fused", "eager", "compiled"), default=None,
                   help="elementwise kernels (default: the stack's)")
    p.add_argument("--slo-ttft-s", type=positive(float), help="for goodput")
    p.add_argument("--slo-tpot-s", type=positive(float), help="for goodput")
    p.add_argument("--horizon-s", type=positive(float), help="stop the simulation at this time")
    p.add_argument("--progress", action="store_true", help="a progress bar on stderr, when it is a terminal")
    p.add_argument("--requests-csv", type=word, help="write the per-request table to this CSV file")
    p.add_argument("--timeline-csv", type=word,
                   help="write queue length and KV use over time to this CSV")  # fmt: skip
    p.add_argument("--reproduce", action="store_true",
                   help="predict the published serving results (TensorRT-LLM, NIM, vLLM) and "
                   "print the error by source and metric")  # fmt: skip
    add_speculative_options(p, "speculative decoding")
