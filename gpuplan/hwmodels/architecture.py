"""The GPU architecture of each catalogue device, as the kernels that run on it see it.

NVIDIA's "CUDA GPUs - Compute Capability" table: H100 and H200 (GH100) are sm_90, A100 (GA100)
sm_80, L40S and L4 (AD10x) sm_89, Jetson AGX Orin sm_87, B200 and GB200 sm_100, B300 and GB300
(Blackwell Ultra) sm_103 (CUTLASS Blackwell documentation: "B300 Tensor Core GPU 10.3 (SM103)");
AMD's ROCm "GPU hardware specifications": MI300X and MI325X are gfx942, MI355X (CDNA4) gfx950
(the same table: "MI355X CDNA4 gfx950"). A device not listed runs neither CUDA nor ROCm
kernels (Gaudi, TPU, Apple). Which attention kernels run where (``sim.stacks.kernels``), which
block-scaled formats a device computes in (``formats``) and which published kernel shares of peak
transfer between devices (``efficiency``) read this one table.
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
    "b300": "sm_103",
    "gb300": "sm_103",
    "l40s": "sm_89",
    "l4": "sm_89",
    "jetson-agx-orin-64gb": "sm_87",
    "mi300x": "gfx942",
    "mi325x": "gfx942",
    "mi355x": "gfx950",
}
# The datacenter Blackwell architectures: what runs on sm_100 runs on sm_103 (CUTLASS builds
# both from its sm100a kernels; vLLM and FlashInfer test ``device_capability.major == 10``).
BLACKWELL = ("sm_100", "sm_103")
# CDNA4 (MI355X): the architecture with AMD's block-scaled (OCP MX) MFMA (ROCm "GPU hardware
# specifications": MI355X is gfx950; the CDNA 4 ISA's scaled MFMA on MXFP4/MXFP6/MXFP8).
CDNA4 = ("gfx950",)
