"""The printed ``gpuplan estimate`` case: its setup and defaults, the breakdown grouped by op,
category, layer or phase, the classes' shares, time, achieved FLOP/s and peak memory."""

from __future__ import annotations

from typing import Any

from gpuplan.tables import band_text, format_banded, format_value, render_table


def render_case(r: dict[str, Any], by: str) -> str:
    """One case's estimate as people read it: the case, the breakdown table by ``by``, the
    classes, the time, the achieved rate and the peak memory."""
    what = r["model"] or ", ".join(f"{k}={v}" for k, v in r["params"].items())
    case = ", ".join(f"{k}={v}" for k, v in r["params"].items()) if r["model"] else ""
    lines = [
        f"{r['kind']} on {r['device']}: {what}" + (f" ({case})" if case else ""),
        "defaults in force (not given): " + (", ".join(r["defaults"]) or "none"),
        f"hardware efficiency: {r['efficiency_source']}",
        r["stack_line"],
        *_headline(r),
        "",
    ]
    items = r["items"]
    keys = ["phase", "op"] if by == "op" else [by]
    table = items.groupby(keys, sort=False)[["time_s", "flops", "bytes", "kernels"]].sum()
    table["share_pct"] = 100 * table["time_s"] / max(r["time_s"], 1e-300)
    table = table.reset_index().sort_values("time_s", ascending=False)
    shown = table.head(25)
    lines.append(
        render_table(
            shown,
            [*keys, "time_s", "share_pct", "flops", "bytes", "kernels"],
            formats={k: _one_unit(k, float(shown[k].max()) if len(shown) else 0.0)
                     for k in ("flops", "bytes", "time_s")},
        )
    )
    if len(table) > len(shown):
        lines.append(f"... {len(table) - len(shown)} more rows (--json has them all)")
    lines += [
        "",
        render_table(
            r["by_category"].assign(share_pct=100 * r["by_category"]["share"]),
            ["category", "time_s", "share_pct"],
        ),
    ]
    lines += [
        "",
        f"predicted time: {_banded(r, 'time_s')}   achieved: "
        f"{_banded(r, 'achieved_flops_per_s')}",
    ]
    if text := band_text(r):
        lines.append(f"band p10-p90: {text}")
    if r["peak_bytes"] is not None:
        terms = ", ".join(f"{k} {_fmt('bytes', v)}" for k, v in r["memory_bytes"].items() if v)
        fits = "fits" if r["fits"] else "DOES NOT FIT"
        lines.append(
            f"peak memory: {_banded(r, 'peak_bytes')} of "
            f"{_fmt('bytes', r['device_memory_bytes'])} ({fits}): {terms}"
        )
    return "\n".join(lines)


def _headline(r: dict[str, Any]) -> list[str]:
    """A whole model's step in one line: time, tokens/s, MFU and peak memory (``estimate_fit``)."""
    if r.get("tokens_per_s") is None:
        return []
    mfu = "-" if r.get("mfu") is None else f"{100 * r['mfu']:.1f}%"
    fits = "fits" if r["fits"] else "DOES NOT FIT"
    memory = ("" if r["peak_bytes"] is None else
              f" | peak memory {_fmt('bytes', r['peak_bytes'])} of "
              f"{_fmt('bytes', r['device_memory_bytes'])} ({fits})")  # fmt: skip
    return ["", f"step time {_banded(r, 'time_s')} | {r['tokens_per_s']:,.0f} tokens/s | "
            f"MFU {mfu}{memory}"]  # fmt: skip


# (threshold, divisor, unit) of a column, largest first: the column takes the first unit its
# largest value reaches
COLUMN_UNITS = {
    "flops": ((1e13, 1e12, "TFLOP"), (0.0, 1e9, "GFLOP")),
    "bytes": ((1e9, 1e9, "GB"), (1e6, 1e6, "MB"), (0.0, 1e3, "kB")),
    "time_s": ((1.0, 1.0, "s"), (1e-3, 1e-3, "ms"), (0.0, 1e-6, "µs")),
}


def _one_unit(column: str, largest: float):
    """A formatter of one column's values, all in the unit its largest value calls for."""
    for threshold, divisor, unit in COLUMN_UNITS[column]:
        if largest >= threshold:
            return lambda value, d=divisor, u=unit: f"{value / d:,.3g} {u}" if value else f"0 {u}"
    raise AssertionError(column)


def _banded(r: dict[str, Any], key: str) -> str:
    return format_banded(key, r[key], r.get("error_band", {}).get(key))


def _fmt(name: str, value: float) -> str:
    return format_value(name, value)
