"""A small continuous-batching LLM server in torch, for measuring what serving really does.

The model (``model``: Llama-like, random weights, a preallocated KV cache) defaults to
Llama-2-7B's shapes.

Scheduling is iteration-level, as vLLM's default scheduler (and gpuplan's ``continuous``
policy) does it: at every iteration boundary, waiting prompts are admitted first come first
served while seats (``max_seqs``) and the token budget (``max_batched_tokens``) allow, and run
as a prefill-only iteration (prompts of equal length batched in one forward); otherwise every
running sequence decodes one token. A decode step attends over the longest running context with
a mask for the shorter ones. Every iteration ends with a device synchronization, so its end
time is when its tokens exist; a request's first token is the end of its prefill iteration and
its finish is the end of the iteration that emitted its last token. Everything runs under
``torch.inference_mode``, without torch.compile.

Decode may run on a padded batch (``padded_decode``: bucketed batches over a fixed span, replayed
from CUDA graphs on CUDA). Prefill iterations always run eagerly. Without padding a decode step
attends over the longest running context.

Load: Poisson arrivals at each rate for ``duration_s`` seconds (seeded), then the server drains
what is left. A request's arrival time is its scheduled time, measured on the same clock.
"""

from __future__ import annotations

import math
import random
import time
from collections import deque
from dataclasses import dataclass

import torch

from .model import Model
from .padded_decode import PaddedDecoder, decode_buckets


@dataclass
class Request:
    rid: int
    arrival_s: float
    prompt: int
    output: int
    first_token_s: float = math.nan
    finish_s: float = math.nan
    generated: int = 0
    token: int = 0  # the last generated token (the next decode input)


def poisson(rate_per_s: float, duration_s: float, rng: random.Random) -> list[float]:
    """Arrival times of a Poisson process over [0, duration_s), the first at 0."""
    times, t = [], 0.0
    while t < duration_s:
        times.append(t)
        t += rng.expovariate(rate_per_s)
    return times


class Server:
    """The scheduling loop (module docstring)."""

    def __init__(self, model: Model, *, max_seqs: int, max_batched_tokens: int, device,
                 decoder: PaddedDecoder | None = None):  # fmt: skip
        self.model, self.max_seqs, self.budget = model, max_seqs, max_batched_tokens
        self.device, self.decoder = device, decoder
        self.sync = torch.cuda.synchronize if str(device).startswith("cuda") else (lambda: None)

    def run(self, requests: list[Request], *, drain_s: float) -> list[dict]:
        """Serve ``requests`` (sorted by arrival); return one record per iteration."""
        waiting: deque[Request] = deque()
        running: list[Request] = []
        pending = deque(requests)
        iterations, t0 = [], time.perf_counter()
        last_arrival = requests[-1].arrival_s if requests else 0.0
        ready = 0.0  # when the host was last free to schedule (an iteration's end, a wake-up)
        while pending or waiting or running:
            now = time.perf_counter() - t0
            while pending and pending[0].arrival_s <= now:
                waiting.append(pending.popleft())
            if not waiting and not running:
                self._sleep_until(t0 + pending[0].arrival_s)
                ready = time.perf_counter() - t0
                continue
            if now > last_arrival + drain_s:
                break  # give up on what is left (recorded as unfinished)
            batch = self._admit(waiting, running)
            start = time.perf_counter() - t0
            extra = {"bucket": None, "span": None, "prep_s": None}
            if batch:
                self._prefill(batch, running)
                kind, size, kv = "prefill", len(batch), 0
                prompts = [r.prompt for r in batch]
            else:
                # each sequence reads its cache and its new token: positions 0..prompt+generated-1
                kv = sum(r.prompt + r.generated for r in running)
                extra = self._decode(running, t0 + start)
                kind, size, prompts = "decode", len(running), []
            self.sync()
            end = time.perf_counter() - t0
            self._settle(batch, running, end)
            iterations.append({"kind": kind, "seqs": size, "prompts": prompts, "kv_tokens": kv,
                               "start_s": start, "end_s": end,
                               "host_gap_s": start - ready, **extra})  # fmt: skip
            ready = end  # the next gap counts settling, the loop and admission
        return iterations

    def _sleep_until(self, at: float) -> None:
        while True:
            left = at - time.perf_counter()
            if left <= 0:
                return
            time.sleep(min(left, 0.0005) if left < 0.002 else left - 0.001)

    def _admit(self, waiting: deque, running: list) -> list[Request]:
        batch, tokens = [], 0
        while waiting and len(running) + len(batch) < self.max_seqs:
            if tokens + waiting[0].prompt > self.budget:
                break
            tokens += waiting[0].prompt
            batch.append(waiting.popleft())
        return batch

    def _prefill(self, batch: list[Request], running: list) -> None:
        by_length: dict[int, list[Request]] = {}
        for r in batch:
            by_length.setdefault(r.prompt, []).append(r)
        for length, group in by_length.items():
            slots = list(range(len(running), len(running) + len(group)))
            tokens = torch.randint(0, self.model.embed.num_embeddings, (len(group), length),
                                   device=self.device)  # fmt: skip
            first = self.model.prefill(tokens, torch.tensor(slots, device=self.device))
            for r, tok in zip(group, first.tolist(), strict=True):
                r.token = tok
                running.append(r)

    def _decode(self, running: list, started: float) -> dict:
        """One token for every running sequence; the iteration's padded shape and host time."""
        dev = self.device
        positions = [r.prompt + r.generated - 1 for r in running]  # the input token's position
        tokens = [r.token for r in running]
        if self.decoder is not None:
            out = self.decoder(tokens, positions, started)
            shape = {"bucket": self.decoder.bucket(len(running)), "span": self.decoder.span,
                     "prep_s": self.decoder.prep_s}  # fmt: skip
        else:
            span = max(positions) + 1
            out = self.model.decode(torch.tensor(tokens, device=dev),
                                    torch.tensor(positions, device=dev), span).tolist()  # fmt: skip
            shape = {"bucket": len(running), "span": span, "prep_s": None}
        for r, tok in zip(running, out, strict=True):
            r.token = tok
        return shape

    def _settle(self, batch: list, running: list, end_s: float) -> None:
        """Count the tokens the iteration emitted; retire the finished sequences."""
        emitted = batch if batch else running
        for r in emitted:
            r.generated += 1
            if r.generated == 1:
                r.first_token_s = end_s
            if r.generated >= r.output:
                r.finish_s = end_s
        i = 0
        while i < len(running):
            r = running[i]
            if r.generated >= r.output:
                last = len(running) - 1
                if i != last:  # keep the slots contiguous: the last one moves into the hole
                    length = running[last].prompt + running[last].generated
                    self.model.move_slot(last, i, length)
                    running[i] = running[last]
                running.pop()
            else:
                i += 1


