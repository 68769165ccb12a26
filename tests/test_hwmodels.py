"""Layer 5: kernel time models. Properties physics gives, and the regimes each model claims."""

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.errors import GpuplanError
from gpuplan.hwmodels.accelerators import get_accelerator
from gpuplan.hwmodels.attention import decode_splits_keys
from gpuplan.hwmodels.collectives import collective_time
from gpuplan.hwmodels.efficiency import efficiency_for, prior_efficiency, queued
from gpuplan.hwmodels.gemm import gemm_time
from gpuplan.hwmodels.launch import launch_cost
from gpuplan.hwmodels.price import price
from gpuplan.workloads.ops import Attention

H200 = get_accelerator("h200")
EFF = prior_efficiency()
dims = st.integers(1, 20_000)


@settings(max_examples=60, deadline=None)
@given(m=dims, n=dims, k=dims)
def test_more_memory_bandwidth_is_never_slower(m, n, k):
    faster = replace(H200, hbm_bytes_per_s=2 * H200.hbm_bytes_per_s)
    assert (
        gemm_time(faster, m, n, k, "bf16", EFF).total_s
        <= gemm_time(H200, m, n, k, "bf16", EFF).total_s
    )


@settings(max_examples=60, deadline=None)
@given(m=dims, n=dims, k=dims)
def test_a_gemm_never_beats_its_datasheet_roofline(m, n, k):
    t = gemm_time(H200, m, n, k, "bf16", EFF).total_s
    floor = max(
        2 * m * n * k / H200.peak("bf16"), (m * k + k * n + m * n) * 2 / H200.hbm_bytes_per_s
    )
    assert t >= floor


aligned = st.integers(1, 2_500).map(lambda x: 8 * x)


@settings(max_examples=60, deadline=None)
@given(m=dims, n=aligned, k=aligned)
def test_a_bigger_gemm_is_never_faster(m, n, k):
    bigger = gemm_time(H200, m, n, 2 * k, "bf16", EFF).total_s
    assert bigger >= gemm_time(H200, m, n, k, "bf16", EFF).total_s


def _decode(batch: int, heads_q: int, heads_kv: int, seq_kv: int) -> Attention:
    """One query per sequence against a KV cache of ``seq_kv`` positions, head dim 128, bf16."""
    return Attention(
        name="a",
        batch=batch,
        heads_q=heads_q,
        heads_kv=heads_kv,
        seq_q=1,
        seq_kv=seq_kv,
        head_dim=128,
        v_head_dim=128,
        causal=False,
        pass_="fwd",
        dtype="bf16",
    )


def test_an_unaligned_leading_dimension_falls_back_to_slower_kernels():
    aligned_s = gemm_time(H200, 4096, 4096, 4096, "bf16", EFF).total_s
    unaligned_s = gemm_time(H200, 4096, 4096, 4095, "bf16", EFF).total_s
    assert unaligned_s > 2 * aligned_s


def test_a_single_token_gemm_is_bandwidth_bound_and_a_large_one_compute_bound():
    assert gemm_time(H200, 1, 4096, 4096, "bf16", EFF).bound == "memory"
    assert gemm_time(H200, 8192, 8192, 8192, "bf16", EFF).bound == "compute"


def test_fp8_gemms_are_faster_than_bf16_when_compute_bound():
    bf16 = gemm_time(H200, 8192, 8192, 8192, "bf16", EFF).total_s
    fp8 = gemm_time(H200, 8192, 8192, 8192, "fp8", EFF).total_s
    assert fp8 < bf16


def test_fp32_small_m_runs_on_a_32_row_simt_tile_not_a_64_row_wgmma_tile():
    def compute_s(m, dtype):
        return gemm_time(H200, m, 28672, 4096, dtype, EFF).compute_s

    assert compute_s(8, "fp32") == compute_s(32, "fp32") < compute_s(64, "fp32")
    assert compute_s(8, "bf16") == compute_s(64, "bf16")  # wgmma: 64 rows at least


def test_a_tiles_prologue_and_epilogue_are_not_priced_at_the_cuda_core_rate():
    # k = 8: the fixed cost of a tile dominates; fp32 math is 15x slower than bf16, its memory
    # work is not
    fp32 = gemm_time(H200, 128, 128, 8, "fp32", EFF).compute_s
    assert fp32 < 2 * gemm_time(H200, 128, 128, 8, "bf16", EFF).compute_s


