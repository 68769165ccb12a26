"""Checks of what the library's entry points are given, in one place.

Each public function of ``sim`` that takes sizes from a caller checks them once, on entry, with
these: whole numbers are ints (a bool, a float or a string is not one) within the bounds of
``gpuplan.limits``; a sequence is no longer than the model's position table; seeds are whole
numbers from 0. A bad value is a ``GpuplanError`` naming the field, the value and what is valid,
never a bare ``TypeError`` or ``ZeroDivisionError`` from deep inside, nor a priced answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuplan.errors import GpuplanError, check_whole, shown
from gpuplan.limits import MAX_BYTES, MAX_DIM, MAX_GPUS, MAX_LAYERS, MAX_SEED

# Bounds of the whole-number params of a case (the record contract's names, ARCHITECTURE.md).
PARAM_BOUNDS = {"layers": MAX_LAYERS, "world": MAX_GPUS, "tp": MAX_GPUS, "bytes": MAX_BYTES}
WHOLE_PARAMS = ("m", "n", "k", "batch", "heads_q", "heads_kv", "seq_q", "seq_kv", "head_dim",
                "tokens", "hidden", "ffn", "seq", "micro_batch", "vocab", "layers", "context",
                "world", "tp", "bytes", "max_cache_len")  # fmt: skip
BOOL_PARAMS = ("causal", "compiled", "cuda_graph")
# The word params of a case: a string where given (None: the default)
WORD_PARAMS = ("dtype", "op", "impl", "pass", "model", "stack", "timing", "attention_kernel",
               "kv_cache", "recompute", "precision", "optimizer", "optimizer_impl",
               "kv_dtype", "weight_dtype")  # fmt: skip


def check_params(params: Mapping[str, Any]) -> None:
    """The whole-number and boolean params of a case, where given, of the right type and size."""
    if not isinstance(params, Mapping):
        raise GpuplanError(f"params={shown(params)} is invalid: it must be a mapping of names "
                           "to values")  # fmt: skip
    for name in WORD_PARAMS:
        if params.get(name) is not None and not isinstance(params[name], str):
            raise GpuplanError(f"{name}={shown(params[name])} is invalid: it must be a string")
    for name in WHOLE_PARAMS:
        if name in params:
            check_whole(name, params[name], high=PARAM_BOUNDS.get(name, MAX_DIM))
    for name in BOOL_PARAMS:
        if name in params and not isinstance(params[name], bool):
            raise GpuplanError(f"{name}={shown(params[name])} is invalid: it must be True or "
                               "False")  # fmt: skip


def check_seq(cfg, seq: int, field: str = "seq") -> None:
    """``seq`` a whole number no longer than ``cfg``'s position table (``max_seq_len``, the
    ``max_position_embeddings`` of its config.json); vision encoders have no such table."""
    check_whole(field, seq, high=MAX_DIM)
    if not getattr(cfg, "is_vision", False) and seq > cfg.max_seq_len:
        raise GpuplanError(
            f"{field}={seq:,} is longer than {cfg.name}'s max_seq_len={cfg.max_seq_len:,} "
            "(max_position_embeddings): use at most that"
        )


def check_seed(seed: int, field: str = "seed") -> None:
    check_whole(field, seed, low=0, high=MAX_SEED)


def check_gpus(gpus: int, field: str = "gpus") -> None:
    check_whole(field, gpus, high=MAX_GPUS)
