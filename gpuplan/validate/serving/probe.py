"""Where a serving decode iteration's time goes: the server's own padded decode, kernel by kernel.

The serving validation measures whole iterations; this probe takes the same ``Model`` and
``PaddedDecoder`` (Llama-2-7B shapes, 32 slots, span 1152 by default) and, for each bucket,
times the CUDA-graph replay (CUDA events, L2 not flushed: as the server runs it) with the cache
as the server leaves it (zeros where no prefill wrote) and filled with random values, masked
(the server's default) and unmasked, with SDPA's default dispatch (as the server runs, cuDNN
attention allowed) and with cuDNN attention off (flash or memory-efficient), then profiles one
eager padded step of some buckets to sum GPU kernel time by kernel name. Everything goes to one
JSON file.

Run: ``python3 -m gpuplan.validate.serving.probe --out FILE [--tiny] [--device cuda|cpu]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path

import torch

from .model import LLAMA2_7B, TINY, Model
from .padded_decode import PaddedDecoder, decode_buckets


def _time_ms(fn, reps: int, cuda: bool) -> float:
    import time

    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            times.append(1e3 * (time.perf_counter() - t0))
    return statistics.median(times)


def _kernel_ms(fn, cuda: bool) -> dict[str, float]:
    """GPU time by kernel name of one call of ``fn`` (CPU op time on a CPU)."""
    fn()
    acts = [torch.profiler.ProfilerActivity.CPU]
    if cuda:
        acts.append(torch.profiler.ProfilerActivity.CUDA)
        torch.cuda.synchronize()
    with torch.profiler.profile(activities=acts) as prof:
        fn()
        if cuda:
            torch.cuda.synchronize()
    totals: dict[str, float] = defaultdict(float)
    want = torch.autograd.DeviceType.CUDA if cuda else torch.autograd.DeviceType.CPU
    for e in prof.events():
        if e.device_type == want:
            us = e.device_time if cuda else e.cpu_time
            totals[e.name[:120]] += us / 1e3
    return dict(sorted(totals.items(), key=lambda kv: -kv[1]))


def _bucket_run(dec: PaddedDecoder, b: int, reps: int, cuda: bool, *, profile: bool) -> dict:
    graph = dec.graphs.get(b)

    def step():
        return dec._step(b)

    run = {
        "bucket": b,
        "graph_ms": _time_ms(graph.replay if graph is not None else step, reps, cuda),
        "eager_ms": _time_ms(step, max(3, reps // 4), cuda),
    }
    if profile:
        run["kernels_ms"] = _kernel_ms(step, cuda)
    return run


@torch.inference_mode()
def probe(shape: dict, *, max_seqs: int, span: int, device: str, reps: int) -> dict:
    cuda = device == "cuda"
    model = Model(shape, max_seqs=max_seqs, max_len=span, device=device, dtype=torch.bfloat16)
    buckets = decode_buckets(max_seqs)
    out: dict = {"shape": shape, "max_seqs": max_seqs, "span": span, "runs": []}
    for fill in ("zeros", "random"):
        if fill == "random":
            model.k_cache.normal_()
            model.v_cache.normal_()
        for masked, cudnn in ((True, True), (False, True), (True, False), (False, False)):
            model.mask_decode = masked
            if cuda:
                torch.backends.cuda.enable_cudnn_sdp(cudnn)
            dec = PaddedDecoder(model, buckets=buckets, span=span, device=device, graphs=cuda)
            # every row at the end of the span: each reads (nearly) all of it, as late in a run
            dec.positions.fill_(span - 1)
            for b in buckets:
                run = _bucket_run(dec, b, reps, cuda, profile=b in (1, 16, buckets[-1]))
                run = {"cache": fill, "masked": masked, "cudnn_sdp": cudnn, **run}
                out["runs"].append(run)
                print(json.dumps({k: v for k, v in run.items() if k != "kernels_ms"}), flush=True)
            del dec
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--device", choices=("cpu", "cuda"), default=None)
    ap.add_argument("--max-seqs", type=int, default=32)
    ap.add_argument("--span", type=int, default=1152)
    args = ap.parse_args(argv)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    shape = dict(TINY if args.tiny else LLAMA2_7B)
    doc = probe(shape, max_seqs=4 if args.tiny else args.max_seqs,
                span=32 if args.tiny else args.span, device=device, reps=5 if args.tiny else 30)  # fmt: skip
    doc["torch"] = torch.__version__
    doc["device_name"] = torch.cuda.get_device_name(0) if device == "cuda" else "cpu"
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
