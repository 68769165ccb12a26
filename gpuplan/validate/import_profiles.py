"""Published per-kernel profiles of A100 and H100 turned into measurement records.

Source: microsoft/vidur (Agrawal et al., "Vidur: A Large-Scale Simulation Framework for LLM
Inference", MLSys 2024), commit ``VIDUR_COMMIT``, folder ``data/profiling``:

- ``compute/{a100,h100}/<org>/<model>/mlp.csv``: one row per (token count, tensor-parallel
  degree) of one decoder layer's non-attention operators, run by Sarathi-Serve's layers in fp16
  (``vidur/profiling/mlp/mlp_wrapper.py``: ``model.to(dtype=torch.float16)``), timed with
  ``record_function`` ranges read from a torch.profiler trace (the CUDA kernel time of each
  range, 2 warm-up and 20 active steps: ``--profile_method record_function``, the default of
  ``vidur/profiling/mlp/main.py``). Columns ``time_stats.<op>.median`` are milliseconds.
  That is device time (kernels back to back in a busy stream): ``params.timing = "device"``.
- ``network/{a100,h100}_dgx/{all_reduce,send_recv}.csv``: ``torch.distributed`` all-reduce and
  send/recv of an fp16 buffer (``collectives_impl.py``: ``torch.empty(size,
  dtype=torch.float16)``) captured in a CUDA graph, the median NCCL kernel time of a
  torch.profiler (kineto) trace, milliseconds; the CSV's ``size`` column is that buffer's bytes
  (``collectives_wrapper.py``: ``"size": self._size * 2,  # bytes``).

Shapes are never invented: every GEMM and elementwise shape is derived from the CSV row's own
columns (``n_head, n_kv_head, n_embd, n_expanded_embd, use_gated_mlp, num_tokens,
num_tensor_parallel_workers``) the way ``vidur/profiling/mlp/mlp_impl.py`` builds the layer
(head_dim = n_embd / n_head; Megatron column/row-parallel split over the TP degree ``tp``):

==================  ==============================================  =======================
vidur operator      record                                          from mlp_impl.py
==================  ==============================================  =======================
attn_pre_proj       gemm m=tokens, n=(n_head+2 n_kv_head) hd / tp,  ColumnParallelLinear qkv
                    k=n_embd
attn_post_proj      gemm m=tokens, n=n_embd, k=n_head hd / tp       RowParallelLinear o_proj
mlp_up_proj         gemm m=tokens, n=2 ffn / tp (gated), k=n_embd   ColumnParallelLinear
mlp_down_proj       gemm m=tokens, n=n_embd, k=ffn / tp             RowParallelLinear
input_layernorm,    elementwise rmsnorm, hidden=n_embd              Sarathi RMSNorm (fused)
post_attention_...
mlp_act             elementwise silu_mul, hidden=ffn / tp           Sarathi SiluAndMul (fused)
add                 elementwise add, hidden=n_embd                  residual + hidden_states
==================  ==============================================  =======================

Only models of the Llama form are read (RMSNorm, gated SiLU MLP, no biases: ``MODELS``); the
embedding gather and RoPE have no record kind of the contract and are left out. Sarathi's
norm and activation are fused CUDA kernels (vLLM's), eager PyTorch around them: the stack is
``eager-2023``. The token counts kept are the powers of two and three times a power of two
(of the 451 profiled); the collective sizes kept are the powers of two, on one host only
(``devices_per_node == num_workers``). Device names: vidur's ``a100`` is its "A100 80GB DGX"
(README, "Model / Device" table; docs/profiling.md says the same compute data serves its A100
PCIe node) and ``h100`` its "H100 DGX": ``a100-sxm-80gb`` and ``h100-sxm``.

These runs are scored, never fitted (``data/runs.json``, ``held_out``): they are the
cross-device check of a fit made on H200 records.

Run: ``python3 -m gpuplan.validate.import_profiles VIDUR_CHECKOUT data/`` writes
``data/vidur_a100/`` and ``data/vidur_h100/``.
"""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gpuplan.errors import GpuplanError
from gpuplan.units import MS  # vidur's time_stats are milliseconds

VIDUR_COMMIT = "7d47513363ec447a741ac5e47241580b47724fbf"
DEVICES = {"a100": "a100-sxm-80gb", "h100": "h100-sxm"}
MODELS = (
    "meta-llama/Llama-2-7b-hf",
    "meta-llama/Llama-2-70b-hf",
    "meta-llama/Meta-Llama-3-8B",
    "meta-llama/Meta-Llama-3-70B",
    "codellama/CodeLlama-34b-Instruct-hf",
)
STACK = "eager-2023"
ELEMENTWISE = {
    "input_layernorm": "rmsnorm",
    "post_attention_layernorm": "rmsnorm",
    "mlp_act": "silu_mul",
    "add": "add",
}
GEMMS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")


def kept_count(n: int) -> bool:
    """A power of two, or three times one."""
    odd = n
    while odd % 2 == 0:
        odd //= 2
    return odd in (1, 3)


