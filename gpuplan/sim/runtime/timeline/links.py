"""Links as shared resources: transfers that meet on a link share its bandwidth.

A link is a fluid processor-sharing server (Kleinrock, "Queueing Systems, Vol. 2", 1976, sec.
4.4): each transfer brings the seconds it would take alone (``work_s``, its bytes over the
achievable bandwidth); while ``n`` transfers are active each progresses at ``1/n`` of the link.
A transfer alone takes exactly ``work_s``, so a timeline without contention reproduces the
analytical collective times; two transfers that meet both finish later, and the link keeps the
time it spent busy and shared.

One link is one direction of one GPU's port: its NVLink/NVSwitch port (``nvlink``) or its NIC
(``nic``); a collective or a send uses the sender's egress (ring collectives send on every
member's port at once, which symmetric ranks see as their own).
"""

from __future__ import annotations

EPS_S = 1e-12  # a transfer with less left than this is done (float round-off of the shares)


class Link:
    """One direction of a GPU's port, shared equally by the transfers active on it."""

    __slots__ = ("env", "name", "flows", "busy_s", "shared_s", "transfers", "_t", "_version")

    def __init__(self, env, name: str) -> None:
        self.env, self.name = env, name
        self.flows: list[list] = []  # [seconds of work left, event to succeed]
        self.busy_s = 0.0  # time with at least one transfer
        self.shared_s = 0.0  # time with two or more
        self.transfers = 0
        self._t = 0.0
        self._version = 0

    def transfer(self, work_s: float):
        """An event that succeeds when ``work_s`` seconds of exclusive-link work are done."""
        event = self.env.event()
        if work_s <= 0:
            return event.succeed()
        self._advance()
        self.flows.append([work_s, event])
        self.transfers += 1
        self._schedule()
        return event

    def _advance(self) -> None:
        now, n = self.env.now, len(self.flows)
        if n:
            dt = now - self._t
            for flow in self.flows:
                flow[0] -= dt / n
            self.busy_s += dt
            if n > 1:
                self.shared_s += dt
        self._t = now

    def _schedule(self) -> None:
        self._version += 1
        if not self.flows:
            return
        left = min(flow[0] for flow in self.flows)
        wake = self.env.timeout(max(left, 0.0) * len(self.flows))
        version = self._version
        wake.callbacks.append(lambda _event: self._wake(version))

    def _wake(self, version: int) -> None:
        if version != self._version:  # a newer arrival rescheduled the link
            return
        self._advance()
        done = [flow for flow in self.flows if flow[0] <= EPS_S]
        self.flows = [flow for flow in self.flows if flow[0] > EPS_S]
        for flow in done:
            flow[1].succeed()
        self._schedule()
