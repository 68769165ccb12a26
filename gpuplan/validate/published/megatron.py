"""Published training runs reproduced: Narayanan et al. 2021 (Tables 1 and 2) and Korthikanti et
al. 2022 (Tables 4 and 5, Figure 1), predicted by gpuplan and compared with what was measured.

The runs, their sources and every stated or assumed setting are in ``data/published_runs.json``.
The A100 comes from its datasheet (``hwmodels/data/accelerators.csv``) and the DGX A100 preset
(``topology``); its kernel efficiencies are borrowed from the H200 fit (``efficiency_for``: the
device has no fit of its own), so nothing here is tuned to these runs.
"""

from __future__ import annotations

import functools
import json
from importlib import resources

import numpy as np
import pandas as pd

from gpuplan.hwmodels.efficiency import efficiency_for
from gpuplan.sim.parallel.collectives import links
from gpuplan.sim.parallel.compute import CostCache
from gpuplan.sim.parallel.estimate import estimate_training, shape_of
from gpuplan.sim.parallel.kernel_lists import CORE
from gpuplan.sim.parallel.step_time import tp_comm_phases
from gpuplan.sim.parallel.strategy import Strategy
from gpuplan.sim.parallel.topology import get_cluster, spans
from gpuplan.units import GiB
from gpuplan.workloads.model import ModelConfig
from gpuplan.workloads.presets import get_model

SEQ = 2048
CLUSTER = "dgx-a100"
MEMORY_METRICS = ("activations_gib", "weights_gradients_optimizer_gib")
TARGET_PCT = 10.0


@functools.cache
def published_runs() -> dict:
    """The data file: sources, model definitions and runs."""
    path = resources.files("gpuplan.validate.published") / "data" / "published_runs.json"
    return json.loads(path.read_text())


def run_model(key: str) -> ModelConfig:
    models = published_runs()["models"]
    if key in models:
        fields = {k: v for k, v in models[key].items()}
        return ModelConfig(**fields)
    return get_model(key)


def paper_flops(cfg: ModelConfig, global_batch: int, seq: int) -> float:
    """FLOPs per iteration as Narayanan et al. 2021 count them (eq. 3, recomputation included)."""
    h, layers, v = cfg.d_model, cfg.n_layers, cfg.vocab_size
    return 96 * global_batch * seq * layers * h * h * (1 + seq / (6 * h) + v / (16 * layers * h))


def layer_times(cfg, st: Strategy, cluster, seq: int, eff, costs) -> tuple[float, float]:
    """(forward, backward) seconds of one block and micro-batch with its TP/SP collectives."""
    cost = costs(shape_of(st, cfg, seq)).dense
    sp_ = spans(cluster, np.asarray(st.tp), 1, 1, 1, 1)
    act = st.micro_batch * seq * cfg.d_model * 2
    fwd_c, bwd_c, rec_c = (
        float(x)
        for x in tp_comm_phases(
            links(cluster, eff), sp_["tp"], act, np.asarray(st.tp), np.asarray(st.sp)
        )
    )
    bwd = cost.bwd_s + bwd_c
    if st.recompute == "full":
        bwd += cost.fwd_s + rec_c
    elif st.recompute == "selective":
        bwd += cost.fwd_time_s(prefix=CORE)
    return cost.fwd_s + fwd_c, bwd


def predict_run(run: dict, cluster, eff, costs: dict) -> float:
    """gpuplan's value of the run's metric."""
    cfg = run_model(run["model"])
    st = Strategy(**run["strategy"])
    cache = costs.setdefault(run["model"], CostCache(cfg, cluster.accelerator, eff))
    metric = run["metric"]
    if metric.startswith("layer_"):
        fwd, bwd = layer_times(cfg, st, cluster, SEQ, eff, cache)
        return fwd if metric == "layer_forward_s" else bwd
    est = estimate_training(
        cfg, st, cluster=cluster, seq=SEQ, gpus=run["gpus"], eff=eff, costs=cache
    )
    mem = est.breakdown.memory_bytes
    if metric == "achieved_tflops_per_gpu":
        return paper_flops(cfg, st.global_batch, SEQ) / est.step_time_s / run["gpus"] / 1e12
    if metric == "iteration_time_s":
        return est.step_time_s
    if metric == "activations_gib":
        return mem["activations"] / GiB
    if metric == "weights_gradients_optimizer_gib":
        return (mem["weights"] + mem["gradients"] + mem["optimizer"]) / GiB
    raise ValueError(f"unknown metric {metric!r}")


def reproduce(eff=None) -> pd.DataFrame:
    """One row per published number: measured, predicted, signed and absolute % error."""
    cluster = get_cluster(CLUSTER)
    eff = eff or efficiency_for(cluster.gpu)
    costs: dict = {}
    rows = []
    for run in published_runs()["runs"]:
        predicted = predict_run(run, cluster, eff, costs)
        rows.append(
            {
                "id": run["id"],
                "source": run["source"],
                "metric": run["metric"],
                "kind": "memory" if run["metric"] in MEMORY_METRICS else "time",
                "gpus": run["gpus"],
                "layout": Strategy(**run["strategy"]).label,
                "measured": run["measured"],
                "predicted": predicted,
            }
        )
    frame = pd.DataFrame(rows)
    frame["error_pct"] = 100 * (frame["predicted"] - frame["measured"]) / frame["measured"]
    frame["abs_error_pct"] = frame["error_pct"].abs()
    return frame


def summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Median and largest absolute error by kind (time, memory) and by source."""
    by_kind = frame.groupby("kind")["abs_error_pct"].agg(["count", "median", "max"])
    by_kind["target_pct"] = TARGET_PCT
    by_kind["met"] = by_kind["median"] <= TARGET_PCT
    by_source = frame.groupby(["kind", "source"])["abs_error_pct"].agg(["count", "median", "max"])
    return pd.concat(
        {
            "kind": by_kind.reset_index().rename(columns={"kind": "group"}),
            "source": by_source.reset_index().rename(columns={"source": "group"}),
        },
        names=["by"],
    ).reset_index(level=0)
