"""Fuzz the Python API: every public name of ``gpuplan.api`` called with hostile arguments.

Each call starts from a cheap valid call (``benchmarks/fuzz_api_calls.py``) and replaces one
argument, or two (one time in five), with a hostile value: None, 0, -1, -2**63, 2**63, NaN,
inf, -inf, 1e308, 10**30, -0.5, "", " ", "nope", unicode, bytes, numpy scalars, a list, a dict,
an empty tuple, a float where an int is wanted, a bool, a ModelConfig, an Accelerator or a
Cluster where a key is wanted and a key where an object is. The places: each argument of the
base call, each optional keyword it leaves out, each entry of a dict argument
(``params["m"]``), and an unknown keyword. The same seed draws the same calls. Each call runs in a forked child (the parent imported gpuplan once) with a 20 s limit.

Outcome classes, the first that applies:
  hang              still running after the limit
  bare exception    an exception that is not a ``GpuplanError`` (TypeError, KeyError, ...),
                    raised by the call or by reading a property of its result
  error not 1 line  a ``GpuplanError`` whose message is empty, several lines or a page long
  silent nonsense   a result holding NaN, an infinite or negative duration, cost, size or
                    count of bytes/FLOPs, or a utilization (MFU, ...) above 1
  ok                a sane result, or a one-line ``GpuplanError``
A ``TypeError`` raised by Python's own signature check when binding the arguments (a missing
or unknown keyword of the public callable itself) counts as ok: it is the language's one-line
answer, naming the argument, before any gpuplan code runs. ``GpuplanError`` itself (an
exception class) is not fuzzed. Results are judged by name: fields ending in _s, _usd,
_bytes, _per_s, ... (and words such as cost, time, energy) are durations, costs and sizes.

    python3 benchmarks/fuzz_api.py [--n 2000] [--seed 0] [--workers 2] [--examples 3]
                                   [--only NAME] [--json PATH]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import inspect
import json
import math
import os
import random
import re
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fuzz_api_calls import Call, base_calls, shared  # noqa: E402

LIMIT_S = 20.0
CLASSES = ["ok", "bare exception", "error not 1 line", "silent nonsense", "hang"]
# (label, value or a key of fuzz_api_calls.shared() for an object of the wrong kind)
HOSTILE: list[tuple[str, object]] = [
    ("None", None), ("0", 0), ("-1", -1), ("-2**63", -(2**63)), ("2**63", 2**63),
    ("nan", math.nan), ("inf", math.inf), ("-inf", -math.inf), ("''", ""), ("'nope'", "nope"),
    ("'ünïcødé'", "ünïcødé"), ("[1]", [1]), ("{'a': 1}", {"a": 1}), ("2.5", 2.5),
    ("True", True), ("False", False), ("1e-300", 1e-300), ("ModelConfig", "@model"),
    ("Accelerator", "@acc"), ("Cluster", "@cluster"), ("'llama3.2-3b'", "llama3.2-3b"),
    ("'h200'", "h200"), ("1e308", 1e308), ("-0.5", -0.5), ("10**30", 10**30), ("()", ()),
    ("b'x'", b"x"), ("' '", " "), ("np.int64(-3)", "@np_negative"), ("np.nan", "@np_nan"),
]  # fmt: skip
NUMPY = {"np_negative": lambda: __import__("numpy").int64(-3),
         "np_nan": lambda: __import__("numpy").float64("nan")}  # fmt: skip
UNKNOWN = "bogus_keyword"
# result fields that are durations, costs, sizes or work: never NaN, infinite or negative
AMOUNT_ENDS = ("_s", "_usd", "_bytes", "bytes", "flops", "_j", "_wh", "_per_s", "_per_hour")
AMOUNT_WORDS = ("cost", "usd", "time", "energy", "latency", "ttft", "tpot")
# ... except where infinity means "never" or "no limit" (no checkpoint: an infinite interval)
MAY_BE_INFINITE = ("interval", "horizon", "slo", "target", "limit", "deadline", "mtbf")
# a statistic of no samples (no request finished before the horizon) is NaN, as numpy's is
STATISTIC = re.compile(r"mean|median|std|min|max|p\d+(\.\d+)?")
UTILIZATION = ("mfu", "hfu", "utilization", "utilisation")
SKIP_MODULES = ("matplotlib", "PIL")
SKIP_NAMES = (".provenance",)  # free-form metadata a caller gives, echoed


def slots(call: Call, fn) -> list[tuple]:
    """The places a hostile value can go: ("pos", i), ("kw", name), ("item", where, key) for
    one entry of a dict argument, ("unknown",) for a keyword the callable does not take."""
    out = [("pos", i) for i in range(len(call.args))]
    out += [("kw", k) for k in call.kwargs]
    params = inspect.signature(fn).parameters
    named = list(params)[len(call.args):]
    out += [("kw", k) for k in named if k not in call.kwargs
            and params[k].kind in (params[k].KEYWORD_ONLY, params[k].POSITIONAL_OR_KEYWORD)]  # fmt: skip
    for where, value in [*enumerate(call.args), *call.kwargs.items()]:
        if isinstance(value, dict) and value and all(isinstance(k, str) for k in value):
            out += [("item", where, k) for k in sorted(value)[:12]]
    return [*out, ("unknown",)]


def mutate(calls: list[Call], fns, rng: random.Random) -> tuple[int, list[tuple]]:
    """A job: the index of the base call and one or two (slot, hostile index) replacements."""
    k = rng.randrange(len(calls))
    places = slots(calls[k], fns[k])
    picks = rng.sample(places, 1 if rng.random() < 0.8 or len(places) < 2 else 2)
    return k, [(p, rng.randrange(len(HOSTILE))) for p in picks]


def apply(call: Call, changes, objects) -> tuple[tuple, dict]:
    args, kwargs = list(call.args), dict(call.kwargs)
    for place, h in changes:
        value = HOSTILE[h][1]
        if isinstance(value, str) and value.startswith("@"):
            value = objects[value[1:]] if value[1:] in objects else NUMPY[value[1:]]()
        if place[0] == "pos":
            args[place[1]] = value
        elif place[0] == "kw":
            kwargs[place[1]] = value
        elif place[0] == "unknown":
            kwargs[UNKNOWN] = 1
        else:
            where = place[1]
            inner = args[where] if isinstance(where, int) else kwargs[where]
            if not isinstance(inner, dict):  # the other change replaced the dict itself
                continue
            inner = {**inner, place[2]: value}
            if isinstance(where, int):
                args[where] = inner
            else:
                kwargs[where] = inner
    return tuple(args), kwargs


def describe(call: Call, changes) -> str:
    shown = []
    for place, h in changes:
        label = HOSTILE[h][0]
        if place[0] == "pos":
            shown.append(f"arg{place[1]}={label}")
        elif place[0] == "kw":
            shown.append(f"{place[1]}={label}")
        elif place[0] == "unknown":
            shown.append(f"{UNKNOWN}=1")
        else:
            where = place[1] if isinstance(place[1], str) else f"arg{place[1]}"
            shown.append(f"{where}[{place[2]!r}]={label}")
    return f"{call.name}({', '.join(shown)})"


def _is_amount(name: str) -> bool:
    name = name.lower()
    return name.endswith(AMOUNT_ENDS) or any(w in name for w in AMOUNT_WORDS)


def _bad_number(name: str, x: float) -> str:
    if x != x and not STATISTIC.fullmatch(name):
        return "NaN"
    if _is_amount(name) and math.isinf(x) and not any(w in name.lower() for w in MAY_BE_INFINITE):
        return "infinite"
    if _is_amount(name) and x < 0:
        return "negative"
    if any(w in name.lower() for w in UTILIZATION) and x > 1 + 1e-9:
        return "above 1"
    return ""


def scan(obj, name: str = "result", depth: int = 0, seen=None, *, nan_ok: bool = False):
    """The first nonsense number in ``obj`` as 'path: why', else ''. A NaN in a table or an
    array is a missing cell (a request unfinished at the horizon has no first token), a NaN
    statistic (``mean``, ``p99``) one of no samples, and a summary of a serving run in which no
    request finished (``finished`` 0) has NaN rates by design; ``provenance`` is free-form
    metadata, echoed. Only numbers are judged."""
    import numpy as np
    import pandas as pd

    seen = set() if seen is None else seen
    if depth > 6 or id(obj) in seen or type(obj).__module__.startswith(SKIP_MODULES):
        return ""
    if isinstance(obj, bool) or obj is None or isinstance(obj, str) or name.endswith(SKIP_NAMES):
        return ""
    if isinstance(obj, int | float | np.number):
        why = _bad_number(name.rsplit(".", 1)[-1], float(obj))
        return f"{name}={obj!r}: {why}" if why and not (nan_ok and why == "NaN") else ""
    seen.add(id(obj))
    if isinstance(obj, pd.DataFrame):
        return next(filter(None, (scan(obj[c].to_numpy(), f"{name}.{c}", depth + 1, seen)
                                  for c in obj.columns if isinstance(c, str))), "")  # fmt: skip
    if isinstance(obj, pd.Series):
        obj = obj.to_numpy()
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind not in "iuf" or obj.size == 0:
            return ""
        flat = obj.astype(float).ravel()
        flat = flat[~np.isnan(flat)]  # NaN in a column is a missing cell (pandas' convention)
        for x in (flat.min(), flat.max()) if flat.size else ():
            if why := _bad_number(name.rsplit(".", 1)[-1], float(x)):
                return f"{name}: {why}"
        return ""
    if isinstance(obj, dict):
        nan_ok = nan_ok or obj.get("finished") == 0
        items = [(f"{name}.{k}" if isinstance(k, str) else name, v) for k, v in obj.items()]
    elif isinstance(obj, list | tuple | set | frozenset):
        items = [(name, v) for v in list(obj)[:200]]
    else:
        items = list(_attributes(obj, name))
    for path, value in items:
        if found := scan(value, path, depth + 1, seen, nan_ok=nan_ok):
            return found
    return ""


def _attributes(obj, name: str):
    """A gpuplan object's fields and properties (a property that raises is a finding)."""
    if not type(obj).__module__.startswith("gpuplan"):
        return
    if dataclasses.is_dataclass(obj):
        for f in dataclasses.fields(obj):
            yield f"{name}.{f.name}", getattr(obj, f.name, None)
    elif hasattr(obj, "__dict__"):
        yield from ((f"{name}.{k}", v) for k, v in vars(obj).items() if not k.startswith("_"))
    for attr, member in inspect.getmembers(type(obj)):
        if isinstance(member, property) and not attr.startswith("_"):
            try:
                yield f"{name}.{attr}", getattr(obj, attr)
            except Exception as e:  # noqa: BLE001 - a property that raises is a finding
                raise PropertyRaised(f"{name}.{attr}") from e


