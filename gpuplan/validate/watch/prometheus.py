"""A serving engine's Prometheus ``/metrics``, read into the figures a serving plan priced.

The text exposition format (https://prometheus.io/docs/instrumenting/exposition_formats/): one
sample a line, ``name{label="v",...} value [timestamp]``, ``#`` lines are comments. Series of one
name are summed over their labels (one engine's ranks, its model names).

Metric names, per engine (the names their sources register):
- vLLM (``vllm/v1/metrics/loggers.py``; docs/design/metrics.md): histograms
  ``vllm:time_to_first_token_seconds``, ``vllm:inter_token_latency_seconds`` (older:
  ``vllm:time_per_output_token_seconds``), ``vllm:e2e_request_latency_seconds``; gauges
  ``vllm:num_requests_running``, ``vllm:num_requests_waiting``, ``vllm:kv_cache_usage_perc``
  (older: ``vllm:gpu_cache_usage_perc``), a fraction; counters ``vllm:generation_tokens_total``,
  ``vllm:prompt_tokens_total``, ``vllm:request_success_total``;
- SGLang (``python/sglang/srt/metrics/collector.py``): histograms
  ``sglang:time_to_first_token_seconds``, ``sglang:inter_token_latency_seconds`` (older:
  ``sglang:time_per_output_token_seconds``), ``sglang:e2e_request_latency_seconds``; gauges
  ``sglang:num_running_reqs``, ``sglang:num_queue_reqs``, ``sglang:token_usage``; counters
  ``sglang:generation_tokens_total``, ``sglang:prompt_tokens_total``, ``sglang:num_requests_total``.

Between two polls, a histogram's mean is the change of its ``_sum`` over the change of its
``_count``; a counter's rate its change over the seconds between the polls.
"""

from __future__ import annotations

import math
import re
import urllib.error
import urllib.request
from dataclasses import dataclass

from gpuplan.errors import GpuplanError

SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")
# figure: names in the order tried (the first an engine exposes is read)
HISTOGRAMS = {
    "ttft_s": ("vllm:time_to_first_token_seconds", "sglang:time_to_first_token_seconds"),
    "tpot_s": ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds",
               "sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds"),
    "e2e_s": ("vllm:e2e_request_latency_seconds", "sglang:e2e_request_latency_seconds"),
}  # fmt: skip
GAUGES = {
    "running": ("vllm:num_requests_running", "sglang:num_running_reqs"),
    "waiting": ("vllm:num_requests_waiting", "sglang:num_queue_reqs"),
    "kv_use": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage"),
}
COUNTERS = {
    "output_tokens": ("vllm:generation_tokens_total", "sglang:generation_tokens_total"),
    "requests": ("vllm:request_success_total", "sglang:num_requests_total"),
}
TIMEOUT_S = 5.0


def parse_text(text: str) -> dict[str, float]:
    """Every sample's value summed over its labels, by name."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        if m is None:
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        if math.isfinite(value):
            out[m.group(1)] = out.get(m.group(1), 0.0) + value
    return out


def fetch(url: str) -> dict[str, float]:
    """One poll of ``url``; an endpoint that does not answer is a one-line GpuplanError."""
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as resp:  # noqa: S310 - a URL the user gave
            text = resp.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError, ValueError) as err:
        raise GpuplanError(f"SOURCE={url!r} does not answer: {getattr(err, 'reason', err)}") from None
    return parse_text(text)


def _first(sample: dict[str, float], names: tuple[str, ...], suffix: str = "") -> float | None:
    for name in names:
        if name + suffix in sample:
            return sample[name + suffix]
    return None


@dataclass(frozen=True, slots=True)
class Poll:
    """The figures between two polls ``dt_s`` apart (None: not exposed, or nothing finished)."""

    t_s: float
    ttft_s: float | None
    tpot_s: float | None
    e2e_s: float | None
    running: float | None
    waiting: float | None
    kv_use: float | None
    output_tokens_per_s: float | None
    requests_per_s: float | None


def between(before: dict[str, float], after: dict[str, float], dt_s: float, t_s: float) -> Poll:
    """The figures of the interval between two samples."""
    means = {}
    for key, names in HISTOGRAMS.items():
        s0, s1 = _first(before, names, "_sum"), _first(after, names, "_sum")
        c0, c1 = _first(before, names, "_count"), _first(after, names, "_count")
        ok = None not in (s0, s1, c0, c1) and c1 > c0
        means[key] = (s1 - s0) / (c1 - c0) if ok else None
    rates = {}
    for key, names in COUNTERS.items():
        a, b = _first(before, names), _first(after, names)
        rates[key] = (b - a) / dt_s if a is not None and b is not None and dt_s > 0 else None
    gauges = {key: _first(after, names) for key, names in GAUGES.items()}
    return Poll(t_s=t_s, **means, **gauges, output_tokens_per_s=rates["output_tokens"],
                requests_per_s=rates["requests"])  # fmt: skip
