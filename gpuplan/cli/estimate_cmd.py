"""``gpuplan estimate``: one case's predicted breakdown, as a table or as JSON.

With no kind it runs the built-in default scenario: a Llama-3-8B training step and decode step
on one H200. With a kind of the record contract it predicts that case from flags named after the
contract's params (``--heads-q`` is ``heads_q``); ``--model`` fills the shape from a preset or a
config.json and prices the whole model (MoE and MLA included).
"""

from __future__ import annotations

import argparse
from typing import Any

from gpuplan.cli.argtypes import (
    byte_count,
    gpu_count,
    layer_count,
    non_negative,
    positive_int,
    word,
)
from gpuplan.cli.calibration import add_calibration_option, efficiency_from_args
from gpuplan.cli.device_args import add_gpu_argument
from gpuplan.cli.estimate_fit import check_fits, headline
from gpuplan.cli.estimate_render import render_case
from gpuplan.cli.feasibility import add_allow_infeasible, as_priced
from gpuplan.cli.stack_flags import add_stack_options, stack_doc, stack_from_args, stack_line
from gpuplan.errors import GpuplanError
from gpuplan.tables import dump_json
from gpuplan.validate.bands import documents as bands
from gpuplan.validate.case_params import (
    IMAGE_PARAMS,
    PRECISION_ALIASES,
    accepted,
    case_params,
    missing_params,
)

KIND_NAMES = (
    "gemm",
    "attention",
    "elementwise",
    "layer",
    "prefill-step",
    "train-step",
    "decode-step",
    "collective",
    "tp-mlp",
)
INT_FLAGS = (
    "m",
    "n",
    "k",
    "batch",
    "heads_q",
    "heads_kv",
    "seq_q",
    "seq_kv",
    "head_dim",
    "tokens",
    "hidden",
    "ffn",
    "seq",
    "micro_batch",
    "vocab",
    "layers",
    "context",
    "world",
    "tp",
    "max_cache_len",
)
INT_TYPES = {"layers": layer_count, "world": gpu_count, "tp": gpu_count}
BOOL_FLAGS = ("causal", "compiled", "cuda_graph")
STR_FLAGS = ("dtype", "op", "pass", "recompute", "optimizer", "precision", "kv_cache", "timing")
DEFAULT_GPU = "h200"
# one GPU's training step and decode step of a model that one GPU holds for training (AdamW in
# mixed precision keeps 16 bytes a parameter: an 8B model's state alone exceeds a 141 GB H200)
DEFAULT_MODEL = "llama3.2-3b"
DEFAULT_SCENARIO = (
    ("train_step", {"micro_batch": 1, "seq": 4096, "recompute": "full"}),
    ("decode_step", {"batch": 32, "context": 4096, "cuda_graph": True}),
)


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "estimate",
        help="predict one case's time and memory breakdown",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "kind",
        nargs="?",
        choices=KIND_NAMES,
        help="what to predict; omit it for the default scenario "
        "(Llama-3-8B training and decode steps on one H200)",
    )
    add_gpu_argument(p, "accelerator key (default h200; see `gpuplan gpus`)")
    p.add_argument("--model", type=word, help="model preset or config.json: fills the shape parameters")
    p.add_argument(
        "--impl",
        choices=("fused", "eager", "compiled"),
        help="how elementwise ops run (default: eager for contract cases, fused with --model)",
    )
    p.add_argument(
        "--by",
        choices=("op", "category", "layer", "phase"),
        default="op",
        help="group the breakdown table (default: op)",
    )
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    add_stack_options(p, default="pytorch")
    add_calibration_option(p)
    add_allow_infeasible(p)
    for name in INT_FLAGS:
        flag_type = INT_TYPES.get(name, positive_int)
        p.add_argument("--" + name.replace("_", "-"), dest=name, type=flag_type)
    p.add_argument("--bytes", dest="bytes", type=byte_count, help="collective buffer bytes per rank")
    p.add_argument("--images", dest="images", type=non_negative(int, MAX_IMAGES),
                   help="prefill-step / train-step of a vision-language model: images per "
                   "sequence (their encoder and image tokens are priced)")
    p.add_argument("--image-size", dest="image_size", type=word, metavar="WxH",
                   help="pixels of each image (default: the encoder's own square)")
    p.add_argument("--freeze-vision", dest="freeze_vision", default=None,
                   action=argparse.BooleanOptionalAction,
                   help="train-step with images: the encoder and projector frozen (forward only)")
    helps = STR_HELP | {"dtype": _dtype_help()}
    for name, choices in _str_choices().items():
        p.add_argument("--" + name.replace("_", "-"), dest=name, type=word, choices=choices,
                       help=helps.get(name))  # fmt: skip
    for name in BOOL_FLAGS:
        p.add_argument(
            "--" + name.replace("_", "-"),
            dest=name,
            action=argparse.BooleanOptionalAction,
            default=None,
        )
    p.set_defaults(func=run)


