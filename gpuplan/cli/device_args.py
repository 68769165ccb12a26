"""``--gpu`` and ``--override`` on every command that takes a device: a catalogue key, or a device
of one's own (``hwmodels.own_device``: a JSON or YAML file, or a catalogue device with figures
changed).

Every command declares the pair with ``add_gpu_argument``. The command line's parser
(``gpuplan.cli.Parser``) calls ``resolve_device`` on each namespace it parses, so the device is
registered and ``args.gpu`` becomes its key before any command runs, and a command re-parsing
another's flags (``diagnose``, ``report``) gets the same. ``run_noted`` runs a command priced on
such a device: the printout opens with the device line (what it is, that it was not measured,
how it was priced); a JSON document carries ``device_measured: false``, ``device_source`` and
``device_note``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json

from gpuplan.cli.argtypes import word


def override_arg(text: str) -> str:
    """One ``--override FIELD=VALUE|Nx``, its form and field checked where it is parsed."""
    from gpuplan.errors import GpuplanError
    from gpuplan.hwmodels.own_device import parse_override

    try:
        parse_override(text)
    except GpuplanError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return text


def add_gpu_argument(p: argparse.ArgumentParser, help: str, **kw) -> None:
    """``--gpu`` (a catalogue key or a device file) and the repeatable ``--override``."""
    p.add_argument("--gpu", type=word, help=f"{help}; or a device file (.json, .yaml: see "
                   "docs/hardware.md)", **kw)  # fmt: skip
    p.add_argument("--override", action="append", type=override_arg, metavar="FIELD=VALUE|Nx",
                   help="change one figure of the --gpu device, e.g. hbm_bytes_per_s=1.3x or "
                   "tdp_w=1000 (repeatable; a what-if, never measured)")  # fmt: skip


def resolve_device(ns: argparse.Namespace) -> None:
    """Register the device of ``ns.gpu`` and ``ns.override`` when it is one of one's own, and
    put its key in ``ns.gpu`` and its origin in ``ns.device_origin``. Idempotent: the overrides
    are consumed, so a second pass (the parent parser's) changes nothing."""
    if not hasattr(ns, "override"):
        return
    from gpuplan.errors import GpuplanError
    from gpuplan.hwmodels.own_device import own_device

    overrides = ns.override or []
    if overrides and not ns.gpu:
        raise GpuplanError(f"--override {overrides[0]} needs --gpu: the device to change")
    origin = own_device(ns.gpu, overrides) if ns.gpu else None
    ns.override = None
    if origin is None:
        return
    if getattr(ns, "workers", None) or getattr(ns, "scheduler", None):
        raise GpuplanError(f"--gpu {origin.file or ns.gpu} with --override or a device file "
                           "runs in this process only: drop --workers/--scheduler")  # fmt: skip
    ns.gpu, ns.device_origin = origin.key, origin


def run_noted(args: argparse.Namespace) -> int | None:
    """``args.func(args)``, its printout opened by the device line of a device of one's own (a
    JSON document gets the device keys instead)."""
    origin = getattr(args, "device_origin", None)
    if origin is None:
        return args.func(args)
    if not getattr(args, "json", False):
        print(origin.note())
        return args.func(args)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = args.func(args)
    print(with_device_keys(out.getvalue(), origin), end="")
    return code


def with_device_keys(text: str, origin) -> str:
    """A command's JSON output with ``device_measured``, ``device_source`` and ``device_note``
    after its ``device`` key (first, if it has none); any other output unchanged."""
    from gpuplan.tables import dump_json

    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        return text
    if not isinstance(doc, dict):
        return text
    keys = {"device_measured": False, "device_source": origin.source,
            "device_note": origin.note()}  # fmt: skip
    out = {} if "device" in doc else dict(keys)
    for k, v in doc.items():
        out[k] = v
        if k == "device":
            out |= keys
    return dump_json(out) + "\n"
