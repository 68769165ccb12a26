"""Scheduling policies of a replica: what the next iteration runs. Testable without simpy.

A policy reads a ``ReplicaState``, admits or preempts requests in it, and returns a plan:
``Iteration`` (one iteration: prefill pieces and/or a decode step), ``DecodeRun`` (k decode-only
iterations of an unchanging set of sequences, which the engine may cut short at an arrival when
``interruptible``), ``WaitUntil`` (dynamic batching waits for a fuller batch) or ``IDLE``.

- ``static``: when the replica is free, the waiting requests (up to ``max_seqs``) form one
  batch, run as a padded rectangle as Hugging Face ``generate`` and FasterTransformer without
  padding removal do: prompts padded to the longest, every sequence decoding until the longest
  output is done; KV blocks for the whole rectangle reserved up front. Tokens stream as made.
- ``dynamic``: the same, but a free replica waits until ``max_seqs`` requests wait or the oldest
  has waited ``batch_timeout_s`` (Triton's dynamic batcher, ``max_queue_delay``).
- ``continuous``: iteration-level scheduling (Orca, Yu et al. OSDI 2022) as vLLM's default
  scheduler runs it (Kwon et al. SOSP 2023): waiting prompts are admitted first-come
  first-served into prefill-only iterations while seats (``max_seqs``), the token budget and
  free blocks (above the watermark) allow; otherwise every running sequence decodes. When a
  decode step finds no free block, the most recently admitted sequence is preempted, by
  recomputation (its blocks freed, requeued at the front) or by swapping its blocks to host
  memory; swapped sequences come back before any new prefill.
- ``chunked``: Sarathi-Serve's stall-free batching (Agrawal et al. OSDI 2024) as vLLM's chunked
  prefill runs it: every iteration decodes all running sequences and fills the rest of the
  token budget with prefill chunks, ongoing ones first, then new admissions.

Rejected at arrival (as vLLM refuses them): a request longer than ``max_model_len``, one whose
cache would not fit in the whole KV cache, and, without chunking, one whose prompt plus output
exceeds the token budget (it could not be prefilled again after a preemption).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuplan.sim.runtime.serving.state import ReplicaState


@dataclass(slots=True)
class Iteration:
    pieces: list[tuple[int, int]]  # (request, new tokens) of its prefill
    prefill: tuple[tuple[int, int, int], ...] = ()  # step-model pieces (tokens, cached, seqs)
    decode_seqs: int = 0
    decode_kv_tokens: int = 0
    sampled: int = 0
    swap_bytes: float = 0.0
    padded_to: int = 0  # a static batch's padded prompt length


@dataclass(slots=True)
class DecodeRun:
    iterations: int
    seqs: int
    kv_tokens: int  # read by the first iteration
    interruptible: bool
    keep_done: bool = False


@dataclass(frozen=True, slots=True)
class WaitUntil:
    at_s: float


@dataclass(frozen=True, slots=True)
class _Idle:
    pass


IDLE = _Idle()


@dataclass(slots=True)
class Policy:
    """Shared rules: admission of requests whose cache arrived with them, arrival checks."""

    max_seqs: int
    budget: int | None  # tokens per iteration (None: unlimited)
    model_len: int
    preemption: str = "recompute"
    timeout_s: float | None = None
    # budget tokens a decoding sequence takes an iteration: 1, or 1 + K proposals verified under
    # speculative decoding (vLLM v1's scheduler, vllm/v1/core/sched/scheduler.py schedule():
    # num_new_tokens = num_tokens_with_spec - num_computed_tokens, taken from token_budget)
    decode_tokens: int = 1

    def rejects(self, st: ReplicaState, rid: int) -> bool:
        t = st.table
        longest = t.prompt[rid] + t.output[rid]
        room = st.total_blocks - st.watermark_blocks
        return longest > self.model_len or st.blocks_of(longest - 1) > room

    def schedule(self, st: ReplicaState, now_s: float):
        raise NotImplementedError

    def _admit_remote(self, st: ReplicaState) -> None:
        t = st.table
        while st.waiting and t.remote[st.waiting[0]] and st.seats() > 0:
            rid = st.waiting[0]
            if not st.can_allocate(st.blocks_of(t.cached[rid] + 1)):
                return
            st.admit_remote(rid)

    def _make_room(self, st: ReplicaState) -> tuple[float, bool]:
        """Preempt (last admitted first) until one decode step fits; (bytes swapped, any)."""
        swapped, preempted = 0.0, False
        while len(st.decoding.members) and st.decode_room(1) < 1:
            swapped += st.preempt_last(self.preemption)
            preempted = True
        return swapped, preempted

    def _swap_in(self, st: ReplicaState) -> float:
        t, moved = st.table, 0.0
        while st.swapped and st.seats() > 0:
            rid = st.swapped[0]
            if st.free_blocks() < st.blocks_of(t.cached[rid] + 1):
                break
            moved += st.swap_in(rid)
        return moved

    def _run(self, st: ReplicaState, interruptible: bool) -> DecodeRun:
        d = st.decoding
        k = d.until_next_done()
        return DecodeRun(st.decode_room(k), len(d.members), d.kv_read_tokens(), interruptible)

    def _decode_step(self, st: ReplicaState, swap_bytes: float) -> Iteration:
        d = st.decoding
        n = len(d.members)
        return Iteration([], (), n, d.kv_read_tokens() if n else 0, n, swap_bytes)


class ContinuousPolicy(Policy):
    """vLLM's default scheduler: prefill-only iterations first, else decode all."""

    def rejects(self, st: ReplicaState, rid: int) -> bool:
        t = st.table
        over = self.budget is not None and t.prompt[rid] + t.output[rid] - 1 > self.budget
        return over or Policy.rejects(self, st, rid)

    def schedule(self, st: ReplicaState, now_s: float):
        self._admit_remote(st)
        if not st.swapped:
            plan = self._prefills(st)
            if plan is not None:
                return plan
        swap, preempted = self._make_room(st)
        if not preempted and st.swapped:
            swap += self._swap_in(st)
        if not len(st.decoding.members):
            return IDLE
        if swap or preempted:
            return self._decode_step(st, swap)
        open_ = not st.waiting and not st.swapped and st.seats() > 0
        return self._run(st, open_)

    def _prefills(self, st: ReplicaState) -> Iteration | None:
        t, pieces, tokens = st.table, [], 0
        while st.waiting and st.seats() > 0:
            rid = st.waiting[0]
            target = t.prefill_target(rid)
            if t.remote[rid] or (self.budget is not None and tokens + target > self.budget):
                break
            need = st.blocks_needed(rid)
            if not st.can_allocate(need):
                break
            st.begin_prefill(rid, need)
            new = target - t.cached[rid]  # less a prefix found cached
            pieces.append((rid, new))
            tokens += new
        if not pieces:
            return None
        return Iteration(pieces, _grouped(pieces, t), sampled=len(pieces))


