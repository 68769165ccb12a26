"""Hardware of one's own: a device described in a file (``--gpu FILE``, JSON or YAML) or a
catalogue device with some figures changed (``--override FIELD=VALUE|Nx``), made reachable by
its key in this process (``accelerators.register_accelerator``).

Such a device was never measured. Its key is not a catalogue key, so every path that prices it
takes the one an uncatalogued device takes (``efficiency.efficiency_for``): the fit measured on
the reference device (the H200), applied to the device's own datasheet figures, its
FlashAttention-2 rates moved to its architecture where the published shares say so, and at its
boost clock unless its chip and power limit are the reference's. Error bands follow their own
rule for a device never measured (``validate.bands.lookup``: its architecture's band, else the
pooled one). ``DeviceOrigin.note`` says all this in one line for the printouts.

An override of a catalogue device is a what-if, keyed ``<base>-what-if``: an H200 with 30% more
memory bandwidth is not the H200 that was measured. A file's fields are those of a catalogue row
(``device_schema``); ``base: h200`` fills every field the file leaves out.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuplan.errors import GpuplanError
from gpuplan.hwmodels.accelerators import (
    PEAK_COLUMNS,
    Accelerator,
    get_accelerator,
    register_accelerator,
)
from gpuplan.hwmodels.architecture import ARCH
from gpuplan.hwmodels.device_schema import (
    NO_ARCHITECTURE,
    check_value,
    fields,
    resolve_name,
)

FILE_SUFFIXES = (".json", ".yaml", ".yml")
WHAT_IF = "what-if"  # the key suffix of an overridden catalogue device


@dataclass(frozen=True, slots=True)
class DeviceOrigin:
    """Where a device of one's own comes from: a file, a catalogue base, the overrides."""

    key: str
    file: str | None
    base: str | None
    overrides: tuple[str, ...]
    architecture: str | None

    @property
    def source(self) -> str:
        """Short form for the JSON (``device_source``)."""
        what = f"file {self.file}" if self.file else f"catalogue {self.base}"
        if self.file and self.base:
            what += f" (base {self.base})"
        if self.overrides:
            what += f" with overrides {', '.join(self.overrides)}"
        return what

    def note(self) -> str:
        """The printout's device line: what the device is and how it was priced."""
        if self.file:
            what = f"from {Path(self.file).name}" + (f", base {self.base}" if self.base else "")
        else:
            from gpuplan.hwmodels.efficiency import calibrated_efficiency

            measured = calibrated_efficiency(self.base) is not None
            what = f"what-if of the {'measured' if measured else 'catalogue'} {self.base}"
        if self.overrides:
            what += f", {', '.join(self.overrides)}"
        return f"device: {self.key} ({what}; not measured: {fit_phrase(self.key)})"


def fit_phrase(key: str) -> str:
    """How an unmeasured device is priced, in words (``efficiency.efficiency_for``'s path)."""
    from gpuplan.hwmodels.efficiency import (
        FA2_FAMILY,
        REFERENCE_DEVICE,
        calibrated_efficiency,
        same_power_envelope,
    )

    ref = REFERENCE_DEVICE
    if calibrated_efficiency(ref) is None:
        return "priced from its datasheet rates with the uncalibrated prior"
    arch, ref_arch = ARCH.get(key), ARCH.get(ref)
    out = f"priced from its datasheet rates with the {ref_arch} fit measured on {ref}"
    mine = FA2_FAMILY.get(arch or "")
    if mine and mine != FA2_FAMILY.get(ref_arch or ""):
        out += f", FlashAttention-2 rates moved to {arch}"
    if not same_power_envelope(key, ref):
        out += ", at its boost clock"
    return out


def is_device_file(text: str) -> bool:
    """Whether a ``--gpu`` value names a device file rather than a catalogue key."""
    return text.strip().lower().endswith(FILE_SUFFIXES)


