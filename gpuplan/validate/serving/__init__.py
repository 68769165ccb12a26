"""Serving validation: a small continuous-batching server in torch, and gpuplan's prediction of it.

- ``python3 -m gpuplan.validate.serving --out DIR`` runs the server (``server``: a Llama-like
  model with random weights, a preallocated KV cache, iteration-level scheduling as vLLM's
  default scheduler does it) under Poisson load at several rates and writes every request's
  arrival, first-token and finish times (``requests.jsonl``), every iteration's kind, size and
  duration (``iterations.jsonl``) and the settings (``settings.json``). Self-contained: it
  imports torch and the standard library only, so it runs from a checkout where gpuplan's
  dependencies are not installed.
- ``python3 -m gpuplan.validate.serving.compare DIR`` replays the same arrivals in gpuplan's
  serving simulator and tabulates predicted against measured median and p90 TTFT and TPOT.

Importing this package does not import torch.
"""
