"""Runs the kinds one after another inside a time budget, each kind isolated from the others.

Every kind gets a share of the time left when it starts (``WEIGHTS``), so time a kind does not
use passes to the next; within a kind, cases run in their listed order (most informative first)
until its deadline, so a run cut short still spans each kind's range. A failing case is logged
and skipped; a kind whose first cases all fail, or that fails as a whole, is logged and the next
kind runs. Single-device kinds run in this process; ``collective``, ``tp_mlp`` and ``tp_layer``
spawn one process per GPU (two gloo processes on the CPU).
"""

from __future__ import annotations

import gc
import json
import sys
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path

from .context import make_context
from .records import RecordWriter, environment, make_record, write_environment
from .timing import Budget, Clock

KINDS = (
    "gemm",
    "attention",
    "elementwise",
    "layer",
    "train_step",
    "decode_step",
    "collective",
    "tp_mlp",
    "tp_layer",
)
SINGLE_DEVICE = KINDS[:6]
# Share of the remaining budget each kind gets when it starts (relative weights).
WEIGHTS = {
    "gemm": 0.15,
    "attention": 0.13,
    "elementwise": 0.09,
    "layer": 0.24,
    "train_step": 0.16,
    "decode_step": 0.16,
    "collective": 0.45,
    "tp_mlp": 0.45,
    "tp_layer": 0.45,
    "trace": 0.07,
}
_GIVE_UP_AFTER = 6  # consecutive failures with no success: the kind is broken, move on


@dataclass(slots=True)
class KindSummary:
    """How one kind's run went."""

    kind: str
    records: int = 0
    errors: int = 0
    cases: int = 0
    elapsed_s: float = 0.0
    stopped_by_budget: bool = False
    first_error: str = ""


def _log(msg: str) -> None:
    print(msg, flush=True)


