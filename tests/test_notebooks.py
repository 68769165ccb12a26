"""Every notebook under notebooks/ runs top to bottom, and is stored without outputs.

Each notebook is executed in memory (the file is not rewritten) by nbclient on the ``python3``
kernel, from the notebooks folder, with the repository on the kernel's ``PYTHONPATH`` and
``MPLBACKEND=Agg``. A cell that raises fails the test; no kernel skips it, saying why.
"""

import json
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
NOTEBOOK_PATHS = sorted(
    p for p in NOTEBOOKS.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts
)
KERNEL = "python3"
TIMEOUT_S = 300


def ids(paths):
    return [str(p.relative_to(NOTEBOOKS)) for p in paths]


def require_kernel() -> None:
    """Skip, with the reason, unless nbclient and a ``python3`` kernel are available."""
    pytest.importorskip("nbclient", reason="nbclient is not installed (pip install nbclient)")
    pytest.importorskip("nbformat", reason="nbformat is not installed (pip install nbformat)")
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    try:
        KernelSpecManager().get_kernel_spec(KERNEL)
    except NoSuchKernel:
        pytest.skip(
            f"no Jupyter kernel named {KERNEL!r}: pip install ipykernel && "
            "python3 -m ipykernel install --user"
        )


def test_there_is_a_notebook_to_run():
    assert NOTEBOOK_PATHS, f"no notebook found under {NOTEBOOKS}"


@pytest.mark.parametrize("path", NOTEBOOK_PATHS, ids=ids(NOTEBOOK_PATHS))
def test_notebook_is_stored_without_outputs(path):
    cells = json.loads(path.read_text())["cells"]
    code = [c for c in cells if c["cell_type"] == "code"]
    with_outputs = [i for i, c in enumerate(code) if c.get("outputs") or c.get("execution_count")]
    assert not with_outputs, f"{path.name}: code cells {with_outputs} keep outputs; clear them"


@pytest.mark.parametrize("path", NOTEBOOK_PATHS, ids=ids(NOTEBOOK_PATHS))
def test_notebook_runs_without_error(path, monkeypatch):
    require_kernel()
    import nbclient
    import nbformat

    # The kernel is a child process: it inherits this environment, not pytest's sys.path.
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    )
    notebook = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        notebook,
        kernel_name=KERNEL,
        timeout=TIMEOUT_S,
        resources={"metadata": {"path": str(path.parent)}},
    )
    client.execute()  # raises CellExecutionError, with the cell and its traceback, on failure
