"""``gpuplan report train|serve|cluster ... --out FILE.html`` (or ``.md``): a cost-estimation
report that opens offline.

Takes the flags of ``gpuplan train``, ``serve`` or ``cluster`` as they are, runs that command,
and writes its inputs and assumptions with their sources, the breakdown by layer and operator
class as embedded figures, the five-layer diagnosis, time to train or capacity, GPU-hours,
dollars and kWh (``--electricity-price`` $/kWh; the GPU-hour price file's source and date), the
error bands where the documents carry them, and a +-20% sensitivity table. The file is written
whole or not at all.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import shlex

from gpuplan.cli.argtypes import positive_float
from gpuplan.cli.device_args import with_device_keys
from gpuplan.cli.diagnose_cmd import (
    declare,
    diagnose_setup,
    diagnosis_doc,
    settings_of,
    setup_argv,
)
from gpuplan.errors import GpuplanError
from gpuplan.outputs import check_output, write_atomically

KINDS = ("train", "serve", "cluster")
OWN = ("--out", "--electricity-price")
REFUSED = {"train": ("--reproduce", "--timeline"), "serve": ("--reproduce", "--disaggregate"),
           "cluster": ("--list", "--check")}  # what prints another document than one setup's
NO_PRICE = "no price in the file"  # a report's price source where the price file has none


def register(subparsers) -> None:
    group = subparsers.add_parser("report", help="cost-estimation report (HTML or Markdown)",
                                  description=__doc__,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    sub = group.add_subparsers(title="report commands", metavar="COMMAND")
    from gpuplan.cli import cluster_cmd, serve_cmd, train_cmd

    modules = {"train": train_cmd, "serve": serve_cmd, "cluster": cluster_cmd}
    for kind in KINDS:
        p = sub.add_parser(kind, help=f"report of a `gpuplan {kind}` setup (its flags)",
                           description=__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
        declare(modules[kind], p)
        p.add_argument("--out", required=True, help="the report's file: .html or .md")
        with contextlib.suppress(argparse.ArgumentError):  # train declares it too
            p.add_argument("--electricity-price", type=positive_float, default=None,
                           dest="electricity_price", help="USD per kWh of electricity")  # fmt: skip
        p.set_defaults(func=run, report_kind=kind, command_func=p.get_default("func"))
    from gpuplan.cli import require_subcommand

    require_subcommand(group, sub)


def _document(args) -> dict:
    """The command's own JSON document (its handler, run with --json)."""
    a = copy.copy(args)
    a.json = True
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        a.command_func(a)
    origin = getattr(args, "device_origin", None)  # a device of one's own: its keys added
    return json.loads(with_device_keys(buf.getvalue(), origin) if origin else buf.getvalue())


def run(args) -> int:
    from gpuplan.report.build import serve_report, train_report
    from gpuplan.report.cluster import cluster_report
    from gpuplan.report.render import html_page, markdown

    kind = args.report_kind
    for flag in REFUSED[kind]:
        if getattr(args, flag[2:].replace("-", "_"), None):
            raise GpuplanError(f"report {kind} reports one setup: drop {flag}")
    out = check_output(args.out, "--out", suffixes=("html", "md"))  # before any work
    argv = setup_argv(kind, args.command_argv, "report", drop=OWN)
    command = shlex.join(["gpuplan", kind, *argv])
    if kind != "cluster":
        settings_of(kind, argv, "report")  # what the diagnosis refuses, refused before anything runs
    doc = _document(args)
    if kind == "serve" and (not doc.get("finished") or not doc.get("output_tokens_per_s")):
        raise GpuplanError(
            f"report serve: no request finished (of {doc.get('config', {}).get('requests')}): "
            "nothing was served to report; give a longer --horizon-s or more --requests")
    if kind == "cluster":
        report = cluster_report(doc, command=command, electricity_usd_per_kwh=args.electricity_price,
                                **_cluster_inputs(args, command))  # fmt: skip
    else:
        diag = diagnosis_doc(diagnose_setup(kind, argv))
        if kind == "train":
            report = train_report(doc, diag, command=command,
                                  electricity_usd_per_kwh=args.electricity_price,
                                  **_train_inputs(args))  # fmt: skip
        else:
            report = serve_report(doc, diag, command=command, **_serve_inputs(args))
    text = markdown(report) if out.suffix.lower() == ".md" else html_page(report)
    write_atomically(out, lambda tmp: tmp.write_text(text, encoding="utf-8"))
    print(json.dumps({"report": str(out), "bytes": len(text.encode("utf-8"))}) if args.json
          else f"report written to {out}")  # fmt: skip
    return 0


def _train_inputs(args) -> dict:
    """The GPU's hourly price and TDP of a training report (its cost without --tokens)."""
    from gpuplan.cli.train_cmd import resolve_cluster
    from gpuplan.sim.parallel.cost import usd_per_hour

    acc = resolve_cluster(args).accelerator
    return {"usd_per_gpu_hour": usd_per_hour(acc.key), "tdp_w": acc.tdp_w or 0.0}


def _cluster_inputs(args, command: str) -> dict:
    """The scenario's GPU, its hourly price and the report's inputs section."""
    from gpuplan.report import Section, Table
    from gpuplan.sim.parallel.cost import price_for, usd_per_hour
    from gpuplan.sim.parallel.topology import get_cluster
    from gpuplan.sim.runtime.cluster.scenario import load_scenario

    scenario, path = load_scenario(args.scenario)
    gpu = args.gpu or get_cluster(scenario["cluster"]["preset"]).gpu
    price, rate = price_for(gpu), usd_per_hour(gpu)
    source = price.cited if price else NO_PRICE
    rows = (("scenario", f"{scenario.get('name')}: {scenario.get('description', '')} ({path.name})"),
            ("GPU", gpu), ("GPU-hour price", f"${rate:,.2f} ({source})"),
            ("electricity price", "not given (--electricity-price $/kWh)"
             if args.electricity_price is None else f"${args.electricity_price:g}/kWh"))  # fmt: skip
    inputs = Section(title="Inputs and assumptions", paragraphs=(f"command: {command}",),
                     tables=(Table(columns=("input", "value (source)"), rows=rows),))
    return {"usd_per_gpu_hour": rate, "gpu": gpu, "price_source": source,
            "inputs_section": inputs}


def _serve_inputs(args) -> dict:
    """The price, TDP and the two re-simulations at +-20% request rate of a serve report."""
    import math

    from gpuplan.hwmodels.accelerators import get_accelerator
    from gpuplan.report.build import SWING
    from gpuplan.sim.parallel.cost import price_for, usd_per_hour

    acc = get_accelerator(args.gpu)
    price = price_for(acc.key)
    at_rates = {}
    if args.rate is not None and not math.isinf(args.rate) and not args.trace:
        for name, factor in (("low", 1 - SWING), ("high", 1 + SWING)):
            a = copy.copy(args)
            a.rate = args.rate * factor
            at_rates[name] = _document(a)
    return {"usd_per_gpu_hour": usd_per_hour(acc.key),
            "price_source": price.cited if price else NO_PRICE,
            "tdp_w": acc.tdp_w or 0.0, "electricity_usd_per_kwh": args.electricity_price,
            "at_rates": at_rates}  # fmt: skip
