"""The cheap valid calls ``benchmarks/fuzz_api.py`` starts from: one (or two) per public name of
``gpuplan.api``, each well under a second, small models (llama3.2-3b) and short runs.

``base_calls(folder)`` builds them (``folder`` receives the one file a call reads, a tiny cluster
scenario); tests/test_fuzz_api_calls.py checks every one is still valid.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, NamedTuple

TINY_SCENARIO = """name: tiny
horizon_days: 1
cluster: {preset: dgx-h100, nodes: 1}
failures: {enabled: false}
jobs:
  - {id: a, model: megatron-gpt-1.7b, gpus: 8, steps: 10}
"""


class Call(NamedTuple):
    name: str  # the public name in gpuplan.api
    args: tuple
    kwargs: dict[str, Any]


def _fields(obj) -> dict[str, Any]:
    """A frozen dataclass's fields as keyword arguments (to call its constructor again)."""
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj) if f.init}


def shared() -> dict[str, Any]:
    """The valid objects the calls pass around (also hostile values of the wrong kind)."""
    import gpuplan.api as api

    model = api.get_model("llama3.2-3b")
    return {
        "model": model,
        "acc": api.get_accelerator("h200"),
        "eff": api.efficiency_for("h200"),
        "cluster": api.get_cluster("dgx-h100"),
        "ops": api.layer_forward(model, batch=1, seq=128),
        "strategy": api.Strategy(dp=8, global_batch=8),
    }


def base_calls(folder: Path) -> list[Call]:
    import numpy as np
    import pandas as pd

    import gpuplan.api as api
    from gpuplan.sim.estimate.breakdown import Item
    from gpuplan.sim.parallel import SearchSpace as TrainSpace
    from gpuplan.sim.runtime.cluster import ClusterConfig, JobSpec
    from gpuplan.sim.runtime.serving.deployment import SchedulerConfig
    from gpuplan.sim.runtime.serving.plan_space import SearchSpace, Slo

    s = shared()
    m, acc, eff, cl, ops, st = (s[k] for k in ("model", "acc", "eff", "cluster", "ops",
                                                "strategy"))  # fmt: skip
    (folder / "tiny.yaml").write_text(TINY_SCENARIO)
    workload = api.make_workload(rate_per_s=1, n=8, prompt_tokens=64, output_tokens=8)
    small = dict(name="tiny", n_layers=2, d_model=256, n_heads=4, n_kv_heads=2, d_ff=512,
                 vocab_size=1000)  # fmt: skip
    item = Item(layer="block", category="gemm", op="qkv", phase="fwd", time_s=1e-4, flops=1e9)
    rows = pd.DataFrame({"kind": ["gemm", "gemm"], "metric": ["time_s", "time_s"],
                         "measured": [1e-4, 2e-3], "predicted": [1.1e-4, 1.8e-3]})  # fmt: skip
    plan_space = SearchSpace(tps=(1,), formats=(("bf16", "bf16"),), max_seqs=(8,), ratios=())
    train_space = TrainSpace(recompute=("none",), zero=(0,), schedules=("1f1b",), max_cp=1)
    lengths = (np.full(20, 64), np.full(20, 8))
    gemm = {"m": 64, "n": 64, "k": 64, "dtype": "bf16"}
    job = JobSpec(id="a", arrival_s=0.0, gpus=8, step_time_s=1.0, steps=10)
    return [
        Call("ModelConfig", (), small),
        Call("get_model", ("llama3.2-3b",), {}),
        Call("list_models", (), {}),
        Call("count_params", (m,), {}),
        Call("layer_forward", (m,), {"batch": 1, "seq": 128}),
        Call("backward_of", (ops,), {}),
        Call("model_forward", (m,), {"batch": 1, "seq": 128}),
        Call("training_flops", (m,), {"batch": 1, "seq": 128}),
        Call("kv_cache_bytes_per_token", (m,), {}),
        Call("layer_activation_bytes", (m,), {"tokens": 128}),
        Call("training_state_bytes", (3e9,), {}),
        Call("Images", (), {"count": 1, "width": 224, "height": 224}),
        Call("image_tokens", (api.get_model("qwen2-vl-7b"),
                              api.Images(count=1, width=224, height=224)), {}),  # fmt: skip
        Call("Accelerator", (), _fields(acc)),
        Call("get_accelerator", ("h200",), {}),
        Call("list_accelerators", (), {}),
        Call("Efficiency", (), _fields(eff)),
        Call("efficiency_for", ("h200",), {}),
        Call("price", (ops[0], acc, eff), {}),
        Call("Breakdown", (), {"items": (item,)}),
        Call("predict_breakdown", ("gemm", "h200", gemm), {}),
        Call("model_breakdown", ("train_step", acc, eff, "llama3.2-3b",
                                 {"seq": 128, "micro_batch": 1}), {}),  # fmt: skip
        Call("model_breakdown", ("decode_step", acc, eff, m, {"batch": 1, "context": 128}), {}),
        Call("train_step_breakdown", (acc, eff, m), {"micro_batch": 1, "seq": 128}),
        Call("decode_step_breakdown", (acc, eff, m),
             {"batch": 1, "context": 128, "cuda_graph": False}),  # fmt: skip
        Call("Strategy", (), {"dp": 8, "global_batch": 8}),
        Call("Cluster", (), _fields(cl)),
        Call("get_cluster", ("dgx-h100",), {}),
        Call("estimate_training", (m, st), {"cluster": cl, "seq": 2048}),
        Call("search_training", (m,), {"cluster": cl, "gpus": 8, "global_batch": 8,
                                       "seq": 2048, "space": train_space}),  # fmt: skip
        Call("run_budget", (), {"tokens": 1e12, "tokens_per_s": 1e6, "gpus": 8, "acc": acc}),
        Call("simulate_step", (m, st), {"cluster": cl, "seq": 2048}),
        Call("deployment", ("llama3.2-3b", "h200"), {}),
        Call("make_workload", (), {"rate_per_s": 1.0, "n": 8, "prompt_tokens": 64,
                                   "output_tokens": 8}),  # fmt: skip
        Call("with_images", (workload,), {"images": 1, "image_tokens": 64}),
        Call("simulate", (api.deployment("llama3.2-3b", "h200"), SchedulerConfig(max_seqs=8),
                          workload), {}),  # fmt: skip
        Call("plan_serving", ("llama3.2-3b", "h200"),
             {"rate_per_s": 1.0, "slo": Slo(ttft_s=1.0, tpot_s=0.1), "lengths": lengths,
              "requests": 20, "space": plan_space, "top": 1}),  # fmt: skip
        Call("edge_estimates", ("llama3.2-3b", "l4"), {"batches": (1,)}),
        Call("simulate_cluster", (ClusterConfig(cluster=cl, nodes=1), [job]), {}),
        Call("run_scenario", (str(folder / "tiny.yaml"),), {}),
        Call("roofline", (ops, acc, eff), {}),
        Call("operator_points", (ops, acc, eff), {}),
        Call("breakdown_bar", (api.predict_breakdown("gemm", "h200", gemm),), {}),
        Call("predicted_vs_measured", (rows,), {}),
    ]
