"""The state of a replica: who waits, who prefills, who decodes, and the KV blocks they hold.

Plain objects with no notion of simpy; the policies read and change them, the engine only asks
them to finish what an iteration did. Per-request facts live in one ``RequestTable``
(``request_table``, with the token accounting); the decoding requests in a ``DecodeSet``
(``decode_set``), advanced lazily.

Prefix caching (vLLM's automatic prefix caching, its docs "Automatic Prefix Caching": blocks
hashed by their tokens and reused): a request whose ``prefix_id`` a replica has already begun to
prefill starts its prefill with the shared prefix's full blocks cached (``prefix_hit``), and
computes only the rest. Assumed, named: a prefix once seen stays cached (no eviction under memory
pressure), and each request still counts the blocks of its whole prompt (shared blocks are not
deduplicated in the block count: a conservative capacity).
"""

from __future__ import annotations

from collections import deque

from gpuplan.sim.runtime.serving.blocks import BlockRule
from gpuplan.sim.runtime.serving.decode_set import DecodeSet
from gpuplan.sim.runtime.serving.request_table import FINISHED, REJECTED, RequestTable


def blocks_for(tokens: int, block_tokens: int) -> int:
    return -(-tokens // block_tokens)


class ReplicaState:
    """Queues and KV blocks of one replica."""

    def __init__(
        self,
        index: int,
        table: RequestTable,
        *,
        total_blocks: int,
        block_tokens: int,
        block_bytes: float,
        max_seqs: int,
        watermark: float = 0.0,
        rule: BlockRule | None = None,
    ):
        self.index, self.table = index, table
        self.total_blocks, self.block_tokens, self.block_bytes = (
            total_blocks,
            block_tokens,
            block_bytes,
        )
        self.max_seqs = max_seqs
        self.watermark_blocks = int(watermark * total_blocks)
        self.waiting: deque[int] = deque()
        self.prefilling: list[int] = []
        self.rule = rule or BlockRule(block_tokens)
        self.blocks_of = self.rule.blocks  # blocks a sequence of n cached tokens holds
        self.decoding = DecodeSet(table, block_tokens, rule=self.rule)
        self.static_batch: list[int] = []  # members of a running static batch
        self.swapped: deque[int] = deque()
        self.prefill_blocks = 0  # held by prefilling requests
        self.reserved_blocks = 0  # reserved whole by a static batch
        self.in_system = 0  # arrived here and not yet finished, rejected or handed off
        self.outstanding_tokens = 0  # prefill and decode tokens still to run (router view)
        self.prefixes_seen: set[int] = set()  # shared prefixes this replica has cached
        self.handoff = None  # disaggregation: called with (rid, time) when a prefill is done
        self.on_done = None  # called with (rid, time) when a request finishes or is rejected
        self.on_first = None  # called with (rid, time) when a request emits its first token

    # --- views ---------------------------------------------------------------------------------

    def free_blocks(self) -> int:
        return self.total_blocks - self.prefill_blocks - self.decoding.blocks - self.reserved_blocks

    def seats(self) -> int:
        return self.max_seqs - len(self.prefilling) - len(self.decoding.members)

    def can_allocate(self, blocks: int) -> bool:
        """Whether ``blocks`` more leave the watermark free (vLLM's admission rule)."""
        return self.free_blocks() - blocks >= self.watermark_blocks

    def blocks_needed(self, rid: int) -> int:
        return self.blocks_of(self.table.prefill_target(rid))

    def decode_room(self, iterations: int) -> int:
        """The most of ``iterations`` decode iterations whose new tokens fit in the free blocks."""
        d = self.decoding
        free = self.free_blocks() + d.blocks
        per_seq = self.rule.growth_bound(iterations)
        if d.blocks + len(d.members) * per_seq <= free:
            return iterations
        lo, hi = 0, iterations  # largest n with blocks_after(n) <= free
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if d.blocks_after(mid) <= free:
                lo = mid
            else:
                hi = mid - 1
        return lo

    # --- transitions ---------------------------------------------------------------------------

    def enqueue(self, rid: int) -> None:
        self.waiting.append(rid)
        self.in_system += 1
        t = self.table
        prefill = 0 if t.remote[rid] else t.prefill_target(rid)
        self.outstanding_tokens += prefill + t.output[rid] - t.generated[rid]

    def reject(self, rid: int, now_s: float) -> None:
        self.table.status[rid] = REJECTED
        self.table.finish_s[rid] = now_s
        if self.on_done:
            self.on_done(rid, now_s)

    def begin_prefill(self, rid: int, blocks: int) -> None:
        """Move the head of the waiting queue into prefill, holding ``blocks`` blocks."""
        self.waiting.popleft()
        self.table.blocks[rid] = blocks
        self.table.cached[rid] = self._prefix_hit(rid)
        self.prefill_blocks += blocks
        self.prefilling.append(rid)

    def _prefix_hit(self, rid: int) -> int:
        """Tokens of ``rid``'s prompt found cached: its shared prefix's full blocks, once this
        replica has seen the prefix (module docstring); the prefix is seen from now on."""
        t = self.table
        if t.prefix_id is None or not t.prefix_tokens[rid]:
            return 0
        group = t.prefix_id[rid]
        hit = 0
        if group in self.prefixes_seen:
            hit = t.prefix_tokens[rid] // self.block_tokens * self.block_tokens
        self.prefixes_seen.add(group)
        t.prefix_hit[rid] += hit
        self.outstanding_tokens -= hit
        return hit

    def admit_remote(self, rid: int) -> None:
        """A request whose KV cache arrived with it joins the decoding set directly."""
        t = self.table
        self.waiting.popleft()
        t.remote[rid] = False
        self.decoding.add(rid, t.cached[rid], t.generated[rid])

    def preempt_last(self, mode: str) -> float:
        """Preempt the most recently joined decoding request; return bytes swapped out."""
        rid = self.decoding.members[-1]
        self.decoding.remove(rid)
        t = self.table
        t.preemptions[rid] += 1
        if mode == "swap":
            self.swapped.append(rid)
            return t.blocks[rid] * self.block_bytes
        self.outstanding_tokens += t.prefill_target(rid)  # the recomputation to come
        t.cached[rid], t.blocks[rid] = 0, 0
        self.waiting.appendleft(rid)
        return 0.0

    def swap_in(self, rid: int) -> float:
        t = self.table
        self.swapped.popleft()
        self.decoding.add(rid, t.cached[rid], t.generated[rid])
        return t.blocks[rid] * self.block_bytes

    # --- what an iteration did -----------------------------------------------------------------

    def finish_prefill_chunks(self, pieces, end_s: float, *, padded_to: int = 0) -> None:
        """Credit prefill progress; a request whose prefill is complete emits its token."""
        t = self.table
        for rid, tokens in pieces:
            t.cached[rid] += tokens
            self.outstanding_tokens -= tokens
            if t.cached[rid] >= t.prefill_target(rid):
                self.prefilling.remove(rid)
                self.prefill_blocks -= t.blocks[rid]
                self._prefill_done(rid, end_s, padded_to)

    def _prefill_done(self, rid: int, end_s: float, padded_to: int) -> None:
        t = self.table
        t.generated[rid] += 1
        self.outstanding_tokens -= 1
        if t.generated[rid] == 1:
            t.first_token_s[rid] = end_s
            if self.on_first is not None:
                self.on_first(rid, end_s)
        if padded_to:  # a static batch: every sequence padded to the longest prompt
            t.cached[rid] = padded_to
            self.decoding.add(rid, padded_to, t.generated[rid])
            if t.generated[rid] >= t.output[rid]:
                self.finish(rid, end_s)
            return
        if t.generated[rid] >= t.output[rid]:
            self.finish(rid, end_s)
        elif self.handoff is not None:
            self.in_system -= 1
            self.outstanding_tokens -= t.output[rid] - t.generated[rid]
            self.handoff(rid, end_s)
        else:
            self.decoding.add(rid, t.cached[rid], t.generated[rid])

    def run_decode(self, iterations: int, time_at, *, keep_done: bool = False) -> int:
        """Advance the decoding set by ``iterations``; record each request done at the end of
        the run's iteration it emitted its last token in (``time_at(j)``: end of the j-th).
        Returns the tokens the members emitted (those done stop at their last)."""
        members = len(self.decoding.members)
        self.outstanding_tokens = max(0, self.outstanding_tokens - iterations * members)
        t = self.table
        emitted = iterations * members
        for rid, j in self.decoding.advance(iterations, keep_done=keep_done):
            emitted -= iterations - j
            if t.status[rid] != FINISHED:  # padding of a static batch finished earlier
                t.generated[rid] = t.output[rid]
                self.finish(rid, time_at(j))
        return emitted

    def finish(self, rid: int, at_s: float) -> None:
        t = self.table
        t.status[rid] = FINISHED
        t.finish_s[rid] = at_s
        self.in_system -= 1
        if self.on_done:
            self.on_done(rid, at_s)

    def use_static_batches(self) -> None:
        """Static and dynamic batching: blocks are reserved whole per batch, not per token."""
        self.decoding = DecodeSet(self.table, self.block_tokens, count_blocks=False, rule=self.rule)

    def end_static_batch(self) -> None:
        self.decoding.clear()
        self.static_batch = []
        self.reserved_blocks = 0
