"""``gpuplan serve``: simulate serving traffic, plan capacity under SLOs, estimate edge devices.

- ``gpuplan serve --model M --gpu G --rate R --prompt-tokens P --output-tokens O`` runs one
  simulation and prints the latency table (``--rate inf``: every request at time zero, an
  offline throughput run);
- ``gpuplan serve plan --model M --gpu G --rate R --slo-ttft-s X --slo-tpot-s Y`` searches
  tensor parallelism, replicas, batch limits, quantization and disaggregation for the cheapest
  configurations that meet the SLOs;
- ``gpuplan serve edge --model M --gpu jetson-agx-orin-64gb`` gives single-stream and
  small-batch tokens/s and memory per weight format, with the bound that limits them.

Token counts (``--prompt-tokens``, ``--output-tokens``) are a number, ``uniform:LO:HI``,
``lognormal:MEDIAN:P90[:MAX]`` or ``conversation`` (a fit to the Azure 2023 conversation trace).
"""

from __future__ import annotations

import argparse
import math
import sys

from gpuplan.cli.argtypes import (
    fraction,
    gpu_count,
    int_list,
    non_negative,
    percentile,
    positive,
    random_seed,
    request_count,
    word,
)
from gpuplan.cli.calibration import add_calibration_option, efficiency_from_args, efficiency_line
from gpuplan.cli.dask_workers import (
    add_sweep_options,
    add_timing_option,
    open_pool,
    pool_label,
    timed,
    with_timing,
)
from gpuplan.cli.stack_flags import add_stack_options, stack_doc, stack_from_args, stack_line
from gpuplan.cli.tables import (
    dump_json,
    format_banded,
    format_seconds,
    format_value,
    render_table,
)
from gpuplan.errors import GpuplanError
from gpuplan.limits import MAX_CV, MAX_GPUS
from gpuplan.outputs import check_output, write_csv
from gpuplan.sim import bands

POLICIES = ("static", "dynamic", "continuous", "chunked")
WEIGHT_DTYPES = ("bf16", "fp8", "int8", "int4")
KV_DTYPES = ("bf16", "fp8")
ROUTERS = ("round_robin", "least_outstanding", "shortest_queue_tokens")
DEFAULT_STACK = "gpuplan-server"  # what serve priced before stacks (sim.stacks.serving)


def _rate(text: str) -> float:
    if text.strip().lower() in ("inf", "infinity"):
        return math.inf
    return positive(float)(text)


def _tokens(text: str):
    """A whole number of tokens (> 0) or a length spec, checked when the workload is made."""
    if text.strip().lstrip("-").isdigit():
        return positive(int)(text)
    return word(text)


def _ratio(text: str) -> tuple[int, int]:
    p, sep, d = text.partition(":")
    if not sep or not p.isdigit() or not d.isdigit() or int(p) < 1 or int(d) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is invalid: give P:D, e.g. 1:2")
    return gpu_count(p), gpu_count(d)


def _prefix(text: str) -> tuple[int, int]:
    tokens, sep, groups = text.partition(":")
    if not sep or not tokens.isdigit() or not groups.isdigit() or min(int(tokens), int(groups)) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is invalid: give TOKENS:GROUPS, whole numbers "
                                         "of at least 1, e.g. 1024:8")  # fmt: skip
    return positive(int)(tokens), request_count(groups)


_ints = int_list()  # comma-separated whole numbers, each at least 1


def _common(p, *, rate_required: bool) -> None:
    # the parent ``serve`` parser cannot require them: ``serve plan`` passes them to its own
    p.add_argument("--model", type=word, required=rate_required, help="model preset or config.json")
    p.add_argument("--gpu", type=word, required=rate_required, help="accelerator key (see `gpuplan gpus`)")
    p.add_argument("--rate", type=_rate, required=rate_required, help="requests per second, or inf")
    p.add_argument("--prompt-tokens", type=_tokens, default=None, help="prompt length spec")
    p.add_argument("--output-tokens", type=_tokens, default=None, help="output length spec")
    p.add_argument(
        "--trace", type=word, help="CSV or JSON Lines trace: arrival_s, prompt_tokens, output_tokens"
    )
    p.add_argument("--requests", type=request_count, default=None, help="requests to simulate")
    p.add_argument("--seed", type=random_seed, default=0,
                   help="random seed, 0 to 2^64 - 1 (default 0)")  # fmt: skip
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    add_timing_option(p)
    add_calibration_option(p)
    add_stack_options(p, default=DEFAULT_STACK)


