"""Command line: ``python3 -m gpuplan.validate.serving --out DIR [--rates 3,6,9,12]
[--duration-s 45] [--prompt-tokens 256] [--output-tokens 64] [--max-seqs 32]
[--max-batched-tokens 4096] [--cuda-graph | --no-cuda-graph] [--max-context N] [--tiny]
[--device cpu|cuda] [--device-key h200] [--seed 0]``.

``--cuda-graph`` (the default on CUDA) replays decode iterations from one CUDA graph per batch
bucket (1, 2, 4, ... ``max_seqs``) over a fixed span of ``--max-context`` positions (default
prompt + output tokens); on the CPU it runs the same padded decode eagerly. ``--no-cuda-graph``
is the eager server (decode over the longest running context).

On an H200 the defaults take about 4 minutes: about 20 s to start and warm up, then 45 s of
arrivals and a few seconds of draining per rate. A GPU-bound run (long prompts, so prefill's
GEMMs are long; decode from CUDA graphs) of about 4 minutes on an H200, whose rates take a
Llama-2-7B replica from light load to near its knee (about 10 requests/s):
``--rates 2,4,6,8 --duration-s 40 --prompt-tokens 1024 --output-tokens 128 --max-seqs 32``.

Writes ``DIR/settings.json``, ``DIR/requests.jsonl`` (one line per request and rate) and
``DIR/iterations.jsonl`` (one line per iteration), and prints a per-rate summary.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch

from .model import LLAMA2_7B, TINY
from .server import serve_rates


def _floats(text: str) -> list[float]:
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list") from None
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: give rates greater than zero")
    return values


def _parser() -> argparse.ArgumentParser:
    """The command line of ``python3 -m gpuplan.validate.serving`` (module docstring)."""
    ap = argparse.ArgumentParser(
        prog="python3 -m gpuplan.validate.serving",
        description="Measure a torch continuous-batching server under Poisson load.",
    )
    ap.add_argument("--out", required=True, help="folder for the settings and records")
    ap.add_argument("--rates", type=_floats, default=[3.0, 6.0, 9.0, 12.0])
    ap.add_argument("--duration-s", type=float, default=45.0, help="arrivals per rate")
    ap.add_argument("--drain-s", type=float, default=30.0, help="most wait after the last arrival")
    ap.add_argument("--prompt-tokens", type=int, default=256)
    ap.add_argument("--output-tokens", type=int, default=64)
    ap.add_argument("--max-seqs", type=int, default=32)
    ap.add_argument("--max-batched-tokens", type=int, default=4096)
    ap.add_argument("--cuda-graph", action=argparse.BooleanOptionalAction, default=None,
                    help="padded decode from CUDA graphs (default: on with CUDA)")  # fmt: skip
    ap.add_argument("--max-context", type=int, default=None,
                    help="positions every padded decode row attends over (default: prompt + "
                    "output tokens)")  # fmt: skip
    ap.add_argument(
        "--no-decode-mask",
        action="store_true",
        help="timing only: decode rows read the whole span unmasked (flash kernel)",
    )
    ap.add_argument("--no-cudnn-attention", action="store_true",
                    help="leave cuDNN out of SDPA's dispatch (flash first, as the validation "
                    "harness runs; by default PyTorch may pick cuDNN attention on "
                    "Hopper)")  # fmt: skip
    ap.add_argument("--tiny", action="store_true", help="a tiny model (a CPU smoke test)")
    ap.add_argument("--device", choices=("cpu", "cuda"), default=None, help="default: cuda if any")
    ap.add_argument("--device-key", default=None, help="catalogue key (default: from the name)")
    ap.add_argument("--seed", type=int, default=0)
    return ap


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    shape = TINY if args.tiny else LLAMA2_7B
    graph = device == "cuda" if args.cuda_graph is None else args.cuda_graph
    if args.no_cudnn_attention:
        torch.backends.cuda.enable_cudnn_sdp(False)
    decode_info: dict = {}
    started = time.perf_counter()
    requests, iterations = serve_rates(
        shape=shape,
        rates=args.rates,
        duration_s=args.duration_s,
        prompt=args.prompt_tokens,
        output=args.output_tokens,
        max_seqs=args.max_seqs,
        max_batched_tokens=args.max_batched_tokens,
        device=device,
        dtype=dtype,
        seed=args.seed,
        drain_s=args.drain_s,
        pad_decode=graph,
        cuda_graph=graph,
        max_context=args.max_context,
        mask_decode=not args.no_decode_mask,
        info=decode_info,
    )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    settings = _settings(args, shape, dtype, device, decode_info, started)
    _write(out, settings, requests, iterations)
    _print_summary(requests, args.rates, settings["wall_s"])
    print(f"decode: cuda_graph={settings['cuda_graph']} padding={settings['decode_padding']}")
    if settings["graph_error"]:
        print(f"graph capture failed, decode ran eagerly: {settings['graph_error']}")


def _settings(args, shape: dict, dtype, device: str, decode_info: dict, started: float) -> dict:
    """``settings.json``: the run's model, load, device and how decode ran (``wall_s``: since
    ``started``, the perf_counter before serving)."""
    name = torch.cuda.get_device_name() if device == "cuda" else platform.processor() or "cpu"
    return {
        "model": "llama2-7b shapes, random weights" if not args.tiny else "tiny",
        "shape": shape,
        "dtype": str(dtype).removeprefix("torch."),
        "policy": "continuous",
        "max_seqs": args.max_seqs,
        "max_batched_tokens": args.max_batched_tokens,
        "prompt_tokens": args.prompt_tokens,
        "output_tokens": args.output_tokens,
        "rates_per_s": args.rates,
        "duration_s": args.duration_s,
        "seed": args.seed,
        "device": device,
        "device_name": name,
        "device_key": args.device_key,
        "torch": torch.__version__,
        "decode_mask": not args.no_decode_mask,
        "cudnn_attention": torch.backends.cuda.cudnn_sdp_enabled(),
        "cuda_graph": decode_info["cuda_graph"],  # decode iterations replay captured graphs
        "decode_padding": decode_info["decode_padding"],  # {buckets, context_tokens} or null
        "graph_error": decode_info["graph_error"],
        "prefill": "eager",
        "impl": "eager",  # every elementwise op its own kernel (graphs capture the same ones)
        "wall_s": time.perf_counter() - started,
    }


def _write(out: Path, settings: dict, requests: list[dict], iterations: list[dict]) -> None:
    """``settings.json``, ``requests.jsonl`` and ``iterations.jsonl`` into ``out``."""
    (out / "settings.json").write_text(json.dumps(settings, indent=2) + "\n")
    for file, rows in (("requests.jsonl", requests), ("iterations.jsonl", iterations)):
        (out / file).write_text("".join(json.dumps(r) + "\n" for r in rows))


def _p50_ms(values: list[float]) -> float:
    return 1e3 * statistics.median(values) if values else float("nan")


def _print_summary(requests: list[dict], rates: list[float], wall_s: float) -> None:
    print(f"{'rate/s':>7} {'requests':>8} {'finished':>8} {'ttft p50 ms':>11} {'tpot p50 ms':>11}")
    for rate in rates:
        rows = [r for r in requests if r["rate_per_s"] == rate]
        done = [r for r in rows if r["finish_s"] is not None]
        ttft = [r["first_token_s"] - r["arrival_s"] for r in done]
        tpot = [
            (r["finish_s"] - r["first_token_s"]) / (r["output_tokens"] - 1)
            for r in done
            if r["output_tokens"] > 1
        ]
        print(
            f"{rate:>7g} {len(rows):>8} {len(done):>8} {_p50_ms(ttft):>11.2f} "
            f"{_p50_ms(tpot):>11.2f}"
        )
    print(f"wall time {wall_s:.1f} s")


if __name__ == "__main__":
    main()
