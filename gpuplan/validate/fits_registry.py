"""The registry of fitted values (``docs/fits.json``): every fitted constant of the package with
its mechanism, the records it was fitted on, the scripts that measured and fitted them, and what
leaving it out does to the held-out error; and ``docs/fits.md``, the table written from it.

A group of the registry names a file (a JSON data file, or a Python module holding a fitted
dict), a section in it (a dotted path of keys; "" the top level) and the keys listed there.
``check`` walks each file along the listed sections and returns the keys found that are not
listed (a new fitted value nobody described) and the listed keys that are gone; a key at the top
level of a file may also be named as the file's ``metadata`` (provenance, notes). Every data
file of the package (``DATA_GLOBS``) is either in a group or in ``not_fitted`` with the reason.

    python3 -m gpuplan.validate.fits_registry           # check; exit 1 on any unlisted or gone key
    python3 -m gpuplan.validate.fits_registry --write   # and write docs/fits.md
"""

from __future__ import annotations

import argparse
import importlib
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REGISTRY = Path("docs/fits.json")
DOC = Path("docs/fits.md")
DATA_GLOBS = ("gpuplan/**/data/*", "benchmarks/*.json")


def load_registry(root: Path = ROOT) -> dict:
    return json.loads((root / REGISTRY).read_text())


def _listed_paths(registry: dict, file: str) -> tuple[set[str], set[str], set[str]]:
    """(listed key paths, their prefixes, top-level metadata names) of ``file``'s groups."""
    leaves, prefixes, meta = set(), set(), set()
    for g in registry["groups"]:
        if g["file"] != file:
            continue
        meta |= set(g["metadata"])
        for key in g["keys"]:
            path = f"{g['section']}.{key}" if g["section"] else key
            leaves.add(path)
            parts = path.split(".")
            prefixes |= {".".join(parts[:i]) for i in range(1, len(parts))}
    return leaves, prefixes, meta


def _json_unlisted(node: dict, path: str, leaves: set, prefixes: set, meta: set) -> list[str]:
    out = []
    for key, value in node.items():
        sub = f"{path}.{key}" if path else key
        if sub in leaves or (not path and key in meta):
            continue
        if sub in prefixes and isinstance(value, dict):
            out += _json_unlisted(value, sub, leaves, prefixes, meta)
        else:
            out.append(sub)
    return out


def _lookup(node, path: str) -> bool:
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def _module_dict(root: Path, file: str, name: str) -> dict:
    module = importlib.import_module(str(Path(file).with_suffix("")).replace("/", "."))
    return getattr(module, name, {})


def check_file(root: Path, registry: dict, file: str) -> tuple[list[str], list[str]]:
    """(unlisted key paths, listed key paths gone) of one registered file."""
    leaves, prefixes, meta = _listed_paths(registry, file)
    if file.endswith(".py"):
        sections = {g["section"] for g in registry["groups"] if g["file"] == file}
        found = {f"{s}.{k}" for s in sections for k in _module_dict(root, file, s)}
        return sorted(found - leaves), sorted(leaves - found)
    data = json.loads((root / file).read_text())
    unlisted = _json_unlisted(data, "", leaves, prefixes, meta)
    gone = [p for p in sorted(leaves) if not _lookup(data, p)]
    return sorted(unlisted), gone


def data_files(root: Path) -> list[str]:
    """Every data file of the package (``DATA_GLOBS``), relative to ``root``."""
    files = {p for g in DATA_GLOBS for p in root.glob(g) if p.is_file()}
    return sorted(str(p.relative_to(root)) for p in files)


def check(root: Path = ROOT, registry: dict | None = None) -> dict[str, list[str]]:
    """Keys found but not listed, listed but gone, and data files neither registered nor
    declared ``not_fitted`` (each a list of ``file: path`` strings; all empty when in order)."""
    registry = registry or load_registry(root)
    files = sorted({g["file"] for g in registry["groups"]})
    out: dict[str, list[str]] = {"unlisted": [], "gone": [], "unknown_files": []}
    for file in files:
        if not (root / file).exists():
            out["gone"].append(f"{file}: (the file)")
            continue
        unlisted, gone = check_file(root, registry, file)
        out["unlisted"] += [f"{file}: {p}" for p in unlisted]
        out["gone"] += [f"{file}: {p}" for p in gone]
    known = set(files) | set(registry["not_fitted"])
    out["unknown_files"] = [f for f in data_files(root) if f not in known]
    return out


def _value(root: Path, file: str, path: str) -> str:
    if file.endswith(".py"):
        section, key = path.rsplit(".", 1)
        node = _module_dict(root, file, section)[key]
    else:
        node = json.loads((root / file).read_text())
        for part in path.split("."):
            node = node[part]
    if isinstance(node, float):
        return f"{node:.4g}"
    text = json.dumps(node)
    return text if len(text) <= 60 else f"({len(node)} entries)"


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render(root: Path = ROOT, registry: dict | None = None) -> str:
    """``docs/fits.md``: the registry's prose, then one table per group."""
    registry = registry or load_registry(root)
    lines = [f"<!-- written by python3 -m gpuplan.validate.fits_registry --write from "
             f"{REGISTRY}; edit that file -->", "", "# Fitted values", "", registry["about"], ""]
    lines += registry.get("notes", [])
    for g in registry["groups"]:
        where = f"{g['file']}" + (f" `{g['section']}`" if g["section"] else "")
        lines += ["", f"## {where}", "", f"- kind: {g['kind']}", f"- records: {g['records']}",
                  f"- measured by: {g['measured_by']}", f"- fitted by: {g['fitted_by']}",
                  f"- leave-one-out: {g['loo']}", "",
                  "| key | value | mechanism | leaving it out |", "|---|---|---|---|"]  # fmt: skip
        for key, entry in g["keys"].items():
            path = f"{g['section']}.{key}" if g["section"] else key
            lines.append(f"| `{key}` | {_cell(_value(root, g['file'], path))} | "
                         f"{_cell(entry['mechanism'])} | {_cell(entry.get('loo', ''))} |")  # fmt: skip
    lines += ["", "## Data files that hold no fitted value", "",
              "| file | why |", "|---|---|"]  # fmt: skip
    lines += [f"| {f} | {_cell(why)} |" for f, why in sorted(registry["not_fitted"].items())]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help=f"write {DOC}")
    args = ap.parse_args(argv)
    problems = check()
    for kind, items in problems.items():
        for item in items:
            print(f"{kind}: {item}")
    if args.write:
        (ROOT / DOC).write_text(render())
        print(f"wrote {DOC}")
    return 1 if any(problems.values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
