"""What the stack fit fits: the attention-kernel rates, the isolated calls' fixed costs, the
efficiency shares of one dtype's kinds and the host factors of each stack (the stacks and the
record kinds each is fitted on), with the grids each is searched over."""

from __future__ import annotations

RATE_KEYS = ("cudnn_fwd", "cudnn_bwd", "cudnn_bwd_d256", "efficient_fwd", "efficient_bwd",
             "efficient_decode")
# the fixed cost of a call timed in isolation (sim/stacks/kernels.py ``ISOLATED_CALL_S``), each
# fitted on the isolated records of the single-op kinds it adds to
ISOLATED_KEYS = ("isolated_elementwise", "isolated_gemm", "isolated_attention",
                 "isolated_backward", "isolated_forced_kernel", "isolated_grouped_gemm",
                 "isolated_simt_gemm", "isolated_grouped_fallback", "isolated_fallback_group")
# Efficiency fields fitted on the records of some kinds in one dtype: (kinds, dtype). The bf16
# grouped GEMMs price torch._grouped_mm's CUTLASS kernel; the fp32 GEMMs (torch.mm, and the
# per-group cuBLAS GEMMs of torch._grouped_mm's fallback) cuBLAS's SIMT kernels (``SIMT_KEYS``:
# on their device-timed records alone, fitted first)
EFF_KEYS = {"grouped_gemm_fraction": (("grouped_gemm",), "bf16"),
            "grouped_gemm_hbm_fraction": (("grouped_gemm",), "bf16"),
            "simt_tile_hbm_fraction": (("gemm", "grouped_gemm"), "fp32"),
            "simt_k_step_s": (("gemm", "grouped_gemm"), "fp32"),
            "simt_split_k_s": (("gemm", "grouped_gemm"), "fp32"),
            "simt_gemv_fraction": (("gemm", "grouped_gemm"), "fp32"),
            "simt_gemv_hbm_fraction": (("gemm", "grouped_gemm"), "fp32"),
            "grouped_fallback_s": (("grouped_gemm",), "fp32")}
SIMT_KEYS = tuple(k for k, (_, dtype) in EFF_KEYS.items() if dtype == "fp32")
HOST_PARAMS = {"module_call_s": "hf-transformers", "device_overlap": "hf-transformers",
               "moe_block_s": "hf-transformers", "attention_plan_s": "hf-transformers",
               "compiled_moe_block_s": "torch-compile", "call_factor": "torch-compile",
               "graph_call_s": "torch-compile", "compiled_call_s": "torch-compile"}
# the HostModel field a fitted name sets, where the two differ (one field, two stacks' values)
HOST_FIELD = {"compiled_moe_block_s": "moe_block_s"}
HOST_KINDS = {"device_overlap": ("model_decode_step",), "attention_plan_s": ("model_decode_step",),
              "graph_call_s": ("model_decode_step",), "compiled_call_s": ("prefill_step",),
              "moe_block_s": ("prefill_step", "model_decode_step"),
              # a compiled decode replays CUDA graphs: no per-block CPU work reaches it
              "compiled_moe_block_s": ("prefill_step",)}
MOE_ONLY = ("moe_block_s", "compiled_moe_block_s")  # fitted on the MoE models' records alone
# fitted where it is what the step exposes: a CUDA-graph replay's fixed CPU cost at batch 1,
# where the device's part is the weights' stream (priced within a few percent); at larger
# batches the static cache's masked attention, which the price still misses, would stand in
BATCH_ONE = ("graph_call_s",)
HOST_PASSES = 3  # hf-transformers' host factors share records: fitted in turn, 3 rounds
COMPILE_PASSES = 2  # torch-compile's likewise, 2 rounds
LINEAR_GRIDS = {"device_overlap": [k / 32 for k in range(33)],  # a share: absolute grid on [0, 1]
           "moe_block_s": [k * 0.05e-3 for k in range(101)],  # 0 to 5 ms in 50 us steps
           "compiled_moe_block_s": [k * 0.05e-3 for k in range(101)],  # the same grid
           "graph_call_s": [k * 0.01e-3 for k in range(201)],  # 0 to 2 ms in 10 us steps
           "compiled_call_s": [k * 0.025e-3 for k in range(201)],  # 0 to 5 ms in 25 us steps
           "attention_plan_s": [k * 0.5e-3 for k in range(121)]}  # 0 to 60 ms in 0.5 ms steps
COARSE_GRID = [2 ** (k / 8) for k in range(-24, 25)]
FINE_GRID = [2 ** (k / 64) for k in range(-8, 9)]
