"""The search's bulk pricing of shapes (``op_memo.ShapeKernels`` + ``shape_time_table``) gives,
bit for bit, ``stage.shape_times`` of the one-shape path (``compute.micro_batch_costs``), for any
shapes, in any number and order, whatever the elementwise implementation."""

from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplan.hwmodels.accelerators import get_accelerator
from gpuplan.hwmodels.efficiency import efficiency_for, queued
from gpuplan.sim.parallel.compute import micro_batch_costs
from gpuplan.sim.parallel.op_memo import KernelTable, ShapeKernels, shape_time_table
from gpuplan.sim.parallel.shape import Shape
from gpuplan.sim.parallel.stage import TIME_FIELDS, shape_times
from gpuplan.workloads.presets import get_model

MODELS = ("llama3-70b", "gpt3-175b", "deepseek-v3", "mixtral-8x7b", "llama3-8b")
GPUS = ("h100-sxm", "a100-sxm-80gb", "h200")

SHAPES = st.builds(
    Shape,
    micro_batch=st.integers(1, 8),
    seq=st.sampled_from((1024, 2048, 4096)),
    tp=st.sampled_from((1, 2, 8)),
    cp=st.sampled_from((1, 2, 4)),
    sp=st.booleans(),
    ep=st.sampled_from((1, 4, 8)),
    load=st.sampled_from((1.0, 1.3)),
    precision=st.sampled_from(("bf16", "fp8")),
    attention=st.sampled_from(("flash", "unfused")),
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    model=st.sampled_from(MODELS),
    gpu=st.sampled_from(GPUS),
    impl=st.sampled_from(("fused", "eager", "compiled")),
    busy=st.booleans(),
    shapes=st.lists(SHAPES, min_size=1, max_size=5),
)
def test_bulk_shape_times_equal_the_one_shape_path_bit_for_bit(model, gpu, impl, busy, shapes):
    cfg = get_model(model)
    acc = get_accelerator(gpu)
    eff = efficiency_for(acc.key)
    eff = queued(eff) if busy else eff
    if not cfg.is_moe:
        shapes = [dataclasses.replace(s, ep=1, load=1.0) for s in shapes]
    if not acc.supports("fp8"):
        shapes = [dataclasses.replace(s, precision="bf16") for s in shapes]
    kernels = ShapeKernels(cfg, impl, KernelTable(acc, eff))
    got = shape_time_table([kernels.parts(s) for s in shapes], kernels.table, eff)
    for i, shape in enumerate(shapes):
        want = shape_times(micro_batch_costs(cfg, shape, acc, eff, impl))
        assert {f: float(got[f][i]) for f in TIME_FIELDS} == want, (shape, impl)


def test_a_second_batch_reuses_the_kernels_it_already_priced():
    cfg = get_model("llama3-70b")
    acc = get_accelerator("h100-sxm")
    eff = queued(efficiency_for(acc.key))
    kernels = ShapeKernels(cfg, "fused", KernelTable(acc, eff))
    one = Shape(micro_batch=1, seq=4096, tp=8)
    first = shape_time_table([kernels.parts(one)], kernels.table, eff)
    n = len(kernels.table)
    two = [Shape(micro_batch=1, seq=4096, tp=8, sp=True), one]
    again = shape_time_table([kernels.parts(s) for s in two], kernels.table, eff)
    assert len(kernels.table) > n  # sp splits the norms: new kernels
    assert {f: again[f][1] for f in TIME_FIELDS} == {f: first[f][0] for f in TIME_FIELDS}
    assert again["dense_fwd"][0] != again["dense_fwd"][1]
    assert np.all(again["moe_fwd"] == 0.0) and np.all(again["host_moe"] == 0.0)
