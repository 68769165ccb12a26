"""Data-parallel training steps of the contract's Llama-style model (model.TrainModel) under
PyTorch DDP, DDP with a sharded optimizer, and FSDP2, on every visible GPU (or gloo CPU ranks).

Layouts (``LAYOUTS``), each run with gradient accumulation 1 and 4:

- ``ddp``: ``DistributedDataParallel(bucket_cap_mb=25)`` (the default bucket, torch.nn.parallel
  docs), fused AdamW; micro-batches before the last run under ``no_sync()``, so the gradients
  are all-reduced once a step. Priced as stack ``pytorch``, ZeRO stage 0.
- ``ddp-zero1``: the same DDP with ``torch.distributed.optim.ZeroRedundancyOptimizer`` around
  fused AdamW: each rank keeps the optimizer state of its share of the parameters, steps it and
  broadcasts the updated parameters (Rajbhandari et al. 2020, ZeRO stage 1). Stack ``pytorch``,
  stage 1.
- ``fsdp2`` / ``fsdp2-keep``: ``torch.distributed.fsdp.fully_shard`` on every decoder layer and
  on the root, ``MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32)`` (torchtitan's
  defaults), ``reshard_after_forward`` True (ZeRO-3) or False (ZeRO-2); FSDP2 reduce-scatters
  after every micro-batch's backward (its default; no ``set_requires_gradient_sync``). Stack
  ``fsdp2``, stages 3 / 2 (``sim.stacks.training.FSDP2_RUNTIME``).

Every layout runs the forward under ``torch.autocast(bfloat16)`` over fp32 master weights (the
contract's ``bf16-mixed``; under FSDP2 the weights it gathers are already bf16, and autocast
keeps the loss in fp32 as in the one-GPU ``train_step`` kind). A step is ``zero_grad(set_to_none
=True)``, ``accumulation`` forward/backward passes of ``micro_batch`` sequences each (the loss
divided by ``accumulation``), ``optimizer.step()``; every micro-batch has its own random tokens.

time_s: before each repetition a one-element all-reduce lines the ranks up, each rank times the
step between CUDA events, and the record takes the median over repetitions of the slowest rank
(``distributed.time_ranks``). peak_bytes: ``torch.cuda.max_memory_allocated()`` over one more
step after ``reset_peak_memory_stats()``, the largest over ranks (every rank's is kept beside
it). On the CPU (gloo, a smoke test) peak_bytes is the rank's weights, gradients and optimizer
state only (``CPU_PEAK_DEFINITION``).

Records are the contract's ``train_step`` kind with optional params ``stack``, ``timing``
(``isolated``), ``dp`` (the world), ``accumulation``, ``zero_stage`` and ``optimizer_impl``
(``fused`` AdamW on CUDA in every layout: the ``pytorch`` stack's own default is ``foreach``,
so a record says which one ran); the layout's name, its
settings and per-rank numbers are extra keys. Measuring imports nothing from gpuplan (the harness
rule); ``score`` prices the records through ``gpuplan.validate.record_prediction`` (``gpuplan validate score``'s
path, the training estimate) and prints measured against predicted per layout.

Run: ``python3 -m gpuplan.validate.harness.dist_train --out DIR [--tiny] [--device cpu|cuda]
[--world N] [--budget-s S]``; score: ``python3 -m gpuplan.validate.harness.dist_train score
FILE.jsonl``.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import time
from pathlib import Path

import torch
import torch.distributed as dist

from . import distributed
from .model import TrainModel, rope_tables
from .records import RecordWriter, environment, make_record, write_environment

KIND = "train_step"
BUCKET_CAP_MB = 25  # DDP's default gradient bucket (torch.nn.parallel.DistributedDataParallel)
# layout -> (stack it is priced as, ZeRO stage, what wraps the model)
LAYOUTS = {
    "ddp": ("pytorch", 0, f"DistributedDataParallel(bucket_cap_mb={BUCKET_CAP_MB})"),
    "ddp-zero1": ("pytorch", 1,
                  f"DDP(bucket_cap_mb={BUCKET_CAP_MB}) + ZeroRedundancyOptimizer(AdamW)"),
    "fsdp2": ("fsdp2", 3, "fully_shard per layer + root, reshard_after_forward=True"),
    "fsdp2-keep": ("fsdp2", 2, "fully_shard per layer + root, reshard_after_forward=False"),
}
ACCUMULATIONS = (1, 4)
# params beside the contract's train_step keys (gpuplan.validate.record_kinds, KIND_OPTIONAL), with
# optimizer_impl, the AdamW implementation run (fused on CUDA, foreach on the CPU)
OPTIONAL_PARAMS = ("stack", "timing", "dp", "accumulation", "zero_stage")
PEAK_DEFINITION = (
    "torch.cuda.max_memory_allocated() over one step after reset_peak_memory_stats(), largest "
    "over ranks; the wrapped model, its optimizer state and the previous step's buffers allocated"
)
CPU_PEAK_DEFINITION = "CPU stand-in: the rank's weights + gradients + optimizer state bytes"

# (vocab, hidden, heads_q, heads_kv, ffn, layers, seq, micro_batch): 0.6B, 1.9B (a Llama-3
# vocabulary), 2.0B and 3.8B parameters, the widths of the one-GPU train_step grid.
MODELS = (
    (32000, 2048, 16, 8, 8192, 8, 2048, 2),
    (128256, 4096, 32, 8, 14336, 4, 4096, 1),
    (32000, 4096, 32, 8, 14336, 8, 2048, 2),
    (32000, 4096, 32, 8, 14336, 16, 4096, 1),
)
TINY = ((256, 64, 4, 2, 128, 1, 16, 2),)


def _params(model: tuple, layout: str, accumulation: int, world: int) -> dict:
    vocab, hidden, hq, hkv, ffn, layers, seq, mb = model
    stack, zero, _ = LAYOUTS[layout]
    return {
        "vocab": vocab, "hidden": hidden, "heads_q": hq, "heads_kv": hkv, "ffn": ffn,
        "layers": layers, "seq": seq, "micro_batch": mb, "recompute": "none",
        "optimizer": "adamw", "precision": "bf16-mixed",
        "stack": stack, "timing": "isolated", "dp": world, "accumulation": accumulation,
        "zero_stage": zero,
    }  # fmt: skip


def cases(tiny: bool, device: str, world: int) -> list[tuple[str, dict]]:
    """(layout, params) for every model, layout and accumulation; model by model, smallest first."""
    return [
        (layout, _params(m, layout, acc, world))
        for m in (TINY if tiny else MODELS)
        for layout in LAYOUTS
        for acc in ACCUMULATIONS
    ]


def _adamw_impl(device: str) -> str:
    """The AdamW implementation run: fused on CUDA, foreach on the CPU."""
    return "fused" if device.startswith("cuda") else "foreach"


def _optimizer(params, device: str, *, sharded: bool):
    """AdamW of ``_adamw_impl``; ``sharded``: inside a ZeroRedundancyOptimizer."""
    kw = {_adamw_impl(device): True}
    if sharded:
        from torch.distributed.optim import ZeroRedundancyOptimizer

        return ZeroRedundancyOptimizer(params, optimizer_class=torch.optim.AdamW, lr=1e-4, **kw)
    return torch.optim.AdamW(params, lr=1e-4, **kw)


def _wrap(model, layout: str, rt: distributed.Rank):
    """The model under ``layout``'s wrapper; returns (module, per-micro-batch sync context)."""
    if layout.startswith("ddp"):
        from torch.nn.parallel import DistributedDataParallel as DDP

        ids = [torch.device(rt.device).index] if rt.device.startswith("cuda") else None
        ddp = DDP(model, device_ids=ids, bucket_cap_mb=BUCKET_CAP_MB)
        return ddp, ddp.no_sync
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mesh = init_device_mesh("cuda" if rt.device.startswith("cuda") else "cpu", (rt.world,))
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    reshard = layout == "fsdp2"
    for layer in model.layers:
        fully_shard(layer, mesh=mesh, mp_policy=policy, reshard_after_forward=reshard)
    fully_shard(model, mesh=mesh, mp_policy=policy, reshard_after_forward=reshard)
    return model, contextlib.nullcontext


