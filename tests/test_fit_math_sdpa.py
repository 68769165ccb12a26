"""The measured kernel classes behind SDPA's math backend and transformers' MoE glue: the
constants the models hold are what their fit scripts print from the committed profiles, and
the kernels the models list are the ones the profiles saw."""

import json

import pytest

from gpuplan.hwmodels.attention import MATH_HBM_FRACTION, math_attention_kernels
from gpuplan.hwmodels.efficiency import MEASURED_FRACTION
from gpuplan.validate import compare_compiled, fit_hf_moe, fit_math_sdpa
from gpuplan.workloads.ops import MEMCPY, UNVECTORIZED, Attention


def test_the_math_classes_are_the_profile_medians():
    fitted = fit_math_sdpa.fit()
    assert set(fitted) == set(MATH_HBM_FRACTION)
    for klass, r in fitted.items():
        assert MATH_HBM_FRACTION[klass] == pytest.approx(r["fraction"], abs=0.006), klass


def test_the_transformers_glue_families_are_the_profile_medians():
    fitted = fit_hf_moe.fit()
    for family in (UNVECTORIZED, MEMCPY):
        assert MEASURED_FRACTION[family] == pytest.approx(fitted[family]["fraction"], abs=0.006)


def _launches(params: dict) -> int:
    op = Attention(name="a", batch=params["batch"], heads_q=params["heads_q"],
                   heads_kv=params["heads_kv"], seq_q=params["seq_q"], seq_kv=params["seq_kv"],
                   head_dim=params["head_dim"], v_head_dim=params["head_dim"],
                   causal=params["causal"], pass_="fwd", dtype="bf16")
    gemms = 2
    return gemms + sum(n for *_, n in math_attention_kernels(op))


def test_the_math_forward_launches_what_the_profile_counted():
    doc = json.loads(fit_math_sdpa.PROFILE.read_text())
    fwd = [p for p in doc["profiles"] if p["backend"] == "math" and p["params"]["pass"] == "fwd"]
    assert fwd
    for prof in fwd:
        measured = round(sum(k["launches_per_call"] for k in prof["kernels"]))
        p = prof["params"]
        big = p["batch"] * p["heads_q"] * p["seq_q"] * p["seq_kv"] * 4 > 2**31
        # TensorIterator splits a kernel whose byte offsets pass 32 bits into two launches
        # (the scores' where, add, isneginf and cast at 2k tokens): not counted by the model
        assert _launches(p) <= measured <= _launches(p) + (4 if big else 0), p


def test_gqa_and_the_causal_mask_add_kernels():
    base = dict(batch=2, heads_q=32, heads_kv=32, seq_q=512, seq_kv=512, head_dim=128,
                causal=False)
    assert _launches(base | {"heads_kv": 8}) == _launches(base) + 2  # the K/V repeats
    assert _launches(base | {"causal": True}) == _launches(base) + 6  # the mask's build, add


@pytest.mark.parametrize("module", [fit_math_sdpa, fit_hf_moe, compare_compiled])
def test_a_profile_that_cannot_be_read_is_one_line_naming_it(module, tmp_path, capsys):
    missing = str(tmp_path / "missing.json")
    assert module.main(["--profile", missing]) == 2
    assert capsys.readouterr().err == f"error: --profile {missing!r}: No such file or directory\n"
    garbled = tmp_path / "garbled.json"
    garbled.write_text("{")
    assert module.main(["--profile", str(garbled)]) == 2
    err = capsys.readouterr().err
    assert err == f"error: --profile {str(garbled)!r}: not JSON: give a {module.PROFILE.name}\n"
