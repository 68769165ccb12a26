"""Sweeps of independent pieces of work, in this process or on a Dask cluster.

A sweep (the strategy search, the serving plan, a cluster scenario over many seeds) cuts its work
into pieces that do not depend on one another and on nothing but their arguments, maps a pure
function over them, and merges the results in the order of the pieces. How the pieces are cut
never depends on where they run, so the answer is the same bytes in this process, on a local
Dask cluster or on a remote one (tests/test_dask.py compares the documents).

- ``InProcess`` (the default) runs the pieces one after another here;
- ``DaskPool`` runs them on Dask's distributed scheduler (https://distributed.dask.org):
  ``open_pool(workers=N)`` starts a local cluster of N single-threaded worker processes and stops
  it afterwards, ``open_pool(scheduler="tcp://host:8786")`` uses a running cluster, whose workers
  must be able to import gpuplan and read the files the work names, at the same paths.

Dask is an optional dependency (``pip install 'gpuplan[dask]'``), imported only here and only
when a pool is opened. Local workers are spawned processes that import the caller's main module
again: a script that opens a local pool keeps its work under ``if __name__ == "__main__":``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

from gpuplan.errors import GpuplanError, shown

MAX_LOCAL_WORKERS = 256  # more worker processes than this on one machine is a typo
CONNECT_TIMEOUT_S = 10.0  # how long to wait for a --scheduler to answer
INSTALL_HINT = "pip install 'gpuplan[dask]'"


class Pool(Protocol):
    """Where the pieces of a sweep run."""

    @property
    def width(self) -> int:
        """How many pieces are worth handing out at once (1: one at a time)."""

    def map(self, fn: Callable[[Any], Any], items: Sequence[Any]) -> list[Any]:
        """``[fn(x) for x in items]``, in the order of ``items``."""


def check_pool(pool: object) -> None:
    """A GpuplanError unless ``pool`` is None or a ``Pool`` (a ``map`` and a ``width``)."""
    if pool is not None and not (callable(getattr(pool, "map", None)) and hasattr(pool, "width")):
        raise GpuplanError(f"pool={shown(pool)} is invalid: give None (this process) or a Pool "
                           "(gpuplan.sim.sweep: InProcess, DaskPool)")  # fmt: skip


class InProcess:
    """Every piece here, one after another."""

    width = 1
    label = "in-process"

    def map(self, fn, items):
        return [fn(x) for x in items]


class DaskPool:
    """Pieces as Dask tasks; results gathered in the order of the pieces."""

    def __init__(self, client, label: str):
        self.client, self.label = client, label

    @property
    def width(self) -> int:
        return max(1, len(self.client.scheduler_info(n_workers=-1)["workers"]))

    def map(self, fn, items):
        if not items:
            return []
        # pure=False: every piece is its own task, even where two pieces look alike
        futures = self.client.map(fn, list(items), pure=False)
        return self.client.gather(futures)


def _distributed():
    try:
        import distributed
    except ImportError:
        raise GpuplanError(
            f"--workers and --scheduler need Dask, which is not installed: {INSTALL_HINT}"
        ) from None
    return distributed


def check_pool_options(workers: int | None, scheduler: str | None) -> None:
    """Raise a GpuplanError naming the option unless the pair is usable."""
    if workers is not None and scheduler is not None:
        raise GpuplanError(
            f"--workers {workers} and --scheduler {scheduler} exclude each other: give one"
        )
    if workers is not None and not 1 <= workers <= MAX_LOCAL_WORKERS:
        raise GpuplanError(
            f"--workers {workers} is invalid: give 1 to {MAX_LOCAL_WORKERS} local worker processes"
        )
    if scheduler is not None and not scheduler.strip():
        raise GpuplanError("--scheduler '' is invalid: give an address such as tcp://host:8786")


@contextlib.contextmanager
def open_pool(*, workers: int | None = None, scheduler: str | None = None) -> Iterator[Pool]:
    """In-process when neither is given; else a Dask pool, closed (and a local cluster stopped)
    when the block ends."""
    check_pool_options(workers, scheduler)
    if workers is None and scheduler is None:
        yield InProcess()
        return
    distributed = _distributed()
    with contextlib.ExitStack() as stack:
        if scheduler is None:
            # one thread per worker process: the pieces hold the GIL (numpy, simpy); on this
            # host only, its status page on a free port (the scheduler serves one regardless)
            cluster = stack.enter_context(distributed.LocalCluster(
                n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                dashboard_address=":0", silence_logs=logging.ERROR,
            ))  # fmt: skip
            address, label = cluster, f"{workers} local Dask workers"
        else:
            address, label = _address(scheduler), f"Dask scheduler {scheduler}"
        try:
            client = stack.enter_context(
                distributed.Client(address, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
            )
        except (OSError, TimeoutError, ValueError) as err:
            raise GpuplanError(
                f"--scheduler {scheduler}: no Dask scheduler answered within "
                f"{CONNECT_TIMEOUT_S:g} s ({type(err).__name__})"
            ) from None
        yield DaskPool(client, label)


def _address(text: str) -> str:
    """A scheduler address Dask can dial (``tcp://host:port``, ``tls://``, ``ws://``, ...)."""
    from distributed.comm import parse_address, parse_host_port

    try:
        scheme, location = parse_address(text.strip())
        host, port = parse_host_port(location) if scheme in ("tcp", "tls") else (location, 1)
        if scheme not in DIALABLE or not host or not port:
            raise ValueError(text)
    except ValueError:
        raise GpuplanError(
            f"--scheduler {text!r} is not a Dask scheduler address: give one such as "
            "tcp://host:8786"
        ) from None
    return text.strip()


DIALABLE = ("tcp", "tls", "ws", "wss", "ucx")  # Dask's comm backends that reach another process


def chunks(n: int, size: int) -> list[slice]:
    """``range(n)`` cut into slices of ``size`` (the last may be shorter)."""
    return [slice(lo, min(lo + size, n)) for lo in range(0, n, size)]