def _ceilings(torch) -> dict:
    """Copy bandwidth and a large bf16 GEMM's rate on this GPU (the roofline's two ceilings)."""
    n = 2**30
    src = torch.randn(n // 2, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    clock = Clock(torch, "cuda", min_reps=10, max_reps=10)
    copy_s = clock.time(lambda: dst.copy_(src), flush=False).median_s
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    gemm_s = clock.time(lambda: a @ a, flush=False).median_s
    return {
        "d2d_copy_bytes_per_s": 2 * n / copy_s,  # bytes read plus bytes written
        "bf16_gemm_8192_flops_per_s": 2 * 8192**3 / gemm_s,
        "note": "1 GiB device-to-device copy; 8192^3 bf16 matmul; median of 10, no L2 flush",
    }


def _module(kind: str):
    import importlib

    return importlib.import_module(f"{__package__}.{kind}")


def _note_timing(out_dir: Path, kind: str, note: dict) -> None:
    """Add ``kind``'s timing method to the run's ``timing.json`` (read by the calibration)."""
    path = Path(out_dir) / "timing.json"
    notes = json.loads(path.read_text()) if path.is_file() else {}
    notes[kind] = note
    path.write_text(json.dumps(notes, indent=1, sort_keys=True) + "\n")


def _run_single(kind, ctx, out_dir, deadline, summary: KindSummary) -> None:
    mod = _module(kind)
    writer = RecordWriter(out_dir, kind)
    if hasattr(mod, "timing_note") and ctx.device == "cuda":
        _note_timing(out_dir, kind, mod.timing_note(ctx))
    cases = mod.cases(ctx.tiny, ctx.device)
    failures_in_a_row = 0
    for i, params in enumerate(cases):
        if time.monotonic() >= deadline:
            summary.stopped_by_budget = True
            break
        summary.cases += 1
        try:
            result = mod.measure(params, ctx)
        except Exception as exc:  # one case must not end the kind
            summary.errors += 1
            failures_in_a_row += 1
            msg = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
            summary.first_error = summary.first_error or f"{params}: {msg}"
            _log(f"  [{kind} {i + 1}/{len(cases)}] {params} FAILED {msg}")
            if summary.errors == 1:  # the whole story once per kind
                _log(traceback.format_exc())
            _free(ctx, heavy=True)
            if failures_in_a_row >= _GIVE_UP_AFTER and summary.records == 0:
                _log(f"  {kind}: {failures_in_a_row} failures and no record; giving up")
                break
            continue
        failures_in_a_row = 0
        writer.write(
            make_record(
                kind,
                ctx.device_key,
                params,
                result["measured"],
                result["source"],
                **result.get("extra", {}),
            )
        )
        summary.records += 1
        t_ms = result["measured"]["time_s"] * 1e3
        _log(f"  [{kind} {i + 1}/{len(cases)}] {params} {t_ms:.4f} ms")
        _free(ctx, heavy=kind in ("layer", "train_step", "decode_step"))


def _free(ctx, *, heavy: bool) -> None:
    if heavy and ctx.device == "cuda":
        gc.collect()
        ctx.torch.cuda.empty_cache()


def _world(torch, device: str) -> int:
    return torch.cuda.device_count() if device == "cuda" else 2


def _run_multi(kind, ctx, out_dir, deadline, summary: KindSummary) -> None:
    from . import distributed

    world = _world(ctx.torch, ctx.device)
    if world < 2:
        if kind == "collective":
            _log("  collective: one device, world=1 is trivial; skipped")
            return
        _run_tp1_here(kind, ctx, out_dir, deadline, summary)
        return
    job = distributed.Job(
        kind=kind,
        module=f"{__package__}.{kind}",
        out_dir=str(out_dir),
        device=ctx.device,
        device_key=ctx.device_key,
        tiny=ctx.tiny,
        deadline_unix=time.time() + (deadline - time.monotonic()),
        port=distributed.free_port(),
    )
    path = Path(out_dir) / f"{kind}.jsonl"
    before = _count_lines(path)
    try:
        distributed.run_world(job, world)
    finally:
        summary.records = _count_lines(path) - before
        summary.cases = summary.records


def _run_tp1_here(kind, ctx, out_dir, deadline, summary) -> None:
    """tp_mlp or tp_layer on a one-device machine: the tp=1 cases, in this process."""
    mod = _module(kind)
    writer = RecordWriter(out_dir, kind)
    for params in mod.cases(ctx.tiny, ctx.device, 1):
        if time.monotonic() >= deadline:
            summary.stopped_by_budget = True
            break
        result = mod.run_single(ctx, params)
        extra = result["extra"]
        writer.write(
            make_record(kind, ctx.device_key, params, result["measured"], result["source"], **extra)
        )
        summary.records += 1


def _count_lines(path: Path) -> int:
    return sum(1 for line in path.open() if line.strip()) if path.exists() else 0


def run(
    out_dir: str | Path,
    *,
    kinds: list[str],
    device: str | None,
    tiny: bool,
    budget_s: float,
    trace_dir: str | Path | None = None,
    device_name_key: str | None = None,
) -> list[KindSummary]:
    """Measure ``kinds`` into ``out_dir`` within ``budget_s`` seconds; return per-kind summaries."""
    budget = Budget(budget_s, WEIGHTS)
    ctx = make_context(device, tiny, device_name_key)
    torch = ctx.torch
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    env = environment(torch, ctx.device)
    if ctx.device == "cuda" and not tiny:
        env["ceilings"] = _ceilings(torch)
    env |= {"sdpa_cudnn_disabled": ctx.device == "cuda", "kinds": kinds, "tiny": tiny}
    write_environment(out_dir, env)
    name = env.get("gpu_name", "cpu")
    _log(
        f"gpuplan harness: {name}, torch {torch.__version__}, budget {budget_s:.0f} s -> {out_dir}"
    )
    summaries = []
    remaining = list(kinds) + (["trace"] if trace_dir else [])
    for kind in kinds:
        deadline = budget.kind_deadline(kind, remaining)
        remaining.remove(kind)
        summaries.append(_run_kind(kind, ctx, out_dir, deadline))
    if trace_dir:
        _run_trace(ctx, trace_dir, summaries)
    _finish(out_dir, summaries, budget)
    return summaries


def _run_kind(kind, ctx, out_dir, deadline) -> KindSummary:
    summary = KindSummary(kind=kind)
    start = time.monotonic()
    _log(f"== {kind}: {deadline - start:.0f} s")
    try:
        runner = _run_single if kind in SINGLE_DEVICE else _run_multi
        runner(kind, ctx, out_dir, deadline, summary)
    except Exception as exc:  # a kind that breaks as a whole must not stop the others
        summary.errors += 1
        summary.first_error = summary.first_error or f"{type(exc).__name__}: {exc}"[:300]
        _log(f"  {kind} FAILED:\n{traceback.format_exc()}")
        _free(ctx, heavy=True)
    _free(ctx, heavy=True)
    summary.elapsed_s = time.monotonic() - start
    return summary


def _run_trace(ctx, trace_dir, summaries) -> None:
    from .trace import capture

    summary = KindSummary(kind="trace")
    start = time.monotonic()
    try:
        summary.records = len(capture(trace_dir, ctx))
    except Exception as exc:
        summary.errors = 1
        summary.first_error = f"{type(exc).__name__}: {exc}"[:300]
        _log(f"  trace FAILED:\n{traceback.format_exc()}")
    summary.elapsed_s = time.monotonic() - start
    summaries.append(summary)


def _finish(out_dir: Path, summaries: list[KindSummary], budget: Budget) -> None:
    total_s = time.monotonic() - budget.start
    (out_dir / "summary.json").write_text(
        json.dumps({"total_s": total_s, "kinds": [asdict(s) for s in summaries]}, indent=2) + "\n"
    )
    _log(f"\n{'kind':<12} {'records':>7} {'errors':>6} {'cases':>5} {'secs':>6}  cut  first error")
    for s in summaries:
        cut = "yes" if s.stopped_by_budget else "no"
        _log(
            f"{s.kind:<12} {s.records:>7} {s.errors:>6} {s.cases:>5} {s.elapsed_s:>6.1f}  {cut:<4} "
            f"{s.first_error[:90]}"
        )
    _log(f"total {sum(s.records for s in summaries)} records in {total_s:.0f} s")
    sys.stdout.flush()
