"""Predict any case of the measurement-record contract (ARCHITECTURE.md) with its breakdown.

The contract's cases are measured in eager PyTorch (or under torch.compile where ``compiled``
says so), so their elementwise ops are priced as eager PyTorch runs them.

``predict_breakdown(kind, device, params)`` returns the ``Breakdown``; ``predict_record(record)``
returns the metrics the contract measures (``time_s``, and ``peak_bytes`` for ``layer`` and
``train_step``), which is what ``gpuplan validate score`` compares. Beside the contract's kinds,
``tp_layer`` (the decoder layer on one of ``tp`` ranks, eager) is predicted by the same layer
breakdown with its tensor-parallel all-reduces.

Every record is priced on its stack (``params.stack``, default ``pytorch``; ``sim.stacks``), with
``params.attention_kernel`` forcing one kernel, and in its timing (``params.timing``):
``isolated`` (one call between CUDA events after a synchronize: launch latency and the CPU's
issue time where the GPU does not hide it, the default) or ``device`` (the kernels' own time in a
busy stream, what a profiler's kernel durations add up to: no launch or host items).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from gpuplan.errors import GpuplanError, check_choice, expects
from gpuplan.hwmodels.accelerators import get_accelerator
from gpuplan.hwmodels.device_timing import device_efficiency
from gpuplan.hwmodels.efficiency import Efficiency, efficiency_for
from gpuplan.sim.estimate import composite as step
from gpuplan.sim.estimate import kernels
from gpuplan.sim.estimate.breakdown import Breakdown
from gpuplan.sim.estimate.inputs import check_params
from gpuplan.sim.estimate.whole_model import config_breakdown, one_gpu_training
from gpuplan.sim.stacks import TIMINGS, Stack, get_stack, stack_efficiency, with_overrides
from gpuplan.sim.stacks.kernels import check_kernel, with_isolated_call
from gpuplan.workloads.model import ModelConfig

KINDS = (
    "gemm",
    "attention",
    "elementwise",
    "layer",
    "train_step",
    "decode_step",
    "collective",
    "tp_mlp",
    "tp_layer",
    # whole-model kinds (gpuplan.validate.stack_campaign): a named model, ``layers`` kept
    "prefill_step",
    "model_decode_step",
    "model_train_step",
    # MoE experts' grouped GEMM (stack_campaign/grouped.py)
    "grouped_gemm",
)
# whole-model record kind -> the kind of ``whole_model.model_breakdown`` (what ``gpuplan
# estimate prefill-step / decode-step / train-step --model`` prices)
_MODEL_KINDS = {"prefill_step": "prefill_step", "model_decode_step": "decode_step",
                "model_train_step": "train_step"}


def contract_model(p: Mapping[str, Any], *, layers: int = 1, vocab: int = 32000) -> ModelConfig:
    """The contract's Llama-style block (RMSNorm, GQA with RoPE, SwiGLU, no biases)."""
    return ModelConfig(
        name="contract-llama",
        n_layers=p.get("layers", layers),
        d_model=p["hidden"],
        n_heads=p["heads_q"],
        n_kv_heads=p["heads_kv"],
        d_ff=p["ffn"],
        vocab_size=p.get("vocab", vocab),
    )


def _gemm(acc, eff, p):
    return kernels.gemm_breakdown(acc, eff, m=p["m"], n=p["n"], k=p["k"], dtype=p["dtype"])


def _grouped_gemm(acc, eff, p):
    return kernels.grouped_gemm_breakdown(acc, eff, groups=p["groups"], m=p["m"], n=p["n"],
                                          k=p["k"], dtype=p["dtype"])


def _attention(acc, eff, p):
    return kernels.attention_breakdown(
        acc,
        eff,
        batch=p["batch"],
        heads_q=p["heads_q"],
        heads_kv=p["heads_kv"],
        seq_q=p["seq_q"],
        seq_kv=p["seq_kv"],
        head_dim=p["head_dim"],
        causal=p["causal"],
        pass_=p["pass"],
        dtype=p["dtype"],
        window=p.get("window", 0),  # not a contract param: aiconfigurator's tables carry it
    )


def _elementwise(acc, eff, p, impl="eager"):
    return kernels.elementwise_breakdown(
        acc,
        eff,
        op=p["op"],
        tokens=p["tokens"],
        hidden=p["hidden"],
        pass_=p["pass"],
        dtype=p["dtype"],
        impl="eager",
    )


def _layer(acc, eff, p):
    """The eager (or compiled) decoder layer; for ``tp_layer``, one of ``tp`` ranks with its two
    all-reduces each way."""
    impl = "compiled" if p.get("compiled", False) else "eager"
    return config_breakdown("layer", acc, eff, contract_model(p), p, impl=impl)


