"""The HBM shares of the kernels transformers' MoE experts run around their grouped GEMMs.

``python3 -m gpuplan.validate.fit_hf_moe [--profile FILE]``

Reads the MoE models' prefill profiles of ``data/h200_stacks/run6/hf_kernel_profile.json``
(``python3 -m gpuplan.validate.stack_campaign --only hfprofile``: every kernel of one eager
forward of Mixtral-8x7B and DeepSeek-V2-Lite cut to 4 layers, bf16, at 512 and 4,096 tokens, in
a busy stream), takes the kernels of each family by ATen name (``PATTERNS``) and the bytes the
model gives them (``workloads.feed_forward.moe_block`` with ``glue="transformers"``, summed over the
model's MoE layers), and prints the share of the H200's datasheet HBM bandwidth each profile
implies and their median: ``hwmodels.efficiency.MEASURED_FRACTION``. The profile fits them;
the campaign's whole-model ``prefill_step`` records (``hf-transformers``, MoE models) check them
(``fit_stacks``' held-out table). Valid for transformers 5.17 and torch 2.11 on an H200.
"""

from __future__ import annotations

import json
from pathlib import Path

PROFILE = Path(__file__).resolve().parents[2] / "data" / "h200_stacks" / "run6" / \
    "hf_kernel_profile.json"
# family -> (model op names, ATen kernel-name patterns: a kernel counts if all of one tuple's
# strings are in its name)
PATTERNS: dict[str, tuple[tuple[str, ...], tuple[tuple[str, ...], ...]]] = {
    "unvectorized": (("expert_masked_fill", "expert_silu", "expert_weights_mul"),
                     (("masked_fill",), ("elementwise_kernel<128, 4", "silu_kernel"),
                      ("elementwise_kernel<128, 4", "gpu_kernel_impl<", "BinaryFunctor<float"))),
    "memcpy": (("expert_copies",), (("Memcpy DtoD",),)),
}


def model_bytes(params: dict) -> dict[str, float]:
    """The model's bytes per family for one profiled forward."""
    from gpuplan.validate.record_prediction import record_model
    from gpuplan.workloads.operators import layer_forward

    cfg = record_model(params["model"])
    out: dict[str, float] = {}
    for layer in range(params["layers"]):
        if not cfg.is_moe_layer(layer):
            continue
        ops = layer_forward(cfg, batch=params["batch"], seq=params["seq"], dtype=params["dtype"],
                            layer=layer, grouped_experts=True, moe_glue="transformers")
        for family, (names, _) in PATTERNS.items():
            out[family] = out.get(family, 0.0) + sum(op.bytes for op in ops if op.name in names)
    return out


def measured_s(profile: dict) -> dict[str, float]:
    out: dict[str, float] = {}
    for k in profile["kernels"]:
        for family, (_, patterns) in PATTERNS.items():
            if any(all(p in k["name"] for p in pat) for pat in patterns):
                out[family] = out.get(family, 0.0) + k["time_s_per_call"]
                break
    return out


def fit(path: str | Path = PROFILE) -> dict[str, dict]:
    """{family: {"fraction": median, "profiles": [per-profile shares]}} over the MoE models."""
    from gpuplan.validate.fit_math_sdpa import median_shares
    from gpuplan.validate.record_prediction import record_model

    doc = json.loads(Path(path).read_text())
    moe = [prof for prof in doc["profiles"] if record_model(prof["params"]["model"]).is_moe]
    return median_shares(moe, model_bytes, measured_s)


def main(argv: list[str] | None = None) -> int:
    from gpuplan.hwmodels.efficiency import MEASURED_FRACTION
    from gpuplan.validate.fit_math_sdpa import shares_cli

    return shares_cli(argv, module="gpuplan.validate.fit_hf_moe", doc=__doc__,
                      profile=PROFILE, profile_help="an hf_kernel_profile.json", fit=fit,
                      in_model=MEASURED_FRACTION, what="family")


if __name__ == "__main__":
    raise SystemExit(main())
