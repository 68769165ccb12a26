"""The state of a replica: who waits, who prefills, who decodes, and the KV blocks they hold.

Plain objects with no notion of simpy; the policies read and change them, the engine only asks
them to finish what an iteration did. Per-request facts live in one ``RequestTable`` (Python
lists: the simulator reads single entries far more often than whole columns).

Token accounting of a request with prompt P and output O (``generated`` = g tokens emitted):
a prefill caches ``P + g`` tokens and emits one token (g = 0 at first; after a preemption by
recomputation, vLLM recomputes the prompt and every token already generated); each decode
iteration caches the last emitted token and emits the next. So a decoding request holds
``P + g - 1`` cached tokens, reads one more in each iteration, and is done when g = O.

Prefix caching (vLLM's automatic prefix caching, its docs "Automatic Prefix Caching": blocks
hashed by their tokens and reused): a request whose ``prefix_id`` a replica has already begun to
prefill starts its prefill with the shared prefix's full blocks cached (``prefix_hit``), and
computes only the rest. Assumed, named: a prefix once seen stays cached (no eviction under memory
pressure), and each request still counts the blocks of its whole prompt (shared blocks are not
deduplicated in the block count: a conservative capacity).

Decoding requests are advanced lazily (``DecodeSet``): each stores its offset ``cached -
iterations`` and the iteration count at which it will be done, so running k iterations is one
addition however many requests decode; the exact block count is recomputed with numpy.
"""

from __future__ import annotations

import heapq
import math
from collections import deque

import numpy as np

from gpuplan.sim.runtime.serving.blocks import BlockRule

FINISHED, REJECTED = 1, 2


class RequestTable:
    """Facts and outcomes of every request, indexed by request id (arrival order)."""

    def __init__(self, workload):
        n = workload.n
        self.n = n
        self.arrival_s = workload.arrival_s.tolist()
        self.prompt = workload.prompt_tokens.tolist()
        self.output = workload.output_tokens.tolist()
        self.first_token_s = [math.nan] * n
        self.finish_s = [math.nan] * n
        self.status = [0] * n
        self.replica = [-1] * n
        self.decode_replica = [-1] * n
        self.preemptions = [0] * n
        self.generated = [0] * n
        self.cached = [0] * n  # tokens in this request's KV cache (while not decoding)
        self.blocks = [0] * n  # blocks held (while not decoding)
        self.remote = [False] * n  # its KV cache arrives with it (disaggregated decode)
        has_prefix = workload.prefix_id is not None
        self.prefix_id = workload.prefix_id.tolist() if has_prefix else None
        self.prefix_tokens = workload.prefix_tokens.tolist() if has_prefix else None
        self.prefix_hit = [0] * n  # prompt tokens found cached, summed over its prefills
        # a VLM's encoder seconds still to pay, per request (serving.vision.prepare_images)
        due = workload.encoder_s
        self.encoder_due = None if due is None else due.tolist()

    def take_encoder_s(self, pieces) -> float:
        """Encoder seconds of the requests these prefill pieces run, for those that have not
        paid theirs yet (vLLM keeps an image's encoder output for the request's later chunks)."""
        due = self.encoder_due
        if due is None:
            return 0.0
        total = 0.0
        for rid, _ in pieces:
            total += due[rid]
            due[rid] = 0.0
        return total

    def prefill_target(self, rid: int) -> int:
        """Tokens a prefill of this request caches: the prompt and what it already generated."""
        return self.prompt[rid] + self.generated[rid]


