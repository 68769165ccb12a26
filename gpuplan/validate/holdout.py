"""The calibration's split of the records into a fit part and a held-out part: seeded,
stratified by kind, by case (a case measured in several runs falls on one side)."""

from __future__ import annotations

import json
import zlib
from collections.abc import Sequence

import numpy as np

from gpuplan.validate.records import Record


def split(
    records: Sequence[Record], *, seed: int, train_fraction: float
) -> tuple[list[Record], list[Record]]:
    """Seeded split stratified by kind: ``train_fraction`` of each kind's cases to train, the rest
    to test; the records of one case (same kind and parameters, measured in several runs) go
    together."""
    train, test = [], []
    for kind in sorted({r.kind for r in records}):
        # one stream per kind: adding another kind's records leaves this kind's split alone
        rng = np.random.default_rng([seed, zlib.crc32(kind.encode())])
        cases: dict[str, list[Record]] = {}
        for r in records:
            if r.kind == kind:
                cases.setdefault(json.dumps(r.params, sort_keys=True), []).append(r)
        groups = list(cases.values())
        order = rng.permutation(len(groups))
        n_train = int(round(train_fraction * len(groups)))
        train += [r for i in order[:n_train] for r in groups[i]]
        test += [r for i in order[n_train:] for r in groups[i]]
    return train, test

