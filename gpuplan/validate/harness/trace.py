"""Kineto (torch.profiler) Chrome traces of a few iterations of one layer fwd_bwd and one train
step, for reading which kernels a step runs and how long each class takes
(``gpuplan.validate.trace.kernel_table`` reads them on a CPU).

Each trace covers ``ACTIVE`` iterations after two warm ones; a file over 2 MB is gzipped. On CUDA
``kernel_counts.json`` beside them lists the kernels one call of each elementwise op, of a layer
and of a decode step launches. This runs after all timing: the profiler never precedes a timed
case.
Run alone: ``python3 -m gpuplan.validate.harness.trace --out DIR [--tiny] [--device cpu|cuda]``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
from pathlib import Path

import torch

from . import decode_step, elementwise, layer, train_step
from .context import make_context

ACTIVE = 3
_GZIP_OVER_BYTES = 2 * 2**20


def _targets(tiny: bool) -> dict[str, tuple]:
    """Name -> (kind module, params) of the traced steps."""
    if tiny:
        lay, step = layer.cases(True, "cpu")[0], train_step.cases(True, "cpu")[0]
    else:
        lay = layer._case(layer.CONFIGS["llama3-8b"], 4096, 1, "fwd_bwd", False)
        step = train_step._case(32000, 2048, 16, 8, 8192, 2, 2048, 2, "none")
    return {"layer_fwd_bwd": (layer, lay), "train_step": (train_step, step)}


def _step_fn(ctx, module, params):
    if module is layer:
        return layer.make_step(ctx, params)[2]
    return train_step.make_step(ctx, params)[2]


def capture(out_dir: str | Path, ctx) -> list[Path]:
    """Write one trace per target into ``out_dir``; return their paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    activities = [torch.profiler.ProfilerActivity.CPU]
    if ctx.device == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    paths = []
    for name, (module, params) in _targets(ctx.tiny).items():
        fn = _step_fn(ctx, module, params)
        for _ in range(2):
            fn()
        ctx.clock.sync()
        with torch.profiler.profile(activities=activities) as prof:
            for _ in range(ACTIVE):
                fn()
            ctx.clock.sync()
        path = out_dir / f"{name}.trace.json"
        prof.export_chrome_trace(str(path))
        (out_dir / f"{name}.params.json").write_text(json.dumps(params) + "\n")
        paths.append(_maybe_gzip(path))
        del fn, prof
    counted = count_kernels(out_dir, ctx)
    return paths + ([counted] if counted else [])


def device_kernels(fn) -> list[str]:
    """Names of the GPU activities (kernels, memcpy, memset) one call of ``fn`` launches."""
    fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]


def count_kernels(out_dir: str | Path, ctx) -> Path | None:
    """Write ``kernel_counts.json``: GPU kernels per call of each elementwise op and pass, of an
    eager layer's fwd and fwd_bwd, and of an eager decode step (CUDA only; None elsewhere)."""
    if ctx.device != "cuda":
        return None
    counts: dict[str, dict] = {}
    for op in elementwise.OPS:
        for pass_ in ("fwd", "fwd_bwd"):
            p = {"op": op, "tokens": 2048, "hidden": 4096, "pass": pass_, "dtype": "bf16"}
            names = device_kernels(elementwise.make_fn(ctx, p))
            counts[f"elementwise/{op}/{pass_}"] = {"count": len(names), "kernels": names}
    lay = layer._case(layer.CONFIGS["llama3-8b"], 1024, 1, "fwd", False)
    _, fwd, fwd_bwd = layer.make_step(ctx, lay)
    for name, fn in (("layer/fwd", fwd), ("layer/fwd_bwd", fwd_bwd)):
        names = device_kernels(fn)
        counts[name] = {"count": len(names), "kernels": names}
    dec = decode_step._case(decode_step.CONFIGS["llama3-8b"], 1, 8, 1024, False)
    with torch.no_grad():
        names = device_kernels(decode_step._build(ctx, dec))
    counts["decode_step/1_layer/eager"] = {"count": len(names), "kernels": names}
    path = Path(out_dir) / "kernel_counts.json"
    path.write_text(json.dumps(counts, indent=1) + "\n")
    return path


def _maybe_gzip(path: Path) -> Path:
    if path.stat().st_size <= _GZIP_OVER_BYTES:
        return path
    gz = path.with_name(path.name + ".gz")
    with path.open("rb") as src, gzip.open(gz, "wb", compresslevel=6) as dst:
        shutil.copyfileobj(src, dst)
    path.unlink()
    return gz


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--device", choices=("cpu", "cuda"), default=None)
    args = ap.parse_args(argv)
    for path in capture(args.out, make_context(args.device, args.tiny)):
        print(path)


if __name__ == "__main__":
    main()
