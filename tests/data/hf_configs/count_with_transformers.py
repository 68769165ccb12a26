"""Count each fixture's parameters with Hugging Face transformers itself (the independent count
of tests/test_hf_families.py): the model is built from the config.json on the meta device (no
weights, no memory) and ``sum(p.numel() for p in model.parameters())`` plus persistent buffers
that the checkpoints store (DeepSeek-V3's e_score_correction_bias) is printed as JSON.

Run where transformers is installed (CPU is enough; counts/transformers.json was written by
transformers 5.25.0 with torch 2.13.0 on the CPU):
    python3 tests/data/hf_configs/count_with_transformers.py > tests/data/hf_configs/counts/transformers.json
"""

import json
import sys
from pathlib import Path

import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM

HERE = Path(__file__).parent


def count(path: Path) -> dict:
    raw = json.loads(path.read_text())
    raw.pop("quantization_config", None)  # build the bf16 model: count elements, not packing
    if raw.get("model_type") == "kimi_k2":  # Kimi-K2 runs DeepSeek-V3's code (trust_remote_code)
        raw["model_type"] = "deepseek_v3"
    rope = raw.get("rope_scaling") or {}
    if rope.get("type", rope.get("rope_type")) == "longrope" and "long_factor" not in rope:
        raw.pop("rope_scaling")  # the fixture omits the factor lists; RoPE holds no parameters
    cfg = AutoConfig.for_model(**raw)
    with torch.device("meta"):
        try:
            model = AutoModelForCausalLM.from_config(cfg)
        except ValueError:  # a multimodal wrapper without a causal-LM class: the full model
            from transformers import AutoModel
            model = AutoModel.from_config(cfg)
    params = sum(p.numel() for p in model.parameters())
    buffers = sum(b.numel() for n, b in model.named_buffers() if "e_score_correction_bias" in n)
    vision = sum(p.numel() for n, p in model.named_parameters()
                 if "vision" in n or "multi_modal_projector" in n)
    return {"params": params, "score_bias_buffers": buffers, "vision_params": vision,
            "class": type(model).__name__}


out = {"transformers": transformers.__version__, "torch": torch.__version__, "models": {}}
for path in sorted(HERE.glob("*.json")):
    if path.name.startswith("counts_"):
        continue
    try:
        out["models"][path.stem] = count(path)
    except Exception as err:  # noqa: BLE001 - record what could not be built
        out["models"][path.stem] = {"error": f"{type(err).__name__}: {err}"[:300]}
    print(path.stem, out["models"][path.stem], file=sys.stderr)
print(json.dumps(out, indent=1))
