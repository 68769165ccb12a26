"""Every layer kind priced through the one cost path: KV and state memory, attention time,
serve's block allocation, and the invariants that tie estimate and serve together."""

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.hwmodels.accelerators import get_accelerator
from gpuplan.hwmodels.efficiency import efficiency_for
from gpuplan.sim.estimate.inference import decode_breakdown, prefill_breakdown
from gpuplan.sim.estimate.whole_model import train_step_breakdown
from gpuplan.sim.runtime.serving.deployment import SchedulerConfig, deployment
from gpuplan.sim.runtime.serving.iteration import Batch, iteration_breakdown
from gpuplan.sim.runtime.serving.kv_cache import (
    block_rule,
    kv_bytes_per_sequence,
    kv_capacity,
)
from gpuplan.sim.runtime.serving.step_model import StepModel
from gpuplan.sim.stacks import get_stack
from gpuplan.workloads.layer_kinds import LinearAttention, Mamba2, SparseIndexer
from gpuplan.workloads.memory import (
    kv_cache_bytes_per_sequence,
    kv_layer_tokens,
    state_bytes_per_sequence,
)
from gpuplan.workloads.model import ModelConfig
from gpuplan.workloads.operators import layer_forward
from gpuplan.workloads.ops import Attention, Scan
from gpuplan.workloads.presets import get_model

H200 = get_accelerator("h200")
EFF = efficiency_for("h200")
GB = 1e9

# Gemma-2-9B (google/gemma-2-9b config.json: 42 layers, hidden 3584, 16 heads, 8 KV heads,
# head_dim 256, sliding_window 4096 on every other layer)
GEMMA2 = ModelConfig(name="gemma-2-9b", n_layers=42, d_model=3584, n_heads=16, n_kv_heads=8,
                     d_head=256, d_ff=14336, vocab_size=256000, max_seq_len=8192,
                     sliding_window=4096, local_per_global=1, tied_embeddings=True)
# Mistral-7B-v0.1 (32 layers, hidden 4096, 32 heads, 8 KV heads, window 4096 on every layer)
MISTRAL = ModelConfig(name="mistral-7b", n_layers=32, d_model=4096, n_heads=32, n_kv_heads=8,
                      d_ff=14336, vocab_size=32000, max_seq_len=32768, sliding_window=4096)
# gpt-oss-20b (openai/gpt-oss-20b config.json: 24 layers alternating sliding (128) and full,
# hidden 2880, 64 heads of 64, 8 KV heads, 32 experts of 2880, top-4)
GPT_OSS = ModelConfig(name="gpt-oss-20b", n_layers=24, d_model=2880, n_heads=64, n_kv_heads=8,
                      d_head=64, d_ff=2880, vocab_size=201088, max_seq_len=131072,
                      n_experts=32, top_k=4, d_ff_expert=2880, sliding_window=128,
                      layer_types=("sliding", "full") * 12)
# Qwen3-Next-80B-A3B (config.json: 48 layers, three gated-DeltaNet layers then one full-attention
# layer, linear_num_key_heads 16, linear_num_value_heads 32, key/value head dims 128, conv 4)
QWEN3_NEXT = ModelConfig(
    name="qwen3-next-like", n_layers=48, d_model=2048, n_heads=16, n_kv_heads=2, d_head=256,
    d_ff=5120, vocab_size=151936, max_seq_len=65536, n_experts=512, top_k=10,
    n_shared_experts=1, d_ff_expert=512, layer_types=("linear", "linear", "linear", "full") * 12,
    linear_attention=LinearAttention(n_key_heads=16, n_value_heads=32, key_head_dim=128,
                                     value_head_dim=128, conv_kernel=4))
# a Nemotron-H-like hybrid: Mamba-2 mixers, a few attention blocks, MLP-only blocks
NEMOTRON_H = ModelConfig(
    name="nemotron-h-like", n_layers=8, d_model=4096, n_heads=32, n_kv_heads=8, d_ff=21504,
    vocab_size=131072, max_seq_len=8192,
    layer_types=("mamba2", "none", "mamba2", "none", "full", "none", "mamba2", "none"),
    ffn_types=("none", "dense") * 4,
    ssm=Mamba2(n_heads=128, head_dim=64, state_size=128, n_groups=8, conv_kernel=4,
               chunk_size=128))
