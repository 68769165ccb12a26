"""Scenario and job files checked at the edge, in one place: the JSON schema shipped beside this
module (``scenario.schema.json``) says what every key may hold, and this module applies it.

The schema is standard JSON Schema (draft 2020-12: any validator reads it); this module applies
the subset it uses — ``type``, ``enum``, ``minimum``/``maximum`` and their exclusive forms,
``minLength``, ``maxItems``, ``required``, ``properties``, ``additionalProperties``, ``items``,
``anyOf``, ``$ref`` — with three rules stricter than JSON's: a boolean is never a number (``gpus: true``),
a number must be finite (YAML's ``.nan`` and ``.inf`` exist, JSON's numbers cannot hold them),
and an unknown key is reported with the nearest known one. A whole number (``integer``) may be
written ``8`` or ``8.0``, never ``2.5``: values are refused, never truncated.

``load_yaml`` reads a YAML file as YAML 1.2 reads numbers (``1e9`` and ``2.0e12`` are numbers,
not text as in YAML 1.1), refuses a key given twice, and reports a syntax error in one line:
file, line, column and the problem.
"""

from __future__ import annotations

import difflib
import functools
import json
import math
import numbers
import re
from importlib import resources
from pathlib import Path

import yaml

from gpuplan.errors import GpuplanError, unknown_key


@functools.cache
def schema() -> dict:
    """The scenario schema (``scenario.schema.json``)."""
    text = (resources.files("gpuplan.sim.runtime.cluster") / "scenario.schema.json").read_text()
    return json.loads(text)


def definition(name: str) -> dict:
    """One of the schema's ``$defs`` (``job``, ``strategy``, ``cluster`` ...)."""
    return schema()["$defs"][name]


def problems(value, node: dict | None = None, where: str = "") -> list[str]:
    """Every way ``value`` breaks the schema ``node`` (default: the whole scenario), one line
    each, named by its path (``cluster.nodes``, ``jobs[0].gpus``)."""
    return list(_walk(value, schema() if node is None else node, where))


def check(value, node: dict | None = None, where: str = "") -> None:
    """Raise a GpuplanError with the first problem of ``value``, if it has one."""
    for problem in _walk(value, schema() if node is None else node, where):
        raise GpuplanError(problem)


_RESOLVED: dict[int, tuple[dict, dict]] = {}  # id(node) -> (node, node with its $ref followed)


def _resolve(node: dict) -> dict:
    if "$ref" not in node:
        return node
    hit = _RESOLVED.get(id(node))
    if hit is not None and hit[0] is node:  # the node is kept alive here: its id stays its own
        return hit[1]
    out = node
    while "$ref" in out:
        ref = out["$ref"].removeprefix("#/$defs/")
        out = {k: v for k, v in out.items() if k != "$ref"} | definition(ref)
    _RESOLVED[id(node)] = (node, out)
    return out


def _walk(value, node: dict, where: str):
    node = _resolve(node)
    name = where or "the scenario"
    if "anyOf" in node:  # valid under one branch; else the last branch's problems (the schema
        found = []  # puts the informative one last: null, or a section)
        for branch in node["anyOf"]:
            found = list(_walk(value, branch, where))
            if not found:
                return
        yield from found
        return
    if "enum" in node:
        if not any(_same(value, choice) for choice in node["enum"]):
            yield _enum_problem(name, value, node["enum"])
        return
    if "type" in node and not _has_type(value, node["type"]):
        yield f"{name}={_show(value)} is invalid: it must be {_want(node)}"
        return
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        if not _in_range(value, node):
            yield f"{name}={_show(value)} is invalid: it must be {_want(node)}"
    elif isinstance(value, str):
        if len(value) < node.get("minLength", 0):
            yield f"{name}={value!r} is invalid: it must not be empty"
    elif isinstance(value, list):
        yield from _walk_list(value, node, where)
    elif isinstance(value, dict):
        yield from _walk_dict(value, node, where)


def _walk_list(value: list, node: dict, where: str):
    if len(value) > node.get("maxItems", math.inf):
        yield f"{where}: {len(value):,} items is too many: at most {node['maxItems']:,}"
        return
    for k, item in enumerate(value):
        yield from _walk(item, node.get("items", {}), f"{where}[{k}]")


def _walk_dict(value: dict, node: dict, where: str):
    props = node.get("properties", {})
    extra = node.get("additionalProperties", True)
    prefix = f"{where}." if where else ""
    for key in node.get("required", ()):
        if key not in value:
            yield f"{where + ': ' if where else ''}{key} is missing (it is required)"
    for key, item in value.items():
        if not isinstance(key, str):
            yield f"{where + ': ' if where else ''}key {key!r} is invalid: keys are text"
        elif key in props:
            yield from _walk(item, props[key], prefix + key)
        elif extra is False:
            kind = f"{where} key" if where else "key"
            yield str(unknown_key(kind, key, props))
        elif isinstance(extra, dict):
            yield from _walk(item, extra, prefix + key)


def _same(value, choice) -> bool:
    if isinstance(value, bool) != isinstance(choice, bool):
        return False  # true is not 1
    return value == choice


def _enum_problem(name: str, value, choices: list) -> str:
    text = f"{name}={_show(value)} is invalid: choose one of {', '.join(map(str, choices))}"
    if isinstance(value, str):
        near = difflib.get_close_matches(value.lower(), [str(c) for c in choices], 1, 0.5)
        text += f" (did you mean {near[0]}?)" if near else ""
    return text


TYPE_WORDS = {"integer": "a whole number", "number": "a finite number", "string": "text",
              "boolean": "true or false (a YAML boolean, unquoted)", "object": "a mapping of keys",
              "array": "a list", "null": "empty"}  # fmt: skip


