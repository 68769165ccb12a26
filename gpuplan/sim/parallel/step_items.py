"""A training step's breakdown items: the closed form's terms itemized, the slowest pipeline
stage's compute and recompute by kernel (all micro-batches), then exposed communication, the
bubble, host and cast overheads, gradient accumulation and the optimizer, summing to the step.
"""

from __future__ import annotations

from gpuplan.sim.estimate.breakdown import Breakdown, Item
from gpuplan.sim.parallel.kernel_costs import MicroBatchCosts
from gpuplan.sim.parallel.kernel_lists import CORE
from gpuplan.sim.parallel.stage import StageKinds, sac_items
from gpuplan.sim.parallel.step_time import TIME_TERMS, step_total
from gpuplan.sim.parallel.strategy import Strategy

COMM_ITEMS = {  # term -> (breakdown layer, op name)
    "tp_comm": ("parallel", "tp/sp collectives"),
    "cp_comm": ("parallel", "cp ring-attention exchange"),
    "ep_comm": ("parallel", "ep all_to_all"),
    "pp_comm": ("parallel", "pp send/recv"),
    "zero_comm": ("parallel", "zero gathers/reduce-scatters"),
    "dp_comm": ("parallel", "dp gradient reduction"),
    "param_allgather": ("parallel", "dp parameter all_gather"),
    "embedding_sync": ("parallel", "tied-embedding all_reduce"),
}



def step_items(mbc: MicroBatchCosts, kinds: StageKinds, st: Strategy, terms: dict,
               selective: str = "attention-core") -> list[Item]:  # fmt: skip
    """The items of one step's breakdown, summing to the closed form's step (``check_total``):
    the slowest stage's compute and recompute, then communication, the bubble, host and cast
    overheads, gradient accumulation and the optimizer."""
    items = _stage_items(mbc, kinds, st, int(terms["slowest_kind"]), selective)
    items += _comm_items(terms)
    items += _bubble_items(terms, st)
    items += _overhead_items(terms, st)
    items.append(
        Item(
            layer="model",
            category="adamw",
            op="optimizer step",
            phase="optimizer",
            time_s=float(terms["optimizer"]),
            bytes=float(terms.get("optimizer_bytes", 0.0)),
            bound="memory",
            kernels=1,
        )
    )
    return items


def _comm_items(terms: dict) -> list[Item]:
    """The exposed communication of each ``COMM_ITEMS`` term that takes any time."""
    items = []
    for term, (layer, op) in COMM_ITEMS.items():
        value = float(terms[term])
        if value > 0:
            items.append(
                Item(
                    layer=layer,
                    category="communication",
                    op=op,
                    phase="step",
                    time_s=value,
                    bound="bandwidth",
                )
            )
    return items


def _bubble_items(terms: dict, st: Strategy) -> list[Item]:
    """The pipeline bubble, named by its schedule, stages, chunks and micro-batches."""
    bubble = float(terms["bubble"])
    if bubble <= 0:
        return []
    name = f"{st.schedule} bubble (p={st.pp}, v={st.chunks}, m={st.micro_batches})"
    return [
        Item(
            layer="runtime",
            category="bubble",
            op=name,
            phase="step",
            time_s=bubble,
            bound="pipeline",
        )
    ]


def _overhead_items(terms: dict, st: Strategy) -> list[Item]:
    """The host's issue time not hidden, autocast's weight casts and a separate gradient
    accumulation, each where it takes any time."""
    items = []
    for term, layer, category, op, nbytes in (
        ("host_overhead", "runtime", "launch", "host issue time not hidden", None),
        ("weight_casts", "compile", "copy", "autocast weight and gradient casts", "cast_bytes"),
    ):
        value = float(terms[term])
        if value > 0:
            items.append(Item(layer=layer, category=category, op=op, phase="step", time_s=value,
                              bytes=float(terms.get(nbytes, 0.0)) if nbytes else 0.0,
                              bound="launch" if category == "launch" else "memory"))  # fmt: skip
    accumulate = float(terms["grad_accumulation"])
    if accumulate > 0:
        items.append(
            Item(
                layer="compile",
                category="elementwise",
                op="gradient accumulation",
                phase="bwd",
                time_s=accumulate,
                bound="memory",
                kernels=st.micro_batches,
            )
        )
    return items


def _scaled(items, factor: float, *, phase: str | None = None, layer: str | None = None):
    return [
        Item(
            layer=layer or i.layer,
            category=i.category,
            op=i.op,
            phase=phase or i.phase,
            time_s=i.time_s * factor,
            flops=i.flops * factor,
            bytes=i.bytes * factor,
            kernels=int(round(i.kernels * factor)),
            bound=i.bound,
        )
        for i in items
        if factor
    ]


def _stage_items(mbc: MicroBatchCosts, kinds: StageKinds, st: Strategy, slow: int,
                 selective: str = "attention-core") -> list[Item]:  # fmt: skip
    """Compute and recompute items of the slowest stage over all micro-batches."""
    layers, moe = int(kinds.layers[slow]), int(kinds.moe[slow])
    m = st.micro_batches
    groups = [(mbc.dense, layers - moe), (mbc.moe, moe)]
    out: list[Item] = []
    for cost, count in groups:
        if cost is None or not count:
            continue
        out += _scaled(cost.fwd + cost.bwd, m * count)
        if st.recompute == "full":
            out += _scaled(cost.fwd, m * count, phase="recompute", layer="compile")
        elif st.recompute == "selective" and selective == "op-sac":
            for share in sorted({f for _, f in sac_items(cost)}):
                again = [i for i, f in sac_items(cost) if f == share]
                out += _scaled(again, m * count * share, phase="recompute", layer="compile")
        elif st.recompute == "selective":
            core = [i for i in cost.fwd if i.op.startswith(CORE)]
            out += _scaled(core, m * count, phase="recompute", layer="compile")
    ends = [mbc.head] * bool(kinds.head[slow]) + [mbc.embedding] * bool(kinds.emb[slow])
    for cost in ends:
        out += _scaled(cost.fwd + cost.bwd, m)
    return out



def check_total(bd: Breakdown, terms: dict) -> None:
    """The items are the closed form's terms, itemized: they must add up to the same step."""
    total = float(step_total(terms))
    if abs(bd.total_s - total) > 1e-9 * max(total, 1e-12):
        parts = {k: float(terms[k]) for k in TIME_TERMS}
        raise AssertionError(f"breakdown {bd.total_s} != closed form {total}: {parts}")

