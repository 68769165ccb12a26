"""The fixed cost of a call timed in isolation on an idle GPU (sim/stacks/kernels.py): added to
the isolated timing of the single-op kinds, never to device timing or the harness stack."""

from dataclasses import replace

import pytest

from gpuplan.sim.stacks import get_stack
from gpuplan.sim.stacks.kernels import ISOLATED_CALL_S, isolated_call_s
from gpuplan.validate.fit_stacks import cases as fit_cases
from gpuplan.validate.fit_stacks import kernels as fit_stacks
from gpuplan.validate.record_prediction import predict_breakdown

GEMM = {"m": 1024, "n": 1024, "k": 1024, "dtype": "bf16"}
EW = {"op": "add", "tokens": 16, "hidden": 4096, "pass": "fwd", "dtype": "bf16"}
ATT = {"batch": 1, "heads_q": 32, "heads_kv": 8, "seq_q": 1, "seq_kv": 4096, "head_dim": 128,
       "causal": False, "pass": "fwd", "dtype": "bf16"}


def _call_item_s(kind, params):
    bd = predict_breakdown(kind, "h200", params)
    return sum(i.time_s for i in bd.items if i.op == "isolated_call"), bd.total_s


@pytest.mark.parametrize("kind,params", [("gemm", GEMM), ("elementwise", EW),
                                         ("attention", ATT)])
def test_isolated_timing_pays_the_call_cost_and_device_timing_does_not(kind, params):
    iso, iso_total = _call_item_s(kind, params | {"stack": "pytorch", "timing": "isolated"})
    dev, dev_total = _call_item_s(kind, params | {"stack": "pytorch", "timing": "device"})
    assert iso == pytest.approx(ISOLATED_CALL_S[kind])
    assert dev == 0.0
    assert iso_total > dev_total + 0.9 * iso


def test_the_harness_stack_pays_no_isolated_call_cost():
    # its calls follow an L2 flush, which gives the CPU a head start instead
    assert _call_item_s("gemm", GEMM | {"stack": "harness"})[0] == 0.0


def test_backward_and_forced_kernel_add_their_costs_and_host_speed_scales_them():
    stack = get_stack("pytorch")
    fwd = isolated_call_s(stack, "attention", ATT)
    bwd = isolated_call_s(stack, "attention", ATT | {"pass": "fwd_bwd"})
    forced = isolated_call_s(stack, "attention", ATT | {"attention_kernel": "flash2"})
    assert bwd == pytest.approx(fwd + ISOLATED_CALL_S["backward"])
    assert forced == pytest.approx(fwd + ISOLATED_CALL_S["forced_kernel"])
    slow = replace(stack, host=replace(stack.host, speed_factor=2.0))
    assert isolated_call_s(slow, "attention", ATT) == pytest.approx(2 * fwd)
    assert isolated_call_s(stack, "layer", ATT) == 0.0  # whole steps: not a single call


def test_the_fit_touches_each_isolated_cost_on_its_own_records_only():
    class Rec:
        def __init__(self, kind, params):
            self.kind, self.params = kind, params

    model = fit_stacks.Model.__new__(fit_stacks.Model)
    iso_bwd = Rec("elementwise", EW | {"pass": "fwd_bwd", "stack": "pytorch",
                                      "timing": "isolated"})
    dev = Rec("elementwise", EW | {"stack": "pytorch", "timing": "device"})
    forced = Rec("attention", ATT | {"stack": "pytorch", "attention_kernel": "cudnn"})
    harness = Rec("gemm", GEMM | {"stack": "harness"})
    assert model.touches(iso_bwd, "isolated_elementwise")
    assert model.touches(iso_bwd, "isolated_backward")
    assert not model.touches(dev, "isolated_elementwise")
    assert model.touches(forced, "isolated_forced_kernel")
    assert not model.touches(forced, "isolated_gemm")
    assert not model.touches(harness, "isolated_gemm")


def test_an_moe_block_adds_its_host_cost_to_moe_models_only():
    from gpuplan.sim.estimate.inference import _host_extra_s
    from gpuplan.workloads.presets import get_model

    hf = get_stack("hf-transformers")
    more = replace(hf, host=replace(hf.host, moe_block_s=hf.host.moe_block_s + 1e-3))
    moe, dense = get_model("mixtral-8x7b"), get_model("llama3-8b")
    assert _host_extra_s(moe, more) - _host_extra_s(moe, hf) == pytest.approx(
        1e-3 * moe.n_moe_layers * hf.host.speed_factor)
    assert _host_extra_s(dense, more) == pytest.approx(_host_extra_s(dense, hf))


def test_a_negative_moe_block_cost_is_a_one_line_error():
    from gpuplan.errors import GpuplanError
    from gpuplan.sim.stacks import HostModel

    with pytest.raises(GpuplanError, match="moe_block_s"):
        HostModel(moe_block_s=-1e-3)


