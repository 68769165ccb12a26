"""Predict measured pipeline steps (``validate/pipeline_bench.py`` records) with the timeline.

A ``pipeline_step`` record is a ``torch.distributed.pipelining`` step of the contract's
Llama-style model over ``stages`` GPUs of one host (one stage each), eager PyTorch, bf16 weights,
no optimizer. The prediction plays the same schedule on the timeline with:

- kernels as eager PyTorch runs them (``impl="eager"``: elementwise ops in their ATen pieces,
  queued fixed costs, the CPU's issue time where it is not hidden);
- the blocks split evenly over the stages; stage 0 also runs the embedding, the last stage the
  final norm, the LM head and the cross-entropy on fp32-upcast logits;
- sends on NCCL's own stream (``overlap_pp``): the sender goes on, the receiver waits for the
  data; the GPUs of one host over NVLink (the accelerator's ``dgx`` preset);
- gradients accumulated by autograd over the micro-batches (an unfused add per micro-batch),
  then scaled by 1 / micro-batches (``scale_grads``, one read and write of every gradient);
  no optimizer and no data parallelism.

The bubble is defined as the measurement defines it (``pipeline_bench``): the step's time beyond
``micro_batches`` times the slowest stage's forward and backward of one micro-batch alone, here
the plan's per-stage work of one micro-batch (kernels and host time, no sends).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from gpuplan.errors import GpuplanError
from gpuplan.hwmodels.accelerators import get_accelerator
from gpuplan.hwmodels.efficiency import efficiency_for
from gpuplan.sim.estimate.breakdown import Item
from gpuplan.sim.parallel.strategy import Strategy, validate
from gpuplan.sim.parallel.topology import cluster_for
from gpuplan.sim.runtime.timeline.engine import Engine
from gpuplan.sim.runtime.timeline.work import OTHER, Step, build_plan
from gpuplan.validate.record_prediction import contract_model

KIND = "pipeline_step"
PARAMS = ("hidden", "heads_q", "heads_kv", "ffn", "layers", "vocab", "seq", "micro_batch",
          "micro_batches", "schedule", "stages")  # fmt: skip
SCALE_BYTES_PER_PARAM = 4  # read and write a bf16 gradient


def _scale_step(params: float, acc, eff) -> Step:
    t = params * SCALE_BYTES_PER_PARAM / (acc.hbm_bytes_per_s * eff.elementwise_fraction("mul"))
    t += eff.kernel_overhead_s
    item = Item(layer="runtime", category="elementwise", op="gradient scaling (1/m)",
                phase="optimizer", time_s=t, kernels=1, bound="memory")  # fmt: skip
    return Step("gradient scaling", "optimizer", OTHER, (item,), t)


def pipeline_strategy(p: Mapping[str, Any]) -> Strategy:
    """The strategy a record ran: ``stages`` pipeline stages, nothing else parallel."""
    return Strategy(
        pp=p["stages"], micro_batch=p["micro_batch"],
        global_batch=p["micro_batch"] * p["micro_batches"], schedule=p["schedule"],
        state_precision="bf16", fused_grad_accumulation=False, overlap_pp=True,
    )  # fmt: skip


def predict_pipeline_step(p: Mapping[str, Any], device: str = "h200", *, eff=None) -> float:
    """Predicted ``time_s`` of one ``pipeline_step`` record's step."""
    return predict_pipeline(p, device, eff=eff)["time_s"]


def predict_pipeline(p: Mapping[str, Any], device: str = "h200", *, eff=None) -> dict:
    """Predicted step ``time_s``, each stage's micro-batch alone (``stage_fwd_bwd_s``), and the
    bubble (``bubble_s``, ``bubble_fraction``) of one ``pipeline_step`` record."""
    missing = [k for k in PARAMS if k not in p]
    if missing:
        raise GpuplanError(f"{KIND}: missing parameter {missing[0]!r}")
    acc = get_accelerator(device)
    eff = eff or efficiency_for(acc.key)
    cfg = contract_model(p)
    st = pipeline_strategy(p)
    validate(st, cfg, st.world, p["seq"])
    cluster = cluster_for(acc.key)
    plan = build_plan(cfg, st, cluster=cluster, seq=p["seq"], eff=eff, acc=acc, impl="eager")
    scale = tuple(_scale_step(sum(v for _b, v in plan.blocks(s)), acc, eff) for s in range(st.pp))
    engine = Engine(replace(plan, optimizer=scale), replicas=[0], factors={}, jitter=0.0, seed=0)
    engine.run()
    step_s = max(engine.ends.values())
    stage_s = [stage_micro_batch_s(plan, s) for s in range(st.pp)]
    bubble_s = step_s - p["micro_batches"] * max(stage_s)
    return {"time_s": step_s, "stage_fwd_bwd_s": stage_s, "bubble_s": bubble_s,
            "bubble_fraction": bubble_s / step_s}  # fmt: skip


def stage_micro_batch_s(plan, stage: int) -> float:
    """Forward and backward of one micro-batch on ``stage`` (every chunk), without sends."""
    return sum(
        step.compute_s
        for kind in ("F", "B")
        for c in range(plan.v)
        for bw in plan.tasks[(kind, stage, c)]
        for step in bw.steps
    )


def pipeline_errors(records: list[dict]):
    """One row per record: the case, measured and predicted seconds, the error in percent."""
    import pandas as pd

    rows = []
    for k, r in enumerate(records, 1):
        if r.get("kind") != KIND:
            continue
        try:
            p, measured = r["params"], float(r["measured"]["time_s"])
        except (KeyError, TypeError, ValueError):
            raise GpuplanError(f"record {k}: needs params and measured.time_s") from None
        predicted = predict_pipeline(p, r.get("device", "h200"))
        stats = r.get("stats") if isinstance(r.get("stats"), dict) else {}
        rows.append({
            "stages": p["stages"], "hidden": p["hidden"], "layers": p["layers"],
            "vocab": p["vocab"], "seq": p["seq"], "micro_batch": p["micro_batch"],
            "schedule": p["schedule"], "micro_batches": p["micro_batches"],
            "measured_s": measured, "predicted_s": predicted["time_s"],
            "error_pct": 100 * (predicted["time_s"] - measured) / measured,
            "measured_bubble": stats.get("bubble_fraction", float("nan")),
            "predicted_bubble": predicted["bubble_fraction"],
        })  # fmt: skip
    return pd.DataFrame(rows)