def _str_choices() -> dict[str, tuple[str, ...] | None]:
    """Each word flag's values: those the record contract allows for it in any kind."""
    from gpuplan.validate.records import PARAM_RULES  # light: the parser stays fast to build

    # kv_cache and timing are checked against the stack's lists when the case is priced
    out: dict[str, tuple[str, ...]] = {"kv_cache": None, "timing": None}
    for rules in PARAM_RULES.values():
        for name, rule in rules.items():
            if name in STR_FLAGS and isinstance(rule, tuple):
                out[name] = tuple(dict.fromkeys((*(out.get(name) or ()), *rule)))
    out["precision"] = (*out["precision"], *PRECISION_ALIASES)
    return {name: out[name] for name in STR_FLAGS}


def _dtype_help() -> str:
    """``--dtype``'s help: the formats each kind takes (the choices are their union, so a kind
    refuses some listed formats: ``gemm`` has no int4, only ``collective`` moves it)."""
    from gpuplan.validate.records import PARAM_RULES

    kinds: dict[tuple[str, ...], list[str]] = {}
    for kind, rules in PARAM_RULES.items():
        if isinstance(rules.get("dtype"), tuple) and kind.replace("_", "-") in KIND_NAMES:
            kinds.setdefault(rules["dtype"], []).append(kind.replace("_", "-"))
    return "; ".join(f"{', '.join(k)}: {', '.join(d)}" for d, k in kinds.items())


STR_HELP = {
    "precision": "train-step: bf16 GEMMs under mixed precision, fp32 master weights and Adam "
    "state (bf16-mixed, the record contract's word, is the same; as in `gpuplan train "
    "--precision`)",
}


def _check_contract(kind: str, device: str, params: dict[str, Any]) -> None:
    """The record contract's rules (types, values, shape multiples) on a case's params."""
    from gpuplan.validate.records import parse_record

    record = {"kind": kind, "device": device, "params": params, "measured": {"time_s": 1.0}}
    try:
        parse_record(record)
    except GpuplanError as err:
        text = str(err).replace("params.", "--").replace("_", "-")
        if kind == "gemm" and params.get("dtype") == "int4":  # listed for collectives only
            text += (" (int4 is a weight-only format: `gpuplan serve --weight-dtype int4` "
                     "prices its W4A16 GEMMs)")
        raise GpuplanError(f"estimate {kind.replace('_', '-')}: {text}") from None


def run(args) -> int:
    args.defaulted = [] if args.gpu else [f"--gpu {DEFAULT_GPU}"]  # shown in every header
    args.gpu = args.gpu or DEFAULT_GPU
    if args.kind is None:
        results = [_estimate(kind, args, overrides) for kind, overrides in DEFAULT_SCENARIO]
        args.model = args.model or DEFAULT_MODEL
    else:
        results = [_estimate(args.kind.replace("-", "_"), args, {})]
    if args.json:
        print(dump_json(results[0] if len(results) == 1 else {"scenario": results}))
        return 0
    print("\n\n".join(as_priced(render_case(r, args.by), r["feasible"]) for r in results))
    return 0


MAX_IMAGES = 1024


def _params(
    kind: str, args, overrides: dict[str, Any], *, with_model: bool = False
) -> dict[str, Any]:
    """The flags given, checked against what ``estimate KIND`` takes, merged into the case's
    params (``case_params``)."""
    given = {k: getattr(args, k, None)
             for k in (*INT_FLAGS, *BOOL_FLAGS, *STR_FLAGS, "bytes", *IMAGE_PARAMS)}
    given = {k: v for k, v in given.items() if v is not None}
    unused = sorted(set(given) - accepted(kind, with_model))
    if unused:
        flags = ", ".join("--" + k.replace("_", "-") for k in unused)
        valid = ", ".join("--" + k.replace("_", "-") for k in sorted(accepted(kind, with_model)))
        how = " with --model" if with_model else ""
        raise GpuplanError(
            f"estimate {kind.replace('_', '-')}{how} does not use {flags} (it takes {valid})"
        )
    return case_params(kind, given, overrides, with_model=with_model)