def _pipeline_options(p) -> None:
    """--pp, --pp-layers, --pp-first-last (training's parsing and rule) and --ep."""
    from gpuplan.cli.train_args import first_last_arg, pp_layers_arg

    p.add_argument("--pp", type=gpu_count, default=1,
                   help="pipeline stages per replica, of --tp GPUs each")  # fmt: skip
    p.add_argument("--pp-layers", type=pp_layers_arg, metavar="N,N,...|auto",
                   help="blocks on each pipeline stage, first to last, or auto (as train's)")  # fmt: skip
    p.add_argument("--pp-first-last", type=first_last_arg, metavar="N,M",
                   help="N blocks on the first stage, M on the last, the rest split evenly")  # fmt: skip
    p.add_argument("--ep", type=gpu_count, default=1,
                   help="MoE: GPUs of a stage the experts are sharded over (divides --tp; "
                   "--ep = --tp is vLLM's --enable-expert-parallel)")  # fmt: skip


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "serve",
        help="simulate LLM serving; `serve plan` for capacity, `serve edge` for edge devices",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _common(p, rate_required=False)
    p.add_argument("--tp", type=gpu_count, default=1, help="tensor-parallel GPUs per replica")
    _pipeline_options(p)
    p.add_argument("--replicas", type=gpu_count, default=1)
    p.add_argument("--router", choices=ROUTERS, default="round_robin")
    p.add_argument("--policy", choices=POLICIES, default=None, help="default: the stack's")
    p.add_argument("--weight-dtype", choices=WEIGHT_DTYPES, default="bf16")
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
    p.add_argument("--arrival", choices=("poisson", "gamma"), default="poisson")
    p.add_argument("--cv", type=positive(float, MAX_CV), default=1.0, help="gamma arrivals' burstiness")
    p.add_argument("--shared-prefix", type=_prefix, default=None, metavar="TOKENS:GROUPS",
                   help="prefix caching: each request shares its first TOKENS prompt tokens "
                   "with one of GROUPS prefixes (a trace gives prefix_id, prefix_tokens columns)")
    p.add_argument("--images-per-request", type=non_negative(int, 1024), default=None,
                   metavar="N", help="vision-language models: images on every request (their "
                   "tokens join the prompt, their encoder the prefill; a trace gives "
                   "image_tokens and images columns)")
    p.add_argument("--image-size", type=word, default=None, metavar="WxH",
                   help="pixels of each image (default: the encoder's own square)")
    p.add_argument("--disaggregate", type=_ratio, help="P:D prefill and decode replicas")
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
    _speculative_flags(p, "speculative decoding")
    p.set_defaults(func=run_serve)
    sub = p.add_subparsers(title="subcommands", metavar="{plan,edge}", dest="serve_command")
    _register_plan(sub)
    _register_edge(sub)


def _speculative_flags(p, what: str) -> None:
    """``--speculative``, ``--spec-tokens`` and ``--accept-rate`` (serve and serve plan)."""
    p.add_argument("--speculative", type=word, default=None,
                   help=f"{what}: ngram, eagle or draft:MODEL (with --spec-tokens and "
                   "--accept-rate)")  # fmt: skip
    p.add_argument("--spec-tokens", type=int, default=None, help="tokens proposed a step (K >= 1)")
    p.add_argument("--accept-rate", type=float, default=None,
                   help="per-token acceptance of the proposals, in [0, 1]")  # fmt: skip


def _register_plan(sub) -> None:
    p = sub.add_parser("plan", help="cheapest configurations that meet TTFT and TPOT SLOs")
    _common(p, rate_required=True)
    p.add_argument("--slo-ttft-s", type=positive(float), required=True)
    p.add_argument("--slo-tpot-s", type=positive(float), required=True)
    p.add_argument("--percentile", type=percentile, default=99.0)
    p.add_argument("--tp", type=int_list(MAX_GPUS), help="tensor-parallel degrees to try (default: all)")
    p.add_argument("--policy", choices=("continuous", "chunked"), default="chunked")
    p.add_argument("--max-seqs", type=_ints, default=(64, 256), help="max_seqs values to try")
    p.add_argument("--no-disaggregation", action="store_true")
    p.add_argument("--max-gpus", type=gpu_count, default=64)
    p.add_argument("--top", type=positive(int), default=5)
    p.add_argument("--price-per-gpu-hour", type=positive(float), help="USD (default: price file)")
    _speculative_flags(p, "also try each colocated candidate with speculative decoding")
    add_sweep_options(p)
    p.set_defaults(func=run_plan)


