"""A stand-in kind for tests/test_distributed_teardown.py: rank 1 dies by SIGABRT, either
inside its work (``job.kind == "abort_in_work"``) or half a second after it (the process is
then in process-group teardown or interpreter exit, as a gloo teardown abort is)."""

from __future__ import annotations

import os
import threading


def run_rank(rt) -> None:
    if rt.rank != 1:
        return
    if rt.job.kind == "abort_in_work":
        os.abort()
    threading.Timer(0.5, os.abort).start()  # non-daemon: fires while the process shuts down
