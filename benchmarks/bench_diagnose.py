"""Time ``gpuplan diagnose`` on a 1,024-GPU training layout and a 70B serving deployment.

Prints wall and CPU seconds of each walk (the target is under 10 s each; on a shared machine
the wall time includes waiting for a core, the CPU time does not). Run:
``python3 benchmarks/bench_diagnose.py``.
"""

from __future__ import annotations

import time

from gpuplan.cli.diagnose_cmd import diagnose_setup

CASES = {
    "train megatron-gpt-145.6b 1024 x h200 (tp8 pp16, unfused attention, no dp overlap)": (
        "train", ["--model", "megatron-gpt-145.6b", "--gpus", "1024", "--tp", "8", "--pp", "16",
                  "--global-batch", "1024", "--seq", "2048", "--attention", "unfused",
                  "--no-overlap-dp"]),
    "train gpt3-175b 1024 x h200 (tp8 pp8, unfused attention)": (
        "train", ["--model", "gpt3-175b", "--gpus", "1024", "--tp", "8", "--pp", "8",
                  "--global-batch", "1536", "--seq", "2048", "--attention", "unfused"]),
    "serve llama3-70b 8 x h200 (tp2 x 4, 10 req/s, 1,000 requests)": (
        "serve", ["--model", "llama3-70b", "--gpu", "h200", "--tp", "2", "--replicas", "4",
                  "--rate", "10", "--prompt-tokens", "1000", "--output-tokens", "200"]),
}  # fmt: skip


def main() -> None:
    for name, (kind, argv) in CASES.items():
        w0, c0 = time.perf_counter(), time.process_time()
        diag = diagnose_setup(kind, argv)
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
        shares = ", ".join(f"{r.layer}:{100 * r.share:.0f}%" for r in diag.layers)
        print(f"{name}: {wall:.2f} s wall, {cpu:.2f} s CPU; {diag.metric} "
              f"{diag.baseline.metric:.4g} -> {diag.layers[-1].metric_after:.4g} "
              f"(limit {diag.limit.metric:.4g}); shares {shares}")
        print(f"  layer 4: {diag.layers[3].change}")


if __name__ == "__main__":
    main()