def _register_edge(sub) -> None:
    p = sub.add_parser("edge", help="tokens/s and memory of quantized models on one device")
    p.add_argument("--model", type=word, required=True)
    p.add_argument("--gpu", type=word, required=True, help="e.g. jetson-agx-orin-64gb, m2-ultra")
    p.add_argument("--weight-dtype", choices=(*WEIGHT_DTYPES, "all"), default="all")
    p.add_argument("--kv-dtype", choices=KV_DTYPES, default="bf16")
    p.add_argument("--batch", type=_ints, default=(1, 2, 4, 8), help="e.g. 1,2,4,8")
    p.add_argument("--context", type=positive(int), default=1024, help="cached tokens")
    p.add_argument("--prompt-tokens", type=positive(int), default=512, help="for the TTFT")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    add_calibration_option(p)
    add_stack_options(p, default=DEFAULT_STACK)
    p.add_argument("--speculative", type=word, default=None,
                   help="speculative decoding METHOD:K:ACCEPTANCE (ngram, eagle or draft; K "
                   "drafted tokens a step, each accepted at a rate in [0, 1]), e.g. eagle:4:0.7")
    p.add_argument("--draft-model", default=None, help="the draft model of --speculative draft")
    p.set_defaults(func=run_edge)


# --- serve -------------------------------------------------------------------------------------


def _workload(args, *, default_requests: int):
    from gpuplan.sim.serving.requests import make_workload, read_trace

    if args.trace:
        load = read_trace(args.trace, rate_per_s=args.rate, seed=args.seed, limit=args.requests)
        return _with_images(args, load)
    missing = [
        flag
        for flag, value in (
            ("--rate", args.rate),
            ("--prompt-tokens", args.prompt_tokens),
            ("--output-tokens", args.output_tokens),
        )
        if value is None
    ]
    if missing:
        raise GpuplanError(f"give {', '.join(missing)} (or --trace FILE)")
    load = make_workload(
        rate_per_s=args.rate,
        n=args.requests or default_requests,
        prompt_tokens=args.prompt_tokens,
        output_tokens=args.output_tokens,
        seed=args.seed,
        arrival=getattr(args, "arrival", "poisson"),
        cv=getattr(args, "cv", 1.0),
        shared_prefix=getattr(args, "shared_prefix", None),
    )
    return _with_images(args, load)


def _with_images(args, load):
    """--images-per-request N of --image-size on every request (a VLM's), else ``load``."""
    from gpuplan.sim.serving.requests import with_images
    from gpuplan.workloads.presets import get_model
    from gpuplan.workloads.vision import Images, default_image_size, image_tokens, parse_image_size

    count, size = getattr(args, "images_per_request", None), getattr(args, "image_size", None)
    if count is None:
        if size is not None:
            raise GpuplanError("--image-size needs --images-per-request N")
        return load
    cfg = get_model(args.model)
    width, height = parse_image_size(size) if size is not None else default_image_size(cfg)
    tokens = image_tokens(cfg, Images(count=count, width=width, height=height))
    return with_images(load, images=count, image_tokens=tokens)


