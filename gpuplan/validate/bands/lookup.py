"""Error bands: the p10-p90 range in which the true value of a prediction lies, from the signed
held-out-validated residuals of the kinds and stack it is made of.

Data: ``gpuplan/hwmodels/data/error_bands.json``, written by ``python3 -m gpuplan.validate.bands``
from the FIT part of each validation split: per family (a harness record kind and metric, e.g.
``gemm.time_s``; a published family, ``train.time``, ``train.memory``, ``serve.throughput``,
``serve.ttft``, ``serve.tpot``, ``serve.e2e``), stack and device, the p10 and p90 of
``e = predicted / true - 1``. ``benchmarks/band_coverage.py`` measures on the held-out part how
often the truth falls inside.

From a residual band to a value band: the true value of a prediction ``P`` of the family's
metric is ``P / (1 + e)``, so its band is ``[P / (1 + p90), P / (1 + p10)]``, where p10 is at most
0 and p90 at least 0 (``residuals``): every band holds its own point. A metric inversely
proportional to it (a throughput or MFU from a step time, a cost per token from a throughput) is
``P * (1 + e)``: ``[P * (1 + p10), P * (1 + p90)]`` (``power=-1``).

Composition: a prediction made of parts (a breakdown's categories, each priced by one kind) gets
the sum of its parts' bands, lows with lows and highs with highs. That is the exact quantile of
the sum when the parts' errors are fully correlated (comonotone), which they largely are: the
parts share one device, one calibration, one clock and one stack's overheads. Treating them as
independent would shrink the band by about the square root of the number of parts and leave the
whole-step truth outside far more often than one time in five; summing quantiles never does
that, and a single part's band is returned unchanged.

Lookup (``residuals``), most specific first; every level is built from fit residuals only
(``gpuplan.validate.bands.build`` says why these levels):

1. the (stack, device) group, if it has at least ``min_rows`` fit residuals: measured, no label;
2. else the device's band, pooled over every stack measured on it (at least two sources): a
   stack never measured on a measured device;
3. else the band of the device's architecture (``hwmodels.architecture.ARCH``), pooled over its
   measured devices (at least two sources): a device never measured;
4. else the family's pooled p10/p90, the quantiles of every fit residual of the family: the
   spread across the stacks and devices that were measured. A family measured on one stack and
   device only has no spread of its own; its pooled band is widened on each side by the median,
   over the families measured on two groups or more, of how far their pooled band reaches
   beyond their median group's p10 (below) and p90 (above).

A band of levels 2-4 is then widened symmetrically, if need be, to the width of the widest
measured group it pools (level 4: of the family), so an unmeasured band is never narrower than
a measured one it stands for. All of it comes from the data, not from a chosen constant. Such a
band is labelled (``Residuals.label``: what was never measured and which level priced it), and
documents carry the label as ``error_band_label``.

A whole-model estimate (``gpuplan estimate prefill-step|decode-step|train-step --model``) whose
stack was measured as a whole on the device (the stack campaign's ``prefill_step``,
``model_decode_step``, ``model_train_step`` records) gets that whole kind's band; otherwise its
time band is composed over its breakdown's categories as above.

The core reads only the JSON; it never imports ``gpuplan.validate``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from statistics import median

from gpuplan.errors import GpuplanError
from gpuplan.hwmodels.architecture import ARCH

DATA = Path(__file__).resolve().parents[2] / "hwmodels" / "data" / "error_bands.json"
MIN_ONE_PLUS_E = 0.05  # 1 + e floored: a band's low end stays positive whatever the residuals


@dataclass(frozen=True)
class Residuals:
    """The p10/p90 of ``e = predicted / true - 1`` that price a family for a stack and device."""

    family: str
    p10: float
    p90: float
    measured: bool
    label: str  # '' when measured; else what was never measured and the rule used
    n: int = 0  # the residuals the band was taken from
    basis: str = ""  # which predictions they were, in words (``words``)


@dataclass(frozen=True)
class Band:
    low: float
    high: float
    label: str = ""
    words: str = ""  # the band in plain words (``words``)

    def as_list(self) -> list[float]:
        return [self.low, self.high]


@lru_cache(maxsize=4)
def _load(path: str) -> dict:
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError as why:
        raise GpuplanError(f"error bands file={path!r} does not exist: run "
                           "`python3 -m gpuplan.validate.bands --out FILE`") from why  # fmt: skip


def table(path: str | Path | None = None) -> dict:
    return _load(str(path or DATA))


def families(path: str | Path | None = None) -> tuple[str, ...]:
    return tuple(sorted(table(path)["families"]))


def _extra(fam: dict) -> tuple[float, float]:
    """How far a family's pooled band reaches beyond its typical (median) group's band."""
    p = fam["pooled"]
    return (max(median([g["p10"] for g in fam["groups"]]) - p["p10"], 0.0),
            max(p["p90"] - median([g["p90"] for g in fam["groups"]]), 0.0))  # fmt: skip


def _widening(data: Mapping) -> tuple[float, float]:
    """The median reach of the pooled band over the families with two groups or more."""
    many = [_extra(f) for f in data["families"].values() if len(f["groups"]) >= 2]
    if not many:
        return 0.0, 0.0
    return median([m[0] for m in many]), median([m[1] for m in many])


def _unmeasured(data: Mapping, family: str) -> tuple[float, float]:
    fam = data["families"][family]
    lo, hi = fam["pooled"]["p10"], fam["pooled"]["p90"]
    if len(fam["groups"]) < 2:
        d_lo, d_hi = _widening(data)
        lo, hi = lo - d_lo, hi + d_hi
    return _at_least(lo, hi, fam["groups"])


def _at_least(lo: float, hi: float, groups: Iterable[Mapping]) -> tuple[float, float]:
    """``[lo, hi]`` widened symmetrically, if need be, to the widest measured group's band: an
    unmeasured band is never narrower than a measured one it stands for."""
    # the widths compared are of the bands as printed, each holding its point (_holding_point)
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    widest = max((max(g["p90"], 0.0) - min(g["p10"], 0.0) for g in groups), default=0.0)
    if hi - lo < widest:
        pad = 0.5 * (widest - (hi - lo))
        lo, hi = lo - pad, hi + pad
    return lo, hi


def _level(fam: Mapping, stack: str, device: str) -> tuple[float, float, str, int, str] | None:
    """The band of a pooled level (a device's stacks, then its architecture's devices), widened
    to the widest measured group it pools, with the label's words; None if neither exists."""
    arch = ARCH.get(device)
    for key, name, match in (("devices", "device", device), ("architectures", "arch", arch)):
        entry = next((e for e in fam.get(key, ()) if match and e[name] == match), None)
        if entry is None:
            continue
        pooled = [g for g in fam["groups"]
                  if (g["device"] == device if key == "devices" else ARCH.get(g["device"]) == arch)]
        lo, hi = _at_least(entry["p10"], entry["p90"], pooled)
        if key == "devices":
            how = (f"band of the stacks measured on {device} "
                   f"({', '.join(entry['stacks'])}; {entry['n_sources']} sources)")
            basis = f"other stacks on {device}: {', '.join(entry['stacks'])}"
        else:
            how = (f"band of architecture {arch} measured on {', '.join(entry['devices'])} "
                   f"({entry['n_sources']} sources)")
            basis = f"{arch} GPUs measured: {', '.join(entry['devices'])}"
        return lo, hi, how, int(entry.get("n_fit", 0)), basis
    return None


