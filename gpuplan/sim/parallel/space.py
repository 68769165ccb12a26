"""The space a strategy search covers: every valid layout of a model on N GPUs, as numpy arrays.

Enumeration: the valid degree combinations (tp, cp, pp, dp, ep), then each micro-batch size and
schedule (GPipe, 1F1B, interleaved with every valid virtual-stage count) as base rows, then the
product with recomputation, ZeRO stage, sequence parallelism and precision.

Pipeline stages: an even split when pp divides the layers, else the auto rule of
``strategy.auto_pp_layers`` (the embedding and the loss count as a block: Llama 3 405B's split);
interleaving with every virtual-stage count that split allows.

Pruning rules, named: context parallelism only in powers of two with chunks of at least 256
tokens (and only with the flash kernel); expert parallelism only inside the data-parallel group;
sequence parallelism only with tp > 1 (and as the space's ``sp`` rule says: searched, on
exactly where tp > 1 as the stack's framework runs it, or off); GPipe, 1F1B and interleaved are distinct only when pp > 1;
selective recomputation is left out with a flash kernel, where it keeps and recomputes exactly
what no recomputation does. Overlap options, the attention kernel and the state precision are
assumptions the caller fixes, not searched.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from gpuplan.errors import GpuplanError, check_choice
from gpuplan.sim.parallel.degrees import divisors, valid_tp, valid_virtual_stages
from gpuplan.sim.parallel.fp8 import PRECISION_CODES, check_precision, supports_precision
from gpuplan.sim.parallel.memory import RECOMPUTE_CODES, SCHEDULE_CODES
from gpuplan.sim.parallel.model_facts import model_facts
from gpuplan.sim.parallel.stage import StageKinds, stack_kinds, stage_kinds
from gpuplan.sim.parallel.strategy import Strategy, auto_pp_layers

SCHEDULE_NAMES = {v: k for k, v in SCHEDULE_CODES.items()}
RECOMPUTE_NAMES = {v: k for k, v in RECOMPUTE_CODES.items()}
MIN_CP_TOKENS = 256
SP_RULES = ("any", "with-tp", "off")


@dataclass(frozen=True, slots=True, kw_only=True)
class SearchSpace:
    """The choices searched besides the degrees (each a tuple of allowed values)."""

    recompute: tuple[str, ...] = ("none", "selective", "full")
    zero: tuple[int, ...] = (0, 1, 2, 3)
    precision: tuple[str, ...] = ("bf16",)  # fp8 only when asked for
    schedules: tuple[str, ...] = ("gpipe", "1f1b", "interleaved")
    max_cp: int = 16
    attention: str = "flash"
    state_precision: str = "bf16-mixed-megatron"
    overlap_dp: bool = True
    overlap_tp: bool = False
    overlap_pp: bool = False
    overlap_pp_interleaved: bool = False  # pipeline sends overlapped under interleaving only
    overlap_ep: bool = False
    sp: str = "any"  # sequence parallelism: "any" (searched), "with-tp" (on wherever tp > 1), "off"
    load: float = 1.0
    stack: str = "megatron-te"  # the software stack every layout runs on (sim.stacks)

    def __post_init__(self) -> None:
        check_choice("sp", self.sp, SP_RULES)


def _degree_rows(cfg, n: int, gb: int, seq: int, space: SearchSpace) -> list[tuple]:
    """(tp, cp, pp, dp, ep) combinations that tile ``n`` GPUs."""
    cps = [
        c
        for c in (2**i for i in range(8))
        if c <= space.max_cp
        and seq % c == 0
        and (c == 1 or (seq // c >= MIN_CP_TOKENS and space.attention == "flash"))
    ]
    rows = []
    pps = [p for p in divisors(n) if search_split(cfg, p) is not None]
    for tp, cp, pp in itertools.product(valid_tp(cfg, n), cps, pps):
        if n % (tp * cp * pp):
            continue
        dp = n // (tp * cp * pp)
        if gb % dp:
            continue
        eps = [e for e in divisors(cfg.n_experts) if dp % e == 0] if cfg.is_moe else [1]
        rows += [(tp, cp, pp, dp, ep) for ep in eps]
    return rows


def _base_rows(cfg, n: int, gb: int, seq: int, space: SearchSpace) -> np.ndarray:
    """Degrees x micro-batch x schedule rows: tp, cp, pp, dp, ep, mb, m, sched, chunks."""
    out = []
    sizes: dict[int, list[int]] = {}  # micro-batch sizes of each dp
    scheds: dict[tuple[int, int], list[tuple[int, int]]] = {}  # schedules of each (pp, m)
    for tp, cp, pp, dp, ep in _degree_rows(cfg, n, gb, seq, space):
        if dp not in sizes:
            sizes[dp] = divisors(gb // dp)
        for mb in sizes[dp]:
            m = gb // (mb * dp)
            if (pp, m) not in scheds:
                scheds[(pp, m)] = [(SCHEDULE_CODES[sched], v)
                                   for sched, v in _schedules(cfg, pp, m, space)]  # fmt: skip
            out += [(tp, cp, pp, dp, ep, mb, m, code, v) for code, v in scheds[(pp, m)]]
    return np.array(out, dtype=np.int64).reshape(-1, 9)


def _schedules(cfg, pp: int, m: int, space: SearchSpace) -> list[tuple[str, int]]:
    if pp == 1:
        return [("1f1b", 1)]
    out = [(s, 1) for s in ("gpipe", "1f1b") if s in space.schedules]
    if "interleaved" in space.schedules and m % pp == 0:
        out += [("interleaved", v) for v in valid_virtual_stages(search_split(cfg, pp))]
    return out


def search_split(cfg, pp: int) -> tuple[int, ...] | None:
    """Blocks per stage the search gives ``pp`` stages: even, else the auto rule, else None."""
    if pp > cfg.n_layers:
        return None
    if cfg.n_layers % pp == 0:
        return (cfg.n_layers // pp,) * pp
    try:
        return auto_pp_layers(cfg.n_layers, pp)
    except GpuplanError:
        return None


def search_layouts(cfg, pps) -> StageKinds:
    """Stage kinds of every pipeline degree in ``pps``, as a (K, max(pps) + 1) table whose
    column pp holds the split of pp stages (other columns: no stage)."""
    flags = model_facts(cfg).moe_flags
    top = int(max(pps))
    used = {int(p) for p in pps}
    none = StageKinds(*(np.zeros(1, dtype=int) for _ in StageKinds.__slots__))
    return stack_kinds(
        [stage_kinds(flags, search_split(cfg, p)) if p in used else none for p in range(top + 1)]
    )


def split_label(cfg, pp: int) -> str:
    """The search frame's ``pp_layers``: empty for an even split, else the counts."""
    split = search_split(cfg, pp)
    return "" if cfg.n_layers % pp == 0 else ",".join(str(n) for n in split)


