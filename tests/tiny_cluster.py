"""The smallest cluster scenario the CLI tests run: one DGX H100 node, one short job, no failures
(cheap enough for ``gpuplan cluster`` and ``gpuplan report cluster`` inside the suite)."""

TINY_SCENARIO = """name: tiny
horizon_days: 1
cluster: {preset: dgx-h100, nodes: 1}
failures: {enabled: false}
jobs:
  - {id: a, model: megatron-gpt-1.7b, gpus: 8, steps: 10}
"""
