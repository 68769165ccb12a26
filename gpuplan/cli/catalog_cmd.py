"""``gpuplan models`` and ``gpuplan gpus``: the catalogues, as tables or JSON.

Models: shape, exact parameter counts (``gpuplan.workloads.params.count_params``) and the
KV-cache bytes one token adds in bf16 (``gpuplan.workloads.memory.kv_cache_bytes_per_token``).
Accelerators: datasheet figures of ``gpuplan.hwmodels.accelerators``; link bandwidths are one
direction per GPU, rates are dense (no sparsity).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Any

from gpuplan.cli import add_common_options
from gpuplan.cli.argtypes import word
from gpuplan.cli.device_args import add_gpu_argument
from gpuplan.errors import GpuplanError
from gpuplan.tables import dump_json, format_value, render_table

MODEL_COLUMNS = (
    "key",
    "layers",
    "d_model",
    "heads",
    "kv_heads",
    "d_ff",
    "experts",
    "top_k",
    "total_params",
    "active_params",
    "kv_cache_bytes_per_token",
)
MODEL_HEADERS = {
    "kv_heads": "kv heads",
    "top_k": "top-k",
    "total_params": "total params",
    "active_params": "active params",
    "kv_cache_bytes_per_token": "KV/token (bf16)",
    "layer_pattern": "layers by kind",
}
GPU_COLUMNS = (
    "key",
    "name",
    "bf16_flops_per_s",
    "fp8_flops_per_s",
    "fp4_flops_per_s",
    "hbm_bytes",
    "hbm_bytes_per_s",
    "l2_bytes",
    "scaleup_bytes_per_s",
    "tdp_w",
)
GPU_HEADERS = {
    "bf16_flops_per_s": "bf16 dense",
    "fp8_flops_per_s": "fp8 dense",
    "fp4_flops_per_s": "fp4 dense",
    "hbm_bytes": "HBM",
    "hbm_bytes_per_s": "HBM bandwidth",
    "l2_bytes": "L2",
    "scaleup_bytes_per_s": "scale-up (1 dir)",
    "tdp_w": "TDP",
}


def model_row(cfg: Any) -> dict[str, Any]:
    """One model's catalogue line: shape, parameters, KV-cache bytes per token (bf16)."""
    from gpuplan.workloads.memory import kv_cache_bytes_per_token
    from gpuplan.workloads.params import count_params

    params = count_params(cfg)
    return {
        "key": cfg.name,
        "layers": cfg.n_layers,
        "d_model": cfg.d_model,
        "heads": cfg.n_heads,
        "kv_heads": cfg.n_kv_heads,
        "d_ff": cfg.d_ff,
        "experts": cfg.n_experts or None,
        "top_k": cfg.top_k or None,
        "total_params": params.total,
        "active_params": params.active,
        # an encoder (ViT) reads all its tokens at once and keeps no cache
        "kv_cache_bytes_per_token": (
            None if cfg.is_vision else kv_cache_bytes_per_token(cfg, dtype="bf16")
        ),
        **layer_layout(cfg),
    }


def layer_layout(cfg: Any) -> dict[str, Any]:
    """A model's per-layer kinds, compactly ("sliding×1/full×1 ×21, window 4096"), with its
    window, chunk, sparse top-k and fixed state per sequence; nothing when every block is a
    full-attention block with a feed-forward (``workloads.layer_kinds``)."""
    from gpuplan.workloads.layer_kinds import STATE_KINDS, pattern
    from gpuplan.workloads.memory import state_bytes_per_sequence

    kinds = cfg.layer_kinds
    ffn = tuple(cfg.ffn_kind(i) for i in range(cfg.n_layers))
    if set(kinds) == {"full"} and "none" not in ffn:
        return {}
    sizes = {"sliding_window": cfg.sliding_window if "sliding" in kinds else 0,
             "attention_chunk_size": cfg.attention_chunk_size if "chunked" in kinds else 0,
             "sparse_top_k": cfg.sparse_indexer.top_k if "dsa" in kinds else 0}
    words = {"sliding_window": "window", "attention_chunk_size": "chunk",
             "sparse_top_k": "top-k"}
    text = ", ".join([pattern(kinds)] + [f"{words[k]} {v}" for k, v in sizes.items() if v])
    out = {"layer_pattern": text, **{k: v for k, v in sizes.items() if v}}
    if "none" in ffn:
        out["ffn_pattern"] = pattern(ffn)
    if any(k in STATE_KINDS for k in kinds):
        out["state_bytes_per_sequence"] = state_bytes_per_sequence(cfg, "bf16")
    return out


