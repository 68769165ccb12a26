"""The bulk kernel models (``hwmodels.bulk``) give, element by element, the same doubles as the
scalar models they mirror, on random shapes, devices, dtypes and efficiencies: one cost path."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplan.errors import GpuplanError
from gpuplan.hwmodels import bulk
from gpuplan.hwmodels.accelerators import get_accelerator, list_accelerators
from gpuplan.hwmodels.attention import attention_time
from gpuplan.hwmodels.collectives import collective_time
from gpuplan.hwmodels.efficiency import efficiency_for, queued
from gpuplan.hwmodels.elementwise import elementwise_time
from gpuplan.hwmodels.gemm import gemm_time
from gpuplan.hwmodels.price import price
from gpuplan.workloads.ops import Attention, Collective, Elementwise, Gemm, Memory

DEVICES = sorted(a.key for a in list_accelerators())
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FIELDS = ("compute_s", "memory_s", "launch_s")


@st.composite
def device_and_eff(draw):
    """A catalogue device with its efficiency: as fitted, in a busy stream, or after an L2
    flush (each branch of the models: boost clock, sustained clock, flushed write-back)."""
    key = draw(st.sampled_from(DEVICES))
    eff = efficiency_for(key)
    mode = draw(st.sampled_from(("isolated", "queued", "flushed")))
    if mode == "queued":
        eff = queued(eff)
    elif mode == "flushed":
        eff = dataclasses.replace(eff, l2_flushed=True)
    kernel = draw(st.sampled_from(("flash2", "flash3", "cudnn", "efficient")))
    eff = dataclasses.replace(eff, prefill_attention_kernel=kernel,
                              attention_kernel=draw(st.sampled_from(("flash2", "cudnn"))))  # fmt: skip
    return get_accelerator(key), eff


def scalar_or_error(fn, items):
    """The scalar model's times of ``items``, or the error it raises on one of them."""
    try:
        return [fn(x) for x in items]
    except GpuplanError as err:
        return err


def assert_same_or_raises(bulk_fn, scalar, *, same_message: bool = True) -> None:
    """Both models give the same doubles, or both refuse with the same error (the same
    message, unless the two meet the ops in a different order)."""
    if isinstance(scalar, GpuplanError):
        with pytest.raises(GpuplanError, match=re.escape(str(scalar)) if same_message else None):
            bulk_fn()
        return
    assert_same(bulk_fn(), scalar)


def assert_same(times: bulk.KernelTimes, scalar: list) -> None:
    for f in FIELDS:
        want = np.array([getattr(kt, f) for kt in scalar])
        np.testing.assert_array_equal(getattr(times, f), want, err_msg=f)
    np.testing.assert_array_equal(times.total_s, np.array([kt.total_s for kt in scalar]))


dims = st.integers(1, 70_000)
GEMMS = st.lists(st.tuples(dims, dims, st.integers(1, 30_000), st.integers(1, 8)),
                 min_size=1, max_size=12)  # fmt: skip


@SETTINGS
@given(dev=device_and_eff(), shapes=GEMMS, dtype=st.sampled_from(("bf16", "fp16", "fp32", "fp8")))
def test_bulk_gemm_equals_the_scalar_gemm_model(dev, shapes, dtype):
    acc, eff = dev
    m, n, k, count = (list(c) for c in zip(*shapes, strict=True))
    assert_same_or_raises(
        lambda: bulk.gemm_times(acc, m, n, k, dtype, eff, count),
        scalar_or_error(lambda s: gemm_time(acc, *s[:3], dtype, eff).scaled(s[3]), shapes),
    )


@st.composite
def attentions(draw):
    heads_kv = draw(st.sampled_from((1, 2, 8, 16)))
    seq_q = draw(st.sampled_from((1, 3, 64, 500, 2048, 4096)))
    return Attention(
        name="attn", batch=draw(st.integers(1, 16)), heads_q=heads_kv * draw(st.sampled_from((1, 4, 8))),
        heads_kv=heads_kv, seq_q=seq_q, seq_kv=seq_q + draw(st.sampled_from((0, 0, 1000))),
        head_dim=draw(st.sampled_from((64, 128, 192))), v_head_dim=draw(st.sampled_from((64, 128))),
        causal=draw(st.booleans()), pass_=draw(st.sampled_from(("fwd", "bwd"))),
        dtype=draw(st.sampled_from(("bf16", "fp8"))), count=draw(st.integers(1, 3)),
        window=draw(st.sampled_from((0, 0, 256))),
    )  # fmt: skip


@SETTINGS
@given(dev=device_and_eff(), ops=st.lists(attentions(), min_size=1, max_size=10))
def test_bulk_attention_equals_the_scalar_attention_model(dev, ops):
    acc, eff = dev
    assert_same_or_raises(lambda: bulk.attention_times(acc, ops, eff),
                          scalar_or_error(lambda op: attention_time(acc, op, eff), ops))  # fmt: skip


