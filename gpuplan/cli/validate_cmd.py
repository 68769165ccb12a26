"""``gpuplan validate score|calibrate|trace``: check predictions against measurements.

- ``score FILE``: read a JSON Lines file of measurement records (ARCHITECTURE.md contract),
  predict each with ``gpuplan.validate.record_prediction.predict_record`` and report the errors. Bad lines are
  listed on stderr with their line numbers and the rest is still scored.
  ``--max-median-error PCT`` makes the command fail (exit 1) when the median error of any
  (kind, metric) group is above PCT.
- ``calibrate``: fit efficiencies on measured records (``gpuplan.validate.calibrate.main``):
  the runs of ``--data DIR`` (default: the checkout's ``data/``), one ``--device``; the fit is
  written only to ``--out FILE``.
- ``report``: the held-out accuracy report into ``--out DIR`` (``gpuplan.validate.report``).
- ``trace TRACE``: the GPU kernels of a torch profiler trace by operator class
  (``gpuplan.validate.trace.kernel_table``), beside one record's prediction if given.

The modules doing the work are imported when a command runs, by name through ``importlib`` so
that a stand-in can take their place in ``sys.modules``.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import sys
from pathlib import Path
from typing import Any

from gpuplan.cli import add_common_options, require_subcommand
from gpuplan.cli.argtypes import non_negative, open_fraction, random_seed, word
from gpuplan.cli.device_args import add_gpu_argument
from gpuplan.errors import GpuplanError
from gpuplan.tables import dump_json, format_value, render_table

PREDICT_MODULE = "gpuplan.validate.record_prediction"
CATALOGUE_MODULE = "gpuplan.hwmodels.accelerators"
SUMMARY_HEADERS = {
    "median_abs_pct_error": "median |error|",
    "p90_abs_pct_error": "p90 |error|",
}


def known_device_keys() -> list[str]:
    """The keys of the accelerator catalogue: the devices a record may name."""
    return [acc.key for acc in importlib.import_module(CATALOGUE_MODULE).list_accelerators()]


def load_predictor() -> Any:
    """The default predictor: ``predict_record(record) -> {metric: value}``."""
    return importlib.import_module(PREDICT_MODULE).predict_record


def _param_text(name: str, value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"  # as the record file writes it
    return format_value(name, value) if name == "bytes" else str(value)


def _params_text(params: dict[str, Any]) -> str:
    return " ".join(f"{k}={_param_text(k, v)}" for k, v in params.items())


def _row_lines(doc_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Score rows as people read them: measured and predicted in the unit of their metric."""
    return [
        {
            "line": r["line"],
            "kind": r["kind"],
            "params": _params_text(r["params"]),
            "metric": r["metric"],
            "measured": format_value(r["metric"], r["measured"]),
            "predicted": format_value(r["metric"], r["predicted"]),
            "error": format_value("abs_pct_error", r["abs_pct_error"]),
        }
        for r in doc_rows
    ]


def _print_score(path: str, doc: dict[str, Any], n_rows: int) -> None:
    rows = doc["rows"]
    shown = rows if n_rows == 0 else rows[:n_rows]
    lines = {r["line"] for r in rows}
    print(f"{path}: {len(rows)} predictions scored over {len(lines)} records")
    print(
        render_table(
            _row_lines(shown),
            ("line", "kind", "metric", "measured", "predicted", "error", "params"),
        )
    )
    if len(shown) < len(rows):
        print(f"... and {len(rows) - len(shown)} more rows (--rows 0 shows all; --json too)")
    print()
    print(render_table(doc["summary"], headers=SUMMARY_HEADERS))


def _over_limit(summary: list[dict[str, Any]], limit_pct: float | None) -> list[str]:
    """The (kind, metric) groups whose median error is above the limit, as text."""
    if limit_pct is None:
        return []
    return [
        f"{s['kind']} {s['metric']} {s['median_abs_pct_error']:.1f}%"
        for s in summary
        if s["median_abs_pct_error"] > limit_pct
    ]


def score(args: argparse.Namespace) -> int:
    """``gpuplan validate score FILE``."""
    read_records = importlib.import_module("gpuplan.validate.records").read_records
    score_records = importlib.import_module("gpuplan.validate.score").score_records
    records, errors = read_records(args.file, known_devices=known_device_keys)
    illustrative = sum(r.source.lower().startswith("illustrative") for r in records)
    if illustrative:  # a test sample's rows are not measurements
        print(f"gpuplan: note: {illustrative} of {len(records)} records of "
              f"{args.file!r} are marked illustrative (their source says so), not measurements: "
              "their errors say nothing of gpuplan's accuracy (score a measured file, e.g. "
              "data/h200/gemm.jsonl)", file=sys.stderr)  # fmt: skip
    doc = score_records(records, load_predictor(), errors=errors).to_json()
    for err in doc["errors"]:
        print(f"gpuplan: {args.file}:{err['line']}: {err['reason']}", file=sys.stderr)
    if args.json:
        print(dump_json(doc))
    elif doc["rows"]:
        _print_score(args.file, doc, args.rows)
    if not doc["rows"]:
        raise GpuplanError(
            f"no record of {args.file!r} could be scored ({len(doc['errors'])} lines with errors)"
        )
    over = _over_limit(doc["summary"], args.max_median_error)
    if over:
        limit = f"{args.max_median_error:g}%"
        print(f"gpuplan: median error above {limit}: {', '.join(over)}", file=sys.stderr)
        return 1
    return 0


