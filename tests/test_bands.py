"""Error bands: composition invariants, the unmeasured rule, the fit-only band data, the
``error_band`` key of every pricing command and the ``577 ms (540–610)`` table form."""

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.cli import main
from gpuplan.errors import GpuplanError
from gpuplan.tables import format_banded
from gpuplan.validate.bands import build as band_data
from gpuplan.validate.bands import documents as band_docs
from gpuplan.validate.bands import lookup as bands

E = st.floats(min_value=-0.6, max_value=1.5, allow_nan=False)
VALUE = st.floats(min_value=1e-6, max_value=1e6, allow_nan=False)


def _data(groups, pooled=None):
    """A band table of one family ``f.time_s`` and of a second, two-group family ``g``."""
    pooled = pooled or {"n_fit": 50, "p10": min(g[2] for g in groups),
                        "p90": max(g[3] for g in groups)}  # fmt: skip
    mk = lambda s, d, lo, hi: {"stack": s, "device": d, "n_fit": 20, "p10": lo, "p90": hi,  # noqa: E731
                               "median": 0.5 * (lo + hi)}  # fmt: skip
    return {"families": {
        "f.time_s": {"pooled": pooled, "groups": [mk(*g) for g in groups]},
        "g": {"pooled": {"n_fit": 40, "p10": -0.3, "p90": 0.3},
              "groups": [mk("a", "x", -0.1, 0.1), mk("b", "y", -0.2, 0.2)]},
    }}  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(VALUE, E, E)
def test_a_band_is_the_inverted_residual_band_and_holds_the_estimate_when_it_spans_zero(v, a, b):
    lo, hi = sorted((a, b))
    band = bands.interval(v, bands.Residuals("f", lo, hi, True, ""))
    assert band.low <= band.high
    assert band.low == pytest.approx(v / (1 + hi)) and band.high == pytest.approx(v / (1 + lo))
    if lo <= 0 <= hi:
        assert band.low <= v * (1 + 1e-12) and v <= band.high * (1 + 1e-12)
    inv = bands.interval(v, bands.Residuals("f", lo, hi, True, ""), power=-1)
    assert inv.low == pytest.approx(v * (1 + lo)) and inv.high == pytest.approx(v * (1 + hi))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(VALUE, E, E), min_size=1, max_size=6), st.floats(0, 0.5))
def test_wider_residuals_never_narrow_a_composed_band(parts, widen):
    def compose(extra):
        fams = {f"f{i}": {"pooled": {"n_fit": 9, "p10": 0.0, "p90": 0.0}, "groups": [
            {"stack": "s", "device": "d", "n_fit": 9, "p10": min(a, b) - extra,
             "p90": max(a, b) + extra, "median": 0.0}]} for i, (_, a, b) in enumerate(parts)}
        data = {"families": fams}
        band = bands.compose([(v, f"f{i}") for i, (v, _, _) in enumerate(parts)], "s", "d",
                             data=data)  # fmt: skip
        return band.low, band.high

    narrow, wide = compose(0.0), compose(widen)
    assert wide[0] <= narrow[0] * (1 + 1e-12) and wide[1] >= narrow[1] * (1 - 1e-12)


def test_compose_is_the_sum_of_the_parts_bands_and_one_part_is_unchanged():
    data = _data([("harness", "h200", -0.1, 0.2)])
    one = bands.compose([(2.0, "f.time_s")], "harness", "h200", data=data)
    assert (one.low, one.high) == pytest.approx((2 / 1.2, 2 / 0.9)) and one.label == ""
    two = bands.compose([(2.0, "f.time_s"), (1.0, "g")], "a", "x", data=data)
    f = bands.interval(2.0, bands.residuals("f.time_s", "a", "x", data=data))
    g = bands.interval(1.0, bands.residuals("g", "a", "x", data=data))
    assert (two.low, two.high) == pytest.approx((f.low + g.low, f.high + g.high))
    assert "f.time_s" in two.label and "g:" not in two.label  # g is measured for a on x


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(E, E), min_size=1, max_size=4))
def test_unmeasured_is_never_narrower_than_a_measured_group(pairs):
    groups = [(f"s{i}", "h200", *sorted(p)) for i, p in enumerate(pairs)]
    data = _data(groups, pooled={"n_fit": 99, "p10": 0.0, "p90": 0.01})  # a narrow pooled band
    un = bands.residuals("f.time_s", "never", "h200", data=data)
    assert not un.measured and "never measured" in un.label
    for _, _, lo, hi in groups:
        assert un.p90 - un.p10 >= hi - lo - 1e-12


