"""The search's op-by-op pricing (``sim.parallel.op_memo``) gives the list-wise path's costs:
the same items, in the same order, with the same floats, for any shape."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from gpuplan.hwmodels.accelerators import get_accelerator
from gpuplan.hwmodels.efficiency import efficiency_for
from gpuplan.sim.parallel.compute import CostCache, micro_batch_costs
from gpuplan.sim.parallel.kernel_lists import CORE
from gpuplan.sim.parallel.op_memo import OpMemoCosts
from gpuplan.sim.parallel.shape import Shape
from gpuplan.sim.parallel.stage import TIME_FIELDS, _sac_s, shape_times
from gpuplan.workloads.presets import get_model

MODELS = ("llama3-70b", "gpt3-175b", "deepseek-v3", "mixtral-8x7b", "qwen2.5-72b")
GPUS = ("h100-sxm", "a100-sxm-80gb")


def _shapes():
    return st.builds(
        lambda mb, seq_exp, tp, cp, sp, ep, load, precision, attention: Shape(
            micro_batch=mb,
            seq=2**seq_exp,
            tp=tp,
            cp=cp,
            sp=sp,
            ep=ep,
            load=load,
            precision=precision,
            attention=attention,
        ),
        st.integers(1, 16),
        st.integers(8, 13),
        st.sampled_from((1, 2, 4, 8)),
        st.sampled_from((1, 2, 4)),
        st.booleans(),
        st.sampled_from((1, 2, 4, 8)),
        st.sampled_from((1.0, 1.25, 1.7)),
        st.sampled_from(("bf16", "fp8")),
        st.sampled_from(("flash", "unfused")),
    )


@pytest.mark.parametrize("impl", ["fused", "eager"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(model=st.sampled_from(MODELS), gpu=st.sampled_from(GPUS), shape=_shapes())
def test_op_by_op_pricing_equals_the_list_wise_costs(impl, model, gpu, shape):
    cfg = get_model(model)
    if not cfg.is_moe:
        shape = Shape(**{**{f: getattr(shape, f) for f in Shape.__slots__}, "ep": 1, "load": 1.0})
    acc = get_accelerator(gpu)
    assume(acc.supports(shape.precision))
    eff = efficiency_for(acc.key)
    want = micro_batch_costs(cfg, shape, acc, eff, impl)
    memo = OpMemoCosts(cfg, acc, eff, impl, {})
    got = memo(shape)
    assert got == want  # every item equal: names, classes, floats
    assert memo(shape) == want  # and again from the memo
    assert shape_times(got) == shape_times(want)


def test_the_cost_cache_prices_op_by_op_and_agrees_for_every_implementation():
    cfg = get_model("deepseek-v3")
    acc = get_accelerator("h100-sxm")
    eff = efficiency_for(acc.key)
    shapes = [
        Shape(micro_batch=mb, seq=4096, tp=tp, ep=ep, load=1.2, sp=True)
        for mb in (1, 2)
        for tp in (1, 8)
        for ep in (1, 8, 64)
    ]
    for impl in ("fused", "eager", "compiled"):
        cache = CostCache(cfg, acc, eff, impl)
        for shape in shapes:
            assert cache(shape) == micro_batch_costs(cfg, shape, acc, eff, impl), (impl, shape)
        assert (cache._by_op is not None) == (impl != "compiled")


def test_compiled_elementwise_is_refused_by_the_op_by_op_path():
    cfg = get_model("llama3-70b")
    acc = get_accelerator("h100-sxm")
    with pytest.raises(ValueError, match="impl='compiled'"):
        OpMemoCosts(cfg, acc, efficiency_for(acc.key), "compiled", {})


def _accessor_times(mbc) -> dict:
    """``shape_times`` as the ``Cost`` accessors give it, one sum per figure."""

    def get(cost, attr, **kw):
        if cost is None:
            return 0.0
        value = getattr(cost, attr)
        return value(**kw) if callable(value) else value

    layer = mbc.dense or mbc.moe
    return {
        "dense_fwd": get(mbc.dense, "fwd_s"),
        "dense_bwd": get(mbc.dense, "bwd_s"),
        "moe_fwd": get(mbc.moe, "fwd_s"),
        "moe_bwd": get(mbc.moe, "bwd_s"),
        "dense_core": get(mbc.dense, "fwd_time_s", prefix=CORE),
        "moe_core": get(mbc.moe, "fwd_time_s", prefix=CORE),
        "head_fwd": mbc.head.fwd_s,
        "head_bwd": mbc.head.bwd_s,
        "emb_fwd": mbc.embedding.fwd_s,
        "emb_bwd": mbc.embedding.bwd_s,
        "gemm_layer": layer.time_s(category="gemm"),
        "attn_layer": layer.time_s(category="attention") + layer.time_s(prefix=CORE),
        "host_dense": get(mbc.dense, "host_s"),
        "host_moe": get(mbc.moe, "host_s"),
        "host_head": mbc.head.host_s,
        "host_emb": mbc.embedding.host_s,
        "dense_sac": _sac_s(mbc.dense),
        "moe_sac": _sac_s(mbc.moe),
    }


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(model=st.sampled_from(MODELS), shape=_shapes(),
       impl=st.sampled_from(("fused", "eager", "compiled")))  # fmt: skip
def test_shape_times_in_one_pass_are_the_accessors_sums_bit_for_bit(model, shape, impl):
    cfg = get_model(model)
    acc = get_accelerator("h100-sxm")
    mbc = micro_batch_costs(cfg, shape, acc, efficiency_for(acc.key), impl)
    got, want = shape_times(mbc), _accessor_times(mbc)
    assert list(got) == list(TIME_FIELDS)
    assert got == want
    assert all(float(got[k]).hex() == float(want[k]).hex() for k in got)
