"""Measurement records: read and check one JSON Lines file of the contract in ARCHITECTURE.md.

One record a line: ``{"kind", "device", "params": {...}, "measured": {...}, "source"}``. Each
kind has a fixed set of params (names, types, allowed values) and measured metrics; this module
holds that table (``PARAM_RULES``, ``MEASURED``) and checks every line against it.

Assumptions, stated:
- Integers are JSON integers greater than zero and at most 2**53, the largest a float (the
  pricing's arithmetic) holds exactly (``4096.0`` and ``true`` are not integers);
  booleans are JSON booleans (``"true"`` is not one); measured values are finite numbers > 0.
- The contract fixes the dtype list of ``gemm`` only. Kernels of the other compute kinds run in
  a floating format (``FLOAT_DTYPES``); a collective moves any format of ``DTYPE_BYTES``.
- Shape rules that make a record meaningless otherwise are checked too: ``heads_q`` a multiple
  of ``heads_kv`` (GQA), ``hidden`` a multiple of ``heads_q`` (head_dim = hidden / heads_q in a
  Llama layer), ``ffn`` a multiple of ``tp`` (each rank holds ``ffn / tp``), and for
  ``tp_layer`` ``heads_kv`` a multiple of ``tp`` (each rank holds ``heads_kv / tp``).
- ``tp_layer`` is an extension kind beside the contract's fixed table (ARCHITECTURE.md): the
  contract's kinds and keys are unchanged.
- The optional params of every kind (ARCHITECTURE.md) are kept when present and checked:
  ``stack`` (a preset of ``gpuplan stacks``), ``attention_kernel`` (a kernel of
  ``sim.stacks.ATTENTION_KERNELS``), ``timing`` (``isolated`` or ``device``). A record without
  them means plain PyTorch, timed in isolation.
- Other extra keys, at any level, are allowed and dropped: ``Record.params`` and
  ``Record.measured`` hold the contract's keys only.
- A bad line becomes a ``RecordError`` (line number and a reason naming the key, the value and
  what is valid); the other lines still read. Blank lines are skipped.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuplan.errors import GpuplanError, unknown_key
from gpuplan.workloads.dtypes import DTYPE_BYTES

POSITIVE_INT = "positive integer"
MAX_INT = 2**53  # the largest integer a float holds exactly (IEEE 754 binary64)
BOOLEAN = "boolean"
PASSES = ("fwd", "fwd_bwd")
GEMM_DTYPES = ("bf16", "fp16", "fp32", "tf32", "fp8", "int8")
FLOAT_DTYPES = ("bf16", "fp16", "fp32", "fp8")
ELEMENTWISE_OPS = ("layernorm", "rmsnorm", "gelu", "silu_mul", "softmax", "add", "dropout_add")
COLLECTIVE_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")

# A rule is POSITIVE_INT, BOOLEAN, or the tuple of allowed strings.
Rule = str | tuple[str, ...]

# The contract's table (ARCHITECTURE.md, "Measurement records"), param names in its order.
PARAM_RULES: dict[str, dict[str, Rule]] = {
    "gemm": {"m": POSITIVE_INT, "n": POSITIVE_INT, "k": POSITIVE_INT, "dtype": GEMM_DTYPES},
    "attention": {
        "batch": POSITIVE_INT,
        "heads_q": POSITIVE_INT,
        "heads_kv": POSITIVE_INT,
        "seq_q": POSITIVE_INT,
        "seq_kv": POSITIVE_INT,
        "head_dim": POSITIVE_INT,
        "causal": BOOLEAN,
        "pass": PASSES,
        "dtype": FLOAT_DTYPES,
    },
    "elementwise": {
        "op": ELEMENTWISE_OPS,
        "tokens": POSITIVE_INT,
        "hidden": POSITIVE_INT,
        "pass": PASSES,
        "dtype": FLOAT_DTYPES,
    },
    "layer": {
        "hidden": POSITIVE_INT,
        "heads_q": POSITIVE_INT,
        "heads_kv": POSITIVE_INT,
        "ffn": POSITIVE_INT,
        "seq": POSITIVE_INT,
        "micro_batch": POSITIVE_INT,
        "pass": PASSES,
        "compiled": BOOLEAN,
        "dtype": FLOAT_DTYPES,
    },
    "train_step": {
        "vocab": POSITIVE_INT,
        "hidden": POSITIVE_INT,
        "heads_q": POSITIVE_INT,
        "heads_kv": POSITIVE_INT,
        "ffn": POSITIVE_INT,
        "layers": POSITIVE_INT,
        "seq": POSITIVE_INT,
        "micro_batch": POSITIVE_INT,
        "recompute": ("none", "full"),
        "optimizer": ("adamw",),
        "precision": ("bf16-mixed",),
    },
    "decode_step": {
        "hidden": POSITIVE_INT,
        "heads_q": POSITIVE_INT,
        "heads_kv": POSITIVE_INT,
        "ffn": POSITIVE_INT,
        "layers": POSITIVE_INT,
        "batch": POSITIVE_INT,
        "context": POSITIVE_INT,
        "cuda_graph": BOOLEAN,
        "dtype": FLOAT_DTYPES,
    },
    "collective": {
        "op": COLLECTIVE_OPS,
        "world": POSITIVE_INT,
        "bytes": POSITIVE_INT,
        "dtype": tuple(DTYPE_BYTES),
    },
    "tp_mlp": {
        "hidden": POSITIVE_INT,
        "ffn": POSITIVE_INT,
        "tokens": POSITIVE_INT,
        "tp": POSITIVE_INT,
        "pass": PASSES,
        "dtype": FLOAT_DTYPES,
    },
    # An extension beside the contract's kinds (their keys unchanged): the contract's decoder
    # layer under Megatron tensor parallelism, eager, one of ``tp`` ranks of one host timed
    # (the slowest); each rank holds heads_q / tp query heads, heads_kv / tp key/value heads and
    # ffn / tp of the MLP width, with two all-reduces in the forward and two in the backward.
    "tp_layer": {
        "hidden": POSITIVE_INT,
        "heads_q": POSITIVE_INT,
        "heads_kv": POSITIVE_INT,
        "ffn": POSITIVE_INT,
        "seq": POSITIVE_INT,
        "micro_batch": POSITIVE_INT,
        "tp": POSITIVE_INT,
        "pass": PASSES,
        "dtype": FLOAT_DTYPES,
    },
}


def _model_names() -> tuple[str, ...]:
    """Models a whole-model record may name: the presets and the stack campaign's configs."""
    from gpuplan.validate.stack_campaign.configs import MODELS
    from gpuplan.workloads.presets import PRESETS

    return tuple(sorted(set(PRESETS) | set(MODELS)))


