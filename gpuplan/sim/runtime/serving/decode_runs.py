"""Decode-only iterations of a ``StepModel``: one, and runs of them in closed form.

A run of decode-only iterations with a fixed set of sequences has a closed form: the cached
tokens grow by the number of sequences each iteration, so the total of k iterations is a sum
of ``A + b j + max(0, H - o (A + b j))`` terms (the launch model: the CPU's issue time H
shows where the share ``o`` of the GPU's time does not hide it; ``max(A + b j, H)`` when the
CPU runs ahead, o = 1). ``decode_run_s`` and ``decode_iterations_until`` use it, which lets the
simulator jump from event to event instead of stepping every iteration. Under the deployment's
decode padding (``Deployment.padded_decode``) every decode-only time is that of the padded
batch; with a fixed attention span the cost per iteration of such a run is constant (b = 0).
"""

from __future__ import annotations

import math

import numpy as np

# ``_run_terms``' count of host-bound iterations where the device time never catches up with
# the host's (no growth, or none of it hides the host): more than any run takes
_ALWAYS_HOST_BOUND = 1 << 62


class DecodeRuns:
    """``StepModel``'s decode-only iterations (mixed in: it reads the model's memoized parts and
    the launch terms ``_dec_gap_s``, ``_dec_host_s`` and ``_dec_overlap`` it sets up)."""

    def _decode_kernels_s(self, seqs: int, kv_tokens: float) -> float:
        return self.token_s(seqs) + self.sample_s(seqs) + self.decode_attention_s(seqs, kv_tokens)

    def decode_s(self, seqs: int, kv_tokens: int) -> float:
        """One decode-only iteration of ``seqs`` sequences reading ``kv_tokens`` in all."""
        a = self._decode_kernels_s(*self.dep.padded_decode(seqs, kv_tokens)) + self._dec_gap_s
        cost = run_costs(a, self._dec_host_s, self._dec_overlap)
        return cost + self._overhead_s + self._seq_s * seqs

    def _run_terms(self, seqs: int, kv_tokens: int) -> tuple[float, float, float, float, int]:
        """(A, b, H, o, j*): iteration j of a run has device time A + b j and costs
        A + b j + max(0, H - o (A + b j)) + overhead; the first j* iterations are host-bound
        (cost H + (1 - o)(A + b j)). The last run's terms are kept: a run asks for its own
        again at each request it finishes and at an interrupt."""
        if self._last_run[0] == (seqs, kv_tokens):
            return self._last_run[1]
        terms = self._new_run_terms(seqs, kv_tokens)
        self._last_run = ((seqs, kv_tokens), terms)
        return terms

    def _new_run_terms(self, seqs: int, kv_tokens: int) -> tuple[float, float, float, float, int]:
        rows, padded_kv = self.dep.padded_decode(seqs, kv_tokens)
        a = self._decode_kernels_s(rows, padded_kv) + self._dec_gap_s
        grow = self._growth(seqs)  # the real sequences read one more token each iteration
        b = self.decode_attention_terms(rows)[1] * grow if grow else 0.0
        h, o = self._dec_host_s, self._dec_overlap
        if o * a >= h:
            return a, b, h, o, 0
        flat = math.ceil((h / o - a) / b) if b > 0 and o > 0 else _ALWAYS_HOST_BOUND
        return a, b, h, o, flat

    def _growth(self, seqs: int) -> int:
        """Tokens a decode run's ``seqs`` real sequences add to its reads each iteration: one
        each, or none when the deployment reads a fixed span (``decode_context_tokens``)."""
        return seqs if self.dep.decode_context_tokens is None else 0

    def decode_run_s(self, seqs: int, kv_tokens: int, iterations: int) -> float:
        """Total time of ``iterations`` decode-only iterations of the same ``seqs`` sequences,
        reading ``kv_tokens`` in the first and ``seqs`` more in each next one."""
        if iterations <= 0:
            return 0.0
        if self.windowed:  # no closed form once the window caps the reads: iteration by iteration
            grow = self._growth(seqs)
            return sum(self.decode_s(seqs, kv_tokens + j * grow) for j in range(iterations))
        a, b, h, o, flat = self._run_terms(seqs, kv_tokens)
        j = min(flat, iterations)
        k = iterations
        rising = (k - j) * a + b * (k * (k - 1) - j * (j - 1)) / 2
        c = 1.0 - o  # the host-bound iterations' share of their device time
        held = (h * j + c * (a * j + b * j * (j - 1) / 2)) if c else h * j
        return held + rising + k * (self._overhead_s + self._seq_s * seqs)

    def decode_iterations_until(self, seqs: int, kv_tokens: int, elapsed_s: float) -> int:
        """The fewest iterations (at least one) of such a run that take ``elapsed_s`` or more."""
        if elapsed_s <= 0:
            return 1
        if self.windowed:
            grow = self._growth(seqs)
            n, total = 0, 0.0
            while total < elapsed_s:
                total += self.decode_s(seqs, kv_tokens + n * grow)
                n += 1
            return max(n, 1)
        a, b, h, o, flat = self._run_terms(seqs, kv_tokens)
        over = self._overhead_s + self._seq_s * seqs
        c = 1.0 - o
        held_s = self.decode_run_s(seqs, kv_tokens, flat) if flat < _ALWAYS_HOST_BOUND else math.inf
        if held_s >= elapsed_s:  # within the host-bound iterations: cost h + c a + o + c b j
            n = _first_count(h + c * a + over, c * b, elapsed_s)
        else:
            n = flat + _first_count(a + b * flat + over, b, elapsed_s - held_s)
        n = max(n, 1)
        while n > 1 and self.decode_run_s(seqs, kv_tokens, n - 1) >= elapsed_s:
            n -= 1
        while self.decode_run_s(seqs, kv_tokens, n) < elapsed_s:
            n += 1
        return n



def _first_count(first_s: float, slope_s: float, total_s: float) -> int:
    """About the fewest n with sum over j < n of (first_s + slope_s j) >= total_s (the caller
    corrects it by one either way)."""
    if slope_s > 0:
        half = first_s - slope_s / 2
        return math.ceil((-half + math.sqrt(half * half + 2 * slope_s * total_s)) / slope_s)
    return math.ceil(total_s / first_s)


def run_costs(device_s, host_s: float, overlap: float):
    """Iteration costs of device times ``device_s`` (a number or an array) under the launch
    model: ``device_s + max(0, host_s - overlap device_s)``, i.e. ``max(device_s, host_s)``
    when the CPU runs ahead (``overlap`` 1)."""
    if overlap == 1.0:
        return np.maximum(device_s, host_s) if isinstance(device_s, np.ndarray) \
            else max(device_s, host_s)
    return device_s + np.maximum(0.0, host_s - overlap * device_s)