def run_serve(args) -> int:
    from gpuplan.sim.serving.deployment import SchedulerConfig
    from gpuplan.sim.serving.disagg import Disaggregation, simulate_disaggregated
    from gpuplan.sim.serving.engine import simulate

    if getattr(args, "reproduce", False):
        return run_reproduce(args)
    missing = [flag for flag in ("model", "gpu") if getattr(args, flag) is None]
    if missing:
        flags = ", ".join("--" + m for m in missing)
        raise GpuplanError(
            f"gpuplan serve needs {flags} (or a subcommand: plan, edge; or --reproduce)"
        )

    _check_serve_outputs(args)
    dep, stack = _stack_deployment(args)
    sched = _stack_scheduler(args, stack, dep)
    defaults = serve_defaults(args)
    workload = _workload(args, default_requests=1000)
    common = {
        "horizon_s": args.horizon_s,
        "timeline": True,
        "progress": args.progress and sys.stderr.isatty(),  # a bar on a terminal only
        "slo_ttft_s": args.slo_ttft_s,
        "slo_tpot_s": args.slo_tpot_s,
    }
    speculator = _speculator(args, dep, stack)
    if args.disaggregate:
        if speculator is not None:
            raise GpuplanError("--speculative with --disaggregate is not modelled: drop one")
        p, d = args.disaggregate
        dis = Disaggregation(prefill_replicas=p, decode_replicas=d, link=args.kv_link)
        prefill = SchedulerConfig(**{**_fields(sched), "policy": "continuous"})
        result = simulate_disaggregated(dep, sched, workload, dis, prefill_sched=prefill, **common)
        replicas = p + d
    else:
        result = simulate(dep, sched, workload, replicas=args.replicas, router=args.router,
                          speculator=speculator, **common)  # fmt: skip
        replicas = args.replicas
    if args.requests_csv:
        write_csv(args.requests_csv, result.requests)
    if args.timeline_csv:
        write_csv(args.timeline_csv, result.timeline)
    doc = with_timing(_serve_doc(args, dep, sched, workload, result, replicas, stack), args,
                      {"wall_s": result.wall_s})  # fmt: skip
    doc["config"]["defaults"] = defaults
    doc |= bands.serve_bands(doc, stack=(doc["config"].get("stack") or {}).get("name", ""),
                             device=doc["config"]["gpu"])  # fmt: skip
    print(dump_json(doc) if args.json else _render_serve(doc))
    return 0


def _speculator(args, dep, stack):
    """``--speculative``'s drafter for the replica ``dep`` (its draft model on the same GPUs,
    stack and formats), or None."""
    speculation = _speculation(args)
    if speculation is None:
        return None
    from gpuplan.sim.serving.on_stack import stack_deployment
    from gpuplan.sim.serving.speculative import Speculator

    spec, draft_name = speculation
    draft = None
    if draft_name is not None:
        draft = stack_deployment(draft_name, args.gpu, stack, fit=_fit(args), tp=dep.tp,
                                 weight_dtype=dep.weight_dtype, kv_dtype=dep.kv_dtype)  # fmt: skip
    return Speculator(spec, dep, draft=draft)


def _stack_deployment(args):
    """The replica as ``--stack`` serves it, with the flags that override the stack's choices."""
    from gpuplan.hwmodels.accelerators import get_accelerator
    from gpuplan.sim.serving.on_stack import stack_deployment

    stack = stack_from_args(args, get_accelerator(args.gpu))
    kw = {"tp": args.tp, "weight_dtype": args.weight_dtype, "kv_dtype": args.kv_dtype}
    kw |= _pipeline_fields(args)
    if args.no_cuda_graph:
        kw |= {"cuda_graph": False, "decode_buckets": ()}
    if args.impl is not None:
        kw["impl"] = args.impl
    return stack_deployment(args.model, args.gpu, stack, fit=_fit(args), **kw), stack


def _pipeline_fields(args) -> dict:
    """Deployment's pp, pp_layers and ep from the flags (the split resolved as train's)."""
    from gpuplan.cli.train_args import resolve_pp_layers
    from gpuplan.workloads.presets import get_model

    pp = getattr(args, "pp", 1)
    if pp == 1 and getattr(args, "pp_layers", None) is None and not getattr(args, "pp_first_last", None):
        return {"pp": 1, "ep": getattr(args, "ep", 1)}
    layers = resolve_pp_layers(args, get_model(args.model), pp)
    return {"pp": pp, "pp_layers": layers, "ep": getattr(args, "ep", 1)}


def _stack_scheduler(args, stack, dep):
    """The stack's scheduler defaults, each flag given overriding its own; a KV share of the
    free memory (TensorRT-LLM's) as the device share it amounts to, unless one is given."""
    from gpuplan.sim.serving.on_stack import kv_memory_share, stack_scheduler

    sched = stack_scheduler(stack, policy=args.policy, max_seqs=args.max_seqs,
                            max_batched_tokens=args.max_batched_tokens,
                            block_tokens=args.block_tokens, preemption=args.preemption,
                            batch_timeout_s=args.batch_timeout_s,
                            memory_utilization=args.memory_utilization,
                            max_model_len=args.max_model_len)  # fmt: skip
    return sched if args.memory_utilization is not None else kv_memory_share(stack, dep, sched)


