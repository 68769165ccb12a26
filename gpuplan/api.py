"""The names a notebook or script user types, in one place: ``from gpuplan.api import *``.

A facade only: every name is defined in its own module and re-exported here unchanged.
``gpuplan/__init__.py`` stays import-light; this module pulls in pandas and matplotlib.
"""

from gpuplan.errors import GpuplanError
from gpuplan.hwmodels.accelerators import Accelerator, get_accelerator, list_accelerators
from gpuplan.hwmodels.efficiency import Efficiency, efficiency_for
from gpuplan.hwmodels.price import price
from gpuplan.plots import breakdown_bar, operator_points, predicted_vs_measured, roofline
from gpuplan.sim.estimate.breakdown import Breakdown
from gpuplan.sim.estimate.composite import decode_step_breakdown
from gpuplan.sim.estimate.whole_model import model_breakdown, train_step_breakdown
from gpuplan.sim.parallel import Cluster, Strategy, estimate_training, get_cluster, run_budget
from gpuplan.sim.parallel import search as search_training
from gpuplan.sim.runtime.cluster import run_scenario, simulate_cluster
from gpuplan.sim.runtime.serving import deployment, edge_estimates, make_workload, simulate
from gpuplan.sim.runtime.serving import plan as plan_serving
from gpuplan.sim.runtime.serving.requests import with_images
from gpuplan.sim.runtime.timeline import simulate_step
from gpuplan.validate.record_prediction import predict_breakdown
from gpuplan.workloads.images import Images
from gpuplan.workloads.memory import (
    kv_cache_bytes_per_token,
    layer_activation_bytes,
    training_state_bytes,
)
from gpuplan.workloads.model import ModelConfig
from gpuplan.workloads.operators import backward_of, layer_forward, model_forward, training_flops
from gpuplan.workloads.params import count_params
from gpuplan.workloads.presets import get_model, list_models
from gpuplan.workloads.vision import image_tokens

__all__ = [
    # models (layer 1)
    "ModelConfig",
    "get_model",
    "list_models",
    "count_params",
    "layer_forward",
    "backward_of",
    "model_forward",
    "training_flops",
    "kv_cache_bytes_per_token",
    "layer_activation_bytes",
    "training_state_bytes",
    "Images",
    "image_tokens",
    # hardware (layer 5)
    "Accelerator",
    "get_accelerator",
    "list_accelerators",
    "Efficiency",
    "efficiency_for",
    "price",
    # predictions
    "Breakdown",
    "predict_breakdown",
    "model_breakdown",
    "train_step_breakdown",
    "decode_step_breakdown",
    # many GPUs (layer 2) and over time (layer 3)
    "Strategy",
    "Cluster",
    "get_cluster",
    "estimate_training",
    "search_training",
    "run_budget",
    "simulate_step",
    "deployment",
    "make_workload",
    "with_images",
    "simulate",
    "plan_serving",
    "edge_estimates",
    "simulate_cluster",
    "run_scenario",
    # figures
    "roofline",
    "operator_points",
    "breakdown_bar",
    "predicted_vs_measured",
    # errors
    "GpuplanError",
]