def _train_step(acc, eff, p, stack):
    """The one-GPU case of the multi-GPU estimate (``whole_model.one_gpu_training``), with
    the peak memory a record measures: allocated bytes (``torch.cuda.max_memory_allocated``),
    not the allocator's fragmentation or the CUDA context."""
    bd = one_gpu_training(acc, eff, contract_model(p), stack, p).breakdown
    allocated = {k: v for k, v in bd.memory_bytes.items() if k not in NOT_ALLOCATED}
    return replace(bd, memory_bytes=allocated)


NOT_ALLOCATED = ("fragmentation", "cuda_context")


def _decode_step(acc, eff, p):
    return config_breakdown(
        "decode_step", acc, eff, contract_model(p), p, impl="eager", isolated=True
    )


def _collective(acc, eff, p):
    return kernels.collective_breakdown(
        acc, eff, op=p["op"], world=p["world"], bytes_per_rank=p["bytes"]
    )


def _tp_mlp(acc, eff, p):
    cfg = ModelConfig(
        name="contract-mlp",
        n_layers=1,
        d_model=p["hidden"],
        n_heads=1,
        n_kv_heads=1,
        d_ff=p["ffn"],
        vocab_size=1,
    )
    return step.tp_mlp_breakdown(
        acc,
        eff,
        cfg,
        tokens=p["tokens"],
        tp=p["tp"],
        pass_=p["pass"],
        dtype=p["dtype"],
        impl="eager",
    )


_PREDICTORS: dict[str, Callable[[Any, Efficiency, Mapping[str, Any]], Breakdown]] = {
    "gemm": _gemm,
    "grouped_gemm": _grouped_gemm,
    "attention": _attention,
    "elementwise": _elementwise,
    "layer": _layer,
    "decode_step": _decode_step,
    "collective": _collective,
    "tp_mlp": _tp_mlp,
    "tp_layer": _layer,
}


# the phase whose attention kernel a kind's prefill-shaped calls take (decode shapes take the
# stack's decode kernel whatever the kind)
_PHASE = {"train_step": "train", "decode_step": "decode", "model_train_step": "train",
          "model_decode_step": "decode", "prefill_step": "prefill"}


def record_stack(params: Mapping[str, Any]) -> Stack:
    """The stack a record's params name (``pytorch`` if none), with its kernel override."""
    stack = get_stack(params.get("stack", "pytorch"))
    if params.get("optimizer_impl") is not None:  # the AdamW a train_step ran (records.py)
        stack = replace(stack, optimizer=params["optimizer_impl"])
    kernel = params.get("attention_kernel")
    return with_overrides(stack, attention_kernel=kernel) if kernel is not None else stack


def record_timing(params: Mapping[str, Any]) -> str:
    timing = params.get("timing", "isolated")
    check_choice("timing", timing, TIMINGS)
    return timing


def _phase(kind: str, params: Mapping[str, Any]) -> str:
    if kind in _PHASE:
        return _PHASE[kind]
    return "train" if params.get("pass") == "fwd_bwd" else "prefill"


@expects(kind=str, device=str, params=dict, eff=("Efficiency", None), stack=("Stack", None),
         isolated_call_s=(dict, None))
def predict_breakdown(
    kind: str,
    device: str,
    params: Mapping[str, Any],
    *,
    eff: Efficiency | None = None,
    stack: Stack | None = None,
    isolated_call_s: Mapping[str, float] | None = None,
) -> Breakdown:
    """The predicted breakdown of one case of the record contract on ``device``, on the stack
    and in the timing its params name (``stack`` given: that one, overrides and all);
    ``isolated_call_s``: candidate values of ``stacks.kernels.ISOLATED_CALL_S`` (a fit's)."""
    check_choice("kind", kind, KINDS)
    check_params(params)
    acc = get_accelerator(device)
    stack = stack or record_stack(params)
    timing = record_timing(params)
    if params.get("attention_kernel") is not None:
        check_kernel(params["attention_kernel"], acc, field="params.attention_kernel")
    raw = eff or efficiency_for(acc.key)
    eff = stack_efficiency(stack, raw, acc, phase=_phase(kind, params))
    if timing == "device" and kind in DEVICE_TIMED:  # a profiler's kernel durations
        eff = device_efficiency(eff)
    try:
        if kind in _MODEL_KINDS:  # the same path as ``estimate ... --model``
            bd = _whole_model(kind, acc, raw, params, stack)
        elif kind == "train_step":  # the training estimate applies the stack itself
            bd = _train_step(acc, raw, params, stack)
        elif kind == "elementwise":
            bd = _elementwise(acc, eff, params, impl=stack.elementwise)
        else:
            bd = _PREDICTORS[kind](acc, eff, params)
    except KeyError as exc:
        raise GpuplanError(f"{kind}: missing parameter {exc.args[0]!r}") from None
    if timing == "isolated":  # the CPU's time to the first kernel (stacks.kernels)
        bd = with_isolated_call(bd, stack, kind, params, isolated_call_s)
    return device_time(bd) if timing == "device" else bd


