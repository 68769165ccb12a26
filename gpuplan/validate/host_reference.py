"""The reference host's speed, as the host probe measures it: what ``--host-speed`` is relative to.

Predictions price eager CPU work (``Efficiency.host_launch_s`` and the autograd terms) at the
speed of the host of the reference run (``data/runs.json``: ``"host": "reference"``). That run
took no host probe, but the runs that did carry a fitted host factor (their CPU cost per op over
the reference host's, ``calibration_<device>.json``: ``host_factor``), so the reference host's
probe is each such run's probe divided by its factor (the median over runs whose factor was
fitted, i.e. differs from 1). Run with ``python3 -m gpuplan.validate.host_reference`` from a
checkout; it writes ``gpuplan/hwmodels/data/host_reference.json``, which the probe
(``gpuplan.validate.harness.host_probe``) reads on any machine.

The module probe's reference (``reference_module_probe_s``, ``host_probe --kind module``) is
the median of every round's module probe in the paired records (``--module-probes``, the
campaign's ``hostpair`` part: ``data/h200_stacks/run10/hostpair.jsonl``): the H200 host's median
state over that run. The ``hf-transformers`` host costs are fitted at that speed
(``fit_stacks``: each paired record priced at its own probe over this one).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from gpuplan.errors import GpuplanError
from gpuplan.outputs import write_text

PACKAGE_DATA = Path(__file__).resolve().parents[1] / "hwmodels" / "data"
REPO_DATA = Path(__file__).resolve().parents[2] / "data"


def reference_probe(runs: dict, fit: dict) -> dict:
    """The reference host's probe (seconds per launch) and the runs it was derived from."""
    factors = fit["parameters"].get("host_factor", {})
    derived = {}
    for run in runs["runs"]:
        probe, factor = run.get("host_probe_s_per_launch"), factors.get(run["folder"])
        if probe and factor and abs(factor - 1.0) > 1e-9:
            derived[run["folder"]] = probe / factor
    if not derived:
        raise GpuplanError("no run has both a host probe and a fitted host factor: the "
                           "reference host's speed cannot be derived")
    return {
        "reference_host_probe_s_per_launch": statistics.median(derived.values()),
        "derived_from": {k: {"probe_s_per_launch": next(
            r["host_probe_s_per_launch"] for r in runs["runs"] if r["folder"] == k),
            "host_factor": factors[k]} for k in sorted(derived)},
        "script": "python3 -m gpuplan.validate.host_reference",
    }


def module_reference(path: Path) -> dict:
    """The reference module probe: the median round probe of a paired records file."""
    rounds = []
    for line in Path(path).read_text().splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        rounds += [r["module_probe_s"] for r in rec.get("rounds", ())
                   if isinstance(r, dict) and isinstance(r.get("module_probe_s"), (int, float))]
    if not rounds:
        raise GpuplanError(f"--module-probes {str(path)!r}: no record has rounds with a "
                           "module_probe_s (the campaign's hostpair part writes them)")
    return {"reference_module_probe_s": statistics.median(rounds),
            "module_probe_from": {"records": _relative(Path(path)), "rounds": len(rounds)}}


def _relative(path: Path) -> str:
    """``path`` from the checkout's root where it lies inside it (a data file's provenance)."""
    try:
        return str(path.resolve().relative_to(REPO_DATA.parent))
    except ValueError:
        return str(path)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m gpuplan.validate.host_reference",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=str(REPO_DATA), help="the checkout's data folder")
    p.add_argument("--device", default="h200", help="the device whose fit holds the factors")
    p.add_argument("--out", default=str(PACKAGE_DATA / "host_reference.json"))
    p.add_argument("--module-probes",
                   default=str(REPO_DATA / "h200_stacks" / "run10" / "hostpair.jsonl"),
                   help="the paired records whose median round module probe is the reference")
    args = p.parse_args(argv)
    runs = json.loads((Path(args.data) / "runs.json").read_text())
    fit = json.loads((PACKAGE_DATA / f"calibration_{args.device}.json").read_text())
    doc = reference_probe(runs, fit) | module_reference(Path(args.module_probes))
    doc |= {"device": args.device}
    write_text(args.out, json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
