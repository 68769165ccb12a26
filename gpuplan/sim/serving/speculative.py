"""Speculative decoding: a cheap drafter proposes ``k`` tokens a sequence, the target model
verifies them in one iteration, and keeps the accepted prefix plus one token of its own.

With a per-token acceptance rate ``a`` (each drafted token accepted independently, given the
ones before it), one verification emits on average ``(1 - a^(k+1)) / (1 - a)`` tokens a
sequence, ``k + 1`` at ``a = 1`` (Leviathan et al., "Fast Inference from Transformers via
Speculative Decoding", ICML 2023, eq. 1). A step costs the drafting and the verification:

- verification: one iteration of the target over ``k + 1`` new tokens a sequence after its
  cached ones (a prefill piece of ``k + 1`` tokens for each sequence, every position sampled),
  replayed from a CUDA graph where the deployment captures decode (vLLM captures "uniform
  decode" batches of ``1 + num_spec_tokens`` queries: docs/design/cuda_graphs.md);
- drafting, by method:
  ``ngram`` - prompt lookup (vLLM's ``ngram`` speculator; Saxena 2023): a CPU match over the
  context, no GPU work (its CPU time is not priced);
  ``eagle`` - EAGLE (Li et al., ICML 2024): a one-block draft head on the target's features and
  the target's LM head, run ``k`` times: ``k`` x (one block's decode and the LM head);
  ``draft`` - a separate small model (``draft_step``), ``k`` decode iterations of it.

``speculative_decode`` returns the step's parts and the time per output token.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuplan.errors import GpuplanError, check_choice, check_positive

METHODS = ("ngram", "eagle", "draft")


@dataclass(frozen=True, slots=True, kw_only=True)
class Speculation:
    """``k`` drafted tokens a step by ``method``, each accepted with probability ``acceptance``."""

    method: str
    k: int
    acceptance: float

    def __post_init__(self) -> None:
        check_choice("speculative method", self.method, METHODS)
        check_positive("speculative k", self.k)
        a = self.acceptance
        if isinstance(a, bool) or not isinstance(a, int | float) or not 0 <= a <= 1:
            raise GpuplanError(f"acceptance={a!r} is invalid: give a rate in [0, 1]")

    @property
    def tokens_per_step(self) -> float:
        """Expected tokens a sequence emits per verification (module docstring)."""
        a, k = self.acceptance, self.k
        return float(k + 1) if a == 1 else (1 - a ** (k + 1)) / (1 - a)


def parse_speculation(text: str) -> Speculation:
    """``METHOD:K:ACCEPTANCE``, e.g. ``eagle:4:0.7``."""
    parts = text.split(":")
    if len(parts) != 3 or not parts[1].isdigit():
        raise GpuplanError(f"--speculative {text!r} is invalid: give METHOD:K:ACCEPTANCE with "
                           f"METHOD one of {', '.join(METHODS)}, e.g. eagle:4:0.7")  # fmt: skip
    try:
        acceptance = float(parts[2])
    except ValueError:
        raise GpuplanError(f"--speculative {text!r}: acceptance={parts[2]!r} is invalid: give a "
                           "rate in [0, 1]") from None  # fmt: skip
    return Speculation(method=parts[0], k=int(parts[1]), acceptance=acceptance)


def _draft_s(spec: Speculation, step, draft_step, seqs: int, kv_tokens: float) -> float:
    if spec.method == "ngram":
        return 0.0
    if spec.method == "eagle":
        one_block = step.token_s(seqs) / step.dep.model.n_layers
        attention = step.decode_attention_s(seqs, kv_tokens) / step.dep.model.n_layers
        return spec.k * (one_block + attention + step.sample_s(seqs))
    if draft_step is None:
        raise GpuplanError("speculative method 'draft' needs a draft model (--draft-model)")
    return sum(draft_step.decode_s(seqs, kv_tokens + j * seqs) for j in range(spec.k))


def speculative_decode(step, spec: Speculation, *, seqs: int, context: int,
                       draft_step=None) -> dict[str, float]:  # fmt: skip
    """One speculative step of ``seqs`` sequences with ``context`` tokens cached each, on the
    target's ``StepModel`` (and the draft model's): its parts and the time per output token."""
    check_positive("seqs", seqs)
    check_positive("context", context, allow_zero=True)
    n = spec.k + 1
    verify_s = step.mixed_s(((n, context, seqs),), 0, 0, seqs * n, replay=step.dep.cuda_graph)
    draft_s = _draft_s(spec, step, draft_step, seqs, seqs * (context + 1))
    tokens = spec.tokens_per_step
    step_s = verify_s + draft_s
    return {"verify_s": verify_s, "draft_s": draft_s, "step_s": step_s,
            "tokens_per_step": tokens, "tpot_s": step_s / tokens,
            "tokens_per_s": seqs * tokens / step_s}  # fmt: skip
