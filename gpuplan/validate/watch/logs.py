"""Step records from a training job's own log, in the formats its framework writes.

Each reader turns one line into a ``StepRecord`` (or None for a line it does not know); ``parse_line``
tries them in turn, so one file may mix formats (a launcher's prefix, ANSI colours). Formats:

- torchtitan (``torchtitan/components/metrics.py``, ``MetricsProcessor.log``):
  ``step: 10  loss:  7.8542  memory: 32.51GiB(34.22%)  tps: 6,543  tflops: 312.45  mfu: 31.59%``
  (``tps`` is tokens per second per GPU: the rank's tokens over the non-data-parallel degree;
  ``memory`` the peak reserved GiB; older versions print fewer fields);
- Megatron-LM (``megatron/training/training.py``, ``training_log``):
  `` iteration      100/  500000 | consumed samples: ... | elapsed time per iteration (ms): 5123.4 |
  throughput per GPU (TFLOP/s/GPU): 401.2 | ...`` and ``[Rank 0] (after 10 iterations) memory (MB)
  | allocated: ... | max allocated: ... | reserved: ... | max reserved: 16334.0``;
- Hugging Face Trainer (``transformers/trainer.py``, ``Trainer.log``): the dictionaries it prints,
  ``{'loss': 2.31, 'grad_norm': 1.2, 'learning_rate': 5e-05, 'epoch': 0.1}`` (no timing) and the
  run's summary ``{'train_runtime': 120.5, 'train_samples_per_second': 8.3,
  'train_steps_per_second': 1.04, ...}``, or the same as JSON (``trainer_state.json``'s
  ``log_history`` entries, one a line);
- JSON Lines of step records: ``{"step": 1, "step_time_s": 1.2, "tokens_per_s": 6.5e4,
  "peak_memory_bytes": 7.1e10, "mfu": 0.41}`` (any subset; ``tokens_per_s_per_gpu`` too).
"""

from __future__ import annotations

import ast
import json
import math
import re
from dataclasses import dataclass

from gpuplan.units import GiB, MiB

ANSI = re.compile(r"\x1b\[[0-9;]*m")
_NUM = r"([0-9][0-9,]*\.?[0-9]*(?:[eE][-+]?[0-9]+)?)"
TITAN = re.compile(r"\bstep:\s*(\d+)\s+loss:")
TITAN_FIELDS = {
    "memory_gib": re.compile(r"memory:\s*" + _NUM + r"\s*GiB"),
    "tps": re.compile(r"\btps:\s*" + _NUM),
    "tflops": re.compile(r"\btflops:\s*" + _NUM),
    "mfu_pct": re.compile(r"\bmfu:\s*" + _NUM + "%"),
}
MEGATRON = re.compile(r"iteration\s+(\d+)\s*/\s*\d+\s*\|")
MEGATRON_MS = re.compile(r"elapsed time per iteration \(ms\):\s*" + _NUM)
MEGATRON_TFLOPS = re.compile(r"throughput per GPU \(TFLOP/s/GPU\):\s*" + _NUM)
MEGATRON_MEMORY = re.compile(r"memory \(MB\).*max reserved:\s*" + _NUM)


@dataclass(frozen=True, slots=True)
class StepRecord:
    """What one log line says of the run (None: not said). ``step`` None: a whole run's summary."""

    source: str  # the format: torchtitan, megatron, hf-trainer, jsonl
    step: int | None = None
    step_time_s: float | None = None
    tokens_per_s: float | None = None  # the whole job's
    tokens_per_s_per_gpu: float | None = None
    peak_memory_bytes: float | None = None  # per GPU
    mfu: float | None = None
    tflops_per_gpu: float | None = None  # achieved, as the framework counts model FLOPs
    whole_run: bool = False  # a summary of the run so far (no warm-up to leave out of it)


def _num(text: str) -> float:
    return float(text.replace(",", ""))


def _torchtitan(line: str) -> StepRecord | None:
    m = TITAN.search(line)
    if m is None:
        return None
    got = {k: _num(p.group(1)) for k, rx in TITAN_FIELDS.items() if (p := rx.search(line))}
    return StepRecord(
        source="torchtitan", step=int(m.group(1)),
        tokens_per_s_per_gpu=got.get("tps"),
        peak_memory_bytes=got["memory_gib"] * GiB if "memory_gib" in got else None,
        mfu=got["mfu_pct"] / 100 if "mfu_pct" in got else None,
        tflops_per_gpu=got.get("tflops"),
    )  # fmt: skip


def _megatron(line: str) -> StepRecord | None:
    mem = MEGATRON_MEMORY.search(line)
    if mem is not None:  # the memory report (rank 0 first): peak reserved, no step
        return StepRecord(source="megatron", peak_memory_bytes=_num(mem.group(1)) * MiB)
    m = MEGATRON.search(line)
    ms = MEGATRON_MS.search(line)
    if m is None or ms is None:
        return None
    tflops = MEGATRON_TFLOPS.search(line)
    return StepRecord(source="megatron", step=int(m.group(1)),
                      step_time_s=_num(ms.group(1)) / 1e3,
                      tflops_per_gpu=_num(tflops.group(1)) if tflops else None)  # fmt: skip


def _mapping(line: str) -> dict | None:
    """A JSON object or a Python dict literal on the line (HF Trainer prints the latter)."""
    text = line.strip()
    start = text.find("{")
    if start < 0 or not text.endswith("}"):
        return None
    body = text[start:]
    for parse in (json.loads, ast.literal_eval):
        try:
            value = parse(body)
        except (ValueError, SyntaxError, RecursionError, MemoryError, TypeError):
            continue
        if isinstance(value, dict):
            return value
    return None


def _finite(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) and value >= 0 else None


def _hf_or_jsonl(line: str) -> StepRecord | None:
    d = _mapping(line)
    if d is None:
        return None
    if "train_runtime" in d or "train_steps_per_second" in d:  # HF Trainer's summary
        steps = _finite(d.get("train_steps_per_second"))
        return StepRecord(source="hf-trainer", whole_run=True,
                          step_time_s=1 / steps if steps else None,
                          tokens_per_s=_finite(d.get("train_tokens_per_second")))  # fmt: skip
    if "loss" in d and "learning_rate" in d:  # HF Trainer's step log: no timing in it
        step = d.get("step")
        return StepRecord(source="hf-trainer", step=step if isinstance(step, int) else None)
    keys = ("step_time_s", "tokens_per_s", "tokens_per_s_per_gpu", "peak_memory_bytes", "mfu")
    if not any(k in d for k in keys):
        return None
    step = d.get("step")
    return StepRecord(source="jsonl", step=step if isinstance(step, int) else None,
                      **{k: _finite(d.get(k)) for k in keys})  # fmt: skip


READERS = (_torchtitan, _megatron, _hf_or_jsonl)


def parse_line(line: str) -> StepRecord | None:
    """The record of one log line (ANSI colours and launcher prefixes ignored), or None."""
    clean = ANSI.sub("", line)
    for read in READERS:
        rec = read(clean)
        if rec is not None:
            return rec
    return None
