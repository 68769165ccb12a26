"""KV capacity with sliding windows: per-layer paging, a windowed layer holds only the blocks its
window still reaches, and the block manager of a simulated replica counts them so."""

import dataclasses

import numpy as np
import pytest

from gpuplan.sim.runtime.serving.blocks import BlockRule
from gpuplan.sim.runtime.serving.deployment import SchedulerConfig, deployment
from gpuplan.sim.runtime.serving.engine import simulate
from gpuplan.sim.runtime.serving.kv_cache import block_rule, kv_bytes_per_token, kv_capacity
from gpuplan.sim.runtime.serving.requests import Workload
from gpuplan.workloads.presets import get_model

BASE = dataclasses.replace(get_model("llama3-8b"), max_seq_len=32768)
MISTRAL = dataclasses.replace(BASE, sliding_window=1024)  # every block windowed
GEMMA2 = dataclasses.replace(BASE, sliding_window=1024, local_per_global=1)  # every other one


def _brute_window_blocks(tokens: int, block: int, window: int) -> int:
    """Distinct blocks holding a token the next query can still see (vLLM frees the blocks
    wholly before token n - window + 1)."""
    first = max(0, tokens - window + 1)
    return len({i // block for i in range(first, tokens)})


@pytest.mark.parametrize(("block", "window"), [(16, 1024), (16, 100), (32, 17), (1, 5)])
def test_a_windowed_layer_holds_the_blocks_its_window_reaches(block, window):
    rule = BlockRule(block, full_layers=3, windowed_layers=2, window=window)
    for n in [0, 1, block - 1, block, block + 1, window - 1, window, window + 1, 3 * window + 7]:
        full = len({i // block for i in range(n)})
        assert rule.blocks(n) == 3 * full + 2 * _brute_window_blocks(n, block, window), n
    cached = np.array([0, 1, window, window + block + 3, 5 * window], dtype=np.int64)
    assert rule.blocks_sum(cached) == sum(rule.blocks(int(c)) for c in cached)


def test_the_growth_bound_bounds_every_start():
    rule = BlockRule(16, full_layers=2, windowed_layers=5, window=40)
    for start in range(0, 200, 7):
        for it in (1, 5, 16, 33):
            assert rule.blocks(start + it) - rule.blocks(start) <= rule.growth_bound(it)


def test_a_model_without_windows_keeps_one_block_for_every_layer():
    assert block_rule(BASE, 16) == BlockRule(16)
    assert BlockRule(16).blocks(33) == 3
    sched = SchedulerConfig(max_model_len=8192)
    cap = kv_capacity(deployment(BASE, "h100-sxm"), sched)
    assert cap.rule is None and cap.blocks_of(8192) == 512
    assert cap.sequences(8192) == cap.tokens // 8192


@pytest.mark.parametrize(("cfg", "windowed"), [(MISTRAL, 32), (GEMMA2, 16)])
def test_the_same_bytes_hold_more_long_sequences_with_a_window(cfg, windowed):
    sched = SchedulerConfig(max_model_len=32768)
    plain = kv_capacity(deployment(BASE, "h100-sxm"), sched)
    cap = kv_capacity(deployment(cfg, "h100-sxm"), sched)
    rule = cap.rule
    assert rule.windowed_layers == windowed and rule.units == cfg.n_layers
    # one page is one layer's block: the cache's bytes and full-context tokens are the same
    assert cap.block_bytes * cfg.n_layers == pytest.approx(plain.block_bytes)
    assert cap.kv_bytes == pytest.approx(plain.kv_bytes, rel=1e-3)
    per = kv_bytes_per_token(cfg, tp=1, kv_dtype="bf16") / cfg.n_layers
    long = 32768
    held = (cfg.n_layers - windowed) * long + windowed * 1024  # tokens kept over the layers
    assert cap.blocks_of(long) * cap.block_bytes == pytest.approx(held * per, rel=0.02)
    assert cap.sequences(long) > plain.sequences(long)
    if windowed == cfg.n_layers:  # a window everywhere: a long sequence costs its window only
        assert cap.sequences(long) >= 25 * plain.sequences(long)


def _long_load(n: int) -> Workload:
    return Workload(arrival_s=np.zeros(n), prompt_tokens=np.full(n, 12000),
                    output_tokens=np.full(n, 200))  # fmt: skip


def test_a_replica_with_a_window_runs_more_long_requests_at_once_and_never_overfills():
    sched = SchedulerConfig(max_model_len=16384, max_seqs=256)
    load = _long_load(120)
    runs = {}
    for name, cfg in (("plain", BASE), ("window", MISTRAL)):
        dep = deployment(cfg, "h100-sxm")
        res = simulate(dep, sched, load)
        cap = res.capacity
        assert res.summary["finished"] == load.n
        used = res.timeline_columns["kv_blocks_used"]
        assert int(np.max(used)) <= cap.blocks
        runs[name] = res
    # the full-attention model holds about 80 GB / 1.5 GB = ~30 such requests at once; the
    # windowed one keeps 1,024 tokens a layer of each, so all 120 run together
    running = {k: int(np.max(r.timeline_columns["running"])) for k, r in runs.items()}
    assert running["plain"] <= 40 and running["window"] == load.n
    assert runs["window"].end_s < runs["plain"].end_s
    assert runs["window"].summary["preemptions"] <= runs["plain"].summary["preemptions"]


@pytest.mark.parametrize("rule", [BlockRule(16), BlockRule(16, full_layers=3, windowed_layers=2,
                                                            window=40)])
def test_the_decode_set_counts_the_blocks_of_its_members_exactly(rule):
    from gpuplan.sim.runtime.serving.decode_set import DecodeSet
    from gpuplan.sim.runtime.serving.request_table import RequestTable

    rng = np.random.default_rng(3)
    n = 60
    table = RequestTable(Workload(arrival_s=np.zeros(n), prompt_tokens=rng.integers(1, 300, n),
                                  output_tokens=rng.integers(400, 600, n)))  # fmt: skip
    d = DecodeSet(table, 16, rule=rule)
    cached: dict[int, int] = {}
    for rid in range(n):
        c = int(rng.integers(0, 500))
        d.add(rid, c, 0)
        cached[rid] = c
        if rid % 3 == 2:
            gone = d.members[int(rng.integers(0, len(d)))]
            d.remove(gone)
            del cached[gone]
        step = int(rng.integers(0, 5))
        d.advance(step)
        cached = {r: c + step for r, c in cached.items()}
        for ahead in (0, 1, 7, 16, 33):
            brute = sum(rule.blocks(c + ahead) for c in cached.values())
            assert d.blocks_after(ahead) == brute
        assert d.blocks == sum(rule.blocks(c) for c in cached.values())