def own_device(gpu: str, overrides: list[str] | tuple[str, ...] = ()) -> DeviceOrigin | None:
    """Register the device of ``--gpu`` (a file) and ``--override`` (each ``FIELD=VALUE|Nx``)
    and return its origin; None for a catalogue key with no override (nothing to register)."""
    if not is_device_file(gpu) and not overrides:
        return None
    if is_device_file(gpu):
        row, origin = _file_row(gpu)
    else:
        base = get_accelerator(gpu)
        row = catalogue_row(base) | {"key": f"{base.key}-{WHAT_IF}"}
        origin = DeviceOrigin(row["key"], None, base.key, (), ARCH.get(base.key))
    for text in overrides:
        name, value = parse_override(text)
        row[name] = apply_override(row, name, value)
    if overrides and not origin.file:
        row["name"] = f"{row['name']} ({WHAT_IF}: {', '.join(overrides)})"
        row["source"] = f"{row['source']}; changed by --override {', '.join(overrides)}"
    acc = build_accelerator(row, origin.file or "--override")
    origin = DeviceOrigin(acc.key, origin.file, origin.base, tuple(overrides),
                          origin.architecture)  # fmt: skip
    try:
        register(acc, origin.architecture)
    except GpuplanError as err:
        raise GpuplanError(f"{origin.file or '--override'}: {err}") from None
    return origin


def catalogue_row(acc: Accelerator) -> dict[str, Any]:
    """``acc`` as the fields of a device file (a catalogue row; unknown figures left out)."""
    row: dict[str, Any] = {}
    for name in fields():
        if name in ("base", "architecture"):
            continue
        dtype = next((d for d, c in PEAK_COLUMNS.items() if c == name), None)
        value = acc.peak_flops_per_s.get(dtype) if dtype else getattr(acc, name)
        if value is not None:
            row[name] = value
    return row


def parse_override(text: str) -> tuple[str, str]:
    """``FIELD=VALUE`` split and its field resolved (aliases allowed); one-line errors."""
    name, eq, value = text.partition("=")
    if not eq or not name.strip() or not value.strip():
        raise GpuplanError(f"--override {text!r} is invalid: write FIELD=VALUE or FIELD=Nx "
                           "(e.g. hbm_bytes_per_s=1.3x, tdp_w=1000)")  # fmt: skip
    name = resolve_name(name.strip())
    if fields()[name].kind == "text" or name == "base":
        raise GpuplanError(f"--override {text!r} is invalid: {name} is not a number; only "
                           "numeric fields can be overridden (put the rest in a device file)")  # fmt: skip
    return name, value.strip()


def apply_override(row: dict[str, Any], name: str, value: str) -> float:
    """The new value of ``name``: ``Nx`` times its current value, or the number given."""
    scale = value.lower().endswith("x")
    number = _number(value[:-1] if scale else value, f"{name}={value}")
    if scale:
        if row.get(name) is None:
            raise GpuplanError(f"--override {name}={value} is invalid: the device has no "
                               f"{name} to scale; give the value itself")  # fmt: skip
        check_value(name, number, "--override (a factor)")
        number = row[name] * number
    return check_value(name, number, "--override")


def build_accelerator(row: dict[str, Any], where: str) -> Accelerator:
    """An ``Accelerator`` of the fields of ``row`` (checked), or a one-line error naming the
    first missing field."""
    peaks = {d: float(row[c]) for d, c in PEAK_COLUMNS.items() if row.get(c) is not None}
    if not peaks:
        raise GpuplanError(f"{where}: no peak rate is given: give at least one of "
                           f"{', '.join(PEAK_COLUMNS.values())} (or a base)")  # fmt: skip
    for name, field in fields().items():
        if field.required and row.get(name) is None:
            raise GpuplanError(f"{where}: {name} is missing: give it ({field.valid}, "
                               f"{field.unit}) or a base")  # fmt: skip
    kw = {n: row.get(n) for n in fields() if n not in PEAK_COLUMNS.values()}
    del kw["base"], kw["architecture"]
    try:
        return Accelerator(**kw | {"peak_flops_per_s": peaks, "notes": row.get("notes", "")})
    except GpuplanError as err:
        raise GpuplanError(f"{where}: {err}") from None