def record_model(name: str, hf_config: Mapping[str, Any] | None = None) -> ModelConfig:
    """A whole-model record's model: the config it was built from where the record carries
    one (``params.hf_config``, read by ``workloads.hf_config``), else a preset, else the stack
    campaign's published config (``configs.MODELS``, ``family_configs.FAMILIES``)."""
    from gpuplan.validate.stack_campaign.configs import MODELS
    from gpuplan.validate.stack_campaign.family_configs import FAMILIES
    from gpuplan.workloads.hf_config import from_hf_config
    from gpuplan.workloads.presets import PRESETS, get_model

    if hf_config is not None:
        return from_hf_config(hf_config, name=name)
    if name in FAMILIES:
        return from_hf_config(FAMILIES[name]["hf_config"], name=name)
    if name in PRESETS or name not in MODELS:
        return get_model(name)
    return from_hf_config(MODELS[name]["hf_config"], name=name)


def kv_length_grows(cfg: ModelConfig, params: Mapping[str, Any]) -> bool:
    """Whether a campaign decode record's calls each see a new cached length: a dynamic cache
    of a sliding-window model below its window, which cannot be cropped back (transformers 5
    keeps no past to crop a sliding layer to: stack_campaign/hf.py), so each call adds a token.
    Every other dynamic cache is cropped to the context before each call; a full sliding cache
    keeps its window; a static cache's length is fixed."""
    return (params.get("kv_cache") == "dynamic" and bool(cfg.sliding_window)
            and params["context"] < cfg.sliding_window)


def _whole_model(kind: str, acc, raw: Efficiency, params: Mapping[str, Any], stack: Stack):
    """``model_breakdown`` of the record's model; training peak as allocated bytes."""
    from gpuplan.sim.estimate.whole_model import model_breakdown

    est_params = {k: v for k, v in params.items()
                  if k not in ("model", "stack", "attention_kernel", "timing", "hf_config",
                               "impl")}
    if kind == "prefill_step":
        # the kind is one forward with ``logits_to_keep=1`` (what ``generate`` asks for;
        # stack_campaign/hf.py): the LM head over each prompt's last position, whatever the
        # stack's default for a plain forward
        stack = replace(stack, logits="last")
    cfg = record_model(params["model"], params.get("hf_config"))
    if kind == "model_decode_step" and not kv_length_grows(cfg, params):
        # the campaign crops a dynamic cache back to the context before each call, so its
        # calls repeat one cached length: cuDNN's graph for it is built once, before the timed
        # calls (``HostModel.attention_plan_s``; stack_campaign/hf.py ``decode_case``)
        stack = replace(stack, host=replace(stack.host, attention_plan_s=0.0))
    bd = model_breakdown(_MODEL_KINDS[kind], acc, raw, cfg, est_params, stack=stack)
    if kind == "model_train_step":
        bd = replace(bd, memory_bytes={k: v for k, v in bd.memory_bytes.items()
                                       if k not in NOT_ALLOCATED})
    return bd


# kinds whose kernels take the busy-stream fixed costs in device timing (hwmodels.device_timing).
# GEMM is left out: with them the H200 profiler GEMMs score 6.7% -> 13.8% median (the sustained
# clock; 6.3% without it) and the imported A100/H100 ones 14.3/10.9% -> 15.9/16.4%.
DEVICE_TIMED = ("elementwise",)


def device_time(bd: Breakdown) -> Breakdown:
    """The kernels alone, as a profiler adds up their durations: no launch or host items."""
    return replace(bd, items=tuple(i for i in bd.items if i.category != "launch"))


def predict_record(record, *, eff: Efficiency | None = None) -> dict[str, float]:
    """The metrics a record measures, predicted: ``time_s`` and, where measured, ``peak_bytes``."""
    bd = predict_breakdown(record.kind, record.device, record.params, eff=eff)
    out = {"time_s": bd.total_s}
    if bd.peak_bytes is not None and record.kind in ("layer", "train_step", *_MODEL_KINDS):
        out["peak_bytes"] = bd.peak_bytes
    return out
