"""Measure pipeline-parallel training steps with ``torch.distributed.pipelining``, one stage
per GPU.

The contract's Llama-style model (``harness.model.DecoderLayer``: RMSNorm, GQA attention with
RoPE, SwiGLU, no biases) with an embedding, a final RMSNorm and an untied LM head, split in
``stages`` stages (``--stages``, default: every GPU of the machine, 2 on the CPU): the layers
split evenly, stage 0 holds the embedding and the first ``layers / stages`` layers, the last
stage its layers, the final norm, the head and the loss (cross-entropy on fp32-upcast logits).
A model whose layers do not split evenly is left out. Weights, activations and gradients are bf16
(no autocast, no optimizer: the step is the schedule's forward and backward of every
micro-batch, with gradients accumulated over the micro-batches by autograd).

Each case: a model size, a schedule (``ScheduleGPipe`` or ``Schedule1F1B``) and a micro-batch
count (1, 2 and 4 times ``stages``: 1F1B needs at least one micro-batch per stage). ``time_s`` is
the median over repetitions of the slowest rank's time of one ``schedule.step`` (CUDA events on
each rank, started right after a 1-element all-reduce that lines the ranks up; gradients set to
None before each step, outside the timed region).

Bubble: after the steps, every rank times its stage alone on one micro-batch (forward and
backward, no communication; the last stage with its loss), median of the same repetitions:
``stats.stage_fwd_bwd_s`` per stage. ``stats.bubble_s`` = step time − micro-batches × the slowest
stage's time (what the step spends beyond the steady state of its bottleneck stage: warm-up and
drain, sends, waits), ``stats.bubble_fraction`` = bubble_s / step time; for balanced stages and
free sends both schedules give (stages − 1) / (micro-batches + stages − 1) (Huang et al. 2019,
GPipe, section 2.2; Narayanan et al. 2021, eq. 1).

Records (JSON Lines, ``DIR/pipeline.jsonl``, one per case, flushed as they come):
``{"kind": "pipeline_step", "device", "params": {hidden, heads_q, heads_kv, ffn, layers, vocab,
seq, micro_batch, micro_batches, schedule, stages, dtype}, "measured": {"time_s"}, "source",
"stats"}``; ``DIR/environment_pipeline.json`` holds the machine, drivers and library versions.

Run from the repository root on a machine with ``stages`` GPUs (imports only torch and the
standard library, and the harness's torch-only model module, so gpuplan need not be installed):

    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \\
        python -m gpuplan.validate.pipeline_bench --out DIR [--stages 4]

(it spawns one process per stage itself), or ``torchrun --nproc-per-node 4 -m
gpuplan.validate.pipeline_bench --out DIR`` (one stage per process). ``--tiny --device cpu``
runs a tiny model on CPU processes with gloo (the CI test). ``--schedules`` picks the schedules
(default both); ``--budget-s`` bounds the whole run (default 200 s).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import socket
import statistics
import sys
import time
import traceback
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from gpuplan.validate.harness.model import DecoderLayer, rope_tables
from gpuplan.validate.harness.records import device_key, environment

KIND = "pipeline_step"
NO_MULTICAST = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
# name -> hidden, heads_q, heads_kv, ffn, layers, vocab, seq, micro_batch
MODELS = {
    "2k-8l": (2048, 16, 8, 8192, 8, 32000, 2048, 1),
    "4k-8l": (4096, 32, 8, 14336, 8, 128256, 4096, 1),
    "4k-16l": (4096, 32, 8, 14336, 16, 32000, 2048, 2),
}
TINY = {"tiny": (64, 4, 2, 128, 4, 256, 16, 2)}
SCHEDULES = ("gpipe", "1f1b")
MICRO_BATCHES_PER_STAGE = (1, 2, 4)  # 2 stages: 2, 4, 8 micro-batches; 4 stages: 4, 8, 16


def cases(tiny: bool, stages: int = 2, schedules=SCHEDULES) -> list[dict]:
    """Every (model, schedule, micro-batch count) whose layers split over ``stages``, smallest
    model first."""
    out = []
    per_stage = MICRO_BATCHES_PER_STAGE[:2] if tiny else MICRO_BATCHES_PER_STAGE
    for hidden, hq, hkv, ffn, layers, vocab, seq, mb in (TINY if tiny else MODELS).values():
        if layers % stages:
            continue
        for schedule in schedules:
            for m in (k * stages for k in per_stage):
                out.append({
                    "hidden": hidden, "heads_q": hq, "heads_kv": hkv, "ffn": ffn,
                    "layers": layers, "vocab": vocab, "seq": seq, "micro_batch": mb,
                    "micro_batches": m, "schedule": schedule, "stages": stages, "dtype": "bf16",
                })  # fmt: skip
    return out


class Stage(nn.Module):
    """One pipeline stage: [embedding] + layers + [final norm + LM head]."""

    def __init__(self, p: dict, *, first: bool, last: bool, device, dtype):
        super().__init__()
        h, v = p["hidden"], p["vocab"]
        n = p["layers"] // p["stages"]
        self.embed = nn.Embedding(v, h) if first else None
        self.layers = nn.ModuleList(
            DecoderLayer(h, p["heads_q"], p["heads_kv"], p["ffn"]) for _ in range(n)
        )
        self.norm = nn.Parameter(torch.ones(h)) if last else None
        self.head = nn.Linear(h, v, bias=False) if last else None
        cos, sin = rope_tables(p["seq"], h // p["heads_q"], device=device, dtype=dtype)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, x):
        if self.embed is not None:
            x = self.embed(x)  # (B, S) token ids -> (B, S, H)
        for layer in self.layers:
            x = layer(x, self.cos, self.sin)
        if self.head is not None:
            x = F.rms_norm(x, (x.shape[-1],), self.norm, 1e-5)
            x = self.head(x)  # (B, S, V) logits
        return x


def loss_fn(logits, target):
    """Mean cross-entropy of bf16 logits upcast to fp32 (as the training stack does)."""
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), target.reshape(-1))


def build(p: dict, rank: int, device: str):
    """(stage module, step function, stage-alone function) of this rank for case ``p``."""
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    torch.manual_seed(0)
    dtype, stages = torch.bfloat16, p["stages"]
    first, last = rank == 0, rank == stages - 1
    with torch.device(device):  # weights drawn on the GPU: much faster than on the CPU
        module = Stage(p, first=first, last=last, device=device, dtype=dtype)
    module = module.to(device=device, dtype=dtype)
    stage = PipelineStage(module, rank, stages, torch.device(device))
    cls = ScheduleGPipe if p["schedule"] == "gpipe" else Schedule1F1B
    schedule = cls(stage, p["micro_batches"], loss_fn=loss_fn)
    batch = p["micro_batch"] * p["micro_batches"]
    tokens = torch.randint(p["vocab"], (batch, p["seq"]), device=device)
    target = torch.randint(p["vocab"], (batch, p["seq"]), device=device)

    def step() -> None:
        if first:
            schedule.step(tokens)
        elif last:
            schedule.step(target=target, losses=[])
        else:
            schedule.step()

    return module, step, _stage_alone(module, p, first, last, device)


def _stage_alone(module, p: dict, first: bool, last: bool, device: str):
    """One micro-batch through this stage alone, forward and backward, no communication."""
    mb, s, h = p["micro_batch"], p["seq"], p["hidden"]
    if first:
        x = torch.randint(p["vocab"], (mb, s), device=device)
    else:
        x = torch.randn(mb, s, h, device=device, dtype=torch.bfloat16, requires_grad=True)
    target = torch.randint(p["vocab"], (mb, s), device=device)
    grad = None if last else torch.randn(mb, s, h, device=device, dtype=torch.bfloat16)

    def run() -> None:
        out = module(x)
        if last:
            loss_fn(out, target).backward()
        else:
            out.backward(grad)

    return run


def _time_one(fn, device: str) -> float:
    if not device.startswith("cuda"):
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e-3


def _gather(values: list[float], device: str) -> list[list[float]]:
    """Every rank's list of ``values`` (the same length on each), in rank order."""
    local = torch.tensor(values, dtype=torch.float64, device=device)
    ranks = [torch.zeros_like(local) for _ in range(dist.get_world_size())]
    dist.all_gather(ranks, local)
    return [r.tolist() for r in ranks]