def register(acc: Accelerator, architecture: str | None) -> None:
    """``acc`` reachable by its key, with its kernel architecture (none: no CUDA/ROCm kernels)."""
    register_accelerator(acc)
    if architecture and architecture != NO_ARCHITECTURE:
        ARCH[acc.key] = architecture
    else:
        ARCH.pop(acc.key, None)


def _file_row(path_text: str) -> tuple[dict[str, Any], DeviceOrigin]:
    """The fields of a device file, its base's filling the gaps, and its origin."""
    path = Path(path_text)
    doc = _read(path)
    where = str(path)
    given = {}
    for name, value in doc.items():
        if not isinstance(name, str):
            raise GpuplanError(f"{where}: field {name!r} is not a name")
        try:
            resolved = resolve_name(name)
        except GpuplanError as err:
            raise GpuplanError(f"{where}: {err}") from None
        given[resolved] = check_value(resolved, value, where)
    base = get_accelerator(given["base"]) if "base" in given else None
    row = catalogue_row(base) if base else {"vendor": "unspecified", "form": "datacenter"}
    key = given.get("key", _key_of(path))
    if not re.fullmatch(r"[a-z0-9][a-z0-9._-]*", key):
        raise GpuplanError(f"{where}: key={key!r} is invalid: lower-case letters, digits, '.', "
                           "'-' and '_', starting with a letter or digit")  # fmt: skip
    row |= {"key": key, "name": key, "source": f"user device file {path.name}", "notes": ""}
    row |= {k: v for k, v in given.items() if k != "base"}
    arch = given.get("architecture", ARCH.get(base.key) if base else None)
    return row, DeviceOrigin(key, where, base.key if base else None, (), arch)


def _read(path: Path) -> dict[str, Any]:
    """The file's mapping of fields; one-line errors for anything unreadable."""
    where = f"device file {str(path)!r}"
    if not path.is_file():
        raise GpuplanError(f"{where} {'is a folder' if path.is_dir() else 'does not exist'}")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise GpuplanError(f"{where} is not UTF-8 text") from None
    doc = _parse_json(text, where) if path.suffix.lower() == ".json" else _parse_yaml(text, where)
    if not isinstance(doc, dict):
        raise GpuplanError(f"{where} is not a mapping of fields (got {type(doc).__name__}): "
                           "write one 'field: value' per line")  # fmt: skip
    return doc


def _parse_json(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise GpuplanError(f"{where} is not valid JSON: {err.msg} (line {err.lineno})") from None


def _yaml_loader():
    """PyYAML's safe loader, reading ``4.8e12`` as a number: YAML 1.1 (PyYAML) wants a dot and a
    sign in an exponent (``4.8e+12``), which datasheet figures are seldom written with."""
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_implicit_resolver("tag:yaml.org,2002:float", _YAML_EXPONENT, list("-+0123456789."))
    return Loader


# a number with an exponent and no dot or sign in it: 48e11, 4.8e12, -1e3
_YAML_EXPONENT = re.compile(r"^[-+]?(?:[0-9][0-9_]*)?(?:\.[0-9_]*)?[eE][-+]?[0-9]+$")


def _parse_yaml(text: str, where: str) -> Any:
    import yaml

    try:
        return yaml.load(text, Loader=_yaml_loader())  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f" (line {mark.line + 1})" if mark is not None else ""
        what = getattr(err, "problem", None) or type(err).__name__
        raise GpuplanError(f"{where} is not valid YAML: {what}{at}") from None


def _key_of(path: Path) -> str:
    """A key from a file's name: ``My Chip.yaml`` -> ``my-chip``."""
    return re.sub(r"[^a-z0-9._-]+", "-", path.stem.lower()).strip("-") or "my-device"


def _number(text: str, label: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise GpuplanError(f"--override {label} is invalid: {text!r} is not a number; write a "
                           "number or a factor such as 1.3x") from None
