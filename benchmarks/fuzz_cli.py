"""Fuzz the command line: every command and flag with hostile values, run as a user would.

Each invocation is ``gpuplan.cli.main(argv)`` run in a forked child (the parent has imported
gpuplan once, so a call costs milliseconds to start) in a fresh temporary working folder, with
stdout and stderr captured and a 20 s wall-clock limit. An invocation starts from a cheap valid
command line and replaces or adds one or two flags with a hostile value (infinities, NaN, huge
and negative integers, empty strings, unknown words, unicode, paths in missing folders,
symbolic links, folders where files belong).

Outcome classes, the first that applies:
  hang              still running after the limit
  internal error    exit 3 (or an exception out of ``main``, or another exit code)
  error not 1 line  exit 2 whose stderr has a traceback, no ``gpuplan: error:`` line or several
  partial file      a hidden temporary file left behind, or any new file after a failed command
  link replaced     an output path that was a symbolic link is now a regular file
  outside write     a file of the installed package was changed (the fitted calibration)
  file mode         an output file created without the umask's mode (e.g. 0600)
  ok                exit 0, 1 or 2 with none of the above
and, beside them, ``accepted nonsense``: exit 0 although a flag was given nan, inf, an empty
string, an unknown word or -2**63 (counted, not a failure class: some flags take inf).

Invocations that put a hostile value into a flag naming an input file (records, traces,
scenarios, config.json) are tagged ``file`` and counted apart from the ``flag`` ones.

    python3 benchmarks/fuzz_cli.py [--n 2000] [--seed 0] [--workers 2] [--examples 3]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import hashlib
import importlib
import io
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

LIMIT_S = 20.0
UMASK = 0o022

# The cheap valid command lines the mutations start from (each runs in well under a second).
LENGTHS_OK = ["--prompt-tokens", "128", "--output-tokens", "16"]
LAYER = ["--hidden", "256", "--heads-q", "4", "--heads-kv", "2", "--ffn", "512"]
BASES: list[list[str]] = [
    ["models"],
    ["models", "llama3-8b"],
    ["gpus"],
    ["estimate"],
    ["estimate", "gemm", "--m", "64", "--n", "64", "--k", "64"],
    ["estimate", "attention", "--seq-q", "128"],
    ["estimate", "elementwise", "--op", "rmsnorm", "--tokens", "128", "--hidden", "256"],
    ["estimate", "layer", *LAYER, "--seq", "128"],
    ["estimate", "train-step", "--vocab", "1000", *LAYER, "--layers", "2", "--seq", "128"],
    ["estimate", "decode-step", *LAYER, "--layers", "2", "--context", "128"],
    ["estimate", "collective", "--op", "all_reduce", "--bytes", "1e6", "--world", "2"],
    ["estimate", "tp-mlp", "--hidden", "256", "--ffn", "512", "--tokens", "128", "--tp", "2"],
    ["estimate", "train-step", "--model", "llama3-8b"],
    ["train", "--model", "llama3-8b", "--gpus", "8"],
    ["train", "--model", "megatron-gpt-1.7b", "--gpus", "8", "--timeline", "t.json"],
    ["search", "train", "--model", "megatron-gpt-1.7b", "--gpus", "8", "--global-batch", "64"],
    ["serve", "--model", "llama3-8b", "--gpu", "h200", "--rate", "1", "--requests", "20",
     *LENGTHS_OK],
    ["serve", "plan", "--model", "llama3-8b", "--gpu", "h200", "--rate", "1", "--requests", "20",
     *LENGTHS_OK, "--slo-ttft-s", "1", "--slo-tpot-s", "0.1", "--tp", "1", "--max-seqs", "8"],
    ["serve", "edge", "--model", "llama3-8b", "--gpu", "l4"],
    ["cluster", "tiny.yaml", "--no-progress"],
    ["cluster", "--list"],
    ["validate", "score", "records.jsonl"],
    ["validate", "trace", "kernels.json"],
    ["validate", "calibrate", "--data", "data", "--out", "fit.json"],
    ["validate", "report", "--data", "data", "--out-dir", "report"],
    ["diagnose", "train", "--model", "megatron-gpt-1.7b", "--gpus", "8"],
    ["diagnose", "serve", "--model", "llama3-8b", "--gpu", "h200", "--rate", "1", "--requests",
     "8", *LENGTHS_OK],
    ["report", "train", "--model", "megatron-gpt-1.7b", "--gpus", "8", "--out", "r.html"],
    ["report", "serve", "--model", "llama3-8b", "--gpu", "h200", "--rate", "1", "--requests",
     "8", *LENGTHS_OK, "--out", "r.md"],
    ["report", "cluster", "tiny.yaml", "--no-progress", "--out", "r.html"],
]
# How often each base is drawn, relative; the slow ones (seconds each) less often.
WEIGHTS = {("validate", "calibrate"): 0.3, ("validate", "report"): 0.15,
           ("diagnose", "train"): 0.3, ("diagnose", "serve"): 0.3, ("report", "train"): 0.2,
           ("report", "serve"): 0.2, ("report", "cluster"): 0.2}  # fmt: skip

TINY_SCENARIO = """name: tiny
seed: 0
horizon_days: 1
cluster: {preset: dgx-h100, nodes: 2}
failures: {enabled: false}
jobs:
  - {id: a, model: megatron-gpt-1.7b, gpus: 8, steps: 100}