def model_details(cfg: Any) -> dict[str, Any]:
    """Everything ``model_row`` gives, plus the fields that say how the model is built."""
    from gpuplan.workloads.params import count_params

    params = count_params(cfg)
    return model_row(cfg) | {
        "attention": cfg.attention_kind,
        "head_dim": cfg.head_dim,
        "vocab_size": cfg.vocab_size,
        "d_ff_expert": cfg.d_ff_expert or None,
        "shared_experts": cfg.n_shared_experts or None,
        "norm": cfg.norm,
        "activation": cfg.activation,
        "position": cfg.position,
        "max_seq_len": cfg.max_seq_len,
        "embedding_params": params.embedding,
        "lm_head_params": params.lm_head,
        **_vision_details(cfg, params),
        **_structure_details(cfg, params),
        "source": cfg.source,
    }


def _vision_details(cfg: Any, params: Any) -> dict[str, Any]:
    """A vision-language model's tower: style, encoder shape, parameters, tokens of one image."""
    from gpuplan.workloads.images import Images
    from gpuplan.workloads.vision import default_image_size, image_tokens

    tower = cfg.vision_tower
    if tower is None:
        return {}
    enc = tower.encoder
    width, height = default_image_size(cfg)
    return {
        "vision_style": tower.style,
        "vision_encoder": f"{enc.n_layers + tower.global_layers} layers, d_model {enc.d_model}, "
        f"{enc.n_heads} heads, d_ff {enc.d_ff}, patch {enc.patch_size}",
        "vision_params": params.vision,
        "cross_attention_layers": list(tower.cross_attention_layers) or None,
        "image_tokens_per_image": f"{image_tokens(cfg, Images(count=1, width=width, height=height))}"
        f" at {width}x{height}",
    }


def _structure_details(cfg: Any, params: Any) -> dict[str, Any]:
    """The structure a config.json gave beyond the shape, only where it is not the default."""
    norms = {"head": "per head", "all": "over all heads"}
    biases = [name for name, on in (("all linears", cfg.bias), ("q, k, v", cfg.qkv_bias),
                                    ("q, k, v, o", cfg.attention_bias), ("MLP", cfg.mlp_bias),
                                    ("router", cfg.router_bias), ("experts", cfg.expert_bias))
              if on]  # fmt: skip
    shown = {
        "biases": ", ".join(biases) or None,
        "qk_norm": norms.get(cfg.qk_norm),
        "norms_per_block": cfg.norms_per_block if cfg.norms_per_block != 2 else None,
        "attention_sinks": True if cfg.attention_sinks else None,
        "attn_output_gate": True if cfg.attn_output_gate else None,
        "attn_logit_softcap": cfg.attn_logit_softcap or None,
        "final_logit_softcap": cfg.final_logit_softcap or None,
        "shared_expert_gate": True if cfg.shared_expert_gate else None,
        "expert_weight_dtype": cfg.expert_weight_dtype or None,
        "checkpoint_weight_dtype": cfg.checkpoint_weight_dtype or None,
        "mtp_layers": cfg.mtp_layers or None,
        "mtp_params": params.mtp or None,
    }
    return {k: v for k, v in shown.items() if v is not None}


def _show_model(cfg: Any, as_json: bool) -> int:
    details = model_details(cfg)
    if as_json:
        print(dump_json(details))
        return 0
    shown = [
        {"field": MODEL_HEADERS.get(k, k), "value": format_value(k, v)} for k, v in details.items()
    ]
    print(render_table(shown, ("field", "value")))
    return 0


def models(args: argparse.Namespace) -> int:
    """List the model presets, or show one preset or one Hugging Face config.json."""
    presets = importlib.import_module("gpuplan.workloads.presets")
    if args.hf_config is not None and args.key is not None:
        raise GpuplanError(f"give a model KEY ({args.key!r}) or --hf-config, not both")
    if args.hf_config is not None:
        from gpuplan.workloads.hf_config import read_hf_config

        cfg, notes = read_hf_config(args.hf_config)
        for note in notes:  # what the reader assumed or left out, apart from the table
            print(f"note: {note}", file=sys.stderr)
        return _show_model(cfg, args.json)
    if args.key is not None:
        return _show_model(presets.get_model(args.key), args.json)
    rows = [model_row(cfg) for cfg in presets.list_models()]
    # the layer pattern as a column once some preset has other than full-attention blocks
    columns = MODEL_COLUMNS + (("layer_pattern",) if any("layer_pattern" in r for r in rows)
                               else ())
    print(dump_json(rows) if args.json else render_table(rows, columns, headers=MODEL_HEADERS))
    if not args.json:  # counts, not predictions
        print("band: none needed - parameter counts are exact (equal to transformers' own counts of "
              "the same configs: tests/data/hf_configs/counts); KV bytes are arithmetic")
    return 0