# Whole-model kinds (additive; gpuplan.validate.stack_campaign measures them): one forward of the
# named model (``prefill_step``), one decode step against its cache (``model_decode_step``), one
# training step (``model_train_step``), ``layers`` the layer count kept; priced by the same path
# as ``gpuplan estimate prefill-step / decode-step / train-step --model``.
MODEL_NAME = "model name"  # a rule: one of _model_names(), resolved when checked
PARAM_RULES |= {
    "prefill_step": {"model": MODEL_NAME, "layers": POSITIVE_INT, "batch": POSITIVE_INT,
                     "seq": POSITIVE_INT, "dtype": FLOAT_DTYPES},
    "model_decode_step": {"model": MODEL_NAME, "layers": POSITIVE_INT, "batch": POSITIVE_INT,
                          "context": POSITIVE_INT, "kv_cache": ("dynamic", "static", "paged"),
                          "dtype": FLOAT_DTYPES},
    "model_train_step": {"model": MODEL_NAME, "layers": POSITIVE_INT, "micro_batch": POSITIVE_INT,
                         "seq": POSITIVE_INT, "optimizer": ("adamw",),
                         "precision": ("bf16-mixed",)},
}
MODEL_KINDS = ("prefill_step", "model_decode_step", "model_train_step")
# MoE experts' grouped GEMM (additive; stack_campaign/grouped.py measures it): ``groups`` GEMMs
# of ``m`` rows each against their own [n, k] weight in one ``torch._grouped_mm`` call, priced
# by ``hwmodels.gemm.grouped_gemm_time`` (the path the MoE blocks of whole models take).
PARAM_RULES |= {"grouped_gemm": {"groups": POSITIVE_INT, "m": POSITIVE_INT, "n": POSITIVE_INT,
                                 "k": POSITIVE_INT, "dtype": FLOAT_DTYPES}}
# Optional params of one kind, checked and kept when present. A data-parallel ``train_step``
# (harness.dist_train) names its ranks ``dp``, its micro-batches per step ``accumulation`` and
# its ZeRO stage ``zero_stage`` (absent: 1, 1, 0, the one-GPU step); ``optimizer_impl`` the
# AdamW implementation it ran (``sim.stacks.OPTIMIZERS``; absent: the stack's own).
ZERO_STAGE = "ZeRO stage"  # a rule: the JSON integer 0, 1, 2 or 3
KIND_OPTIONAL: dict[str, dict[str, Rule]] = {
    "model_decode_step": {"max_cache_len": POSITIVE_INT},
    "train_step": {"dp": POSITIVE_INT, "accumulation": POSITIVE_INT, "zero_stage": ZERO_STAGE,
                   "optimizer_impl": ("foreach", "fused")},
}
KINDS: tuple[str, ...] = tuple(PARAM_RULES)

