"""The five-layer diagnosis: how much of a setup's time each layer of the stack can still win.

A setup is written as the flags of ``gpuplan train`` or ``gpuplan serve`` (``Settings``: flag to
value, ``None`` for a bare switch), so every row of the walk is a command a person can run. The
walk prices the setup as given, then visits the layers in order, 1 model definition,
2 parallelization, 3 runtime, 4 compilation, 5 hardware; each layer offers candidate flag edits
(``Candidates``), the walk keeps the one that lowers the metric most (then tries the layer's
others on top of it), and carries the result to the next layer. A layer whose candidates all
lose, or that has none gpuplan can price, keeps the setup and says why.

The metric is a time, lower is better: the training step time; for serving the mean end-to-end
latency of a request, or the cost per million output tokens when every request arrives at
once (``--rate inf``). ``price`` is given by the caller (the CLI prices each setup exactly as
the command it prints does), so each row reproduces by construction and is tested so.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

Settings = Mapping[str, str | None]  # "--tp": "8"; "--sp": None (a switch that is on)
Edits = Mapping[str, str | None | bool]  # a value, None to drop the flag, True a switch on

LAYER_NAMES = {1: "model definition", 2: "parallelization", 3: "runtime",
               4: "compilation", 5: "hardware"}  # fmt: skip
MAX_ROUNDS = 2  # changes kept per layer: the best one, then the best of the rest on top


@dataclass(frozen=True, slots=True, kw_only=True)
class Priced:
    """One setup's figures: ``metric`` (s or USD, lower is better) and what the table shows."""

    metric: float
    figures: dict[str, float]
    ok: bool = True  # False: it does not fit in memory (never adopted)
    detail: Any = None  # the estimate or simulation result, for the layers' candidates


@dataclass(frozen=True, slots=True, kw_only=True)
class Candidate:
    """A change a layer offers: a label and the flag edits that make it."""

    change: str
    edits: Edits


@dataclass(frozen=True, slots=True, kw_only=True)
class LayerOffer:
    """What a layer offers on the current setup; ``why`` says what it cannot price."""

    candidates: tuple[Candidate, ...] = ()
    why: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Row:
    layer: int
    name: str
    change: str
    settings: dict[str, str | None]
    metric_after: float
    gain: float
    share: float
    figures: dict[str, float]

    def to_dict(self) -> dict[str, Any]:
        return {"layer": self.layer, "name": self.name, "change": self.change,
                "metric_after": self.metric_after, "gain": self.gain, "share": self.share,
                "figures": self.figures}  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class Limit:
    """The physical limit: the whole step's (or request's) roofline bound, and how it is made."""

    metric: float
    figures: dict[str, float]
    basis: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Diagnosis:
    kind: str  # "train" or "serve"
    metric: str  # the metric's key, e.g. "step_time_s"
    baseline_settings: dict[str, str | None]
    baseline: Priced
    layers: tuple[Row, ...]
    limit: Limit
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def total_gain(self) -> float:
        return sum(r.gain for r in self.layers)


def with_edits(settings: Settings, edits: Edits) -> dict[str, str | None]:
    """``settings`` with ``edits`` applied: True turns a switch on (and drops its ``--no-``
    twin, or the plain flag of a ``--no-`` switch), None drops a flag, a string sets a value."""
    out = dict(settings)
    for flag, value in edits.items():
        if value is None:
            out.pop(flag, None)
            continue
        twin = "--" + flag[5:] if flag.startswith("--no-") else "--no-" + flag[2:]
        out.pop(twin, None)
        out[flag] = None if value is True else str(value)
    return out


def walk(
    settings: Settings,
    *,
    price: Callable[[Settings], Priced],
    offers: Callable[[int, Settings, Priced], LayerOffer],
    limit: Callable[[Settings, Priced], Limit],
    kind: str,
    metric: str,
    screen: Callable[[Settings], Priced] | None = None,
) -> Diagnosis:
    """Price ``settings``, then walk the five layers, each keeping its best changes.

    ``screen``: a cheaper price (a serving simulation of fewer requests) that ranks a layer's
    candidates; the walk then prices them in that order and keeps the first that ``price``
    itself finds faster, so every row is still priced in full."""
    current = dict(settings)
    base = price(current)
    now = base
    rows: list[tuple[int, str, dict, Priced, float]] = []
    ranked = _cached(screen) if screen is not None else None
    for layer in LAYER_NAMES:
        offer = offers(layer, current, now)
        current, after, change = _best_of_layer(current, now, offer, price, ranked)
        rows.append((layer, change, current, after, now.metric - after.metric))
        now = after
    total = sum(r[4] for r in rows)
    layers = tuple(
        Row(layer=layer, name=LAYER_NAMES[layer], change=change, settings=s,
            metric_after=p.metric, gain=gain, share=gain / total if total > 0 else 0.0,
            figures=p.figures)
        for layer, change, s, p, gain in rows
    )  # fmt: skip
    return Diagnosis(kind=kind, metric=metric, baseline_settings=dict(settings), baseline=base,
                     layers=layers, limit=limit(current, now))  # fmt: skip