def blocks_for(tokens: int, block_tokens: int) -> int:
    return -(-tokens // block_tokens)


class DecodeSet:
    """Requests in the decode phase, advanced lazily (module docstring)."""

    def __init__(
        self,
        table: RequestTable,
        block_tokens: int,
        *,
        count_blocks: bool = True,
        rule: BlockRule | None = None,
    ):
        self.table, self.block_tokens = table, block_tokens
        self.rule = rule or BlockRule(block_tokens)
        self._blocks_of = self.rule.blocks
        self.count_blocks = count_blocks  # False: a static batch reserved its blocks whole
        self.iters = 0  # decode iterations this replica has run
        self.members: list[int] = []  # in order of joining (the last is preempted first)
        self._offset: dict[int, int] = {}  # rid -> cached tokens minus iters
        self._done_at: dict[int, int] = {}  # rid -> iters at which it has emitted O tokens
        self._heap: list[tuple[int, int]] = []
        self.offset_sum = 0
        self.blocks = 0  # exact blocks held by members
        self._offsets_array: np.ndarray | None = None
        # no window: members counted by (offset + block - 1) mod block, for the closed form of
        # ``blocks_after`` (sum of ceil(c / b) = (sum c + m (b - 1) - sum (c + b - 1) mod b) / b)
        plain = count_blocks and not self.rule.windowed_layers
        self._residues: list[int] | None = [0] * block_tokens if plain else None
        self._residue_sum = 0  # sum of the members' residues

    def __len__(self) -> int:
        return len(self.members)

    def add(self, rid: int, cached: int, generated: int) -> None:
        off = cached - self.iters
        done = self.iters + self.table.output[rid] - generated
        self.members.append(rid)
        self._offset[rid], self._done_at[rid] = off, done
        heapq.heappush(self._heap, (done, rid))
        self.offset_sum += off
        if self.count_blocks:
            self.blocks += self._blocks_of(cached)
        if self._residues is not None:
            q = (off + self.block_tokens - 1) % self.block_tokens
            self._residues[q] += 1
            self._residue_sum += q
        self._offsets_array = None

    def cached_tokens(self) -> int:
        return self.offset_sum + len(self.members) * self.iters

    def kv_read_tokens(self) -> int:
        """Cached tokens the next iteration reads (each sequence's plus its new one)."""
        return self.offset_sum + len(self.members) * (self.iters + 1)

    def until_next_done(self) -> int:
        """Iterations until the first member has emitted its last token."""
        heap = self._heap
        while heap and self._done_at.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)  # a member that left early (preempted)
        return heap[0][0] - self.iters

    def until_all_done(self) -> int:
        return max(self._done_at.values()) - self.iters

    def _offsets(self) -> np.ndarray:
        if self._offsets_array is None:
            self._offsets_array = np.fromiter(
                (self._offset[r] for r in self.members), dtype=np.int64, count=len(self.members)
            )
        return self._offsets_array

    def blocks_after(self, n: int) -> int:
        """Exact blocks the members will hold after ``n`` more iterations."""
        if not self.members or not self.count_blocks:
            return 0
        if self._residues is not None:
            b, t = self.block_tokens, self.iters + n
            shift = t % b
            # sum of c_q ((q + shift) mod b): each residue moved by shift, less b for those that
            # wrap (q >= b - shift)
            rem = self._residue_sum + shift * len(self.members)
            if shift:
                rem -= b * sum(self._residues[b - shift :])
            whole = (self.offset_sum + len(self.members) * (t + b - 1) - rem) // b
            return whole * self.rule.full_layers + len(self.members) * self.rule.per_sequence_blocks
        return self.rule.blocks_sum(self._offsets() + (self.iters + n))

    def advance(self, n: int, *, keep_done: bool = False) -> list[tuple[int, int]]:
        """Run ``n`` iterations; return (rid, iterations it took) of each member done, removing
        them unless ``keep_done`` (a padded static batch keeps them as padding)."""
        start = self.iters
        self.iters += n
        self.blocks = self.blocks_after(0)
        done = []
        heap = self._heap
        while heap and heap[0][0] <= self.iters:
            at, rid = heapq.heappop(heap)
            if self._done_at.get(rid) != at:
                continue
            done.append((rid, at - start))
            if not keep_done:
                self.remove(rid)
        return done

    def remove(self, rid: int) -> None:
        """Take ``rid`` out, writing its cached tokens, blocks and tokens emitted to the table."""
        t = self.table
        off = self._offset.pop(rid)
        done = self._done_at.pop(rid)
        self.members.remove(rid)
        self.offset_sum -= off
        if self._residues is not None:
            q = (off + self.block_tokens - 1) % self.block_tokens
            self._residues[q] -= 1
            self._residue_sum -= q
        t.cached[rid] = off + self.iters
        t.generated[rid] = t.output[rid] - (done - self.iters)
        t.blocks[rid] = self._blocks_of(t.cached[rid]) if self.count_blocks else 0
        self.blocks -= t.blocks[rid]
        self._offsets_array = None

    def clear(self) -> None:
        for rid in list(self.members):
            self.remove(rid)
        self._heap.clear()


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
