"""Files the product writes for users: written whole or not at all.

Each writer puts the content in a temporary file beside the target and renames it into place
(``os.replace`` is atomic on one file system), so an interrupted or failed command never leaves
a half-written trace, table, figure or calibration behind.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def write_atomically(path: str | Path, write: Callable[[Path], None]) -> Path:
    """Call ``write(tmp_path)`` and move the result to ``path``; clean up on failure."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent or Path("."), prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(Path(tmp))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_text(path: str | Path, text: str) -> Path:
    return write_atomically(path, lambda tmp: tmp.write_text(text))


def write_csv(path: str | Path, frame) -> Path:
    return write_atomically(path, lambda tmp: frame.to_csv(tmp, index=False))


def save_figure(path: str | Path, figure, **kwargs) -> Path:
    fmt = Path(path).suffix.lstrip(".") or None  # the temporary name hides the extension
    return write_atomically(path, lambda tmp: figure.savefig(tmp, format=fmt, **kwargs))
