"""The accelerator catalogue: what each device's datasheet says it can do, with the source.

One frozen ``Accelerator`` per catalogue key, loaded once from ``data/accelerators.csv``. These are
datasheet facts only; how much of a peak real kernels reach is a fitted efficiency, kept elsewhere
(``gpuplan.hwmodels.efficiency``).

Conventions of the data (each row's ``source`` and ``notes`` columns say where a figure comes from
and what is uncertain about it):

- SI units: FLOP/s, bytes, bytes/s, Hz, W. A blank cell is unknown (``None`` here), never 0.
- Peak rates are dense (no 2:4 sparsity). NVIDIA and AMD headline tensor figures are sparse; the
  catalogue holds half of them. ``int8`` is in operations/s. A dtype the chip has no path for is
  absent from ``peak_flops_per_s`` (the A100 has no fp8; only Blackwell and CDNA4 have fp6 and
  fp4, the ``fp6_flops_per_s`` and ``fp4_flops_per_s`` columns): a blank cell, as for any
  unknown figure, because 0 would be a rate. Where a vendor lists FP6 with FP8 ("FP8/FP6",
  NVIDIA) the fp6 rate is the fp8 one; where with FP4 (AMD CDNA4) the fp4 one.
- Link bandwidths are per device and one direction: NVLink 4 is 900 GB/s "bidirectional", so
  450e9 here; a 400 Gb/s NDR NIC is 50e9; PCIe Gen5 x16 is 64e9.
- Capacities are the vendor's printed figure read as decimal (H200: 141e9). What the runtime sees
  can differ (an H200 shows 143771 MiB in nvidia-smi); the notes say so where known.
- ``n_sms`` counts the units a GEMM's tiles are spread over: SMs (NVIDIA), CUs (AMD), matrix
  engines (Gaudi), GPU cores (Apple).

References: NVIDIA H100 Tensor Core GPU Architecture whitepaper; the NVIDIA, AMD, Intel, Google and
Apple datasheets and documentation named per row in the CSV.
"""

from __future__ import annotations

import csv
import functools
import io
from dataclasses import dataclass, field
from importlib import resources
from typing import TYPE_CHECKING

from gpuplan.errors import (
    GpuplanError,
    check_choice,
    check_key,
    check_kind,
    check_positive,
    unknown_key,
)

if TYPE_CHECKING:
    import pandas

# fp6 and fp4: the tensor-core rate of 6- and 4-bit floating-point inputs (FP6 E2M3/E3M2, FP4
# E2M1) with their block scales, NVFP4 and the OCP MX formats alike (``hwmodels.formats``).
DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8", "fp6", "fp4", "int8")
FORMS = ("datacenter", "edge")

# The roofline ridge uses the first of these a device supports: bf16 is what LLMs run in.
RIDGE_DTYPES = ("bf16", "fp16", "tf32", "fp32")

# CSV column of each dtype's dense peak; int8 counts integer operations, not FLOPs.
PEAK_COLUMNS = {dtype: f"{dtype}_flops_per_s" for dtype in DTYPES} | {"int8": "int8_ops_per_s"}

_OPTIONAL_FLOAT_COLUMNS = (
    "l2_bytes",
    "boost_clock_hz",
    "tdp_w",
    "scaleup_bytes_per_s",
    "scaleout_bytes_per_s",
    "pcie_bytes_per_s",
)