def _grouped(pieces: list[tuple[int, int]], t) -> tuple[tuple[int, int, int], ...]:
    """Whole prompts of equal length (and equal cached prefix) as one attention piece of several
    sequences (one kernel: vLLM's variable-length prefill kernel runs every prompt of an
    iteration at once)."""
    counts: dict[tuple[int, int], int] = {}
    for rid, tokens in pieces:
        key = (tokens, t.cached[rid])
        counts[key] = counts.get(key, 0) + 1
    return tuple((tokens, cached, n) for (tokens, cached), n in counts.items())


class PrefillOnlyPolicy(ContinuousPolicy):
    """A prefill instance of a disaggregated deployment (DistServe, Splitwise): prefills only;
    each request leaves for a decode instance when its prefill is done."""

    def schedule(self, st: ReplicaState, now_s: float):
        plan = self._prefills(st)
        return IDLE if plan is None else plan


class ChunkedPolicy(Policy):
    """Sarathi-Serve / vLLM chunked prefill: decode everyone, fill the budget with chunks.
    Blocks for a whole prompt are taken when its prefill starts (vLLM)."""

    def schedule(self, st: ReplicaState, now_s: float):
        self._admit_remote(st)
        swap, preempted = self._make_room(st)
        t = st.table
        budget = self.budget - len(st.decoding.members) * self.decode_tokens
        pieces: list[tuple[int, int]] = []
        for rid in st.prefilling:
            if budget <= 0:
                break
            chunk = min(t.prefill_target(rid) - t.cached[rid], budget)
            pieces.append((rid, chunk))
            budget -= chunk
        if not preempted and st.swapped:
            swap += self._swap_in(st)
        if not st.swapped:
            budget = self._admit(st, pieces, budget)
        if pieces:
            return self._mixed(st, pieces, swap)
        if not len(st.decoding.members):
            return IDLE
        if swap or preempted:
            return self._decode_step(st, swap)
        open_ = not st.waiting and not st.swapped and not st.prefilling and st.seats() > 0
        return self._run(st, open_)

    def _admit(self, st: ReplicaState, pieces: list, budget: int) -> int:
        t = st.table
        while budget > 0 and st.waiting and st.seats() > 0:
            rid = st.waiting[0]
            need = st.blocks_needed(rid)
            if t.remote[rid] or not st.can_allocate(need):
                break
            st.begin_prefill(rid, need)
            chunk = min(t.prefill_target(rid) - t.cached[rid], budget)  # less a cached prefix
            pieces.append((rid, chunk))
            budget -= chunk
        return budget

    def _mixed(self, st: ReplicaState, pieces: list, swap: float) -> Iteration:
        t, d = st.table, st.decoding
        n = len(d.members)
        prefill = tuple((c, t.cached[rid], 1) for rid, c in pieces)
        ending = sum(1 for rid, c in pieces if t.cached[rid] + c >= t.prefill_target(rid))
        return Iteration(pieces, prefill, n, d.kv_read_tokens() if n else 0, n + ending, swap)


