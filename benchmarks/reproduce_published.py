"""Published Megatron-LM training runs against gpuplan's predictions, with the median errors.

Narayanan et al. 2021 (Table 1, and the PTD-P rows of Table 2: achieved teraFLOP/s per GPU on
32 to 3,072 A100s) and Korthikanti et al. 2022 (Table 4: one layer's forward and backward time;
Table 5: iteration times; Figure 1: memory per GPU). Sources and settings:
``gpuplan/sim/parallel/data/published_runs.json``. Targets: median absolute error <= 10% on
throughput and time, <= 10% on memory. The same table: ``gpuplan train --reproduce``.
"""

from __future__ import annotations

import sys

from gpuplan.cli import main

if __name__ == "__main__":
    sys.exit(main(["train", "--reproduce"]))
