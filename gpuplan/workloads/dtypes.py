"""Numeric formats: their names as users type them and their storage size in bytes.

int4 stores two values per byte (0.5 bytes); fp8 is e4m3 or e5m2, one byte either way.
"""

from __future__ import annotations

from gpuplan.errors import GpuplanError

DTYPE_BYTES: dict[str, float] = {
    "fp32": 4,
    "tf32": 4,  # stored as fp32; only the tensor-core arithmetic is reduced precision
    "bf16": 2,
    "fp16": 2,
    "fp8": 1,
    "int8": 1,
    "int4": 0.5,
}


def dtype_bytes(dtype: str) -> float:
    """Bytes per element of ``dtype``; an unknown name is an error listing the known ones."""
    try:
        return DTYPE_BYTES[dtype]
    except KeyError:
        raise GpuplanError(
            f"dtype={dtype!r} is unknown: choose one of {', '.join(DTYPE_BYTES)}"
        ) from None