@SETTINGS
@given(dev=device_and_eff(), ops=st.lists(attentions(), min_size=1, max_size=4))
def test_bulk_attention_prices_the_math_backend_as_the_scalar_model_does(dev, ops):
    acc, eff = dev
    eff = dataclasses.replace(eff, prefill_attention_kernel="math", attention_kernel="math")
    assert_same_or_raises(lambda: bulk.attention_times(acc, ops, eff),
                          scalar_or_error(lambda op: attention_time(acc, op, eff), ops))  # fmt: skip


ELEMENTWISE = st.builds(
    Elementwise,
    name=st.just("ew"),
    op=st.sampled_from(("layernorm", "rmsnorm", "gelu", "silu_mul", "softmax", "add", "dropout_add")),
    tokens=st.integers(1, 300_000),
    hidden=st.sampled_from((64, 512, 1024, 4096, 8192, 16384)),
    pass_=st.sampled_from(("fwd", "bwd")),
    dtype=st.sampled_from(("bf16", "fp32")),
    count=st.integers(1, 4),
    impl=st.sampled_from(("fused", "eager")),
)  # fmt: skip
MEMORY = st.builds(
    Memory, name=st.just("mem"), op=st.sampled_from(("embedding", "cross_entropy", "copy", "fused")),
    bytes_moved=st.floats(0, 1e10), count=st.integers(1, 3),
)  # fmt: skip


@SETTINGS
@given(dev=device_and_eff(), ops=st.lists(st.one_of(ELEMENTWISE, MEMORY), min_size=1, max_size=12))
def test_bulk_elementwise_equals_the_scalar_elementwise_model(dev, ops):
    acc, eff = dev
    assert_same(
        bulk.elementwise_times(acc, ops, eff), [elementwise_time(acc, op, eff) for op in ops]
    )


@SETTINGS
@given(
    dev=device_and_eff(),
    op=st.sampled_from(("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")),
    pairs=st.lists(st.tuples(st.integers(1, 72), st.floats(0, 4e9)), min_size=1, max_size=10),
    algorithm=st.sampled_from(("ring", "tree", "auto")),
    link=st.sampled_from((None, 450e9, 900e9)),
)
def test_bulk_collectives_equal_the_scalar_one_host_model(dev, op, pairs, algorithm, link):
    acc, eff = dev
    if not (acc.scaleup_bytes_per_s or acc.pcie_bytes_per_s or link):
        link = 450e9
    world, nbytes = (list(c) for c in zip(*pairs, strict=True))
    times = bulk.collective_times(acc, op, world, nbytes, eff, link_bytes_per_s_override=link,
                                  algorithm=algorithm)  # fmt: skip
    want = [collective_time(acc, op, w, b, eff, link_bytes_per_s_override=link,
                            algorithm=algorithm) for w, b in pairs]  # fmt: skip
    assert_same(times, want)


@SETTINGS
@given(dev=device_and_eff(), ops=st.lists(
    st.one_of(ELEMENTWISE, MEMORY, attentions(),
              st.builds(Gemm, name=st.just("g"), m=dims, n=dims, k=dims,
                        dtype=st.sampled_from(("bf16", "fp8")), count=st.integers(1, 4)),
              st.builds(Collective, name=st.just("c"), op=st.just("all_reduce"),
                        world=st.integers(1, 8), bytes_per_rank=st.floats(0, 1e9))),
    min_size=1, max_size=16))  # fmt: skip
def test_price_ops_equals_price_of_each_op(dev, ops):
    acc, eff = dev
    if not acc.supports("fp8"):
        ops = [dataclasses.replace(o, dtype="bf16") if isinstance(o, Gemm) else o for o in ops]
    assert_same_or_raises(lambda: bulk.price_ops(ops, acc, eff),
                          scalar_or_error(lambda op: price(op, acc, eff), ops),
                          same_message=False)  # fmt: skip


def test_the_mirror_would_see_a_changed_scalar_model():
    """The comparison can fail: a GEMM one overhead slower is not the bulk GEMM."""
    acc, eff = get_accelerator("h100-sxm"), queued(efficiency_for("h100-sxm"))
    times = bulk.gemm_times(acc, [4096], [8192], [8192], "bf16", eff)
    slower = dataclasses.replace(eff, gemm_overhead_s=eff.gemm_overhead_s * 2)
    assert times.total_s[0] != gemm_time(acc, 4096, 8192, 8192, "bf16", slower).total_s
    assert times.total_s[0] == gemm_time(acc, 4096, 8192, 8192, "bf16", eff).total_s
