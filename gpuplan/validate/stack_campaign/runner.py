"""The campaign's command line: parts in order, each in its time box, then the run's summary.

``environment.json`` is written at the start (GPU, clocks, driver, CUDA, cuDNN, torch,
transformers, the ceilings) and rewritten at the end with the host probes taken before and after
and each part's summary, so a run cut short still has its environment.
"""

from __future__ import annotations

import argparse
import json
import time
import traceback
from pathlib import Path

from .common import TimeBox, host_probe_s_per_launch, log

PARTS = ("sdpa", "ops", "grouped", "sgemm", "kprofile", "hfprofile", "cprofile", "hostpair", "hf",
         "compile", "families")
# Share of the budget left when a part starts (relative weights).
WEIGHTS = {"sdpa": 0.30, "ops": 0.08, "hf": 0.32, "compile": 0.30, "grouped": 0.06,
           "kprofile": 0.04, "hfprofile": 0.04, "sgemm": 0.06, "cprofile": 0.15, "hostpair": 0.30,
           "families": 0.30}


def _environment(torch, device: str) -> dict:
    from ..harness.records import environment

    env = environment(torch, device)
    try:
        import transformers

        env["transformers"] = transformers.__version__
    except ImportError:
        env["transformers"] = None
    try:
        import triton

        env["triton"] = triton.__version__
    except ImportError:
        env["triton"] = None
    if device == "cuda":
        env["cudnn"] = torch.backends.cudnn.version()
        env["sdpa_flags"] = {
            "flash": torch.backends.cuda.flash_sdp_enabled(),
            "efficient": torch.backends.cuda.mem_efficient_sdp_enabled(),
            "cudnn": torch.backends.cuda.cudnn_sdp_enabled(),
            "math": torch.backends.cuda.math_sdp_enabled(),
        }
    return env


def run(out_dir, *, device: str | None, budget_s: float, only: list[str],
        ceilings: bool = True, models: tuple[str, ...] | None = None,
        grid: str = "base", weights: dict | None = None) -> dict:
    import torch

    from ..harness.records import device_key

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    tiny = device != "cuda"
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    key = device_key(torch.cuda.get_device_name(0)) if device == "cuda" else "cpu"
    env = _environment(torch, device)
    if device == "cuda" and ceilings:
        from ..harness.runner import _ceilings

        env["ceilings"] = _ceilings(torch)
    env |= {"campaign": "gpuplan.validate.stack_campaign", "parts": only, "tiny": tiny,
            "budget_s": budget_s, "grid": grid,
            "host_probe_start_s_per_launch": host_probe_s_per_launch(torch, device)}
    _write_env(out_dir, env)
    log(f"stack campaign: {env.get('gpu_name', 'cpu')}, torch {torch.__version__}, "
        f"transformers {env['transformers']}, budget {budget_s:.0f} s -> {out_dir}")
    end = start + budget_s
    summaries = {}
    todo = [p for p in PARTS if p in only]
    for i, part in enumerate(todo):
        left = max(0.0, end - time.monotonic())
        share = weights or WEIGHTS
        box = TimeBox(left * share[part] / sum(share[p] for p in todo[i:]))
        t0 = time.monotonic()
        log(f"== {part}: {box.left_s():.0f} s")
        try:
            summaries[part] = _run_part(part, torch, device, key, out_dir, box, tiny, models,
                                        grid)
        except Exception as exc:  # a part that breaks must not stop the others
            summaries[part] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
            log(traceback.format_exc())
        summaries[part]["elapsed_s"] = round(time.monotonic() - t0, 1)
        log(f"== {part}: {json.dumps(summaries[part])}")
    env |= {"host_probe_end_s_per_launch": host_probe_s_per_launch(torch, device), "summary": summaries,
            "total_s": round(time.monotonic() - start, 1)}
    _write_env(out_dir, env)
    log(f"stack campaign done in {env['total_s']} s")
    return summaries


