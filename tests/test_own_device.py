"""Hardware of one's own: ``--gpu FILE`` (JSON or YAML) and ``--override FIELD=VALUE|Nx`` on every
command, priced on the one cost path, reported as not measured, refused in one line when wrong."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuplan.cli import main
from gpuplan.hwmodels import accelerators
from gpuplan.hwmodels.accelerators import PEAK_COLUMNS, get_accelerator
from gpuplan.hwmodels.architecture import ARCH
from gpuplan.hwmodels.device_schema import ALIASES, fields
from gpuplan.hwmodels.efficiency import efficiency_for
from gpuplan.hwmodels.gemm import gemm_time
from gpuplan.hwmodels.own_device import catalogue_row, own_device

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "my-h200-like.yaml"


@pytest.fixture(autouse=True)
def _own_devices_forgotten():
    """Each test's devices of one's own are gone after it: other tests see the catalogue only."""
    arch, registered = dict(ARCH), dict(accelerators._REGISTERED)
    yield
    ARCH.clear()
    ARCH.update(arch)
    accelerators._REGISTERED.clear()
    accelerators._REGISTERED.update(registered)


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys, *argv: str) -> dict:
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def h200_file(tmp_path: Path, suffix: str, **changes) -> Path:
    """The H200's catalogue row as a device file of one's own (JSON or YAML)."""
    row = catalogue_row(get_accelerator("h200")) | {"key": "row-h200", "architecture": "sm_90"}
    row |= changes
    path = tmp_path / f"row-h200{suffix}"
    if suffix == ".json":
        path.write_text(json.dumps(row))
    else:
        path.write_text("".join(f"{k}: {json.dumps(v)}\n" for k, v in row.items()))
    return path


# -- one cost path ---------------------------------------------------------------------------

PRICED = [
    ("estimate", "decode-step", "--model", "llama3-8b", "--batch", "8", "--context", "2048"),
    ("estimate", "train-step", "--model", "llama3.2-3b", "--seq", "1024"),
    ("estimate", "gemm", "--m", "4096", "--n", "4096", "--k", "4096"),
    ("estimate", "attention", "--seq-q", "2048"),
]
NUMBERS = ("time_s", "peak_bytes", "by_category", "memory_bytes", "items", "error_band")


@pytest.mark.parametrize("argv", PRICED, ids=lambda a: a[1])
@pytest.mark.parametrize("source", ["yaml", "json", "example"])
def test_a_file_equal_to_a_catalogue_row_prices_as_the_catalogue_key(capsys, tmp_path, argv,
                                                                     source):  # fmt: skip
    path = EXAMPLE if source == "example" else h200_file(tmp_path, f".{source}")
    mine = run_json(capsys, *argv, "--gpu", str(path))
    theirs = run_json(capsys, *argv, "--gpu", "h200")
    for key in NUMBERS:
        if key == "error_band":  # bands differ: the file's device was never measured
            continue
        if key in theirs:
            assert mine[key] == theirs[key], key  # bit for bit
    assert "time_s" in mine and mine["device_measured"] is False


def test_a_file_equal_to_a_row_takes_the_same_efficiency_but_says_it_was_not_measured():
    origin = own_device(str(EXAMPLE))
    mine, theirs = efficiency_for(origin.key), efficiency_for("h200")
    assert mine.to_dict() | {"source": ""} == theirs.to_dict() | {"source": ""}
    assert f"not measured on {origin.key}" in mine.source
    assert "not measured" not in theirs.source


def test_faster_hbm_speeds_a_memory_bound_decode_step_and_leaves_a_compute_bound_gemm(capsys):
    decode = ("estimate", "decode-step", "--model", "llama3-8b", "--batch", "1", "--context",
              "4096", "--cuda-graph")  # fmt: skip
    base = run_json(capsys, *decode, "--gpu", "h200")
    fast = run_json(capsys, *decode, "--gpu", "h200", "--override", "hbm_bytes_per_s=1.3x")
    assert fast["time_s"] < base["time_s"]
    assert fast["time_s"] > base["time_s"] / 1.3 * 0.99  # never more than the bandwidth gained
    origin = own_device("h200", ["hbm_bandwidth=1.3x"])
    acc, h200 = get_accelerator(origin.key), get_accelerator("h200")
    assert acc.hbm_bytes_per_s == pytest.approx(1.3 * h200.hbm_bytes_per_s)
    big = (8192, 8192, 8192, "bf16")
    mine, theirs = gemm_time(acc, *big, efficiency_for(acc.key)), gemm_time(h200, *big,
                                                                             efficiency_for("h200"))
    assert theirs.bound == "compute" and mine.memory_s < theirs.memory_s
    assert mine.total_s == theirs.total_s
    gemm = ("estimate", "gemm", "--m", "8192", "--n", "8192", "--k", "8192")
    assert (run_json(capsys, *gemm, "--gpu", "h200", "--override", "hbm_bandwidth=1.3x")["time_s"]
            == run_json(capsys, *gemm, "--gpu", "h200")["time_s"])  # fmt: skip


# -- every command ---------------------------------------------------------------------------

SMALL_TRAIN = ("--model", "llama3-8b", "--gpus", "8", "--global-batch", "16", "--seq", "1024")
SMALL_SERVE = ("--model", "llama3-8b", "--rate", "5", "--prompt-tokens", "256",
               "--output-tokens", "16", "--requests", "20", "--no-timing")  # fmt: skip
COMMANDS = {
    "estimate": ("estimate", "decode-step", "--model", "llama3-8b", "--batch", "4"),
    "train": ("train", *SMALL_TRAIN),
    "search": ("search", "train", *SMALL_TRAIN, "--top", "2", "--no-timing"),
    "serve": ("serve", *SMALL_SERVE),
    "serve plan": ("serve", "plan", "--model", "llama3-8b", "--rate", "1", "--slo-ttft-s", "1",
                   "--slo-tpot-s", "0.2", "--price-per-gpu-hour", "3", "--no-timing"),
    "serve edge": ("serve", "edge", "--model", "llama3-8b"),
    "diagnose train": ("diagnose", "train", *SMALL_TRAIN),
    "diagnose serve": ("diagnose", "serve", *SMALL_SERVE),
    "cluster": ("cluster", "examples/my_cluster.yaml", "--seed", "3", "--no-timing"),
    "report train": ("report", "train", *SMALL_TRAIN, "--out", "{tmp}/r.md"),
    "report serve": ("report", "serve", *SMALL_SERVE, "--out", "{tmp}/r.md"),
    "report cluster": ("report", "cluster", "examples/my_cluster.yaml", "--seed", "3",
                       "--out", "{tmp}/r.md"),
}


@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_takes_a_device_file_and_an_override(capsys, tmp_path, monkeypatch, name):
    monkeypatch.chdir(ROOT)
    argv = [a.replace("{tmp}", str(tmp_path)) for a in COMMANDS[name]]
    code, out, err = run(capsys, *argv, "--gpu", str(EXAMPLE), "--override", "tdp_w=800")
    assert code == 0, err
    first = out.splitlines()[0]
    assert first.startswith("device: my-h200-like (from my-h200-like.yaml, tdp_w=800; not measured")
    if name.startswith("report"):
        assert "not measured" in (tmp_path / "r.md").read_text()
        return
    code, out, err = run(capsys, *argv, "--gpu", "h200", "--override", "hbm_bandwidth=1.3x",
                         "--json")  # fmt: skip
    assert code == 0, err
    doc = json.loads(out)
    assert doc["device_measured"] is False
    assert doc["device_source"] == "catalogue h200 with overrides hbm_bandwidth=1.3x"
    assert "what-if of the measured h200" in doc["device_note"]


def test_stacks_resolves_kernels_on_a_device_file(capsys):
    code, out, err = run(capsys, "stacks", "--gpu", str(EXAMPLE))
    assert code == 0, err
    assert out.startswith("device: my-h200-like") and "not measured" in out.splitlines()[0]


def test_an_unmeasured_device_gets_an_unmeasured_band(capsys):
    argv = ("train", *SMALL_TRAIN)
    mine = run_json(capsys, *argv, "--gpu", "h200", "--override", "hbm_bandwidth=1.3x")
    assert "UNMEASURED" in mine["error_band_label"] and "h200-what-if" in mine["error_band_label"]


def test_an_override_of_an_unmeasured_catalogue_device_is_not_called_measured(capsys):
    doc = run_json(capsys, "estimate", "gemm", "--m", "64", "--n", "64", "--k", "64", "--gpu", "b200",
                   "--override", "tdp_w=1200")
    assert doc["device"] == "b200-what-if" and doc["device_measured"] is False
    assert "what-if of the catalogue b200" in doc["device_note"]
    assert "measured b200" not in doc["device_note"]


def test_a_catalogue_key_alone_registers_nothing_and_adds_no_key(capsys):
    doc = run_json(capsys, "estimate", "gemm", "--m", "64", "--n", "64", "--k", "64")
    assert "device_measured" not in doc and not accelerators._REGISTERED


# -- the schema ------------------------------------------------------------------------------


def test_the_schema_is_the_accelerator_row_and_takes_new_columns(monkeypatch, tmp_path, capsys):
    names = set(fields())
    assert set(PEAK_COLUMNS.values()) <= names
    assert {"hbm_bytes", "hbm_bytes_per_s", "l2_bytes", "tdp_w", "scaleup_bytes_per_s",
            "scaleout_bytes_per_s", "pcie_bytes_per_s", "n_sms", "base", "architecture"} <= names
    assert set(ALIASES.values()) <= names
    # a dtype added to the catalogue (fp4 on another branch) is a field of every file at once
    monkeypatch.setattr(accelerators, "DTYPES", (*accelerators.DTYPES, "fp4"))
    monkeypatch.setitem(PEAK_COLUMNS, "fp4", "fp4_flops_per_s")
    assert "fp4_flops_per_s" in fields()
    path = tmp_path / "fp4.yaml"
    path.write_text("base: h200\nfp4_flops_per_s: 4.5e15\n")
    assert get_accelerator(own_device(str(path)).key).peak("fp4") == 4.5e15


def test_docs_list_every_field_and_the_example_reads():
    text = (ROOT / "docs" / "hardware.md").read_text()
    for name in fields():
        if name not in PEAK_COLUMNS.values():  # the peak columns are one row pattern there
            assert f"`{name}`" in text, name
    for alias in ALIASES:
        assert f"`{alias}`" in text, alias
    assert own_device(str(EXAMPLE)).key == "my-h200-like"


def test_base_fills_the_gaps_and_yaml_reads_exponents_without_a_sign(tmp_path):
    path = tmp_path / "Big Chip.yml"
    path.write_text("base: mi300x\nhbm_bytes_per_s: 6.4e12\nbf16_flops_per_s: 15e14\n")
    acc = get_accelerator(own_device(str(path)).key)
    mi = get_accelerator("mi300x")
    assert acc.key == "big-chip" and acc.hbm_bytes_per_s == 6.4e12 and acc.peak("bf16") == 1.5e15
    assert acc.hbm_bytes == mi.hbm_bytes and acc.vendor == mi.vendor
    assert ARCH[acc.key] == ARCH["mi300x"]


# -- one-line errors -------------------------------------------------------------------------

BAD_FILES = [
    ("unknown.yaml", "base: h200\nhbm_bw: 5e12\n", ["unknown.yaml", "'hbm_bw' is unknown",
                                                     "valid fields are", "hbm_bytes_per_s"]),
    ("negative.yaml", "base: h200\nbf16_flops_per_s: -1\n",
     ["negative.yaml", "bf16_flops_per_s=-1", "greater than zero"]),
    ("zero.json", '{"base": "h200", "hbm_bytes_per_s": 0}',
     ["zero.json", "hbm_bytes_per_s=0", "greater than zero"]),
    ("text.yaml", "base: h200\ntdp_w: lots\n", ["text.yaml", "tdp_w='lots'", "a number"]),
    ("bool.yaml", "base: h200\ntdp_w: true\n", ["bool.yaml", "tdp_w=True", "a number"]),
    ("half.yaml", "base: h200\nn_sms: 1.5\n", ["half.yaml", "n_sms=1.5", "whole number"]),
    ("form.yaml", "base: h200\nform: desk\n", ["form.yaml", "form='desk'", "datacenter, edge"]),
    ("arch.yaml", "base: h200\narchitecture: sm_99\n", ["arch.yaml", "sm_99", "sm_90"]),
    ("broken.yaml", "base: h200\ntdp_w: [1,\n", ["broken.yaml", "not valid YAML", "line"]),
    ("broken.json", '{"base": "h200",', ["broken.json", "not valid JSON", "line 1"]),
    ("list.yaml", "- h200\n", ["list.yaml", "not a mapping of fields"]),
    ("empty.json", "", ["empty.json", "not valid JSON"]),
    ("nobase.yaml", "bf16_flops_per_s: 1e15\n", ["nobase.yaml", "hbm_bytes is missing"]),
    ("norate.yaml", "hbm_bytes: 8e10\nhbm_bytes_per_s: 3e12\n",
     ["norate.yaml", "no peak rate", "bf16_flops_per_s"]),
    ("badbase.yaml", "base: h201\n", ["unknown accelerator 'h201'", "h200"]),
    ("taken.yaml", "key: h200\nbase: h200\n", ["taken.yaml", "key='h200'", "catalogue"]),
    ("badkey.yaml", "key: My Chip\nbase: h200\n", ["badkey.yaml", "key='My Chip'", "lower-case"]),
    ("numkey.yaml", "base: h200\n1: 5\n", ["numkey.yaml", "field 1 is not a name"]),
]


@pytest.mark.parametrize(("name", "text", "words"), BAD_FILES, ids=[b[0] for b in BAD_FILES])
def test_a_bad_device_file_is_one_line_naming_the_file_field_and_value(capsys, tmp_path, name,
                                                                       text, words):  # fmt: skip
    path = tmp_path / name
    path.write_text(text)
    code, out, err = run(capsys, "estimate", "gemm", "--gpu", str(path))
    assert code == 2 and not out
    assert len(err.strip().splitlines()) == 1 and err.startswith("gpuplan: error: "), err
    assert "Traceback" not in err
    for word in words:
        assert word in err, (word, err)


def test_a_missing_device_file_and_a_folder_are_one_line(capsys, tmp_path):
    for path, what in ((tmp_path / "none.yaml", "does not exist"),
                       (tmp_path / "dir.json", "is a folder")):  # fmt: skip
        if what == "is a folder":
            path.mkdir()
        code, _, err = run(capsys, "serve", "edge", "--model", "llama3-8b", "--gpu", str(path))
        assert code == 2 and what in err and str(path) in err and len(err.splitlines()) == 1


def test_a_device_file_not_in_utf8_is_one_line(capsys, tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes("base: h200\nname: Gerät\n".encode("latin-1"))
    code, out, err = run(capsys, "estimate", "gemm", "--gpu", str(path))
    assert code == 2 and not out and len(err.strip().splitlines()) == 1, err
    assert "latin1.yaml" in err and "not UTF-8" in err


BAD_OVERRIDES = [
    (["--gpu", "h200", "--override", "hbm_bytes_per_s"], ["FIELD=VALUE"]),
    (["--gpu", "h200", "--override", "hbm_bw=1.3x"], ["'hbm_bw' is unknown", "hbm_bytes_per_s"]),
    (["--gpu", "h200", "--override", "tdp_w=much"], ["tdp_w=much", "not a number"]),
    (["--gpu", "h200", "--override", "tdp_w=-5"], ["tdp_w=-5.0", "greater than zero"]),
    (["--gpu", "h200", "--override", "hbm_bandwidth=0x"], ["hbm_bytes_per_s=0.0", "greater than zero"]),
    (["--gpu", "h200", "--override", "vendor=AMD"], ["vendor", "only numeric fields"]),
    (["--gpu", "h200", "--override", "base=b200"], ["base=b200", "only numeric fields"]),
    (["--gpu", "h200", "--override", "n_sms=1.5x"], ["n_sms=", "whole number"]),
    (["--gpu", "l4", "--override", "scaleup_bytes_per_s=2x"], ["no scaleup_bytes_per_s to scale"]),
    (["--override", "tdp_w=800"], ["needs --gpu"]),
]


@pytest.mark.parametrize(("argv", "words"), BAD_OVERRIDES, ids=lambda a: " ".join(a)[:40])
def test_a_bad_override_is_one_line(capsys, argv, words):
    code, out, err = run(capsys, "estimate", "gemm", *argv)
    assert code == 2 and not out and len(err.strip().splitlines()) == 1, err
    for word in words:
        assert word in err, (word, err)


@pytest.mark.parametrize("dask", [["--workers", "2"], ["--scheduler", "tcp://host:8786"]])
def test_a_device_of_ones_own_refuses_dask_workers_in_one_line(capsys, dask):
    code, _, err = run(capsys, "search", "train", *SMALL_TRAIN, "--gpu", "h200", "--override",
                       "tdp_w=800", *dask)  # fmt: skip
    assert code == 2 and "--workers/--scheduler" in err and len(err.splitlines()) == 1
