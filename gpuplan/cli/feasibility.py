"""Feasibility first: a plan that cannot run is never priced as if it could.

``train`` and ``estimate`` check what they priced against the device's memory before they print
a figure. A plan that does not fit raises ``Infeasible`` (exit 1, one line: what does not fit and
the nearest change that does), unless ``--allow-infeasible`` asks for the what-if, whose every
printed line then starts with ``WHAT_IF``.

The nearest change for a training layout is the second layer of ``gpuplan diagnose``: the
fastest layout ``search`` finds on the same GPUs and global batch (``sim.parallel.search``, every
layout the stack runs); where none fits there, the fewest GPUs (whole nodes, doubling) on which
one does.
"""

from __future__ import annotations

import argparse

from gpuplan.errors import GpuplanError, Infeasible
from gpuplan.tables import format_value

WHAT_IF = "[WHAT-IF: does not fit] "
# GPU counts tried beyond the plan's (``_next_count``): a 1-GPU plan on 8-GPU nodes tries up to
# 8 x 2**7 = 1,024 GPUs, a plan of whole nodes up to 2**8 = 256 times its own
MAX_DOUBLINGS = 8


def add_allow_infeasible(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--allow-infeasible", action="store_true",
        help="price a plan that does not fit as a what-if (every printed line says so) instead "
        "of exiting 1 with the nearest change that fits",
    )  # fmt: skip


def label_what_if(text: str) -> str:
    """Every non-empty line of ``text`` marked as the what-if of a plan that does not fit."""
    return "\n".join(WHAT_IF + line if line.strip() else line for line in text.split("\n"))


def as_priced(text: str, feasible: bool) -> str:
    """``text`` as printed: as it is for a plan that fits, else marked as a what-if."""
    return text if feasible else label_what_if(text)


def flags_text(edits: dict) -> str:
    """Flag edits as a command line's words: ``--tp 2 --sp``."""
    return " ".join(f"{k} {v}" if v is not True else k for k, v in edits.items()
                    if v is not None)  # fmt: skip


def fastest_fitting_layout(cfg, cluster, stack_name: str, *, gpus: int, global_batch: int,
                           seq: int, eff) -> tuple[dict, float, float] | None:  # fmt: skip
    """(flag edits, step time, peak memory per GPU) of the fastest layout ``search`` finds that
    fits on ``gpus`` GPUs, or None where none fits (or none is valid)."""
    from gpuplan.sim.diagnose.layers import layout_edits
    from gpuplan.sim.parallel.search import SearchSpace, row_strategy, search

    space = SearchSpace(stack=stack_name)
    try:
        result = search(cfg, cluster=cluster, gpus=gpus, global_batch=global_batch, seq=seq,
                        space=space, eff=eff)  # fmt: skip
    except GpuplanError:
        return None
    row = result.frame.iloc[0]
    best = row_strategy(row, global_batch=global_batch, space=space)
    edits = {k: v for k, v in layout_edits(best).items() if v is not None}
    edits |= {"--recompute": best.recompute, "--schedule": best.schedule}
    if best.virtual_stages > 1:
        edits["--virtual-stages"] = str(best.virtual_stages)
    return edits, float(row["step_time_s"]), float(row["peak_memory_per_gpu_bytes"])


def training_infeasible(cfg, cluster, stack_name: str, *, gpus: int, global_batch: int, seq: int,
                        eff, peak_bytes: float, label: str) -> Infeasible:  # fmt: skip
    """The ``Infeasible`` of a training plan (``label``, ``peak_bytes`` per GPU) that does not
    fit, naming the nearest layout that does (module docstring)."""
    acc = cluster.accelerator
    what = (f"{cfg.name} needs {format_value('bytes', peak_bytes)} per GPU at {label} on {gpus} x "
            f"{acc.key}, which has {format_value('bytes', acc.hbm_bytes)}")  # fmt: skip
    n = gpus
    for _ in range(MAX_DOUBLINGS + 1):
        found = fastest_fitting_layout(cfg, cluster, stack_name, gpus=n, global_batch=global_batch,
                                       seq=seq, eff=eff)  # fmt: skip
        if found is not None:
            edits, step_s, peak = found
            edits = {"--gpus": str(n), **edits}
            where = "" if n == gpus else f"; it needs {n} GPUs"
            return Infeasible(
                f"{what}{where}; nearest change that fits: {flags_text(edits)} "
                f"({format_value('bytes', peak)} per GPU, step {format_value('time_s', step_s)})"
                " (--allow-infeasible prices the plan as given, as a what-if)",
                fix=edits,
            )
        n = _next_count(n, cluster.gpus_per_node)
    return Infeasible(f"{what}; no layout of up to {n // 2} GPUs fits "
                      "(--allow-infeasible prices the plan as given, as a what-if)")  # fmt: skip


def _next_count(n: int, per_node: int) -> int:
    """The next GPU count tried: whole nodes, doubling."""
    if n < per_node:
        return per_node
    return 2 * n
