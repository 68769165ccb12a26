"""Inference serving (layer 3, on simpy): continuous batching, paged KV cache, disaggregation,
capacity planning and edge estimates.

The pieces, each a module: ``requests`` (seeded arrivals, length specs, traces),
``deployment`` (a model on a GPU with TP and formats; the scheduler's limits), ``quantization``
(weight and KV formats), ``kv_cache`` (blocks that fit after weights and workspace),
``iteration`` (an iteration's operators, priced one by one), ``step_model`` (the same time,
fast), ``state`` and ``policies`` (who runs next: static, dynamic, continuous, chunked prefill;
preemption), ``engine`` (the simpy processes), ``router``, ``disagg`` (prefill and decode
pools), ``metrics``, ``plan`` (cheapest configurations under SLOs; its space, probes, search and
pruning in ``plan_space``, ``plan_probe``, ``plan_search``, ``plan_pruning``) and ``edge``.

    from gpuplan.sim.runtime.serving import SchedulerConfig, deployment, make_workload, simulate
    result = simulate(deployment("llama3-8b", "h100-sxm"), SchedulerConfig(),
                      make_workload(rate_per_s=10, n=1000, prompt_tokens=1024, output_tokens=256))
    result.summary["ttft_s"]["p99"]
"""

from gpuplan.sim.runtime.serving.deployment import Deployment, SchedulerConfig, deployment
from gpuplan.sim.runtime.serving.disagg import Disaggregation, simulate_disaggregated
from gpuplan.sim.runtime.serving.edge import edge_estimates
from gpuplan.sim.runtime.serving.engine import ServingResult, simulate
from gpuplan.sim.runtime.serving.kv_cache import kv_capacity
from gpuplan.sim.runtime.serving.plan import plan
from gpuplan.sim.runtime.serving.plan_space import SearchSpace, Slo
from gpuplan.sim.runtime.serving.requests import Workload, make_workload, read_trace
from gpuplan.sim.runtime.serving.step_model import Batch, StepModel, iteration_breakdown

__all__ = [
    "Batch",
    "Deployment",
    "Disaggregation",
    "SchedulerConfig",
    "SearchSpace",
    "ServingResult",
    "Slo",
    "StepModel",
    "Workload",
    "deployment",
    "edge_estimates",
    "iteration_breakdown",
    "kv_capacity",
    "make_workload",
    "plan",
    "read_trace",
    "simulate",
    "simulate_disaggregated",
]