def serve_defaults(args, *, tokens: tuple[int, int] | None = None) -> list[str]:
    """The flags left unset whose defaults change the answer (before they are filled in)."""
    out = []
    if tokens and not args.trace:
        out += [f"--prompt-tokens {tokens[0]}"] * (args.prompt_tokens is None)
        out += [f"--output-tokens {tokens[1]}"] * (args.output_tokens is None)
    if args.requests is None and not args.trace:
        out.append("--requests 1000")
    if not getattr(args, "no_cuda_graph", False):
        from gpuplan.sim.stacks import get_stack

        run = get_stack(getattr(args, "stack", None) or DEFAULT_STACK).serving
        if run is None or run.cuda_graph:  # a runtime without graphs decodes eagerly anyway
            out.append("CUDA graphs on for decode (--no-cuda-graph: eager)")
    return out


def _defaults_line(defaults: list[str]) -> str:
    return "defaults in force (not given): " + (", ".join(defaults) or "none")


def _check_serve_outputs(args) -> None:
    """Output paths and the replica count checked before any work."""
    for flag in ("requests_csv", "timeline_csv"):
        if getattr(args, flag):
            check_output(getattr(args, flag), "--" + flag.replace("_", "-"))
    if args.disaggregate and args.replicas not in (1, sum(args.disaggregate)):
        p, d = args.disaggregate
        raise GpuplanError(
            f"--replicas {args.replicas} disagrees with --disaggregate {p}:{d}, which runs "
            f"{p} + {d} = {p + d} replicas: drop --replicas or give a P:D that sums to it"
        )


def _fields(obj) -> dict:
    import dataclasses

    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}


def _serve_doc(args, dep, sched, workload, result, replicas: int, stack=None) -> dict:
    cap = result.capacity
    config = {
        "stack": None if stack is None else {**stack_doc(stack, dep.acc),
                                             "line": stack_line(stack, dep.acc)},
        "model": dep.model.name,
        "gpu": dep.acc.key,
        "tp": dep.tp,
        "pp": dep.pp,
        "pp_layers": list(dep.pp_layers or (dep.model.n_layers,)),
        "ep": dep.ep,
        "replicas": replicas,
        "gpus": replicas * dep.gpus,
        "disaggregate": None if not args.disaggregate else "{}:{}".format(*args.disaggregate),
        "policy": sched.policy,
        "max_seqs": sched.max_seqs,
        "max_batched_tokens": sched.batched_tokens(dep.model),
        "weight_dtype": dep.weight_dtype,
        "kv_dtype": dep.kv_dtype,
        "rate_per_s": args.rate,
        "requests": workload.n,
        "seed": args.seed,
        "efficiency_source": dep.eff.source,
    }
    return {
        **result.summary,
        "config": config,
        "kv_cache": {
            "blocks": cap.blocks,
            "block_tokens": cap.block_tokens,
            "tokens": cap.tokens,
            "kv_bytes_per_gpu": cap.kv_bytes,
            "weights_bytes_per_gpu": cap.weights_bytes,
            "workspace_bytes_per_gpu": cap.workspace_bytes,
        },
        "simulated_s": result.end_s,
    }


