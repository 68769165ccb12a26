"""``gpuplan diagnose train|serve``: the five-layer walk of one setup (``sim.diagnose.walk``).

Takes the flags of ``gpuplan train`` or ``gpuplan serve`` as they are, prices the setup, then
walks model definition, parallelization, runtime, compilation and hardware, each layer keeping
the change it offers that gpuplan prices fastest, cumulatively; prints each layer's change, the
metric after it, its gain and share of the total gain, and the ``gpuplan train|serve`` command
that reproduces the row; the physical limit (the roofline bound of the whole step) last.
"""

from __future__ import annotations

import argparse

from gpuplan.errors import GpuplanError
from gpuplan.tables import dump_json, format_value, render_table

REFUSED = {"train": ("--reproduce", "--timeline", "--all-ranks", "--straggler", "--jitter"),
           "serve": ("--reproduce", "--disaggregate", "--requests-csv", "--timeline-csv",
                     "--progress")}  # fmt: skip
DROPPED = ("--json", "--debug", "--no-timing")  # accepted, but not part of the setup


class _Into:
    """A stand-in for argparse's subparsers: ``add_parser`` returns the given parser, so a
    command's own ``register`` declares its flags on it (they are declared once, there)."""

    def __init__(self, parser):
        self.parser = parser

    def add_parser(self, name, **kw):
        return self.parser


def declare(module, parser) -> None:
    """``module.register``'s flags on ``parser``, less its subcommands (``serve plan``, ``serve
    edge``): a diagnosis or a report takes one setup of the command itself."""
    module.register(_Into(parser))
    for action in [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]:  # noqa: SLF001
        parser._remove_action(action)  # noqa: SLF001
        for group in parser._action_groups:  # noqa: SLF001
            if action in group._group_actions:  # noqa: SLF001
                group._group_actions.remove(action)  # noqa: SLF001
        parser._subparsers = None  # noqa: SLF001


def command_parser(kind: str):
    """The parser of ``gpuplan train`` or ``gpuplan serve``, built by the command itself."""
    from gpuplan.cli import Parser, serve_cmd, train_cmd

    p = Parser(prog=f"gpuplan {kind}")
    (train_cmd if kind == "train" else serve_cmd).register(_Into(p))
    return p


def register(subparsers) -> None:
    group = subparsers.add_parser(
        "diagnose", help="five-layer diagnosis of a training or serving setup",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    sub = group.add_subparsers(title="diagnose commands", metavar="COMMAND")
    for kind in ("train", "serve"):
        p = sub.add_parser(kind, help=f"diagnose a `gpuplan {kind}` setup (its flags)",
                           description=__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
        import gpuplan.cli.serve_cmd as serve_cmd
        import gpuplan.cli.train_cmd as train_cmd

        declare(train_cmd if kind == "train" else serve_cmd, p)
        p.set_defaults(func=run, diagnose_kind=kind)
    from gpuplan.cli import require_subcommand

    require_subcommand(group, sub)


def setup_argv(kind: str, argv: list[str], command: str, drop: tuple[str, ...] = ()) -> list[str]:
    """The flags after ``COMMAND KIND`` on the command line, less those that are not setup
    (``drop``: flags of ``command`` itself, each with its value)."""
    at = next(i for i in range(len(argv) - 1) if argv[i] == command and argv[i + 1] == kind)
    rest, out = iter(argv[at + 2:]), []
    for t in rest:
        flag, eq, _ = t.partition("=")
        if flag in drop:
            _ = eq or next(rest, None)
        elif flag not in DROPPED:
            out.append(t)
    return out


def settings_of(kind: str, argv: list[str], command: str = "diagnose") -> dict:
    """``Settings`` of a ``train``/``serve`` argv, after checking it parses as that command."""
    from gpuplan.sim.diagnose.walk import settings_from_argv

    parser = command_parser(kind)
    parser.parse_args(argv)  # a subcommand (serve plan) never gets here: declare drops them
    for flag in REFUSED[kind]:
        if any(t.partition("=")[0] == flag for t in argv):
            raise GpuplanError(f"{command} {kind} prices one setup: drop {flag}")
    actions = parser._option_string_actions  # noqa: SLF001 - which flags take a value

    def takes_value(flag: str) -> bool:
        a = actions.get(flag)
        return a is not None and a.nargs != 0
    return settings_from_argv(argv, takes_value)


def diagnose_setup(kind: str, argv: list[str]):
    """The ``Diagnosis`` of ``gpuplan KIND argv``."""
    from gpuplan.cli.diagnose_pricing import serve_walk, train_walk

    settings = settings_of(kind, argv)
    parser = command_parser(kind)
    return (train_walk if kind == "train" else serve_walk)(settings, parser)


def run(args) -> int:
    kind = args.diagnose_kind
    diag = diagnose_setup(kind, setup_argv(kind, args.command_argv, "diagnose"))
    doc = diagnosis_doc(diag)
    print(dump_json(doc) if args.json else render_diagnosis(doc))
    return 0


def diagnosis_doc(diag) -> dict:
    """The JSON document: baseline, layers, limit; every row with its command."""
    from gpuplan.sim.diagnose.walk import command

    base = {"metric": diag.baseline.metric, **diag.baseline.figures,
            "command": command(diag.kind, diag.baseline_settings)}  # fmt: skip
    layers = [r.to_dict() | {"command": command(diag.kind, r.settings)} for r in diag.layers]
    limit = {"metric": diag.limit.metric, **diag.limit.figures, "basis": diag.limit.basis}
    return {"kind": diag.kind, "metric": diag.metric, "baseline": base, "layers": layers,
            "total_gain": diag.total_gain, "limit": limit, "notes": list(diag.notes)}  # fmt: skip


def _value(metric: str, v: float) -> str:
    if metric.endswith("usd_per_million_tokens") or metric.startswith("usd"):
        return f"${v:,.3g}"
    return format_value("step_time_s", v)


def render_diagnosis(doc: dict) -> str:
    m = doc["metric"]
    rows = [{"layer": "-", "name": "as given", "change": "", "after": _value(m, doc["baseline"]["metric"]),
             "gain": "", "share": ""}]  # fmt: skip
    for r in doc["layers"]:
        rows.append({"layer": r["layer"], "name": r["name"], "change": r["change"],
                     "after": _value(m, r["metric_after"]), "gain": _value(m, r["gain"]),
                     "share": f"{100 * r['share']:.0f}%"})  # fmt: skip
    rows.append({"layer": "-", "name": "physical limit", "change": doc["limit"]["basis"],
                 "after": _value(m, doc["limit"]["metric"]), "gain": "", "share": ""})  # fmt: skip
    first = [n for n in doc["notes"] if n.startswith("as given it does not fit")]
    rows[0]["name"] = "nearest fit" if first else "as given"
    lines = [f"diagnosis of a `gpuplan {doc['kind']}` setup; metric {m} (lower is better)",
             *[f"FIRST: {n}" for n in first], "",
             render_table(rows, ["layer", "name", "change", "after", "gain", "share"],
                          headers={"after": m + " after"}), "", "commands:",
             f"  {rows[0]['name']}: {doc['baseline']['command']}"]  # fmt: skip
    lines += [f"  layer {r['layer']}: {r['command']}" for r in doc["layers"]]
    lines += [f"note: {n}" for n in doc["notes"] if n not in first]
    lines.append(f"band: each row's figures carry the band `gpuplan {doc['kind']}` prints for "
                 "them (run the row's command); a gain is the difference of two such "
                 "predictions")
    return "\n".join(lines)
