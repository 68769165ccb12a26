"""``gpuplan watch PLAN.json SOURCE``: hold a running (or finished) job against the plan it was
priced from.

PLAN.json is the ``--json`` document of ``gpuplan train`` or ``gpuplan serve``. SOURCE is a
training log (torchtitan's or Megatron-LM's log lines, Hugging Face Trainer's printed or JSON
logs, or JSON Lines of step records) or a serving engine's Prometheus endpoint
(``http://host:8000/metrics``, vLLM's or SGLang's metric names), polled every ``--interval-s``.

Each figure (smoothed over ``--smooth`` observations) is judged against the plan's p10-p90 band;
the drift is attributed to a layer (compute, communication, bubble, host, queueing, memory;
``validate.watch.attribute``). Exit codes: 0 the run stayed inside its bands; 1 a figure left its
band for more than ``--window`` observations in a row; 2 bad input.
"""

from __future__ import annotations

import argparse
import sys

from gpuplan.cli.argtypes import positive
from gpuplan.tables import dump_json, format_value, render_table


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "watch", help="hold a running job (training log or serving /metrics) against its plan",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    p.add_argument("plan", metavar="PLAN.json", help="`gpuplan train|serve ... --json` output")
    p.add_argument("source", metavar="SOURCE", help="a log file, or an engine's /metrics URL")
    p.add_argument("--follow", action="store_true", help="tail the log as it grows")
    p.add_argument("--interval-s", type=positive(float, 3600), default=1.0,
                   help="seconds between reads of a followed log or polls of /metrics (default 1)")
    p.add_argument("--idle-s", type=positive(float), default=None,
                   help="--follow: stop after this many seconds without a new line")
    p.add_argument("--duration-s", type=positive(float), default=None,
                   help="stop polling /metrics after this many seconds (default: until a breach)")
    p.add_argument("--window", type=positive(int, 10**9), default=10,
                   help="observations in a row out of band that make a breach (default 10)")
    p.add_argument("--smooth", type=positive(int, 10**6), default=5,
                   help="observations each figure's median is taken over (default 5)")
    p.add_argument("--warmup", type=int, default=3,
                   help="first observations left out (compilation, autotuning; default 3)")
    p.add_argument("--profile", metavar="TRACE.json",
                   help="a torch.profiler Chrome trace of the run, for the per-class attribution")
    p.add_argument("--profile-steps", type=positive(int, 10**6), default=1,
                   help="training steps the --profile trace holds (default 1)")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p.set_defaults(func=run)


def run(args) -> int:
    from gpuplan.errors import GpuplanError
    from gpuplan.validate.watch.drift import Tracker
    from gpuplan.validate.watch.plan import load_plan
    from gpuplan.validate.watch.run import Outcome, is_url

    if args.warmup < 0:
        raise GpuplanError(f"--warmup={args.warmup} is invalid: it must be zero or more")
    plan = load_plan(args.plan)
    tracker = Tracker(plan, window=args.window, smooth=args.smooth, warmup=args.warmup)
    live = None if args.json else (lambda: _live(tracker))
    out = Outcome()
    try:
        _follow(args, plan, tracker, live, out)
    except KeyboardInterrupt:  # Ctrl-C or SIGINT: the report of what was seen so far
        out.stopped = "interrupted"
    if not is_url(args.source) and out.records == 0:
        raise GpuplanError(f"SOURCE={args.source!r}: none of its {out.lines} lines is a step "
                           "record gpuplan reads (torchtitan, Megatron-LM, Hugging Face "
                           "Trainer, JSON Lines)")  # fmt: skip
    if live is not None and (args.follow or is_url(args.source)):
        print(file=sys.stderr)  # end the live status line
    doc = _document(args, plan, tracker, out)
    print(dump_json(doc) if args.json else _render(doc))
    return 1 if tracker.breached else 0