def make_step(rt: distributed.Rank, layout: str, p: dict):
    """(step fn, model, optimizer) of one case on this rank, random weights and tokens."""
    torch.manual_seed(0)  # the same weights on every rank
    keys = ("vocab", "hidden", "heads_q", "heads_kv", "ffn", "layers", "recompute")
    with torch.device(rt.device):
        model = TrainModel(**{k: p[k] for k in keys})
    module, no_sync = _wrap(model, layout, rt)
    opt = _optimizer(module.parameters(), rt.device, sharded=layout == "ddp-zero1")
    acc, b, s = p["accumulation"], p["micro_batch"], p["seq"]
    gen = torch.Generator().manual_seed(1 + rt.rank)  # each rank's own data
    tokens = torch.randint(0, p["vocab"], (acc, b, s + 1), generator=gen).to(rt.device)
    inputs, targets = tokens[..., :-1].contiguous(), tokens[..., 1:].contiguous()  # (A, B, S)
    cos, sin = rope_tables(s, p["hidden"] // p["heads_q"], device=rt.device)
    device_type = "cuda" if rt.device.startswith("cuda") else "cpu"

    def step():
        opt.zero_grad(set_to_none=True)
        for i in range(acc):  # DDP all-reduces in the last micro-batch's backward only
            with contextlib.nullcontext() if i == acc - 1 else no_sync():
                with torch.autocast(device_type, dtype=torch.bfloat16):
                    loss = module(inputs[i], targets[i], cos, sin) / acc
                loss.backward()
        opt.step()

    return step, module, opt


def _state_bytes(module, opt) -> int:
    """This rank's weights, gradients and optimizer state (local shards under FSDP2)."""

    def local(t):
        return t.to_local() if hasattr(t, "to_local") else t

    params = list(module.parameters())
    tensors = [local(p) for p in params] + [local(p.grad) for p in params if p.grad is not None]
    inner = getattr(opt, "optim", opt)  # ZeroRedundancyOptimizer keeps its shard's optimizer
    tensors += [local(v) for s in inner.state.values() for v in s.values() if torch.is_tensor(v)]
    return sum(t.numel() * t.element_size() for t in tensors)


def _peak(rt, step, module, opt) -> tuple[list[int], list[int]]:
    """(peak over one step, allocated before it) of every rank, rank order."""
    if rt.device.startswith("cuda"):
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        step()
        torch.cuda.synchronize()
        mine = [torch.cuda.max_memory_allocated(), before]
    else:
        state = _state_bytes(module, opt)
        mine = [state, state]
    parts = [torch.zeros(2, dtype=torch.int64, device=rt.device) for _ in range(rt.world)]
    dist.all_gather(parts, torch.tensor(mine, dtype=torch.int64, device=rt.device))
    return [int(t[0]) for t in parts], [int(t[1]) for t in parts]


def _reps(tiny: bool, accumulation: int) -> tuple[int, int]:
    """(warm-up steps, timed steps): the first steps create the optimizer state and buffers."""
    if tiny:
        return 1, 2
    return 2, (8 if accumulation == 1 else 5)


def measure_rank(rt: distributed.Rank, layout: str, p: dict) -> dict | None:
    """One case on this rank; the record on rank 0, None on the others."""
    step, module, opt = make_step(rt, layout, p)
    warmup, reps = _reps(rt.job.tiny, p["accumulation"])
    stats = distributed.time_ranks(rt, step, reps=reps, warmup=warmup)
    peaks, before = _peak(rt, step, module, opt)
    n_params = sum(t.numel() for t in module.parameters())  # global count, DTensors too
    del step, module, opt
    gc.collect()
    if rt.device.startswith("cuda"):
        torch.cuda.empty_cache()
    if rt.rank:
        return None
    wrapper = LAYOUTS[layout][2]
    contract = {k: v for k, v in p.items() if k not in OPTIONAL_PARAMS}
    impl = _adamw_impl(rt.device)
    what = (
        f"{layout}: {wrapper}, fp32 master + bf16 autocast, AdamW({impl}=True), "
        f"accumulation {p['accumulation']}"
    )
    record = make_record(
        KIND, rt.job.device_key, contract, {"time_s": stats["median_s"], "peak_bytes": max(peaks)},
        distributed.source(rt, what, reps), layout=layout, wrapper=wrapper, stats=stats,
        peak_bytes_per_rank=peaks, allocated_before_step_bytes_per_rank=before,
        peak_bytes_definition=PEAK_DEFINITION if rt.device.startswith("cuda") else CPU_PEAK_DEFINITION,
        num_params=n_params, tokens_per_step=p["seq"] * p["micro_batch"] * p["accumulation"] * rt.world,
        bucket_cap_mb=BUCKET_CAP_MB if layout.startswith("ddp") else None,
    )  # fmt: skip
    record["params"] |= {k: p[k] for k in OPTIONAL_PARAMS} | {"optimizer_impl": impl}
    return record


def run_rank(rt: distributed.Rank) -> None:
    """Every case in order until the deadline (rank 0 decides for all); rank 0 writes records.

    A case that fails on any rank (out of memory, say) is skipped on all of them."""
    writer = RecordWriter(rt.job.out_dir, KIND) if rt.rank == 0 else None
    for layout, p in cases(rt.job.tiny, rt.job.device, rt.world):
        if not distributed.go_on(rt):
            break
        try:
            record, failed = measure_rank(rt, layout, p), 0
        except Exception as exc:  # out of memory, a wrapper this torch lacks: skip the case
            record, failed = None, 1
            print(f"  [rank {rt.rank}] {layout} {p} FAILED {type(exc).__name__}: "
                  f"{str(exc)[:300]}", flush=True)  # fmt: skip
            gc.collect()
            if rt.device.startswith("cuda"):
                torch.cuda.empty_cache()
        flag = torch.tensor([failed], device=rt.device)
        dist.all_reduce(flag)
        if writer is not None and record is not None and not flag.item():
            writer.write(record)
            m = record["measured"]
            print(
                f"  {layout:<10} acc {p['accumulation']} h{p['hidden']} L{p['layers']} "
                f"v{p['vocab']} s{p['seq']} mb{p['micro_batch']}  {m['time_s'] * 1e3:9.2f} ms  "
                f"peak {m['peak_bytes'] / 2**30:6.2f} GiB",
                flush=True,
            )


def measure(out_dir: str, *, device: str | None, world: int | None, tiny: bool,
            budget_s: float, device_key: str | None = None) -> Path:  # fmt: skip
    """Spawn one process per GPU (or ``world`` gloo processes) and measure every case."""
    from .records import device_key as key_of

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    world = world or (torch.cuda.device_count() if device == "cuda" else 2)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    name = torch.cuda.get_device_name(0) if device == "cuda" else "cpu"
    env = environment(torch, device) | {"world": world, "layouts": LAYOUTS, "tiny": tiny,
                                        "kind": KIND, "budget_s": budget_s}  # fmt: skip
    write_environment(out, env)
    job = distributed.Job(
        kind=KIND, module=f"{__package__}.dist_train", out_dir=str(out), device=device,
        device_key=device_key or key_of(name), tiny=tiny, deadline_unix=time.time() + budget_s,
        port=distributed.free_port(),
    )  # fmt: skip
    distributed.run_world(job, world)
    return out / f"{KIND}.jsonl"


def score_rows(path: str | Path) -> list[dict]:
    """Each record of ``path`` priced by ``gpuplan.validate.record_prediction.predict_record`` (the path of
    ``gpuplan validate score``: the training estimate with the record's stack, dp,
    accumulation and ZeRO stage): layout, measured and predicted time and peak, errors in %."""
    from gpuplan.hwmodels.accelerators import list_accelerators
    from gpuplan.validate.record_prediction import predict_record
    from gpuplan.validate.records import read_records

    known = lambda: [a.key for a in list_accelerators()]  # noqa: E731
    records, errors = read_records(path, known_devices=known)
    if errors:
        raise SystemExit(f"{path}: {errors[0]}")
    lines = Path(path).read_bytes().splitlines()  # numbered as read_records numbers them
    rows = []
    for rec in records:
        pred = predict_record(rec)
        p, m = rec.params, rec.measured
        rows.append({
            "layout": json.loads(lines[rec.line_no - 1]).get("layout", p.get("stack", "pytorch")),
            "model": f"h{p['hidden']} L{p['layers']} v{p['vocab']} s{p['seq']} mb{p['micro_batch']}",
            "dp": p.get("dp", 1), "accumulation": p.get("accumulation", 1),
            "measured_time_s": m["time_s"], "predicted_time_s": pred["time_s"],
            "time_error_pct": 100 * (pred["time_s"] - m["time_s"]) / m["time_s"],
            "measured_peak_bytes": m["peak_bytes"], "predicted_peak_bytes": pred["peak_bytes"],
            "peak_error_pct": 100 * (pred["peak_bytes"] - m["peak_bytes"]) / m["peak_bytes"],
        })  # fmt: skip
    return rows


def print_scores(rows: list[dict]) -> None:
    """The table, then the median absolute error per layout and over all rows."""
    import statistics

    head = f"{'layout':<11}{'model':<28}{'dp':>3}{'acc':>4}{'meas ms':>10}{'pred ms':>10}"
    print(head + f"{'err %':>8}{'meas GiB':>10}{'pred GiB':>10}{'err %':>8}")
    for r in rows:
        print(
            f"{r['layout']:<11}{r['model']:<28}{r['dp']:>3}{r['accumulation']:>4}"
            f"{r['measured_time_s'] * 1e3:>10.2f}{r['predicted_time_s'] * 1e3:>10.2f}"
            f"{r['time_error_pct']:>+8.1f}{r['measured_peak_bytes'] / 2**30:>10.2f}"
            f"{r['predicted_peak_bytes'] / 2**30:>10.2f}{r['peak_error_pct']:>+8.1f}"
        )
    groups = {"all": rows} | {k: [r for r in rows if r["layout"] == k] for k in LAYOUTS}
    print(f"\n{'median |error|':<14}{'n':>4}{'time %':>9}{'peak %':>9}")
    for name, rs in groups.items():
        if rs:
            t = statistics.median(abs(r["time_error_pct"]) for r in rs)
            m = statistics.median(abs(r["peak_error_pct"]) for r in rs)
            print(f"{name:<14}{len(rs):>4}{t:>9.1f}{m:>9.1f}")


def main(argv: list[str] | None = None) -> None:
    import sys

    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["score"]:
        ap = argparse.ArgumentParser(prog="python3 -m gpuplan.validate.harness.dist_train score")
        ap.add_argument("file", help="train_step.jsonl written by this module")
        ap.add_argument("--json", action="store_true", help="the rows as JSON")
        args = ap.parse_args(argv[1:])
        from gpuplan.errors import GpuplanError

        try:
            rows = score_rows(args.file)
        except GpuplanError as err:  # a file that is missing, unreadable or empty
            raise SystemExit(f"error: {err}") from None
        print(json.dumps(rows, indent=1)) if args.json else print_scores(rows)
        return
    ap = argparse.ArgumentParser(
        prog="python3 -m gpuplan.validate.harness.dist_train",
        description="DDP, DDP+ZeRO-1 and FSDP2 training steps on every visible GPU.",
    )
    ap.add_argument("--out", required=True, help="folder for train_step.jsonl, environment.json")
    ap.add_argument("--tiny", action="store_true", help="tiny sizes: a CPU smoke test")
    ap.add_argument("--device", choices=("cpu", "cuda"), default=None, help="default: cuda if any")
    ap.add_argument("--world", type=int, default=None, help="ranks (default: every GPU; CPU 2)")
    ap.add_argument("--budget-s", type=float, default=180.0, help="stop starting cases after")
    ap.add_argument("--device-key", default=None, help="catalogue key (default: from the name)")
    args = ap.parse_args(argv)
    path = measure(args.out, device=args.device, world=args.world, tiny=args.tiny,
                   budget_s=args.budget_s, device_key=args.device_key)  # fmt: skip
    print(f"records: {path}")


if __name__ == "__main__":
    main()
