"""aiconfigurator's kernel rows as gpuplan cases, priced through the path ``gpuplan estimate
gemm|attention|collective`` takes (``record_prediction.predict_breakdown``), and scored.

Nothing is fitted on these rows. Each row is one case on its framework's stack (TensorRT-LLM ->
``trt-llm``, vLLM -> ``vllm``, SGLang -> ``sglang``; NCCL's rows, collected by aiconfigurator's
TensorRT-LLM image, on ``trt-llm``). The tables are CUDA-graph replays: kernels back to back
with no host issue between them, which is gpuplan's ``device`` timing (the kernels' own time in a
busy stream: no launch latency, no host items). SGLang's and vLLM's custom all-reduce tables also
hold eager calls (``kernel_source`` ending ``_eager``): those are timed ``isolated``.

How a row becomes a case (decided from the tables' definitions, before any error was seen):

- ``gemm``: C[m, n] = A[m, k] B[k, n] (aiconfigurator's m, n, k). ``bfloat16`` -> bf16;
  ``fp8`` (per-tensor scaled) and ``fp8_block`` (1x128 / 128x128 block-scaled, DeepGEMM or
  CUTLASS) -> fp8, gpuplan having one FP8 GEMM; ``sq`` (SmoothQuant W8A8) -> int8; ``nvfp4``
  -> nvfp4; ``int4_wo`` (weight-only INT4, bf16 activations) -> ``int4``, estimate gemm's W4A16
  GEMM; the other weight-only formats (``int8_wo``, ``w4a8``...) are no answer.
- ``context_attention``: a causal prefill of ``isl`` tokens, ``seq_q = seq_kv = isl``, in
  ``attn_dtype`` (bf16 or FP8 FMHA), with its ``window_size`` as a sliding window.
- ``generation_attention``: one query per sequence over ``isl + step`` cached tokens (the
  prompt and the ``step`` tokens decoded before it), in the KV cache's dtype (the stream that
  bounds a decode kernel), with its sliding window.
- ``nccl`` and ``custom_allreduce``: ``message_size`` is an element count (aiconfigurator's
  collectors pass counts, not bytes); ``world = num_gpus``; gpuplan's ``bytes`` is each rank's
  input: the whole message for all-reduce, reduce-scatter and all-to-all, one rank's share for
  all-gather (nccl-tests sizes an all-gather by its output: ``AllGatherGetCollByteCount``).

A row gpuplan cannot price carries a one-line reason and counts as "no answer"; none is dropped.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd

from gpuplan.errors import GpuplanError
from gpuplan.units import MS
from gpuplan.validate.published.aiconfigurator import FRAMEWORKS
from gpuplan.validate.record_kinds import GEMM_DTYPES
from gpuplan.workloads.dtypes import dtype_bytes

NCCL_STACK = "trt-llm"  # NCCL's tables are collected in aiconfigurator's TensorRT-LLM image
FLOAT_NAMES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "fp8": "fp8",
               "float32": "fp32", "int8": "int8"}
GEMM_NAMES = {"bfloat16": "bf16", "float16": "fp16", "fp8": "fp8", "fp8_block": "fp8",
              "sq": "int8", "nvfp4": "nvfp4", "int4_wo": "int4"}
WEIGHT_ONLY = ("int8_wo", "int4_wo", "w4a8", "w4a16", "int4_awq", "w4a8_awq")
COLLECTIVE_OPS = {"all_reduce": "all_reduce", "all_gather": "all_gather",
                  "reduce_scatter": "reduce_scatter", "alltoall": "all_to_all",
                  "all_to_all": "all_to_all"}


class NoAnswer(Exception):
    """A row gpuplan cannot price, with the one-line reason."""


def row_case(row: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(record kind, params) of one table row (module docstring); ``NoAnswer`` if none."""
    kind = row["kind"]
    stack = NCCL_STACK if kind == "nccl" else FRAMEWORKS[row["fw"]]
    timing = "isolated" if str(row.get("kernel_source", "")).endswith("_eager") else "device"
    base = {"stack": stack, "timing": timing}
    if kind == "gemm":
        return "gemm", base | _gemm(row)
    if kind in ("context_attention", "generation_attention"):
        return "attention", base | _attention(row, generation=kind == "generation_attention")
    return "collective", base | _collective(row)


def _gemm(row) -> dict[str, Any]:
    src = row["gemm_dtype"]
    dtype = GEMM_NAMES.get(src)
    if dtype is None:
        if src in WEIGHT_ONLY:
            raise NoAnswer(f"gemm_dtype={src}: a weight-only GEMM is not a kernel of `estimate "
                           "gemm` (serve --weight-dtype prices it inside a model)")
        raise NoAnswer(f"gemm_dtype={src}: `estimate gemm --dtype` takes "
                       f"{', '.join(GEMM_DTYPES)}")
    return {"m": int(row["m"]), "n": int(row["n"]), "k": int(row["k"]), "dtype": dtype}


def _attention(row, *, generation: bool) -> dict[str, Any]:
    src = row["kv_cache_dtype"] if generation else row["attn_dtype"]
    dtype = FLOAT_NAMES.get(src)
    if dtype is None:
        raise NoAnswer(f"{'kv_cache' if generation else 'attn'}_dtype={src}: not a format of "
                       "`estimate attention`")
    hq, hkv = int(row["num_heads"]), int(row["num_key_value_heads"])
    if hq % hkv:
        raise NoAnswer(f"num_heads={hq} is not a multiple of num_key_value_heads={hkv}")
    if _int(row, "beam_width", 1) != 1:
        raise NoAnswer(f"beam_width={row['beam_width']}: beam search is not priced")
    isl = int(row["isl"])
    seq_kv = isl + int(row["step"]) if generation else isl
    return {"batch": int(row["batch_size"]), "heads_q": hq, "heads_kv": hkv,
            "seq_q": 1 if generation else isl, "seq_kv": seq_kv, "head_dim": int(row["head_dim"]),
            "causal": True, "pass": "fwd", "dtype": dtype,
            "window": max(0, _int(row, "window_size", 0))}


