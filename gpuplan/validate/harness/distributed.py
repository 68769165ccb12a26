"""Running a kind on several processes, one per GPU (NCCL), or two on the CPU (gloo).

The parent spawns ``world`` processes with ``torch.multiprocessing.spawn``; every process builds
the same case list, and before each case rank 0 decides (deadline reached or not) and broadcasts
the decision, so all ranks stop together. Only rank 0 writes records.

Timing a multi-rank call (``time_ranks``): before each repetition a one-element all-reduce lines
up the ranks' streams (both GPUs leave it at nearly the same moment), then each rank times the
call between CUDA events. Two statistics come back: ``median_s``, the median over repetitions of
the slowest rank's time (the call is done when it is done everywhere, any wait for a late peer
included), and ``fastest_rank_median_s``, the median of the per-repetition smallest time (the
rank that arrived last waits for no one, so its interval is the call itself). Each kind says
which one is its ``time_s``. NVLink SHARP (multicast) stays off: KINDS.md of the device library
says why.
"""

from __future__ import annotations

import datetime
import os
import socket
import statistics
import time
import traceback
from dataclasses import dataclass

import torch
import torch.distributed as dist

_PREDELAY_CYCLES = 200_000  # ~100 us at the H200's 1.98 GHz boost clock (nvidia-smi clocks.max.sm)
NO_MULTICAST = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass(frozen=True, slots=True, kw_only=True)
class Job:
    """What each spawned process needs (picklable)."""

    kind: str
    module: str  # module with cases(tiny, device, world) and measure_rank(params, rt)
    out_dir: str
    device: str
    device_key: str
    tiny: bool
    deadline_unix: float  # wall clock, shared by the processes
    port: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Rank:
    """A process's place in the world and its device."""

    rank: int
    world: int
    device: str  # "cuda:<rank>" or "cpu"
    job: Job


def _done_path(job: Job, rank: int) -> str:
    return os.path.join(job.out_dir, f".{job.kind}.rank{rank}.done")


def run_world(job: Job, world: int) -> None:
    """Spawn ``world`` processes for ``job``; raises if any of them fails before its work is done.

    Each rank leaves a marker once its last case is written (records are fsynced as they are
    written), then meets the others at a barrier and tears its process group down. A rank that
    dies in that teardown (gloo's background threads can abort the process as the peer closes
    its sockets: "terminate called without an active exception", seen once in CI) has lost
    nothing, so it is reported as a warning; a rank that dies earlier fails the run."""
    os.environ.update(NO_MULTICAST)
    markers = [_done_path(job, r) for r in range(world)]
    _remove(markers)  # a previous run's
    try:
        torch.multiprocessing.spawn(_entry, args=(world, job), nprocs=world, join=True)
    except torch.multiprocessing.ProcessExitedException as exc:
        if not all(os.path.exists(m) for m in markers):
            raise
        print(f"[{job.kind}] warning: {exc} in process-group teardown, after every rank "
              "had finished and written its records; nothing was lost", flush=True)  # fmt: skip
    finally:
        _remove(markers)


def _remove(paths: list[str]) -> None:
    for path in paths:
        if os.path.exists(path):
            os.remove(path)


def _entry(rank: int, world: int, job: Job) -> None:
    import importlib

    os.environ.update(NO_MULTICAST)
    if job.device == "cuda":
        torch.cuda.set_device(rank)
    else:
        torch.set_num_threads(1)
    dist.init_process_group(
        "nccl" if job.device == "cuda" else "gloo",
        init_method=f"tcp://127.0.0.1:{job.port}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=120),
    )
    device = f"cuda:{rank}" if job.device == "cuda" else "cpu"
    rt = Rank(rank=rank, world=world, device=device, job=job)
    try:
        importlib.import_module(job.module).run_rank(rt)
        with open(_done_path(job, rank), "w") as f:
            f.write("done\n")
        dist.barrier()
    except Exception:
        print(f"[{job.kind} rank {rank}] failed:\n{traceback.format_exc()}", flush=True)
        raise
    finally:
        dist.destroy_process_group()


