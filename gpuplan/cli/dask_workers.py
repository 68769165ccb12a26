"""Options of the commands that sweep or simulate: where the work runs, and wall-clock figures.

- ``--workers N`` runs the pieces of a sweep (``search train``, ``serve plan``, ``cluster
  --repeat``) on a local Dask cluster of N worker processes, ``--scheduler ADDRESS`` on a running
  Dask cluster; by default they run in this process (``sim.sweep``). The answer is the same.
- Wall-clock figures (how long the command took, strategies evaluated per second) are not part
  of the answer: a ``--json`` document keeps them in its ``timing`` object and nowhere else, so
  that everything outside ``timing`` is a function of the inputs and the seed; ``--no-timing``
  drops that object, and the wall-clock phrases from the tables, so that the same inputs and
  seed print the same bytes.
"""

from __future__ import annotations

from typing import Any

from gpuplan.cli.argtypes import positive_int


def add_sweep_options(p) -> None:
    """--workers and --scheduler."""
    p.add_argument("--workers", type=positive_int, metavar="N",
                   help="run the sweep on a local Dask cluster of N worker processes "
                   "(default: in this process; needs pip install 'gpuplan[dask]')")  # fmt: skip
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="run the sweep on a running Dask cluster, e.g. tcp://host:8786")  # fmt: skip


def add_timing_option(p) -> None:
    """--no-timing."""
    p.add_argument("--no-timing", action="store_true",
                   help="leave wall-clock figures out (the same seed then prints the same bytes)")  # fmt: skip


def open_pool(args):
    """The pool of --workers / --scheduler (a context manager; in-process by default)."""
    from gpuplan.sim.sweep import open_pool as open_

    return open_(workers=getattr(args, "workers", None), scheduler=getattr(args, "scheduler", None))


def pool_label(args) -> str:
    if getattr(args, "scheduler", None):
        return f"Dask scheduler {args.scheduler}"
    if getattr(args, "workers", None):
        return f"{args.workers} local Dask workers"
    return "in-process"


def timed(args) -> bool:
    """Whether wall-clock figures are shown."""
    return not getattr(args, "no_timing", False)


def with_timing(doc: dict[str, Any], args, timing: dict[str, Any]) -> dict[str, Any]:
    """``doc`` with its ``timing`` object last, unless --no-timing."""
    return doc | {"timing": timing} if timed(args) else doc
