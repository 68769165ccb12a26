"""Files the product writes for users: written whole or not at all.

Each writer puts the content in a temporary file beside the target and renames it into place
(``os.replace`` is atomic on one file system), so an interrupted or failed command never leaves
a half-written trace, table, figure or calibration behind. A target that is a symbolic link is
followed (its target is replaced, the link stays); a new file gets the mode the umask gives
(0666 less the umask), an existing one keeps its own. ``check_output`` checks a path a user
gave before any work is done, so a bad ``--out`` costs nothing and names the flag.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from gpuplan.errors import GpuplanError


def check_output(path: str | Path, flag: str, *, suffixes: Iterable[str] = ()) -> Path:
    """``path`` if a file can be written there (its folder exists, it is not a folder, its
    suffix one of ``suffixes`` when given); else a GpuplanError naming ``flag``."""
    text = str(path)
    if not text.strip():
        raise GpuplanError(f"{flag}={text!r} is invalid: give a file name")
    target = Path(os.path.realpath(text))
    folder = target.parent
    if target.is_dir():
        raise GpuplanError(f"{flag}={text!r} is a folder: give a file name")
    if not folder.is_dir():
        raise GpuplanError(f"{flag}={text!r}: the folder {str(folder)!r} does not exist")
    if not os.access(folder, os.W_OK):
        raise GpuplanError(f"{flag}={text!r}: the folder {str(folder)!r} is not writable")
    allowed = sorted(s.lower().lstrip(".") for s in suffixes)
    if allowed and target.suffix.lower().lstrip(".") not in allowed:
        raise GpuplanError(
            f"{flag}={text!r} has an unknown extension: use one of "
            + ", ".join("." + s for s in allowed)
        )
    return Path(text)


def figure_suffixes() -> list[str]:
    """The file extensions matplotlib can save a figure as (png, pdf, svg, ...)."""
    from matplotlib.backend_bases import FigureCanvasBase

    return sorted(FigureCanvasBase.get_supported_filetypes())


def _new_file_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def write_atomically(path: str | Path, write: Callable[[Path], None]) -> Path:
    """Call ``write(tmp_path)`` and move the result to ``path``; clean up on failure.

    An error while writing names ``path``, never the hidden temporary file.
    """
    path = Path(path)
    target = Path(os.path.realpath(path))  # a link is followed, not replaced
    try:
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as err:
        raise OSError(err.errno, err.strerror, str(path)) from None
    os.close(fd)
    try:
        mode = target.stat().st_mode & 0o7777 if target.exists() else _new_file_mode()
        write(Path(tmp))
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except OSError as err:
        Path(tmp).unlink(missing_ok=True)
        if err.filename and str(err.filename) == tmp:
            raise OSError(err.errno, err.strerror, str(path)) from None
        raise
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
