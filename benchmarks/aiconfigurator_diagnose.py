"""The evidence behind docs/aiconfigurator.md's mechanisms: aiconfigurator's held-out kernel rows
cut by the quantity each mechanism names (nothing here is fitted or tuned on them).

    python3 benchmarks/aiconfigurator_diagnose.py [--data DIR] [--sample 4000] [--seed 0]

1. FP8 GEMM against bf16 on the same (framework, m, n, k): measured time ratio and the extra
   microseconds, by m; 2. large GEMMs (m, n, k >= 4096): achieved TFLOP/s measured and predicted;
3. tiny GEMMs (n k < 1e6): measured and predicted microseconds (the per-kernel fixed cost);
4. context attention without a window, isl >= 4096: achieved TFLOP/s by kernel and head size;
4b. attention by sliding window;
5. NCCL: signed error by message size; 6. custom all-reduce under 64 KB: microseconds.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import pandas as pd

from gpuplan.errors import GpuplanError
from gpuplan.units import TFLOPS
from gpuplan.validate.published import aiconfigurator as aic
from gpuplan.validate.published import aiconfigurator_cases as cases
from gpuplan.workloads.dtypes import dtype_bytes

M_BINS = ([0, 16, 128, 1024, 8192, np.inf],)
SIZE_BINS = ([0, 64e3, 1e6, 16e6, 256e6, np.inf],)
US_PER_S, US_PER_MS = 1e6, 1e3  # the tables' latency is in milliseconds


def scored_rows(args) -> pd.DataFrame:
    rows = aic.read_tables(aic.find_data(args.data), sample=args.sample, seed=args.seed)
    s = cases.score(rows)
    cols = ["gpuplan_dtype", "measured_s", "predicted_s", "reason", "signed_pct", "abs_pct"]
    return pd.concat([rows, s[cols]], axis=1).assign(label=s["dtype"])


def fp8_vs_bf16(g: pd.DataFrame, value: str) -> pd.DataFrame:
    """``value``: ``bf16_over`` (bf16 time / low-precision time) or ``extra_us`` (its extra
    microseconds), the median over every shape both dtypes were timed at (unsampled tables)."""
    p = g.pivot_table(index=["device", "fw", "m", "n", "k"], columns="gemm_dtype",
                      values="latency", aggfunc="median").reset_index()
    p["m_bin"] = pd.cut(p["m"], *M_BINS)
    out = []
    for dt in ("fp8", "fp8_block", "nvfp4"):
        if dt not in p or "bfloat16" not in p:
            continue
        q = p.dropna(subset=[dt, "bfloat16"])
        r = q.assign(ratio=q["bfloat16"] / q[dt], extra_us=(q[dt] - q["bfloat16"]) * US_PER_MS)
        out.append(r.groupby(["device", "fw", "m_bin"], observed=True)
                   .agg(pairs=("m", "size"), bf16_over=("ratio", "median"),
                        extra_us=("extra_us", "median")).assign(dtype=dt))
    return pd.concat(out).reset_index().pivot_table(
        index=["device", "fw", "dtype"], columns="m_bin", values=value, observed=True)


def large_gemms(f: pd.DataFrame) -> pd.DataFrame:
    g = f[(f["kind"] == "gemm") & (f["reason"] == "")]
    g = g[(g["m"] >= 4096) & (g["n"] >= 4096) & (g["k"] >= 4096)]
    flops = 2.0 * g["m"] * g["n"] * g["k"]
    g = g.assign(meas=flops / g["measured_s"] / TFLOPS, pred=flops / g["predicted_s"] / TFLOPS)
    return g.groupby(["device", "label", "kernel_source"]).agg(
        n=("m", "size"), measured_tflops=("meas", "median"), predicted_tflops=("pred", "median"),
        signed_pct=("signed_pct", "median"))


def tiny_gemms(f: pd.DataFrame) -> pd.DataFrame:
    g = f[(f["kind"] == "gemm") & (f["reason"] == "") & (f["n"] * f["k"] < 1e6)]
    return g.groupby(["device", "label"]).agg(
        n=("m", "size"), measured_us=("measured_s", lambda x: np.median(x) * US_PER_S),
        predicted_us=("predicted_s", lambda x: np.median(x) * US_PER_S))


def context_attention(f: pd.DataFrame) -> pd.DataFrame:
    a = f[(f["kind"] == "context_attention") & (f["reason"] == "")]
    a = a[(a["window_size"].fillna(0) == 0) & (a["isl"] >= 4096)]
    flops = 4.0 * a["batch_size"] * a["num_heads"] * a["isl"] * (a["isl"] + 1) / 2 * a["head_dim"]
    a = a.assign(meas=flops / a["measured_s"] / TFLOPS, pred=flops / a["predicted_s"] / TFLOPS)
    return a.groupby(["device", "label", "fw", "kernel_source", "head_dim"]).agg(
        n=("isl", "size"), measured_tflops=("meas", "median"), predicted_tflops=("pred", "median"),
        signed_pct=("signed_pct", "median"))


def windows(f: pd.DataFrame) -> pd.DataFrame:
    a = f[f["kind"].isin(["context_attention", "generation_attention"]) & (f["reason"] == "")]
    a = a.assign(window=a["window_size"].fillna(0).astype(int))
    return a.pivot_table(index=["device", "kind", "window"], columns="fw", values="signed_pct",
                         aggfunc="median")


def by_size(f: pd.DataFrame, kind: str, index: list[str]) -> pd.DataFrame:
    c = f[(f["kind"] == kind) & (f["reason"] == "")]
    dtype_col = "nccl_dtype" if kind == "nccl" else "allreduce_dtype"
    c = c[c[dtype_col].isin(["half", "bfloat16"])]
    # message_size is an element count (aiconfigurator_cases' docstring), half or bf16 each
    c = c.assign(size=pd.cut(c["message_size"] * dtype_bytes("bf16"), *SIZE_BINS))
    return c.pivot_table(index=index, columns="size", values="signed_pct", aggfunc="median",
                         observed=True)


def small_allreduce(f: pd.DataFrame) -> pd.DataFrame:
    small = f["message_size"] * dtype_bytes("bf16") < 64e3
    c = f[(f["kind"] == "custom_allreduce") & (f["reason"] == "") & small]
    return c.groupby(["device", "kernel_source", "num_gpus"]).agg(
        measured_us=("measured_s", lambda x: np.median(x) * US_PER_S),
        predicted_us=("predicted_s", lambda x: np.median(x) * US_PER_S))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data")
    p.add_argument("--sample", type=int, default=4000)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    pd.set_option("display.width", 250)
    pd.set_option("display.max_rows", 1000)
    try:
        gemms = aic.read_tables(aic.find_data(args.data), kinds=["gemm"])  # every row: pairs
        f = scored_rows(args)
    except GpuplanError as err:  # a bad --data: one line, exit 2, as aiconfigurator_kernels
        print(f"error: {err}", file=sys.stderr)
        return 2
    sections = [("1. bf16 time / low-precision time on the same shape (measured; gpuplan's "
                 "ratio at large shapes is the dtype peaks' ratio, 2)",
                 fp8_vs_bf16(gemms, "bf16_over")),
                ("1b. low-precision time - bf16 time on the same shape, microseconds",
                 fp8_vs_bf16(gemms, "extra_us")),
                ("2. large GEMMs: achieved TFLOP/s", large_gemms(f)),
                ("3. tiny GEMMs (n k < 1e6): microseconds", tiny_gemms(f)),
                ("4. context attention, isl >= 4096, no window: TFLOP/s", context_attention(f)),
                ("4b. attention by sliding window (0: none): signed median %", windows(f)),
                ("5. NCCL (half): signed median % by message bytes",
                 by_size(f, "nccl", ["device", "op_name", "num_gpus"])),
                ("5b. custom all-reduce: signed median % by message bytes",
                 by_size(f, "custom_allreduce", ["device", "kernel_source", "num_gpus"])),
                ("6. custom all-reduce under 64 KB: microseconds", small_allreduce(f))]
    for title, table in sections:
        print(f"## {title}\n\n{table.round(2).to_string()}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