def time_steps(module, step, device: str, *, reps: int, warmup: int) -> dict:
    """Median over repetitions of the slowest rank's step time (seconds)."""
    token = torch.ones(1, device=device)
    for _ in range(warmup):
        module.zero_grad(set_to_none=True)
        step()
    times = []
    for _ in range(reps):
        module.zero_grad(set_to_none=True)
        dist.all_reduce(token)  # lines the ranks up
        times.append(_time_one(step, device))
    ranks = _gather(times, device)
    slowest = [max(col) for col in zip(*ranks, strict=True)]
    return {
        "median_s": statistics.median(slowest),
        "min_s": min(slowest),
        "rank_median_s": [statistics.median(r) for r in ranks],
        "reps": reps,
        "warmup": warmup,
    }


def stage_times(module, alone, device: str, *, reps: int) -> list[float]:
    """Every stage's median time of one micro-batch alone (forward and backward), rank order."""
    module.zero_grad(set_to_none=True)
    alone()  # warm-up
    times = [_time_one(alone, device) for _ in range(reps)]
    module.zero_grad(set_to_none=True)
    return [statistics.median(r) for r in _gather(times, device)]


def bubble(step_s: float, stage_s: list[float], micro_batches: int) -> dict:
    """The step's time beyond ``micro_batches`` micro-batches of its slowest stage."""
    bubble_s = step_s - micro_batches * max(stage_s)
    return {"stage_fwd_bwd_s": stage_s, "bubble_s": bubble_s, "bubble_fraction": bubble_s / step_s}


