"""NCCL collectives among the GPUs of one host (gloo among CPU processes in --tiny runs).

``bytes`` is each rank's input buffer (bf16, random):

    all_reduce      dist.all_reduce(x)                        in place, x of ``bytes``
    all_gather      dist.all_gather_into_tensor(out, x)       out = world * bytes
    reduce_scatter  dist.reduce_scatter_tensor(out, x)        out = bytes / world
    all_to_all      dist.all_to_all_single(out, x)            out = bytes; bytes/world per peer
    send_recv       ping-pong: rank 0 sends x to rank 1, rank 1 sends it back;
                    time_s is HALF the round trip (one one-way transfer of ``bytes``)

Timing (distributed.time_ranks): ranks lined up by a one-element all-reduce, then the GPU spins
about 100 us (``torch.cuda._sleep``) so that the CPU has queued the call before the start event
is reached; each call is timed with CUDA events on every rank. ``time_s`` is the median over
repetitions of the SMALLER of the ranks' times: the spins of the two GPUs need not last equally
long (a cycle count at each GPU's own clock), so one rank reaches the call first and waits for
its peer inside it, while the rank that arrives last sees the collective alone. The slowest
rank's median stays in ``stats.median_s``. The same measurement without the spin (so torch's CPU
launch overhead shows whenever it exceeds the alignment all-reduce) is kept as ``with_launch``.
world=1 is trivial and not measured.
"""

from __future__ import annotations

import random
import warnings

import torch
import torch.distributed as dist

from . import distributed
from .records import RecordWriter, make_record

FASTER_RANK = "of the faster rank (per repetition, the smaller of the ranks' times)"
OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")
_SIZES = tuple(2**p for p in range(10, 32))  # 1 KiB .. 2 GiB, powers of two


def cases(tiny: bool, device: str, world: int) -> list[dict]:
    """Every op at every size, sizes shuffled so any prefix spans the range."""
    sizes = (1024, 65536) if tiny else _SIZES
    out = [{"op": op, "world": world, "bytes": b, "dtype": "bf16"} for b in sizes for op in OPS]
    if not tiny:
        random.Random(6).shuffle(out)
    return out


def _reps(nbytes: int) -> int:
    return 40 if nbytes <= 64 * 2**20 else 12


def _call(rt, op: str, nbytes: int):
    """The call to time for one rank, on random bf16 buffers."""
    n = nbytes // 2
    x = torch.randn(n, device=rt.device, dtype=torch.bfloat16)
    if op == "all_reduce":
        return lambda: dist.all_reduce(x)
    if op == "all_gather":
        out = torch.empty(n * rt.world, device=rt.device, dtype=x.dtype)
        return lambda: dist.all_gather_into_tensor(out, x)
    if op == "reduce_scatter":
        out = torch.empty(n // rt.world, device=rt.device, dtype=x.dtype)
        return lambda: dist.reduce_scatter_tensor(out, x)
    if op == "all_to_all":
        out = torch.empty_like(x)
        return lambda: dist.all_to_all_single(out, x)
    return _ping_pong(rt, x)


def _ping_pong(rt, x):
    y = torch.empty_like(x)
    if rt.rank == 0:
        return lambda: (dist.send(x, 1), dist.recv(y, 1))
    if rt.rank == 1:
        return lambda: (dist.recv(y, 0), dist.send(y, 0))
    return lambda: None


def _halved(op: str, stats: dict) -> dict:
    """A ping-pong's times halved to one one-way transfer; other ops unchanged."""
    if op != "send_recv":
        return stats
    return {k: v / 2 if k.endswith("_s") else v for k, v in stats.items()}


def run_rank(rt) -> None:
    """Measure every case in order until the deadline; rank 0 writes the records."""
    warnings.filterwarnings("ignore", category=FutureWarning)
    job = rt.job
    writer = RecordWriter(job.out_dir, job.kind) if rt.rank == 0 else None
    for params in cases(job.tiny, job.device, rt.world):
        if not distributed.go_on(rt):
            break
        op, nbytes = params["op"], params["bytes"]
        reps = 3 if job.tiny else _reps(nbytes)
        fn = _call(rt, op, nbytes)
        stats = _halved(op, distributed.time_ranks(rt, fn, reps=reps, predelay=True))
        launched = _halved(op, distributed.time_ranks(rt, fn, reps=reps, warmup=1))
        if writer is None:
            continue
        what = f"dist.{op}" if op != "send_recv" else "dist.send/recv ping-pong, half round trip"
        if job.device == "cuda":
            what += ", device time (GPU spins ~100 us before the start event; no launch gap)"
        writer.write(
            make_record(
                "collective",
                job.device_key,
                params,
                {"time_s": stats["fastest_rank_median_s"]},
                distributed.source(rt, what, reps, statistic=FASTER_RANK),
                stats=stats,
                with_launch=launched,
                bus_bytes=_bus_bytes(op, nbytes, rt.world),
            )
        )
        print(
            f"  collective {op:>14} {nbytes:>11} B  {stats['fastest_rank_median_s'] * 1e6:10.1f} us",
            flush=True,
        )
    if job.device == "cuda":
        torch.cuda.synchronize()


def _bus_bytes(op: str, nbytes: int, world: int) -> float:
    """Bytes each rank sends over the links (nccl-tests' bus-bandwidth factors, PERFORMANCE.md)."""
    factor = {
        "all_reduce": 2 * (world - 1) / world,
        "all_gather": world - 1,
        "reduce_scatter": (world - 1) / world,
        "all_to_all": (world - 1) / world,
        "send_recv": 1.0,
    }[op]
    return factor * nbytes
