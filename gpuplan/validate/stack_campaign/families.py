"""The ``families`` part: whole Hugging Face models of families no fit has read
(``family_configs.FAMILIES``), eager (``stack: hf-transformers``), measured with the ``hf``
part's own cases (``hf._prefill``, ``hf._decode`` with both caches, ``hf._train``).

Each record keeps the config its model was built from (``params.hf_config``, the layer count
kept in ``num_hidden_layers``) and, for a model that transformers runs through its pure-torch
loops because a kernel package is missing (``FAMILIES[name]["fallback"]``),
``params.impl = "torch-fallback"``: such records are kept but are not the engine's speed.
A training phase whose fp32 weights, gradients and AdamW moments (16 bytes a parameter, counted
on the meta device) would take more than ``TRAIN_MEMORY_SHARE`` of the card is skipped with a
line in the log. A model on its pure-torch loops (``impl: torch-fallback``) runs no training
step.
"""

from __future__ import annotations

import importlib.util
import time

from ..harness.records import RecordWriter
from . import hf
from .common import TimeBox, host_probe_s_per_launch, log
from .family_configs import FAMILIES

PREFILL = ((1, 512), (1, 2048), (4, 2048), (1, 8192))  # (batch, seq)
DECODE = ((1, 1024), (8, 4096), (32, 2048))  # (batch, context)
TRAIN = ((1, 1024), (2, 2048))  # (micro_batch, seq)
FALLBACK_PREFILL, FALLBACK_DECODE = ((1, 512), (1, 2048)), ((1, 1024), (8, 2048))
TINY_PREFILL, TINY_DECODE, TINY_TRAIN = ((1, 16),), ((2, 16),), ((1, 16),)
# fp32 weights (4) and gradients (4), AdamW's two fp32 moments (8): torch.optim.AdamW's state
TRAIN_BYTES_PER_PARAM = 16
# the share of the card the training state may take, the rest left to activations and the
# allocator (a safety margin that skips a phase, not a fitted constant)
TRAIN_MEMORY_SHARE = 0.7
# tiny (CPU smoke) layer counts that keep each pattern whole
TINY_LAYERS = {"gemma3_text": 6, "qwen3_next": 4, "glm4_moe": 2}


def impl_of(name: str) -> str | None:
    """``torch-fallback`` where a kernel package the model's fast path needs is missing."""
    needs = FAMILIES[name].get("fallback", ())
    if not needs:
        return None
    missing = [m for m in needs if importlib.util.find_spec(m) is None]
    return "torch-fallback" if missing else "kernels"


def reduced_config(name: str, layers: int, tiny: bool = False) -> dict:
    """The model's config with ``layers`` blocks (``layer_types`` cut to match), at toy widths
    when ``tiny``."""
    cfg = tiny_config(name) if tiny else dict(FAMILIES[name]["hf_config"])
    cfg["num_hidden_layers"] = layers
    if isinstance(cfg.get("layer_types"), list):
        cfg["layer_types"] = cfg["layer_types"][:layers]
    return cfg


def tiny_config(name: str) -> dict:
    """The same family at toy sizes (the CPU smoke path): hidden 64, vocab 256, few experts."""
    cfg = dict(FAMILIES[name]["hf_config"])
    toy = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
           "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 256,
           "max_position_embeddings": 512}
    cfg |= {k: v for k, v in toy.items() if k in cfg or k != "head_dim"}
    moe = {"num_experts": 4, "num_local_experts": 4, "n_routed_experts": 4,
           "num_experts_per_tok": 2, "moe_intermediate_size": 32,
           "shared_expert_intermediate_size": 32}
    cfg |= {k: v for k, v in moe.items() if k in cfg}
    if cfg.get("sliding_window"):
        cfg["sliding_window"] = 8
    cfg["pad_token_id"] = 0  # within the toy vocabulary (Phi-3's default is 32000)
    if cfg["model_type"] == "qwen3_next":
        cfg |= {"linear_num_key_heads": 2, "linear_num_value_heads": 4,
                "linear_key_head_dim": 16, "linear_value_head_dim": 16}
    if cfg["model_type"] == "mamba2":
        for k in ("num_attention_heads", "num_key_value_heads", "intermediate_size"):
            cfg.pop(k, None)
        cfg |= {"num_heads": 8, "head_dim": 16, "n_groups": 2, "state_size": 16,
                "time_step_rank": 8, "chunk_size": 16}
    if cfg["model_type"] == "gemma2":
        cfg["query_pre_attn_scalar"] = 16
    return cfg


def tiny_layers(name: str) -> int:
    return TINY_LAYERS.get(FAMILIES[name]["hf_config"]["model_type"], 2)


def build(torch, tf, device: str, cfg_dict: dict, dtype):
    """``AutoModelForCausalLM.from_config`` of ``cfg_dict`` on ``device`` in ``dtype``."""
    cfg_dict = dict(cfg_dict)
    model_type = cfg_dict.pop("model_type")
    cfg_dict.pop("architectures", None)
    cfg = tf.AutoConfig.for_model(model_type, **cfg_dict)
    with torch.device(device):
        model = tf.AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    model.to(device=device, dtype=dtype)
    return model