def test_the_committed_bands_unmeasured_never_narrower_and_labelled():
    for family in bands.families():
        fam = bands.table()["families"][family]
        un = bands.residuals(family, "no-such-stack", "no-such-gpu")
        assert not un.measured and un.label.startswith(family)
        for g in fam["groups"]:
            m = bands.residuals(family, g["stack"], g["device"])
            assert m.measured and m.label == ""
            assert (m.p10, m.p90) == (min(g["p10"], 0.0), max(g["p90"], 0.0))
            assert un.p90 - un.p10 >= m.p90 - m.p10 - 1e-12


@given(st.lists(st.tuples(st.floats(-0.9, 2.0), st.floats(-0.9, 2.0)), min_size=1, max_size=4),
       st.floats(1e-6, 1e6), st.sampled_from((1, -1)))
def test_every_band_holds_its_point(pairs, value, power):
    groups = [(f"s{i}", "h200", *sorted(p)) for i, p in enumerate(pairs)]
    lo = min(g[2] for g in groups)
    data = _data(groups, pooled={"n_fit": 99, "p10": lo, "p90": lo + 0.01})
    for stack in ("s0", "never"):
        band = bands.interval(value, bands.residuals("f.time_s", stack, "h200", data=data),
                              power=power)
        assert band.low <= value * (1 + 1e-12) and value <= band.high * (1 + 1e-12)


def test_a_single_group_family_is_widened_by_the_spread_of_the_others():
    data = _data([("harness", "h200", -0.1, 0.1)])
    un = bands.residuals("f.time_s", "pytorch", "h200", data=data)
    # g's pooled band reaches 0.15 beyond its median group's on each side
    assert (un.p10, un.p90) == pytest.approx((-0.25, 0.25))


def test_an_unknown_family_is_one_line():
    with pytest.raises(GpuplanError, match="family='nope' is unknown"):
        bands.residuals("nope", "harness", "h200")


def _residuals(n_fit, n_held, seed=0, **row):
    rng = np.random.default_rng(seed)
    base = {"set": "s", "family": "k.time_s", "stack": "harness", "device": "h200",
            "source": "src"} | row  # fmt: skip
    rows = [base | {"part": part, "e": e}
            for part, n in (("fit", n_fit), ("held_out", n_held))
            for e in rng.normal(0, 0.1, n)]  # fmt: skip
    return pd.DataFrame(rows, columns=band_data.COLUMNS)


def test_band_data_is_fitted_on_the_fit_part_only():
    frame = pd.concat([_residuals(40, 20), _residuals(30, 9, 1, stack="pytorch", source="b")])
    table = band_data.band_table(frame)
    moved = frame.copy()
    moved.loc[moved["part"] == "held_out", "e"] += 5.0
    assert band_data.band_table(moved) == table
    g = table["k.time_s"]["groups"][0]
    fit = frame.loc[(frame["part"] == "fit") & (frame["stack"] == "harness"), "e"]
    assert (g["p10"], g["p90"]) == pytest.approx(tuple(np.quantile(fit, [0.1, 0.9])), abs=1e-6)
    assert g["n_fit"] == 40
    dev = table["k.time_s"]["devices"][0]  # the two stacks pooled on h200: 70 fit rows
    assert (dev["device"], dev["n_fit"], dev["n_sources"]) == ("h200", 70, 2)


