"""What a training layout takes where it is left unset: degrees of 1, the data-parallel degree
that fills the GPUs and the global batch of four micro-batches per stage (the sequence length a
run takes by default is ``strategy.default_seq``).
"""

from __future__ import annotations

from gpuplan.errors import GpuplanError
from gpuplan.sim.parallel.strategy import Strategy


def data_parallel_degree(gpus: int | None, *, tp: int | None = None, pp: int | None = None,
                         cp: int | None = None, dp: int | None = None) -> int:
    """``dp`` as given, else the GPUs over tp x cp x pp (1 without GPUs); an error when that
    product does not divide the GPUs."""
    if dp is not None:
        return dp
    tp, pp, cp = tp or 1, pp or 1, cp or 1
    inner = tp * pp * cp
    if gpus is None:
        return 1
    if gpus % inner:
        raise GpuplanError(
            f"tp*cp*pp = {tp}*{cp}*{pp} = {inner} does not divide gpus={gpus}; "
            "choose degrees whose product divides the GPUs"
        )
    return gpus // inner


def default_global_batch(micro_batch: int, dp: int, pp: int) -> int:
    """Sequences per step when none is given: micro-batch x dp x max(1, 4 pp)."""
    return micro_batch * dp * max(1, 4 * pp)


def strategy_of(gpus: int | None, *, micro_batch: int, tp: int | None = None,
                pp: int | None = None, cp: int | None = None, ep: int | None = None,
                dp: int | None = None, global_batch: int | None = None, **options) -> Strategy:
    """The ``Strategy`` of the degrees given on ``gpus`` GPUs, the unset ones filled in as above;
    ``options`` are the rest of its fields, as given."""
    tp, pp, cp, ep = tp or 1, pp or 1, cp or 1, ep or 1
    dp = data_parallel_degree(gpus, tp=tp, pp=pp, cp=cp, dp=dp)
    gb = global_batch or default_global_batch(micro_batch, dp, pp)
    return Strategy(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, micro_batch=micro_batch, global_batch=gb,
                    **options)  # fmt: skip
