"""Routers: which replica takes an arriving request.

- ``round_robin``: replicas in turn, whatever their load;
- ``least_outstanding``: the replica with the fewest requests waiting or running (ties: the
  lowest index), as load balancers' "least outstanding requests" rule;
- ``shortest_queue_tokens``: the replica with the fewest prefill and decode tokens still to run.

A router sees each replica as of its last iteration boundary (a serving frontend reads its
engines' queues, which change only between iterations).
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuplan.errors import check_choice

ROUTERS = ("round_robin", "least_outstanding", "shortest_queue_tokens")


class Router:
    """Picks a replica index; ``needs_load`` says whether ``pick`` reads the loads."""

    def __init__(self, kind: str = "round_robin", n: int = 1):
        check_choice("router", kind, ROUTERS)
        self.kind, self.n, self._next = kind, n, 0
        self.needs_load = kind != "round_robin"

    def pick(self, loads: Sequence[float] = ()) -> int:
        """The replica for the next request, given each replica's load (see ``load_of``)."""
        if not self.needs_load:
            i = self._next
            self._next = (i + 1) % self.n
            return i
        return min(range(len(loads)), key=loads.__getitem__)

    def load_of(self, state) -> float:
        """The load this router compares, read from a ``ReplicaState``."""
        if self.kind == "shortest_queue_tokens":
            return state.outstanding_tokens
        return state.in_system
