"""The requests a replica decodes, advanced lazily: each stores its offset ``cached -
iterations`` and the iteration count at which it will be done, so running k iterations is one
addition however many requests decode; the exact block count is recomputed with numpy (or in
closed form from the members' residues, without a sliding window).
"""

from __future__ import annotations

import heapq

import numpy as np

from gpuplan.sim.runtime.serving.blocks import BlockRule
from gpuplan.sim.runtime.serving.request_table import RequestTable


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
        plain = count_blocks and not (self.rule.windowed_layers or self.rule.chunked_layers)
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