def _int(row, col: str, default: int) -> int:
    """An optional column (absent from some tables: NaN once tables are joined)."""
    value = row.get(col)
    return default if value is None or value == "" or pd.isna(value) else int(value)


def _collective(row) -> dict[str, Any]:
    op = COLLECTIVE_OPS.get(row["op_name"])
    if op is None:
        raise NoAnswer(f"op_name={row['op_name']}: not a collective of `estimate collective`")
    src = row["nccl_dtype" if row["kind"] == "nccl" else "allreduce_dtype"]
    dtype = FLOAT_NAMES.get(src)
    if dtype is None:
        raise NoAnswer(f"dtype={src}: not a format of `estimate collective`")
    world = int(row["num_gpus"])
    nbytes = int(row["message_size"]) * dtype_bytes(dtype)
    per_rank = nbytes // world if op == "all_gather" else nbytes
    if per_rank < 1:
        raise NoAnswer(f"message_size={row['message_size']} leaves no bytes per rank")
    return {"op": op, "world": world, "bytes": per_rank, "dtype": dtype}


def price_row(row: dict[str, Any]) -> tuple[float, str, str]:
    """(predicted seconds or NaN, gpuplan dtype, reason or '') of one row."""
    from gpuplan.validate.record_prediction import predict_breakdown

    try:
        kind, params = row_case(row)
        return predict_breakdown(kind, row["device"], params).total_s, params["dtype"], ""
    except (NoAnswer, GpuplanError) as exc:
        return float("nan"), "", str(exc).splitlines()[0]


def _rows(df: pd.DataFrame) -> Iterator[dict[str, Any]]:
    cols = list(df.columns)
    for values in df.itertuples(index=False, name=None):
        yield dict(zip(cols, values, strict=True))


def source_dtype(df: pd.DataFrame) -> pd.Series:
    """The table's own dtype label of each row: GEMM's, attention's (generation: the KV
    cache's, ``attn+kv`` where they differ in a prefill), the collective's."""
    out = pd.Series("", index=df.index, dtype=object)
    for col in ("nccl_dtype", "allreduce_dtype", "gemm_dtype"):
        if col in df:
            out = out.where(df[col].isna() | (df[col] == ""), df[col])
    if "attn_dtype" in df:
        gen = df["kind"] == "generation_attention"
        ctx = df["kind"] == "context_attention"
        attn, kv = df["attn_dtype"].astype(str), "kv" + df["kv_cache_dtype"].astype(str)
        label = attn.where(attn == df["kv_cache_dtype"], attn + "+" + kv)
        out = out.where(~ctx, label).where(~gen, kv)
    return out


def score(df: pd.DataFrame) -> pd.DataFrame:
    """Each row priced: ``measured_s``, ``predicted_s``, ``dtype`` (the table's label),
    ``gpuplan_dtype``, ``reason`` (empty when answered), ``signed_pct`` and ``abs_pct``."""
    priced = [price_row(r) for r in _rows(df)]
    out = pd.DataFrame({
        "device": df["device"].to_numpy(), "kind": df["kind"].to_numpy(),
        "framework": df["fw"].to_numpy(), "version": df["fw_version"].to_numpy(),
        "kernel_source": df.get("kernel_source", pd.Series("", index=df.index)).to_numpy(),
        "dtype": source_dtype(df).to_numpy(),
        "gpuplan_dtype": [p[1] for p in priced],
        "measured_s": df["latency"].to_numpy(dtype=float) * MS,
        "predicted_s": [p[0] for p in priced],
        "reason": [p[2] for p in priced],
    })
    out["signed_pct"] = 100.0 * (out["predicted_s"] - out["measured_s"]) / out["measured_s"]
    out["abs_pct"] = out["signed_pct"].abs()
    return out


GROUP = ["device", "kind", "dtype", "framework"]


def summarize(scored: pd.DataFrame, by: list[str] | None = None) -> pd.DataFrame:
    """Per group: rows, answered, share answered, median and p90 absolute percent error, and
    the signed median (bias: negative is predicted too fast)."""
    by = by or GROUP

    def one(g: pd.DataFrame) -> pd.Series:
        ok = g[g["reason"] == ""]
        err = ok["abs_pct"].to_numpy()
        return pd.Series({
            "n": len(g), "answered": len(ok), "answered_frac": len(ok) / len(g),
            "median_abs_pct": float(np.median(err)) if len(err) else float("nan"),
            "p90_abs_pct": float(np.percentile(err, 90)) if len(err) else float("nan"),
            "signed_median_pct": float(np.median(ok["signed_pct"])) if len(ok) else float("nan"),
        })

    rows = [one(g).rename(key) for key, g in scored.groupby(by, sort=False)]
    out = pd.DataFrame(rows)
    out.index = pd.MultiIndex.from_tuples(out.index, names=by) if len(by) > 1 else out.index
    out = out.reset_index()
    out[["n", "answered"]] = out[["n", "answered"]].astype(int)
    return out


def reasons(scored: pd.DataFrame) -> pd.DataFrame:
    """Each distinct no-answer reason with its rows, by device and kind."""
    miss = scored[scored["reason"] != ""]
    return (miss.groupby(["device", "kind", "reason"]).size().rename("rows").reset_index()
            .sort_values("rows", ascending=False, kind="stable"))
