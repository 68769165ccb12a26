"""A small continuous-batching LLM server in torch, for measuring what serving really does.

The model is Llama-like with random weights (the decoder layer of the measurement contract:
RMSNorm, one fused q/k/v GEMM, rotate-half RoPE, SDPA, SwiGLU with a fused gate/up GEMM; an
embedding, a final norm and an untied LM head; greedy sampling). Shapes default to Llama-2-7B.

The KV cache is preallocated: ``max_seqs`` slots of ``max_len`` positions for every layer, one
tensor for keys and one for values ([layers, slots, kv heads, positions, head dim]). Running
sequences occupy slots 0..B-1; when one finishes, the last running sequence's cache moves into
its slot (one copy), so a decode step reads a contiguous block of slots.

Scheduling is iteration-level, as vLLM's default scheduler (and gpuplan's ``continuous``
policy) does it: at every iteration boundary, waiting prompts are admitted first come first
served while seats (``max_seqs``) and the token budget (``max_batched_tokens``) allow, and run
as a prefill-only iteration (prompts of equal length batched in one forward); otherwise every
running sequence decodes one token. A decode step attends over the longest running context with
a mask for the shorter ones. Every iteration ends with a device synchronization, so its end
time is when its tokens exist; a request's first token is the end of its prefill iteration and
its finish is the end of the iteration that emitted its last token. Everything runs under
``torch.inference_mode``, without torch.compile.

Decode on a padded batch (``PaddedDecoder``; what vLLM and TensorRT-LLM do to replay decode
iterations from CUDA graphs): the decode batch sizes are buckets 1, 2, 4, ... up to
``max_seqs`` (and ``max_seqs`` itself); a decode iteration of B sequences runs the smallest
bucket >= B, the padding rows reading token 0 at position 0 of the free cache slots after the
running ones (never read by a running sequence: a prefill rewrites a slot before it is used), and
every row attends over a fixed span of ``max_context`` positions with a mask hiding those past
its own position. On CUDA each bucket is captured once in a ``torch.cuda.CUDAGraph`` (one
shared memory pool) over static token and position buffers, and a decode iteration is two small
host-to-device copies and one ``replay()``; on the CPU the same padded step runs eagerly.
Prefill iterations always run eagerly. Without padding a decode step attends over the longest
running context.

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
import torch.nn.functional as F
from torch import nn

ROPE_BASE = 10_000.0  # Llama 2 (only the values of cos/sin depend on it)
LLAMA2_7B = {"hidden": 4096, "heads_q": 32, "heads_kv": 32, "ffn": 11008, "layers": 32,
             "vocab": 32000}  # fmt: skip
TINY = {"hidden": 64, "heads_q": 4, "heads_kv": 2, "ffn": 128, "layers": 2, "vocab": 128}


def rope_tables(positions: int, head_dim: int, *, device, dtype):
    """cos and sin [positions, head_dim] (rotate-half form, Su et al. 2021, eq. 34)."""
    inv = 1.0 / ROPE_BASE ** (torch.arange(0, head_dim, 2, device=device).float() / head_dim)
    freqs = torch.outer(torch.arange(positions, device=device).float(), inv)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rope(x, cos, sin):
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


class Layer(nn.Module):
    """One decoder layer; the cache tensors are views of this layer's slice."""

    def __init__(self, hidden: int, heads_q: int, heads_kv: int, ffn: int):
        super().__init__()
        self.hidden, self.hq, self.hkv = hidden, heads_q, heads_kv
        self.d = hidden // heads_q
        self.attn_norm = nn.Parameter(torch.ones(hidden))
        self.wqkv = nn.Linear(hidden, (heads_q + 2 * heads_kv) * self.d, bias=False)
        self.wo = nn.Linear(hidden, hidden, bias=False)
        self.mlp_norm = nn.Parameter(torch.ones(hidden))
        self.w_gate_up = nn.Linear(hidden, 2 * ffn, bias=False)
        self.w_down = nn.Linear(ffn, hidden, bias=False)

    def _qkv(self, x, cos, sin):
        b, s, _ = x.shape
        h = F.rms_norm(x, (self.hidden,), self.attn_norm, 1e-5)
        q, k, v = self.wqkv(h).split([self.hq * self.d, self.hkv * self.d, self.hkv * self.d], -1)
        q = q.view(b, s, self.hq, self.d).transpose(1, 2)  # (B, hq, S, D)
        k = k.view(b, s, self.hkv, self.d).transpose(1, 2)  # (B, hkv, S, D)
        v = v.view(b, s, self.hkv, self.d).transpose(1, 2)
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v

    def _out_and_mlp(self, x, o):
        b, s, _ = x.shape
        x = x + self.wo(o.transpose(1, 2).reshape(b, s, self.hidden))
        h = F.rms_norm(x, (self.hidden,), self.mlp_norm, 1e-5)
        gate, up = self.w_gate_up(h).chunk(2, dim=-1)
        return x + self.w_down(F.silu(gate) * up)

    def prefill(self, x, cos, sin, k_cache, v_cache, slots):
        """x [k, P, hidden] of k new prompts going into cache ``slots``."""
        q, k, v = self._qkv(x, cos, sin)
        p = x.shape[1]
        k_cache[slots, :, :p] = k
        v_cache[slots, :, :p] = v
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.hq != self.hkv)
        return self._out_and_mlp(x, o)

    def decode(self, x, cos, sin, k_cache, v_cache, rows, positions, span, mask):
        """x [B, 1, hidden] at ``positions``; the sequences are in slots 0..B-1."""
        q, k, v = self._qkv(x, cos, sin)
        k_cache[rows, :, positions] = k[:, :, 0]
        v_cache[rows, :, positions] = v[:, :, 0]
        b = x.shape[0]
        keys, values = k_cache[:b, :, :span], v_cache[:b, :, :span]
        o = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask,
                                           enable_gqa=self.hq != self.hkv)  # fmt: skip
        return self._out_and_mlp(x, o)