def calibrate(args: argparse.Namespace) -> int:
    """``gpuplan validate calibrate``: handed to ``gpuplan.validate.calibrate.main(args)``."""
    code = importlib.import_module("gpuplan.validate.calibrate").main(args)
    return 0 if code is None else int(code)


def _read_record_arg(text: str) -> Any:
    """``--record``: a record as inline JSON, or a path to a file whose first line is one."""
    if text.lstrip().startswith("{"):
        source = text
    else:
        path = Path(text)
        if not path.is_file():
            raise GpuplanError(f"--record {text!r} is neither a JSON object nor a file")
        try:
            content = path.read_bytes().decode("utf-8")
        except UnicodeDecodeError as err:
            raise GpuplanError(f"--record {text!r}: not UTF-8 text (byte {err.start})") from None
        source = next((ln for ln in content.splitlines() if ln.strip()), "")
    try:
        obj = json.loads(source)
    except json.JSONDecodeError as err:
        raise GpuplanError(f"--record is not valid JSON: {err.msg} (column {err.colno})") from None
    parse_record = importlib.import_module("gpuplan.validate.records").parse_record
    return parse_record(obj, devices=known_device_keys())


def _kernel_rows(table: Any) -> list[dict[str, Any]]:
    """The per-class kernel table as rows, its class a column even when it was the index."""
    if "class" not in table.columns:
        table = table.reset_index()
    return table.to_dict("records")


def _case_arg(args: argparse.Namespace) -> Any:
    """``--kind`` with ``--params``: a case to predict, with nothing measured."""
    if not (args.kind or args.params):
        return None
    if not (args.kind and args.params):
        raise GpuplanError("--kind and --params go together (or give --record)")
    text = args.params
    if not text.lstrip().startswith("{"):
        if not Path(text).is_file():
            raise GpuplanError(f"--params file {text!r} does not exist")
        text = Path(text).read_text()
    try:
        params = json.loads(text)
    except json.JSONDecodeError as err:
        raise GpuplanError(f"--params is not valid JSON: {err.msg}") from None
    from gpuplan.validate.records import parse_record

    obj = {"kind": args.kind, "device": args.gpu, "params": params, "measured": {"time_s": 1.0}}
    record = parse_record(obj)
    return dataclasses.replace(record, measured={})


def trace(args: argparse.Namespace) -> int:
    """``gpuplan validate trace TRACE``: kernel time by operator class, and a record's prediction."""
    if not Path(args.trace).is_file():
        raise GpuplanError(f"trace file {args.trace!r} does not exist")
    record = _read_record_arg(args.record) if args.record else _case_arg(args)
    traces = importlib.import_module("gpuplan.validate.trace")
    doc: dict[str, Any] = {
        "trace": args.trace,
        # no kernels: exit 2, bad input (a CPU-only profile cannot say where GPU time went)
        "kernels": _kernel_rows(traces.kernel_table(args.trace, require_kernels=True)),
    }
    if record is not None:
        doc |= {
            "record": {"kind": record.kind, "device": record.device, "params": record.params},
            "measured": record.measured,
            "predicted": dict(load_predictor()(record)),
        }
    if record is not None:
        compare = importlib.import_module("gpuplan.validate.trace_compare")
        table, iterations = compare.compare_case(
            traces.kernel_table(args.trace),
            record.kind,
            record.device,
            record.params,
            iterations=args.iterations,
        )
        doc |= {"iterations": iterations, "comparison": table}
    if args.json:
        print(dump_json(doc))
        return 0
    print(render_table(doc["kernels"]))
    if record is not None:
        print(f"\nper iteration ({doc['iterations']} in the trace), predicted beside measured:")
        print(render_table(doc["comparison"]))
        print(f"\nrecord: {record.kind} on {record.device}: {_params_text(record.params)}")
        for metric, value in doc["predicted"].items():
            measured = format_value(metric, doc["measured"].get(metric))
            print(f"  {metric}: measured {measured}, predicted {format_value(metric, value)}")
    return 0


