"""``gpuplan serve edge``: single-stream and small-batch tokens/s, TTFT and memory of a model on
one edge device per weight format, with the bound that limits each (``sim.runtime.serving.edge``)."""

from __future__ import annotations

from gpuplan.cli.argtypes import positive, word
from gpuplan.cli.calibration import add_calibration_option, efficiency_line
from gpuplan.cli.device_args import add_gpu_argument
from gpuplan.cli.serve_args import DEFAULT_STACK, EDGE_ALL, KV_DTYPES, WEIGHT_DTYPES, int_values
from gpuplan.cli.serve_inputs import efficiency_fit
from gpuplan.cli.stack_flags import add_stack_options, stack_doc, stack_from_args, stack_line
from gpuplan.errors import GpuplanError
from gpuplan.tables import dump_json, render_table


def register_edge(sub) -> None:
    """``serve edge`` under ``serve``'s subcommands."""
    p = sub.add_parser("edge", help="tokens/s and memory of quantized models on one device")
    p.add_argument("--model", type=word, required=True)
    add_gpu_argument(p, "e.g. jetson-agx-orin-64gb, m2-ultra", required=True)
    p.add_argument("--weight-dtype", choices=(*WEIGHT_DTYPES, "all"), default="all")
    p.add_argument("--kv-dtype", choices=KV_DTYPES, default="bf16")
    p.add_argument("--batch", type=int_values, default=(1, 2, 4, 8), help="e.g. 1,2,4,8")
    p.add_argument("--context", type=positive(int), default=1024, help="cached tokens")
    p.add_argument("--prompt-tokens", type=positive(int), default=512, help="for the TTFT")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    add_calibration_option(p)
    add_stack_options(p, default=DEFAULT_STACK)
    p.add_argument("--speculative", type=word, default=None,
                   help="speculative decoding METHOD:K:ACCEPTANCE (ngram, eagle, draft or mtp; K "
                   "drafted tokens a step, each accepted at a rate in [0, 1], or one rate a "
                   "position), e.g. eagle:4:0.7 or mtp:3:0.9,0.6,0.6")
    p.add_argument("--draft-model", default=None, help="the draft model of --speculative draft")
    p.set_defaults(func=run_edge)


def run_edge(args) -> int:
    from gpuplan.hwmodels.accelerators import get_accelerator
    from gpuplan.sim.runtime.serving.edge import edge_estimates
    from gpuplan.sim.runtime.serving.speculative import parse_speculation

    acc = get_accelerator(args.gpu)
    stack = _edge_stack(args, acc)
    spec = None if args.speculative is None else parse_speculation(args.speculative)
    if args.draft_model and (spec is None or spec.method != "draft"):
        raise GpuplanError("--draft-model is used by --speculative draft:K:ACCEPTANCE only")
    dtypes = EDGE_ALL if args.weight_dtype == "all" else (args.weight_dtype,)
    frame = edge_estimates(
        args.model,
        args.gpu,
        weight_dtypes=dtypes,
        kv_dtype=args.kv_dtype,
        batches=args.batch,
        context=args.context,
        prompt_tokens=args.prompt_tokens,
        fit=efficiency_fit(args),
        stack=stack,
        speculation=spec,
        draft_model=args.draft_model,
    )
    source = efficiency_fit(args).source
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
    from gpuplan.sim.runtime.serving.quantization import weight_path

    for w in dtypes:
        if line := weight_path(acc, w):
            print(line)
    print(stack_line(stack, acc) if stack else f"stack {DEFAULT_STACK}: its kernels priced as "
          f"FlashAttention-2's on {acc.key}, which has no CUDA/ROCm architecture")
    print(efficiency_line(source))
    print("band: none - no edge device's decode was measured; the figures are the roofline of "
          "its datasheet and the fit of a data-center GPU")
    return 0


def _edge_stack(args, acc):
    """The edge device's stack; the default one on a device with no CUDA or ROCm architecture
    (Apple silicon) is None (``edge.stackless_device``)."""
    from gpuplan.sim.runtime.serving.edge import stackless_device

    if args.stack == DEFAULT_STACK and args.attention_kernel is None and stackless_device(acc):
        return None
    return stack_from_args(args, acc)
