"""The search's Pareto front is the set of rows no other row matches or beats on every column,
by the definition, on its fast path (cost a fixed rate times time) and its general one."""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.sim.parallel.search import pareto_front

COLUMNS = ("step_time_s", "peak_memory_per_gpu_bytes", "cost_per_step_usd")


def brute_force(frame: pd.DataFrame) -> set[int]:
    """Row labels kept: the first (by time, memory, cost, then label) of each group of equal
    rows, when no row differing from it is no worse on every column."""
    values = frame[list(COLUMNS)].to_numpy()
    order = np.lexsort(values.T[::-1])
    kept: set[int] = set()
    for pos, i in enumerate(order):
        earlier = values[order[:pos]]
        if not np.any(np.all(earlier <= values[i], axis=1)):
            kept.add(int(frame.index[i]))
    return kept


def frame_of(times, mems, costs) -> pd.DataFrame:
    return pd.DataFrame(
        {"step_time_s": times, "peak_memory_per_gpu_bytes": mems, "cost_per_step_usd": costs,
         "label": range(len(times))}  # fmt: skip
    )


values = st.lists(st.tuples(st.integers(1, 6), st.integers(1, 6), st.integers(1, 6)),
                  min_size=1, max_size=40)  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(rows=values)
def test_the_front_with_cost_proportional_to_time_is_the_definition(rows):
    times = [float(t) for t, _m, _c in rows]
    frame = frame_of(times, [float(m) for _t, m, _c in rows], [t * 0.37 for t in times])
    got = pareto_front(frame)
    assert set(got["label"]) == brute_force(frame)
    assert list(got["step_time_s"]) == sorted(got["step_time_s"])


@settings(max_examples=60, deadline=None)
@given(rows=values)
def test_the_front_with_any_cost_is_the_definition(rows):
    frame = frame_of(*([float(x) for x in col] for col in zip(*rows, strict=True)))
    assert set(pareto_front(frame)["label"]) == brute_force(frame)


def test_a_cheaper_slower_row_stays_on_the_front_when_cost_is_not_time():
    frame = frame_of([1.0, 2.0], [5.0, 5.0], [3.0, 1.0])
    assert list(pareto_front(frame)["label"]) == [0, 1]
    frame = frame_of([1.0, 2.0], [5.0, 5.0], [1.0, 2.0])  # the slower one is dominated
    assert list(pareto_front(frame)["label"]) == [0]
