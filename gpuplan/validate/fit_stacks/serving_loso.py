"""Leave one source out: the serving stacks' fitted parameters refitted without each source, and
every published serving row priced with the values fitted without its own source.

    python3 -m gpuplan.validate.fit_stacks.serving_loso      # refit, write stack_fit_loso.json

A user's engine, model and GPU are never among the rows a fit has seen, so the error that counts
is the one on a source no fit has read. For each stack that ``fit_stacks.serving`` fits and each
source whose rows it prices, the stack's parameters are fitted again, by the same grids and
rounds (``GRIDS``, ``SECOND_ROUND``), on every row of the stack's OTHER sources; a stack that no
other source runs keeps its priors (``stacks.serving.PRIORS``: the values before any fit). The
document (``LOSO_PATH``) records, per stack and left-out source, the values, the sources and rows
they were fitted on, and whether they are the priors. ``left_out`` prices each source's rows
with its values; ``gpuplan serve --reproduce`` and ``benchmarks/generalization.py`` print it.
"""

from __future__ import annotations

import argparse
import functools
import json
from pathlib import Path

import pandas as pd

from gpuplan.sim.stacks import get_stack, register
from gpuplan.sim.stacks.serving import FIT_PATH, PRIORS
from gpuplan.validate.fit_stacks.serving import GRIDS, NEUTRAL, SECOND_ROUND, fit_stack, with_values
from gpuplan.validate.published import serving as published

LOSO_PATH = FIT_PATH.with_name("stack_fit_loso.json")


def _stack_rows(rows: pd.DataFrame, name: str) -> pd.DataFrame:
    return rows[rows["engine"].map(published.ENGINE_STACK) == name]


def fit_without(rows: pd.DataFrame, name: str, source: str) -> dict:
    """``name``'s fitted values from its rows of sources other than ``source`` (both rounds, as
    ``fit_stacks.serving.main`` fits them), or its priors where no other source runs it."""
    others = _stack_rows(rows, name)
    others = others[others["source"] != source]
    if others.empty:
        return {"values": dict(PRIORS.get(name, {})), "prior": True, "fitted_on": [], "rows": 0}
    original = get_stack(name)
    try:
        if name in NEUTRAL:
            register(with_values(name, NEUTRAL[name]))
        values, _ = fit_stack(name, others, GRIDS[name])
        if name in SECOND_ROUND:
            register(with_values(name, values))
            more, _ = fit_stack(name, others, SECOND_ROUND[name])
            values |= more
    finally:
        register(original)
    return {"values": values, "prior": False, "rows": len(others),
            "fitted_on": sorted(others["source"].unique())}  # fmt: skip


def fit_all(rows: pd.DataFrame | None = None, progress=print) -> dict:
    """Every (stack, left-out source) fit: the ``LOSO_PATH`` document."""
    rows = published.load_rows() if rows is None else rows
    out: dict = {"about": __doc__.strip().splitlines()[0], "stacks": {}}
    for name in GRIDS:
        for source in sorted(_stack_rows(rows, name)["source"].unique()):
            fitted = fit_without(rows, name, source)
            out["stacks"].setdefault(name, {})[source] = fitted
            progress(f"{name} without {source}: {fitted['values']}")
    return out


@functools.cache
def loso_values() -> dict:
    """The committed leave-one-source-out document's stacks ({} before any)."""
    try:
        return json.loads(LOSO_PATH.read_text())["stacks"]
    except FileNotFoundError:
        return {}


def _as_json_values(values: dict) -> dict:
    return {k: tuple(tuple(p) for p in v) if isinstance(v, list) else v for k, v in values.items()}


def left_out(frame: pd.DataFrame | None = None) -> pd.DataFrame:
    """``published.reproduce`` with each source's rows priced by the values fitted without it
    (a source whose stack fits nothing is priced as it is)."""
    frame = published.load_rows() if frame is None else frame
    fits = loso_values()
    parts = []
    for source, rows in frame.groupby("source", sort=True):
        stacks = set(rows["engine"].map(published.ENGINE_STACK).dropna())
        originals = {name: get_stack(name) for name in stacks if source in fits.get(name, {})}
        try:
            for name in originals:
                register(with_values(name, _as_json_values(fits[name][source]["values"])))
            parts.append(published.reproduce(rows))
        finally:
            for stack in originals.values():
                register(stack)
    return pd.concat(parts).loc[frame.index] if parts else published.reproduce(frame)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=LOSO_PATH)
    args = ap.parse_args(argv)
    doc = fit_all()
    args.out.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
