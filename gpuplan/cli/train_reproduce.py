"""``gpuplan train --reproduce``: gpuplan's predictions of the published training runs next to
what they measured (``sim/parallel/data/published_training.csv``), per source, and the errors."""

from __future__ import annotations

from gpuplan.tables import dump_json, format_value, render_table


def reproduce(args) -> int:
    """Predict the published runs; print the comparison tables and the errors per source."""
    from gpuplan.hwmodels.efficiency import efficiency_for
    from gpuplan.validate.generalization.published import summary as left_summary
    from gpuplan.validate.generalization.published import training_left_out
    from gpuplan.validate.published.megatron import reproduce as predict
    from gpuplan.validate.published.megatron import summary
    from gpuplan.validate.published.training import (
        DEFAULT_SEED,
        source_summary,
        training_sources,
    )

    frame = predict()
    summ = summary(frame)
    source = efficiency_for("a100-sxm-80gb").source
    runs = training_left_out(DEFAULT_SEED)
    held = sorted(set(runs.loc[runs["held_out"], "source"]))
    if args.json:
        print(dump_json({
            "rows": frame, "summary": summ, "efficiency_source": source,
            "published_training": {"rows": runs, "summary": source_summary(runs),
                                   "seed": DEFAULT_SEED, "held_out_sources": held,
                                   "left_out_by_family": left_summary(runs, "family"),
                                   "left_out_by_source": left_summary(runs, "source")},
        }))  # fmt: skip
        return 0
    print(render_reproduction(frame, summ))
    print(f"\nA100 kernel efficiencies: {source}")
    print(render_training(runs, training_sources()["sources"]))
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


LEFT_OUT_COLUMNS = ("kind", "rows", "predicted", "left_out_median_pct", "left_out_p90_pct",
                    "in_sample_median_pct")  # fmt: skip
PCT = {c: (lambda v: "-" if v != v else f"{v:.1f}%") for c in LEFT_OUT_COLUMNS[3:]}
LEFT_OUT_NOTE = (
    "Leave one source out: no value fitted on a published training row is in force (the one "
    "such parameter, comm_interference, is adopted by no stack: benchmarks/fit_training_stacks"
    ".json), and the kernel efficiencies come from H200 measurements, so every row is priced "
    "without anything fitted on its source; the in-sample column is the same figure."
)


def render_training(runs, sources: dict) -> str:
    """Per-source tables of the published training runs, then the leave-one-source-out error
    per source family and per source (``validate.generalization.published``)."""
    from gpuplan.validate.generalization.published import summary

    lines = ["", "Published training runs (data/published_training.csv) against gpuplan"]
    for name, rows in runs[~runs["source"].isin(("narayanan2021", "korthikanti2022"))].groupby(
        "source", sort=True
    ):
        lines += render_source(name, rows, sources.get(name, {}).get("reference", ""))
    lines += ["", LEFT_OUT_NOTE]
    for by in ("family", "source"):
        lines += ["", f"Absolute % error per {by}, left out of every fit",
                  render_table(summary(runs, by), (by, *LEFT_OUT_COLUMNS), formats=PCT)]
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
