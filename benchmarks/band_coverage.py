"""Coverage of the error bands on held-out rows only: ``python3 benchmarks/band_coverage.py``.

For every held-out residual of the three validation sets (harness records, published training
runs, published serving rows; ``gpuplan.validate.bands``) the band gpuplan prints for that
prediction is looked up (``gpuplan.sim.bands.residuals`` for its family, stack and device: the
measured group's band, or the labelled unmeasured one) and the truth is inside it when the
residual lies within the band's p10..p90. The target is 80% +- 5% per family and overall: bands
that are honest, not wide. The harness records of kinds made of parts (layers, steps) are also
scored with the band ``gpuplan estimate`` prints for them, composed over their breakdown's
categories (``bands.breakdown_band``). A minute or so on two cores.
"""

from __future__ import annotations

import sys

import pandas as pd

from gpuplan.sim import bands
from gpuplan.validate import bands as band_data

COMPOSED_KINDS = ("layer", "tp_layer", "tp_mlp", "train_step", "decode_step")


def covered(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` (held-out residuals) with the band looked up and whether the truth is inside."""
    res = [bands.residuals(f, s, d) for f, s, d in zip(rows["family"], rows["stack"], rows["device"], strict=True)]
    floor = bands.MIN_ONE_PLUS_E - 1.0
    return rows.assign(
        p10=[max(r.p10, floor) for r in res], p90=[max(r.p90, floor) for r in res],
        measured=[r.measured for r in res],
    ).assign(inside=lambda f: (f["e"] >= f["p10"]) & (f["e"] <= f["p90"]))  # fmt: skip


def composed_coverage(data_dir=None, device: str = "h200") -> pd.DataFrame:
    """Held-out composite harness records: is the measured time inside the composed band?"""
    from gpuplan.hwmodels.efficiency import calibrated_efficiency
    from gpuplan.sim.predict import predict_breakdown
    from gpuplan.validate import calibrate

    eff = calibrated_efficiency(device)
    prov = eff.provenance
    records, _ = calibrate.load_measurements(data_dir, device)
    _, test = calibrate.split(records, seed=prov["seed"], train_fraction=prov["train_fraction"])
    out = []
    for r in test:
        if r.kind not in COMPOSED_KINDS or not r.measured.get("time_s"):
            continue
        bd = predict_breakdown(r.kind, r.device, r.params,
                               eff=calibrate.for_run(eff, calibrate.run_of(r), r.kind))  # fmt: skip
        cats = bd.by("category")
        band = bands.breakdown_band(zip(cats["category"], cats["time_s"], strict=True), r.kind,
                                    stack=r.params.get("stack", "harness"), device=r.device)  # fmt: skip
        t = r.measured["time_s"]
        out.append({"family": f"{r.kind}.time_s (composed)", "inside": band.low <= t <= band.high,
                    "measured": not band.label})  # fmt: skip
    return pd.DataFrame(out)


def table(frame: pd.DataFrame) -> pd.DataFrame:
    g = frame.groupby("family", sort=True)
    return pd.DataFrame({
        "held_out": g.size(), "unmeasured": g["measured"].apply(lambda m: int((~m).sum())),
        "coverage_pct": 100 * g["inside"].mean(),
    }).reset_index()  # fmt: skip


def _set(family: str) -> str:
    if family.startswith("train."):
        return "published training"
    if family.startswith("serve."):
        return "published serving"
    return "harness records"


def main() -> int:
    held = band_data.all_residuals().query("part == 'held_out'")
    scored = covered(held.reset_index(drop=True))
    per_family = table(scored)
    pd.set_option("display.width", 200)
    print("held-out coverage of the p10-p90 error bands (target 80% +- 5%)\n")
    print(per_family.to_string(index=False, float_format=lambda v: f"{v:.1f}"))
    by_set = scored.assign(set=scored["family"].map(_set)).groupby("set")
    print("\nper set and overall:")
    for name, g in by_set:
        print(f"  {name:<20} {len(g):>5} rows  {100 * g['inside'].mean():5.1f}%")
    print(f"  {'all':<20} {len(scored):>5} rows  {100 * scored['inside'].mean():5.1f}%")
    pub = scored[~scored["family"].map(_set).eq("harness records")]
    print(f"  {'published (both)':<20} {len(pub):>5} rows  {100 * pub['inside'].mean():5.1f}%")
    comp = composed_coverage()
    if len(comp):
        print("\nharness records of kinds made of parts, with the band composed over their "
              "breakdown (as `gpuplan estimate` prints it):")  # fmt: skip
        print(table(comp).to_string(index=False, float_format=lambda v: f"{v:.1f}"))
        print(f"  all composed: {len(comp)} rows  {100 * comp['inside'].mean():.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
