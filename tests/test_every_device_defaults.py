"""Every command's default stack on every catalogued accelerator: it runs, or refuses in one line
naming what is missing (issue 23, item 3). And every ``--dtype`` listed for a kind is accepted."""

from __future__ import annotations

import contextlib
import io

import pytest

from gpuplan.cli import main
from gpuplan.cli.estimate_cmd import _dtype_help
from gpuplan.errors import GpuplanError
from gpuplan.hwmodels.accelerators import get_accelerator, list_accelerators
from gpuplan.hwmodels.architecture import ARCH
from gpuplan.sim.stacks import get_stack, resolved_attention, with_overrides

DEVICES = [a.key for a in list_accelerators()]
COMMANDS = {
    "prefill": "estimate prefill-step --model llama3-8b --gpu {g}",
    "decode": "estimate decode-step --model llama3-8b --gpu {g}",
    "serve": "serve --model llama3-8b --gpu {g} --rate 1 --requests 8 --prompt-tokens 128 "
             "--output-tokens 16 --no-timing",
    "edge": "serve edge --model llama3-8b --gpu {g}",
    "plan": "serve plan --model llama3-8b --gpu {g} --rate 1 --requests 8 --prompt-tokens 128 "
            "--output-tokens 16 --slo-ttft-s 2 --slo-tpot-s 0.2 --max-gpus 2 --no-timing "
            "--price-per-gpu-hour 2",
    "train": "train --model llama3-8b --gpu {g} --gpus 8 --zero 3 --no-timing",
}
# what a CUDA or ROCm GPU may still lack for a command: none but a GPU-to-GPU link, for training
# and a plan over 2 GPUs on the Jetson (a single module)
GPU_REFUSALS = {("jetson-agx-orin-64gb", "train"), ("jetson-agx-orin-64gb", "plan")}


def _run(argv: list[str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, err.getvalue()


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("gpu", DEVICES)
def test_default_stack_runs_or_refuses_in_one_line(gpu, command):
    rc, err = _run(COMMANDS[command].format(g=gpu).split())
    lines = err.strip().splitlines()
    if rc == 1:  # the stack runs; the plan does not fit the GPU's memory (said in one line)
        assert len(lines) == 1 and lines[0].startswith("gpuplan: does not fit: "), err
        return
    if gpu in ARCH and (gpu, command) not in GPU_REFUSALS:
        assert rc == 0, err  # a CUDA or ROCm GPU runs every command's default stack
        return
    assert rc in (0, 2), err
    if rc:
        assert len(lines) == 1 and lines[0].startswith("gpuplan: error: "), err
        assert "Traceback" not in err


def _kernels(stack: str, gpu: str):
    k = resolved_attention(get_stack(stack), get_accelerator(gpu))
    return k.prefill, k.train, k.decode


@pytest.mark.parametrize("gpu", ["b200", "gb200", "b300", "gb300"])
def test_blackwell_takes_the_engines_own_kernels_priced_as_cudnn(gpu):
    for stack in ("vllm", "sglang", "trt-llm", "gpuplan-server"):
        assert _kernels(stack, gpu) == ("cudnn", "cudnn", "cudnn"), stack
    with pytest.raises(GpuplanError, match="flash2 has no build for it"):
        _kernels("eager-2023", gpu)  # an engine of 2023 on FlashAttention-2: refused


def test_kernels_unchanged_where_they_already_ran():
    assert _kernels("sglang", "h100-sxm") == ("flash2", "flash2", "flashinfer")
    assert _kernels("gpuplan-server", "h200") == ("flash2", "flash2", "flash2")
    assert _kernels("vllm", "h200") == ("flash3", "flash3", "flash3")
    assert _kernels("sglang", "mi300x") == ("flash2", "flash2", "flash2")  # aiter, as FA2's
    assert _kernels("sglang", "mi355x") == ("flash2", "flash2", "flash2")  # gfx950: the same


def test_stacks_refuse_where_their_framework_does_not_build():
    with pytest.raises(GpuplanError, match="trt-llm cannot run on mi300x.*NVIDIA GPU.*--stack vllm"):
        _kernels("trt-llm", "mi300x")
    for stack in ("vllm", "sglang", "gpuplan-server"):
        with pytest.raises(GpuplanError, match="CUDA or ROCm GPU.*--stack pytorch"):
            _kernels(stack, "tpu-v5p")
    assert _kernels("pytorch", "tpu-v5p") == ("math", "math", "math")


def test_a_forced_kernel_holds_on_every_architecture():
    stack = with_overrides(get_stack("sglang"), attention_kernel="efficient")
    k = resolved_attention(stack, get_accelerator("b200"))
    assert (k.prefill, k.train, k.decode) == ("efficient",) * 3


def _dtypes_by_kind() -> dict[str, list[str]]:
    out = {}
    for part in _dtype_help().split("; "):
        kinds, dtypes = part.split(": ")
        for kind in kinds.split(", "):
            out[kind] = dtypes.split(", ")
    return out


CASES = {
    "gemm": "estimate gemm --m 256 --n 1024 --k 1024",
    "attention": "estimate attention --batch 1 --heads-q 8 --heads-kv 8 --seq-q 256 "
                 "--seq-kv 256 --head-dim 128",
    "collective": "estimate collective --op all_reduce --bytes 1048576 --world 8",
}


@pytest.mark.parametrize("kind", sorted(CASES))
def test_every_dtype_the_help_lists_for_a_kind_is_accepted(kind):
    dtypes = _dtypes_by_kind()[kind]
    assert dtypes
    for dtype in dtypes:  # b200 has every GEMM format listed, the block-scaled ones included
        rc, err = _run([*CASES[kind].split(), "--gpu", "b200", "--dtype", dtype])
        assert rc == 0, (dtype, err)


def test_gemm_lists_the_low_precision_formats_and_int4_runs_as_w4a16_everywhere():
    gemm = _dtypes_by_kind()["gemm"]
    assert {"fp4", "nvfp4", "mxfp4", "mxfp8", "int4"} <= set(gemm)
    rc, err = _run([*CASES["gemm"].split(), "--gpu", "h200", "--dtype", "int4"])
    assert rc == 0, err


@pytest.mark.parametrize("gpu", ["b300", "gb300", "mi355x", "tpu-v6e", "tpu-v7"])
def test_the_new_gpus_have_their_architecture_and_tpus_none(gpu):
    expected = {"b300": "sm_103", "gb300": "sm_103", "mi355x": "gfx950"}.get(gpu)
    assert ARCH.get(gpu) == expected


@pytest.mark.parametrize("gpu", ["h200", "b200", "jetson-agx-orin-64gb"])
def test_every_weight_and_kv_format_listed_is_accepted(gpu):
    for kv in ("bf16", "fp8"):
        rc, err = _run(["serve", "edge", "--model", "llama3-8b", "--gpu", gpu,
                        "--weight-dtype", "all", "--kv-dtype", kv])
        assert rc == 0, err
