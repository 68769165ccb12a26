"""``gpuplan validate report``: the accuracy report, ``validation.md`` and its plots.

Written where ``--out`` says (the repository's ``docs/validation.md`` is ``gpuplan validate
report --out docs``), from the measurements of ``--data`` or the checkout's ``data/``
(``validate.runs``): the measured records, split with the seed that
the committed calibration was fitted with, are predicted three ways and scored on the held-out
part only: with the pure datasheet roofline (every achievable fraction 1, no fixed costs: what
a peak-rate calculator says), with the uncalibrated prior, and with the committed calibration.
A predicted-versus-measured plot per kind (log-log) is written beside the report.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gpuplan.errors import GpuplanError
from gpuplan.hwmodels.efficiency import Efficiency, calibrated_efficiency, prior_efficiency
from gpuplan.outputs import save_figure, write_text
from gpuplan.validate import calibrate, runs
from gpuplan.validate.records import read_records

TARGETS = {"time_s": (10.0, 25.0), "peak_bytes": (10.0, None)}  # median, p90 (% error)


def datasheet_roofline() -> Efficiency:
    """Every rate at its datasheet peak and no fixed costs: the naive calculator."""
    prior = prior_efficiency()
    changes: dict[str, Any] = {}
    for f in dataclasses.fields(prior):
        value = getattr(prior, f.name)
        if f.name.endswith("_fraction"):  # achievable fractions of a peak: the peak itself
            changes[f.name] = {k: 1.0 for k in value} if isinstance(value, dict) else 1.0
        elif f.name.endswith(("_s", "_s_per_elem")):  # fixed costs and latencies: none
            changes[f.name] = {k: 0.0 for k in value} if isinstance(value, dict) else 0.0
    changes |= {"gemm_k_overhead": 0.0, "gemm_small_tile_penalty": 0.0, "attn_kv_overhead": 0.0}
    return dataclasses.replace(prior, source="datasheet roofline", **changes)


def held_out_scores(data_dir: str | Path | None = None, device: str = "h200") -> dict[str, Any]:
    """Score the held-out split with each efficiency; the rows of the calibrated one too."""
    fitted = calibrated_efficiency(device)
    if fitted is None:
        raise FileNotFoundError(f"no calibration for {device}: run `gpuplan validate calibrate`")
    prov = fitted.provenance
    records, train, test = calibrate.split_as_calibrated(fitted, data_dir, device)
    out = {
        "n_records": len(records),
        "n_train": len(train),
        "n_test": len(test),
        "seed": prov["seed"],
        "train_fraction": prov["train_fraction"],
    }
    for name, eff in (
        ("datasheet", datasheet_roofline()),
        ("prior", prior_efficiency()),
        ("calibrated", fitted),
    ):
        result = calibrate.score(test, eff)
        out[name] = result.summary
        if name == "calibrated":
            out["rows"] = result.rows
    return out


def _comparison(scores: dict[str, Any]) -> pd.DataFrame:
    keys = ["kind", "metric"]
    table = scores["calibrated"][[*keys, "n", "median_abs_pct_error", "p90_abs_pct_error"]]
    for name in ("prior", "datasheet"):
        other = scores[name][[*keys, "median_abs_pct_error"]].rename(
            columns={"median_abs_pct_error": f"{name}_median_pct_error"}
        )
        table = table.merge(other, on=keys, how="left")
    table["meets_target"] = [_meets(r) for r in table.to_dict("records")]
    return table


def _meets(row: dict[str, Any]) -> bool:
    median, p90 = TARGETS[row["metric"]]
    return row["median_abs_pct_error"] <= median and (
        p90 is None or row["p90_abs_pct_error"] <= p90
    )


def repeatability(data_dir: str | Path | None = None, device: str = "h200") -> pd.DataFrame:
    """How far two measurements of the same case on two GPUs differ: the floor under any model's
    error. Compares the runs the manifest's ``repeat`` names (``of``, the first that has the
    kind) with its re-measurement (``folder``); empty without one."""
    root = runs.resolve_data_dir(data_dir)
    manifest = runs.read_manifest(root) or {}
    repeat = manifest.get("repeat")
    if not repeat:
        return pd.DataFrame()
    rows = []
    for path in sorted((root / repeat["folder"]).glob("*.jsonl")):
        # a kind re-measured since with another method is compared with its first run, kept
        first = next(
            (t for f in repeat["of"] if (t := _times_by_case(root / f / path.name))), {}
        )
        second = _times_by_case(path)
        errors = [100 * abs(second[k] - t) / t for k, t in first.items() if k in second]
        if errors:
            median, p90 = np.percentile(errors, [50, 90])
            rows.append(
                {
                    "kind": path.stem,
                    "n": len(errors),
                    "median_abs_pct_difference": median,
                    "p90_abs_pct_difference": p90,
                }
            )
    return pd.DataFrame(rows)


def _times_by_case(path: Path) -> dict[str, float]:
    if not path.is_file():
        return {}
    records, _ = read_records(path)
    return {json.dumps(r.params, sort_keys=True): r.measured["time_s"] for r in records}


def checked_out_dir(out_dir: str | Path) -> Path:
    """``--out``: a folder that exists or whose parent does; checked before any work."""
    if not str(out_dir).strip():
        raise GpuplanError(f"--out {str(out_dir)!r} is empty: give a folder for the report")
    path = Path(out_dir)
    if path.exists() and not path.is_dir():
        raise GpuplanError(f"--out {str(out_dir)!r} is a file: give a folder for the report")
    if not path.parent.is_dir():
        raise GpuplanError(f"--out {str(out_dir)!r}: folder {str(path.parent)!r} does not exist")
    return path


def write_report(
    out_dir: str | Path, data_dir: str | Path | None = None, scores: dict | None = None
) -> Path:
    """Write ``validation.md`` and one PNG per kind under ``out_dir``; return the report path.
    ``scores``: ``held_out_scores(data_dir)`` if already computed."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    from gpuplan.plots import predicted_vs_measured
    from gpuplan.tables import render_table

    out_dir = checked_out_dir(out_dir)
    scores = scores or held_out_scores(data_dir)
    (out_dir / "img").mkdir(parents=True, exist_ok=True)
    table = _comparison(scores)
    rows = scores["rows"]
    images = []
    for kind in table["kind"].unique():
        fig = predicted_vs_measured(rows[rows["kind"] == kind])
        fig.axes[0].set_title(f"{kind}: held-out records")
        name = f"img/validation_{kind}.png"
        save_figure(out_dir / name, fig, dpi=110, bbox_inches="tight")
        plt.close(fig)
        images.append((kind, name))
    noise = repeatability(data_dir)
    from gpuplan.validate.generalization.report import section as left_out_section

    text = _markdown(scores, render_table(table), images, render_table(noise) if len(noise) else "")
    title, _, rest = text.partition("\n\n")
    text = "\n\n".join([title, left_out_section(runs.resolve_data_dir(data_dir), render_table),
                         "## The H200 calibration's held-out records\n\n" + rest])
    text += stack_section(data_dir, render_table)
    path = out_dir / "validation.md"
    write_text(path, text)
    return path