def _want(node: dict) -> str:
    """What a valid value looks like, in words: 'a whole number from 1 to 100,000'."""
    types = node.get("type", [])
    types = [types] if isinstance(types, str) else types
    words = " or ".join(TYPE_WORDS[t] for t in types) or "a value"
    if "minimum" in node and "maximum" in node:
        return f"{words} from {_num(node['minimum'])} to {_num(node['maximum'])}"
    low = [f"greater than {_num(node['exclusiveMinimum'])}"] if "exclusiveMinimum" in node else []
    low += [f"{_num(node['minimum'])} or more"] if "minimum" in node else []
    high = [f"less than {_num(node['exclusiveMaximum'])}"] if "exclusiveMaximum" in node else []
    high += [f"at most {_num(node['maximum'])}"] if "maximum" in node else []
    bounds = " and ".join(low + high)
    return f"{words}, {bounds}" if bounds else words


def _num(x) -> str:
    if isinstance(x, int) or float(x).is_integer() and abs(x) < 1e7:
        return f"{int(x):,}"
    return f"{x:g}"


def _show(value) -> str:
    if isinstance(value, int) and value.bit_length() > 200:  # repr fails beyond 4,300 digits
        return f"an integer of about {int(value.bit_length() * math.log10(2)) + 1:,} digits"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _has_type(value, types) -> bool:
    types = [types] if isinstance(types, str) else types
    return any(_is(value, t) for t in types)


_PYTHON_TYPES = {"string": str, "boolean": bool, "object": dict, "array": list, "null": type(None)}


def _is(value, kind: str) -> bool:
    if kind in ("integer", "number"):
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            return False
        if isinstance(value, numbers.Integral):  # any size: float(10**400) would overflow
            return True
        return math.isfinite(value) and (kind == "number" or float(value).is_integer())
    return isinstance(value, _PYTHON_TYPES[kind])


def _in_range(value, node: dict) -> bool:
    return (
        value >= node.get("minimum", -math.inf)
        and value <= node.get("maximum", math.inf)
        and value > node.get("exclusiveMinimum", -math.inf)
        and value < node.get("exclusiveMaximum", math.inf)
    )


# -- text cells (CSV) -----------------------------------------------------------------------------
INT_TEXT = re.compile(r"[-+]?[0-9]+(\.0*)?([eE]\+?[0-9]+)?")
BOOL_TEXT = {"true": True, "false": False}


def from_text(text: str, node: dict):
    """A CSV cell read as the schema's type for it (text where it is not a number or a
    boolean); what does not parse stays text, for ``check`` to refuse with its value."""
    node = _resolve(node)
    types = node.get("type", [])
    types = [types] if isinstance(types, str) else types
    if "enum" in node and all(isinstance(c, int) for c in node["enum"]):
        types = ["integer"]
    if "integer" in types and INT_TEXT.fullmatch(text):
        number = float(text)
        return int(number) if math.isfinite(number) and number.is_integer() else number
    if "number" in types or "integer" in types:
        try:
            return float(text)
        except ValueError:
            return text
    if "boolean" in types:
        return BOOL_TEXT.get(text.strip().lower(), text)
    return text


# -- YAML ------------------------------------------------------------------------------------------
class _Loader(yaml.SafeLoader):
    """YAML 1.1 as PyYAML's safe loader reads it, but numbers as YAML 1.2 writes them and no key
    twice in one mapping."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, str | int | float | bool) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"the key {key!r} is given twice", key_node.start_mark
                )
            seen.add(key) if isinstance(key, str | int | float | bool) else None
        return super().construct_mapping(node, deep=deep)


# YAML 1.2's floats (https://yaml.org/spec/1.2.2/#10214-floating-point): 1e9 and 2.0e12 too
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?([0-9][0-9_]*)?\.?[0-9_]*[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


def load_rates(path: Path) -> dict:
    """A failure-rates file, checked against the schema's ``rates_file``."""
    return _load_checked(path, "rates_file", "failure-rates file")


def load_job_mix(path: Path) -> dict:
    """A job-mix file, checked against the schema's ``job_mix``."""
    return _load_checked(path, "job_mix", "job-mix file")


def _load_checked(path: Path, name: str, what: str) -> dict:
    doc = load_yaml(path)
    if not isinstance(doc, dict):
        raise GpuplanError(f"{path}: a {what} is a mapping of keys, not {type(doc).__name__}")
    for problem in problems(doc, definition(name)):
        raise GpuplanError(f"{path}: {problem}")
    if name == "rates_file":
        for k, cause in enumerate(doc["causes"]):
            if "rate_per_hour" not in cause and not {"count", "exposure_hours"} <= set(cause):
                raise GpuplanError(f"{path}: causes[{k}]: give rate_per_hour, or count and "
                                   "exposure_hours")  # fmt: skip
    return doc


def load_yaml(path: Path):
    """A YAML file's document; one-line GpuplanErrors for unreadable files and bad syntax."""
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        raise GpuplanError(f"{path}: not UTF-8 text (byte {err.start}): is it a YAML file?") from None
    except OSError as err:
        raise GpuplanError(f"{path}: cannot read it ({err.strerror or err})") from None
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 (a SafeLoader)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        problem = " ".join(str(err.problem or err.context or "syntax error").split())
        raise GpuplanError(f"{where}: not valid YAML: {problem}") from None
    except yaml.YAMLError as err:
        raise GpuplanError(f"{path}: not valid YAML: {' '.join(str(err).split())}") from None
    except (ValueError, RecursionError) as err:  # a 5,000-digit number, nesting too deep
        first = " ".join(str(err).split(";")[0].split()) or type(err).__name__
        raise GpuplanError(f"{path}: cannot read it: {first}") from None