def test_band_data_is_deterministic_whatever_the_row_order():
    frame = pd.concat([_residuals(40, 20), _residuals(30, 9, 1, stack="pytorch", source="b"),
                       _residuals(12, 3, 2, family="m.peak_bytes", device="a100-sxm-80gb")])
    doc = json.dumps(band_data.document(frame, {}), sort_keys=True)
    shuffled = frame.sample(frac=1.0, random_state=3)
    assert json.dumps(band_data.document(shuffled, {}), sort_keys=True) == doc


def test_a_group_with_too_few_fit_rows_has_no_band_of_its_own():
    table = band_data.band_table(_residuals(band_data.MIN_ROWS - 1, 3))
    assert table["k.time_s"]["groups"] == []


def test_a_pooled_level_needs_two_sources():
    one = pd.concat([_residuals(40, 0), _residuals(30, 0, 1, stack="pytorch")])  # one source
    table = band_data.band_table(one)["k.time_s"]
    assert len(table["groups"]) == 2 and table["devices"] == [] and table["architectures"] == []
    two = pd.concat([_residuals(40, 0), _residuals(30, 0, 1, stack="pytorch", source="b")])
    table = band_data.band_table(two)["k.time_s"]
    assert [d["device"] for d in table["devices"]] == ["h200"]
    assert [a["arch"] for a in table["architectures"]] == ["sm_90"]


def _levels():
    """Four stacks: a and b on h100-sxm (sm_90), c on a100-sxm-80gb, d on b200; every level."""
    rows = [_residuals(30, 0, 0, stack="a", device="h100-sxm", source="s1"),
            _residuals(30, 0, 1, stack="b", device="h100-sxm", source="s2") .assign(
                e=lambda f: 3 * f["e"] - 0.2),  # a wide, biased group
            _residuals(30, 0, 2, stack="c", device="a100-sxm-80gb", source="s3"),
            _residuals(30, 0, 3, stack="d", device="b200", source="s4").assign(e=lambda f: f["e"] + 0.3)]
    return {"families": band_data.band_table(pd.concat(rows))}  # fmt: skip


def test_lookup_goes_group_then_device_then_architecture_then_pooled_and_labels_each():
    data = _levels()
    fam = data["families"]["k.time_s"]
    group = bands.residuals("k.time_s", "a", "h100-sxm", data=data)
    assert group.measured and group.label == ""
    dev = bands.residuals("k.time_s", "new", "h100-sxm", data=data)
    assert not dev.measured and "stack new never measured" in dev.label
    assert "stacks measured on h100-sxm (a, b; 2 sources)" in dev.label
    arch = bands.residuals("k.time_s", "a", "h200", data=data)  # h200 is sm_90, like h100-sxm
    assert not arch.measured and "a measured on h100-sxm, not h200" in arch.label
    assert "architecture sm_90" in arch.label
    pooled = bands.residuals("k.time_s", "c", "l40s", data=data)  # sm_89: never measured
    assert not pooled.measured and "pooled over 4 measured" in pooled.label
    assert (pooled.p10, pooled.p90) == (fam["pooled"]["p10"], fam["pooled"]["p90"])
    # the device's band is the h100 pool, never narrower than its widest group (b)
    b = next(g for g in fam["groups"] if g["stack"] == "b")
    assert dev.p90 - dev.p10 >= b["p90"] - b["p10"] - 1e-12
    d = next(x for x in fam["devices"] if x["device"] == "h100-sxm")
    assert dev.p10 <= d["p10"] and dev.p90 >= d["p90"]