def enumerate_space(cfg, n: int, gb: int, seq: int, acc, space: SearchSpace) -> dict:
    """Every strategy as arrays (``evaluate``'s fields), base rows x categorical choices."""
    base = _base_rows(cfg, n, gb, seq, space)
    recompute = [
        r for r in space.recompute if not (r == "selective" and space.attention == "flash")
    ]
    precisions = [p for p in space.precision if supports_precision(acc, p)]
    if not precisions:
        check_precision(acc, space.precision[0])  # one line naming what the device lacks
    cats = np.array(
        list(
            itertools.product(
                [RECOMPUTE_CODES[r] for r in recompute or ["none"]],
                space.zero,
                (0, 1),
                [PRECISION_CODES.index(p) for p in precisions],
            )
        ),
        dtype=np.int64,
    )
    rows = np.repeat(base, len(cats), axis=0)
    cat = np.tile(cats, (len(base), 1))
    keep = _sp_kept(cat[:, 2], rows[:, 0], space.sp)
    rows, cat = rows[keep], cat[keep]
    names = ("tp", "cp", "pp", "dp", "ep", "mb", "m", "sched", "chunks")
    s = {k: rows[:, i] for i, k in enumerate(names)}
    s |= {
        "rc": cat[:, 0],
        "zero": cat[:, 1],
        "sp": cat[:, 2].astype(bool),
        "fp8": cat[:, 3].astype(np.int64),  # the GEMM recipe's code (sim.parallel.fp8)
    }
    ones = np.ones(len(rows), dtype=bool)
    s |= {
        "overlap_dp": ones & space.overlap_dp,
        "overlap_tp": ones & space.overlap_tp,
        "overlap_pp": ones & overlap_pp_of(space, s["sched"]),
        "overlap_ep": ones & space.overlap_ep,
        "fused_accum": ones,
        "load": np.full(len(rows), space.load),
    }
    return s


def _sp_kept(sp, tp, rule: str):
    """Which rows the SP rule keeps: SP only with tp > 1; "with-tp" exactly there; "off" never."""
    if rule == "with-tp":
        return (sp == 1) == (tp > 1)
    return (sp == 0) | ((tp > 1) & (rule == "any"))


def overlap_pp_of(space: SearchSpace, sched):
    """Whether pipeline sends overlap compute on rows of schedule code ``sched``: always with
    ``overlap_pp``, under the interleaved schedule with ``overlap_pp_interleaved``."""
    interleaved = np.asarray(sched) == SCHEDULE_CODES["interleaved"]
    return np.asarray(space.overlap_pp) | (space.overlap_pp_interleaved & interleaved)


def row_strategy(row, *, global_batch: int, space: SearchSpace) -> Strategy:
    """The ``Strategy`` of one row of a search frame (to estimate it in full)."""
    sched = row["schedule"]
    return Strategy(
        tp=int(row["tp"]),
        pp=int(row["pp"]),
        dp=int(row["dp"]),
        cp=int(row["cp"]),
        ep=int(row["ep"]),
        sp=bool(row["sp"]),
        zero=int(row["zero"]),
        micro_batch=int(row["micro_batch"]),
        global_batch=global_batch,
        schedule=sched,
        virtual_stages=int(row["virtual_stages"]) if sched == "interleaved" else 1,
        recompute=row["recompute"],
        precision=row["precision"],
        state_precision=space.state_precision,
        attention=space.attention,
        overlap_dp=space.overlap_dp,
        overlap_tp=space.overlap_tp,
        overlap_pp=bool(overlap_pp_of(space, SCHEDULE_CODES[sched])),
        overlap_ep=space.overlap_ep,
        expert_imbalance=space.load,
        pp_layers=tuple(int(n) for n in str(row["pp_layers"]).split(",")) if row.get(
            "pp_layers") else None,
    )  # fmt: skip