class PropertyRaised(Exception):
    pass


def run_one(fn, call: Call, changes, objects) -> tuple[str, str]:
    """(class, note) of one call, run in this process."""
    from gpuplan.errors import GpuplanError

    args, kwargs = apply(call, changes, objects)
    try:
        inspect.signature(fn).bind(*args, **kwargs)
    except TypeError as e:
        return "ok", f"signature: {e}"
    try:
        result = fn(*args, **kwargs)
    except GpuplanError as e:
        text = str(e)
        if not text.strip() or "\n" in text.strip() or len(text) > 600:
            return "error not 1 line", text[:300].replace("\n", " | ")
        return "ok", ""
    except BaseException as e:  # noqa: BLE001 - anything else is the finding
        return "bare exception", _where(e)
    try:
        found = scan(result)
    except PropertyRaised as e:
        cause = e.__cause__
        if isinstance(cause, GpuplanError):
            return "ok", ""
        return "bare exception", f"{e}: {_where(cause)}"
    return ("silent nonsense", found) if found else ("ok", "")


def _where(e: BaseException) -> str:
    import traceback

    frames = [f for f in traceback.extract_tb(e.__traceback__) if "gpuplan" in f.filename]
    at = f" at {Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""
    return f"{type(e).__name__}: {str(e)[:160]}{at}"