def _render_serve(doc: dict) -> str:
    c, kv = doc["config"], doc["kv_cache"]
    layout = (
        f"{c['replicas']} replica(s)"
        if not c["disaggregate"]
        else (f"disaggregated {c['disaggregate']} (prefill:decode)")
    )
    lines = [
        f"{c['model']} on {c['gpus']} x {c['gpu']}: {layout}, tp={c['tp']}, "
        + (f"pp={c['pp']} (blocks {','.join(map(str, c['pp_layers']))}), " if c.get("pp", 1) > 1 else "")
        + (f"ep={c['ep']}, " if c.get("ep", 1) > 1 else "")
        + f"{c['weight_dtype']} weights, {c['kv_dtype']} KV cache, {c['policy']} batching "
        f"(max {c['max_seqs']} sequences)",
        _defaults_line(c.get("defaults", [])),
        f"KV cache per replica: {kv['blocks']:,} blocks of {kv['block_tokens']} tokens "
        f"({kv['tokens']:,} tokens, {format_value('bytes', kv['kv_bytes_per_gpu'])} per GPU); "
        f"weights {format_value('bytes', kv['weights_bytes_per_gpu'])} per GPU",
        f"{c['requests']:,} requests {_offered(c)}: {doc['finished']:,} finished, "
        f"{doc['rejected']:,} rejected, {doc['in_flight']:,} in flight, "
        f"{doc['preemptions']:,} preemptions; simulated {format_seconds(doc['simulated_s'])}"
        + (f" in {format_seconds(doc['timing']['wall_s'])}" if "timing" in doc else ""),
        _render_conservation(doc["conservation"]),
    ]
    if c.get("stack"):
        lines.append(c["stack"]["line"])
    if doc.get("prefix_cache"):
        pc = doc["prefix_cache"]
        lines.append(f"prefix cache: {pc['saved_prefill_tokens']:,} prompt tokens found cached "
                     f"({100 * pc['hit_rate']:.1f}% of prompt tokens; {pc['requests_hit']:,} "
                     "requests hit)")
    if doc.get("speculative"):
        sp = doc["speculative"]
        drafter = f"draft model {sp['draft_model']}" if sp["draft_model"] else sp["method"]
        lines.append(f"speculative decoding ({drafter}, {sp['spec_tokens']} tokens proposed a "
                     f"step, acceptance {sp['accept_rate']:g}): "
                     f"{sp['mean_accepted_tokens_per_step']:.3g} tokens a sequence per step "
                     f"(expected {sp['expected_tokens_per_step']:.3g}); drafting "
                     f"{100 * sp['draft_cost_share']:.1f}% of the speculative steps' time")
    if doc.get("vision"):
        v = doc["vision"]
        lines.append(f"images: {v['images']:,} on {v['requests_with_images']:,} requests, "
                     f"{v['image_tokens_mean']:,.0f} image tokens a request ("
                     + ("in its prompt" if v.get("style", "inline") == "inline"
                        else "cross-attention keys and values") + "); "
                     f"encoder {format_seconds(v['encoder_s_mean'])} a request")
    lines.append("")
    band = doc.get("error_band", {})
    rows = [{"metric": m, **{k: format_banded("_s", v, band.get(bands.latency_key(m, k)))
                             for k, v in doc[m].items()}} for m in ("ttft_s", "tpot_s", "e2e_s")]
    cols = ["metric", "mean", "p50", "p90", "p99"]
    lines.append(render_table(rows, cols))
    tps = format_banded("", doc["output_tokens_per_s"], band.get("output_tokens_per_s"),
                        lambda v: f"{v:,.1f}")  # fmt: skip
    rps = format_banded("", doc["requests_per_s"], band.get("requests_per_s"), lambda v: f"{v:.4g}")
    lines += [
        "",
        f"throughput: {tps} output tokens/s (first arrival to last "
        f"finish), {rps} requests/s ({_rate_window(doc)})",
    ]
    if doc.get("error_band_label"):
        lines.append(f"error band p10-p90: {doc['error_band_label']}")
    if "goodput_requests_per_s" in doc:
        lines.append(
            f"goodput: {doc['goodput_requests_per_s']:.4g} requests/s within "
            f"the SLO ({100 * doc['slo_attainment']:.1f}% of finished requests)"
        )
    lines.append(efficiency_line(c["efficiency_source"]))
    return "\n".join(lines)


def _offered(c: dict) -> str:
    rate = c["rate_per_s"]
    return "at the trace's own arrival times" if rate is None else f"at {rate:g}/s"


def _rate_window(doc: dict) -> str:
    if doc.get("arrival_window_s"):
        return f"finished within the {format_seconds(doc['arrival_window_s'])} arrival window"
    return "all arrived at once: over the whole run"


def _render_conservation(c: dict) -> str:
    parts = [f"{c[k]:,} {k.replace('_', ' ')}" for k in ("finished", "running", "queued",
             "rejected", "transferring", "not_arrived") if c[k] or k in ("finished", "rejected")]  # fmt: skip
    verdict = "ok" if c.get("ok") else "FAILED"
    return f"conservation checks: {c['requests']:,} requests = {' + '.join(parts)}: {verdict}"


# --- reproduce ---------------------------------------------------------------------------------