def stack_key(stack: str, timing: str | None = None) -> str:
    """The band group's stack of a prediction: the stack, or ``stack@timing`` when it is priced
    in a timing convention (the record contract's ``timing``: isolated or device) other than the
    stack's own. The stack campaign measured every kernel in both, and they err apart (its GEMMs:
    median -32% isolated, +6% device), so each has its own band."""
    if not timing:
        return stack
    from gpuplan.sim.stacks import get_stack

    try:
        own = get_stack(stack).timing
    except GpuplanError:
        own = None
    return stack if timing == own else f"{stack}@{timing}"


def residuals(family: str, stack: str, device: str, *, data: Mapping | None = None) -> Residuals:
    """The residual band of ``family`` for ``stack`` on ``device``: the measured group's, else the
    device's stacks', else its architecture's devices', else the family's pooled band (module
    docstring); every band but the first is labelled. The band always spans ``e = 0``
    (``_holding_point``), so the value band of a prediction holds the prediction."""
    found = _residuals(family, stack, device, data=data)
    return _holding_point(found)


def _holding_point(res: Residuals) -> Residuals:
    """``res`` with p10 at most 0 and p90 at least 0. A prediction is one point of its own
    band: where the residuals of its group all lie on one side (a group the model prices
    consistently fast or slow), the p10-p90 range of the truth would exclude the number printed
    beside it, and a reader could not tell the two apart. Extending the band to the point only
    widens it (a truth inside the quantile range stays inside)."""
    return Residuals(res.family, min(res.p10, 0.0), max(res.p90, 0.0), res.measured, res.label,
                     res.n, res.basis)