def _estimate(kind: str, args, overrides: dict[str, Any]) -> dict[str, Any]:
    from gpuplan.hwmodels.accelerators import get_accelerator
    from gpuplan.sim.estimate.whole_model import model_breakdown
    from gpuplan.sim.stacks.training_defaults import fill_defaults
    from gpuplan.validate.record_prediction import predict_breakdown

    model = args.model or (DEFAULT_MODEL if args.kind is None else None)
    with_model = bool(model) and kind in ("layer", "prefill_step", "train_step", "decode_step")
    if args.model and not with_model:
        raise GpuplanError(f"estimate {kind.replace('_', '-')} does not use --model (a whole "
                           "model: layer, prefill-step, train-step, decode-step)")  # fmt: skip
    params = _params(kind, args, overrides, with_model=with_model)
    acc = get_accelerator(args.gpu)
    eff = efficiency_from_args(args, acc.key)  # --calibration's fit, else the built-in one
    stack = stack_from_args(args, acc)
    if with_model and kind == "train_step" and "recompute" not in {*overrides, *_given(args)}:
        # a whole model's step recomputes as its stack's framework does, as `train` fills it
        params["recompute"] = fill_defaults(stack, {}, fields=("recompute",)).fields["recompute"]
    if with_model:
        bd = model_breakdown(kind, acc, eff, model, params, impl=args.impl, stack=stack)
    else:
        if args.impl:
            raise GpuplanError("--impl is for a whole model (with --model); a record-contract case"
                               " runs its stack's elementwise kernels (--stack)")
        params["stack"] = stack.name
        missing = missing_params(kind, params)
        if missing:
            flags = ", ".join("--" + k.replace("_", "-") for k in missing)
            hint = " (or --model)" if kind in ("layer", "train_step", "decode_step") else ""
            raise GpuplanError(f"estimate {kind.replace('_', '-')} needs {flags}{hint}")
        _check_contract(kind, acc.key, params)
        bd = predict_breakdown(kind, acc.key, params, eff=eff, stack=stack)
    out = _result(kind, acc, eff, model, params, bd, stack)
    if with_model:
        check_fits(kind, args, out, lambda a: _estimate(kind, a, overrides))
        out |= headline(out, kind, acc)
    out["feasible"] = out["fits"] is not False
    out |= bands.estimate_bands(out, stack=stack.name, device=acc.key)
    given = _given(args)
    out["defaults"] = [*args.defaulted, *([] if args.model else [f"--model {model}"] * bool(model)),
                       *(_flag(k, v) for k, v in params.items() if k not in given | {"stack"})]  # fmt: skip
    if with_model and kind == "decode_step" and "cuda_graph" not in params:
        out["defaults"].append(f"CUDA graphs {'on' if stack.cuda_graph_decode else 'off'} (the stack's)")
    out["defaults"] = [*stack_defaults(args, stack, kind, with_model), *out["defaults"]]
    return out


def stack_defaults(args, stack, kind: str, with_model: bool) -> list[str]:
    """The stack when --stack is left unset, and, for a whole model's training step, the state
    precision its mixed precision sets (``sim.stacks.training_defaults``, as ``train`` fills it)."""
    from gpuplan.sim.stacks.training_defaults import fill_defaults

    out = [] if getattr(args, "stack_given", True) else [f"--stack {stack.name}"]
    if with_model and kind == "train_step":
        # not an estimate flag (--precision names the contract's): said in words
        out += [line.replace("--state-precision", "state precision", 1)
                for line in fill_defaults(stack, {}, fields=("state_precision",)).applied]
    return out


def _given(args) -> set[str]:
    """The case params the command line gives."""
    return {k for k in (*INT_FLAGS, *BOOL_FLAGS, *STR_FLAGS, "bytes", *IMAGE_PARAMS)
            if getattr(args, k, None) is not None}  # fmt: skip


def _flag(name: str, value) -> str:
    """A parameter as the flag that would set it: --seq 4096, --cuda-graph, --no-causal."""
    flag = name.replace("_", "-")
    if isinstance(value, bool):
        return f"--{flag}" if value else f"--no-{flag}"
    return f"--{flag} {value}"


def _result(kind, acc, eff, model, params, bd, stack) -> dict[str, Any]:
    """The case's document: its breakdown's numbers with the device, stack and params."""
    return {
        "kind": kind,
        "device": acc.key,
        "model": model,
        "stack": stack_doc(stack, acc),
        "stack_line": stack_line(stack, acc),
        "params": params,
        "time_s": bd.total_s,
        "flops": bd.flops,
        "achieved_flops_per_s": bd.achieved_flops_per_s,
        "peak_bytes": bd.peak_bytes,
        "device_memory_bytes": acc.hbm_bytes,
        "fits": bd.fits(acc.hbm_bytes),
        "efficiency_source": eff.source,
        "memory_bytes": dict(bd.memory_bytes),
        "by_category": bd.by("category"),
        "by_layer": bd.by("layer"),
        "items": bd.frame(),
        "notes": list(bd.notes),
    }
