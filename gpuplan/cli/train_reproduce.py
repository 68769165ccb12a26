"""``gpuplan train --reproduce``: gpuplan's predictions of the published training runs next to
what they measured (``sim/parallel/data/published_training.csv``), per source, and the errors."""

from __future__ import annotations

from gpuplan.tables import dump_json, format_value, render_table


def reproduce(args) -> int:
    """Predict the published runs; print the comparison tables and the errors per source."""
    from gpuplan.hwmodels.efficiency import efficiency_for
    from gpuplan.validate.published.megatron import reproduce as predict
    from gpuplan.validate.published.megatron import summary
    from gpuplan.validate.published.training import (
        DEFAULT_SEED,
        reproduce_training,
        source_summary,
        training_sources,
    )

    frame = predict()
    summ = summary(frame)
    source = efficiency_for("a100-sxm-80gb").source
    runs = reproduce_training(DEFAULT_SEED)
    by_source = source_summary(runs)
    held = sorted(set(runs.loc[runs["held_out"], "source"]))
    if args.json:
        print(dump_json({
            "rows": frame, "summary": summ, "efficiency_source": source,
            "published_training": {"rows": runs, "summary": by_source, "seed": DEFAULT_SEED,
                                   "held_out_sources": held},
        }))  # fmt: skip
        return 0
    print(render_reproduction(frame, summ))
    print(f"\nA100 kernel efficiencies: {source}")
    print(render_training(runs, by_source, training_sources()["sources"], held))
    return 0


def _shown(row, value) -> str:
    """A published or predicted value: bytes for memory, else 4 digits in the metric's unit."""
    return format_value("bytes", value) if row["kind"] == "memory" else f"{value:.4g}"


def render_source(name: str, rows, reference: str) -> list[str]:
    """One source's rows that gpuplan predicts, then its rows it cannot express, by reason."""
    ok = rows[rows["status"] == "ok"].to_dict("records")
    for r in ok:
        for col in ("published", "predicted"):
            r[f"{col}_"] = _shown(r, r[col])
    lines = ["", f"== {name}: {reference}"]
    if ok:
        lines.append(render_table(
            ok, ["model", "gpus", "layout", "metric", "published_", "predicted_", "error_pct"],
            headers={"published_": "published", "predicted_": "predicted"},
            formats={"error_pct": lambda v: f"{v:+.1f}%"},
        ))  # fmt: skip
    bad = rows[rows["status"] != "ok"].groupby("status").size()
    lines += [f"{n} row(s) {status}" for status, n in bad.items()]
    return lines


SUMMARY_COLUMNS = ("source", "kind", "n", "not_expressible", "median_abs_pct_error",
                   "p90_abs_pct_error", "held_out")  # fmt: skip


def render_training(runs, by_source, sources: dict, held: list[str]) -> str:
    """Per-source tables of the published training runs and the summary per source."""
    lines = ["", "Published training runs (data/published_training.csv) against gpuplan"]
    for name, rows in runs[~runs["source"].isin(("narayanan2021", "korthikanti2022"))].groupby(
        "source", sort=True
    ):
        lines += render_source(name, rows, sources.get(name, {}).get("reference", ""))
    summ = by_source.assign(held_out=by_source["held_out"].map({True: "held out", False: "fit"}))
    lines += [
        "",
        f"Summary per source (absolute % error; held-out sources: {', '.join(held)})",
        render_table(
            summ,
            SUMMARY_COLUMNS,
        ),
    ]
    return "\n".join(lines)


def render_reproduction(frame, summ) -> str:
    cols = ["id", "metric", "gpus", "measured", "predicted", "error_pct"]
    fmt = {"measured": lambda v: f"{v:.4g}", "predicted": lambda v: f"{v:.4g}",
           "error_pct": lambda v: f"{v:+.1f}%"}  # fmt: skip
    kinds = summ[summ["by"] == "kind"]
    sources = summ[summ["by"] == "source"]
    lines = [
        "Published runs (A100 80GB, DGX A100 / Selene) against gpuplan's predictions",
        "",
        render_table(frame, cols, formats=fmt),
        "",
        render_table(
            sources.rename(columns={"median": "median_abs_pct_error", "max": "max_abs_pct_error"}),
            ["kind", "group", "count", "median_abs_pct_error", "max_abs_pct_error"],
            headers={"group": "source"},
        ),
        "",
        render_table(
            kinds.rename(columns={"median": "median_abs_pct_error", "max": "max_abs_pct_error"}),
            ["group", "count", "median_abs_pct_error", "max_abs_pct_error", "target_pct", "met"],
            headers={"group": "kind"},
        ),
    ]
    return "\n".join(lines)