# Device names as torch reports them (torch.cuda.get_device_name), lower-cased -> catalogue key.
DEVICE_NAME_ALIASES = {
    "nvidia h200": "h200",
    "nvidia h100 80gb hbm3": "h100-sxm",
    "nvidia h100 pcie": "h100-pcie",
    "nvidia a100-sxm4-80gb": "a100-sxm-80gb",
    "nvidia a100-sxm4-40gb": "a100-sxm-40gb",
    "nvidia b200": "b200",
    "nvidia gb200": "gb200",
    "nvidia b300 sxm6 ac": "b300",
    "nvidia b300": "b300",
    "nvidia gb300": "gb300",
    "nvidia l40s": "l40s",
    "nvidia l4": "l4",
    "amd instinct mi300x": "mi300x",
    "amd instinct mi300x vf": "mi300x",
    "amd instinct mi325x": "mi325x",
    "amd instinct mi355x": "mi355x",
    "apple m2 ultra": "m2-ultra",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Accelerator:
    """One device as its datasheet describes it. Rates are dense peaks; links are one direction."""

    key: str  # catalogue key, e.g. "h200"
    name: str  # marketing name
    vendor: str
    form: str  # "datacenter" | "edge"
    # Dense peak per dtype the chip supports, FLOP/s (int8: op/s). Read-only by convention: the
    # catalogue shares one instance per key. Left out of the hash (a dict is not hashable).
    peak_flops_per_s: dict[str, float] = field(hash=False)
    hbm_bytes: float  # device memory capacity (HBM, or GDDR/LPDDR where the notes say so)
    hbm_bytes_per_s: float
    l2_bytes: float | None
    n_sms: int | None  # SMs / CUs / matrix engines that GEMM tiles are spread over
    boost_clock_hz: float | None
    tdp_w: float | None
    scaleup_bytes_per_s: float | None  # per device, one direction (NVLink, Infinity Fabric, ICI)
    scaleout_bytes_per_s: float | None  # NIC per device, one direction
    pcie_bytes_per_s: float | None  # one direction
    source: str
    notes: str = ""

    def __post_init__(self) -> None:
        for column in ("key", "name", "vendor", "source", "notes"):
            check_kind(f"accelerator.{column}", getattr(self, column), str)
        check_choice(f"{self.key}.form", self.form, FORMS)
        check_kind(f"{self.key}.peak_flops_per_s", self.peak_flops_per_s, dict)
        if not self.peak_flops_per_s:
            raise GpuplanError(f"{self.key}: peak_flops_per_s is empty: give at least one dtype")
        for dtype, rate in self.peak_flops_per_s.items():
            check_choice(f"{self.key}.peak_flops_per_s dtype", dtype, DTYPES)
            check_positive(f"{self.key}.peak_flops_per_s[{dtype!r}]", rate)
        check_positive(f"{self.key}.hbm_bytes", self.hbm_bytes)
        check_positive(f"{self.key}.hbm_bytes_per_s", self.hbm_bytes_per_s)
        for column in (*_OPTIONAL_FLOAT_COLUMNS, "n_sms"):
            value = getattr(self, column)
            if value is not None:
                check_positive(f"{self.key}.{column}", value)
        if not self.source.strip():
            raise GpuplanError(f"{self.key}: source is empty: every figure needs its datasheet")

    def supports(self, dtype: str) -> bool:
        """Whether the device has a published dense peak for ``dtype``."""
        return dtype in self.peak_flops_per_s

    def peak(self, dtype: str) -> float:
        """Dense peak rate in ``dtype``, FLOP/s (int8: op/s)."""
        try:
            return self.peak_flops_per_s[dtype]
        except KeyError:
            supported = ", ".join(d for d in DTYPES if d in self.peak_flops_per_s)
            raise GpuplanError(
                f"accelerator {self.key!r} has no peak rate for dtype={dtype!r}: "
                f"it supports {supported}"
            ) from None

    @property
    def ridge_dtype(self) -> str:
        """The dtype the ridge point is taken in: bf16, else the next of ``RIDGE_DTYPES``."""
        for dtype in RIDGE_DTYPES:
            if self.supports(dtype):
                return dtype
        return max(self.peak_flops_per_s, key=self.peak_flops_per_s.__getitem__)

    @property
    def ridge_flops_per_byte(self) -> float:
        """Arithmetic intensity where the roofline bends: peak over memory bandwidth."""
        # Williams, Waterman, Patterson, "Roofline", CACM 52(4), 2009: ridge = peak / bandwidth.
        return self.peak(self.ridge_dtype) / self.hbm_bytes_per_s


def get_accelerator(key: str) -> Accelerator:
    """The catalogue entry for ``key``, a catalogue key, a torch device name or a marketing name.

    Case does not matter: "H200", "NVIDIA H200" and "h200" all give the H200.
    """
    check_key("accelerator", key)
    catalogue = _catalogue()
    wanted = key.strip().lower()
    wanted = DEVICE_NAME_ALIASES.get(wanted, _names().get(wanted, wanted))
    try:
        return catalogue[wanted] if wanted in catalogue else _REGISTERED[wanted]
    except KeyError:
        raise unknown_key("accelerator", key, [*catalogue, *_REGISTERED]) from None


# Devices described by the user (``hwmodels.own_device``: a ``--gpu FILE`` or an ``--override``),
# added for this process beside the catalogue; never measured, never a catalogue key.
_REGISTERED: dict[str, Accelerator] = {}


def register_accelerator(acc: Accelerator) -> Accelerator:
    """Make ``acc`` reachable by ``get_accelerator(acc.key)`` in this process (a device of one's
    own). A catalogue key or marketing name is refused: a user's device never stands in for a
    measured one; registering the same key again replaces the earlier device."""
    taken = acc.key in _catalogue() or acc.key in _names() or acc.key in DEVICE_NAME_ALIASES
    if taken:
        raise GpuplanError(f"key={acc.key!r} is invalid for a device of one's own: it names a "
                           "catalogue accelerator; choose another key (the base device goes "
                           "in 'base')")  # fmt: skip
    _REGISTERED[acc.key] = acc
    return acc


def is_catalogued(key: str) -> bool:
    """Whether ``key`` is a catalogue key (not a device registered by the user)."""
    return key in _catalogue()


def list_accelerators() -> list[Accelerator]:
    """Every accelerator, in catalogue (CSV) order."""
    return list(_catalogue().values())


def accelerators_frame() -> pandas.DataFrame:
    """One row per device; columns keep their units in their names, unknown figures are NaN."""
    import pandas

    rows = [_frame_row(acc) for acc in list_accelerators()]
    frame = pandas.DataFrame(rows).set_index("key", drop=False)
    return frame.astype({"n_sms": "Int64"})  # a count: nullable integer, not float


def _frame_row(acc: Accelerator) -> dict:
    peaks = {column: acc.peak_flops_per_s.get(dtype) for dtype, column in PEAK_COLUMNS.items()}
    row = {"key": acc.key, "name": acc.name, "vendor": acc.vendor, "form": acc.form, **peaks}
    for column in ("hbm_bytes", "hbm_bytes_per_s", "n_sms", *_OPTIONAL_FLOAT_COLUMNS):
        row[column] = getattr(acc, column)
    row["ridge_dtype"] = acc.ridge_dtype
    row["ridge_flops_per_byte"] = acc.ridge_flops_per_byte
    return row | {"source": acc.source, "notes": acc.notes}


@functools.cache
def _catalogue() -> dict[str, Accelerator]:
    """Key -> Accelerator, read once from the package's CSV."""
    catalogue: dict[str, Accelerator] = {}
    for line, row in enumerate(_read_rows(), start=2):  # line 1 is the header
        acc = _row_to_accelerator(row, line)
        if acc.key in catalogue:
            raise GpuplanError(f"accelerators.csv line {line}: key {acc.key!r} appears twice")
        catalogue[acc.key] = acc
    return catalogue


@functools.cache
def _names() -> dict[str, str]:
    """Lower-cased marketing name -> key."""
    return {acc.name.lower(): acc.key for acc in _catalogue().values()}


def _read_rows() -> list[dict[str, str]]:
    text = resources.files("gpuplan.hwmodels").joinpath("data/accelerators.csv").read_text("utf-8")
    return list(csv.DictReader(io.StringIO(text)))


def _row_to_accelerator(row: dict[str, str], line: int) -> Accelerator:
    peaks = {
        dtype: rate
        for dtype, column in PEAK_COLUMNS.items()
        if (rate := _optional_float(row, column, line)) is not None
    }
    n_sms = _optional_float(row, "n_sms", line)
    return Accelerator(
        key=row["key"],
        name=row["name"],
        vendor=row["vendor"],
        form=row["form"],
        peak_flops_per_s=peaks,
        hbm_bytes=_required_float(row, "hbm_bytes", line),
        hbm_bytes_per_s=_required_float(row, "hbm_bytes_per_s", line),
        n_sms=None if n_sms is None else int(n_sms),
        source=row["source"],
        notes=row["notes"],
        **{column: _optional_float(row, column, line) for column in _OPTIONAL_FLOAT_COLUMNS},
    )


def _optional_float(row: dict[str, str], column: str, line: int) -> float | None:
    """The cell as a float; a blank cell is unknown (None)."""
    cell = row[column].strip()
    if not cell:
        return None
    try:
        return float(cell)
    except ValueError:
        raise GpuplanError(
            f"accelerators.csv line {line}: {column}={cell!r} is not a number"
        ) from None


def _required_float(row: dict[str, str], column: str, line: int) -> float:
    value = _optional_float(row, column, line)
    if value is None:
        raise GpuplanError(f"accelerators.csv line {line}: {column} is blank but required")
    return value
