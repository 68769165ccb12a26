"""Decode on a padded batch (``PaddedDecoder``; what vLLM and TensorRT-LLM do to replay decode
iterations from CUDA graphs).

The decode batch sizes are buckets 1, 2, 4, ... up to ``max_seqs`` (and ``max_seqs`` itself); a
decode iteration of B sequences runs the smallest bucket >= B, the padding rows reading token 0
at position 0 of the free cache slots after the running ones (never read by a running sequence:
a prefill rewrites a slot before it is used), and every row attends over a fixed span of
``max_context`` positions with a mask hiding those past its own position. On CUDA each bucket is
captured once in a ``torch.cuda.CUDAGraph`` (one shared memory pool) over static token and
position buffers, and a decode iteration is two small host-to-device copies and one
``replay()``; on the CPU the same padded step runs eagerly.
"""

from __future__ import annotations

import time

import torch

from .model import Model


def decode_buckets(max_seqs: int) -> list[int]:
    """Powers of two below ``max_seqs``, then ``max_seqs`` (vLLM captures a similar list)."""
    out, b = [], 1
    while b < max_seqs:
        out.append(b)
        b *= 2
    return out + [max_seqs]


class PaddedDecoder:
    """Decode steps over bucketed batches and a fixed span (module docstring): replayed from one
    CUDA graph per bucket when ``graphs``, else run eagerly on the same padded inputs."""

    def __init__(self, model: Model, *, buckets: list[int], span: int, device, graphs: bool):
        self.model, self.buckets, self.span = model, list(buckets), span
        self.tokens = torch.zeros(max(buckets), dtype=torch.long, device=device)
        self.positions = torch.zeros(max(buckets), dtype=torch.long, device=device)
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.outputs: dict[int, torch.Tensor] = {}
        self.prep_s = 0.0  # host time of the last step before its kernels could start
        self.graph_error: str | None = None
        if graphs:
            try:
                self._capture()
            except Exception as err:  # run eagerly on the padded inputs, and say why
                self.graphs.clear()
                self.outputs.clear()
                self.graph_error = f"{type(err).__name__}: {err}"[:2000]
                torch.cuda.synchronize()

    def bucket(self, n: int) -> int:
        return next((b for b in self.buckets if b >= n), n)

    def _step(self, b: int) -> torch.Tensor:
        return self.model.decode(self.tokens[:b], self.positions[:b], self.span)

    def _capture(self) -> None:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up off the capture: cuBLAS handles, workspaces
            for b in self.buckets:
                for _ in range(2):
                    self._step(b)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        pool = torch.cuda.graph_pool_handle()
        for b in sorted(self.buckets, reverse=True):  # the largest first: the pool fits all
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                self.outputs[b] = self._step(b)
            self.graphs[b] = graph
        torch.cuda.synchronize()

    def __call__(self, tokens: list[int], positions: list[int], started: float) -> list[int]:
        """Next tokens of ``len(tokens)`` sequences in slots 0.. (``started``: perf_counter
        when the iteration began, for ``prep_s``)."""
        n = len(tokens)
        b = self.bucket(n)
        pad = [0] * (b - n)
        self.tokens[:b].copy_(torch.tensor(tokens + pad))
        self.positions[:b].copy_(torch.tensor(positions + pad))
        graph = self.graphs.get(b)
        self.prep_s = time.perf_counter() - started
        if graph is None:
            out = self._step(b)
        else:
            graph.replay()
            out = self.outputs[b]
        return out[:n].tolist()
