"""What one serving iteration runs (``Batch``): its prefill pieces and decode sequences, the unit
``iteration`` prices and ``step_model`` memoizes."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class Batch:
    """What one iteration runs. ``prefill`` pieces are (new tokens, tokens already cached,
    sequences); decode sequences each add one token after their cached ones."""

    prefill: tuple[tuple[int, int, int], ...] = ()
    decode_seqs: int = 0
    decode_kv_tokens: int = 0  # sum over decode sequences of (cached tokens + 1)
    sampled: int | None = None  # sequences that emit a token (default: every sequence)

    @property
    def tokens(self) -> int:
        return sum(c * b for c, _, b in self.prefill) + self.decode_seqs

    @property
    def seqs(self) -> int:
        """Sequences running in the iteration: decoding or in a prefill piece."""
        return self.decode_seqs + sum(b for _, _, b in self.prefill)

    @property
    def samples(self) -> int:
        return self.seqs if self.sampled is None else self.sampled