def gemm_shape(op: str, row: dict[str, str]) -> tuple[int, int, int]:
    """(m, n, k) of one of the layer's linears on one TP rank (mlp_impl.py)."""
    heads, kv_heads, hidden = int(row["n_head"]), int(row["n_kv_head"]), int(row["n_embd"])
    ffn, tp = int(row["n_expanded_embd"]), int(row["num_tensor_parallel_workers"])
    tokens = int(row["num_tokens"])
    head_dim = hidden // heads
    up = (2 if row["use_gated_mlp"] == "True" else 1) * ffn
    n_k = {
        "attn_pre_proj": ((heads + 2 * kv_heads) * head_dim // tp, hidden),
        "attn_post_proj": (hidden, heads * head_dim // tp),
        "mlp_up_proj": (up // tp, hidden),
        "mlp_down_proj": (hidden, ffn // tp),
    }[op]
    return tokens, n_k[0], n_k[1]


def _source(path: str, what: str) -> str:
    return (f"microsoft/vidur@{VIDUR_COMMIT[:12]} {path}: {what}, fp16, kernel time from a "
            "torch.profiler trace (median ms of the CSV's time_stats)")  # fmt: skip


def _record(kind: str, device: str, params: dict[str, Any], time_s: float, source: str) -> dict:
    params = {**params, "stack": STACK, "timing": "device"}
    return {"kind": kind, "device": device, "params": params, "measured": {"time_s": time_s},
            "source": source}  # fmt: skip


def mlp_records(rows: list[dict[str, str]], device: str, path: str) -> Iterator[dict]:
    """The gemm and elementwise records of one model's mlp.csv."""
    for row in rows:
        tokens, tp = int(row["num_tokens"]), int(row["num_tensor_parallel_workers"])
        if not kept_count(tokens) or row["use_gated_mlp"] != "True":
            continue
        for op in GEMMS:
            m, n, k = gemm_shape(op, row)
            params = {"m": m, "n": n, "k": k, "dtype": "fp16"}
            src = _source(path, f"{op} at num_tokens={tokens}, tp={tp}")
            yield _record("gemm", device, params, float(row[f"time_stats.{op}.median"]) * MS, src)
        for op, name in ELEMENTWISE.items():
            width = int(row["n_expanded_embd"]) // tp if name == "silu_mul" else int(row["n_embd"])
            params = {"op": name, "tokens": tokens, "hidden": width, "pass": "fwd", "dtype": "fp16"}
            src = _source(path, f"{op} at num_tokens={tokens}, tp={tp}")
            yield _record("elementwise", device, params, float(row[f"time_stats.{op}.median"]) * MS, src)


def network_records(rows: list[dict[str, str]], device: str, path: str) -> Iterator[dict]:
    """The collective records of one all_reduce.csv or send_recv.csv, one host only."""
    for row in rows:
        size, world = int(row["size"]), int(row["num_workers"])
        if world != int(row["devices_per_node"]) or size & (size - 1):
            continue
        op = row["collective"]
        params = {"op": op, "world": world, "bytes": size, "dtype": "fp16"}
        src = _source(path, f"{op} of {size} bytes (fp16) on {world} GPUs of one node, CUDA graph")
        yield _record("collective", device, params, float(row[f"time_stats.{op}.median"]) * MS, src)


def _read(path: Path) -> list[dict[str, str]]:
    if not path.is_file():
        raise GpuplanError(f"profile {str(path)!r} does not exist: give a checkout of microsoft/vidur")
    with path.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def convert(vidur: Path, out: Path, devices: dict[str, str] = DEVICES) -> dict[str, int]:
    """Write ``out/vidur_<device>/{gemm,elementwise,collective}.jsonl``; counts per file."""
    counts = {}
    for short, device in devices.items():
        by_kind: dict[str, list[dict]] = {"gemm": [], "elementwise": [], "collective": []}
        for model in MODELS:
            rel = f"data/profiling/compute/{short}/{model}/mlp.csv"
            if (vidur / rel).is_file():
                for rec in mlp_records(_read(vidur / rel), device, rel):
                    by_kind[rec["kind"]].append(rec)
        for op in ("all_reduce", "send_recv"):
            rel = f"data/profiling/network/{short}_dgx/{op}.csv"
            by_kind["collective"].extend(network_records(_read(vidur / rel), device, rel))
        folder = out / f"vidur_{short}"
        folder.mkdir(parents=True, exist_ok=True)
        for kind, recs in by_kind.items():
            lines = "".join(json.dumps(r, sort_keys=False) + "\n" for r in recs)
            (folder / f"{kind}.jsonl").write_text(lines, encoding="utf-8")
            counts[f"{folder.name}/{kind}.jsonl"] = len(recs)
    return counts


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python3 -m gpuplan.validate.import_profiles VIDUR_CHECKOUT OUT_DIR", file=sys.stderr)
        return 2
    try:
        counts = convert(Path(args[0]), Path(args[1]))
    except GpuplanError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for name, n in counts.items():
        print(f"{name}: {n} records")
    return 0


if __name__ == "__main__":
    sys.exit(main())
