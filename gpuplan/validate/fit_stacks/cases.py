"""The stack campaign's records as the stack fit reads them: loaded with each whole-model
record's host probes (``host_speed``), and split into fit and held-out cases, 70% of each
(stack, kind)'s cases to the fit, seeded (``split``)."""

from __future__ import annotations

import json
import random
from collections import defaultdict
from pathlib import Path

from gpuplan.errors import GpuplanError
from gpuplan.validate.record_kinds import MODEL_KINDS

FIT_SHARE = 0.7


def load(data_dir: str | Path, device: str | None = None) -> list:
    """Every record of ``DIR/*.jsonl`` and ``DIR/*/*.jsonl`` (bad lines are reported, skipped)."""
    from gpuplan.validate.records import read_records

    root = Path(data_dir)
    if not root.is_dir():
        raise GpuplanError(f"--data {str(root)!r}: not a folder of records")
    out = []
    for path in sorted([*root.glob("*.jsonl"), *root.glob("*/*.jsonl")]):
        records, errors = read_records(path)
        for err in errors:
            print(f"{path}: {err}")
        probes = _host_probes(path)
        modules = _host_probes(path, "module_probe_s")
        for r in records:
            if device is None or r.device == device:
                out.append(r)
                if probes.get(r.line_no):
                    HOST_PROBE_S[id(r)] = probes[r.line_no]
                if modules.get(r.line_no):
                    MODULE_PROBE_S[id(r)] = modules[r.line_no]
    if not out:
        raise GpuplanError(f"--data {str(root)!r}: no records")
    return out


# Each whole-model record's own host probe (``host_probe_s``, s per launch, taken beside it by
# the campaign), by ``id`` of the loaded record: the record is priced at that host's speed
# against the reference host (``hwmodels/data/host_reference.json``), as ``--host-speed``
# prices a user's host. Eager HF steps are CPU-bound and the lent machines' CPUs differ: on the
# H200 calls, decode records with a 14 us probe ran 1.5x their 9 us peers' measured/predicted.
# Off unless ``--host-probes``: on the three H200 calls it moved the held-out hf-transformers
# decode from 17.0/44.1% to 18.9/49.5% (median/p90), prefill from 18.6/38.6% to 18.8/26.6% and
# torch-compile training from 18.5/30.4% to 37.6/44.8% (the probe, 5 x 64 launches, is noisy).
HOST_PROBE_S: dict[int, float] = {}
USE_HOST_PROBES = False
# The module probe of a paired record (``module_probe_s``: the campaign's ``hostpair`` part times
# each case in rounds, each after a toy transformers model's forward), by ``id`` of the loaded
# record: always used where present. The record is priced at its probe over the reference module
# probe (``host_reference.json``), as ``--host-speed`` from ``host_probe --kind module`` prices
# a user's host; the records without one are priced at the reference speed.
MODULE_PROBE_S: dict[int, float] = {}


def _host_probes(path: Path, key: str = "host_probe_s") -> dict[int, float]:
    """{line number: the probe ``key``} of the whole-model records of one file."""
    out = {}
    with path.open() as f:
        for i, line in enumerate(f, 1):
            try:
                raw = json.loads(line)
            except ValueError:
                continue
            probe = raw.get(key) if isinstance(raw, dict) else None
            if isinstance(probe, (int, float)) and probe > 0 and raw.get("kind") in MODEL_KINDS:
                out[i] = float(probe)
    return out


def host_speed(rec) -> float | None:
    """The record's host speed factor (its probe over the reference host's), where it has one."""
    from gpuplan.validate.harness.host_probe import reference_module_probe_s, reference_s_per_launch

    if id(rec) in MODULE_PROBE_S:
        return MODULE_PROBE_S[id(rec)] / reference_module_probe_s()
    probe = HOST_PROBE_S.get(id(rec)) if USE_HOST_PROBES else None
    return None if probe is None else probe / reference_s_per_launch()


def stratum(rec) -> tuple[str, str]:
    return rec.params.get("stack", "pytorch"), rec.kind


def _case_key(rec) -> str:
    params = {k: v for k, v in rec.params.items() if k != "timing"}
    return json.dumps([rec.kind, rec.device, params], sort_keys=True)


def split(records: list, seed: int) -> tuple[list, list]:
    """(fit, held out): 70% of each (stack, kind)'s cases to the fit, seeded."""
    cases: dict[tuple, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for rec in records:
        cases[stratum(rec)][_case_key(rec)].append(rec)
    rng = random.Random(seed)
    fit, held = [], []
    for key in sorted(cases):
        names = sorted(cases[key])
        rng.shuffle(names)
        n_fit = max(1, round(FIT_SHARE * len(names))) if len(names) > 1 else 1
        for i, name in enumerate(names):
            (fit if i < n_fit else held).extend(cases[key][name])
    return fit, held