def gpu_row(acc: Any) -> dict[str, Any]:
    """One accelerator's catalogue line (SI units; None where the datasheet gives nothing)."""
    return {
        "key": acc.key,
        "name": acc.name,
        "bf16_flops_per_s": acc.peak_flops_per_s.get("bf16"),
        "fp8_flops_per_s": acc.peak_flops_per_s.get("fp8"),
        "fp4_flops_per_s": acc.peak_flops_per_s.get("fp4"),
        "hbm_bytes": acc.hbm_bytes,
        "hbm_bytes_per_s": acc.hbm_bytes_per_s,
        "l2_bytes": acc.l2_bytes,
        "scaleup_bytes_per_s": acc.scaleup_bytes_per_s,
        "tdp_w": acc.tdp_w,
    }


def gpus(args: argparse.Namespace) -> int:
    """List the accelerator catalogue."""
    accelerators = importlib.import_module("gpuplan.hwmodels.accelerators")
    rows = [gpu_row(acc) for acc in accelerators.list_accelerators()]
    print(dump_json(rows) if args.json else render_table(rows, GPU_COLUMNS, headers=GPU_HEADERS))
    return 0


def register(subparsers: Any) -> None:
    """Add ``models``, ``gpus`` and ``stacks``."""
    p = subparsers.add_parser(
        "models",
        help="list model presets, or show one (a key or --hf-config)",
        description="Model presets: shape, exact parameter counts, KV-cache bytes per token "
        "in bf16. Give a KEY or --hf-config PATH to show one model in full.",
    )
    p.add_argument("key", nargs="?", metavar="KEY", type=word, help="a preset key, e.g. llama3-8b")
    p.add_argument(
        "--hf-config",
        metavar="PATH",
        type=word,
        help="a Hugging Face config.json (or its directory) to read instead of a preset",
    )
    add_common_options(p)
    p.set_defaults(func=models)

    p = subparsers.add_parser(
        "gpus",
        help="list the accelerator catalogue",
        description="Accelerators: dense peak rates, HBM, L2, scale-up link (one direction "
        "per GPU) and TDP, from datasheets.",
    )
    add_common_options(p)
    p.set_defaults(func=gpus)

    p = subparsers.add_parser(
        "stacks",
        help="list the software stacks (--stack NAME on the pricing commands)",
        description="Software stacks: the attention kernel of each phase (sdpa-default is "
        "PyTorch's own dispatch on the device), elementwise kernels, host, KV cache, optimizer "
        "and timing convention of each preset, with where each choice comes from.",
    )
    add_gpu_argument(p, "resolve each stack's kernels on this accelerator", default=None)
    add_common_options(p)
    p.set_defaults(func=stacks)


STACK_COLUMNS = ["name", "prefill", "train", "decode", "elementwise", "host", "kv_cache",
                 "optimizer", "timing", "title"]


def stacks(args: argparse.Namespace) -> int:
    """List the stack presets (their kernels resolved on ``--gpu`` when given)."""
    from gpuplan.sim.stacks import list_stacks, resolved_attention

    acc = None
    if args.gpu is not None:
        acc = importlib.import_module("gpuplan.hwmodels.accelerators").get_accelerator(args.gpu)
    rows = []
    for s in list_stacks():
        try:
            k = resolved_attention(s, acc) if acc is not None else s.attention
        except GpuplanError:  # a forced kernel the device cannot run
            k = s.attention
        rows.append({
            "name": s.name, "prefill": k.prefill, "train": k.train, "decode": k.decode,
            "elementwise": s.elementwise, "host": s.host.mode, "kv_cache": s.kv_cache,
            "optimizer": s.optimizer, "timing": s.timing, "title": s.title,
            "sources": list(s.sources), "notes": list(s.notes),
        })
    print(dump_json(rows) if args.json else render_table(rows, STACK_COLUMNS))
    return 0
