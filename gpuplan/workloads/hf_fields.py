"""Checked reads of a Hugging Face ``config.json``: the file, its JSON, and each field.

``Fields`` wraps the parsed object: ``need`` (a required field) and ``get`` (an optional one,
absent or null giving the default of the ``transformers`` configuration class) check the kind of
value (``KINDS``), so that a missing or wrong field is one line naming the file, the key and the
value. ``load`` reads a path (a file or its folder) or takes a parsed dict.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from gpuplan.errors import GpuplanError

_MISSING = object()


class Fields:
    """A config dict whose every read is checked, in one place: ``need`` (required) and ``get``
    (optional) take the kind of value the field holds (``KINDS``), and a missing required field or
    a value of the wrong kind is a one-line GpuplanError naming the file, the key and the value."""

    def __init__(self, raw: Mapping[str, Any], origin: str) -> None:
        self.raw, self.origin = raw, origin

    def need(self, key: str, kind: str = "count") -> Any:
        value = self.raw.get(key, _MISSING)
        if value is _MISSING or value is None:
            raise GpuplanError(f"{self.origin}: required field {key!r} is missing")
        return self.checked(key, value, kind)

    def has(self, key: str) -> bool:
        """Whether the field is given (not absent, not null)."""
        return self.raw.get(key) is not None

    def get(self, key: str, default: Any, kind: str = "count") -> Any:
        """The field, or ``default`` when absent or null (transformers treats both alike)."""
        value = self.raw.get(key)
        return default if value is None else self.checked(key, value, kind)

    def checked(self, key: str, value: Any, kind: str) -> Any:
        """``value`` if it is of ``kind`` (a whole-number float such as 4096.0 as an int)."""
        test, words = KINDS[kind]
        if kind in ("count", "size", "layers") and isinstance(value, float) and value.is_integer():
            value = int(value)
        if not test(value):
            raise GpuplanError(
                f"{self.origin}: {key}={shown(value)} ({type(value).__name__}) is invalid: it must be "
                f"{words}"
            )
        return value


def shown(value: Any) -> str:
    """A value as an error message prints it: short, and safe for a 5,000-digit integer."""
    if isinstance(value, int) and value.bit_length() > 200:
        return f"an integer of about {int(value.bit_length() * 0.30103) + 1:,} digits"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _whole(low: int, high: int) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and low <= v <= high


# What a field may hold. MAX_FIELD bounds every size: no published model comes within 1,000x of
# it (the largest vocabularies hold about 256k tokens, Gemma's, arXiv:2403.08295; the longest
# context is Llama 4 Scout's 10M tokens, https://ai.meta.com/blog/llama-4-multimodal-intelligence/),
# and a layer count of 10^30 would be priced, layer by layer, for ever.
# Layers are priced and played out one by one: MAX_CONFIG_LAYERS (a config.json's bound, not
# ``gpuplan.limits.MAX_LAYERS``, the API's) is 80x the deepest published decoder
# (Llama 3.1 405B, 126 layers, Dubey et al. 2024, arXiv:2407.21783, Table 3).
MAX_FIELD = 10**10
MAX_CONFIG_LAYERS = 10_000
KINDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "count": (_whole(1, MAX_FIELD), f"a whole number from 1 to {MAX_FIELD:,} (a JSON integer)"),
    "size": (_whole(0, MAX_FIELD), f"a whole number from 0 to {MAX_FIELD:,} (a JSON integer)"),
    "layers": (_whole(1, MAX_CONFIG_LAYERS),
               f"a whole number from 1 to {MAX_CONFIG_LAYERS:,} (a JSON integer)"),
    "bool": (lambda v: isinstance(v, bool), "true or false (a JSON boolean)"),
    "str": (lambda v: isinstance(v, str), "a string"),
    "list": (lambda v: isinstance(v, list), "a list (a JSON array)"),
    "number": (lambda v: isinstance(v, int | float) and not isinstance(v, bool)
               and 0 <= v <= MAX_FIELD, f"a number from 0 to {MAX_FIELD:,}"),
    "dict": (lambda v: isinstance(v, Mapping), "a JSON object"),
}


def part(f: Fields, key: str) -> Fields:
    """A nested config (``text_config``, ``vision_config``), its reads checked like the top's."""
    raw = f.raw.get(key)
    if raw is None:
        return Fields({}, f"{f.origin} {key}")
    if not isinstance(raw, Mapping):
        raise GpuplanError(f"{f.origin}: {key} must be a JSON object, not {type(raw).__name__}")
    return Fields(raw, f"{f.origin} {key}")

def load(path_or_dict: str | Path | Mapping[str, Any]) -> tuple[Fields, str]:
    """The config's fields and the name it goes by (the folder, the file or the dict's
    ``_name_or_path``)."""
    if isinstance(path_or_dict, Mapping):
        raw, origin = path_or_dict, "config dict"
        if not all(isinstance(k, str) for k in raw):
            raise GpuplanError("config dict: its keys must be strings (the JSON object's keys)")
        name = str(raw.get("_name_or_path") or raw.get("model_type", "model"))
    elif isinstance(path_or_dict, str | Path):
        file = _config_file(Path(path_or_dict))
        raw, origin = _load_json(file), str(file)
        name = file.parent.name if file.name == "config.json" else file.stem
    else:
        raise GpuplanError(f"config={type(path_or_dict).__name__} is invalid: give a config.json "
                           "path, its folder, or the parsed dict")  # fmt: skip
    return Fields(raw, origin), name


def _config_file(path: Path) -> Path:
    """``path`` itself, or ``path/config.json`` for a directory."""
    file = path / "config.json" if path.is_dir() else path
    if not file.is_file():
        raise GpuplanError(f"model config {str(file)!r} is not a file")
    return file


def _load_json(file: Path) -> Mapping[str, Any]:
    try:
        raw = json.loads(file.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as err:
        raise GpuplanError(f"{file}: not UTF-8 text (byte {err.start}): is it a config.json?") from None
    except json.JSONDecodeError as err:
        raise GpuplanError(f"{file}: cannot read it as JSON: {err.msg} (line {err.lineno}, column "
                           f"{err.colno})") from None  # fmt: skip
    except (OSError, ValueError, RecursionError) as err:  # ValueError: a 5,000-digit number
        first = " ".join(str(err).split(";")[0].split())
        raise GpuplanError(f"{file}: cannot read it as JSON: {first}") from None
    if not isinstance(raw, dict):
        raise GpuplanError(f"{file}: a config.json holds one JSON object, not {type(raw).__name__}")
    return raw