def test_a_device_level_band_holds_its_pool_and_ignores_other_devices():
    data = _levels()
    one = bands.residuals("k.time_s", "new", "h100-sxm", data=data)
    moved = json.loads(json.dumps(data))
    for g in moved["families"]["k.time_s"]["groups"]:
        if g["device"] == "b200":
            g["p10"], g["p90"] = -0.9, 3.0  # another device's group
    assert bands.residuals("k.time_s", "new", "h100-sxm", data=moved) == one


def test_a_measured_whole_model_gets_its_own_band_else_none():
    data = _levels()
    data["families"]["model_decode_step.time_s"] = data["families"]["k.time_s"]
    band = band_docs._whole_band(1.0, "model_decode_step", "time_s", "a", "h100-sxm", data=data)
    res = bands.residuals("model_decode_step.time_s", "a", "h100-sxm", data=data)
    assert band == bands.interval(1.0, res) and band.label == ""
    assert band_docs._whole_band(1.0, "model_decode_step", "time_s", "new", "h100-sxm", data=data) is None
    assert band_docs._whole_band(1.0, "model_decode_step", "peak_bytes", "a", "h100-sxm", data=data) is None


def test_the_stack_campaign_is_in_the_committed_bands():
    for family in ("gemm.time_s", "attention.time_s", "elementwise.time_s"):
        assert bands.residuals(family, "pytorch", "h200").measured
    assert bands.residuals("model_decode_step.time_s", "hf-transformers", "h200").measured
    sets = bands.table()["residuals"]["per_set"]
    assert sets["stack campaign fit"] > 0 and sets["stack campaign held_out"] > 0


def test_the_band_lookup_imports_none_of_the_fitting_machinery():
    code = ("import sys, gpuplan.validate.bands.lookup; print(sorted(m for m in sys.modules "
            "if m.startswith('gpuplan.validate')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(["gpuplan.validate", "gpuplan.validate.bands",
                                      "gpuplan.validate.bands.lookup"])


def test_table_form():
    assert format_banded("time_s", 0.577, [0.54, 0.61]) == "577 ms (540–610)"
    assert format_banded("time_s", 0.577, [0.54, 1.2]) == "577 ms (540 ms–1.2 s)"
    assert format_banded("time_s", 0.577, None) == "577 ms"
    assert format_banded("x", 1234.0, [1000.0, 1500.0], lambda v: f"{v:,.0f}") == "1,234 (1,000–1,500)"


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def _has_bands(doc, keys):
    band = doc["error_band"]
    assert isinstance(doc["error_band_label"], str)
    for key in keys:
        lo, hi = band[key]
        assert 0 < lo <= hi


def test_estimate_json_and_table_carry_bands(capsys):
    doc = json.loads(run(capsys, "estimate", "train-step", "--model", "llama3-8b", "--layers", "2",
                         "--json"))  # fmt: skip
    _has_bands(doc, ("time_s", "achieved_flops_per_s", "peak_bytes"))
    assert "stack pytorch never measured" in doc["error_band_label"]
    for stack in ("harness", "pytorch"):  # the harness and the stack campaign measured both
        out = run(capsys, "estimate", "gemm", "--m", "4096", "--n", "4096", "--k", "4096",
                  "--stack", stack, "--gpu", "h200")  # fmt: skip
        line = next(x for x in out.splitlines() if x.startswith("predicted time"))
        assert "(" in line and "–" in line and "error band" not in out  # measured: no label


def test_a_whole_model_measured_as_a_whole_is_not_labelled(capsys):
    doc = json.loads(run(capsys, "estimate", "decode-step", "--model", "llama3-8b", "--layers", "2",
                         "--stack", "hf-transformers", "--gpu", "h200", "--json"))  # fmt: skip
    assert doc["error_band_label"] == ""  # measured as a whole model
    _has_bands(doc, ("time_s",))


