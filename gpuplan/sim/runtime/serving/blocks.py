"""How many KV blocks a sequence holds, sliding-window layers counted apart.

Without sliding windows a sequence of n cached tokens holds ceil(n / block) blocks, each the
keys and values of ``block_tokens`` tokens in every layer (PagedAttention, Kwon et al. 2023,
sec. 4.2). With sliding-window layers the cache is paged per layer group, as vLLM's hybrid KV
cache manager does (vLLM v1, ``vllm/v1/core/single_type_kv_cache_manager.py``:
``FullAttentionManager`` and ``SlidingWindowManager``; docs "Hybrid KV Cache Manager"): the unit
is then one block of one layer, a full-attention layer holds ceil(n / block) of them and a
windowed layer only those that still hold a token the next query can see
(``SlidingWindowManager.remove_skipped_blocks`` frees the blocks before token
n - window + 1), i.e. ceil(n / block) - floor(max(0, n - window + 1) / block). A chunked-
attention layer (Llama 4's local layers) holds only the blocks of its current chunk
(``ChunkedLocalAttentionManager.remove_skipped_blocks``: the tokens before
``floor(n / chunk) * chunk`` are skipped), and a Mamba-2 or linear-attention layer one fixed
state per request whatever its length (``MambaManager``), ``state_units`` page units each.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class BlockRule:
    """Blocks per sequence: ``full_layers`` and ``windowed_layers`` page units per block of
    ``block_tokens`` tokens (a model without windows: one unit, every layer in it)."""

    block_tokens: int
    full_layers: int = 1
    windowed_layers: int = 0
    window: int = 0
    # a cross-attention VLM: each sequence's image keys and values in every cross-attention
    # layer, blocks of their own that do not grow (vLLM v1's CrossAttentionManager)
    cross_layers: int = 0
    cross_tokens: int = 0
    # chunked local attention: a layer keeps only its current chunk's blocks
    chunked_layers: int = 0
    chunk: int = 0
    # linear-attention and Mamba-2 layers: a fixed state of ``state_units`` units a request
    state_layers: int = 0
    state_units: int = 0

    @property
    def paged_per_layer(self) -> bool:
        """Whether blocks are one layer's (some layer holds other than every block)."""
        return bool(self.windowed_layers or self.cross_layers or self.chunked_layers
                    or self.state_layers)

    @property
    def per_sequence_blocks(self) -> int:
        """Page units a sequence holds whatever its length: its cross-attention cache."""
        cross = self.cross_layers * -(-self.cross_tokens // self.block_tokens)
        return cross + self.state_layers * self.state_units

    @property
    def units(self) -> int:
        """Page units one block of tokens takes when no window or chunk has cut it (1 for a
        model of fixed states only, whose unit is one layer's state)."""
        return max(1, self.full_layers + self.windowed_layers + self.chunked_layers)

    def blocks(self, tokens: int) -> int:
        """Blocks a sequence of ``tokens`` cached tokens holds."""
        b = self.block_tokens
        whole = -(-tokens // b)
        cross = self.per_sequence_blocks if tokens > 0 else 0
        if not self.windowed_layers and not self.chunked_layers:
            return whole * self.full_layers + cross
        skipped = max(0, tokens - self.window + 1) // b
        chunked = self.chunked_layers * (whole - tokens // self.chunk * self.chunk // b
                                         if self.chunk else 0)
        return (self.full_layers * whole + self.windowed_layers * (whole - skipped) + chunked
                + cross)

    def blocks_sum(self, cached: np.ndarray) -> int:
        """Blocks the sequences with ``cached`` tokens hold together."""
        b = self.block_tokens
        whole = -(-cached // b)
        per_seq = self.per_sequence_blocks
        cross = per_seq * int(np.count_nonzero(cached)) if per_seq else 0
        if not self.windowed_layers and not self.chunked_layers:
            return int(whole.sum()) * self.full_layers + cross
        skipped = np.maximum(0, cached - self.window + 1) // b
        windowed = self.windowed_layers * (whole - skipped).sum()
        chunked = self.chunked_layers * (whole - cached // self.chunk * self.chunk // b).sum() \
            if self.chunked_layers else 0
        return int(self.full_layers * whole.sum() + windowed + chunked) + cross

    def growth_bound(self, iterations: int) -> int:
        """The most blocks one sequence can gain over ``iterations`` decode iterations."""
        return self.units * (-(-iterations // self.block_tokens) + 1)