def run_reproduce(args) -> int:
    """Predict the published serving rows; print per-source error tables (held-out rows and
    all rows) and the rows that cannot be run, with their reasons."""
    from gpuplan.sim.serving.published import HOLDOUT_SHARE, cannot_run, reproduce, summary

    rows = reproduce(seed=args.seed)
    held, every, bad = summary(rows, split="holdout"), summary(rows, split=None), cannot_run(rows)
    if args.json:
        print(dump_json({"seed": args.seed, "holdout_share": HOLDOUT_SHARE, "rows": rows,
                         "summary_holdout": held, "summary_all": every, "cannot_run": bad}))  # fmt: skip
        return 0
    cols = ["source", "kind", "rows", "predicted", "cannot_run", "median_abs_pct_error",
            "p90_abs_pct_error", "median_pct_error"]  # fmt: skip
    pct = {c: (lambda v: f"{v:.1f}%") for c in cols[-3:-1]}
    pct[cols[-1]] = lambda v: f"{v:+.1f}%"
    predicted = int(rows["predicted"].notna().sum())
    print(
        f"Published serving results against gpuplan: {len(rows):,} rows from "
        f"{rows['source'].nunique()} sources, {predicted:,} predicted "
        f"({100 * predicted / len(rows):.1f}%); held-out share {HOLDOUT_SHARE:g} of each "
        f"source (seed {args.seed}); each row priced on its engine's stack, whose uncited "
        f"parameters are fitted on the other rows only (gpuplan/sim/serving/data/stack_fit.json)\n"
    )
    print("held-out rows\n" + render_table(held, cols, formats=pct))
    print("\nall rows\n" + render_table(every, cols, formats=pct))
    print("\nrows that cannot be run\n" + render_table(bad, ["source", "rows", "reason"]))
    return 0


# --- plan --------------------------------------------------------------------------------------


def run_plan(args) -> int:
    from gpuplan.hwmodels.accelerators import get_accelerator
    from gpuplan.sim.serving.plan import RATIOS, SearchSpace

    if args.trace:
        from gpuplan.sim.serving.requests import read_trace

        load = read_trace(args.trace, rate_per_s=args.rate, seed=args.seed, limit=args.requests)
    defaults = serve_defaults(args, tokens=(1024, 256))
    if not args.trace:
        args.prompt_tokens = args.prompt_tokens or 1024
        args.output_tokens = args.output_tokens or 256
        load = _workload(args, default_requests=1000)
    space = SearchSpace(
        tps=args.tp,
        max_seqs=args.max_seqs,
        policy=args.policy,
        ratios=() if args.no_disaggregation else RATIOS,
        max_gpus=args.max_gpus,
        stack=_plan_stack(args),
        speculation=_speculation(args),
    )
    with open_pool(args) as pool:
        result = _plan(args, load, space, pool)
    acc_key, plan_stack = get_accelerator(args.gpu).key, space.stack.name
    # each row's own bands; the document's: the first (cheapest) row's
    configs = [c | bands.serve_bands(c, stack=plan_stack, device=acc_key)
               for c in result.best_rows]  # fmt: skip
    first = configs[0] if configs else {}
    doc = {
        "configs": configs,
        "error_band": first.get("error_band", {}),
        "error_band_label": first.get("error_band_label", ""),
        "evaluated": len(result.rows),
        "candidates": result.candidates,
        "price_source": result.price_source,
        "efficiency_source": _fit(args).source,
        "stack": stack_doc(space.stack, get_accelerator(args.gpu)),
        "rate_per_s": args.rate,
        "defaults": defaults,
        "slo": {
            "ttft_s": args.slo_ttft_s,
            "tpot_s": args.slo_tpot_s,
            "percentile": args.percentile,
        },
    }
    if args.json:
        print(dump_json(with_timing(doc, args, {"wall_s": result.wall_s,
                                                "ran_on": pool_label(args)})))  # fmt: skip
        return 0
    pct = f"p{args.percentile:g}"
    cols = ["layout", "tp", "pp", "weight_dtype", "kv_dtype", "max_seqs", "replicas", "gpus",
            f"ttft_{pct}_s", f"tpot_{pct}_s", "usd_per_hour", "usd_per_m_output_tokens"]  # fmt: skip
    money = {c: (lambda v: f"${v:,.2f}") for c in ("usd_per_hour", "usd_per_m_output_tokens")}
    print(
        f"cheapest ways to serve {args.model} at {args.rate:g} requests/s on {args.gpu} with "
        f"TTFT {pct} <= {format_seconds(args.slo_ttft_s)} and TPOT {pct} <= "
        f"{format_seconds(args.slo_tpot_s)}\n{_defaults_line(defaults)}\n"
    )
    banded = {c: money.get(c, format_seconds) for c in cols[8:]}
    shown = [{**row, **{c: format_banded(c, row[c], row["error_band"].get(c), banded[c])
                        for c in cols[8:] if c in row}} for row in configs]  # fmt: skip
    if space.speculation is not None:
        cols.insert(1, "speculative")
    print(render_table(shown, cols))
    if doc["error_band_label"]:
        print(f"error band p10-p90: {doc['error_band_label']}")
    took = f" in {format_seconds(result.wall_s)} ({pool_label(args)})" if timed(args) else ""
    print(
        f"\n{len(result.rows)} of {result.candidates} candidates simulated{took}; "
        f"price: {result.price_source}"
    )
    print(stack_line(space.stack, get_accelerator(args.gpu)))
    print(efficiency_line(doc["efficiency_source"]))
    return 0


