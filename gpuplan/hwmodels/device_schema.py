"""The fields of a device of one's own: one per column of ``data/accelerators.csv``, derived from
the ``Accelerator`` dataclass, with each field's kind, unit and valid range.

A device file (``--gpu FILE``) and an ``--override FIELD=VALUE`` name these fields. They are read
off ``Accelerator`` and ``PEAK_COLUMNS``, not listed here, so a column added to the catalogue (a
new dtype's ``<dtype>_flops_per_s``) is a field of every device file at once. Besides the row's
fields a file may give ``base`` (a catalogue key whose values fill every field the file leaves
out) and ``architecture`` (the kernel architecture, ``hwmodels.architecture``: which kernels run
and which published kernel shares apply).

Units come from the names (the house convention: SI, the unit in the name): ``_flops_per_s``
FLOP/s, ``_ops_per_s`` op/s, ``_bytes_per_s`` bytes/s, ``_bytes`` bytes, ``_hz`` Hz, ``_w`` W.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from gpuplan import limits
from gpuplan.errors import GpuplanError
from gpuplan.hwmodels.accelerators import FORMS, PEAK_COLUMNS, Accelerator
from gpuplan.hwmodels.architecture import ARCH

EXTRA_FIELDS = ("base", "architecture")
NO_ARCHITECTURE = "none"  # an architecture that runs neither CUDA nor ROCm kernels
# The largest figure a device file may give (FLOP/s, bytes, bytes/s, Hz, W): far beyond any
# device (a B200's dense bf16 peak is 2.25e15 FLOP/s), so a typo of many zeros is caught.
MAX_FIGURE = 1e21

# Names the issue and datasheets use, each for one field (``--override hbm_bandwidth=1.3x``).
ALIASES = {
    "hbm_bandwidth": "hbm_bytes_per_s",
    "memory_bandwidth": "hbm_bytes_per_s",
    "hbm_capacity": "hbm_bytes",
    "memory_bytes": "hbm_bytes",
    "l2": "l2_bytes",
    "sms": "n_sms",
    "clock_hz": "boost_clock_hz",
    "tdp": "tdp_w",
    "nvlink_bandwidth": "scaleup_bytes_per_s",
    "scaleup_bandwidth": "scaleup_bytes_per_s",
    "nic_bandwidth": "scaleout_bytes_per_s",
    "scaleout_bandwidth": "scaleout_bytes_per_s",
    "pcie_bandwidth": "pcie_bytes_per_s",
}

_UNITS = (("_flops_per_s", "FLOP/s"), ("_ops_per_s", "op/s"), ("_bytes_per_s", "bytes/s"),
          ("_bytes", "bytes"), ("_hz", "Hz"), ("_w", "W"))  # fmt: skip


@dataclass(frozen=True, slots=True)
class Field:
    """One field of a device file: its name, kind (``text``, ``number``, ``count``), unit and
    whether a file without ``base`` must give it."""

    name: str
    kind: str
    unit: str
    required: bool
    help: str

    @property
    def valid(self) -> str:
        """What a valid value is, as an error message says it."""
        if self.name == "form":
            return f"one of {', '.join(FORMS)}"
        if self.name == "architecture":
            return f"one of {', '.join(architectures())}"
        if self.kind == "count":
            return f"a whole number from 1 to {limits.MAX_DIM:,}"
        if self.kind == "number":
            return f"a number greater than zero and at most {MAX_FIGURE:g}"
        return "a non-empty text" if self.name != "notes" else "a text"


def architectures() -> list[str]:
    """The kernel architectures a device may name (``hwmodels.architecture``), and ``none``."""
    return [*sorted(set(ARCH.values())), NO_ARCHITECTURE]


def fields() -> dict[str, Field]:
    """Every field of a device file, in the catalogue's column order, then ``base`` and
    ``architecture``; read off ``Accelerator`` so a new column is a new field."""
    out: dict[str, Field] = {}
    for f in dataclasses.fields(Accelerator):
        if f.name == "peak_flops_per_s":  # one column per dtype, as in the CSV
            for dtype, column in PEAK_COLUMNS.items():
                out[column] = Field(column, "number", _unit(column), False,
                                    f"dense peak rate in {dtype} (no 2:4 sparsity)")  # fmt: skip
            continue
        kind = _kind(str(f.type))
        required = "None" not in str(f.type) and f.default is dataclasses.MISSING
        unit = "count" if f.name.startswith("n_") else _unit(f.name)
        out[f.name] = Field(f.name, kind, unit, required and kind != "text", _help(f.name))
    out["base"] = Field("base", "text", "", False,
                        "catalogue key whose values fill every field left out")  # fmt: skip
    out["architecture"] = Field("architecture", "text", "", False,
                                "kernel architecture (default: the base's, else none)")  # fmt: skip
    return out


def resolve_name(name: str) -> str:
    """The field ``name`` stands for (an alias or the field itself), or a one-line error that
    lists the valid fields and aliases."""
    known = fields()
    name = ALIASES.get(name, name)
    if name not in known:
        raise GpuplanError(f"field {name!r} is unknown: valid fields are {', '.join(known)} "
                           f"(aliases: {', '.join(ALIASES)})")  # fmt: skip
    return name


def check_value(name: str, value: object, where: str) -> object:
    """``value`` of field ``name`` checked (a YAML or JSON value): the value to use, or a
    one-line error naming ``where``, the field, the value and what is valid."""
    field = fields()[name]
    bad = GpuplanError(f"{where}: {name}={value!r} is invalid: it must be {field.valid}")
    if field.kind == "text":
        if not isinstance(value, str) or (name != "notes" and not value.strip()):
            raise bad
        choices = _choices(name)
        if choices is not None and value not in choices:
            raise bad
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise bad
    if not math.isfinite(value) or value <= 0 or value > MAX_FIGURE:
        raise bad
    if field.kind == "count":
        if not float(value).is_integer() or value > limits.MAX_DIM:
            raise bad
        return int(value)
    return float(value)


def schema_table() -> str:
    """The fields as a Markdown table (docs/hardware.md prints it)."""
    lines = ["| field | kind | unit | required without `base` | valid values | meaning |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    for f in fields().values():
        lines.append(f"| `{f.name}` | {f.kind} | {f.unit or '-'} | {'yes' if f.required else 'no'}"
                     f" | {f.valid} | {f.help} |")  # fmt: skip
    return "\n".join(lines)


def _choices(name: str) -> list[str] | None:
    """The values a text field may take; None where any text will do."""
    return {"form": list(FORMS), "architecture": architectures()}.get(name)


def _kind(annotation: str) -> str:
    if annotation.startswith("str"):
        return "text"
    return "count" if annotation.startswith("int") else "number"


def _unit(name: str) -> str:
    return next((unit for suffix, unit in _UNITS if name.endswith(suffix)), "")


_HELP = {
    "key": "lower-case name the commands print (default: the file's name)",
    "name": "marketing name (default: the key)",
    "vendor": "maker (default: the base's, else 'unspecified')",
    "form": "datacenter or edge (default: the base's, else datacenter)",
    "hbm_bytes": "device memory capacity",
    "hbm_bytes_per_s": "device memory bandwidth",
    "l2_bytes": "last-level cache on the chip",
    "n_sms": "SMs / CUs / matrix engines that GEMM tiles are spread over",
    "boost_clock_hz": "maximum clock",
    "tdp_w": "board power limit",
    "scaleup_bytes_per_s": "scale-up link (NVLink, Infinity Fabric, ICI), one direction",
    "scaleout_bytes_per_s": "network card per device, one direction",
    "pcie_bytes_per_s": "host link, one direction",
    "source": "where the figures come from (default: the file)",
    "notes": "anything uncertain about the figures",
}


def _help(name: str) -> str:
    return _HELP.get(name, name.replace("_", " "))
