"""The house's rules, counted: import circles, imports against the layer order, files over 400
lines and functions over 60 lines in ``gpuplan/`` (docs/architecture.md has the map).

    python3 benchmarks/house.py          # the counts and every offender; exit 1 if any
    python3 benchmarks/house.py --map    # every module with its docstring's first sentence
                                         # (the index of docs/architecture.md)

Imports are read with ``ast`` (every ``import`` and ``from ... import`` anywhere in a module,
inside functions too). A module may import its own layer or one below it:

    base (errors, units, limits, outputs, tables)  <-  workloads  <-  hwmodels  <-  sim (and plots)
        <-  validate  <-  cli, report, api

``report`` may not import ``cli`` (``cli`` hands it a command's document). A circle is a set of
modules each reachable from the others by imports; a package's ``__init__`` counts as a module.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "gpuplan"
MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 60

# The layer of each top-level module or package of gpuplan; a module may import its own or lower.
LAYER = {
    "gpuplan": 0, "errors": 0, "units": 0, "limits": 0, "outputs": 0, "tables": 0,
    "workloads": 1,
    "hwmodels": 2,
    "sim": 3, "plots": 3,
    "validate": 4,
    "cli": 5, "report": 5, "api": 5,
}
FORBIDDEN = {("report", "cli")}  # side by side, one way: cli -> report only


@dataclass
class House:
    modules: dict[str, Path] = field(default_factory=dict)
    imports: dict[str, set[str]] = field(default_factory=dict)
    long_files: list[tuple[str, int]] = field(default_factory=list)
    long_functions: list[tuple[str, str, int]] = field(default_factory=list)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _targets(module: str, node: ast.AST, is_package: bool, known: dict[str, Path]) -> list[str]:
    """The gpuplan modules an import statement names (a package's submodule where it is one)."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:
            parts = module.split(".") if is_package else module.split(".")[:-1]
            parts = parts[: len(parts) - (node.level - 1)]
            base = ".".join(parts + ([node.module] if node.module else []))
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
    out = []
    for name in names:
        while name not in known and "." in name:
            name = name.rsplit(".", 1)[0]
        if name in known and name != module:
            out.append(name)
    return out


def read_house(package: Path = PACKAGE) -> House:
    house = House()
    for path in sorted(package.rglob("*.py")):
        house.modules[module_name(path)] = path
    for module, path in house.modules.items():
        source = path.read_text()
        lines = source.count("\n")
        if lines > MAX_FILE_LINES:
            house.long_files.append((str(path.relative_to(ROOT)), lines))
        tree = ast.parse(source)
        found: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                found.update(_targets(module, node, path.name == "__init__.py", house.modules))
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    house.long_functions.append((str(path.relative_to(ROOT)), node.name, length))
        house.imports[module] = found
    return house


def circles(imports: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(imports):
        if root in index:
            continue
        work = [(root, iter(sorted(imports.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(imports.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def top(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def wrong_way(imports: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Imports of a higher layer than the importer's, and the forbidden side-by-side ones."""
    bad = []
    for module, targets in sorted(imports.items()):
        for target in sorted(targets):
            a, b = top(module), top(target)
            if LAYER.get(b, 99) > LAYER.get(a, -1) or (a, b) in FORBIDDEN:
                bad.append((module, target))
    return bad


def module_index(package: Path = PACKAGE) -> str:
    """A Markdown table per folder of ``gpuplan/``: each module and what its docstring says
    first (docs/architecture.md's index)."""
    folders: dict[str, list[str]] = {}
    for path in sorted(package.rglob("*.py")):
        if path.name == "__init__.py":
            continue
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        first = " ".join(doc.split("\n\n")[0].split()).replace("|", "/")
        if len(first) > 150:
            first = first[:147].rsplit(" ", 1)[0] + " …"
        folder = str(path.parent.relative_to(ROOT))
        folders.setdefault(folder, []).append(f"| `{path.stem}` | {first} |")
    out = []
    for folder, rows in folders.items():
        out += [f"### `{folder}/`", "", "| module | what it holds |", "|---|---|", *rows, ""]
    return "\n".join(out)


def main() -> int:
    if "--map" in sys.argv[1:]:
        print(module_index())
        return 0
    house = read_house()
    found = {
        "import circles": circles(house.imports),
        "imports against the layer order": wrong_way(house.imports),
        f"files over {MAX_FILE_LINES} lines": sorted(house.long_files, key=lambda x: -x[1]),
        f"functions over {MAX_FUNCTION_LINES} lines": sorted(house.long_functions,
                                                              key=lambda x: -x[2]),
    }
    print(f"{len(house.modules)} modules, "
          f"{sum(p.read_text().count(chr(10)) for p in house.modules.values())} lines")
    for name, items in found.items():
        print(f"{name}: {len(items)}")
        for item in items:
            print(f"  {item}")
    return 1 if any(found.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
