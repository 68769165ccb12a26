"""From one micro-batch's priced kernels to a pipeline stage's compute inputs of the step model.

``shape_times`` reduces a ``MicroBatchCosts`` to the few numbers the closed forms need;
``stage_compute`` combines them with the stage layout (numpy arrays or numbers).

Stages come grouped into kinds (``StageKinds``): stages with the same blocks, MoE blocks and ends
(the embedding on the first stage, the LM head and loss on the last; both when pp == 1) cost the
same, so a layout of any number of stages is a few kinds, each with its count and the index of its
earliest stage (which holds the most micro-batches in flight). An even split is at most three
kinds (first, middle, last); Llama 3's uneven split the same three; an explicit list up to pp.
Arrays of kinds have the kind on axis 0: (K,) for one strategy, (K, N) for N at once.
Recomputation (Korthikanti et al. 2022): full re-runs each block's forward in the backward;
selective re-runs the attention core, which a flash kernel never stores, so it costs nothing
extra there and re-runs QK^T, softmax, dropout and PV for the unfused attention.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuplan.sim.parallel.kernel_costs import Cost, MicroBatchCosts
from gpuplan.sim.parallel.kernel_lists import CORE

TIME_FIELDS = (
    "dense_fwd",
    "dense_bwd",
    "moe_fwd",
    "moe_bwd",
    "dense_core",
    "moe_core",
    "head_fwd",
    "head_bwd",
    "emb_fwd",
    "emb_bwd",
    "gemm_layer",
    "attn_layer",
    "host_dense",
    "host_moe",
    "host_head",
    "host_emb",
    "dense_sac",
    "moe_sac",
)
# op-level selective checkpointing (torchtitan's ``_save_list``: every other matmul is saved, so
# half the matmuls re-run, with every op that is neither a matmul nor the attention kernel)
SAC_GEMM_FRACTION = 0.5


def _or_zero(cost: Cost | None, attr: str, **kw) -> float:
    if cost is None:
        return 0.0
    value = getattr(cost, attr)
    return value(**kw) if callable(value) else value


def shape_times(mbc: MicroBatchCosts) -> dict[str, float]:
    """The scalar times (seconds, one GPU, one micro-batch) of a shape's kernels: the sums of
    ``Cost``'s accessors and ``_sac_s``, each over the same items in the same order, taken in
    one pass per block (a search calls this once per shape; ``tests/test_op_memo.py``)."""
    layer = mbc.dense or mbc.moe
    dense, moe, lay = _block_sums(mbc.dense), _block_sums(mbc.moe), _block_sums(layer)
    return {
        "dense_fwd": dense["fwd"],
        "dense_bwd": dense["bwd"],
        "moe_fwd": moe["fwd"],
        "moe_bwd": moe["bwd"],
        "dense_core": dense["fwd_core"],
        "moe_core": moe["fwd_core"],
        "head_fwd": mbc.head.fwd_s,
        "head_bwd": mbc.head.bwd_s,
        "emb_fwd": mbc.embedding.fwd_s,
        "emb_bwd": mbc.embedding.bwd_s,
        "gemm_layer": lay["gemm"],
        "attn_layer": lay["attention"] + lay["core"],
        "host_dense": _or_zero(mbc.dense, "host_s"),
        "host_moe": _or_zero(mbc.moe, "host_s"),
        "host_head": mbc.head.host_s,
        "host_emb": mbc.embedding.host_s,
        "dense_sac": dense["sac"],
        "moe_sac": moe["sac"],
    }


_NO_SUMS = {k: 0.0 for k in ("fwd", "bwd", "fwd_core", "gemm", "attention", "core", "sac")}


def _block_sums(cost: Cost | None) -> dict[str, float]:
    """``fwd_s``, ``bwd_s``, ``fwd_time_s(prefix=CORE)``, ``time_s(category=gemm)``,
    ``time_s(category=attention)``, ``time_s(prefix=CORE)`` and ``_sac_s`` of ``cost``,
    each accumulated in its accessor's order (so the same floats)."""
    if cost is None:
        return _NO_SUMS
    fwd = bwd = fwd_core = gemm = attention = core = sac = 0
    for i in cost.fwd:
        t, cat = i.time_s, i.category
        fwd += t
        if i.op.startswith(CORE):
            fwd_core += t
            core += t
        if cat == "gemm":
            gemm += t
            sac += t * SAC_GEMM_FRACTION
        elif cat == "attention":
            attention += t
        elif cat != "view":
            sac += t * 1.0
    for i in cost.bwd:
        t, cat = i.time_s, i.category
        bwd += t
        if i.op.startswith(CORE):
            core += t
        if cat == "gemm":
            gemm += t
        elif cat == "attention":
            attention += t
    return {"fwd": fwd, "bwd": bwd, "fwd_core": fwd_core, "gemm": gemm,
            "attention": attention, "core": core, "sac": sac}  # fmt: skip


