"""The GPU architecture of each catalogue device, as the kernels that run on it see it.

NVIDIA's "CUDA GPUs - Compute Capability" table: H100 and H200 (GH100) are sm_90, A100 (GA100)
sm_80, L40S and L4 (AD10x) sm_89, Jetson AGX Orin sm_87, B200 and GB200 sm_100; AMD's ROCm "GPU
hardware specifications": MI300X and MI325X are gfx942. A device not listed runs neither CUDA
nor ROCm kernels (Gaudi, TPU, Apple). Which attention kernels run where (``sim.stacks.kernels``)
and which published kernel shares of peak transfer between devices (``efficiency``) read this
one table.
"""

from __future__ import annotations

ARCH = {
    "h200": "sm_90",
    "h100-sxm": "sm_90",
    "h100-sxm-hbm2e": "sm_90",
    "h100-pcie": "sm_90",
    "a100-sxm-80gb": "sm_80",
    "a100-sxm-40gb": "sm_80",
    "a100-pcie-80gb": "sm_80",
    "b200": "sm_100",
    "gb200": "sm_100",
    "l40s": "sm_89",
    "l4": "sm_89",
    "jetson-agx-orin-64gb": "sm_87",
    "mi300x": "gfx942",
    "mi325x": "gfx942",
}
