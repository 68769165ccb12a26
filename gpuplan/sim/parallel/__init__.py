"""Layer 2, parallelization: multi-GPU training estimates and a vectorized strategy search (the
published training runs they are scored on are ``validate.published``).

- ``strategy``: ``Strategy`` (tp, pp, dp, cp, ep, sp, ZeRO/FSDP, micro/global batch, schedule,
  virtual stages, recomputation, precision, overlap options) and its validity rules (``degrees``:
  the degrees a model allows);
- ``topology``: ``Cluster`` presets (DGX A100/H100/H200, GB200 NVL72) and the placement of each
  parallel dimension on scale-up domains and the scale-out network; ``collectives``:
  hierarchical all-reduce, all-gather, reduce-scatter, all-to-all and point-to-point;
- ``shape``/``kernel_lists``/``kernel_costs``/``compute``/``stage``: one GPU's kernels for one
  micro-batch, priced by the one-GPU models (``op_memo``: a search's, in bulk);
- ``step_time``/``memory``/``evaluate``: closed forms of communication, pipeline bubble,
  optimizer and memory per GPU, for one strategy or a million at once (``model_facts``: the
  model's sizes they need);
- ``estimate``: ``estimate_training`` -> ``TrainEstimate`` (breakdown, MFU, HFU, memory, fits;
  ``step_items``: the breakdown's items);
- ``search``: every valid strategy evaluated with numpy, the fastest and the Pareto front
  (``space``: the strategies; ``shape_pricing``: their kernel shapes priced in bulk);
- ``cost``: time, GPU-hours, money (``data/prices.json``) and energy of a token budget;
  ``interruptions``: the time a budget loses to failures; ``fp8``: FP8's casts (layer 4).
"""

from gpuplan.sim.parallel.cost import RunBudget, run_budget
from gpuplan.sim.parallel.estimate import TrainEstimate, estimate_training
from gpuplan.sim.parallel.search import SearchResult, SearchSpace, search
from gpuplan.sim.parallel.strategy import (
    Strategy,
    auto_pp_layers,
    first_last_pp_layers,
    stage_layer_counts,
    validate,
)
from gpuplan.sim.parallel.topology import Cluster, cluster_for, get_cluster

__all__ = [
    "Strategy",
    "validate",
    "auto_pp_layers",
    "first_last_pp_layers",
    "stage_layer_counts",
    "Cluster",
    "get_cluster",
    "cluster_for",
    "TrainEstimate",
    "estimate_training",
    "SearchSpace",
    "SearchResult",
    "search",
    "RunBudget",
    "run_budget",
]
