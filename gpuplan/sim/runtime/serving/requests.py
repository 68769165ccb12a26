"""Requests offered to a serving system: arrival times and prompt and output lengths, seeded.

Arrivals:
- ``poisson``: exponential gaps at ``rate_per_s`` (the open-loop load of vLLM's and Vidur's
  benchmarks); ``rate_per_s = inf`` offers every request at time zero (an offline throughput
  run, as ``trtllm-bench`` and vLLM's throughput benchmark do);
- ``gamma``: bursty, gamma-distributed gaps of the same mean with coefficient of variation
  ``cv`` (shape 1/cv^2; cv = 1 is Poisson; DistServe and Splitwise use gamma arrivals for
  burstiness).

Lengths (tokens): a fixed number, ``uniform:LO:HI``, ``lognormal:MEDIAN:P90[:MAX]`` (a lognormal
fitted to a median and a 90th percentile, clipped), or the preset ``conversation``: lognormal
fits to the conversation trace of the Azure LLM inference trace 2023 (Patel et al., "Splitwise",
ISCA 2024) as Vidur ships it (``data/processed_traces/splitwise_conv.csv``): over its first 242
requests prompts have a median of 894 and a 90th percentile of 1314 tokens, outputs 197 and
425; a request's prompt is clipped so that prompt + output stays within 4,096 tokens.

Traces: CSV or JSON Lines, one request per row, with ``arrival_s`` (or Vidur's ``arrived_at``),
``prompt_tokens`` (or ``num_prefill_tokens``) and ``output_tokens`` (or ``num_decode_tokens``).
A trace without arrival times takes them from the rate.

Images (vision-language models): a request may carry ``images`` and the ``image_tokens`` the
model makes of them (trace columns; synthetic workloads get the same images for every request
from ``with_images``); ``serving.vision.prepare_images`` turns them into the deployment's terms
(longer prompts for Qwen2-VL-style models, the encoder's seconds per request in ``encoder_s``).

Shared prefixes (prefix caching): a request may name a ``prefix_id`` and the ``prefix_tokens``
its prompt shares with every other request of that id (a system prompt, a few-shot template, a
conversation's history); traces carry them as columns, synthetic workloads draw them with
``shared_prefix=(TOKENS, GROUPS)``: each request joins one of GROUPS prefixes, uniformly, and
shares its first min(TOKENS, prompt - 1) tokens (from a generator of its own, so the arrivals
and lengths of a seed do not move).
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gpuplan.errors import (
    GpuplanError,
    check_choice,
    check_kind,
    check_positive,
    check_whole,
    shown,
)
from gpuplan.limits import MAX_CV, MAX_DIM, MAX_REQUESTS, MAX_SEED

ARRIVALS = ("poisson", "gamma")
CONVERSATION_MAX_TOKENS = 4096
# (median, 90th percentile) in tokens, see the module docstring
CONVERSATION_PROMPT = (894.0, 1314.0)
CONVERSATION_OUTPUT = (197.0, 425.0)
Z90 = 1.2815515655446004  # standard normal 90th percentile
_ALIASES = {
    "arrival_s": ("arrival_s", "arrived_at", "arrived_at_s", "timestamp_s"),
    "prompt_tokens": ("prompt_tokens", "num_prefill_tokens", "input_tokens"),
    "output_tokens": ("output_tokens", "num_decode_tokens", "generated_tokens"),
    "prefix_id": ("prefix_id",),
    "prefix_tokens": ("prefix_tokens", "shared_prefix_tokens"),
    "image_tokens": ("image_tokens", "num_image_tokens"),
    "images": ("images", "num_images"),
}


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class Workload:
    """Requests in arrival order: arrays of the same length."""

    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    prefix_id: np.ndarray | None = None  # shared-prefix group of each request (module docstring)
    prefix_tokens: np.ndarray | None = None  # tokens of its prompt that group shares
    image_tokens: np.ndarray | None = None  # tokens its images give the model (module docstring)
    images: np.ndarray | None = None  # images each request carries
    encoder_s: np.ndarray | None = None  # the deployment's encoder seconds (prepare_images)

    def __post_init__(self) -> None:
        self._check_lengths()
        self._check_prefixes()
        self._check_images()

    def _check_images(self) -> None:
        if self.image_tokens is None:
            if self.images is not None:
                raise GpuplanError("images need image_tokens (the tokens the model makes of them)")
            return
        for name in ("image_tokens", "images"):
            values = getattr(self, name)
            if values is None:
                continue
            if len(values) != self.n:
                raise GpuplanError(f"{name} must have one entry per request ({self.n})")
            bad = np.flatnonzero((values < 0) | (values != np.floor(values)))
            if len(bad):
                i = int(bad[0])
                raise GpuplanError(f"request {i + 1}: {name}={values[i].item()!r} is invalid: it "
                                   "must be a whole number, zero or more")
        if self.images is not None:
            bad = np.flatnonzero((self.images == 0) != (self.image_tokens == 0))
            if len(bad):
                i = int(bad[0])
                raise GpuplanError(f"request {i + 1}: images={int(self.images[i])} and "
                                   f"image_tokens={int(self.image_tokens[i])} disagree: both are "
                                   "zero or neither")

    @property
    def images_per_request(self) -> np.ndarray:
        """Images of each request: the ``images`` column, else one where it has image tokens."""
        if self.images is not None:
            return self.images
        if self.image_tokens is None:  # a text workload
            return np.zeros(self.n, dtype=np.int64)
        return (self.image_tokens > 0).astype(np.int64)

    def _check_prefixes(self) -> None:
        if (self.prefix_id is None) != (self.prefix_tokens is None):
            raise GpuplanError("give prefix_id and prefix_tokens together (or neither)")
        if self.prefix_id is None:
            return
        if len(self.prefix_id) != self.n or len(self.prefix_tokens) != self.n:
            raise GpuplanError("prefix_id and prefix_tokens must have one entry per request")
        tokens = np.asarray(self.prefix_tokens)
        if np.any(tokens < 0) or np.any(tokens != np.floor(tokens)):
            raise GpuplanError("prefix_tokens must be whole numbers, zero or more")
        bad = np.flatnonzero(tokens >= self.prompt_tokens)
        if len(bad):
            i = int(bad[0])
            raise GpuplanError(f"request {i + 1}: prefix_tokens={int(tokens[i])} is invalid: it "
                               f"must be less than its prompt_tokens={int(self.prompt_tokens[i])}")

    def _check_lengths(self) -> None:
        n = len(self.arrival_s)
        if len(self.prompt_tokens) != n or len(self.output_tokens) != n:
            raise GpuplanError(
                f"workload arrays differ in length: arrival_s {n}, prompt_tokens "
                f"{len(self.prompt_tokens)}, output_tokens {len(self.output_tokens)}"
            )
        if n == 0:
            raise GpuplanError("the workload has no requests: give at least one")
        _check_counts("prompt_tokens", self.prompt_tokens)
        _check_counts("output_tokens", self.output_tokens)
        if not np.all(np.isfinite(self.arrival_s)) or np.any(self.arrival_s < 0):
            raise GpuplanError("arrival_s must be finite and zero or more for every request")
        if np.any(np.diff(self.arrival_s) < 0):
            raise GpuplanError("arrival_s must not decrease: give requests in arrival order")

    @property
    def n(self) -> int:
        return len(self.arrival_s)


def _check_counts(name: str, values: np.ndarray) -> None:
    bad = np.flatnonzero(values < 1)
    if len(bad):
        raise GpuplanError(
            f"{name}={int(values[bad[0]])} (request {int(bad[0])}) is invalid: every request "
            "needs at least 1 token"
        )


def arrivals(
    rate_per_s: float, n: int, rng: np.random.Generator, *, kind: str = "poisson", cv: float = 1.0
) -> np.ndarray:
    """Arrival times of ``n`` requests at ``rate_per_s`` (inf: all at time zero)."""
    check_choice("arrival", kind, ARRIVALS)
    check_positive("rate_per_s", rate_per_s, allow_inf=True)
    check_whole("requests", n, high=MAX_REQUESTS)
    if math.isinf(rate_per_s):
        return np.zeros(n)
    if kind == "poisson":
        gaps = rng.exponential(1.0 / rate_per_s, n)
    else:
        check_positive("cv", cv)
        if cv > MAX_CV:
            raise GpuplanError(f"cv={cv!r} is invalid: it must be at most {MAX_CV:g}")
        shape = 1.0 / cv**2
        gaps = rng.gamma(shape, 1.0 / (rate_per_s * shape), n)
    out = np.cumsum(gaps)
    return out - out[0]  # the first request arrives at time zero


def lengths(spec: int | str, n: int, rng: np.random.Generator, *, what: str) -> np.ndarray:
    """``n`` token counts from a spec: a number, ``uniform:LO:HI``, ``lognormal:MEDIAN:P90[:MAX]``."""
    if isinstance(spec, bool) or not isinstance(spec, int | np.integer | str):
        raise GpuplanError(f"{what}={shown(spec)} is invalid: give a whole number of tokens or a spec")
    if isinstance(spec, int | np.integer):
        check_whole(what, int(spec), high=MAX_DIM)
        return np.full(n, int(spec), dtype=np.int64)
    text = str(spec).strip()
    if text.isdigit():
        return lengths(int(text), n, rng, what=what)
    kind, _, rest = text.partition(":")
    args = _numbers(rest, what, text) if rest else []
    if kind == "uniform" and len(args) == 2 and 1 <= args[0] <= args[1]:
        return rng.integers(int(args[0]), int(args[1]) + 1, n)
    if kind == "lognormal" and len(args) in (2, 3) and 0 < args[0] < args[1]:
        top = args[2] if len(args) == 3 else math.inf
        return lognormal(args[0], args[1], n, rng, top=top)
    raise GpuplanError(
        f"{what}={text!r} is invalid: give a whole number of tokens, uniform:LO:HI, "
        "lognormal:MEDIAN:P90[:MAX] or conversation"
    )


def _numbers(text: str, what: str, whole: str) -> list[float]:
    try:
        parts = [float(x) for x in text.split(":")]
    except ValueError:
        raise GpuplanError(f"{what}={whole!r} is invalid: its parts must be numbers") from None
    if not all(math.isfinite(x) and abs(x) <= MAX_DIM for x in parts):
        raise GpuplanError(
            f"{what}={whole!r} is invalid: its parts must be finite token counts of at most "
            f"{MAX_DIM:,}"
        )
    return parts


def lognormal(median: float, p90: float, n: int, rng, *, top: float = math.inf) -> np.ndarray:
    """Lognormal token counts with this median and 90th percentile, at least 1, at most top."""
    sigma = math.log(p90 / median) / Z90
    draws = rng.lognormal(math.log(median), sigma, n)
    return np.clip(np.rint(draws), 1, top).astype(np.int64)


def conversation(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(prompt, output) tokens of the ``conversation`` preset (module docstring)."""
    output = lognormal(*CONVERSATION_OUTPUT, n, rng, top=CONVERSATION_MAX_TOKENS // 2)
    prompt = lognormal(*CONVERSATION_PROMPT, n, rng, top=CONVERSATION_MAX_TOKENS)
    return np.minimum(prompt, CONVERSATION_MAX_TOKENS - output), output


def make_workload(
    *,
    rate_per_s: float,
    n: int,
    prompt_tokens: int | str,
    output_tokens: int | str,
    seed: int = 0,
    arrival: str = "poisson",
    cv: float = 1.0,
    shared_prefix: tuple[int, int] | None = None,
) -> Workload:
    """A seeded synthetic workload; ``prompt_tokens`` and ``output_tokens`` are length specs,
    or both ``conversation``; ``shared_prefix`` (TOKENS, GROUPS) as the module docstring says."""
    check_whole("seed", seed, low=0, high=MAX_SEED)
    rng = np.random.default_rng(seed)
    times = arrivals(rate_per_s, n, rng, kind=arrival, cv=cv)
    if "conversation" in (prompt_tokens, output_tokens):
        prompt, output = conversation(n, rng)
        if prompt_tokens != "conversation":
            prompt = lengths(prompt_tokens, n, rng, what="prompt_tokens")
        if output_tokens != "conversation":
            output = lengths(output_tokens, n, rng, what="output_tokens")
    else:
        prompt = lengths(prompt_tokens, n, rng, what="prompt_tokens")
        output = lengths(output_tokens, n, rng, what="output_tokens")
    prefixes = {}
    if shared_prefix is not None:
        check_kind("shared_prefix", shared_prefix, (tuple, list))
        if len(shared_prefix) != 2:
            raise GpuplanError(f"shared_prefix={shown(shared_prefix)} is invalid: give (TOKENS, "
                               "GROUPS)")  # fmt: skip
        tokens, groups = shared_prefix
        check_whole("shared prefix tokens", tokens, high=MAX_DIM)
        check_whole("shared prefix groups", groups, high=MAX_DIM)
        own = np.random.default_rng([seed, 1])  # not the arrivals' and lengths' stream
        prefixes = {"prefix_id": own.integers(0, groups, size=n),
                    "prefix_tokens": np.minimum(tokens, np.asarray(prompt) - 1)}  # fmt: skip
    return Workload(arrival_s=times, prompt_tokens=prompt, output_tokens=output, **prefixes)


def with_images(workload: Workload, *, images: int, image_tokens: int) -> Workload:
    """``workload`` with ``images`` images, of ``image_tokens`` tokens in all, on every request."""
    from dataclasses import replace

    check_kind("workload", workload, Workload)
    check_whole("images per request", images, low=0, high=MAX_DIM)
    check_whole("image tokens per request", image_tokens, low=0, high=MAX_DIM)
    n = workload.n
    return replace(workload, images=np.full(n, images, dtype=np.int64),
                   image_tokens=np.full(n, image_tokens, dtype=np.int64))


def read_trace(
    path: str | Path, *, rate_per_s: float | None = None, seed: int = 0, limit: int | None = None
) -> Workload:
    """A workload from a CSV or JSON Lines trace (module docstring for the columns)."""
    rows = _read_rows(Path(path))[:limit]
    if not rows:
        raise GpuplanError(f"trace {str(path)!r} has no requests")
    cols = {key: _column(rows, key, path) for key in _ALIASES}
    if cols["arrival_s"] is None:
        if rate_per_s is None:
            raise GpuplanError(
                f"trace {str(path)!r} has no arrival times (arrival_s or arrived_at): give --rate"
            )
        cols["arrival_s"] = arrivals(rate_per_s, len(rows), np.random.default_rng(seed))
    for key in ("prompt_tokens", "output_tokens"):
        if cols[key] is None:
            raise GpuplanError(f"trace {str(path)!r} has no {key} column ({_ALIASES[key]})")
    times = np.asarray(cols["arrival_s"], dtype=float)
    order = np.argsort(times, kind="stable")
    prefixes = {}
    if cols["prefix_id"] is not None or cols["prefix_tokens"] is not None:
        if cols["prefix_id"] is None or cols["prefix_tokens"] is None:
            raise GpuplanError(f"trace {str(path)!r}: give prefix_id and prefix_tokens columns "
                               "together")  # fmt: skip
        prefixes = {k: np.asarray(cols[k], dtype=np.int64)[order]
                    for k in ("prefix_id", "prefix_tokens")}  # fmt: skip
    for key in ("image_tokens", "images"):  # a VLM's requests with images
        if cols[key] is not None:
            values = np.asarray(cols[key], dtype=float)[order]
            if np.any(values != np.floor(values)):
                raise GpuplanError(f"trace {str(path)!r}: {key} must be whole numbers")
            prefixes[key] = values.astype(np.int64)
    return Workload(
        arrival_s=times[order] - times[order][0],
        prompt_tokens=np.asarray(cols["prompt_tokens"], dtype=np.int64)[order],
        output_tokens=np.asarray(cols["output_tokens"], dtype=np.int64)[order],
        **prefixes,
    )


def _read_rows(path: Path) -> list[dict]:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise GpuplanError(
            f"trace {str(path)!r} is not UTF-8 text (byte {err.start} is "
            f"{err.object[err.start]:#04x}): give a CSV or JSON Lines file"
        ) from None
    if path.suffix in (".jsonl", ".json") or text.lstrip().startswith("{"):
        rows = []
        for line_no, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise GpuplanError(f"{path} line {line_no}: not JSON ({err.msg})") from None
        return rows
    return list(csv.DictReader(text.splitlines()))


def _column(rows: list[dict], key: str, path) -> list[float] | None:
    name = next((a for a in _ALIASES[key] if a in rows[0]), None)
    if name is None:
        return None
    out = []
    for i, row in enumerate(rows, start=1):
        try:
            out.append(float(row[name]))
        except (KeyError, TypeError, ValueError):
            raise GpuplanError(
                f"trace {str(path)!r} request {i}: {name}={row.get(name)!r} is not a number"
            ) from None
    return out
