"""Per-request facts and outcomes of a serving run, indexed by request id, in one
``RequestTable`` (Python lists: the simulator reads single entries far more often than whole
columns).

Token accounting of a request with prompt P and output O (``generated`` = g tokens emitted):
a prefill caches ``P + g`` tokens and emits one token (g = 0 at first; after a preemption by
recomputation, vLLM recomputes the prompt and every token already generated); each decode
iteration caches the last emitted token and emits the next. So a decoding request holds
``P + g - 1`` cached tokens, reads one more in each iteration, and is done when g = O.
"""

from __future__ import annotations

import math

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
