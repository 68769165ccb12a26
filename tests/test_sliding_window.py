"""Sliding-window and hybrid attention: FLOPs, KV bytes, the serving step model, the HF reader."""

import dataclasses

import pytest

from gpuplan.errors import GpuplanError
from gpuplan.sim.estimate.composite import layer_groups
from gpuplan.sim.runtime.serving.on_stack import stack_deployment
from gpuplan.sim.runtime.serving.step_model import Batch, StepModel, iteration_breakdown
from gpuplan.workloads.hf_config import from_hf_config
from gpuplan.workloads.memory import kv_cache_bytes_per_sequence, kv_cache_bytes_per_token
from gpuplan.workloads.ops import Attention
from gpuplan.workloads.presets import get_model

BASE = get_model("llama3-8b")
MISTRAL = dataclasses.replace(BASE, sliding_window=1024, max_seq_len=32768)
GEMMA2 = dataclasses.replace(BASE, sliding_window=4096, local_per_global=1, max_seq_len=32768)
HF = dict(hidden_size=2304, num_hidden_layers=26, num_attention_heads=8, num_key_value_heads=4,
          intermediate_size=9216, vocab_size=256000, head_dim=256, max_position_embeddings=8192)


def _att(**kw):
    base = dict(name="a", batch=1, heads_q=8, heads_kv=8, head_dim=128, v_head_dim=128,
                causal=True, pass_="fwd", dtype="bf16")
    return Attention(**{**base, **kw})


@pytest.mark.parametrize(("seq_q", "seq_kv", "window"), [(4096, 4096, 1024), (512, 8192, 1024),
                                                         (7, 9, 3), (1, 5000, 4096), (100, 100, 200)])
def test_the_windowed_keys_per_query_are_the_brute_force_mean(seq_q, seq_kv, window):
    past = seq_kv - seq_q
    brute = sum(min(past + j, window) for j in range(1, seq_q + 1)) / seq_q
    assert _att(seq_q=seq_q, seq_kv=seq_kv, window=window).mean_keys_per_query == pytest.approx(brute)


def test_a_window_cuts_flops_and_the_keys_read_and_none_changes_nothing():
    full, win = _att(seq_q=1, seq_kv=32768, causal=False), _att(seq_q=1, seq_kv=32768,
                                                                 causal=False, window=4096)
    assert win.fwd_flops == pytest.approx(full.fwd_flops * 4096 / 32768)
    assert win.kv_read == 4096 and full.kv_read == 32768 and win.bytes < full.bytes / 7
    assert _att(seq_q=64, seq_kv=64, window=0).mean_keys_per_query == pytest.approx(32.5)


def test_gemma2_interleaves_windowed_and_full_blocks_and_gemma3_five_to_one():
    assert [GEMMA2.is_windowed_layer(i) for i in range(4)] == [True, False, True, False]
    assert layer_groups(GEMMA2) == [(0, 16), (1, 16)]
    g3 = dataclasses.replace(BASE, sliding_window=1024, local_per_global=5, max_seq_len=32768,
                             n_layers=12)
    assert [g3.is_windowed_layer(i) for i in range(12)].count(False) == 2
    assert not g3.is_windowed_layer(5) and not g3.is_windowed_layer(11)


def test_a_windowed_block_keeps_only_the_window_in_its_cache():
    per_token = kv_cache_bytes_per_token(BASE)
    assert kv_cache_bytes_per_sequence(MISTRAL, 1000) == pytest.approx(1000 * per_token)
    assert kv_cache_bytes_per_sequence(MISTRAL, 8000) == pytest.approx(1024 * per_token)
    assert kv_cache_bytes_per_sequence(GEMMA2, 8000) == pytest.approx((4096 + 8000) / 2 * per_token)


@pytest.mark.parametrize("cfg", [MISTRAL, GEMMA2])
def test_the_step_model_equals_the_iteration_breakdown_with_windows(cfg):
    dep = stack_deployment(cfg, "h200", "gpuplan-server")
    step = StepModel(dep)
    for b in (Batch(decode_seqs=64, decode_kv_tokens=64 * 16000),
              Batch(decode_seqs=5, decode_kv_tokens=5 * 500),
              Batch(prefill=((300, 6000, 1),), decode_seqs=3, decode_kv_tokens=3 * 9000)):
        assert step.iteration_s(b) == pytest.approx(iteration_breakdown(dep, b).total_s, rel=1e-9)
    run = step.decode_run_s(8, 8 * 900, 300)
    assert run == pytest.approx(sum(step.decode_s(8, 8 * 900 + 8 * j) for j in range(300)))
    n = step.decode_iterations_until(8, 8 * 900, run / 2)
    assert step.decode_run_s(8, 8 * 900, n) >= run / 2 > step.decode_run_s(8, 8 * 900, n - 1)


def test_a_long_decode_is_cheaper_with_a_window():
    b = Batch(decode_seqs=64, decode_kv_tokens=64 * 16000)
    full, win = (StepModel(stack_deployment(c, "h200", "gpuplan-server")).iteration_s(b)
                 for c in (BASE, MISTRAL))
    assert win < 0.5 * full


def test_the_hf_reader_takes_mistral_gemma2_and_gemma3_windows():
    m = from_hf_config({**HF, "model_type": "mistral", "sliding_window": 4096,
                        "max_position_embeddings": 32768})
    assert m.sliding_window == 4096 and m.n_windowed_layers == 26
    assert from_hf_config({**HF, "model_type": "mistral", "sliding_window": None}).sliding_window == 0
    g2 = from_hf_config({**HF, "model_type": "gemma2", "sliding_window": 4096})
    assert g2.n_windowed_layers == 13 and g2.tied_embeddings
    g3 = from_hf_config({**HF, "model_type": "gemma3_text", "sliding_window": 512,
                         "num_hidden_layers": 12})
    assert g3.n_windowed_layers == 10
    types = (["sliding_attention"] * 5 + ["full_attention"]) * 2
    g3b = from_hf_config({**HF, "model_type": "gemma3_text", "sliding_window": 512,
                          "num_hidden_layers": 12, "layer_types": types})
    assert g3b.local_per_global == 5


def test_a_window_as_long_as_the_context_reads_as_full_attention_with_a_note():
    from gpuplan.workloads.hf_config import read_hf_config

    # Phi-3.5-mini's sliding_window 262,144 over its 131,072 positions: transformers runs it as
    # full attention, and so is it read
    cfg, notes = read_hf_config({**HF, "model_type": "mistral", "sliding_window": 65536,
                                 "max_position_embeddings": 32768})
    assert cfg.sliding_window == 0 and set(cfg.layer_kinds) == {"full"}
    assert any("spans the whole context" in note for note in notes)


@pytest.mark.parametrize(("extra", "words"), [
    ({"model_type": "mistral", "sliding_window": -1}, "sliding_window"),
    ({"model_type": "gemma2", "sliding_window": "4k"}, "sliding_window"),
    ({"model_type": "gemma3_text", "sliding_window": 512, "layer_types": ["local"]}, "layer_types"),
    ({"model_type": "gemma3_text", "sliding_window": 512,
      "layer_types": ["full_attention", "sliding_attention"]}, "layer_types"),
])
def test_bad_window_fields_are_one_line_errors(extra, words):
    with pytest.raises(GpuplanError) as err:
        from_hf_config({**HF, **extra})
    assert words in str(err.value) and "\n" not in str(err.value)