class Model(nn.Module):
    """Embedding, decoder layers, final norm, untied LM head, and the preallocated cache."""

    def __init__(self, shape: dict, *, max_seqs: int, max_len: int, device, dtype):
        super().__init__()
        hidden, vocab = shape["hidden"], shape["vocab"]
        with torch.device(device):
            self.embed = nn.Embedding(vocab, hidden)
            self.layers = nn.ModuleList(
                Layer(hidden, shape["heads_q"], shape["heads_kv"], shape["ffn"])
                for _ in range(shape["layers"])
            )
            self.norm = nn.Parameter(torch.ones(hidden))
            self.head = nn.Linear(hidden, vocab, bias=False)
        self.to(dtype)
        for p in self.parameters():  # random weights, small enough to stay finite
            nn.init.normal_(p, std=0.02) if p.dim() > 1 else nn.init.ones_(p)
        d = hidden // shape["heads_q"]
        cache = (shape["layers"], max_seqs, shape["heads_kv"], max_len, d)
        self.k_cache = torch.zeros(cache, device=device, dtype=dtype)
        self.v_cache = torch.zeros(cache, device=device, dtype=dtype)
        self.cos, self.sin = rope_tables(max_len, d, device=device, dtype=dtype)
        self.hidden = hidden
        # With a mask, PyTorch runs decode attention on its memory-efficient kernel; without
        # one, on the flash kernel, reading the whole span for every row (the positions past a
        # sequence's own hold stale cache entries: harmless for timing with random weights).
        self.mask_decode = True

    def _sample(self, x):
        h = F.rms_norm(x, (self.hidden,), self.norm, 1e-5)
        return self.head(h).argmax(dim=-1)

    def prefill(self, tokens, slots):
        """tokens [k, P] into cache ``slots`` [k]; the first generated token of each [k]."""
        p = tokens.shape[1]
        x = self.embed(tokens)
        cos, sin = self.cos[:p], self.sin[:p]
        for i, layer in enumerate(self.layers):
            x = layer.prefill(x, cos, sin, self.k_cache[i], self.v_cache[i], slots)
        return self._sample(x[:, -1])

    def decode(self, tokens, positions, span: int):
        """tokens [B] of the sequences in slots 0..B-1, at ``positions`` [B]; next tokens [B]."""
        b = tokens.shape[0]
        x = self.embed(tokens)[:, None]
        cos, sin = self.cos[positions][:, None, None], self.sin[positions][:, None, None]
        rows = torch.arange(b, device=tokens.device)
        keys = torch.arange(span, device=tokens.device)
        mask = (keys[None] <= positions[:, None])[:, None, None]  # (B, 1, 1, span)
        if not self.mask_decode:  # timing only: every row reads the whole span, flash kernel
            mask = None
        for i, layer in enumerate(self.layers):
            x = layer.decode(x, cos, sin, self.k_cache[i], self.v_cache[i], rows, positions,
                             span, mask)  # fmt: skip
        return self._sample(x[:, 0])

    def move_slot(self, src: int, dst: int, length: int) -> None:
        self.k_cache[:, dst, :, :length] = self.k_cache[:, src, :, :length]
        self.v_cache[:, dst, :, :length] = self.v_cache[:, src, :, :length]


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
