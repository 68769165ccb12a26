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
  ``draft`` - a separate small model (``draft_step``), ``k`` decode iterations of it;
  ``mtp`` - the model's own multi-token-prediction module run ``k`` times (``mtp``).

Acceptance may be given per position (``Speculation.acceptance`` a tuple of ``k`` rates, each
the rate at which position ``i`` is accepted given the ones before it were): a step then emits
``1 + sum_i prod_{j <= i} a_j`` tokens a sequence, the scalar form's sum at ``a_j = a``.

``speculative_decode`` returns the step's parts and the time per output token.

Inside the serving simulator (``Speculator``, ``gpuplan serve --speculative``), every iteration
that decodes is such a step for all its decoding sequences: the drafter's cost, then one target
pass over ``k + 1`` tokens a sequence (with the iteration's prefill chunks, if any), the
sequences' mean cached context standing for each one's (the verification reads the KV cache,
which is linear in the context). The tokens a step emits are the expectation, taken in lockstep
by the whole batch: step ``s`` of a replica emits ``floor((s + 1) E) - floor(s E)`` tokens a
sequence (``E = tokens_per_step``), so ``s`` steps emit ``floor(s E)``, within one token of the
expectation, and acceptance 0 emits one token a step. Chosen over a per-sequence draw from the
seeded RNG because the run is then exact to its expectation (a request of hundreds of tokens
averages out the draws' spread; the spread between sequences in one batch is what is left out)
and the lazily advanced decode set (``decode_set.DecodeSet``) keeps every sequence at the same count.
A sequence's last step may accept more than it needs: the surplus is dropped (the request is
done). The KV cache also holds the drafter's: a draft model's weights and cache per token, or an
EAGLE head's block and its one layer of cache (``extra_weights_bytes``, ``kv_bytes_per_token``);
the k proposed tokens' slots are not reserved ahead (vLLM's lookahead slots). Under chunked
prefill a decoding sequence takes ``k + 1`` tokens of the iteration's budget
(``Policy.decode_tokens``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuplan.errors import GpuplanError, check_choice, check_positive
from gpuplan.sim.runtime.serving.mtp import (
    ACCEPT_SOURCE,
    MtpDraft,
    check_mtp,
    default_acceptance,
    mtp_kv_bytes_per_token,
    mtp_weights_bytes,
)

METHODS = ("ngram", "eagle", "draft", "mtp")


def _is_rate(a) -> bool:
    return not isinstance(a, bool) and isinstance(a, int | float) and 0 <= a <= 1


@dataclass(frozen=True, slots=True, kw_only=True)
class Speculation:
    """``k`` drafted tokens a step by ``method``, each accepted with probability ``acceptance``
    (one rate, or a tuple of ``k``: each position's given the ones before it)."""

    method: str
    k: int
    acceptance: float | tuple[float, ...]
    source: str = ""  # where a default acceptance comes from ("" when given)

    def __post_init__(self) -> None:
        check_choice("speculative method", self.method, METHODS)
        check_positive("speculative k", self.k)
        a = self.acceptance
        rates = a if isinstance(a, tuple) else (a,)
        if not rates or not all(_is_rate(r) for r in rates):
            raise GpuplanError(f"acceptance={a!r} is invalid: give a rate in [0, 1]")
        if isinstance(a, tuple) and len(a) != self.k:
            raise GpuplanError(f"acceptance={','.join(f'{r:g}' for r in a)} gives {len(a)} rates "
                               f"for k={self.k} draft tokens: give one rate, or one a position")  # fmt: skip

    @property
    def rates(self) -> tuple[float, ...]:
        """Each position's acceptance given the ones before it accepted."""
        a = self.acceptance
        return tuple(float(r) for r in a) if isinstance(a, tuple) else (float(a),) * self.k

    @property
    def tokens_per_step(self) -> float:
        """Expected tokens a sequence emits per verification: the target's own plus the
        product-sum of the per-position acceptance (module docstring)."""
        a, k = self.acceptance, self.k
        if not isinstance(a, tuple):
            return float(k + 1) if a == 1 else (1 - a ** (k + 1)) / (1 - a)
        tokens, reach = 1.0, 1.0
        for rate in a:
            reach *= rate
            tokens += reach
        return tokens


def parse_rates(text: str) -> float | tuple[float, ...]:
    """``A`` or ``A1,A2,...`` (one rate a position) as a float or a tuple; ValueError if not
    numbers (their range is ``Speculation``'s to check)."""
    parts = [float(p) for p in text.split(",")]
    return parts[0] if len(parts) == 1 else tuple(parts)


def parse_speculation(text: str) -> Speculation:
    """``METHOD:K:ACCEPTANCE``, e.g. ``eagle:4:0.7`` or ``mtp:3:0.9,0.7,0.6``."""
    parts = text.split(":")
    if len(parts) != 3 or not parts[1].isdigit():
        raise GpuplanError(f"--speculative {text!r} is invalid: give METHOD:K:ACCEPTANCE with "
                           f"METHOD one of {', '.join(METHODS)}, e.g. eagle:4:0.7")  # fmt: skip
    try:
        acceptance = parse_rates(parts[2])
    except ValueError:
        raise GpuplanError(f"--speculative {text!r}: acceptance={parts[2]!r} is invalid: give a "
                           "rate in [0, 1]") from None  # fmt: skip
    return Speculation(method=parts[0], k=int(parts[1]), acceptance=acceptance)


def _draft_s(spec: Speculation, step, draft_step, seqs: int, kv_tokens: float) -> float:
    if spec.method == "ngram":
        return 0.0
    if spec.method == "mtp":  # ``draft_step``: the speculator's ``mtp.MtpDraft``, if any
        drafter = draft_step if isinstance(draft_step, MtpDraft) else MtpDraft(step.dep)
        return drafter.draft_s(step, spec.k, seqs=seqs, context=round((kv_tokens - seqs) / seqs))
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
    verify_s, draft_s = verify_and_draft_s(step, spec, draft_step, seqs=seqs,
                                           cached_tokens=seqs * context,
                                           replay=step.dep.cuda_graph)  # fmt: skip
    tokens = spec.tokens_per_step
    step_s = verify_s + draft_s
    return {"verify_s": verify_s, "draft_s": draft_s, "step_s": step_s,
            "tokens_per_step": tokens, "tpot_s": step_s / tokens,
            "tokens_per_s": seqs * tokens / step_s}  # fmt: skip


def check_draft(target, draft) -> None:
    """A draft model must propose tokens of the target's vocabulary (one tokenizer family)."""
    if draft.vocab_size != target.vocab_size:
        raise GpuplanError(
            f"draft model {draft.name} has vocab_size={draft.vocab_size}, the target "
            f"{target.name} {target.vocab_size}: a draft model must share the target's tokenizer "
            "(choose a smaller model of the same family)"
        )


def verify_and_draft_s(step, spec: Speculation, draft_step, *, seqs: int, cached_tokens: float,
                       prefill=(), sampled: int = 0, replay=None) -> tuple[float, float]:  # fmt: skip
    """(verification, drafting) seconds of one speculative step of ``seqs`` sequences holding
    ``cached_tokens`` in all, alongside ``prefill`` pieces that sample ``sampled`` sequences: the
    one cost of a speculative step, for ``serve edge`` and the serving simulator alike."""
    n = spec.k + 1
    context = round(cached_tokens / seqs)  # the mean cached context stands for each one's
    verify_s = step.mixed_s((*prefill, (n, context, seqs)), 0, 0, sampled + seqs * n,
                            replay=replay)  # fmt: skip
    return verify_s, _draft_s(spec, step, draft_step, seqs, cached_tokens + seqs)


class Speculator:
    """Speculative decoding in the serving simulator (module docstring): the tokens each step
    emits, its cost, the drafter's memory, and what it did (``summary``)."""

    def __init__(self, spec: Speculation, dep, *, draft=None):
        if (spec.method == "draft") != (draft is not None):
            raise GpuplanError("speculative method 'draft' needs a draft model (draft:MODEL), "
                               "and only it takes one")  # fmt: skip
        if dep.pp > 1:
            raise GpuplanError(f"speculative decoding with pp={dep.pp} is not modelled: "
                               "give --pp 1")  # fmt: skip
        from gpuplan.sim.runtime.serving.step_model import StepModel

        self.spec, self.dep = spec, dep
        self.tokens_per_step = spec.tokens_per_step
        self.draft_dep = None
        if draft is not None:
            check_draft(dep.model, draft.model)
            self.draft_dep = draft
        self.draft_step = None if draft is None else StepModel(draft)
        if spec.method == "mtp":  # the model's own MTP module (refused for a model without)
            self.draft_step = MtpDraft(dep)
        self.reset()

    def reset(self) -> None:
        """Forget what was run (a new simulation)."""
        self.steps = self.seq_steps = self.tokens = 0
        self.verify_s = self.draft_s = 0.0

    def tokens_at(self, s: int) -> int:
        """Tokens a sequence emits at a replica's step ``s`` (0, 1, ...)."""
        e = self.tokens_per_step
        return math.floor((s + 1) * e) - math.floor(s * e)

    def step_s(self, step, *, seqs: int, cached_tokens: float, prefill=(), sampled: int = 0,
               replay=None) -> float:  # fmt: skip
        """One step's seconds, counted in the summary."""
        verify_s, draft_s = verify_and_draft_s(step, self.spec, self.draft_step, seqs=seqs,
                                               cached_tokens=cached_tokens, prefill=prefill,
                                               sampled=sampled, replay=replay)  # fmt: skip
        self.verify_s += verify_s
        self.draft_s += draft_s
        return verify_s + draft_s

    def emitted(self, seqs: int, tokens: int) -> None:
        """``seqs`` sequences emitted ``tokens`` tokens in all at one step."""
        self.steps += 1
        self.seq_steps += seqs
        self.tokens += tokens

    def extra_weights_bytes(self, tp: int) -> float:
        """Drafter weights on each GPU: a draft model's, or an EAGLE head's one block."""
        from gpuplan.sim.runtime.serving.kv_cache import weights_bytes_per_gpu
        from gpuplan.sim.runtime.serving.quantization import weight_bytes_per_param
        from gpuplan.workloads.params import count_params

        if self.draft_dep is not None:
            d = self.draft_dep
            return weights_bytes_per_gpu(d.model, tp=tp, weight_dtype=d.weight_dtype)
        if self.spec.method == "eagle":  # one block beside the target's (its LM head shared)
            pc = count_params(self.dep.model)
            block = max(pc.per_layer) * weight_bytes_per_param(self.dep.weight_dtype)
            return block / tp
        if self.spec.method == "mtp":
            return mtp_weights_bytes(self.dep, tp)
        return 0.0

    def kv_bytes_per_token(self, tp: int) -> float:
        """Drafter KV-cache bytes a cached token adds on each GPU."""
        from gpuplan.sim.runtime.serving.kv_cache import (
            kv_bytes_per_token,
            kv_bytes_per_token_layer,
        )

        if self.draft_dep is not None:
            d = self.draft_dep
            return kv_bytes_per_token(d.model, tp=tp, kv_dtype=d.kv_dtype)
        if self.spec.method == "eagle":  # one attention layer of the target's shape
            dep = self.dep
            return kv_bytes_per_token_layer(dep.model, tp=tp, kv_dtype=dep.kv_dtype)
        if self.spec.method == "mtp":
            return mtp_kv_bytes_per_token(self.dep, tp)
        return 0.0

    def summary(self) -> dict:
        """What the run's speculation did: mean tokens emitted a sequence per step (the
        accepted drafts plus the target's own, less the surplus of a sequence's last step),
        and the drafter's share of the speculative steps' time."""
        spent = self.verify_s + self.draft_s
        return {
            "method": self.spec.method,
            "spec_tokens": self.spec.k,
            "accept_rate": (list(self.spec.acceptance) if isinstance(self.spec.acceptance, tuple)
                            else self.spec.acceptance),
            "accept_rate_per_position": list(self.spec.rates),
            "accept_rate_source": self.spec.source or "given",
            "draft_model": None if self.draft_dep is None else self.draft_dep.model.name,
            "expected_tokens_per_step": self.tokens_per_step,
            "mean_accepted_tokens_per_step": self.tokens / self.seq_steps if self.seq_steps
            else math.nan,
            "draft_cost_share": self.draft_s / spent if spent else math.nan,
            "steps": self.steps,
            "draft_s": self.draft_s,
            "verify_s": self.verify_s,
        }


def serving_speculation(method: str, spec_tokens, accept_rate,
                        model=None) -> tuple[Speculation, str | None]:  # fmt: skip
    """``serve --speculative ngram|eagle|mtp|draft:MODEL --spec-tokens K --accept-rate A``
    (``A``: one rate, or a tuple of K, one a position): the speculation and the draft model's
    name (None but for ``draft:MODEL``). No engine default is assumed for K (vLLM's
    ``num_speculative_tokens`` has none); the acceptance is the workload's and must be given,
    but for ``mtp`` on ``model`` (its ``ModelConfig``), whose published per-position acceptance
    is the default (``mtp.default_acceptance``)."""
    name, sep, draft = method.partition(":")
    if name not in METHODS or (name == "draft") != bool(sep and draft) or (sep and name != "draft"):
        raise GpuplanError(f"--speculative {method!r} is invalid: give ngram, eagle or "
                           "draft:MODEL (a smaller model of the target's family), or mtp (a "
                           "model's own MTP layers)")  # fmt: skip
    if spec_tokens is None or (accept_rate is None and name != "mtp"):
        raise GpuplanError("--speculative needs --spec-tokens K (tokens proposed a step, at least "
                           "1) and --accept-rate A (per token, in [0, 1])")  # fmt: skip
    if isinstance(spec_tokens, bool) or not isinstance(spec_tokens, int) or spec_tokens < 1:
        raise GpuplanError(f"--spec-tokens {spec_tokens!r} is invalid: give a whole number of at "
                           "least 1")  # fmt: skip
    source = ""
    if name == "mtp" and model is not None:
        check_mtp(model)
        if accept_rate is None:
            accept_rate, source = default_acceptance(model, spec_tokens), ACCEPT_SOURCE
    if accept_rate is None:
        raise GpuplanError("--speculative mtp needs the model to choose its default acceptance: "
                           "give --accept-rate")  # fmt: skip
    rates = accept_rate if isinstance(accept_rate, tuple) else (accept_rate,)
    if not all(_is_rate(r) for r in rates):
        shown = ",".join(f"{r:g}" for r in rates)
        raise GpuplanError(f"--accept-rate {shown} is invalid: give a rate in [0, 1], or one a "
                           "position (e.g. 0.9,0.75,0.6)")  # fmt: skip
    if isinstance(accept_rate, tuple) and len(accept_rate) != spec_tokens:
        raise GpuplanError(f"--accept-rate gives {len(accept_rate)} rates for --spec-tokens "
                           f"{spec_tokens}: give one rate, or one a position")  # fmt: skip
    acceptance = tuple(map(float, accept_rate)) if isinstance(accept_rate, tuple) else float(accept_rate)
    spec = Speculation(method=name, k=spec_tokens, acceptance=acceptance, source=source)
    return spec, draft or None


def stack_speculator(spec: Speculation, dep, stack, gpu: str, *, draft_model: str | None = None,
                     fit=None) -> Speculator:  # fmt: skip
    """``spec``'s drafter for the replica ``dep``: with ``draft_model``, that model as ``stack``
    serves it on the target's GPUs (``gpu``, ``fit``), tensor parallelism and formats."""
    from gpuplan.sim.runtime.serving.on_stack import stack_deployment

    draft = None
    if draft_model is not None:
        draft = stack_deployment(draft_model, gpu, stack, fit=fit, tp=dep.tp,
                                 weight_dtype=dep.weight_dtype, kv_dtype=dep.kv_dtype)  # fmt: skip
    return Speculator(spec, dep, draft=draft)