def meta_params(torch, tf, cfg_dict: dict) -> int:
    """The parameter count of the model ``cfg_dict`` builds, on the meta device (no memory)."""
    model = build(torch, tf, "meta", cfg_dict, torch.float32)
    return sum(p.numel() for p in model.parameters())


def _info(model, tf, name: str, impl: str | None) -> dict:
    return {"attn_implementation": getattr(model.config, "_attn_implementation", None),
            "experts_implementation": getattr(model.config, "experts_implementation", None),
            "num_params": sum(p.numel() for p in model.parameters()),
            "transformers": tf.__version__, "model_source": FAMILIES[name]["source"],
            "family": FAMILIES[name]["hf_config"]["model_type"], "impl": impl}


def _phase(part, tf, name: str, phase: str, share: TimeBox) -> None:
    torch, device, tiny = part.torch, part.device, part.tiny
    impl = impl_of(name)
    fallback = impl == "torch-fallback"
    layers = tiny_layers(name) if tiny else FAMILIES[name]["layers"][phase]
    cfg = reduced_config(name, layers, tiny)
    part.extra = {"hf_config": cfg} | ({"impl": impl} if impl else {})
    if phase == "infer":
        pre, dec = (TINY_PREFILL, TINY_DECODE) if tiny else (
            (FALLBACK_PREFILL, FALLBACK_DECODE) if fallback else (PREFILL, DECODE))
        model = build(torch, tf, device, cfg, torch.bfloat16)
        model.eval()
        info = _info(model, tf, name, impl)
        for shape in pre:
            _case(part, name, f"prefill {shape}", hf._prefill, part, model, name, layers,
                  "hf-transformers", info, (shape,), share)
        for shape in dec if FAMILIES[name].get("decode", True) else ():
            _case(part, name, f"decode {shape}", hf._decode, part, tf, model, name, layers,
                  "hf-transformers", info, (shape,), share, ("dynamic", "static"))
        return
    if device == "cuda":
        need = TRAIN_BYTES_PER_PARAM * meta_params(torch, tf, cfg)
        card = torch.cuda.get_device_properties(0).total_memory
        if need > TRAIN_MEMORY_SHARE * card:
            log(f"  families {name} train skipped: {need / 1e9:.1f} GB of weights and AdamW "
                f"state > {TRAIN_MEMORY_SHARE:.0%} of {card / 1e9:.1f} GB")
            return
    model = build(torch, tf, device, cfg, torch.float32)
    model.train()
    info = _info(model, tf, name, impl)
    hf._train(part, model, name, layers, "hf-transformers", info,
              TINY_TRAIN if tiny else TRAIN, share)


def _case(part, name: str, what: str, fn, *args) -> None:
    """One case (a shape, both caches for a decode); a failure (a card too small for it,
    say) is logged and kept in ``part.failed_cases``, and the model's other cases go on."""
    try:
        fn(*args)
    except Exception as exc:  # noqa: BLE001 - recorded; the next shape may fit
        part.failed_cases[f"{name}/{what}"] = hf.failure(exc)
        log(f"  families {name} {what} FAILED {hf.failure(exc)}")
    hf._free(part.torch, part.device)


def run(torch, device, device_key, out_dir, box: TimeBox, tiny: bool,
        models: tuple[str, ...] | None = None) -> dict:
    """Every family in turn (inference, then training where it fits), each its share of the
    box; one model's failure is logged and the part goes on."""
    tf = hf.transformers_or_none()
    if tf is None:
        log("  families: transformers is not installed here: part skipped")
        return {"skipped": "transformers is not installed"}
    part = hf._Part(torch, device, device_key, RecordWriter(out_dir, "families"), tiny)
    part.failed_cases = {}
    names = tuple(m for m in (models or FAMILIES) if m in FAMILIES)
    failed = {}
    for i, name in enumerate(names):
        if box.over():
            log(f"  families: time box reached before {name}")
            break
        model_s = box.left_s() / (len(names) - i)
        part.probe_s = host_probe_s_per_launch(torch, device)
        phases = ("infer",) if impl_of(name) == "torch-fallback" else ("infer", "train")
        for phase in phases:
            start = time.monotonic()
            # inference 60% of the model's share; training whatever of it inference left
            share = TimeBox(0.6 * model_s if phase == "infer" else box.left_s() / (len(names) - i))
            try:
                _phase(part, tf, name, phase, share)
            except Exception as exc:  # one model's failure must not end the part
                failed[f"{name}/{phase}"] = hf.failure(exc)
                log(f"  families {name} {phase} FAILED {failed[f'{name}/{phase}']}")
            part.extra = {}
            hf._free(torch, device)
            log(f"  families {name} {phase}: {time.monotonic() - start:.1f} s")
    return {"records": part.writer.count, "failed": failed | part.failed_cases}
