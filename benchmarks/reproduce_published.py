"""Published training runs against gpuplan's predictions, with the errors per source.

Narayanan et al. 2021 (Table 1, and the PTD-P rows of Table 2: achieved teraFLOP/s per GPU on
32 to 3,072 A100s) and Korthikanti et al. 2022 (Table 4: one layer's forward and backward time;
Table 5: iteration times; Figure 1: memory per GPU). Sources and settings:
``gpuplan/validate/published/data/published_runs.json``. Targets: median absolute error <= 10% on
throughput and time, <= 10% on memory.

Then every row of ``gpuplan/validate/published/data/published_training.csv`` (MosaicML llm-foundry,
NVIDIA Megatron-Bridge, torchtitan, Llama 3 Table 4, MT-NLG, BigScience BLOOM; sources and model
definitions in ``published_training_sources.json``), one table per source in the metric the
source prints, the rows gpuplan cannot express with the reason, and the median and p90 absolute
error per source with its held-out flag (seeded split by source). The same tables:
``gpuplan train --reproduce``.
"""

from __future__ import annotations

import sys

from gpuplan.cli import main

if __name__ == "__main__":
    sys.exit(main(["train", "--reproduce"]))
