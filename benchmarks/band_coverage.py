"""Coverage of the error bands on held-out rows only: ``python3 benchmarks/band_coverage.py``.

For every held-out residual of the four validation sets (harness records, the H200 stack
campaign, published training runs, published serving rows; ``gpuplan.validate.bands.build``) the band
gpuplan prints for that prediction is looked up (``gpuplan.validate.bands.lookup.residuals`` for its family,
stack and device: the measured group's band, else the labelled band of the device's other stacks,
of its architecture, or of the whole family) and the truth is inside it when the residual lies
within the band's p10..p90. The target is 80% +- 5% per published set: bands that are honest,
not wide. The harness records of kinds made of parts (layers, steps) are also scored with the
band ``gpuplan estimate`` prints for them, composed over their breakdown's categories
(``band_docs.breakdown_band``).

"Leave one source out" prices each FIT source of a published set with the bands built without
it (the bands of a source never seen, as a new user's cluster is): the fit side's own estimate
of the coverage a new source gets, beside the held-out figure, which rests on few sources (the
held-out training rows are 216 of llm-foundry's and 4 of two others). About 40 s on two cores.
"""

from __future__ import annotations

import sys

import pandas as pd

from gpuplan.validate.bands import build as band_data
from gpuplan.validate.bands import documents as band_docs
from gpuplan.validate.bands import lookup as bands

COMPOSED_KINDS = ("layer", "tp_layer", "tp_mlp", "train_step", "decode_step")


def covered(rows: pd.DataFrame, data=None) -> pd.DataFrame:
    """``rows`` (residuals) with the band looked up and whether the truth is inside."""
    res = [bands.residuals(f, s, d, data=data)
           for f, s, d in zip(rows["family"], rows["stack"], rows["device"], strict=True)]
    floor = bands.MIN_ONE_PLUS_E - 1.0
    return rows.assign(
        p10=[max(r.p10, floor) for r in res], p90=[max(r.p90, floor) for r in res],
        measured=[r.measured for r in res],
    ).assign(inside=lambda f: (f["e"] >= f["p10"]) & (f["e"] <= f["p90"]))  # fmt: skip


def leave_one_source_out(residuals: pd.DataFrame, set_name: str) -> pd.DataFrame:
    """Per fit source of ``set_name``: its fit rows priced with the bands built without it."""
    fit = residuals[residuals["part"] == "fit"]
    mine = fit[fit["set"] == set_name]
    out = []
    for source, rows in mine.groupby("source", sort=True):
        data = {"families": band_data.band_table(fit[fit["source"] != source])}
        rows = rows[rows["family"].isin(data["families"])].reset_index(drop=True)
        if len(rows):
            out.append(covered(rows, data))
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame()


def composed_coverage(data_dir=None, device: str = "h200") -> pd.DataFrame:
    """Held-out composite harness records: is the measured time inside the composed band?"""
    from gpuplan.hwmodels.efficiency import calibrated_efficiency
    from gpuplan.validate import calibrate
    from gpuplan.validate.measurements import for_run, run_of
    from gpuplan.validate.record_prediction import predict_breakdown

    eff = calibrated_efficiency(device)
    _, _, test = calibrate.split_as_calibrated(eff, data_dir, device)
    out = []
    for r in test:
        if r.kind not in COMPOSED_KINDS or not r.measured.get("time_s"):
            continue
        bd = predict_breakdown(r.kind, r.device, r.params,
                               eff=for_run(eff, run_of(r), r.kind))  # fmt: skip
        cats = bd.by("category")
        band = band_docs.breakdown_band(zip(cats["category"], cats["time_s"], strict=True), r.kind,
                                    stack=r.params.get("stack", "harness"), device=r.device)  # fmt: skip
        t = r.measured["time_s"]
        out.append({"family": f"{r.kind}.time_s (composed)", "inside": band.low <= t <= band.high,
                    "measured": not band.label})  # fmt: skip
    return pd.DataFrame(out)


CROSS_DEVICE = ("vidur_a100", "vidur_h100")  # Vidur's published A100/H100 kernel profiles