def warm_up(server: Server, *, prompt: int, output: int) -> None:
    """A few prefill and decode iterations at several batch sizes (cuBLAS heuristics, the
    caching allocator), then an empty cache."""
    for n in sorted({1, 2, server.max_seqs // 2, server.max_seqs} - {0}):
        reqs = [Request(i, 0.0, prompt, min(output, 4)) for i in range(n)]
        server.run(reqs, drain_s=60.0)


def serve_rates(
    *,
    shape: dict,
    rates: list[float],
    duration_s: float,
    prompt: int,
    output: int,
    max_seqs: int,
    max_batched_tokens: int,
    device: str,
    dtype,
    seed: int = 0,
    drain_s: float = 60.0,
    pad_decode: bool = False,
    cuda_graph: bool = False,
    max_context: int | None = None,
    info: dict | None = None,
    mask_decode: bool = True,
) -> tuple[list[dict], list[dict]]:
    """Requests and iterations measured at each rate (rows carry ``rate_per_s``).

    ``pad_decode``: decode on bucketed batches over a fixed span of ``max_context`` positions
    (default ``prompt + output``), from CUDA graphs when ``cuda_graph`` (CUDA only). ``info``,
    if given, receives what the decode computes (``decode_padding``, ``cuda_graph``)."""
    torch.manual_seed(seed)
    span = max_context or prompt + output
    if span < prompt + output:
        raise ValueError(f"max_context={span} is invalid: it must be at least prompt + output "
                         f"= {prompt + output}")  # fmt: skip
    model = Model(shape, max_seqs=max_seqs, max_len=span, device=device, dtype=dtype)
    model.mask_decode = mask_decode
    requests_out, iterations_out = [], []
    with torch.inference_mode():
        decoder = None
        if pad_decode:
            graphs = cuda_graph and str(device).startswith("cuda")
            decoder = PaddedDecoder(model, buckets=decode_buckets(max_seqs), span=span,
                                    device=device, graphs=graphs)  # fmt: skip
        if info is not None:
            info["cuda_graph"] = bool(decoder and decoder.graphs)
            info["graph_error"] = decoder.graph_error if decoder else None
            info["decode_padding"] = (
                {"buckets": decoder.buckets, "context_tokens": span} if decoder else None
            )
        server = Server(model, max_seqs=max_seqs, max_batched_tokens=max_batched_tokens,
                        device=device, decoder=decoder)  # fmt: skip
        warm_up(server, prompt=prompt, output=output)
        for k, rate in enumerate(rates):
            times = poisson(rate, duration_s, random.Random(seed * 1000 + k))
            reqs = [Request(i, t, prompt, output) for i, t in enumerate(times)]
            iters = server.run(reqs, drain_s=drain_s)
            requests_out += [_record(r, rate) for r in reqs]
            iterations_out += [{"rate_per_s": rate, **it} for it in iters]
    return requests_out, iterations_out


def _record(r: Request, rate: float) -> dict:
    def num(x):
        return None if math.isnan(x) else x

    return {
        "rate_per_s": rate,
        "request_id": r.rid,
        "arrival_s": r.arrival_s,
        "first_token_s": num(r.first_token_s),
        "finish_s": num(r.finish_s),
        "prompt_tokens": r.prompt,
        "output_tokens": r.output,
    }