def test_a_gemm_timed_after_an_l2_flush_writes_back_at_most_the_l2():
    flushed = replace(EFF, l2_flushed=True)

    def extra_s(n):
        isolated = gemm_time(H200, 1, n, 8192, "bf16", flushed).memory_s
        return isolated - gemm_time(H200, 1, n, 8192, "bf16", queued(flushed)).memory_s

    bw = H200.hbm_bytes_per_s * EFF.gemm_hbm_fraction
    assert extra_s(1024) == pytest.approx((1024 + 1) * 8192 * 2 / bw)  # its reads: 17 MB
    assert extra_s(57344) == pytest.approx(H200.l2_bytes / bw)  # 940 MB: the whole L2


def test_a_gemm_timed_without_a_flush_writes_nothing_back():
    unflushed = gemm_time(H200, 1, 57344, 8192, "bf16", EFF).memory_s
    flushed = gemm_time(H200, 1, 57344, 8192, "bf16", replace(EFF, l2_flushed=True))
    assert unflushed < flushed.memory_s


def test_a_dtype_the_chip_lacks_is_an_error_listing_what_it_has():
    with pytest.raises(GpuplanError, match="fp8"):
        gemm_time(get_accelerator("a100-sxm-80gb"), 128, 128, 128, "fp8", EFF)


def test_decode_attention_is_priced_by_the_kv_cache_it_reads():
    op = _decode(8, 32, 8, 8192)
    t = price(op, H200, EFF)
    assert t.compute_s < t.memory_s and t.memory_s >= op.bytes / H200.hbm_bytes_per_s  # memory-bound


@pytest.mark.parametrize(
    ("batch", "heads_q", "heads_kv", "splits"),
    [
        (4, 32, 32, True),  # 128 blocks: below 0.8 x 2 x 132 SMs
        (8, 32, 32, False),  # 256 blocks
        (16, 32, 8, True),  # GQA: a group's query heads share a block, 16 x 8 blocks
        (32, 32, 8, False),
    ],
)
def test_decode_splits_the_keys_as_flash_attention_2_does_on_an_h200(
    batch, heads_q, heads_kv, splits
):
    # kernel names seen on an H200: data/decode_probe_h200/kernels.json
    op = _decode(batch, heads_q, heads_kv, 4096)
    assert decode_splits_keys(H200, op) is splits


@settings(max_examples=40, deadline=None)
@given(context=st.integers(1, 32_000), extra=st.integers(1, 32_000))
def test_decode_attention_never_gets_faster_as_the_context_grows(context, extra):
    op = _decode(4, 32, 8, context)
    longer = replace(op, seq_kv=context + extra)
    assert price(longer, H200, EFF).total_s >= price(op, H200, EFF).total_s


def test_a_one_gpu_all_reduce_costs_nothing():
    assert collective_time(H200, "all_reduce", 1, 1e9, EFF).total_s == 0


@settings(max_examples=40, deadline=None)
@given(nbytes=st.floats(1e3, 4e9), world=st.integers(2, 8))
def test_an_all_reduce_costs_about_a_reduce_scatter_plus_an_all_gather(nbytes, world):
    ar = collective_time(H200, "all_reduce", world, nbytes, EFF).memory_s
    rs = collective_time(H200, "reduce_scatter", world, nbytes, EFF).memory_s
    ag = collective_time(H200, "all_gather", world, nbytes / world, EFF).memory_s
    assert ar == pytest.approx(rs + ag)


def test_an_unknown_collective_is_an_error_listing_the_known_ones():
    with pytest.raises(GpuplanError, match="broadcast.*all_reduce"):
        collective_time(H200, "broadcast", 2, 1e6, EFF)


def test_cuda_graphs_hide_the_cpu_cost_of_many_short_kernels():
    eager = launch_cost(1000, 1e-3, EFF, cuda_graph=False).total_s
    graph = launch_cost(1000, 1e-3, EFF, cuda_graph=True).total_s
    assert graph < eager


def test_unmeasured_devices_say_whose_efficiency_they_borrow():
    eff = efficiency_for("b200")  # the H200 fit is committed, so B200 borrows it
    assert "fit on h200" in eff.source and "not measured on b200" in eff.source
    assert "not measured" not in efficiency_for("h200").source