def run_all(jobs, calls, fns, objects, workers: int, root: Path, on_done) -> None:
    """Run jobs in forked children, ``workers`` at a time; a child past LIMIT_S is a hang."""
    pending, running = collections.deque(enumerate(jobs)), {}
    while pending or running:
        while pending and len(running) < workers:
            n, (k, changes) = pending.popleft()
            pid = os.fork()
            if pid == 0:
                try:
                    signal.alarm(int(LIMIT_S) + 5)
                    with open(os.devnull, "w") as null, contextlib.redirect_stdout(null), \
                            contextlib.redirect_stderr(null):  # fmt: skip
                        cls, note = run_one(fns[k], calls[k], changes, objects)
                    (root / f"{n}.json").write_text(json.dumps([cls, note]))
                finally:
                    os._exit(0)
            running[pid] = (n, time.monotonic())
        pid, _ = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            time.sleep(0.005)
            for pid, (n, started) in list(running.items()):
                if time.monotonic() - started > LIMIT_S:
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                    del running[pid]
                    on_done(n, "hang", "")
            continue
        n, _started = running.pop(pid)
        path = root / f"{n}.json"
        cls, note = json.loads(path.read_text()) if path.exists() else ("bare exception", "died")
        on_done(n, cls, note)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2000, help="calls (2000)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--examples", type=int, default=3, help="examples shown per bad class")
    ap.add_argument("--only", help="fuzz only this public name")
    ap.add_argument("--json", metavar="PATH", help="also write every outcome as JSON Lines")
    opts = ap.parse_args(argv)
    os.environ.setdefault("MPLBACKEND", "Agg")
    import gpuplan.api as api

    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="gpuplan-fuzz-api-") as root:
        calls = [c for c in base_calls(Path(root)) if opts.only in (None, c.name)]
        fns = [getattr(api, c.name) for c in calls]
        objects = shared()
        rng = random.Random(opts.seed)
        jobs = [mutate(calls, fns, rng) for _ in range(opts.n)]
        counts = collections.Counter()
        examples = collections.defaultdict(list)
        log = open(opts.json, "w") if opts.json else None  # noqa: SIM115

        def on_done(n, cls, note):
            k, changes = jobs[n]
            counts[(calls[k].name, cls)] += 1
            text = describe(calls[k], changes)
            if cls != "ok" and len(examples[(calls[k].name, cls)]) < opts.examples:
                examples[(calls[k].name, cls)].append((text, note))
            if log:
                log.write(json.dumps({"call": text, "class": cls, "note": note}) + "\n")
            if (n + 1) % 200 == 0:
                print(f"  {n + 1} of {opts.n} ({time.monotonic() - started:.0f} s)",
                      file=sys.stderr)  # fmt: skip

        out = Path(root) / "out"
        out.mkdir()
        run_all(jobs, calls, fns, objects, opts.workers, out, on_done)
    if log:
        log.close()
    report(counts, examples, opts.n, time.monotonic() - started)
    return 0


def report(counts, examples, n: int, wall_s: float) -> None:
    names = sorted({name for name, _ in counts})
    print(f"{n} calls of {len(names)} public names in {wall_s:.0f} s")
    short = {"ok": "ok", "bare exception": "bare", "error not 1 line": "not1line",
             "silent nonsense": "nonsense", "hang": "hang"}  # fmt: skip
    print(f"{'name':26s} " + " ".join(f"{short[c]:>9s}" for c in CLASSES))
    for name in names:
        print(f"{name:26s} " + " ".join(f"{counts[(name, c)]:9d}" for c in CLASSES))
    print(f"{'TOTAL':26s} " + " ".join(
        f"{sum(counts[(x, c)] for x in names):9d}" for c in CLASSES))  # fmt: skip
    for (name, cls), rows in sorted(examples.items()):
        print(f"\n{cls} ({name}):")
        for text, note in rows:
            print(f"  {text}\n      {note[:220]}")


if __name__ == "__main__":
    sys.exit(main())
