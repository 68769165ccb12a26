"""serve plan without pandas: its rows as dicts give the same configurations as the DataFrames,
a probe's verdict on the engine's numpy columns is the verdict on their frame, and the plan's
import path (the CLI module, the planner, the price file) loads no pandas."""

import math
import subprocess
import sys

import numpy as np
import pandas as pd

from gpuplan.sim.runtime.serving.plan import plan
from gpuplan.sim.runtime.serving.plan_probe import verdict
from gpuplan.sim.runtime.serving.plan_space import SearchSpace, Slo


def test_best_rows_are_the_best_frames_records():
    lengths = (np.full(100, 1024), np.full(100, 128))
    space = SearchSpace(tps=(1, 2), formats=(("bf16", "bf16"), ("fp8", "fp8")), max_seqs=(64,),
                        ratios=((1, 1),), max_gpus=16)  # fmt: skip
    got = plan("llama3-8b", "h100-sxm", rate_per_s=100.0, lengths=lengths, requests=100,
               slo=Slo(ttft_s=0.3, tpot_s=0.025, percentile=90), space=space, top=3)  # fmt: skip
    assert len(got.best_rows) == min(3, sum(r["meets"] for r in got.rows)) > 1
    assert got.best_rows == got.best.to_dict("records")
    assert "speculative" not in got.best_rows[0] and "above_top_cost" not in got.best_rows[0]
    costs = [r["usd_per_m_output_tokens"] for r in got.best_rows]
    assert costs == sorted(costs)
    assert len(got.evaluated) == len(got.rows)


def test_the_verdict_on_numpy_columns_is_the_verdict_on_the_frame():
    rng = np.random.default_rng(3)
    n = 200
    cols = {"status": np.array(["finished"] * n, dtype=object),
            "ttft_s": rng.exponential(0.1, n), "tpot_s": rng.exponential(0.01, n)}  # fmt: skip
    cols["tpot_s"][::7] = math.nan  # one-token outputs
    slo = Slo(ttft_s=0.3, tpot_s=0.03, percentile=90)
    assert verdict(cols, slo) == verdict(pd.DataFrame(cols), slo)
    assert verdict(cols, slo)[0] in (True, False)
    cols["status"][-1] = "rejected"
    assert verdict(cols, slo) == (False, math.inf, math.inf)


def test_the_plan_path_loads_no_pandas():
    code = ("import sys, gpuplan.cli.serve_cmd, gpuplan.sim.runtime.serving.plan as p; "
            "from gpuplan.sim.parallel.cost import price_for; price_for('h100-sxm'); "
            "print('pandas' in sys.modules)")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
