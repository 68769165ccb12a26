"""The accelerator catalogue: every key loads, figures are sane, errors name what is valid."""

import csv
import dataclasses
import math
from importlib import resources

import pytest

from gpuplan.errors import GpuplanError
from gpuplan.hwmodels.accelerators import (
    DTYPES,
    Accelerator,
    accelerators_frame,
    get_accelerator,
    list_accelerators,
)

KEYS = (
    "h200",
    "h100-sxm",
    "h100-sxm-hbm2e",
    "h100-pcie",
    "a100-sxm-80gb",
    "a100-sxm-40gb",
    "a100-pcie-80gb",
    "b200",
    "gb200",
    "b300",
    "gb300",
    "l40s",
    "l4",
    "mi300x",
    "mi325x",
    "mi355x",
    "gaudi3",
    "tpu-v5p",
    "tpu-v6e",
    "tpu-v7",
    "jetson-agx-orin-64gb",
    "m2-ultra",
)

NUMERIC_FIELDS = (
    "hbm_bytes",
    "hbm_bytes_per_s",
    "l2_bytes",
    "n_sms",
    "boost_clock_hz",
    "tdp_w",
    "scaleup_bytes_per_s",
    "scaleout_bytes_per_s",
    "pcie_bytes_per_s",
)


def _csv_rows() -> list[dict[str, str]]:
    path = resources.files("gpuplan.hwmodels").joinpath("data/accelerators.csv")
    return list(csv.DictReader(path.read_text("utf-8").splitlines()))


@pytest.mark.parametrize("key", KEYS)
def test_every_catalogue_key_loads(key):
    assert get_accelerator(key).key == key


def test_the_catalogue_holds_exactly_the_documented_keys_in_order():
    assert tuple(acc.key for acc in list_accelerators()) == KEYS


@pytest.mark.parametrize("acc", list_accelerators(), ids=lambda acc: acc.key)
def test_every_numeric_figure_is_positive_or_unknown(acc):
    for name in NUMERIC_FIELDS:
        value = getattr(acc, name)
        assert value is None or (value > 0 and math.isfinite(value)), (name, value)
    assert acc.peak_flops_per_s
    assert all(rate > 0 for rate in acc.peak_flops_per_s.values())
    assert set(acc.peak_flops_per_s) <= set(DTYPES)


def test_the_csv_has_a_source_for_every_row():
    rows = _csv_rows()
    assert len(rows) == len(KEYS)
    assert all(row["source"].strip() for row in rows)


def test_the_csv_never_writes_zero_for_unknown():
    for row in _csv_rows():
        for column, cell in row.items():
            if column not in ("key", "name", "vendor", "form", "source", "notes") and cell:
                assert float(cell) != 0, (row["key"], column)


def test_h200_and_h100_sxm_share_compute_peaks_but_not_memory():
    h200, h100 = get_accelerator("h200"), get_accelerator("h100-sxm")
    assert h200.peak_flops_per_s == h100.peak_flops_per_s
    assert h200.n_sms == h100.n_sms == 132
    assert h200.hbm_bytes > h100.hbm_bytes
    assert h200.hbm_bytes_per_s > h100.hbm_bytes_per_s


def test_h200_bf16_ridge_point_is_about_206_flop_per_byte():
    # 989.4e12 FLOP/s dense bf16 / 4.8e12 B/s = 206.1 FLOP/byte.
    assert get_accelerator("h200").ridge_flops_per_byte == pytest.approx(206.1, abs=0.1)


def test_h100_sxm_datasheet_anchors():
    h100 = get_accelerator("h100-sxm")
    assert h100.peak("bf16") == 989.4e12
    assert h100.peak("fp8") == 1978.9e12
    assert h100.scaleup_bytes_per_s == 450e9  # NVLink 4: 900 GB/s bidirectional
    assert h100.scaleout_bytes_per_s == 50e9  # 400 Gb/s NDR
    assert h100.l2_bytes == 50 * 2**20


def test_ridge_falls_back_to_the_next_dtype_when_there_is_no_bf16():
    m2 = get_accelerator("m2-ultra")
    assert not m2.supports("bf16")
    assert m2.ridge_dtype == "fp16"
    assert m2.ridge_flops_per_byte == pytest.approx(27.2e12 / 800e9)


