"""The host probe: how fast this machine's CPU issues eager PyTorch work, as ``--host-speed``.

Run it on the machine whose runs you want priced: ``python3 -m gpuplan.validate.harness.host_probe``.
It times the launch of 64 tiny kernels (``timing.Clock.host_probe_s``, the probe the harness
takes beside every CPU-bound case) and divides the time per launch by the reference host's
(``gpuplan/hwmodels/data/host_reference.json``, derived by ``gpuplan.validate.host_reference``):
2.0 means this CPU takes twice as long per op; pass it as ``--host-speed`` to the pricing
commands. Only a CUDA device gives a comparable figure; ``--device cpu`` runs the same loop on
the CPU for a smoke test and says that its factor is not comparable.

``--kind module`` times the module probe instead: a one-token forward of a toy two-layer Llama
from Hugging Face transformers (``stack_campaign.hostpair.ModuleProbe``: the Python and dispatch
work per module that eager transformers steps are made of), against the reference module probe
(``reference_module_probe_s``). It is the factor the ``hf-transformers`` stack's host costs
were fitted with (``gpuplan.validate.fit_stacks.kernels``); it needs transformers installed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from importlib import resources

LAUNCHES = 64


def reference_s_per_launch() -> float:
    path = resources.files("gpuplan.hwmodels") / "data" / "host_reference.json"
    return float(json.loads(path.read_text())["reference_host_probe_s_per_launch"])


def reference_module_probe_s() -> float:
    path = resources.files("gpuplan.hwmodels") / "data" / "host_reference.json"
    return float(json.loads(path.read_text())["reference_module_probe_s"])


def module_probe(device: str, *, reps: int = 7) -> dict:
    """The module probe's figures on ``device``: seconds per call and the speed factor."""
    import torch

    from gpuplan.errors import GpuplanError
    from gpuplan.validate.stack_campaign.common import Timer
    from gpuplan.validate.stack_campaign.hf import transformers_or_none
    from gpuplan.validate.stack_campaign.hostpair import ModuleProbe

    tf = transformers_or_none()
    if tf is None:
        raise GpuplanError("--kind module needs Hugging Face transformers: pip install "
                           "transformers, or use --kind launch")
    run = ModuleProbe(torch, tf, device, Timer(torch, device))
    per_call = statistics.median(run() for _ in range(reps))
    ref = reference_module_probe_s()
    doc = {"device": device, "kind": "module", "probe_s": per_call,
           "reference_s": ref, "host_speed": per_call / ref}
    if device != "cuda":
        doc["note"] = "a CPU-tensor forward: not comparable with the CUDA reference"
    return doc


def probe(device: str, *, reps: int = 7) -> dict:
    """The probe's figures on ``device``: seconds per launch and the speed factor."""
    import torch

    from gpuplan.validate.harness.timing import Clock

    clock = Clock(torch, device)
    runs = [clock.host_probe_s(launches=LAUNCHES) for _ in range(reps)]
    per_launch = statistics.median(runs) / LAUNCHES
    doc = {
        "device": device,
        "probe_s_per_launch": per_launch,
        "reference_s_per_launch": reference_s_per_launch(),
        "host_speed": per_launch / reference_s_per_launch(),
    }
    if device != "cuda":
        doc["note"] = "a CPU-tensor loop: not comparable with the CUDA reference"
    return doc


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m gpuplan.validate.harness.host_probe",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--kind", default="launch", choices=("launch", "module"),
                   help="launch: 64 tiny kernel launches (plain PyTorch); module: a toy "
                        "transformers model's forward (the hf-transformers stack)")
    args = p.parse_args(argv)
    from gpuplan.errors import GpuplanError

    try:
        doc = probe(args.device) if args.kind == "launch" else module_probe(args.device)
    except GpuplanError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(doc, indent=2))
    print(f"pass --host-speed {doc['host_speed']:.3g} to price work on this host")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