DSV32 = dataclasses.replace(get_model("deepseek-v3"), n_layers=6, n_dense_layers=1,
                            max_seq_len=131072, layer_types=("dsa",) * 6,
                            sparse_indexer=SparseIndexer(n_heads=64, head_dim=128, top_k=2048))


def _decode_kv(cfg, batch, context, stack="vllm"):
    bd = decode_breakdown(H200, EFF, cfg, get_stack(stack), batch=batch, context=context)
    return bd.memory_bytes["kv_cache"]


def test_gemma2_9b_decode_holds_a_third_less_kv_with_its_window():
    windowed = _decode_kv(GEMMA2, 16, 8192)
    full = _decode_kv(dataclasses.replace(GEMMA2, sliding_window=0, local_per_global=0), 16, 8192)
    assert windowed / GB == pytest.approx(33.8, rel=0.02)
    assert full / GB == pytest.approx(45.1, rel=0.01)


def test_mistral_7b_at_16k_tokens_keeps_its_4096_token_window():
    # batch 8 at 16,000 tokens: 16.8 GB without the window (the figure), 4.3 GB with it
    assert _decode_kv(MISTRAL, 8, 16000) / GB == pytest.approx(4.3, rel=0.02)
    assert _decode_kv(dataclasses.replace(MISTRAL, sliding_window=0), 8, 16000) / GB == \
        pytest.approx(16.8, rel=0.01)