STACK_FIT = "fit.json"  # what ``python3 -m gpuplan.validate.fit_stacks --out`` writes


def stack_section(data_dir, render_table) -> str:
    """A table per stack: the held-out error per (stack, kind) of each stack campaign that
    ``data/runs.json`` lists under ``stack_runs`` (its ``fit.json``, written by
    ``gpuplan.validate.fit_stacks.kernels``); empty when there is none."""
    root = runs.resolve_data_dir(data_dir)
    manifest = runs.read_manifest(root) or {}
    lines = []
    for run in manifest.get("stack_runs", []):
        fit = root / run["folder"] / STACK_FIT
        if not fit.is_file():
            continue
        doc = json.loads(fit.read_text())
        for stack in sorted({r["stack"] for r in doc["held_out"]}):
            rows = [r for r in doc["held_out"] if r["stack"] == stack]
            lines += [f"### stack `{stack}` ({run['folder']}/: the held-out {1 - doc['fit_share']:.0%}, "
                      f"{sum(r['records'] for r in rows)} records)", "", "```",
                      render_table(rows), "```", ""]
    if not lines:
        return ""
    head = [
        "## Per stack",
        "",
        "The table above is the `harness` stack (every committed record of the runs above "
        "names it). The stack campaigns below measured what users run (PyTorch's default "
        "dispatch, Hugging Face transformers, torch.compile); each fitted only the stack "
        "parameters that are priors (`python3 -m gpuplan.validate.fit_stacks`), seeded and "
        "stratified by (stack, kind), and these are the held-out records' errors in percent, "
        "before (`prior_*`) and after (`fit_*`) that fit.",
        "",
    ]
    return "\n".join(["", *head, *lines])