"""
RECORDS = [
    {"kind": "gemm", "device": "h200", "params": {"m": m, "n": 4096, "k": 4096, "dtype": "bf16"},
     "measured": {"time_s": 2.0e-12 * m * 4096 * 4096 / 0.7e3}, "source": "synthetic"}
    for m in (256, 512, 1024, 2048, 4096, 8192, 16384, 128, 768, 3072)
]  # fmt: skip
TRACE = {
    "traceEvents": [
        {"ph": "X", "cat": "kernel", "name": name, "ts": 10 * i, "dur": 5, "pid": 0, "tid": 7}
        for i, name in enumerate(["ampere_bf16_s16816gemm_bf16_128x128", "vectorized_elementwise"])
    ]
}

NUMBERS = ["inf", "-inf", "nan", "NaN", "1e30", str(10**30), "-1", "0",
           "-9223372036854775808", "", "bogus", "ünïcødé", "1e-300", "2.5", "true", " 8", "0x10",
           "1_000", str(2**64), "-0"]  # fmt: skip
WORDS = ["", "bogus", "ünïcødé", "inf", "nan", "-1", "0", "H200", "../../x", "a" * 300, " "]
LENGTHS = ["uniform:1:1e30", "uniform:5:1", "uniform:1:inf", "uniform:nan:nan",
           "lognormal:inf:1", "lognormal:nan:nan", "lognormal:100:inf", "lognormal:1e30:1e31",
           "lognormal:100:200:-1", "uniform:", "conversation:1", str(10**30), "-5"]  # fmt: skip
OUT_PATHS = ["", "missing/folder/out.x", "link.csv", "folder", "out.bogus", "ünï.csv",
             "out.csv", "out.png", "out.json", "/dev/null/x.csv", " "]  # fmt: skip
IN_PATHS = ["", "missing.json", "folder", "binary.bin", "empty.txt", "link-to-missing",
            "ünï.json", " "]  # fmt: skip
# flags whose value is a file the command writes
OUT_FLAGS = {"--out", "--out-dir", "--plot", "--jobs", "--events", "--requests-csv",
             "--timeline-csv", "--timeline"}  # fmt: skip
# flags (and positionals) whose value is a file the command reads: the ``file`` area
IN_FLAGS = {"--hf-config", "--data", "--trace", "--record", "--params", "FILE", "TRACE",
            "SCENARIO"}  # fmt: skip
# flags with a syntax of their own get their own hostile values as well as the plain ones
SPECIAL = {
    "--straggler": ["0:inf", "0:nan", "-1:0.1", str(10**30) + ":0.1", "0:-1", "0:1e30", "1:"],
    "--disaggregate": ["1:1", "0:1", f"{10**30}:1", "1:-1", "1:1:1", "a:b"],
    "--tp": ["1,0", "1,1e30", f"1,{10**30}", "1,,2"],
    "--max-seqs": ["1,0", f"8,{10**30}"],
    "--batch": ["1,0", f"1,{10**30}"],
    "--placement": ["tp,tp,dp,pp", "tp,cp", "xx,cp,dp,pp"],
    "--zero": ["4", "fsdp", "FSDP", "-1"],
    "--scheduler": ["tcp://127.0.0.1:1"],
}
# hand-picked cases: combinations a one-flag mutation rarely draws
FIXED = [
    ["serve", "--model", "llama3-8b", "--gpu", "h200", "--rate", "1", "--requests", "20",
     *LENGTHS_OK, "--disaggregate", "1:1", "--replicas", "4"],
    ["estimate", "layer", "--hidden", "4096", "--heads-q", "32", "--heads-kv", "7",
     "--ffn", "1024"],
    ["estimate", "train-step", "--model", "llama3-8b", "--seq", "1000000"],
    ["train", "--model", "llama3-8b", "--gpus", "8", "--seq", "1000000"],
    ["estimate", "gemm", "--m", str(10**30), "--n", "64", "--k", "64"],
    ["train", "--model", "llama3-8b", "--gpus", str(10**30)],
    ["cluster", "tiny.yaml", "--no-progress", "--plot", "out.bogus", "--jobs", "jobs.csv"],
    ["serve", "--model", "llama3-8b", "--gpu", "h200", "--rate", "1", "--requests", "20",
     *LENGTHS_OK, "--requests-csv", "missing/r.csv"],
    ["validate", "calibrate", "--data", "data", "--out", ""],
]  # fmt: skip
# switches that start a long run whatever the other flags say (``train --reproduce`` predicts
# every published run, about a minute): a legitimate wait, not a hang on a bad value
LONG_SWITCHES = {"--reproduce", "--follow"}  # watch --follow tails until stopped, by design
FIXED_CASE = "(a hand-picked case)"
NONSENSE = {FIXED_CASE, "inf", "-inf", "nan", "NaN", "", "bogus", "ünïcødé", "-9223372036854775808", " "}


def _leaf_parsers(parser, prefix=()):
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    yield prefix, parser
    for action in subs:
        for name, sub in action.choices.items():
            yield from _leaf_parsers(sub, (*prefix, name))


def flag_table() -> dict[tuple[str, ...], list[tuple[str, str]]]:
    """For each command, its flags as (flag, what): number, word, length, out, in, switch."""
    from gpuplan.cli import build_parser

    table = {}
    for prefix, parser in _leaf_parsers(build_parser()):
        flags = []
        for a in parser._actions:
            if isinstance(a, (argparse._HelpAction, argparse._VersionAction,
                              argparse._SubParsersAction)):  # fmt: skip
                continue
            flag = a.option_strings[-1] if a.option_strings else (a.metavar or a.dest).upper()
            type_name = getattr(a.type, "__name__", "")
            if a.nargs == 0:
                what = "switch"
            elif flag in OUT_FLAGS:
                what = "out"
            elif flag in IN_FLAGS:
                what = "in"
            elif "tokens" in type_name or flag in ("--prompt-tokens", "--output-tokens"):
                what = "length"
            elif a.type is not None and not a.choices:
                what = "number"
            else:
                what = "word"
            flags.append((flag, what))
        table[prefix] = flags
    return table


def _command_of(base: list[str], table) -> tuple[str, ...]:
    best = ()
    for prefix in table:
        if tuple(base[: len(prefix)]) == prefix and len(prefix) > len(best):
            best = prefix
    return best


def hostile(flag: str, what: str, rng: random.Random) -> str:
    if flag in SPECIAL and rng.random() < 0.5:
        return rng.choice(SPECIAL[flag])
    pool = {"number": NUMBERS, "word": WORDS, "length": LENGTHS + NUMBERS, "out": OUT_PATHS,
            "in": IN_PATHS + WORDS[:3]}[what]  # fmt: skip
    return rng.choice(pool)


def mutate(base: list[str], n_words: int, flags, rng: random.Random):
    """``base`` with one or two flags set to hostile values: (argv, area, values used).

    ``n_words`` is the length of the command's name in ``base`` (``serve plan``: 2).
    """
    argv, area, used = list(base), "flag", []
    flags = [(f, w) for f, w in flags if f not in LONG_SWITCHES]
    for _ in range(1 if rng.random() < 0.8 else 2):
        flag, what = rng.choice(flags)
        if what == "switch":
            argv.append(flag)
            continue
        value = hostile(flag, what, rng)
        used.append(value)
        area = "file" if what == "in" else area
        if flag.startswith("--") and flag in argv:
            argv[argv.index(flag) + 1] = value
        elif flag.startswith("--"):
            argv += [flag, value]
        elif n_words < len(argv) and not argv[n_words].startswith("-"):
            argv[n_words] = value  # the positional the base gives
        else:
            argv.insert(n_words, value)
    return argv, area, used


def make_folder(cwd: Path) -> set[str]:
    """The inputs every invocation may name; returns the names present before the run."""
    (cwd / "tiny.yaml").write_text(TINY_SCENARIO)
    (cwd / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    (cwd / "data" / "h200_fuzz").mkdir(parents=True)
    shutil.copy(cwd / "records.jsonl", cwd / "data" / "h200_fuzz" / "gemm.jsonl")
    (cwd / "kernels.json").write_text(json.dumps(TRACE))
    (cwd / "binary.bin").write_bytes(bytes(range(256)) * 4)
    (cwd / "empty.txt").write_text("")
    (cwd / "folder").mkdir()
    (cwd / "target.csv").write_text("kept\n")
    os.symlink("target.csv", cwd / "link.csv")
    os.symlink("nowhere.json", cwd / "link-to-missing")
    return {str(p.relative_to(cwd)) for p in cwd.rglob("*")}


def _child(argv: list[str], cwd: Path, result: Path) -> None:
    from gpuplan.cli import main

    os.chdir(cwd)
    os.umask(UMASK)
    out, err = io.StringIO(), io.StringIO()
    signal.alarm(int(LIMIT_S) + 5)  # the parent kills at LIMIT_S; this is a backstop
    code: object
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
    except BaseException as escaped:  # noqa: BLE001 - anything out of main is a finding
        code = f"escaped {type(escaped).__name__}: {escaped}"
    result.write_text(json.dumps({"code": code, "stdout": out.getvalue()[-2000:],
                                  "stderr": err.getvalue()[-4000:]}))  # fmt: skip


def _package_files() -> dict[str, str]:
    """Hashes of the installed fitted data, to catch a command writing into the package."""
    folder = Path(importlib.import_module("gpuplan.hwmodels").__file__).parent / "data"
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.glob("*.json")}


def classify(res: dict | None, cwd: Path, before: set[str], used: list[str]) -> tuple[str, str]:
    """(class, note) for one finished (or killed: ``res`` None) invocation."""
    if res is None:
        return "hang", ""
    code, err = res["code"], res["stderr"].strip()
    if code not in (0, 1, 2):
        return "internal error", err.splitlines()[-1] if err else str(code)
    lines = err.splitlines()
    if code == 2:
        errors = [ln for ln in lines if ln.startswith("gpuplan: error:")]
        if "Traceback" in err or len(errors) != 1 or len(err) > 600:
            return "error not 1 line", err[:300].replace("\n", " | ")
    now = {str(p.relative_to(cwd)) for p in cwd.rglob("*")}
    hidden = [n for n in now if Path(n).name.startswith(".") and n.endswith(".tmp")]
    if hidden or (code == 2 and now - before):
        return "partial file", ", ".join(sorted(hidden or (now - before)))
    if not (cwd / "link.csv").is_symlink():
        return "link replaced", "link.csv"
    for name in now - before:
        p = cwd / name
        if p.is_file() and not p.is_symlink() and p.stat().st_mode & 0o777 != 0o666 & ~UMASK:
            return "file mode", f"{name} {oct(p.stat().st_mode & 0o777)}"
    if code == 0 and any(v in NONSENSE for v in used):
        return "ok", "accepted nonsense"
    return "ok", ""


def run_all(jobs, workers: int, root: Path, on_done) -> None:
    """Run (argv, area, used) jobs in forked children, ``workers`` at a time."""
    pending, running = collections.deque(enumerate(jobs)), {}
    while pending or running:
        while pending and len(running) < workers:
            k, job = pending.popleft()
            cwd = root / f"{k}" / "cwd"
            cwd.mkdir(parents=True)
            before = make_folder(cwd)
            pid = os.fork()
            if pid == 0:
                try:
                    _child(job[0], cwd, root / f"{k}" / "result.json")
                finally:
                    os._exit(0)
            running[pid] = (k, job, cwd, before, time.monotonic())
        pid, _ = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            time.sleep(0.005)
            for pid, (k, job, cwd, before, started) in list(running.items()):
                if time.monotonic() - started > LIMIT_S:
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                    del running[pid]
                    on_done(k, job, None, cwd, before)
            continue
        k, job, cwd, before, _started = running.pop(pid)
        path = root / f"{k}" / "result.json"
        res = json.loads(path.read_text()) if path.exists() else {"code": "died", "stderr": ""}
        on_done(k, job, res, cwd, before)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2000, help="invocations (2000)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--examples", type=int, default=3, help="examples shown per bad class")
    ap.add_argument("--json", metavar="PATH", help="also write every outcome as JSON Lines")
    opts = ap.parse_args(argv)
    os.environ.setdefault("MPLBACKEND", "Agg")
    for name in ("gpuplan.api", "gpuplan.cli", "gpuplan.sim.runtime.serving", "gpuplan.sim.runtime.cluster",
                 "gpuplan.validate.score", "gpuplan.validate.trace", "matplotlib.pyplot"):  # fmt: skip
        with contextlib.suppress(Exception):
            importlib.import_module(name)
    table = flag_table()
    rng = random.Random(opts.seed)
    weights = [WEIGHTS.get(tuple(b[:2]), 1.0) for b in BASES]
    jobs = [(argv, "flag", [FIXED_CASE]) for argv in FIXED]
    for _ in range(opts.n - len(jobs)):
        base = rng.choices(BASES, weights)[0]
        command = _command_of(base, table)
        jobs.append(mutate(base, len(command), table[command], rng))
    package = _package_files()
    counts = collections.Counter()
    examples = collections.defaultdict(list)
    log = open(opts.json, "w") if opts.json else None  # noqa: SIM115
    started = time.monotonic()

    def on_done(k, job, res, cwd, before):
        argv, area, used = job
        cls, note = classify(res, cwd, before, used)
        if _package_files() != package:
            cls, note = "outside write", "the package's fitted data changed"
            restore_package(package_copy)
        counts[(area, cls)] += 1
        if note == "accepted nonsense":
            counts[(area, "(accepted nonsense)")] += 1
        if cls != "ok" and len(examples[(area, cls)]) < opts.examples:
            examples[(area, cls)].append((argv, note))
        if log:
            log.write(json.dumps({"argv": argv, "area": area, "class": cls, "note": note}) + "\n")
        shutil.rmtree(cwd.parent, ignore_errors=True)
        if (k + 1) % 200 == 0:
            print(f"  {k + 1} of {opts.n} ({time.monotonic() - started:.0f} s)", file=sys.stderr)

    package_copy = {p: Path(p).read_bytes() for p in package}
    with tempfile.TemporaryDirectory(prefix="gpuplan-fuzz-") as root:
        run_all(jobs, opts.workers, Path(root), on_done)
    if log:
        log.close()
    report(counts, examples, opts.n, time.monotonic() - started, table)
    return 0


def restore_package(copy: dict[str, bytes]) -> None:
    for path, data in copy.items():
        with contextlib.suppress(OSError):
            Path(path).write_bytes(data)


CLASSES = ["ok", "internal error", "hang", "partial file", "error not 1 line", "link replaced",
           "outside write", "file mode", "(accepted nonsense)"]  # fmt: skip


def report(counts, examples, n, wall_s, table) -> None:
    print(f"{n} invocations of {len(table)} commands in {wall_s:.0f} s")
    print(f"{'class':22s} {'flag':>6s} {'file':>6s}")
    for cls in CLASSES:
        print(f"{cls:22s} {counts[('flag', cls)]:6d} {counts[('file', cls)]:6d}")
    for (area, cls), rows in sorted(examples.items()):
        print(f"\n{cls} ({area}):")
        for argv, note in rows:
            print(f"  gpuplan {' '.join(repr(a) if not a or ' ' in a else a for a in argv)}")
            print(f"      {note[:220]}")


if __name__ == "__main__":
    sys.exit(main())