def _cached(price):
    memo: dict = {}

    def cached(settings):
        key = tuple(settings.items())
        if key not in memo:
            memo[key] = _try_price(price, settings)
        return memo[key]

    return cached


def _improving(current, now: Priced, left, price, verdicts: dict | None = None):
    """(metric, candidate, settings, priced) of each candidate ``price`` finds faster, fastest
    first; ``verdicts``: filled with what each of the others came to (``_verdict``)."""
    tried = []
    for cand in left:
        s = with_edits(current, cand.edits)
        if s == current:
            continue
        p = _try_price(price, s)
        if p is not None and p.ok and p.metric < now.metric:
            tried.append((p.metric, cand, s, p))
        elif verdicts is not None:
            verdicts[cand.change] = _verdict(p, now)
    return sorted(tried, key=lambda t: t[0])


def _verdict(p: Priced | None, now: Priced) -> str:
    """Why a candidate was not kept: refused, does not fit, or how much slower it prices."""
    if p is None:
        return "not priceable on this setup"
    if not p.ok:
        return "does not fit"
    if p.metric == now.metric:
        return "no change"
    return f"{100 * (p.metric / now.metric - 1):+.1f}%" if now.metric else "no gain"


def _confirmed(current, now: Priced, left, price, ranked, verdicts: dict | None = None):
    """The candidates ``ranked`` finds faster, in its order; the first that ``price`` finds
    faster too comes first, priced in full (the rest keep their screened price)."""
    base = ranked(current)
    seen: dict[str, str] = {}
    screened = _improving(current, base, left, ranked, seen) if base else []
    if verdicts is not None:  # priced on the screening run only
        verdicts.update({k: v + " (screened)" for k, v in seen.items()})
    for i, (_, cand, s, _) in enumerate(screened):
        p = _try_price(price, s)
        if p is not None and p.ok and p.metric < now.metric:
            return [(p.metric, cand, s, p)] + screened[i + 1:]
        if verdicts is not None:
            verdicts[cand.change] = _verdict(p, now)
    return []


def _best_of_layer(current, now: Priced, offer: LayerOffer, price, ranked=None):
    """Up to ``MAX_ROUNDS`` rounds: price every candidate on the current setup, keep the one
    that lowers the metric most; the next round tries, on top of it, the others that lowered it
    too; stop when none does."""
    left = list(offer.candidates)
    kept: list[str] = []
    verdicts: dict[str, str] = {}  # of the first round: why each candidate was not kept
    for _ in range(MAX_ROUNDS):
        v = verdicts if not kept else None
        if ranked is None:
            tried = _improving(current, now, left, price, v)
        else:
            tried = _confirmed(current, now, left, price, ranked, v)
        if not tried:
            break
        _, cand, current, now = tried[0]
        kept.append(cand.change)
        left = [t[1] for t in tried[1:]]  # next round: the others that helped
    if kept:
        return current, now, "; ".join(kept)
    if not offer.candidates:
        return current, now, "nothing to gain: " + (offer.why or "no change gpuplan can price")
    why = f" ({offer.why})" if offer.why else ""
    names = ", ".join(f"{c.change} {verdicts.get(c.change, 'no change')}"
                      for c in offer.candidates)  # fmt: skip
    return current, now, f"nothing to gain: none is faster: {names}{why}"


def _try_price(price, settings) -> Priced | None:
    """The price of a candidate, or None where gpuplan refuses it (a layout the stack does not
    run, a kernel the device lacks: a candidate, not an error of the user's)."""
    from gpuplan.errors import GpuplanError

    try:
        return price(settings)
    except GpuplanError:
        return None


def command(kind: str, settings: Settings) -> str:
    """The ``gpuplan train|serve`` command line of ``settings``."""
    import shlex

    return shlex.join(["gpuplan", kind, *argv_of(settings)])


def argv_of(settings: Settings) -> list[str]:
    """The flags of ``settings`` as a command line: ``--x v``, a bare ``--x`` for a switch."""
    out: list[str] = []
    for flag, value in settings.items():
        out += [flag] if value is None else [flag, str(value)]
    return out


def settings_from_argv(argv: Sequence[str], takes_value: Callable[[str], bool]) -> dict:
    """Flags of a command line as ``Settings`` (``--x=v`` and ``--x v`` alike)."""
    out: dict[str, str | None] = {}
    it = iter(argv)
    for token in it:
        flag, eq, value = token.partition("=")
        if not flag.startswith("--"):
            raise ValueError(f"unexpected argument {token!r}")
        if eq:
            out[flag] = value
        elif takes_value(flag):
            out[flag] = next(it)
        else:
            out[flag] = None
    return out
