"""The stack measurement campaign: what PyTorch's default dispatch, each SDPA backend, Hugging
Face transformers models and ``torch.compile`` actually run on one GPU, as contract records.

Run: ``python3 -m gpuplan.validate.stack_campaign --out DIR [--budget-s S] [--only PART,...]
[--device cpu|cuda]``. Parts, in their order: ``sdpa`` (attention per backend, both timings),
``ops`` (GEMM and elementwise under default dispatch), ``hf`` (whole Hugging Face models:
prefill, decode with DynamicCache and StaticCache, training steps), ``compile`` (the same whole
models under ``torch.compile``). Each part gets a share of the budget left when it starts and
writes its records as they come (flushed). ``--device cpu`` runs every part at tiny sizes.

Self-contained like ``gpuplan.validate.harness``: it imports torch, the standard library and the
harness, never the rest of gpuplan, so it runs from a checkout on a machine's own python.
Importing this package does not import torch.
"""