def _register_score(sub: Any) -> None:
    p = sub.add_parser(
        "score",
        help="predict every record of a JSON Lines file and report the errors",
        description="Predict every measurement record of FILE (JSON Lines, the contract of "
        "ARCHITECTURE.md) and report 100*|predicted-measured|/measured per record, and its "
        "median and p90 per kind and metric. Bad lines go to stderr; the rest is scored.",
    )
    p.add_argument("file", metavar="FILE", type=word, help="measurement records, one JSON object a line")
    p.add_argument(
        "--max-median-error",
        type=non_negative(float),
        metavar="PCT",
        help="fail (exit 1) when any kind's median error is above PCT percent",
    )
    p.add_argument(
        "--rows",
        type=non_negative(int),
        default=20,
        metavar="N",
        help="rows to show (default 20; 0: all)",
    )
    add_common_options(p)
    p.set_defaults(func=score)


def _register_calibrate(sub: Any) -> None:
    p = sub.add_parser(
        "calibrate",
        help="fit the model's efficiencies on measured records",
        description="Fit efficiencies on a train split of measured records of one device, "
        "report the error on the held-out split. The runs are those DIR/runs.json names, else "
        "DIR/*.jsonl and DIR/*/*.jsonl. Nothing is written without --out FILE; "
        "read a fit back with --calibration FILE on any pricing command.",
    )
    _add_data_option(p)
    p.add_argument(
        "--device",
        default="h200",
        metavar="KEY",
        help="the catalogue key whose records to fit (h200); records of others are skipped",
    )
    p.add_argument("--seed", type=random_seed, default=0, metavar="N", help="seed of the split (0)")
    p.add_argument(
        "--train-fraction",
        type=open_fraction,
        default=0.7,
        metavar="F",
        help="share of records used to fit, between 0 and 1 (0.7)",
    )
    p.add_argument(
        "--out", metavar="FILE", help="write the fit here (default: print only, write nothing)"
    )
    add_common_options(p)
    p.set_defaults(func=calibrate)


def _add_data_option(p: Any) -> None:
    p.add_argument(
        "--data",
        metavar="DIR",
        help="folder of measured records (default: data/ of the gpuplan checkout, if any)",
    )


def _register_trace(sub: Any) -> None:
    p = sub.add_parser(
        "trace",
        help="GPU kernel time of a torch profiler trace by operator class",
        description="Read a torch profiler (Kineto) Chrome trace, .json or .json.gz, and sum "
        "its GPU kernels by operator class; with --record, show that record's prediction.",
    )
    p.add_argument("trace", metavar="TRACE", type=word, help="a Chrome trace from torch.profiler")
    p.add_argument(
        "--record", metavar="JSON", help="a measurement record: inline JSON, or a file of one"
    )
    p.add_argument("--kind", type=word, help="with --params instead of --record: the case's kind (e.g. layer)")
    p.add_argument(
        "--params", metavar="JSON", help="with --kind: the case's params, inline JSON or a file"
    )
    add_gpu_argument(p, "with --kind/--params: the device (h200)", default="h200")
    p.add_argument(
        "--iterations",
        type=non_negative(int),
        help="iterations the trace holds (default: inferred from its GEMM count)",
    )
    add_common_options(p)
    p.set_defaults(func=trace)


def report(args: argparse.Namespace) -> int:
    """``gpuplan validate report``: handed to ``gpuplan.validate.report.main(args)``."""
    try:
        code = importlib.import_module("gpuplan.validate.report").main(args)
    except FileNotFoundError as err:
        raise GpuplanError(str(err)) from None
    return 0 if code is None else int(code)


def _register_report(sub: Any) -> None:
    p = sub.add_parser(
        "report",
        help="write the validation report: held-out error tables and predicted-vs-measured plots",
        description="Score the held-out split of the measurements with the committed "
        "calibration (and, for comparison, the prior and a datasheet roofline); write "
        "validation.md and one plot per kind into --out (default: ./validation-report). "
        "The repository's docs/validation.md is `--out docs`.",
    )
    _add_data_option(p)
    p.add_argument(
        "--out",
        "--out-dir",
        dest="out",
        default="validation-report",
        metavar="DIR",
        help="folder to write into (validation-report)",
    )
    add_common_options(p)
    p.set_defaults(func=report)


def register(subparsers: Any) -> None:
    """Add ``validate`` with its commands ``score``, ``calibrate``, ``trace`` and ``report``."""
    p = subparsers.add_parser(
        "validate",
        help="score predictions against measurements; calibrate; read traces",
        description="Check the model against measurements on real GPUs.",
    )
    sub = p.add_subparsers(title="commands", metavar="COMMAND")
    _register_score(sub)
    _register_calibrate(sub)
    _register_trace(sub)
    _register_report(sub)
    require_subcommand(p, sub)
