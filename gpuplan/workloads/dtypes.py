"""Numeric formats: their names as users type them and their storage size in bytes.

int4 stores two values per byte (0.5 bytes); fp8 is e4m3 or e5m2, one byte either way. The
block-scaled formats count their scales: NVFP4 half a byte a value and one byte a block of 16
(NVIDIA, "Introducing NVFP4", 2025), MXFP4 and MXFP8 one byte a block of 32 (OCP "Microscaling
Formats (MX) v1.0 Specification", sec. 5); ``hwmodels.formats`` prices them.
"""

from __future__ import annotations

from gpuplan.errors import GpuplanError, shown

DTYPE_BYTES: dict[str, float] = {
    "fp32": 4,
    "tf32": 4,  # stored as fp32; only the tensor-core arithmetic is reduced precision
    "bf16": 2,
    "fp16": 2,
    "fp8": 1,
    "int8": 1,
    "int4": 0.5,
    "nvfp4": 0.5 + 1 / 16,
    "mxfp4": 0.5 + 1 / 32,
    "mxfp8": 1 + 1 / 32,
}


def dtype_bytes(dtype: str) -> float:
    """Bytes per element of ``dtype``; an unknown name is an error listing the known ones."""
    try:
        return DTYPE_BYTES[dtype]
    except (KeyError, TypeError):  # TypeError: a list or a dict, which cannot be a key
        raise GpuplanError(
            f"dtype={shown(dtype)} is unknown: choose one of {', '.join(DTYPE_BYTES)}"
        ) from None
