"""Real-GPU measurement harness: measures every kind of the measurement-record contract
(gemm, attention, elementwise, layer, train_step, decode_step, collective, tp_mlp), and the
extension kind tp_layer (the decoder layer under tensor parallelism), with torch on the machine it
runs on and writes contract records as JSON Lines.

Run: ``python3 -m gpuplan.validate.harness --out DIR [--kinds ...] [--tiny] [--device cpu|cuda]
[--budget-s N] [--trace DIR]``.

Self-contained on purpose: it imports only torch, numpy-free standard library and its own
modules (relative imports), never the rest of gpuplan, so it runs straight from a checkout with
a machine's own python and torch. Importing this package does not import torch.
"""

from .records import MEASURED_KEYS, PARAM_KEYS, make_record, read_records

__all__ = ["MEASURED_KEYS", "PARAM_KEYS", "make_record", "read_records"]