def _follow(args, plan, tracker, live, out) -> None:
    from gpuplan.errors import GpuplanError
    from gpuplan.validate.watch.run import follow_log, is_url, poll_metrics

    if is_url(args.source):
        if plan.kind != "serve":
            raise GpuplanError(f"SOURCE={args.source!r} is a /metrics endpoint but PLAN={args.plan!r} "
                               "is a training plan: give the job's log")  # fmt: skip
        poll_metrics(args.source, tracker, interval_s=args.interval_s,
                     duration_s=args.duration_s, on_batch=live, out=out)  # fmt: skip
        return
    if plan.kind != "train":
        raise GpuplanError(f"SOURCE={args.source!r} is a file but PLAN={args.plan!r} is a "
                           "serving plan: give the engine's /metrics URL")  # fmt: skip
    follow_log(args.source, tracker, follow=args.follow, interval_s=args.interval_s,
               idle_s=args.idle_s, on_batch=live if args.follow else None, out=out)  # fmt: skip


def _document(args, plan, tracker, out) -> dict:
    from gpuplan.validate.watch.attribute import serving_layer, trace_classes, training_layer

    verdicts = tracker.verdicts()
    if plan.kind == "train":
        classes = trace_classes(args.profile, args.profile_steps) if args.profile else {}
        layer = training_layer(plan, verdicts, classes)
    else:
        layer = serving_layer(plan, verdicts, out.gauges)
    return {
        "plan": plan.label, "kind": plan.kind, "source": args.source,
        "formats": sorted(out.formats), "records": out.records, "polls": out.polls,
        "last_step": tracker.last_step, "stopped": out.stopped,
        "breached": tracker.breached, "attribution": layer,
        "figures": [{"name": v.name, "planned": v.point, "band": list(v.band) if v.band else None,
                     "measured": v.measured, "drift": v.drift, "status": v.status,
                     "observations": v.observations, "out_of_band_streak": v.streak,
                     "breached": v.breached} for v in verdicts],
    }  # fmt: skip


UNITS = {"step_time_s": "step_time_s", "ttft_s": "ttft_s", "tpot_s": "tpot_s", "e2e_s": "e2e_s",
         "peak_memory_bytes": "bytes"}  # fmt: skip


def _fmt(name: str, value: float) -> str:
    if name in UNITS:
        return format_value(UNITS[name], value)
    if name == "mfu":
        return f"{100 * value:.1f}%"
    return f"{value:,.4g}"


def _render(doc: dict) -> str:
    rows = [{"figure": f["name"], "planned": _fmt(f["name"], f["planned"]),
             "band p10-p90": "-" if f["band"] is None else
             f"{_fmt(f['name'], f['band'][0])} - {_fmt(f['name'], f['band'][1])}",
             "measured": _fmt(f["name"], f["measured"]), "drift": f"{100 * f['drift']:+.1f}%",
             "status": f["status"] + (" (BREACH)" if f["breached"] else "")}
            for f in doc["figures"]]  # fmt: skip
    verdict = ("LEFT ITS PLAN: a figure out of its band for longer than the window" if
               doc["breached"] else "within its plan")  # fmt: skip
    seen = f"{doc['records']} records" if doc["kind"] == "train" else f"{doc['polls']} polls"
    lines = [f"watch: {doc['plan']} against {doc['source']} ({', '.join(doc['formats']) or doc['kind']}; "
             f"{seen}; {doc['stopped']}): {verdict}", ""]  # fmt: skip
    lines.append(render_table(rows, list(rows[0])) if rows else "no figure of the plan was observed")
    lines += ["", f"drift attributed to: {doc['attribution']}"]
    return "\n".join(lines)


def _live(tracker) -> None:
    """One status line on stderr as a followed source moves."""
    parts = [f"{v.name} {_fmt(v.name, v.measured)} ({v.status})" for v in tracker.verdicts()]
    step = f"step {tracker.last_step}: " if tracker.last_step is not None else ""
    print(f"\r{step}{'; '.join(parts)}"[:200], file=sys.stderr, end="", flush=True)
