"""The command line: ``gpuplan <command> [options]``.

Each command lives in a module with ``register(subparsers) -> None`` that adds its parser and
sets ``func=handler``, where ``handler(args) -> int``. Modules are imported when the parser is
built; the heavy parts of gpuplan are imported inside the handlers, so ``gpuplan --help`` stays
fast. An optional command whose module is absent is left out.

Every command takes ``--json`` (one JSON document on stdout, nothing else there) and ``--debug``.
Exit codes: 0 ok; 1 the command ran and found a failure it was asked to detect, or the plan
asked about cannot run (``Infeasible``: one line ``gpuplan: does not fit: ...`` naming the nearest
change that fits; with ``--json`` also a document ``{"feasible": false, ...}``); 2 bad input (a
``GpuplanError``, a bad command line, a file that cannot be read: one line ``gpuplan: error: ...``
on stderr); 3 an internal error (its traceback only with ``--debug``).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import signal
import sys
import threading
import traceback
from collections.abc import Sequence

from gpuplan import __version__
from gpuplan.errors import GpuplanError, Infeasible

COMMAND_MODULES = ("gpuplan.cli.catalog_cmd", "gpuplan.cli.validate_cmd")
OPTIONAL_COMMAND_MODULES = (
    "gpuplan.cli.estimate_cmd",
    "gpuplan.cli.train_cmd",
    "gpuplan.cli.search_cmd",
    "gpuplan.cli.serve_cmd",
    "gpuplan.cli.cluster_cmd",
    "gpuplan.cli.diagnose_cmd",
    "gpuplan.cli.report_cmd",
    "gpuplan.cli.watch_cmd",
)

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INTERNAL = 0, 1, 2, 3


class UsageError(Exception):
    """A bad command line; reported in one line, exit code 2."""


class Parser(argparse.ArgumentParser):
    """argparse, except that an error is raised (one line, no usage block) instead of exiting,
    and a flag is never abbreviated (``--prompt`` is not ``--prompt-tokens``: ``diagnose`` and
    ``report`` re-read a command's flags by their full names)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{message} (see '{self.prog} --help')")

    def parse_known_args(self, args=None, namespace=None):
        """argparse's, then the device of ``--gpu``/``--override`` registered (``device_args``):
        every command, and every command re-parsing another's flags, sees its key."""
        from gpuplan.cli.device_args import resolve_device

        ns, rest = super().parse_known_args(args, namespace)
        resolve_device(ns)
        return ns, rest


def add_common_options(parser: argparse.ArgumentParser) -> None:
    """``--json`` and ``--debug`` on a command; left as they are where the command has them.

    Defaults are suppressed so that ``gpuplan --debug cmd`` is not undone by the command's parser.
    """
    for flag, help_text in (
        ("--json", "print one JSON document (raw SI numbers) instead of tables"),
        ("--debug", "show the traceback of an internal error"),
    ):
        # a command that defines the flag itself keeps its own
        with contextlib.suppress(argparse.ArgumentError):
            parser.add_argument(
                flag, action="store_true", default=argparse.SUPPRESS, help=help_text
            )


def require_subcommand(parser: argparse.ArgumentParser, subparsers) -> None:
    """Make ``parser`` (a command group) complain, listing its commands, when none is given."""
    names = ", ".join(subparsers.choices)

    def missing(args: argparse.Namespace) -> int:
        raise UsageError(f"choose a command: {names} (see '{parser.prog} --help')")

    parser.set_defaults(func=missing)


def _register_optional(module_name: str, subparsers) -> None:
    """Register a command whose module may be absent; one that fails to import is a warning."""
    before = set(subparsers.choices)
    try:
        importlib.import_module(module_name).register(subparsers)
    except ModuleNotFoundError as err:
        if err.name != module_name:
            print(f"gpuplan: warning: {module_name} left out: {err}", file=sys.stderr)
        return
    except Exception as err:  # a broken optional command must not break the others
        print(f"gpuplan: warning: {module_name} left out: {err!r}", file=sys.stderr)
        return
    for name in set(subparsers.choices) - before:
        add_common_options(subparsers.choices[name])


def build_parser() -> argparse.ArgumentParser:
    """The whole command line: global options, then one subcommand per registered module."""
    parser = Parser(
        prog="gpuplan",
        description="Performance model of large language models on GPU systems.",
    )
    parser.add_argument("--version", action="version", version=f"gpuplan {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks of internal errors")
    parser.set_defaults(json=False, debug=False)
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND")
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    for module_name in OPTIONAL_COMMAND_MODULES:
        _register_optional(module_name, subparsers)
    require_subcommand(parser, subparsers)
    return parser


def _run(argv: Sequence[str] | None, state: dict[str, bool]) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as done:  # --help and --version end here
        return done.code if isinstance(done.code, int) else EXIT_OK
    state["debug"] = bool(getattr(args, "debug", False))
    args.command_argv = list(argv or ())  # diagnose and report re-read a command's own flags
    from gpuplan.cli.device_args import run_noted

    code = run_noted(args)  # args.func(args), with the device line of a device of one's own
    return EXIT_OK if code is None else int(code)


class Terminated(BaseException):
    """SIGTERM, raised where the program is, so that every ``finally`` runs: a half-written
    output's temporary file is removed, a Dask pool is closed."""


def _on_sigterm(signum, frame):
    raise Terminated


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``gpuplan`` with ``argv`` (``sys.argv[1:]`` by default); return the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    state = {"debug": "--debug" in argv}
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        return _main(argv, state)
    except Terminated:
        print("gpuplan: terminated (SIGTERM): nothing half-written was left", file=sys.stderr)
        return 128 + signal.SIGTERM
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _main(argv: list[str], state: dict[str, bool]) -> int:
    try:
        return _run(argv, state)
    except Infeasible as err:  # the plan cannot run: exit 1, one line (``--json``: a document)
        if "--json" in argv:
            import json

            print(json.dumps({"feasible": False, "does_not_fit": str(err), "nearest_fix": err.fix}))
        print(f"gpuplan: does not fit: {err}", file=sys.stderr)
        return EXIT_FAILED
    except (UsageError, GpuplanError) as err:
        print(f"gpuplan: error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:  # the reader went away (``gpuplan models | head``): not an error
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - the flush at exit must not fail
        return EXIT_OK
    except OSError as err:  # a path the user gave that cannot be read or written
        where = f" {err.filename!r}" if err.filename else ""
        print(f"gpuplan: error: {err.strerror or err}{where}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("gpuplan: interrupted", file=sys.stderr)
        return 130
    except Exception as err:
        if state["debug"]:
            traceback.print_exc()
        print(
            f"gpuplan: internal error: {type(err).__name__}: {err}"
            + ("" if state["debug"] else " (run with --debug for the traceback)"),
            file=sys.stderr,
        )
        return EXIT_INTERNAL