def _markdown(
    scores: dict[str, Any], table: str, images: list[tuple[str, str]], noise: str = ""
) -> str:
    lines = [
        "# Validation: predictions against measurements",
        "",
        "Generated by `gpuplan validate report --out docs` from the measured runs that"
        " `data/runs.json` names and the committed fit"
        " `gpuplan/hwmodels/data/calibration_h200.json`.",
        f"{scores['n_records']} records; the fit used a seeded random "
        f"{scores['train_fraction']:.0%} of each kind's cases (seed {scores['seed']}; a case"
        " measured in two runs falls on one side); every error below is on the other"
        f" {scores['n_test']} records, never used in fitting.",
        "",
        "The records come from several runs (data folders), on whichever H200 machine each call"
        " was lent. Their CPUs differ, and CPU-bound eager calls follow them: each run that"
        " `data/runs.json` marks `host: fitted` has a fitted host factor on the CPU costs"
        " (`calibration_h200.json`, `host_factor`); the manifest also gives each run's timing"
        " convention (a GPU spin before each timed call, cuDNN's attention). Predictions"
        " for users use the host of the `reference` run, `h200/`. `docs/dev/campaign.md` lists"
        " the runs and the held-out error over five splits.",
        "",
        "Targets: median absolute error at most 10% and 90th percentile at most 25% on `time_s`"
        " for every kind; median at most 10% on `peak_bytes`. `prior_median_pct_error` is the"
        " uncalibrated model; `datasheet_median_pct_error` a pure datasheet roofline (peak"
        " rates, no efficiencies, no fixed costs).",
        "",
        "```",
        table,
        "```",
        "",
    ]
    if noise:
        lines += [
            "## How repeatable the measurements are",
            "",
            "The same cases measured again on a second H200 (`data/h200x2/repeat/`):"
            " the absolute difference between the two measurements. No model can be expected"
            " to agree with one measurement more closely than two GPUs agree with each other;"
            " the small elementwise cases, bound by the CPU's launch of a few microseconds of"
            " work, are the noisiest. These are the first session's methods: the elementwise"
            " records scored above were re-measured as device time (the GPU spins before each"
            " call), which removes that noise; the first runs are kept under `data/earlier/`.",
            "",
            "```",
            noise,
            "```",
            "",
        ]
    for kind, name in images:
        lines += [f"![{kind}]({name})", ""]
    return "\n".join(lines)


def main(args) -> int:
    from gpuplan.tables import dump_json, render_table

    if getattr(args, "json", False):
        scores = held_out_scores(args.data)
        print(
            dump_json(
                {k: v for k, v in scores.items() if k != "rows"}
                | {"comparison": _comparison(scores)}
            )
        )
        return 0
    checked_out_dir(args.out)  # before any work
    scores = held_out_scores(args.data)
    path = write_report(args.out, args.data, scores)
    print(render_table(_comparison(scores)))
    print(f"\nwrote {path}")
    return 0
