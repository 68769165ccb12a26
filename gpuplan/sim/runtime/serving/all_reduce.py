"""Which all-reduce kernel a serving engine runs for a tensor-parallel reduction of one size.

- ``nccl``: NCCL's ring or tree (``hwmodels.collectives.collective_time``);
- ``custom`` (vLLM, SGLang): the custom all-reduce over CUDA IPC peer memory for messages under
  ``CUSTOM_MAX_BYTES`` on 2, 4, 6 or 8 fully connected GPUs (vllm
  vllm/distributed/device_communicators/custom_all_reduce.py: ``_SUPPORTED_WORLD_SIZES``,
  ``max_size=8192 * 1024``, ``should_custom_ar``; SGLang's copy of it in
  python/sglang/srt/distributed/device_communicators/custom_all_reduce.py), one-shot on 2 GPUs,
  under 512 KiB on up to 4 and under 256 KiB on up to 8, else two-shot (vllm
  csrc/custom_all_reduce.cuh ``REDUCE_CASE``); larger messages go to NCCL;
- ``fusion`` (TensorRT-LLM): its own all-reduce kernels, one-shot up to ``kOneShotMaxToken`` =
  128 tokens, two-shot above (cpp/tensorrt_llm/kernels/communicationKernels/
  allReduceFusionKernels.cu ``use_oneshot``), for messages that fit the IPC workspace: 16 MB on
  up to 2 GPUs, 8 MB on more (cpp/tensorrt_llm/common/customAllReduceUtils.h
  ``getMaxRequiredWorkspaceSize``, "MUST BE KEPT IN SYNC with tensorrt_llm/plugin/plugin.py",
  commit 005b299); a larger message goes to NCCL, as the same file's SM90 strategy table has it
  (e.g. TP8, hidden 8192: NCCL from 512 tokens, 8.4 MB in bf16).

All of them need the GPUs joined by a scale-up link (NVLink, Infinity Fabric); over PCIe the
engines fall back to NCCL.
"""

from __future__ import annotations

from gpuplan.errors import check_choice
from gpuplan.workloads.ops import Collective

ALL_REDUCES = ("nccl", "custom", "fusion")
CUSTOM_MAX_BYTES = 8192 * 1024  # vLLM CustomAllreduce(max_size=8192 * 1024)
CUSTOM_WORLDS = (2, 4, 6, 8)  # vLLM CustomAllreduce._SUPPORTED_WORLD_SIZES
FUSION_WORLDS = (2, 4, 8, 16)  # TensorRT-LLM allreduce_fusion_op's NRanks cases
ONE_SHOT_MAX_TOKENS = 128  # TensorRT-LLM kOneShotMaxToken


def fusion_workspace_bytes(world: int) -> float:
    """TensorRT-LLM's all-reduce workspace per rank (``getMaxRequiredWorkspaceSize``)."""
    return 16e6 if world <= 2 else 8e6
# vLLM csrc/custom_all_reduce.cuh REDUCE_CASE: one-shot below these message sizes
ONE_SHOT_MAX_BYTES_4 = 512 * 1024  # on up to 4 GPUs
ONE_SHOT_MAX_BYTES_8 = 256 * 1024  # on up to 8 GPUs


def check_all_reduce(value: str) -> None:
    check_choice("all_reduce", value, ALL_REDUCES)


def all_reduce_kernel(dep, *, world: int, nbytes: float, tokens: int) -> str:
    """The kernel (``Collective.kernel``) the deployment's engine runs for one all-reduce of
    ``nbytes`` per rank over ``tokens`` rows (module docstring)."""
    rule = dep.all_reduce
    if rule == "nccl" or not dep.acc.scaleup_bytes_per_s:
        return "nccl"
    if rule == "fusion":
        if world not in FUSION_WORLDS or nbytes > fusion_workspace_bytes(world):
            return "nccl"
        return "one_shot" if tokens <= ONE_SHOT_MAX_TOKENS else "two_shot"
    if world not in CUSTOM_WORLDS or nbytes >= CUSTOM_MAX_BYTES:
        return "nccl"
    one = (world == 2 or (world <= 4 and nbytes < ONE_SHOT_MAX_BYTES_4)
           or nbytes < ONE_SHOT_MAX_BYTES_8)
    return "one_shot" if one else "two_shot"


def tp_all_reduce(dep, name: str, *, nbytes: float, tokens: int, count: int = 1) -> Collective:
    """A tensor-parallel all-reduce as the deployment's engine runs it."""
    kernel = all_reduce_kernel(dep, world=dep.tp, nbytes=nbytes, tokens=tokens)
    return Collective(name=name, op="all_reduce", world=dep.tp, bytes_per_rank=nbytes,
                      count=count, kernel=kernel)
