"""Command line: ``python3 -m gpuplan.validate.harness --out DIR [--kinds a,b] [--tiny]
[--device cpu|cuda] [--budget-s N] [--trace DIR]``. Writes ``DIR/<kind>.jsonl``,
``DIR/environment.json`` and ``DIR/summary.json``, and prints a per-kind table last.
"""

from __future__ import annotations

import argparse

from .runner import KINDS, run


def _kinds(text: str) -> list[str]:
    kinds = [k.strip() for k in text.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown kind(s) {', '.join(unknown)}: choose from {', '.join(KINDS)}"
        )
    return kinds


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        prog="python3 -m gpuplan.validate.harness",
        description="Measure the kinds of the gpuplan measurement-record contract on this machine.",
    )
    ap.add_argument("--out", required=True, help="folder for <kind>.jsonl and environment.json")
    ap.add_argument("--kinds", type=_kinds, default=list(KINDS), help="comma-separated kinds")
    ap.add_argument("--tiny", action="store_true", help="tiny sizes: a smoke test, CPU-friendly")
    ap.add_argument("--device", choices=("cpu", "cuda"), default=None, help="default: cuda if any")
    ap.add_argument("--budget-s", type=float, default=480.0, help="wall-clock budget of the run")
    ap.add_argument("--trace", default=None, help="also write profiler traces into this folder")
    ap.add_argument(
        "--device-key", default=None, help="catalogue key to write (default: from name)"
    )
    args = ap.parse_args(argv)
    run(
        args.out,
        kinds=args.kinds,
        device=args.device,
        tiny=args.tiny,
        budget_s=args.budget_s,
        trace_dir=args.trace,
        device_name_key=args.device_key,
    )


if __name__ == "__main__":
    main()
