"""Bounds on what a user may ask for: the largest sizes the models price meaningfully.

Each bound is far above any real case (so none refuses a real one) and low enough that a typo
such as 10^30 GPUs or tokens is an error naming the value and the range, not an overflow, a
silent wrong number or a simulation that never ends. The command line (``gpuplan.cli.argtypes``)
and the library's entry points (``gpuplan.sim.estimate.inputs``) both read them from here.
"""

from __future__ import annotations

# A tensor dimension or a token count of one sequence or batch. cuBLAS takes m, n, k as a C
# ``int`` (cublasGemmEx, https://docs.nvidia.com/cuda/cublas/#cublasgemmex), so no one kernel of
# the kind priced here has a dimension above 2^31 - 1.
MAX_DIM = 2**31 - 1

# GPUs in one job or cluster: 2^20 = 1,048,576, five times the largest cluster announced by 2025
# (xAI Colossus, 200,000 GPUs: https://x.ai/colossus).
MAX_GPUS = 2**20

# Layers of one model: 2^14 = 16,384, over 100x the deepest preset (Megatron GPT 1T, 128 layers,
# Narayanan et al. 2021, Table 1).
MAX_LAYERS = 2**14

# Requests in one serving simulation and seeds in one ``--repeat``: far above any study (the
# serving validation replays thousands of requests, the cluster scenarios repeat tens of seeds).
MAX_REQUESTS = 10**8
MAX_REPEAT = 10**4

# Random seeds: numpy's default_rng takes any whole number >= 0; 2^64 - 1 bounds it to the
# generator's 64-bit state words (https://numpy.org/doc/stable/reference/random/bit_generators/
# generated/numpy.random.SeedSequence.html).
MAX_SEED = 2**64 - 1

# Bytes of one buffer: 2^50 (1 PiB), over 3,000x the largest device memory in the catalogue.
MAX_BYTES = 2**50

# A rate, a time or a price given as a float: finite, and at most 1e15 of its SI unit (a rate of
# 10^15 requests/s, 30 million years in seconds), where float64 sums still resolve a second.
MAX_FLOAT = 1e15

# A coefficient of variation (kernel-time jitter, the burstiness of gamma arrivals): at most 100,
# a gamma of shape 1e-4, where nearly every draw is zero and arrivals collapse into bursts.
MAX_CV = 100.0