def _run_part(part, torch, device, key, out_dir, box, tiny, models, grid="base") -> dict:
    if part == "sdpa":
        from . import sdpa

        return sdpa.run(torch, device, key, out_dir, box, tiny)
    if part == "ops":
        from . import ops

        return ops.run(torch, device, key, out_dir, box, tiny)
    if part == "grouped":
        from . import grouped

        return grouped.run(torch, device, key, out_dir, box, tiny)
    if part in ("sgemm", "cprofile", "hostpair"):
        import importlib

        module = importlib.import_module(f".{part}", __package__)
        return module.run(torch, device, key, out_dir, box, tiny)
    if part in ("kprofile", "hfprofile"):
        from . import kprofile

        if part == "hfprofile" and grid == "decode":
            return kprofile.run_hf_decode(torch, device, key, out_dir, box, tiny)
        if part == "hfprofile":
            return kprofile.run_hf(torch, device, key, out_dir, box, tiny,
                                   extended=grid != "base")
        return kprofile.run(torch, device, key, out_dir, box, tiny)
    if part == "families":
        from . import families

        return families.run(torch, device, key, out_dir, box, tiny, models)
    from . import hf

    return hf.run(torch, device, key, out_dir, box, tiny, compiled=part == "compile",
                  models=models, extended=grid != "base", grid=grid)


def _write_env(out_dir: Path, env: dict) -> None:
    (out_dir / "environment.json").write_text(json.dumps(env, indent=2, default=str) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m gpuplan.validate.stack_campaign",
                                 description="The stack measurement campaign on one GPU.")
    ap.add_argument("--out", required=True, help="folder for the records and environment.json")
    ap.add_argument("--budget-s", type=float, default=480.0, help="wall-clock budget (seconds)")
    ap.add_argument("--only", default=",".join(PARTS),
                    help=f"comma-separated parts among {', '.join(PARTS)}")
    ap.add_argument("--device", choices=("cuda", "cpu"), default=None,
                    help="cuda where available; cpu runs every part at tiny sizes")
    ap.add_argument("--models", default=None,
                    help="comma-separated models of the hf, compile and families parts "
                         "(default: all of each part's own)")
    ap.add_argument("--no-ceilings", action="store_true", help="skip the copy/GEMM ceilings")
    ap.add_argument("--grid", choices=("base", "extended", "decode", "compile2"), default="base",
                    help="the hf and compile parts' sizes: base (the first run), extended "
                         "(more sizes, two rounds, host probe and kernel time per case) or "
                         "decode (the extended grid's eager decodes alone, one round; compile "
                         "as extended) or compile2 (the compile part's other sizes)")
    ap.add_argument("--weights", default=None,
                    help="the parts' shares of the budget, as part=w,... (default: "
                         + ",".join(f"{k}={v}" for k, v in WEIGHTS.items()) + ")")
    args = ap.parse_args(argv)
    only = [p.strip() for p in args.only.split(",") if p.strip()]
    bad = [p for p in only if p not in PARTS]
    if bad or not only:
        ap.error(f"--only {args.only!r}: choose among {', '.join(PARTS)}")
    if not args.budget_s > 0:
        ap.error(f"--budget-s {args.budget_s}: must be a positive number of seconds")
    models = None
    if args.models:
        from .configs import MODELS
        from .family_configs import FAMILIES

        known = (*MODELS, *FAMILIES)
        models = tuple(m.strip() for m in args.models.split(",") if m.strip())
        if not models or any(m not in known for m in models):
            ap.error(f"--models {args.models!r}: choose among {', '.join(known)}")
    weights = None
    if args.weights:
        try:
            weights = {k.strip(): float(v) for k, v in
                       (item.split("=") for item in args.weights.split(",") if item.strip())}
        except ValueError:
            ap.error(f"--weights {args.weights!r}: write part=share,... with numbers")
        if any(p not in weights or not weights[p] > 0 for p in only):
            ap.error(f"--weights {args.weights!r}: give each part of --only a share > 0")
    run(args.out, device=args.device, budget_s=args.budget_s, only=only,
        ceilings=not args.no_ceilings, models=models, grid=args.grid, weights=weights)
    return 0