def _speculation(args):
    """``--speculative``'s (speculation, draft model name) for serve and serve plan, or None."""
    from gpuplan.sim.serving.speculative import serving_speculation

    if getattr(args, "speculative", None) is None:
        if any(getattr(args, f, None) is not None for f in ("spec_tokens", "accept_rate")):
            raise GpuplanError("--spec-tokens and --accept-rate go with --speculative")
        return None
    return serving_speculation(args.speculative, args.spec_tokens, args.accept_rate)


def _plan_stack(args):
    from gpuplan.hwmodels.accelerators import get_accelerator

    return stack_from_args(args, get_accelerator(args.gpu))


def _plan(args, load, space, pool):
    from gpuplan.sim.serving.plan import Slo, plan

    return plan(
        args.model,
        args.gpu,
        rate_per_s=args.rate,
        slo=Slo(ttft_s=args.slo_ttft_s, tpot_s=args.slo_tpot_s, percentile=args.percentile),
        lengths=(load.prompt_tokens, load.output_tokens),
        requests=load.n,
        seed=args.seed,
        space=space,
        usd_per_gpu_hour=args.price_per_gpu_hour,
        top=args.top,
        progress=not args.json and sys.stderr.isatty(),
        pool=pool,
        fit=_fit(args),
    )


# --- edge --------------------------------------------------------------------------------------


def run_edge(args) -> int:
    from gpuplan.hwmodels.accelerators import get_accelerator
    from gpuplan.sim.serving.edge import edge_estimates
    from gpuplan.sim.serving.speculative import parse_speculation

    acc = get_accelerator(args.gpu)
    stack = _edge_stack(args, acc)
    spec = None if args.speculative is None else parse_speculation(args.speculative)
    if args.draft_model and (spec is None or spec.method != "draft"):
        raise GpuplanError("--draft-model is used by --speculative draft:K:ACCEPTANCE only")
    dtypes = WEIGHT_DTYPES if args.weight_dtype == "all" else (args.weight_dtype,)
    frame = edge_estimates(
        args.model,
        args.gpu,
        weight_dtypes=dtypes,
        kv_dtype=args.kv_dtype,
        batches=args.batch,
        context=args.context,
        prompt_tokens=args.prompt_tokens,
        fit=_fit(args),
        stack=stack,
        speculation=spec,
        draft_model=args.draft_model,
    )
    source = _fit(args).source
    if args.json:
        print(dump_json({"model": args.model, "efficiency_source": source,
                         "stack": stack and stack_doc(stack, acc), "rows": frame}))  # fmt: skip
        return 0
    cols = ["weight_dtype", "batch", "tokens_per_s", "stream_tokens_per_s", "step_s", "ttft_s",
            "weights_bytes", "kv_bytes", "total_bytes", "fits", "bound"]  # fmt: skip
    if spec is not None:
        cols[4:4] = ["spec_tokens_per_step", "spec_tokens_per_s"]
    device = frame["device"].iloc[0]
    print(
        f"{args.model} on {device}: decode at {args.context} cached tokens, TTFT of a "
        f"{args.prompt_tokens}-token prompt\n"
    )
    print(render_table(frame, cols))
    print(stack_line(stack, acc) if stack else f"stack {DEFAULT_STACK}: its kernels priced as "
          f"FlashAttention-2's on {acc.key}, which has no CUDA/ROCm architecture")
    print(efficiency_line(source))
    return 0


def _edge_stack(args, acc):
    """The edge device's stack; the default one on a device with no CUDA or ROCm architecture
    (Apple silicon) is None: the generic server priced as before stacks."""
    from gpuplan.sim.stacks.kernels import ARCH

    if args.stack == DEFAULT_STACK and args.attention_kernel is None and acc.key not in ARCH:
        return None
    return stack_from_args(args, acc)


def _fit(args):
    """The device's efficiency fit: ``--calibration``'s, else the built-in one."""
    from gpuplan.hwmodels.accelerators import get_accelerator

    return efficiency_from_args(args, get_accelerator(args.gpu).key)