def go_on(rt: Rank) -> bool:
    """True while rank 0's clock is before the deadline; the same answer on every rank."""
    flag = torch.tensor([1 if time.time() < rt.job.deadline_unix else 0], device=rt.device)
    dist.broadcast(flag, src=0)
    return bool(flag.item())


def time_ranks(
    rt: Rank, fn, *, reps: int, warmup: int = 3, align: bool = True, predelay: bool = False
) -> dict:
    """Median over repetitions of the slowest rank's time of one ``fn()`` call (seconds).

    ``predelay``: after the alignment, the GPU spins ~100 us (``torch.cuda._sleep``) before the
    start event, so the CPU has queued the call by the time the GPU reaches it and the interval
    is the call's device time alone, without torch's launch overhead (CUDA only).
    """
    token = torch.ones(1, device=rt.device)
    for _ in range(warmup):
        fn()
    sleep = predelay and rt.device.startswith("cuda")
    times = [_time_one(rt, fn, token, align, sleep) for _ in range(reps)]
    local = torch.tensor(times, dtype=torch.float64, device=rt.device)
    slowest, fastest = local.clone(), local.clone()
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    dist.all_reduce(fastest, op=dist.ReduceOp.MIN)
    return {
        "median_s": statistics.median(slowest.tolist()),
        "fastest_rank_median_s": statistics.median(fastest.tolist()),
        "min_s": min(slowest.tolist()),
        "reps": reps,
        "warmup": warmup,
    }


def _time_one(rt: Rank, fn, token, align: bool, sleep: bool) -> float:
    if align:  # lines the ranks' streams up before the timed call
        dist.all_reduce(token, op=dist.ReduceOp.MAX)
    if sleep:
        torch.cuda._sleep(_PREDELAY_CYCLES)
    if not rt.device.startswith("cuda"):
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e-3


def measure_cases(rt: Rank, kind: str, cases, *, build, reps_of, what_of, extras_of=None) -> None:
    """Time each case on every rank until the deadline; rank 0 writes a record per case.

    ``build(params)`` returns the function to time, ``reps_of(params)`` its repetitions,
    ``what_of(params)`` the words of its source string and ``extras_of(params)`` extra record
    keys (the contract allows them)."""
    from .records import RecordWriter, make_record

    job = rt.job
    writer = RecordWriter(job.out_dir, job.kind) if rt.rank == 0 else None
    for params in cases:
        if not go_on(rt):
            break
        reps = reps_of(params)
        stats = time_ranks(rt, build(params), reps=reps)
        if rt.device.startswith("cuda"):
            torch.cuda.empty_cache()
        if writer is None:
            continue
        extras = extras_of(params) if extras_of else {}
        writer.write(
            make_record(
                kind,
                job.device_key,
                params,
                {"time_s": stats["median_s"]},
                source(rt, what_of(params), reps),
                stats=stats,
                **extras,
            )  # fmt: skip
        )
        print(f"  {kind} {params}  {stats['median_s'] * 1e3:9.3f} ms", flush=True)


def source(rt: Rank, what: str, reps: int, *, statistic: str = "of the slowest rank") -> str:
    """Provenance of a multi-rank record."""
    if rt.device.startswith("cuda"):
        nccl = ".".join(map(str, torch.cuda.nccl.version()))
        lib = f"torch {torch.__version__.split('+')[0]} NCCL {nccl}"
        gpu = f"{rt.world}x {torch.cuda.get_device_name(0)}"
        timer = "CUDA events"
    else:
        lib, gpu, timer = (
            f"torch {torch.__version__} gloo",
            f"{rt.world} CPU processes",
            "perf_counter",
        )
    return (
        f"{lib}, {what}, {timer}, ranks aligned by a 1-element all_reduce, "
        f"median over {reps} {statistic}, {gpu}"
    )