def test_a_borrowed_fit_prices_flashattention2_at_its_architectures_published_share():
    from gpuplan.hwmodels.attention import attention_time
    from gpuplan.hwmodels.efficiency import FA2_PEAK_SHARE, calibrated_efficiency
    from gpuplan.workloads.ops import Attention

    ref = calibrated_efficiency("h200")
    for same in ("h200", "h100-sxm", "h100-pcie", "b200"):  # Hopper, or no published share
        eff = efficiency_for(same)
        assert (eff.attn_fwd_fraction, eff.attn_bwd_fraction) == (
            ref.attn_fwd_fraction, ref.attn_bwd_fraction)
    a100 = get_accelerator("a100-sxm-80gb")
    eff = queued(efficiency_for("a100-sxm-80gb"))
    for pass_ in ("fwd", "bwd"):  # FA2's benchmark plateau: head dim 128, 16k tokens, BF16
        op = Attention(name="attn", batch=1, heads_q=16, heads_kv=16, seq_q=16384,
                       seq_kv=16384, head_dim=128, v_head_dim=128, causal=False, pass_=pass_,
                       dtype="bf16")  # fmt: skip
        share = op.flops / attention_time(a100, op, eff).compute_s / a100.peak("bf16")
        assert share == pytest.approx(FA2_PEAK_SHARE["ampere"][pass_], rel=0.12)


def test_a_tree_all_reduce_wins_small_messages_and_the_ring_wins_large_ones():
    ring_small = collective_time(H200, "all_reduce", 8, 1e3, EFF, algorithm="ring").total_s
    tree_small = collective_time(H200, "all_reduce", 8, 1e3, EFF, algorithm="tree").total_s
    ring_big = collective_time(H200, "all_reduce", 8, 1e9, EFF, algorithm="ring").total_s
    tree_big = collective_time(H200, "all_reduce", 8, 1e9, EFF, algorithm="tree").total_s
    auto_small = collective_time(H200, "all_reduce", 8, 1e3, EFF, algorithm="auto").total_s
    assert tree_small < ring_small and ring_big < tree_big and auto_small == tree_small


def test_an_unknown_collective_algorithm_is_an_error():
    with pytest.raises(GpuplanError, match="algorithm='star'"):
        collective_time(H200, "all_reduce", 2, 1e6, EFF, algorithm="star")


@pytest.mark.parametrize(
    ("hidden", "family"), [(1024, "softmax_warp"), (1025, "softmax"), (32000, "softmax")]
)
def test_short_row_softmax_is_priced_as_pytorchs_warp_softmax_kernel(hidden, family):
    from gpuplan.hwmodels.elementwise import kernel_family
    from gpuplan.workloads.ops import Elementwise

    op = Elementwise(name="s", op="softmax", tokens=8, hidden=hidden, dtype="bf16", pass_="fwd")
    assert kernel_family(op) == family


def test_each_backward_op_costs_the_autograd_engine_its_per_node_work():
    eff = replace(EFF, autograd_op_s=5e-5)
    fwd = launch_cost(40, 0.0, eff, cuda_graph=False, host_calls=40)
    bwd = launch_cost(40, 0.0, eff, cuda_graph=False, host_calls=40, backward_calls=30)
    assert bwd.host_exposed_s - fwd.host_exposed_s == pytest.approx(30 * 5e-5)
    graphed = launch_cost(40, 0.0, eff, cuda_graph=True, backward_calls=30)
    assert graphed.total_s == launch_cost(40, 0.0, eff, cuda_graph=True).total_s


def test_cudnn_decode_streams_the_cache_at_its_own_rate_with_no_split():
    op = _decode(64, 32, 8, 8192)  # no split for FlashAttention-2 either: one rate each
    flash = price(op, H200, EFF)
    cudnn_eff = replace(EFF, attention_kernel="cudnn", attn_decode_cudnn_hbm_fraction=0.8)
    cudnn = price(op, H200, cudnn_eff)
    assert cudnn.memory_s == pytest.approx(op.bytes / (H200.hbm_bytes_per_s * 0.8))
    assert cudnn.total_s < flash.total_s


def test_a_backward_on_an_inference_only_attention_kernel_is_an_error():
    from gpuplan.hwmodels.attention import attention_time

    eff = replace(EFF, prefill_attention_kernel="flashinfer")
    op = Attention(name="attn", batch=1, heads_q=16, heads_kv=16, seq_q=4096, seq_kv=4096,
                   head_dim=128, v_head_dim=128, causal=True, pass_="bwd", dtype="bf16")
    with pytest.raises(GpuplanError, match="'flashinfer' has no backward .*train with flash2"):
        attention_time(H200, op, eff)


@pytest.mark.parametrize("key", ["", "  ", None, 200])
def test_an_empty_or_non_string_device_key_is_a_one_line_error(key):
    with pytest.raises(GpuplanError, match=r"accelerator key .* is invalid: give a non-empty"):
        get_accelerator(key)
    with pytest.raises(GpuplanError, match=r"device key .* is invalid: give a non-empty"):
        efficiency_for(key)