def test_fit_stacks_prices_each_whole_model_record_at_its_own_host_probe(tmp_path, monkeypatch):
    from gpuplan.validate.harness.host_probe import reference_s_per_launch

    rec = {"kind": "model_decode_step", "device": "h200",
           "params": {"model": "llama3-8b", "layers": 2, "batch": 1, "context": 128,
                      "kv_cache": "dynamic", "dtype": "bf16", "stack": "hf-transformers",
                      "timing": "isolated"},
           "measured": {"time_s": 0.01, "peak_bytes": 10**9}, "source": "test"}
    slow = dict(rec, host_probe_s=2 * reference_s_per_launch())
    path = tmp_path / "models.jsonl"
    path.write_text("\n".join(__import__("json").dumps(r) for r in (rec, slow)) + "\n")
    plain, probed = fit_cases.load(tmp_path)
    assert fit_cases.host_speed(probed) is None  # off by default (the committed fit)
    monkeypatch.setattr(fit_cases, "USE_HOST_PROBES", True)
    assert fit_cases.host_speed(plain) is None
    assert fit_cases.host_speed(probed) == pytest.approx(2.0)
    model = fit_stacks.Model("h200")
    # a CPU-bound eager decode: twice the host's time is (nearly) twice the step
    ratio = model.predict(probed)["time_s"] / model.predict(plain)["time_s"]
    assert 1.5 < ratio < 2.0 + 1e-9


def test_a_paired_records_module_probe_always_sets_its_host_speed(tmp_path):
    from gpuplan.validate.harness.host_probe import reference_module_probe_s

    rec = {"kind": "model_decode_step", "device": "h200",
           "params": {"model": "llama3-8b", "layers": 2, "batch": 1, "context": 128,
                      "kv_cache": "static", "dtype": "bf16", "stack": "hf-transformers",
                      "timing": "isolated"},
           "measured": {"time_s": 0.01, "peak_bytes": 10**9}, "source": "test"}
    paired = dict(rec, module_probe_s=1.5 * reference_module_probe_s(), host_probe_s=1e-3)
    path = tmp_path / "hostpair.jsonl"
    path.write_text("\n".join(__import__("json").dumps(r) for r in (rec, paired)) + "\n")
    plain, probed = fit_cases.load(tmp_path)
    assert fit_cases.host_speed(plain) is None
    # the module probe, not the (here absurd) launch probe, and without --host-probes
    assert fit_cases.host_speed(probed) == pytest.approx(1.5)


def test_a_compiled_moe_block_cost_reaches_the_prefill_not_the_graph_replayed_decode():
    from gpuplan.hwmodels.accelerators import get_accelerator
    from gpuplan.hwmodels.efficiency import efficiency_for
    from gpuplan.sim.estimate.whole_model import model_breakdown

    acc, eff = get_accelerator("h200"), efficiency_for("h200")
    tc = get_stack("torch-compile")
    more = replace(tc, host=replace(tc.host, moe_block_s=tc.host.moe_block_s + 1e-3))
    from gpuplan.validate.record_prediction import record_model

    moe = record_model("mixtral-8x7b")
    pre = {"batch": 1, "seq": 512, "layers": 2}
    dec = {"batch": 1, "context": 512, "layers": 2, "kv_cache": "static"}
    extra = (model_breakdown("prefill_step", acc, eff, moe, pre, stack=more).total_s
             - model_breakdown("prefill_step", acc, eff, moe, pre, stack=tc).total_s)
    assert extra == pytest.approx(2 * 1e-3 * tc.host.speed_factor)
    assert model_breakdown("decode_step", acc, eff, moe, dec, stack=more).total_s == (
        model_breakdown("decode_step", acc, eff, moe, dec, stack=tc).total_s)


def test_the_fitted_compiled_moe_block_cost_is_torch_compiles_moe_block_s(tmp_path):
    doc = {"data": "d", "seed": 0, "fit_share": 0.7, "fit_records": 1, "records": 2,
           "device": "h200",
           "parameters": {n: {"fitted": None} for n in fit_stacks.HOST_PARAMS}
           | {n: {"fitted": None} for n in fit_stacks.ISOLATED_KEYS}}
    doc["parameters"]["compiled_moe_block_s"] = {"fitted": 2e-3}
    doc["parameters"]["moe_block_s"] = {"fitted": 4e-4}
    out = tmp_path / "stack_fit.json"
    fit_stacks.write_package(doc, out)
    stacks = __import__("json").loads(out.read_text())["stacks"]
    assert stacks == {"torch-compile": {"moe_block_s": 2e-3},
                      "hf-transformers": {"moe_block_s": 4e-4}}
    model = fit_stacks.Model("h200")
    Rec = type("Rec", (), {})
    prefill = Rec()
    prefill.kind, prefill.device, prefill.measured = "prefill_step", "h200", {"time_s": 1e-2}
    prefill.params = {
        "model": "mixtral-8x7b", "layers": 2, "batch": 1, "seq": 512, "dtype": "bf16",
        "stack": "torch-compile", "timing": "isolated"}
    assert model.touches(prefill, "compiled_moe_block_s")
    assert not model.touches(prefill, "moe_block_s")  # hf-transformers' own
    dense = Rec()
    dense.kind, dense.params = "prefill_step", dict(prefill.params, model="llama3-8b")
    dense.device, dense.measured = "h200", {"time_s": 1e-2}
    assert not model.touches(dense, "compiled_moe_block_s")
    a = model.predict(prefill, {"compiled_moe_block_s": 0.0})["time_s"]
    b = model.predict(prefill, {"compiled_moe_block_s": 1e-3})["time_s"]
    assert b > a  # the fit's candidate reaches torch-compile's MoE blocks (partly hidden)