def test_train_and_search_json_carry_bands(capsys):
    flags = ["--model", "llama2-7b", "--gpu", "h100-sxm", "--gpus", "16", "--seq", "2048"]
    doc = json.loads(run(capsys, "train", *flags, "--tp", "2", "--dp", "8", "--global-batch", "32",
                         "--tokens", "1e9", "--json"))  # fmt: skip
    _has_bands(doc, ("step_time_s", "tokens_per_s", "mfu", "peak_memory_per_gpu_bytes",
                     "time_to_train_s", "gpu_hours", "energy_kwh"))  # fmt: skip
    doc = json.loads(run(capsys, "search", "train", *flags, "--global-batch", "32", "--top", "2",
                         "--json"))  # fmt: skip
    _has_bands(doc, ("step_time_s", "tokens_per_s"))
    assert doc["error_band"] == doc["fastest"]["error_band"]
    lo, hi = doc["error_band_row_factors"]["step_time_s"]
    t = doc["fastest"]["step_time_s"]
    assert doc["error_band"]["step_time_s"] == pytest.approx([lo * t, hi * t])


def test_serve_json_carries_bands_and_the_table_prints_them(capsys):
    base = ["serve", "--model", "llama2-7b", "--gpu", "a100-sxm-80gb", "--rate", "4",
            "--prompt-tokens", "256", "--output-tokens", "32", "--requests", "100"]  # fmt: skip
    doc = json.loads(run(capsys, *base, "--json"))
    _has_bands(doc, ("ttft_p99_s", "tpot_mean_s", "e2e_p50_s", "output_tokens_per_s"))
    out = run(capsys, *base)
    ttft = next(x for x in out.splitlines() if x.startswith("ttft_s"))
    assert ttft.count("–") == 4


def test_serve_plan_json_carries_bands_per_row(capsys):
    doc = json.loads(run(capsys, "serve", "plan", "--model", "llama3-8b", "--gpu", "h100-sxm",
                         "--rate", "8", "--slo-ttft-s", "0.5", "--slo-tpot-s", "0.05",
                         "--tp", "1", "--max-seqs", "64", "--no-disaggregation",
                         "--requests", "100", "--top", "1", "--json"))  # fmt: skip
    _has_bands(doc, ("ttft_p99_s", "tpot_p99_s", "usd_per_m_output_tokens"))
    assert doc["configs"][0]["error_band"] == doc["error_band"]


def test_the_band_build_refuses_an_out_in_a_missing_folder(tmp_path, capsys):
    out = tmp_path / "nope" / "bands.json"
    assert band_data.main(["--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "does not exist" in err and not out.exists()


def test_a_timing_other_than_the_stacks_own_is_its_own_group(capsys):
    assert bands.stack_key("pytorch") == bands.stack_key("pytorch", "isolated") == "pytorch"
    assert bands.stack_key("pytorch", "device") == "pytorch@device"
    assert bands.residuals("gemm.time_s", "pytorch@device", "h200").measured
    flags = ["estimate", "gemm", "--m", "4096", "--n", "4096", "--k", "4096", "--stack", "pytorch",
             "--gpu", "h200", "--json"]  # fmt: skip
    iso = json.loads(run(capsys, *flags))
    dev = json.loads(run(capsys, *flags, "--timing", "device"))
    assert iso["error_band"]["time_s"] != dev["error_band"]["time_s"]
    assert iso["error_band_label"] == dev["error_band_label"] == ""


def test_a_power_other_than_one_or_minus_one_is_refused_naming_it():
    res = bands.Residuals("f", -0.1, 0.1, True, "")
    with pytest.raises(GpuplanError, match=r"power=2 is invalid: give 1 or -1"):
        bands.interval(1.0, res, power=2)


def test_the_harness_residuals_of_an_uncalibrated_device_are_a_one_line_error():
    from gpuplan.errors import GpuplanError
    from gpuplan.validate.bands.build import harness_residuals

    with pytest.raises(GpuplanError) as err:
        harness_residuals(device="l4")
    assert str(err.value) == "device='l4': no calibration to score its records with"
