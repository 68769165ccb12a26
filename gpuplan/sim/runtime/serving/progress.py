"""What a serving run tells as it goes: a progress bar of finished requests, and a watch that
sees each request finished or rejected, each first token and each arrival, and may end the run
once its verdict can no longer change (``Settled``)."""

from __future__ import annotations

from functools import partial


class Settled(Exception):  # noqa: N818 (a signal, not an error)
    """Raised by a ``watch`` to end a simulation whose verdict can no longer change."""


class Progress:
    """A tqdm bar of finished requests, updated in steps (``enabled`` False: nothing);
    ``watch(rid, at_s)``, if given, sees every request finished or rejected, and
    ``first_token(rid, at_s)`` every first token; either may raise ``Settled`` to end the
    simulation there."""

    def __init__(self, total: int, enabled: bool, watch=None, first_token=None):
        self.bar, self.count, self.step = None, 0, max(1, total // 200)
        self.watch, self.first_token = watch, first_token
        if enabled:
            from tqdm import tqdm

            self.bar = tqdm(total=total, unit="req", smoothing=0.1)

    def done(self, rid: int, at_s: float) -> None:
        if self.watch is not None:
            self.watch(rid, at_s)
        self.count += 1
        if self.bar is not None and self.count % self.step == 0:
            self.bar.update(self.step)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.update(self.count - self.bar.n)
            self.bar.close()


def arrival_watched(dispatch, watch, table, env):
    """``dispatch``, telling a watch's ``arrival(table, rid, at_s)`` first (if it has one)."""
    arrival = getattr(watch, "arrival", None)
    if arrival is None:
        return dispatch

    def told(rid: int) -> None:
        arrival(table, rid, env.now)
        dispatch(rid)

    return told


def watched_progress(total: int, enabled: bool, watch, table) -> Progress:
    """The run's ``Progress``, telling ``watch(table, rid, at_s)`` (if any) each request finished
    or rejected, and its ``first_token(table, rid, at_s)`` (if it has one) each first token."""
    first = getattr(watch, "first_token", None)
    return Progress(total, enabled, watch and partial(watch, table),
                    None if first is None else partial(first, table))  # fmt: skip