def test_a100_has_no_fp8_path_and_the_error_lists_what_it_supports():
    a100 = get_accelerator("a100-sxm-80gb")
    assert not a100.supports("fp8")
    with pytest.raises(GpuplanError) as err:
        a100.peak("fp8")
    message = str(err.value)
    assert "a100-sxm-80gb" in message and "'fp8'" in message
    assert "fp32, tf32, bf16, fp16, int8" in message


def test_unknown_dtype_error_names_device_dtype_and_supported_dtypes():
    with pytest.raises(GpuplanError, match=r"'tpu-v5p'.*'fp64'.*bf16, fp8, int8"):
        get_accelerator("tpu-v5p").peak("fp64")


def test_unknown_key_error_lists_the_nearest_keys():
    with pytest.raises(GpuplanError) as err:
        get_accelerator("h300")
    message = str(err.value)
    assert "unknown accelerator 'h300'" in message
    assert "did you mean" in message and "h200" in message.split("did you mean")[1]


def test_unknown_key_error_is_a_value_error_for_callers_that_catch_those():
    with pytest.raises(ValueError):
        get_accelerator("no-such-gpu")


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("NVIDIA H200", "h200"),
        ("NVIDIA H100 80GB HBM3", "h100-sxm"),
        ("NVIDIA H100 PCIe", "h100-pcie"),
        ("NVIDIA A100-SXM4-80GB", "a100-sxm-80gb"),
        ("NVIDIA L4", "l4"),
        ("AMD Instinct MI300X", "mi300x"),
        ("H200", "h200"),
        ("  Jetson-AGX-Orin-64GB ", "jetson-agx-orin-64gb"),
        ("NVIDIA L40S", "l40s"),
    ],
)
def test_keys_are_case_insensitive_and_torch_device_names_resolve(name, key):
    assert get_accelerator(name).key == key


def test_marketing_names_resolve_too():
    for acc in list_accelerators():
        assert get_accelerator(acc.name.upper()) is acc


def test_the_catalogue_is_loaded_once_and_shared():
    assert get_accelerator("h200") is get_accelerator("NVIDIA H200")


def test_accelerators_are_frozen_and_hashable():
    h200 = get_accelerator("h200")
    with pytest.raises(dataclasses.FrozenInstanceError):
        h200.hbm_bytes = 1.0
    assert len({h200, get_accelerator("h100-sxm")}) == 2


def test_a_variant_made_with_replace_is_validated():
    h200 = get_accelerator("h200")
    faster = dataclasses.replace(h200, hbm_bytes_per_s=2 * h200.hbm_bytes_per_s)
    assert faster.ridge_flops_per_byte == pytest.approx(h200.ridge_flops_per_byte / 2)
    with pytest.raises(GpuplanError, match="hbm_bytes_per_s"):
        dataclasses.replace(h200, hbm_bytes_per_s=0.0)
    with pytest.raises(GpuplanError, match="fp64"):
        dataclasses.replace(h200, peak_flops_per_s={"fp64": 1e12})
    with pytest.raises(GpuplanError, match="form"):
        dataclasses.replace(h200, form="laptop")


def test_an_accelerator_needs_a_source():
    h200 = get_accelerator("h200")
    with pytest.raises(GpuplanError, match="source"):
        dataclasses.replace(h200, source=" ")


def test_the_frame_has_one_row_per_device_and_units_in_column_names():
    frame = accelerators_frame()
    assert list(frame["key"]) == list(KEYS)
    for column in ("bf16_flops_per_s", "int8_ops_per_s", "hbm_bytes_per_s", "tdp_w"):
        assert column in frame.columns
    assert frame.loc["h200", "ridge_flops_per_byte"] == pytest.approx(206.1, abs=0.1)
    assert math.isnan(frame.loc["a100-sxm-80gb", "fp8_flops_per_s"])


def test_edge_devices_are_marked_edge():
    forms = {acc.key: acc.form for acc in list_accelerators()}
    assert {key for key, form in forms.items() if form == "edge"} == {
        "jetson-agx-orin-64gb",
        "m2-ultra",
    }


def test_accelerator_is_the_public_type():
    assert all(isinstance(acc, Accelerator) for acc in list_accelerators())