# Measured metrics of each kind: (required, optional).
MEASURED: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    kind: (("time_s",), ("peak_bytes",) if kind in ("layer", "train_step", *MODEL_KINDS) else ())
    for kind in KINDS
}

# (numerator, denominator) pairs that must divide exactly, per kind.
_MULTIPLES: dict[str, tuple[tuple[str, str], ...]] = {
    "attention": (("heads_q", "heads_kv"),),
    "layer": (("heads_q", "heads_kv"), ("hidden", "heads_q")),
    "train_step": (("heads_q", "heads_kv"), ("hidden", "heads_q")),
    "decode_step": (("heads_q", "heads_kv"), ("hidden", "heads_q")),
    "tp_mlp": (("ffn", "tp"),),
    "tp_layer": (
        ("heads_q", "heads_kv"),
        ("hidden", "heads_q"),
        ("heads_kv", "tp"),
        ("ffn", "tp"),
    ),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Record:
    """One checked measurement: the contract's params and metrics, SI units."""

    kind: str
    device: str
    params: dict[str, Any]
    measured: dict[str, float]
    source: str = ""
    line_no: int = 0  # 1-based line in its file; 0 when not read from a file


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordError:
    """A line that could not be used, and why."""

    line_no: int
    reason: str

    def __str__(self) -> str:
        return f"line {self.line_no}: {self.reason}"


def _type_name(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}.get(
        type(value), "a number" if isinstance(value, int | float) else "null"
    )


def _check_value(field: str, value: Any, rule: Rule) -> str | None:
    """The reason ``value`` breaks ``rule``, or None when it is valid."""
    if rule == MODEL_NAME:
        names = _model_names()
        if isinstance(value, str) and value in names:
            return None
        return f"{field}={value!r} is invalid: choose a model name among {', '.join(names)}"
    if rule == ZERO_STAGE:
        if isinstance(value, int) and not isinstance(value, bool) and value in (0, 1, 2, 3):
            return None
        return f"{field}={value!r} is invalid: choose one of 0, 1, 2, 3 (a JSON integer)"
    if rule == POSITIVE_INT:
        if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= MAX_INT:
            return None
        if isinstance(value, int) and value.bit_length() > 200:  # repr fails past 4,300 digits
            shown = f"an integer of {value.bit_length():,} bits"
        else:
            shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
        return f"{field}={shown} is invalid: it must be a positive JSON integer, at most 2**53"
    if rule == BOOLEAN:
        if isinstance(value, bool):
            return None
        return f"{field}={value!r} is invalid: it must be a JSON boolean (true or false)"
    if isinstance(value, str) and value in rule:
        return None
    return f"{field}={value!r} is invalid: choose one of {', '.join(rule)}"


def optional_param_rules() -> dict[str, Rule]:
    """The optional params every kind may carry, with their allowed values."""
    from gpuplan.sim.stacks import ATTENTION_KERNELS, TIMINGS, list_stacks

    return {
        "stack": tuple(s.name for s in list_stacks()),
        "attention_kernel": ATTENTION_KERNELS,
        "timing": TIMINGS,
    }


def _check_optional(params: Mapping[str, Any]) -> list[str]:
    return [
        reason
        for name, rule in optional_param_rules().items()
        if name in params and (reason := _check_value(f"params.{name}", params[name], rule))
    ]


def _check_params(kind: str, params: Mapping[str, Any]) -> list[str]:
    rules = PARAM_RULES[kind]
    reasons = _check_optional(params)
    for name, rule in KIND_OPTIONAL.get(kind, {}).items():
        if name in params and (reason := _check_value(f"params.{name}", params[name], rule)):
            reasons.append(reason)
    for name, rule in rules.items():
        if name not in params:
            reasons.append(f"params.{name} is missing ({kind} needs {', '.join(rules)})")
        elif (reason := _check_value(f"params.{name}", params[name], rule)) is not None:
            reasons.append(reason)
    if reasons:
        return reasons
    for num, den in _MULTIPLES.get(kind, ()):
        if params[num] % params[den]:
            reasons.append(
                f"params.{num}={params[num]} is invalid: it must be a multiple of "
                f"params.{den}={params[den]}"
            )
    return reasons


def _is_positive_number(value: Any) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )


def _check_measured(kind: str, measured: Mapping[str, Any]) -> list[str]:
    required, optional = MEASURED[kind]
    reasons = []
    for name in required + optional:
        if name not in measured:
            if name in required:
                reasons.append(f"measured.{name} is missing ({kind} needs {', '.join(required)})")
        elif not _is_positive_number(measured[name]):
            reasons.append(
                f"measured.{name}={measured[name]!r} is invalid: it must be a positive finite number"
            )
    return reasons


def _check_object(field: str, value: Any) -> str | None:
    if isinstance(value, dict):
        return None
    return f"{field} must be a JSON object, got {_type_name(value)}"