def test_gpt_oss_windowed_layers_hold_128_tokens_in_estimate_and_serve():
    for i in range(GPT_OSS.n_layers):
        assert kv_layer_tokens(GPT_OSS, i, 100_000) == (128 if i % 2 == 0 else 100_000)
    rule = block_rule(GPT_OSS, 16)
    assert (rule.windowed_layers, rule.full_layers, rule.window) == (12, 12, 128)
    # 100k tokens: a full layer holds 6250 blocks, a windowed one the 8 its 128 tokens touch
    window_blocks = len({i // 16 for i in range(100_000 - 128 + 1, 100_000)})
    assert window_blocks == 8 and rule.blocks(100_000) == 12 * 6250 + 12 * 8


def test_qwen3_next_linear_layers_hold_a_fixed_state_whatever_the_length():
    la = QWEN3_NEXT.linear_attention
    per_layer = (32 * 128 * 128 + 3 * (2 * 16 * 128 + 32 * 128)) * 2  # bf16 state + conv
    assert state_bytes_per_sequence(QWEN3_NEXT) == 36 * per_layer
    assert la.state_elements * 2 + la.conv_state_elements * 2 == per_layer
    full_per_token = 12 * 2 * 2 * 256 * 2  # 12 full layers, K and V of 2 heads of 256
    for tokens in (1, 1000, 60_000):
        assert kv_layer_tokens(QWEN3_NEXT, 0, tokens) == 0
        assert kv_cache_bytes_per_sequence(QWEN3_NEXT, tokens) == \
            36 * per_layer + tokens * full_per_token


def test_serve_gives_each_state_layer_one_fixed_slot_and_holds_more_sequences():
    sched = SchedulerConfig(max_model_len=32768)
    cap = kv_capacity(deployment(QWEN3_NEXT, "h200", tp=2), sched)  # 80B: two GPUs
    rule = cap.rule
    assert rule.state_layers == 36 and rule.full_layers == 12 and rule.state_units >= 1
    # the state's blocks do not grow: only the 12 full layers' do
    assert cap.blocks_of(32_000) - cap.blocks_of(16_000) == 12 * 1000
    all_full = dataclasses.replace(QWEN3_NEXT, layer_types=("full",) * 48)
    cap_full = kv_capacity(deployment(all_full, "h200", tp=2), sched)
    assert cap.sequences(32768) > 3 * cap_full.sequences(32768)


def test_a_model_of_fixed_states_only_is_served():
    mamba = dataclasses.replace(NEMOTRON_H, layer_types=("mamba2", "none") * 4)
    cap = kv_capacity(deployment(mamba, "h200"), SchedulerConfig(max_model_len=8192))
    assert cap.blocks_of(1) == cap.blocks_of(8192) > 0
    assert cap.sequences(8192) > 1000


def test_chunked_attention_sees_only_its_chunk():
    base = dict(name="a", batch=1, heads_q=8, heads_kv=8, head_dim=128, v_head_dim=128,
                causal=True, pass_="fwd", dtype="bf16")
    for seq_q, seq_kv, chunk in [(100, 100, 32), (1, 8193, 8192), (700, 1000, 256), (5, 5, 8)]:
        att = Attention(seq_q=seq_q, seq_kv=seq_kv, chunk=chunk, **base)
        past = seq_kv - seq_q
        brute = sum((p - 1) % chunk + 1 for p in range(past + 1, seq_kv + 1)) / seq_q
        assert att.mean_keys_per_query == pytest.approx(brute)
    rule = block_rule(dataclasses.replace(
        get_model("llama3-8b"), max_seq_len=65536, attention_chunk_size=8192,
        layer_types=("chunked", "chunked", "chunked", "nope") * 8), 16)
    for n in (1, 8191, 8192, 8193, 20_000):
        start = n // 8192 * 8192
        chunk_blocks = len({i // 16 for i in range(start, n)})
        assert rule.blocks(n) == 8 * -(-n // 16) + 24 * chunk_blocks


def test_nope_layers_skip_rope_and_none_layers_have_no_mixer_or_ffn():
    llama4ish = dataclasses.replace(get_model("llama3-8b"), attention_chunk_size=8192,
                                    layer_types=("chunked", "nope") * 16)
    names = [op.name for op in layer_forward(llama4ish, batch=1, seq=64, layer=1)]
    assert "rope_q" not in names and "attention" in names
    chunked = next(op for op in layer_forward(llama4ish, batch=1, seq=64, layer=0)
                   if isinstance(op, Attention))
    assert chunked.chunk == 8192
    mixer_only = [op.name for op in layer_forward(NEMOTRON_H, batch=1, seq=64, layer=0)]
    assert "ssd_scan" in mixer_only and "mlp_norm" not in mixer_only
    mlp_only = [op.name for op in layer_forward(NEMOTRON_H, batch=1, seq=64, layer=1)]
    assert "attn_norm" not in mlp_only and "mlp_norm" in mlp_only


def test_a_scan_is_linear_in_tokens_and_its_decode_reads_the_state_once():
    ops = layer_forward(QWEN3_NEXT, batch=2, seq=4096, layer=0)
    scan = next(op for op in ops if isinstance(op, Scan))
    longer = next(op for op in layer_forward(QWEN3_NEXT, batch=2, seq=8192, layer=0)
                  if isinstance(op, Scan))
    assert longer.flops == pytest.approx(2 * scan.flops)
    step = dataclasses.replace(scan, batch=64, seq_q=1)
    assert step.bytes >= 2 * 64 * scan.state_elems * 2  # each state read and written


def test_sparse_attention_scores_every_key_but_attends_to_top_k():
    ops = layer_forward(DSV32, batch=1, seq=32768, layer=0)
    indexer = next(op for op in ops if op.name == "indexer")
    attention = next(op for op in ops if op.name == "attention")
    assert indexer.mean_keys_per_query == pytest.approx((32768 + 1) / 2)
    assert attention.mean_keys_per_query < 2048
    # 32k tokens: the indexer's fp8 key (128 + 4 scale bytes) beside the MLA latent (576 x 2)
    per_seq = kv_cache_bytes_per_sequence(DSV32, 32768)
    assert per_seq == 6 * 32768 * ((512 + 64) * 2 + 132)


@pytest.mark.parametrize("cfg", [QWEN3_NEXT, NEMOTRON_H, GPT_OSS, DSV32], ids=lambda c: c.name)
def test_estimate_and_serve_price_the_same_iteration_and_the_same_cache(cfg):
    dep = deployment(cfg, "h200", tp=8 if cfg is DSV32 else 1)
    model = StepModel(dep)
    for batch in (Batch(decode_seqs=8, decode_kv_tokens=8 * 3000),
                  Batch(prefill=((512, 1000, 1),), decode_seqs=4, decode_kv_tokens=4 * 2000)):
        assert model.iteration_s(batch) == pytest.approx(iteration_breakdown(dep, batch).total_s)
    bd = decode_breakdown(H200, EFF, cfg, get_stack("vllm"), batch=8, context=2999)
    assert bd.memory_bytes["kv_cache"] == pytest.approx(
        8 * kv_bytes_per_sequence(cfg, 3000, tp=1, kv_dtype="bf16"))


@pytest.mark.parametrize("cfg", [QWEN3_NEXT, NEMOTRON_H, GPT_OSS], ids=lambda c: c.name)
def test_prefill_and_a_training_step_run_for_every_kind(cfg):
    pre = prefill_breakdown(H200, EFF, cfg, get_stack("vllm"), batch=1, seq=2048)
    assert pre.total_s > 0
    train = train_step_breakdown(H200, EFF, cfg, micro_batch=1, seq=2048)
    assert train.total_s > pre.total_s


@settings(max_examples=60, deadline=None)
@given(window=st.integers(1, 8192), local=st.integers(0, 5), tokens=st.integers(1, 40_000),
       more=st.integers(0, 10_000))
def test_windowed_kv_never_exceeds_full_kv_and_grows_with_tokens(window, local, tokens, more):
    base = dataclasses.replace(get_model("llama3-8b"), max_seq_len=8192)
    win = dataclasses.replace(base, sliding_window=window, local_per_global=local)
    assert kv_cache_bytes_per_sequence(win, tokens) <= kv_cache_bytes_per_sequence(base, tokens)
    assert kv_cache_bytes_per_sequence(win, tokens) <= kv_cache_bytes_per_sequence(
        win, tokens + more)
    rule = block_rule(win, 16)
    assert rule.blocks(tokens) <= block_rule(base, 16).blocks(tokens) * base.n_layers


@settings(max_examples=30, deadline=None)
@given(tokens=st.integers(1, 65_536), heads=st.sampled_from([8, 16, 32]),
       dim=st.sampled_from([64, 128]))
def test_state_bytes_do_not_depend_on_tokens(tokens, heads, dim):
    la = LinearAttention(n_key_heads=heads // 2, n_value_heads=heads, key_head_dim=dim,
                         value_head_dim=dim, conv_kernel=4)
    cfg = dataclasses.replace(QWEN3_NEXT, layer_types=("linear",) * 48, linear_attention=la,
                              n_layers=48)
    assert kv_cache_bytes_per_sequence(cfg, tokens) == state_bytes_per_sequence(cfg) == \
        kv_cache_bytes_per_sequence(cfg, 1)


def test_models_shows_the_layer_pattern_and_its_sizes(tmp_path, capsys):
    from gpuplan.cli import main
    from gpuplan.cli.catalog_cmd import layer_layout

    assert layer_layout(get_model("llama3-8b")) == {}  # every preset as before
    assert layer_layout(GPT_OSS)["layer_pattern"] == "sliding×1/full×1 ×12, window 128"
    qn = layer_layout(QWEN3_NEXT)
    assert qn["layer_pattern"] == "linear×3/full×1 ×12"
    assert qn["state_bytes_per_sequence"] == state_bytes_per_sequence(QWEN3_NEXT)
    assert layer_layout(NEMOTRON_H)["ffn_pattern"] == "none×1/dense×1 ×4"
    config = tmp_path / "config.json"  # Gemma-2-9B's config.json, the fields the reader needs
    config.write_text('{"model_type": "gemma2", "hidden_size": 3584, "num_hidden_layers": 42, '
                      '"num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 256, '
                      '"intermediate_size": 14336, "vocab_size": 256000, '
                      '"max_position_embeddings": 8192, "sliding_window": 4096}')
    assert main(["models", "--hf-config", str(config)]) == 0
    assert "sliding×1/full×1 ×21, window 4096" in capsys.readouterr().out


def test_serve_edge_holds_the_same_cache_as_estimate():
    from gpuplan.sim.runtime.serving.edge import edge_row

    row = edge_row(MISTRAL, "h200", weight_dtype="bf16", kv_dtype="bf16", batch=8,
                   context=16000, prompt_tokens=512)
    # 8 sequences x 32 layers x 4096 window tokens x K and V of 8 heads of 128 in bf16
    assert row["kv_bytes"] == 8 * 32 * 4096 * (2 * 8 * 128 * 2)
    assert row["kv_bytes"] / GB == pytest.approx(4.3, rel=0.02)
