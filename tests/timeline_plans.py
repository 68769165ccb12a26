"""Synthetic step plans for the timeline engine: fixed times, no cost model, every feature the
engine plays (TP collectives after steps, a collective beside a step, sends, gradient buckets,
ZeRO gathers and reduce-scatters, tied embeddings), so engine results do not move when pricing
does. ``golden(case)`` is what the engine, the summary and the trace writer make of each."""

from __future__ import annotations

import hashlib
import json

from gpuplan.sim.estimate.breakdown import Item
from gpuplan.sim.runtime.timeline.block_steps import OTHER, BlockWork, Step
from gpuplan.sim.runtime.timeline.comm import Comm
from gpuplan.sim.runtime.timeline.work import Plan

CASES = {  # name -> (plan options, replicas simulated, straggler factors, jitter)
    "interleaved-zero1": (dict(p=4, v=2, m=4, schedule="interleaved", zero=1, overlap_dp=True,
                               overlap_pp=False), 3, {(1, 2): 1.25}, 0.05),
    "1f1b-fsdp": (dict(p=2, v=1, m=4, schedule="1f1b", zero=3, overlap_dp=True,
                       overlap_pp=True), 2, {(0, 1): 1.1}, 0.03),
    "gpipe-zero0-serial": (dict(p=3, v=1, m=3, schedule="gpipe", zero=0, overlap_dp=False,
                                overlap_pp=False), 2, {}, 0.0),
    "1f1b-zero2-serial": (dict(p=2, v=1, m=3, schedule="1f1b", zero=2, overlap_dp=False,
                               overlap_pp=False), 2, {(1, 0): 1.5}, 0.02),
    "1f1b-zero1-straggler": (dict(p=3, v=1, m=4, schedule="1f1b", zero=1, overlap_dp=True,
                                  overlap_pp=False), 4, {(2, 1): 1.2}, 0.0),
}  # fmt: skip


def _item(op: str, t: float, phase: str) -> Item:
    return Item(layer="model", category="gemm", op=op, phase=phase, time_s=t, flops=1e12 * t,
                bytes=1e9 * t, kernels=1, bound="compute")  # fmt: skip


def _block(block: int, kind: str) -> BlockWork:
    phase = "fwd" if kind == "F" else "bwd"
    scale = 1.0 if kind == "F" else 2.0
    tp = Comm(f"tp all_reduce ({phase})", "tp", 2e-5, 3e-4 * scale, 0.0)
    ep = Comm("ep all_to_all", "ep", 1e-5, 1e-4, 2e-4 * scale)
    cp = Comm("cp ring exchange", "cp", 5e-6, 2e-4 * scale, 1e-4)
    a, b = 1e-3 * scale * (1 + 0.1 * block), 7e-4 * scale
    steps = (
        Step(f"L{block} attn", phase, block, (_item("qkv", a / 2, phase), _item("core", a / 2, phase)),
             a, overlap=(cp,), after=(tp,)),
        Step(f"L{block} mlp", phase, block, (_item("mlp", b, phase),), b, after=(ep, tp)),
    )  # fmt: skip
    return BlockWork(block, steps, 1.5e7 * (1 + block % 3))


def plan(*, p: int, v: int, m: int, schedule: str, zero: int, overlap_dp: bool,
         overlap_pp: bool) -> Plan:  # fmt: skip
    """Two blocks per virtual stage; a gradient accumulation step closes each backward."""
    tasks = {}
    for s in range(p):
        for c in range(v):
            vs = c * p + s
            blocks = (2 * vs, 2 * vs + 1)
            acc = Step("gradient accumulation", "bwd", OTHER, (_item("acc", 1e-4, "bwd"),), 1e-4)
            tasks[("F", s, c)] = tuple(_block(b, "F") for b in blocks)
            tasks[("B", s, c)] = tuple(_block(b, "B") for b in reversed(blocks)) + (
                BlockWork(OTHER, (acc,), 0.0),
            )
    group = 4

    def reduce(params: float) -> Comm | None:
        op = "all_reduce" if zero == 0 else "reduce_scatter"
        return Comm(f"dp grad {op}", "dp", 3e-5, params * 1e-11, params * 4e-11, "dp")

    def gather(params: float) -> Comm | None:
        return Comm("dp param all_gather", "dp-gather", 2e-5, params * 0.5e-11 / group,
                    params * 3e-11 / group, "dp")  # fmt: skip

    optimizer = tuple(
        Step("optimizer step", "optimizer", OTHER, (_item("adamw", 2e-3 + 1e-4 * s, "optimizer"),),
             2e-3 + 1e-4 * s)
        for s in range(p)
    )  # fmt: skip
    return Plan(
        p=p, v=v, m=m, dp=group, schedule=schedule, zero=zero, overlap_dp=overlap_dp,
        overlap_pp=overlap_pp, recompute="none", tasks=tasks,
        send=Comm("pp send", "pp", 1e-5, 2e-4, 0.0) if p > 1 else None, optimizer=optimizer,
        embedding_sync=Comm("tied-embedding all_reduce", "dp", 1e-5, 0.0, 5e-4),
        reduce=reduce, gather=gather, bucket_params=4e7, n_blocks=2 * p * v,
    )  # fmt: skip


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def golden_of(tl) -> dict:
    """What a timeline must reproduce: step time, every GPU's summary row, the trace's bytes."""
    from gpuplan.sim.runtime.timeline.trace import chrome_trace

    summary = tl.summary().drop(columns=["bubble_fraction"]).to_dict(orient="records")
    out = {"step_time_s": tl.step_time_s, "summary": summary}
    for detail in ("kernel", "step"):
        doc = chrome_trace(tl, detail=detail)
        out[f"trace_{detail}_sha256"] = digest(json.dumps(doc, separators=(",", ":")))
        events = sorted(json.dumps(e, sort_keys=True) for e in doc["traceEvents"])
        out[f"trace_{detail}_events_sha256"] = digest("\n".join(events))
    return out
