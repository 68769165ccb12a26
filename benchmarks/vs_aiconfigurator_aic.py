"""aiconfigurator's side of ``vs_aiconfigurator.py``: the questions, and each asked of
aiconfigurator's Python API (``aiconfigurator.cli.api.cli_default``, the programmatic form of
``aiconfigurator cli default``), its answer kept as a plain dict for the committed JSON.

aiconfigurator is an optional extra (``pip install 'gpuplan[aiconfigurator]'``); nothing here
imports it until ``ask`` is called, and ``installed`` says whether it can be.
"""

from __future__ import annotations

import importlib.util
import logging
import time
from dataclasses import asdict, dataclass

# One request shape for every question, chosen so that published TensorRT-LLM rows exist for
# it (the perf-overview tables under gpuplan/validate/published hold 1000/1000 for Llama 70B).
ISL, OSL = 1000, 1000
# (TTFT ms, TPOT ms): aiconfigurator's own defaults (``cli_default(ttft=2000.0, tpot=30.0)``,
# aiconfigurator/cli/api.py 0.12.0), and a tighter pair for interactive use.
SLOS = ((2000.0, 30.0), (300.0, 20.0))
# (gpuplan model key or config path, aiconfigurator's model path): FP8 checkpoints, the format
# the published TensorRT-LLM rows of these models use; DeepSeek-V3 ships in FP8 (block-scaled).
MODELS = {
    "llama3.1-70b": "nvidia/Llama-3.1-70B-Instruct-FP8",
    "qwen3-32b": "Qwen/Qwen3-32B-FP8",
    "deepseek-v3": "deepseek-ai/DeepSeek-V3",
}
# gpuplan's accelerator key -> aiconfigurator's system name (aiconfigurator_core/systems/*.yaml)
SYSTEMS = {"h100-sxm": "h100_sxm", "h200": "h200_sxm", "b200": "b200_sxm"}
# gpuplan's stack -> aiconfigurator's backend
BACKENDS = {"trt-llm": "trtllm", "vllm": "vllm"}
# the GPUs of each question: 8, except DeepSeek-V3 on H100 (671 GB of FP8 weights exceed 8 x 80 GB)
GPUS = {("deepseek-v3", "h100-sxm"): 16}


@dataclass(frozen=True, slots=True)
class Question:
    model: str  # gpuplan's key
    gpu: str  # gpuplan's accelerator key
    stack: str  # gpuplan's stack
    gpus: int
    ttft_ms: float
    tpot_ms: float
    isl: int = ISL
    osl: int = OSL

    @property
    def key(self) -> str:
        return (f"{self.model}|{self.gpu}|{self.stack}|{self.gpus}|{self.isl}/{self.osl}|"
                f"{self.ttft_ms:g}/{self.tpot_ms:g}")  # fmt: skip


def questions() -> list[Question]:
    """Every question, in table order."""
    return [Question(model=m, gpu=g, stack=s, gpus=GPUS.get((m, g), 8), ttft_ms=t, tpot_ms=p)
            for m in MODELS for g in SYSTEMS for s in BACKENDS for t, p in SLOS]  # fmt: skip


def installed() -> bool:
    return importlib.util.find_spec("aiconfigurator") is not None


def version() -> str:
    import importlib.metadata

    return importlib.metadata.version("aiconfigurator")


# a best-config row's columns kept, by serving mode (the row's names, aiconfigurator 0.12.0)
_COMMON = ("tokens/s/gpu_cluster", "tokens/s/user", "ttft", "tpot", "concurrency", "num_total_gpus")
_AGG = ("tp", "pp", "dp", "moe_tp", "moe_ep", "bs", "global_bs", "gemm", "kvcache", "version")
_POOL = ("tp", "pp", "dp", "moe_tp", "moe_ep", "bs", "workers", "gemm", "kvcache", "version")


def _plain(v):
    """A JSON value of a DataFrame cell (numpy scalars to Python's)."""
    return v.item() if hasattr(v, "item") else v


def _pick(row, mode: str) -> dict:
    out = {k: _plain(row[k]) for k in _COMMON if k in row}
    if mode == "agg":
        out |= {k: _plain(row[k]) for k in _AGG if k in row}
    else:
        for side in ("p", "d"):
            out[side] = {k: _plain(row[f"({side}){k}"]) for k in _POOL if f"({side}){k}" in row}
    return out


def ask(q: Question) -> dict:
    """aiconfigurator's answer to ``q``: its best aggregated and disaggregated deployments (or
    why none), the one it chooses, and its search time."""
    from aiconfigurator.cli.api import cli_default

    logging.disable(logging.WARNING)  # its progress log; the answer is in the result
    started = time.perf_counter()
    try:
        r = cli_default(MODELS[q.model], q.gpus, SYSTEMS[q.gpu], backend=BACKENDS[q.stack],
                        isl=q.isl, osl=q.osl, ttft=q.ttft_ms, tpot=q.tpot_ms, top_n=1)  # fmt: skip
    except Exception as err:  # aiconfigurator's own refusal is its answer (kept, one line)
        return {"question": asdict(q), "error": f"{type(err).__name__}: {err}".splitlines()[0],
                "search_s": time.perf_counter() - started}  # fmt: skip
    took = time.perf_counter() - started
    best = {}
    for mode, frame in r.best_configs.items():
        if frame is not None and not frame.empty:
            best[mode] = _pick(frame.iloc[0], mode)
    return {"question": asdict(q), "chosen": r.chosen_exp, "best": best, "search_s": took}