def source(device: str, reps: int, stages: int) -> str:
    if device.startswith("cuda"):
        nccl = ".".join(map(str, torch.cuda.nccl.version()))
        gpu = torch.cuda.get_device_name(0)
        where = f"torch {torch.__version__.split('+')[0]} NCCL {nccl}, {stages}x {gpu}"
        timer = "CUDA events"
    else:
        where, timer = f"torch {torch.__version__} gloo, {stages} CPU processes", "perf_counter"
    return (
        f"{where}, torch.distributed.pipelining schedule.step ({stages} stages, bf16, no "
        f"optimizer), {timer}, ranks aligned by a 1-element all_reduce, median over {reps} of "
        "the slowest rank"
    )


def go_on(deadline: float, device: str) -> bool:
    """Rank 0's clock decides, for every rank."""
    flag = torch.tensor([1.0 if time.time() < deadline else 0.0], device=device)
    dist.broadcast(flag, src=0)
    return bool(flag.item())


def run_rank(rank: int, args) -> None:
    """Measure every case on this rank; rank 0 writes the records."""
    device = f"cuda:{rank}" if args.device == "cuda" else "cpu"
    if args.device == "cuda":
        torch.cuda.set_device(rank)
    out = Path(args.out)
    path = out / "pipeline.jsonl"
    reps, warmup = (2, 1) if args.tiny else (args.reps, 2)
    key = device_key(torch.cuda.get_device_name(0)) if args.device == "cuda" else "cpu"
    for p in cases(args.tiny, args.stages, args.schedules):
        if not go_on(args.deadline, device):
            break
        module, step, alone = build(p, rank, device)
        stats = time_steps(module, step, device, reps=reps, warmup=warmup)
        stats |= bubble(stats["median_s"], stage_times(module, alone, device, reps=reps),
                        p["micro_batches"])  # fmt: skip
        if rank == 0:
            record = {"kind": KIND, "device": key, "params": p,
                      "measured": {"time_s": stats["median_s"]},
                      "source": source(device, reps, p["stages"]), "stats": stats}  # fmt: skip
            with path.open("a") as f:
                f.write(json.dumps(record) + "\n")
            print(f"[pipeline] {p['stages']} stages {p['hidden']}h {p['layers']}L {p['schedule']} "
                  f"m={p['micro_batches']}: {1e3 * stats['median_s']:.2f} ms, bubble "
                  f"{100 * stats['bubble_fraction']:.0f}%", flush=True)  # fmt: skip
        del module, step, alone
        if args.device == "cuda":
            torch.cuda.empty_cache()


