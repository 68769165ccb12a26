"""Serving engines' tensor-parallel all-reduce kernels (``sim.runtime.serving.all_reduce``) and
TensorRT-LLM's CUDA-graph decode."""

import pytest

from gpuplan.errors import GpuplanError
from gpuplan.hwmodels.accelerators import get_accelerator
from gpuplan.hwmodels.collectives import collective_time, custom_all_reduce_time
from gpuplan.hwmodels.efficiency import efficiency_for
from gpuplan.sim.runtime.serving.all_reduce import all_reduce_kernel
from gpuplan.sim.runtime.serving.deployment import deployment
from gpuplan.sim.runtime.serving.iteration import Batch, iteration_breakdown, token_ops
from gpuplan.sim.runtime.serving.on_stack import stack_deployment
from gpuplan.workloads.ops import Collective

H200 = get_accelerator("h200")
EFF = efficiency_for("h200")
KIB = 1024


def _dep(rule: str, tp: int = 8, gpu: str = "h200"):
    return deployment("llama3-70b", gpu, tp=tp, all_reduce=rule)


@pytest.mark.parametrize("world,nbytes,kernel", [
    (2, 4 * 1024 * KIB, "one_shot"),      # 2 GPUs: always one-shot
    (4, 500 * KIB, "one_shot"), (4, 600 * KIB, "two_shot"),
    (8, 200 * KIB, "one_shot"), (8, 300 * KIB, "two_shot"),
    (8, 8192 * KIB, "nccl"),              # at vLLM's max_size: NCCL
])
def test_vllm_custom_all_reduce_picks_the_kernel_its_source_picks(world, nbytes, kernel):
    assert all_reduce_kernel(_dep("custom", tp=world), world=world, nbytes=nbytes,
                             tokens=1) == kernel


def test_trt_llm_fusion_is_one_shot_up_to_128_tokens():
    dep = _dep("fusion")
    assert all_reduce_kernel(dep, world=8, nbytes=1, tokens=128) == "one_shot"
    assert all_reduce_kernel(dep, world=8, nbytes=1, tokens=129) == "two_shot"


@pytest.mark.parametrize("world,tokens,kernel", [
    (8, 256, "two_shot"), (8, 512, "nccl"),   # hidden 8192 in bf16: 4.2 MB fits 8 MB, 8.4 MB not
    (4, 512, "nccl"), (2, 512, "two_shot"),   # 2 GPUs: a 16 MB workspace
    (2, 1024, "nccl"),
])
def test_trt_llm_sends_a_message_larger_than_its_workspace_to_nccl(world, tokens, kernel):
    """customAllReduceUtils.h: 16 MB on up to 2 GPUs, 8 MB on more; its SM90 strategy table
    picks NCCL at the same sizes (TP8 hidden 8192 from 512 tokens, TP2 from 1024)."""
    dep = _dep("fusion", tp=world)
    assert all_reduce_kernel(dep, world=world, nbytes=tokens * 8192 * 2, tokens=tokens) == kernel


def test_without_a_scale_up_link_engines_fall_back_to_nccl():
    dep = deployment("llama3-8b", "l40s", tp=2, all_reduce="custom")
    assert all_reduce_kernel(dep, world=2, nbytes=1024, tokens=1) == "nccl"


def test_a_collective_between_nodes_on_a_device_without_a_nic_figure_is_one_line():
    from gpuplan.hwmodels.price import price

    op = Collective(name="ep dispatch", op="all_to_all", world=16, bytes_per_rank=1e6,
                    link="scaleout")
    with pytest.raises(GpuplanError, match="l40s has no scale-out bandwidth in the catalogue"):
        price(op, get_accelerator("l40s"), efficiency_for("l40s"))
    assert price(op, H200, EFF).total_s > 0


def test_a_small_custom_all_reduce_beats_nccl_and_a_one_rank_one_is_free():
    nbytes = 8192 * 2  # one token of Llama-3-70B in bf16
    nccl = collective_time(H200, "all_reduce", 8, nbytes, EFF).total_s
    one = custom_all_reduce_time(H200, 8, nbytes, EFF, "one_shot").total_s
    assert one < nccl
    assert custom_all_reduce_time(H200, 1, nbytes, EFF, "one_shot").total_s == 0.0


def test_two_shot_reads_less_than_one_shot_on_large_messages():
    big = 4 * 1024 * KIB
    one = custom_all_reduce_time(H200, 8, big, EFF, "one_shot")
    two = custom_all_reduce_time(H200, 8, big, EFF, "two_shot")
    assert two.memory_s == pytest.approx(one.memory_s * 2 / 8)  # 2(n-1)/n against n-1


def test_an_unknown_custom_kernel_is_refused():
    with pytest.raises(GpuplanError, match="kernel='ring'"):
        custom_all_reduce_time(H200, 8, 1024, EFF, "ring")


def test_an_unknown_all_reduce_rule_is_refused():
    with pytest.raises(GpuplanError, match="all_reduce"):
        _dep("mpi")


@pytest.mark.parametrize("stack,kernel", [("vllm", "one_shot"), ("sglang", "one_shot"),
                                          ("trt-llm", "one_shot")])
def test_each_engine_reduces_a_decode_token_with_its_own_kernel(stack, kernel):
    dep = stack_deployment("llama3-70b", "h100-sxm", stack, tp=8)
    ops = [op for op in token_ops(dep, tokens=1) if isinstance(op, Collective)]
    assert [(op.kernel, op.count) for op in ops] == [(kernel, 2)]


def test_trt_llm_replays_a_graph_for_a_decode_at_batch_one():
    dep = stack_deployment("llama3-70b", "h100-sxm", "trt-llm", tp=8)
    bd = iteration_breakdown(dep, Batch(decode_seqs=1, decode_kv_tokens=1001))
    ops = {i.op for i in bd.items}
    assert "graph replay gaps" in ops and "host issue time not hidden" not in ops
    mixed = iteration_breakdown(dep, Batch(prefill=((100, 0, 1),), decode_seqs=1,
                                           decode_kv_tokens=1001))
    assert "host issue time not hidden" in {i.op for i in mixed.items}  # prefill runs eagerly