def _residuals(family: str, stack: str, device: str, *, data: Mapping | None = None) -> Residuals:
    data = table() if data is None else data
    fams = data["families"]
    if family not in fams:
        raise GpuplanError(f"error band family={family!r} is unknown: give one of "
                           f"{', '.join(sorted(fams))}")  # fmt: skip
    fam = fams[family]
    for g in fam["groups"]:
        if g["stack"] == stack and g["device"] == device:
            return Residuals(family, g["p10"], g["p90"], True, "", int(g.get("n_fit", 0)),
                             f"{stack} on {device}")
    stacks = {g["stack"] for g in fam["groups"]}
    devices = {g["device"] for g in fam["groups"] if g["stack"] == stack}
    what = (f"stack {stack} never measured" if stack not in stacks
            else f"{stack} measured on {', '.join(sorted(devices))}, not {device}")  # fmt: skip
    level = _level(fam, stack, device)
    if level is not None:
        lo, hi, how, n, basis = level
        return Residuals(family, lo, hi, False, f"{family}: {what}, {how}", n,
                         f"{basis}; {stack} on {device} never measured")
    lo, hi = _unmeasured(data, family)
    how = ("pooled over" if len(fam["groups"]) >= 2 else "widened beyond") + \
        f" {len(fam['groups'])} measured stack/device group(s)"
    return Residuals(family, lo, hi, False, f"{family}: {what}, band {how}",
                     int(fam["pooled"].get("n_fit", 0)),
                     f"every stack and GPU measured, widened to the widest; {stack} on {device} "
                     "never measured")


# what a family's residuals were, in words
FAMILY_NOUNS = {
    "train.time": "published training step times", "train.memory": "published training memory "
    "figures", "serve.ttft": "published times to first token", "serve.tpot": "published times "
    "per output token", "serve.throughput": "published serving throughputs",
    "serve.e2e": "published request latencies",
}  # fmt: skip


def noun(family: str) -> str:
    if family in FAMILY_NOUNS:
        return FAMILY_NOUNS[family]
    if "." not in family:
        return f"predictions of {family}"
    kind, metric = family.split(".", 1)
    what = "peak memories" if metric == "peak_bytes" else "times"
    return f"measured {kind.replace('_', ' ')} {what}"


def words(res: Residuals) -> str:
    """The band in plain words: how far the truth of comparable past predictions was from them,
    for 80% of them, and which they were. With ``e = predicted / true - 1`` the truth is the
    prediction times ``1 / (1 + e)``."""
    low = 1.0 / max(1.0 + res.p90, MIN_ONE_PLUS_E) - 1.0
    high = 1.0 / max(1.0 + res.p10, MIN_ONE_PLUS_E) - 1.0
    return (f"the truth was {_pct(low)} to {_pct(high)} of the prediction for 80% of "
            f"{res.n:,} {noun(res.family)} ({res.basis})")  # fmt: skip


def _pct(x: float) -> str:
    return "0%" if abs(x) < 0.005 else f"{100 * x:+.0f}%"


def join_labels(labels: Iterable[str]) -> str:
    """One label for a document: '' when every band was measured."""
    kept = list(dict.fromkeys(x for x in labels if x))
    if not kept:
        return ""
    return ("UNMEASURED, band from the nearest measured level (the device's other stacks, its "
            "architecture, or every stack and device), never narrower than a measured one: "
            + "; ".join(kept))  # fmt: skip


def interval(value: float, res: Residuals, *, power: int = 1) -> Band:
    """The value band of a prediction ``value`` of a metric proportional to the family's metric
    to the ``power`` (+1 or -1)."""
    if power not in (1, -1):
        raise GpuplanError(f"power={power!r} is invalid: give 1 or -1")
    lo_f = max(1.0 + res.p10, MIN_ONE_PLUS_E)
    hi_f = max(1.0 + res.p90, MIN_ONE_PLUS_E)
    if power == 1:
        a, b = value / hi_f, value / lo_f
    else:
        a, b = value * lo_f, value * hi_f
    return Band(min(a, b), max(a, b), res.label, words(res))


def compose(parts: Iterable[tuple[float, str]], stack: str, device: str, *,
            data: Mapping | None = None) -> Band:  # fmt: skip
    """The band of a sum of parts ``(value, family)``: the comonotone sum (module docstring)."""
    low = high = 0.0
    labels: list[str] = []
    said: list[str] = []
    for value, family in parts:
        b = interval(value, residuals(family, stack, device, data=data))
        low, high = low + b.low, high + b.high
        if b.label and b.label not in labels:
            labels.append(b.label)
        if b.words not in said:
            said.append(b.words)
    text = said[0] if len(said) == 1 else "the sum of its parts' bands: " + "; ".join(said)
    return Band(low, high, "; ".join(labels), text)  # parts' labels, joined by join_labels
