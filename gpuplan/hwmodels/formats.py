"""Block-scaled low-precision formats: the bytes a tensor takes in each (values and scales), the
tensor-core rate that multiplies them, and the devices that have that path.

Formats, named as users type them:

- ``nvfp4``: FP4 E2M1 values, one FP8 E4M3 scale per block of 16 consecutive values and one FP32
  scale per tensor (NVIDIA, "Introducing NVFP4 for Efficient and Accurate Low-Precision
  Inference", 2025; Transformer Engine docs, "Using FP8 and FP4 with Transformer Engine":
  NVFP4BlockScaling). 0.5 + 1/16 bytes a value, plus 4 bytes a tensor. Blackwell tensor cores
  only (sm_100, sm_103: CUTLASS's block-scaled ``nvf4`` MMA); ``fp4`` is the same format (the name
  ``serve --weight-dtype`` used first).
- ``mxfp4``: FP4 E2M1 values, one E8M0 (power-of-two) scale per block of 32 (OCP "Microscaling
  Formats (MX) v1.0 Specification", 2023, sec. 5: MXFP4, k = 32, scale E8M0). 0.5 + 1/32 bytes a
  value. Blackwell (CUTLASS ``mxf4``) and CDNA4 (MI355X: the CDNA 4 ISA's scaled MFMA on MXFP4).
- ``mxfp8``: FP8 E4M3 values, one E8M0 scale per block of 32 (the same spec: MXFP8). 1 + 1/32
  bytes a value. Blackwell and CDNA4; Hopper has no block-scaled MMA (Transformer Engine:
  MXFP8BlockScaling "requires Blackwell").

The rate a block-scaled GEMM runs at is the device's dense peak of its value type (``fp4`` or
``fp8`` in the catalogue): the scales ride in the MMA instruction (CUTLASS ``sm100`` block-scaled
kernels), so they cost bytes, not FLOPs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuplan.errors import GpuplanError
from gpuplan.hwmodels.architecture import ARCH, BLACKWELL, CDNA4


@dataclass(frozen=True, slots=True, kw_only=True)
class BlockFormat:
    """A block-scaled format: ``value_bits`` a value, one ``scale_bytes`` scale a ``block``."""

    name: str
    value_bits: int
    block: int  # values sharing one scale
    scale_bytes: float  # bytes of one block scale (E4M3 or E8M0: 1)
    tensor_scale_bytes: float  # a per-tensor scale on top (NVFP4: one FP32)
    rate_dtype: str  # the catalogue peak it multiplies at
    archs: tuple[str, ...]  # the architectures with a tensor-core path for it

    @property
    def bytes_per_value(self) -> float:
        """Stored bytes a value, its share of the block scale included."""
        return self.value_bits / 8 + self.scale_bytes / self.block

    def tensor_bytes(self, n_values: int) -> float:
        """Bytes of a tensor of ``n_values`` values: values, block scales, the tensor's scale."""
        blocks = math.ceil(n_values / self.block)
        return n_values * self.value_bits / 8 + blocks * self.scale_bytes + self.tensor_scale_bytes


NVFP4 = BlockFormat(name="nvfp4", value_bits=4, block=16, scale_bytes=1, tensor_scale_bytes=4,
                    rate_dtype="fp4", archs=BLACKWELL)  # fmt: skip
MXFP4 = BlockFormat(name="mxfp4", value_bits=4, block=32, scale_bytes=1, tensor_scale_bytes=0,
                    rate_dtype="fp4", archs=(*BLACKWELL, *CDNA4))  # fmt: skip
MXFP8 = BlockFormat(name="mxfp8", value_bits=8, block=32, scale_bytes=1, tensor_scale_bytes=0,
                    rate_dtype="fp8", archs=(*BLACKWELL, *CDNA4))  # fmt: skip
BLOCK_FORMATS = {f.name: f for f in (NVFP4, MXFP4, MXFP8)}
ALIASES = {"fp4": "nvfp4"}  # serve --weight-dtype fp4 meant NVFP4 first


def block_format(name: str) -> BlockFormat:
    """The format ``name`` (an alias resolved); an unknown name is a one-line error."""
    key = ALIASES.get(name, name)
    if key not in BLOCK_FORMATS:
        raise GpuplanError(f"format={name!r} is not a block-scaled format: choose one of "
                           f"{', '.join((*BLOCK_FORMATS, *ALIASES))}")  # fmt: skip
    return BLOCK_FORMATS[key]


def has_format(acc, name: str) -> bool:
    """Whether ``acc``'s tensor cores multiply ``name`` at its value type's rate."""
    fmt = block_format(name)
    return ARCH.get(acc.key) in fmt.archs and acc.supports(fmt.rate_dtype)


def device_formats(acc) -> list[str]:
    """The block-scaled formats ``acc`` computes in."""
    return [name for name in BLOCK_FORMATS if has_format(acc, name)]


def check_format(acc, name: str, *, field: str = "dtype", others: tuple[str, ...] = (),
                 listed: tuple[str, ...] | None = None) -> None:
    """A one-line GpuplanError unless ``acc`` computes in ``name``: it names the device, its
    architecture, what the format needs, and the formats the device does have (``others``, the
    caller's plain formats it runs, then its block formats; or exactly ``listed``)."""
    if has_format(acc, name):
        return
    fmt = block_format(name)
    arch = ARCH.get(acc.key) or "no CUDA/ROCm architecture"
    needs = ("Blackwell's NVFP4 tensor cores (16-value blocks, E4M3 scales)" if fmt is NVFP4
             else "block-scaled (MX) tensor cores: Blackwell or CDNA4")  # fmt: skip
    has = list(listed) if listed is not None else [*others, *device_formats(acc)]
    raise GpuplanError(f"{field}={name!r} cannot run on {acc.key} ({arch}): {fmt.name} needs "
                       f"{needs}; {acc.key} computes in {', '.join(has) or 'none of them'}")  # fmt: skip