def cross_device_coverage(data_dir=None) -> pd.DataFrame:
    """Vidur's profiles (``data/vidur_*``; never fitted, and not in the bands): every record is
    held out whole, on devices and a stack no band group measured, so it checks the labelled
    device, architecture and pooled bands."""
    from gpuplan.validate.fit_stacks import cases as fit_cases
    from gpuplan.validate.record_prediction import predict_breakdown, record_stack
    from gpuplan.validate.runs import resolve_data_dir

    root = resolve_data_dir(data_dir)
    rows = []
    for name in CROSS_DEVICE:
        if not (root / name).is_dir():
            continue
        for r in fit_cases.load(root / name):
            bd = predict_breakdown(r.kind, r.device, r.params, stack=record_stack(r.params))
            rows.append({"set": f"cross-device ({name})", "family": f"{r.kind}.time_s",
                         "stack": bands.stack_key(r.params.get("stack", "pytorch"),
                                                  r.params.get("timing")), "device": r.device,
                         "source": name, "part": "held_out",
                         "e": bd.total_s / r.measured["time_s"] - 1.0})  # fmt: skip
    return covered(pd.DataFrame(rows)) if rows else pd.DataFrame()


def table(frame: pd.DataFrame) -> pd.DataFrame:
    g = frame.groupby("family", sort=True)
    return pd.DataFrame({
        "held_out": g.size(), "unmeasured": g["measured"].apply(lambda m: int((~m).sum())),
        "coverage_pct": 100 * g["inside"].mean(),
    }).reset_index()  # fmt: skip


def main() -> int:
    residuals = band_data.all_residuals()
    held = residuals.query("part == 'held_out'")
    scored = covered(held.reset_index(drop=True))
    pd.set_option("display.width", 200)
    print("held-out coverage of the p10-p90 error bands (target 80% +- 5%)\n")
    print(table(scored.assign(family=scored["set"] + ": " + scored["family"])).to_string(
        index=False, float_format=lambda v: f"{v:.1f}"))  # fmt: skip
    print("\nper set and overall (held out):")
    for name, g in scored.groupby("set", sort=True):
        print(f"  {name:<20} {len(g):>5} rows  {100 * g['inside'].mean():5.1f}%  "
              f"({int((~g['measured']).sum())} priced with an unmeasured band)")  # fmt: skip
    print(f"  {'all':<20} {len(scored):>5} rows  {100 * scored['inside'].mean():5.1f}%")
    pub = scored[scored["set"].str.startswith("published")]
    print(f"  {'published (both)':<20} {len(pub):>5} rows  {100 * pub['inside'].mean():5.1f}%")
    for name in ("published training", "published serving"):
        g = held[held["set"] == name]
        print(f"  {name}: held-out rows per source: "
              + ", ".join(f"{s} {n}" for s, n in g.groupby("source").size().items()))  # fmt: skip
    g = scored[scored["set"] == "published training"]
    print("  published training, held out per (source, stack, device, family): rows, coverage, "
          "band p10..p90 of e")  # fmt: skip
    for (src, st, dev, fam), gg in g.groupby(["source", "stack", "device", "family"]):
        print(f"    {src} {st} {dev} {fam}: {len(gg)} rows, {100 * gg['inside'].mean():.0f}%, "
              f"{gg['p10'].iloc[0]:+.3f}..{gg['p90'].iloc[0]:+.3f}")  # fmt: skip
    print("\nleave one source out (fit side; each fit source priced by the bands of the others):")
    for name in ("published training", "published serving"):
        loso = leave_one_source_out(residuals, name)
        per = loso.groupby("source")["inside"].mean()
        print(f"  {name:<20} {len(loso):>5} rows  {100 * loso['inside'].mean():5.1f}%  (mean over "
              f"{len(per)} sources {100 * per.mean():.1f}%; "
              + ", ".join(f"{s} {100 * v:.0f}%" for s, v in per.items()) + ")")  # fmt: skip
    cross = cross_device_coverage()
    if len(cross):
        print("\ncross-device check, held out whole (Vidur's A100/H100 profiles, stack eager-2023;"
              " never fitted, every band unmeasured):")  # fmt: skip
        print(table(cross.assign(family=cross["set"] + ": " + cross["family"])).to_string(
            index=False, float_format=lambda v: f"{v:.1f}"))  # fmt: skip
        print(f"  all cross-device: {len(cross)} rows  {100 * cross['inside'].mean():.1f}%")
    comp = composed_coverage()
    if len(comp):
        print("\nharness records of kinds made of parts, with the band composed over their "
              "breakdown (as `gpuplan estimate` prints it):")  # fmt: skip
        print(table(comp).to_string(index=False, float_format=lambda v: f"{v:.1f}"))
        print(f"  all composed: {len(comp)} rows  {100 * comp['inside'].mean():.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