class StaticPolicy(Policy):
    """Static batching, or dynamic batching with ``timeout_s`` (module docstring)."""

    def schedule(self, st: ReplicaState, now_s: float):
        if st.static_batch:
            left = st.decoding.until_all_done()
            if left > 0:
                d = st.decoding
                return DecodeRun(left, len(d.members), d.kv_read_tokens(), False, keep_done=True)
            st.end_static_batch()
        if not st.waiting:
            return IDLE
        if self.timeout_s is not None and len(st.waiting) < self.max_seqs:
            due = st.table.arrival_s[st.waiting[0]] + self.timeout_s
            if now_s < due:
                return WaitUntil(due)
        return self._form_batch(st)

    def _form_batch(self, st: ReplicaState) -> Iteration:
        t = st.table
        members: list[int] = []
        longest_prompt = longest_output = 0
        for rid in st.waiting:
            p, o = max(longest_prompt, t.prompt[rid]), max(longest_output, t.output[rid])
            need = (len(members) + 1) * st.blocks_of(p + o - 1)
            if len(members) == self.max_seqs or (members and need > st.total_blocks):
                break
            members.append(rid)
            longest_prompt, longest_output = p, o
        for rid in members:
            st.begin_prefill(rid, 0)
        n = len(members)
        st.reserved_blocks = n * st.blocks_of(longest_prompt + longest_output - 1)
        st.static_batch = members
        pieces = [(rid, t.prompt[rid]) for rid in members]
        return Iteration(pieces, ((longest_prompt, 0, n),), sampled=n, padded_to=longest_prompt)


def make_policy(sched, cfg, *, prefill_only: bool = False, decode_tokens: int = 1) -> Policy:
    """The policy a ``SchedulerConfig`` names, for model ``cfg`` (``decode_tokens``:
    ``Policy.decode_tokens``)."""
    kw = {
        "max_seqs": sched.max_seqs,
        "budget": sched.batched_tokens(cfg),
        "model_len": sched.model_len(cfg),
        "preemption": sched.preemption,
        "decode_tokens": decode_tokens,
    }
    if prefill_only:
        return PrefillOnlyPolicy(**kw)
    if sched.policy == "continuous":
        return ContinuousPolicy(**kw)
    if sched.policy == "chunked":
        return ChunkedPolicy(**kw)
    timeout = sched.batch_timeout_s if sched.policy == "dynamic" else None
    return StaticPolicy(**kw, timeout_s=timeout)