def _check_top(obj: Mapping[str, Any], devices: Collection[str] | None) -> list[str]:
    """Reasons found in the top-level keys: kind, device, source, params, measured."""
    kind, device = obj.get("kind"), obj.get("device")
    reasons = []
    if "kind" not in obj:
        reasons.append(f"kind is missing: choose one of {', '.join(KINDS)}")
    elif kind not in KINDS:
        reasons.append(f"kind={kind!r} is invalid: choose one of {', '.join(KINDS)}")
    if "device" not in obj:
        reasons.append("device is missing: it names an accelerator of the catalogue, e.g. 'h200'")
    elif not isinstance(device, str):
        reasons.append(f"device={device!r} is invalid: it must be a string, e.g. 'h200'")
    elif devices is not None and device not in devices:
        reasons.append(str(unknown_key("device", device, devices)))
    if not isinstance(obj.get("source", ""), str):
        reasons.append(f"source={obj['source']!r} is invalid: it must be a string")
    for field in ("params", "measured"):
        if field not in obj:
            reasons.append(f"{field} is missing: it must be a JSON object")
        elif (reason := _check_object(field, obj[field])) is not None:
            reasons.append(reason)
    return reasons


def parse_record(obj: Any, *, line_no: int = 0, devices: Collection[str] | None = None) -> Record:
    """Check one decoded JSON value against the contract; every problem goes in one GpuplanError.

    ``devices`` is the collection of known device keys; None skips the device check.
    """
    if not isinstance(obj, dict):
        raise GpuplanError(f"a record must be a JSON object, got {_type_name(obj)}")
    reasons = _check_top(obj, devices)
    kind = obj.get("kind")
    known_kind = isinstance(kind, str) and kind in PARAM_RULES
    if known_kind and isinstance(obj.get("params"), dict):
        reasons += _check_params(kind, obj["params"])
    if known_kind and isinstance(obj.get("measured"), dict):
        reasons += _check_measured(kind, obj["measured"])
    if reasons:
        raise GpuplanError("; ".join(reasons))
    required, optional = MEASURED[kind]
    return Record(
        kind=kind,
        device=obj["device"],
        params={
            name: obj["params"][name]
            for name in (*PARAM_RULES[kind], *optional_param_rules(), *KIND_OPTIONAL.get(kind, {}))
            if name in obj["params"]
        },
        measured={m: obj["measured"][m] for m in required + optional if m in obj["measured"]},
        source=obj.get("source", ""),
        line_no=line_no,
    )


def _decode(raw: bytes | str) -> Any:
    """The JSON value of one line; a GpuplanError saying where it breaks otherwise."""
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    except UnicodeDecodeError as err:
        raise GpuplanError(f"not UTF-8 text: byte {err.start} is {raw[err.start]:#04x}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise GpuplanError(f"not valid JSON: {err.msg} (column {err.colno})") from None
    except (ValueError, RecursionError) as err:  # a 5,000-digit integer, nesting too deep
        raise GpuplanError(f"not valid JSON: {' '.join(str(err).split())[:120]}") from None


def parse_lines(
    lines: Iterable[bytes | str], *, devices: Collection[str] | None = None
) -> tuple[list[Record], list[RecordError]]:
    """Read JSON Lines (numbered from 1): the good records, and an error for each bad line."""
    records, errors = [], []
    for line_no, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            records.append(parse_record(_decode(raw), line_no=line_no, devices=devices))
        except GpuplanError as err:
            errors.append(RecordError(line_no=line_no, reason=str(err)))
    return records, errors


def read_records(
    path: str | Path, *, known_devices: Callable[[], Iterable[str]] | None = None
) -> tuple[list[Record], list[RecordError]]:
    """Read a JSON Lines file of records: the good ones, and an error for each bad line.

    ``known_devices()`` returns the catalogue's device keys (None skips the device check).
    A file that is missing, unreadable or holds no line at all is a GpuplanError.
    """
    path = Path(path)
    if not path.is_file():
        what = "is a directory, not a file" if path.is_dir() else "does not exist"
        raise GpuplanError(f"records file {str(path)!r} {what}")
    try:
        lines = path.read_bytes().splitlines()
    except OSError as err:
        raise GpuplanError(f"records file {str(path)!r} cannot be read: {err.strerror}") from None
    if not any(line.strip() for line in lines):
        raise GpuplanError(f"records file {str(path)!r} is empty: it holds no record")
    devices = frozenset(known_devices()) if known_devices is not None else None
    records, errors = parse_lines(lines, devices=devices)
    if not records and errors and all("not UTF-8 text" in e.reason for e in errors):
        raise GpuplanError(f"records file {str(path)!r} is not UTF-8 text on any line: a binary "
                           "file, not JSON Lines?")  # fmt: skip
    return records, errors
