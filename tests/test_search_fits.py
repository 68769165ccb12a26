"""The search times only the strategies that fit; its frame is every strategy's full evaluation
(``evaluate.evaluate``, memory and time of all) filtered by what fits, row for row."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from gpuplan.hwmodels.efficiency import efficiency_for
from gpuplan.sim.parallel.estimate import training_efficiency
from gpuplan.sim.parallel.evaluate import evaluate
from gpuplan.sim.parallel.model_facts import model_facts
from gpuplan.sim.parallel.shape_pricing import price_shapes
from gpuplan.sim.parallel.stage import TIME_FIELDS
from gpuplan.sim.parallel.step_time import step_total
from gpuplan.sim.parallel.topology import get_cluster
from gpuplan.sim.stacks import get_stack
from gpuplan.sim.stacks.training import layout_mask, runtime_of
from gpuplan.sim.sweep import InProcess
from gpuplan.workloads.presets import get_model

S = importlib.import_module("gpuplan.sim.parallel.search")


def every_row(cfg, cluster, gpus, gb, seq, space):
    """(step time, peak memory, fits) of every strategy, by ``evaluate`` on all of them."""
    acc, stack = cluster.accelerator, get_stack(space.stack)
    eff = training_efficiency(stack, efficiency_for(acc.key), acc)
    s = S.enumerate_space(cfg, gpus, gb, seq, acc, space)
    keep = layout_mask(runtime_of(stack), s["tp"], s["pp"], s["zero"], s["cp"])
    s = S._rows(s, keep)  # the rows the stack runs, as the search keeps them
    index, table, _n = price_shapes(cfg, s, seq, acc, eff, space, InProcess(), lambda x, *a: x)
    _c, terms, mem = evaluate(
        model_facts(cfg), s, {f: table[f][index] for f in TIME_FIELDS},
        kinds=S.search_layouts(cfg, np.unique(s["pp"])).take(s["pp"]), cluster=cluster, acc=acc,
        eff=eff, seq=seq, state_precision=space.state_precision, attention=space.attention,
        optimizer=stack.optimizer, grads_persist=stack.grads_persist, runtime=runtime_of(stack),
    )  # fmt: skip
    peak = sum(mem.values())
    return step_total(terms), peak, peak <= acc.hbm_bytes


@pytest.mark.parametrize(
    ("model", "gpus", "stack"),
    [("llama3-8b", 16, "megatron-te"), ("mixtral-8x7b", 16, "megatron-te"),
     ("llama3-8b", 16, "fsdp2")],
)  # fmt: skip
def test_the_search_frame_is_every_row_evaluated_then_filtered_by_what_fits(model, gpus, stack):
    cfg, cluster = get_model(model), get_cluster("dgx-h100")
    space = S.SearchSpace(stack=stack, precision=("bf16",) if cfg.is_moe else ("bf16", "fp8"))
    step, peak, fits = every_row(cfg, cluster, gpus, 64, 4096, space)
    assert 0 < fits.sum() < len(fits)  # some strategies fit, some do not
    got = S.search(cfg, cluster=cluster, gpus=gpus, global_batch=64, seq=4096, space=space)
    assert got.evaluated == len(fits) and got.fitting == int(fits.sum())
    order = np.argsort(step[fits], kind="stable")  # the search sorts by time, stably
    assert np.array_equal(got.frame["step_time_s"].to_numpy(), step[fits][order])
    assert np.array_equal(got.frame["peak_memory_per_gpu_bytes"].to_numpy(), peak[fits][order])