def _init(rank: int, port: int, device: str, world: int) -> None:
    dist.init_process_group(
        "nccl" if device == "cuda" else "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=300),
    )


def _spawned(rank: int, args, port: int) -> None:
    os.environ.update(NO_MULTICAST)
    if args.device == "cpu":
        torch.set_num_threads(1)
    _init(rank, port, args.device, args.stages)
    try:
        run_rank(rank, args)
    except Exception:
        print(f"[pipeline rank {rank}] failed:\n{traceback.format_exc()}", flush=True)
        raise
    finally:
        dist.destroy_process_group()
    # Threads of gloo and of the pipelining schedule can abort the interpreter's own teardown
    # ("terminate called without an active exception", SIGABRT) after all work is done and
    # every record is flushed: leave without it.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _schedules(text: str) -> tuple[str, ...]:
    names = tuple(s.strip() for s in text.split(",") if s.strip())
    if not names or any(s not in SCHEDULES for s in names):
        raise argparse.ArgumentTypeError(f"{text!r}: choose from {', '.join(SCHEDULES)}")
    return names


def parse(argv) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m gpuplan.validate.pipeline_bench",
                                 description=__doc__.split("\n\n")[0])  # fmt: skip
    ap.add_argument("--out", required=True, help="folder for pipeline.jsonl")
    ap.add_argument("--device", choices=("cuda", "cpu"), default=None)
    ap.add_argument("--tiny", action="store_true", help="a tiny model (CPU test)")
    ap.add_argument("--reps", type=int, default=5, help="timed steps per case (default 5)")
    ap.add_argument("--budget-s", type=float, default=200.0, help="stop after this (default 200)")
    ap.add_argument(
        "--stages",
        type=int,
        default=None,
        help="pipeline stages, one process each (default: every GPU; 2 on the CPU)",
    )
    ap.add_argument("--schedules", type=_schedules, default=SCHEDULES,
                    help="comma-separated, of gpipe,1f1b (default both)")  # fmt: skip
    args = ap.parse_args(argv)
    if args.device is None:
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if "WORLD_SIZE" in os.environ:  # under torchrun: one stage per process
        args.stages = int(os.environ["WORLD_SIZE"])
    elif args.stages is None:
        args.stages = torch.cuda.device_count() if args.device == "cuda" else 2
    if args.stages < 2:
        ap.error(f"--stages={args.stages}: a pipeline needs at least 2 stages")
    if args.device == "cuda" and torch.cuda.device_count() < args.stages:
        ap.error(f"--stages={args.stages} needs as many GPUs, found {torch.cuda.device_count()}")
    if not cases(args.tiny, args.stages, args.schedules):
        ap.error(f"--stages={args.stages}: no model's layers split evenly over the stages")
    args.deadline = time.time() + args.budget_s
    return args


def main(argv=None) -> int:
    os.environ.update(NO_MULTICAST)
    args = parse(sys.argv[1:] if argv is None else argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # under torchrun
        rank = int(os.environ["RANK"])
        if args.device == "cpu":
            torch.set_num_threads(1)
        dist.init_process_group("nccl" if args.device == "cuda" else "gloo")
        try:
            run_rank(rank, args)
        finally:
            dist.destroy_process_group()
        if rank:
            return 0
    else:
        torch.multiprocessing.spawn(
            _spawned, args=(args, _free_port()), nprocs=args.stages, join=True
        )
    env = environment(torch, args.device) | {"wall_s": time.time() - started, "stages": args.stages}
    (out / "environment_pipeline.json").write_text(json.dumps(env, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
