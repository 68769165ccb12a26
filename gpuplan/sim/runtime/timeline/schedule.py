"""Pipeline schedules as pure functions: the order in which each stage runs its forward and
backward passes, and which pass each one waits for.

A task is ``(kind, micro_batch, chunk)`` with kind ``"F"`` or ``"B"``. Stage ``s`` of ``p`` holds
``v`` model chunks; chunk ``c`` on stage ``s`` is virtual stage ``c * p + s`` (Megatron-LM's
interleaved layout, Narayanan et al. 2021, sec. 2.2.2, Fig. 4). A forward of virtual stage ``k``
waits for the forward of ``k - 1`` (the activation it receives); a backward of ``k`` for the
backward of ``k + 1`` (the gradient it receives); the last virtual stage's backward follows its
own forward.

- ``gpipe``: every forward, then every backward in micro-batch order (Huang et al. 2019;
  ``torch.distributed.pipelining.ScheduleGPipe``).
- ``1f1b``: ``min(p - s - 1, m)`` warm-up forwards, then one forward and one backward in turn,
  then the remaining backwards (PipeDream-Flush: Narayanan et al. 2021, sec. 2.2.1;
  Megatron-LM's ``forward_backward_pipelining_without_interleaving``).
- ``interleaved``: Megatron-LM's ``forward_backward_pipelining_with_interleaving``: ``m * v``
  virtual micro-batches, ``(p - s - 1) * 2 + (v - 1) * p`` warm-up forwards, micro-batches taken
  ``p`` at a time through each chunk in turn.

The bubble of a balanced pipeline (forward ``f``, backward ``b`` per chunk and micro-batch, no
communication) is ``(p - 1) * (f + b) / v`` against an ideal ``m * (f + b)``: a fraction
``(p - 1) / (v * m + p - 1)`` of the step (Narayanan et al. 2021, eq. in sec. 2.2.2).
"""

from __future__ import annotations

from gpuplan.errors import GpuplanError, check_choice, check_positive

SCHEDULES = ("gpipe", "1f1b", "interleaved")
Task = tuple[str, int, int]  # (kind "F"/"B", micro-batch, chunk)


def stage_order(schedule: str, *, p: int, m: int, v: int, stage: int) -> list[Task]:
    """The tasks stage ``stage`` of ``p`` runs, in order, for ``m`` micro-batches."""
    check_choice("schedule", schedule, SCHEDULES)
    for name, value in (("p", p), ("m", m), ("v", v)):
        check_positive(name, value)
    if not 0 <= stage < p:
        raise GpuplanError(f"stage={stage} is invalid: choose 0 .. {p - 1}")
    if schedule == "gpipe":
        return [("F", i, c) for c in range(v) for i in range(m)] + [
            ("B", i, c) for c in reversed(range(v)) for i in range(m)
        ]
    if schedule == "1f1b" or v == 1:
        return _one_f_one_b(p, m, stage)
    return _interleaved(p, m, v, stage)


def _one_f_one_b(p: int, m: int, stage: int) -> list[Task]:
    warmup = min(p - stage - 1, m)
    order: list[Task] = [("F", i, 0) for i in range(warmup)]
    for i in range(m - warmup):
        order += [("F", warmup + i, 0), ("B", i, 0)]
    return order + [("B", i, 0) for i in range(m - warmup, m)]


def _virtual(k: int, p: int, v: int, forward: bool) -> tuple[int, int]:
    """(micro-batch, chunk) of the ``k``-th forward or backward of a stage (Megatron's
    ``get_model_chunk_id`` and micro-batch numbering)."""
    in_group = k % (p * v)
    chunk = in_group // p
    if not forward:
        chunk = v - 1 - chunk
    return (k // (p * v)) * p + k % p, chunk


def _interleaved(p: int, m: int, v: int, stage: int) -> list[Task]:
    if m % p:
        raise GpuplanError(
            f"the interleaved schedule needs micro-batches m={m} to be a multiple of p={p}"
        )
    total = m * v
    warmup = min((p - stage - 1) * 2 + (v - 1) * p, total)
    order: list[Task] = [("F", *_virtual(k, p, v, True)) for k in range(warmup)]
    for i in range(total - warmup):
        order.append(("F", *_virtual(warmup + i, p, v, True)))
        order.append(("B", *_virtual(i, p, v, False)))
    return order + [("B", *_virtual(k, p, v, False)) for k in range(total - warmup, total)]


def bubble_fraction(*, p: int, m: int, v: int = 1) -> float:
    """Idle share of a balanced pipeline's step: (p - 1) / (v m + p - 1)."""
    return (p - 1) / (v * m + p - 1)


def peak_in_flight(order: list[Task]) -> int:
    """Most forwards whose backward has not yet run, at any point of ``order`` (the stashed
    activations a stage holds)."""
    live = peak = 0
    for kind, _mb, _chunk in order:
        live += 1 if kind == "F" else -1
        peak = max(peak, live)
    return peak