def sac_items(cost: Cost):
    """(item, share re-run) of a block's forward under op-level selective checkpointing."""
    out = []
    for i in cost.fwd:
        if i.category == "gemm":
            out.append((i, SAC_GEMM_FRACTION))
        elif i.category not in ("attention", "view"):
            out.append((i, 1.0))
    return out


def _sac_s(cost: Cost | None) -> float:
    return 0.0 if cost is None else sum(i.time_s * share for i, share in sac_items(cost))


@dataclass(frozen=True, slots=True)
class StageKinds:
    """Pipeline stages grouped by what they run; every field an array with the kind on axis 0."""

    layers: np.ndarray  # blocks on a stage of this kind
    moe: np.ndarray  # of which MoE blocks
    emb: np.ndarray  # holds the embedding (the first stage)
    head: np.ndarray  # holds the LM head and the loss (the last stage)
    count: np.ndarray  # stages of this kind (0: padding, no such stage)
    index: np.ndarray  # the earliest stage of this kind (0 = first)

    def take(self, columns) -> StageKinds:
        """The kinds of ``columns`` of a (K, U) table: (K, len(columns))."""
        return StageKinds(*(getattr(self, f)[:, columns] for f in StageKinds.__slots__))


def stage_kinds(moe_flags: tuple[bool, ...], counts: tuple[int, ...]) -> StageKinds:
    """The kinds of the stages holding ``counts`` blocks each, in order (one pipeline)."""
    groups: dict[tuple, list[int]] = {}
    start = 0
    for i, n in enumerate(counts):
        key = (n, sum(moe_flags[start : start + n]), i == 0, i == len(counts) - 1)
        groups.setdefault(key, []).append(i)
        start += n
    rows = [(*key, len(idx), idx[0]) for key, idx in groups.items()]
    cols = list(zip(*rows, strict=True))
    return StageKinds(*(np.asarray(c) for c in cols))


def stack_kinds(kinds: list[StageKinds]) -> StageKinds:
    """Several pipelines' kinds as one (K, U) table, padded with count-0 kinds."""
    k = max(len(x.count) for x in kinds)

    def pad(a):
        return np.concatenate([a, np.zeros(k - len(a), dtype=a.dtype)])

    return StageKinds(
        *(np.stack([pad(getattr(x, f)) for x in kinds], axis=1) for f in StageKinds.__slots__)
    )


def end_is_head(t) -> np.ndarray:
    """Whether the LM-head stage (not the embedding stage) is the heavier end."""
    return (t["head_fwd"] + t["head_bwd"]) >= (t["emb_fwd"] + t["emb_bwd"])


def stage_compute(t, kinds: StageKinds, *, rc, selective: str = "attention-core") -> dict:
    """Per-micro-batch compute of each kind of stage: its blocks and its ends (K, ...);
    ``selective``: what recompute=selective re-runs (the attention core, or op-level SAC)."""
    moe = kinds.moe
    dense = kinds.layers - moe
    blk_fwd = dense * t["dense_fwd"] + moe * t["moe_fwd"]
    blk_bwd = dense * t["dense_bwd"] + moe * t["moe_bwd"]
    if selective == "op-sac":
        core = dense * t["dense_sac"] + moe * t["moe_sac"]
    else:
        core = dense * t["dense_core"] + moe * t["moe_core"]
    recompute = np.where(rc == 2, blk_fwd, np.where(rc == 1, core, 0.0))
    stage_fwd = blk_fwd + kinds.emb * t["emb_fwd"] + kinds.head * t["head_fwd"]
    stage_bwd = blk_bwd + kinds.emb * t["emb_bwd"] + kinds.head * t["head_bwd"]
    # the CPU time of issuing the stage's calls (step_time shows what the GPU does not cover)
    host = (
        dense * t["host_dense"] + moe * t["host_moe"]
        + kinds.emb * t["host_emb"] + kinds.head * t["host_head"]
    )  # fmt: skip
    return {
        "stage_fwd": stage_fwd,
        "stage_bwd": stage_bwd,
        "host": host,
        "recompute": recompute,
        "gemm_layer": t["gemm_layer"],
        "attn_layer": t["attn_layer"],
        "moe_layer": t["moe_fwd"] + t["moe_bwd"],
    }
