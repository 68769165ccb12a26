"""``--calibration FILE`` on every pricing command: price with one's own fit.

A fit is what ``gpuplan validate calibrate --data DIR --device KEY --out FILE`` writes from a
folder of measurement records; it holds one device's parameters and is refused for any other
(``hwmodels.efficiency.efficiency_from_file``). Without the flag a command prices with
``efficiency_for(device)``: the device's committed fit, else the H200's borrowed, else the prior.
Every output names the one it used (``efficiency_source`` in JSON, a line in the tables).
"""

from __future__ import annotations

from typing import Any

from gpuplan.errors import GpuplanError

HELP = (
    "price with this fit (a file from `gpuplan validate calibrate --out FILE`) instead of "
    "the committed one; it must be a fit for the priced device"
)


def add_calibration_option(parser: Any) -> None:
    """Add ``--calibration FILE`` to a pricing command."""
    parser.add_argument("--calibration", metavar="FILE", help=HELP)


def efficiency_from_args(args: Any, device_key: str) -> Any:
    """The ``Efficiency`` a command prices ``device_key`` with: ``--calibration``'s fit if given,
    else the built-in one."""
    from gpuplan.hwmodels.efficiency import efficiency_for, efficiency_from_file

    path = getattr(args, "calibration", None)
    if path is None:
        return efficiency_for(device_key)
    if not str(path).strip():
        raise GpuplanError(
            f"--calibration {path!r} is empty: give a fit file written by "
            "`gpuplan validate calibrate --out FILE`, or leave the flag out"
        )
    return efficiency_from_file(path, device_key)


def efficiency_line(source: str) -> str:
    """The table line that says which fit priced the numbers above or below it."""
    return f"hardware efficiency: {source}"
