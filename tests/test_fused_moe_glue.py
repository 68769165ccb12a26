"""The serving engines' fused MoE glue: vLLM's and SGLang's Triton fused_moe and TensorRT-LLM's
CUTLASS MoE run their own few sorting kernels, not transformers' 16-kernel grouping."""

import dataclasses

import pytest

from gpuplan.errors import GpuplanError
from gpuplan.sim.runtime.serving.iteration import token_ops
from gpuplan.sim.runtime.serving.on_stack import stack_deployment
from gpuplan.sim.stacks import get_stack
from gpuplan.workloads.feed_forward import moe_block
from gpuplan.workloads.ops import Gemm
from gpuplan.workloads.presets import get_model

MIXTRAL = get_model("mixtral-8x7b")


def _ops(glue: str, tokens: int = 64) -> dict:
    return {op.name: op for op in moe_block(MIXTRAL, tokens=tokens, dtype="bf16", grouped=True,
                                            glue=glue)}


def test_each_serving_engine_runs_its_own_fused_moe_and_transformers_keeps_its_grouping():
    assert get_stack("vllm").moe_glue == "fused-moe-triton"
    assert get_stack("sglang").moe_glue == "fused-moe-triton"
    assert get_stack("trt-llm").moe_glue == "cutlass-moe"
    assert get_stack("hf-transformers").moe_glue == "transformers"
    for glue in ("none", "transformers"):
        assert _ops(glue)["expert_grouping"].count == 16


def test_vllm_fused_moe_gathers_rows_in_its_gemm_and_sorts_them_in_three_kernels():
    ops = _ops("fused-moe-triton")
    assert "expert_grouping" not in ops and "permute" not in ops
    assert ops["moe_align_block_size"].count == 3
    # moe_sum reads the 64 x 2 routed rows and writes the 64 tokens
    assert ops["unpermute"].tokens == (64 * 2 + 64) // 2


def test_trtllm_cutlass_moe_expands_its_rows_and_sorts_them_in_three_kernels():
    ops = _ops("cutlass-moe")
    assert "expert_grouping" not in ops and "permute" in ops
    assert ops["moe_sort_rows"].count == 3
    assert ops["permute"].tokens == 64 * 2


def test_the_fused_glue_costs_fewer_kernels_and_bytes_than_the_grouping():
    def kernels_and_bytes(ops):  # the memory-bound kernels (the GEMMs are the same)
        glue = [op for op in ops.values() if not isinstance(op, Gemm)]
        return sum(op.host_calls for op in glue), sum(op.bytes for op in glue)
    none_k, none_b = kernels_and_bytes(_ops("none", tokens=512))
    for glue in ("fused-moe-triton", "cutlass-moe"):
        k, b = kernels_and_bytes(_ops(glue, tokens=512))
        assert k < none_k and b < none_b


def test_a_served_decode_prices_the_engines_glue():
    for stack, sort in (("vllm", "moe_align_block_size"), ("trt-llm", "moe_sort_rows")):
        names = {op.name for op in token_ops(stack_deployment("mixtral-8x7b", "h200", stack),
                                             tokens=8)}
        assert sort in names and "expert_grouping" not in names


def test_an_unknown_glue_is_one_line_naming_the_valid_ones():
    with pytest.raises(GpuplanError, match="cutlass-moe"):
        dataclasses.replace(get_stack("vllm"), moe_glue="cutlass")
