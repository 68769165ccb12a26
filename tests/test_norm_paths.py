"""transformers' eager RMSNorm: one definition (workloads.eager_rmsnorm.eager_rmsnorm) for the
prefill, the decode's host calls and the training step, forward and backward."""

from dataclasses import replace

from gpuplan.hwmodels.accelerators import get_accelerator
from gpuplan.hwmodels.efficiency import efficiency_for
from gpuplan.sim.estimate.breakdown import priced_items
from gpuplan.sim.estimate.inference import transformers_rmsnorm
from gpuplan.sim.parallel.compute import micro_batch_costs
from gpuplan.sim.parallel.kernel_lists import head_ops, layer_forward_ops, layer_ops
from gpuplan.sim.parallel.shape import Shape, transformers_norm_of
from gpuplan.sim.stacks import get_stack
from gpuplan.workloads.eager_rmsnorm import eager_rmsnorm
from gpuplan.workloads.operators import layer_forward
from gpuplan.workloads.ops import Elementwise, Memory
from gpuplan.workloads.presets import get_model

CFG = get_model("llama3-8b")
HF = get_stack("hf-transformers")


def _norm_pieces(ops, name):
    return [op for op in ops if op.name.startswith(f"{name}.")]


def test_which_stacks_run_the_eager_norm():
    assert transformers_norm_of(HF)
    assert not transformers_norm_of(get_stack("torch-compile"))  # Inductor fuses it
    assert not transformers_norm_of(get_stack("harness"))
    assert not transformers_norm_of(None)


def test_prefill_and_training_forward_price_the_norm_identically():
    acc = get_accelerator("h200")
    eff = efficiency_for(acc.key)
    prefill = transformers_rmsnorm(layer_forward(CFG, batch=2, seq=1024, layer=0, dtype="bf16"),
                                   HF)  # fmt: skip
    shape = Shape(micro_batch=2, seq=1024, transformers_norm=True)  # bf16 stream: same input
    train, _ = layer_forward_ops(CFG, shape, 0)
    for name in ("attn_norm", "mlp_norm"):
        a, b = _norm_pieces(prefill, name), _norm_pieces(train, name)
        assert len(a) == 8 and a == b
        ta = sum(i.time_s for i in priced_items(a, acc, eff, phase="fwd"))
        tb = sum(i.time_s for i in priced_items(b, acc, eff, phase="fwd"))
        assert ta == tb > 0
    # 36 B per element of a bf16 input (one fused kernel: 4)
    n = 2 * 1024 * CFG.d_model
    assert abs(sum(op.bytes for op in _norm_pieces(train, "attn_norm")) / n - 36) < 0.01


def test_fp32_stream_norm_has_no_cast_kernels_and_autograd_backward():
    op = Elementwise(name="n", op="rmsnorm", tokens=4096, hidden=4096, pass_="fwd", dtype="fp32")
    fwd, bwd = eager_rmsnorm(op)
    n = 4096 * 4096
    assert len(fwd) == 6 and sum(m.host_calls for m in fwd) == 8  # the two casts: calls only
    assert abs(sum(m.bytes for m in fwd) / n - 28) < 0.01
    assert len(bwd) == 14 and abs(sum(m.bytes for m in bwd) / n - 92) < 0.01
    assert all(isinstance(m, Memory) for m in fwd + bwd)
    bf16 = eager_rmsnorm(replace(op, dtype="bf16"))
    assert len(bf16[0]) == 8 and len(bf16[1]) == 16  # the casts and their backward


def test_training_step_prices_the_norm_backward():
    acc = get_accelerator("h200")
    eff = efficiency_for(acc.key)
    shape = Shape(micro_batch=1, seq=2048, residual_dtype="fp32")
    fused = layer_ops(CFG, shape, 0)
    eager = layer_ops(CFG, replace(shape, transformers_norm=True), 0)
    assert any(op.name == "attn_norm.bwd" for op in fused[1])
    assert not any(op.name == "attn_norm.bwd" for op in eager[1])
    assert len(_norm_pieces(eager[1], "attn_norm")) == 14
    head = head_ops(CFG, replace(shape, transformers_norm=True))
    assert len(_norm_pieces(head[0], "final_norm")) == 6
    assert len(_norm_pieces(head[1], "final_norm")) == 14
    a = micro_batch_costs(CFG, shape, acc, eff, "eager")
    b = micro_batch_costs(CFG, replace(shape, transformers_norm=True), acc, eff, "eager")
    assert b.dense.bwd_s > a.dense.bwd_s and b.dense.fwd_s > a.dense.fwd_s


def test_fp32_stream_activations_in_training_memory():
    """Llama-3-8B cut to 8 blocks, b2 s4096 on the H200 (data/h200_stacks/run2): 66.95 GB
    measured; the 16-bit count alone gave 59.99 GB (-10.4%)."""
    from gpuplan.sim.estimate.whole_model import one_gpu_training

    acc = get_accelerator("h200")
    eff = efficiency_for(acc.key)
    cfg = replace(CFG, n_layers=8)
    params = {"micro_batch": 2, "seq": 4096, "optimizer": "adamw", "precision": "bf16-mixed"}
    hf = one_gpu_training(acc, eff, cfg, HF, params).breakdown.memory_bytes
    peak = sum(v for k, v in hf.items() if k not in ("fragmentation", "cuda_context"))
    assert abs(peak / 66.95e9 - 1) < 0.03
    # a stack on a bf16 stream keeps the 16-bit count (pytorch eager: same terms as before)
    from gpuplan.sim.parallel.model_facts import autocast_stream_facts, model_facts

    f = model_facts(cfg)
    assert autocast_stream_facts(f, cfg, get_stack("torch-compile")) is f
    assert autocast_stream_facts(f, cfg, get_stack("pytorch")) is f
    assert autocast_stream_facts(f, cfg, HF, "fp8") is f
    g = autocast_stream_facts(f, cfg, HF)
    # per token: (8 + 2 x 5 readers) d of the stream and norms, and SwiGLU's silu output
    assert g.stream_rep[0] == 18 * cfg.d_model + 2 * cfg.d_ff
    assert g.stream_head == 10 * cfg.d_model
