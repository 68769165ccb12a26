"""The house stays as built (docs/architecture.md): imports run one way, no circle, small rooms.
``python3 benchmarks/house.py`` prints every offender."""

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("house", ROOT / "benchmarks" / "house.py")
house = importlib.util.module_from_spec(_spec)
sys.modules["house"] = house  # dataclasses look their module up
_spec.loader.exec_module(house)
HOUSE = house.read_house()


def test_no_module_of_gpuplan_is_in_an_import_circle():
    assert house.circles(HOUSE.imports) == []


def test_no_module_imports_a_layer_above_its_own():
    assert house.wrong_way(HOUSE.imports) == []


def test_no_file_of_gpuplan_is_over_400_lines():
    assert HOUSE.long_files == []


def test_no_function_of_gpuplan_is_over_60_lines():
    assert HOUSE.long_functions == []


def test_every_top_level_module_and_package_has_a_layer():
    tops = {house.top(m) for m in HOUSE.modules}
    assert tops <= set(house.LAYER)


def test_every_package_says_what_it_owns():
    for module, path in HOUSE.modules.items():
        if path.name == "__init__.py":
            doc = path.read_text().lstrip()
            assert doc.startswith('"""') and len(doc.split('"""')[1].strip()) > 20, module


def test_a_circle_and_an_upward_import_are_found():
    imports = {"gpuplan.sim.a": {"gpuplan.sim.b"}, "gpuplan.sim.b": {"gpuplan.sim.a"},
               "gpuplan.workloads.x": {"gpuplan.validate.y"}, "gpuplan.report.r": {"gpuplan.cli.c"}}
    assert house.circles(imports) == [["gpuplan.sim.a", "gpuplan.sim.b"]]
    assert house.wrong_way(imports) == [("gpuplan.report.r", "gpuplan.cli.c"),
                                        ("gpuplan.workloads.x", "gpuplan.validate.y")]


def test_the_map_lists_every_module_and_no_other():
    text = (ROOT / "docs" / "architecture.md").read_text()
    listed, folder = set(), None
    for line in text.splitlines():
        if line.startswith("### `gpuplan"):
            folder = line.strip("#` /")
        elif folder and line.startswith("| `"):
            listed.add(f"{folder}/{line.split('`')[1]}.py")
    modules = {str(p.relative_to(ROOT)) for p in HOUSE.modules.values()
               if p.name != "__init__.py"}
    assert listed == modules, "python3 benchmarks/house.py --map prints the index"
