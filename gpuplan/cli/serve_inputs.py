"""What ``gpuplan serve`` and ``serve plan`` read from their flags besides the layout: the
traffic (synthetic or a trace, with images), the device's efficiency fit, speculative decoding,
and the defaults in force that change the answer."""

from __future__ import annotations

from gpuplan.cli.calibration import efficiency_from_args
from gpuplan.cli.serve_args import DEFAULT_STACK
from gpuplan.errors import GpuplanError


def serve_workload(args, *, default_requests: int):
    """The requests of --trace, else of --rate, --prompt-tokens and --output-tokens."""
    from gpuplan.sim.runtime.serving.requests import make_workload, read_trace

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
    from gpuplan.sim.runtime.serving.requests import with_images
    from gpuplan.workloads.images import Images, parse_image_size
    from gpuplan.workloads.presets import get_model
    from gpuplan.workloads.vision import default_image_size, image_tokens

    count, size = getattr(args, "images_per_request", None), getattr(args, "image_size", None)
    if count is None:
        if size is not None:
            raise GpuplanError("--image-size needs --images-per-request N")
        return load
    cfg = get_model(args.model)
    width, height = parse_image_size(size) if size is not None else default_image_size(cfg)
    tokens = image_tokens(cfg, Images(count=count, width=width, height=height))
    return with_images(load, images=count, image_tokens=tokens)


def speculation_from_args(args):
    """``--speculative``'s (speculation, draft model name) for serve and serve plan, or None."""
    from gpuplan.sim.runtime.serving.speculative import serving_speculation

    if getattr(args, "speculative", None) is None:
        if any(getattr(args, f, None) is not None for f in ("spec_tokens", "accept_rate")):
            raise GpuplanError("--spec-tokens and --accept-rate go with --speculative")
        return None
    model = None
    if args.speculative == "mtp" and getattr(args, "model", None):
        from gpuplan.workloads.presets import get_model

        model = get_model(args.model)
    return serving_speculation(args.speculative, args.spec_tokens, args.accept_rate, model)


def efficiency_fit(args):
    """The device's efficiency fit: ``--calibration``'s, else the built-in one."""
    from gpuplan.hwmodels.accelerators import get_accelerator

    return efficiency_from_args(args, get_accelerator(args.gpu).key)


def serve_defaults(args, *, tokens: tuple[int, int] | None = None, model=None) -> list[str]:
    """The flags left unset whose defaults change the answer (before they are filled in);
    ``model`` the one served, whose checkpoint format stands in for an unset --weight-dtype
    (None where the format is searched, not defaulted: ``serve plan``)."""
    out = []
    if tokens and not args.trace:
        out += [f"--prompt-tokens {tokens[0]}"] * (args.prompt_tokens is None)
        out += [f"--output-tokens {tokens[1]}"] * (args.output_tokens is None)
    if args.requests is None and not args.trace:
        out.append("--requests 1000")
    own = model.checkpoint_weight_dtype if model is not None else ""
    if own and args.weight_dtype is None:  # serve's flag left unset
        out.append(f"--weight-dtype {own} (the checkpoint's own format)")
    if not getattr(args, "no_cuda_graph", False):
        from gpuplan.sim.stacks import get_stack

        run = get_stack(getattr(args, "stack", None) or DEFAULT_STACK).serving
        if run is None or run.cuda_graph:  # a runtime without graphs decodes eagerly anyway
            out.append("CUDA graphs on for decode (--no-cuda-graph: eager)")
    return out


def serving_stack_from_args(args, acc):
    """``--stack`` for ``serve`` and ``serve plan`` (``stack_flags.stack_from_args``), refused in
    one line when it names no serving engine: a stack without a serving runtime (Hugging Face
    transformers, plain PyTorch, torch.compile, the training stacks) has no server, no request
    scheduler, no paged cache; transformers' ``generate()`` runs one padded batch to its end.
    Simulating it as the generic server (continuous batching, paged KV, CUDA graphs) would price
    an engine it is not; ``serve edge`` prices its single stream."""
    from gpuplan.cli.stack_flags import stack_from_args
    from gpuplan.sim.stacks import get_stack, list_stacks

    stack = stack_from_args(args, acc)
    if stack.serving is None:
        serving = sorted(n for n in (getattr(s, "name", s) for s in list_stacks())
                         if get_stack(n).serving is not None)  # fmt: skip
        raise GpuplanError(
            f"--stack {stack.name} has no server (no request scheduler or paged KV cache; "
            f"transformers' generate() and plain PyTorch run one batch to its end): serve with "
            f"{', '.join(serving)} (serve edge prices a single stream on {stack.name})"
        )
    return stack
