"""Measurement records in the contract's JSON Lines form, and the environment they came from.

The contract (docs: ARCHITECTURE.md, "Measurement records") fixes the ``params`` and
``measured`` keys of every kind; this module holds them once and refuses a record whose keys
differ, so a typo in a kind's case table fails on the CPU, not in the lab. Extra top-level keys
(timing statistics, definitions, library names) are allowed by the contract and used freely.

Each kind writes ``DIR/<kind>.jsonl``, flushed after every record, so a crash or a timeout keeps
what was measured. Imports nothing from gpuplan: this runs on machines without it installed.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

PARAM_KEYS: dict[str, tuple[str, ...]] = {
    "gemm": ("m", "n", "k", "dtype"),
    "attention": (
        "batch",
        "heads_q",
        "heads_kv",
        "seq_q",
        "seq_kv",
        "head_dim",
        "causal",
        "pass",
        "dtype",
    ),
    "elementwise": ("op", "tokens", "hidden", "pass", "dtype"),
    "layer": (
        "hidden",
        "heads_q",
        "heads_kv",
        "ffn",
        "seq",
        "micro_batch",
        "pass",
        "compiled",
        "dtype",
    ),
    "train_step": (
        "vocab",
        "hidden",
        "heads_q",
        "heads_kv",
        "ffn",
        "layers",
        "seq",
        "micro_batch",
        "recompute",
        "optimizer",
        "precision",
    ),
    "decode_step": (
        "hidden",
        "heads_q",
        "heads_kv",
        "ffn",
        "layers",
        "batch",
        "context",
        "cuda_graph",
        "dtype",
    ),
    "collective": ("op", "world", "bytes", "dtype"),
    "tp_mlp": ("hidden", "ffn", "tokens", "tp", "pass", "dtype"),
    # An extension beside the contract's kinds: the decoder layer under tensor parallelism.
    "tp_layer": (
        "hidden",
        "heads_q",
        "heads_kv",
        "ffn",
        "seq",
        "micro_batch",
        "tp",
        "pass",
        "dtype",
    ),
}

MEASURED_KEYS: dict[str, tuple[str, ...]] = {
    kind: ("time_s", "peak_bytes") if kind in ("layer", "train_step") else ("time_s",)
    for kind in PARAM_KEYS
}

# Accelerator catalogue keys for the device names torch reports (first match wins).
_DEVICE_KEYS = (
    ("H200", "h200"),
    ("H100 PCIe", "h100-pcie"),
    ("H100", "h100-sxm"),
    ("A100", "a100-sxm-80gb"),
    ("B200", "b200"),
    ("L40S", "l40s"),
    ("L4", "l4"),
)


def device_key(device_name: str) -> str:
    """Catalogue key for a device name from torch ('NVIDIA H200' -> 'h200'); 'cpu' for CPUs."""
    for fragment, key in _DEVICE_KEYS:
        if fragment.lower() in device_name.lower():
            return key
    return device_name.lower().replace("nvidia ", "").replace(" ", "-") or "cpu"


def make_record(kind: str, device: str, params: dict, measured: dict, source: str, **extra) -> dict:
    """One contract record; a params or measured key set other than the contract's is a bug."""
    if kind not in PARAM_KEYS:
        raise ValueError(f"kind={kind!r} is unknown: choose one of {', '.join(PARAM_KEYS)}")
    for what, got, want in (
        ("params", params, PARAM_KEYS[kind]),
        ("measured", measured, MEASURED_KEYS[kind]),
    ):
        if set(got) != set(want):
            raise ValueError(
                f"{kind} {what} keys {sorted(got)} differ from the contract's {sorted(want)}"
            )
    # every record names the stack that ran it (the record contract's optional ``stack``):
    # the harness's own calls, priced as the ``harness`` stack (FlashAttention-2, its timing)
    ordered = {key: params[key] for key in PARAM_KEYS[kind]} | {"stack": "harness"}
    return {
        "kind": kind,
        "device": device,
        "params": ordered,
        "measured": measured,
        "source": source,
        **extra,
    }


class RecordWriter:
    """Appends records to ``DIR/<kind>.jsonl``, one line each, flushed at once."""

    def __init__(self, out_dir: Path | str, kind: str) -> None:
        self.path = Path(out_dir) / f"{kind}.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.count = 0

    def write(self, record: dict) -> None:
        with self.path.open("a") as f:
            f.write(json.dumps(record, sort_keys=False) + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.count += 1


def read_records(path: Path | str) -> list[dict]:
    """The records of one JSON Lines file (blank lines skipped)."""
    lines = Path(path).read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def _nvidia_smi() -> dict:
    """Driver, clocks and power limit as nvidia-smi reports them; {} where it is absent."""
    fields = (
        "name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,"
        "power.limit,temperature.gpu,memory.total,persistence_mode"
    )
    cmd = ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader"]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    keys = fields.split(",")
    return {
        "gpus": [
            dict(zip(keys, (v.strip() for v in line.split(",")), strict=False))
            for line in out.strip().splitlines()
        ]
    }


def _try(fn):
    """fn(), or a note of why it failed: the environment record must never stop a run."""
    try:
        return fn()
    except Exception as exc:
        return f"unavailable ({type(exc).__name__}: {exc})"


def environment(torch, device: str) -> dict:
    """What the numbers depend on: GPU, its SM count and L2, driver, CUDA, torch, python, date."""
    env = {
        "date_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": device,
        "env_vars": {k: v for k, v in os.environ.items() if k.startswith(("NCCL_", "TORCH_"))},
    }
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        env |= {
            "gpu_name": props.name,
            "gpu_count": torch.cuda.device_count(),
            "sm_count": props.multi_processor_count,
            "l2_bytes": getattr(props, "L2_cache_size", None),
            "gpu_memory_bytes": props.total_memory,
            "compute_capability": f"{props.major}.{props.minor}",
            "cudnn": _try(torch.backends.cudnn.version),
            "nccl": _try(lambda: ".".join(map(str, torch.cuda.nccl.version()))),
            "nvidia_smi": _nvidia_smi(),
        }
    return env


def write_environment(out_dir: Path | str, env: dict) -> Path:
    """Write ``environment.json`` (overwriting): the context shared by every record of DIR."""
    path = Path(out_dir) / "environment.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(env, indent=2, default=str) + "\n")
    return path
