"""Each engine's launch command for one pool (``launch``): vLLM's ``vllm serve``, SGLang's
``python3 -m sglang.launch_server`` and TensorRT-LLM's ``trtllm-serve`` with its LLM-API YAML.

Every builder returns (argv, yaml or None, comments); a choice the engine's flags cannot express
becomes a comment naming it. Flag names are those of ``data/engine_flags.json`` (the engine's
sources at the commit named there); the values are the deployment's own, as simulated.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from gpuplan.workloads.model import ModelConfig
from gpuplan.workloads.presets import get_model

# weight formats each engine quantizes on load from a 16-bit checkpoint (vLLM and SGLang: online
# dynamic FP8, "--quantization fp8" on a bf16 checkpoint, SGLang's server_arguments.md); every
# other format needs a checkpoint already in it
_ONLINE_WEIGHTS = {"vllm": {"fp8": "fp8"}, "sglang": {"fp8": "fp8"}, "trt-llm": {}}
# the KV-cache dtype each engine calls FP8 (vLLM CacheDType 'fp8' = e4m3; SGLang's choices are
# fp8_e5m2 and fp8_e4m3; TensorRT-LLM's kv_cache_config.dtype 'fp8')
_FP8_KV = {"vllm": "fp8", "sglang": "fp8_e4m3", "trt-llm": "fp8"}
_SGLANG_SPEC = {"mtp": "EAGLE", "eagle": "EAGLE", "draft": "STANDALONE", "ngram": "NGRAM"}
_TRTLLM_SPEC = {"mtp": "MTP", "eagle": "Eagle", "draft": "DraftTarget", "ngram": "NGram"}
_TRTLLM_ROLE = {"prefill": "context_servers", "decode": "generation_servers"}
_PORT = {"prefill": 8100, "decode": 8200, "colocated": 8000}  # TensorRT-LLM's disaggregated URLs
# the Hugging Face repository a preset's (or a published row's) source names
_HF_SOURCE = (re.compile(r"Hugging Face (\S+/\S+) config\.json"), re.compile(r"hf\.co/([\w.-]+/[\w.-]+)"))


def model_id(cfg: ModelConfig, model_arg: str | None = None) -> tuple[str, list[str]]:
    """The checkpoint the command loads: the Hugging Face repository the model's source names,
    the directory of a config.json given as the model, else a placeholder and a comment."""
    if model_arg and (model_arg.endswith(".json") or Path(model_arg).is_dir()):
        path = Path(model_arg)
        return str(path.parent if path.suffix == ".json" else path), []
    for pattern in _HF_SOURCE:
        found = pattern.search(cfg.source)
        if found:
            return found.group(1).rstrip(".,;:"), []
    return f"<weights of {cfg.name}>", [f"model: {cfg.name}'s source names no Hugging Face "
                                        "checkpoint; give the path of its weights"]  # fmt: skip


def _weights(engine: str, pool) -> tuple[list[str], list[str]]:
    """The quantization flags of the pool's weight format, or the comment that it needs a
    checkpoint in that format."""
    if pool.weight_dtype == "bf16":
        return [], []
    method = _ONLINE_WEIGHTS[engine].get(pool.weight_dtype)
    if method:
        return ["--quantization", method], []
    return [], [f"weight_dtype={pool.weight_dtype}: {engine} quantizes no weights to it on load; "
                f"serve a checkpoint already in {pool.weight_dtype} in place of the model"]  # fmt: skip


def _draft(spec, draft_name) -> tuple[str, list[str]]:
    """The repository of the draft (a draft model's, or a placeholder for an EAGLE head)."""
    if spec.method == "draft" and draft_name:
        return model_id(get_model(draft_name), draft_name)
    return "<EAGLE head>", ["speculative eagle: give the EAGLE draft head trained for this model"]


def _split_notes(pool) -> list[str]:
    if pool.pp_layers and len(set(pool.pp_layers)) > 1:
        return [f"pp_layers={list(pool.pp_layers)}: priced with this uneven split; the engine "
                "splits the blocks its own way"]  # fmt: skip
    return []


def vllm(cfg: ModelConfig, model: str, pool, *, disagg: bool, index: int) -> tuple:
    argv, notes = ["vllm", "serve", model, "--tensor-parallel-size", str(pool.tp)], _split_notes(pool)
    if pool.dp_attention:  # attention DP ranks of tp GPUs; experts over all of them (vLLM's EP
        # size is TP x DP: docs.vllm.ai expert_parallel_deployment)
        argv += ["--data-parallel-size", str(pool.attention_dp), "--enable-expert-parallel",
                 "--all2all-backend", "deepep_high_throughput" if pool.role == "prefill"
                 else "deepep_low_latency"]  # fmt: skip
    elif pool.ep > 1 and pool.ep == pool.tp:
        argv.append("--enable-expert-parallel")
    elif pool.ep > 1:
        notes.append(f"ep={pool.ep} within tp={pool.tp}: vLLM's expert parallelism spans the "
                     "whole TP group; left at TP experts")  # fmt: skip
    argv += ["--pipeline-parallel-size", str(pool.pp)] * (pool.pp > 1)
    flags, more = _weights("vllm", pool)
    argv += flags + ["--kv-cache-dtype", _FP8_KV["vllm"]] * (pool.kv_dtype == "fp8")
    argv += _vllm_scheduler(pool, notes)
    if pool.speculation is not None:
        argv += ["--speculative-config", json.dumps(_vllm_spec(*pool.speculation, notes))]
    if pool.redundant_experts:
        argv += ["--enable-eplb", "--eplb-config",
                 json.dumps({"num_redundant_experts": pool.redundant_experts})]  # fmt: skip
    argv += ["--enable-dbo"] * pool.two_batch_overlap
    if disagg:  # NIXL KV transfer, each instance both sends and receives (vLLM's NixlConnector)
        argv += ["--kv-transfer-config", json.dumps({"kv_connector": "NixlConnector",
                                                      "kv_role": "kv_both"})]  # fmt: skip
        notes.append("disaggregated: a proxy sends each request to a prefill instance, then to "
                     "a decode instance (vLLM's disaggregated-serving proxy example)")  # fmt: skip
    return argv, None, notes + more


def _vllm_scheduler(pool, notes: list[str]) -> list[str]:
    s = pool.sched
    argv = ["--max-num-seqs", str(s.max_seqs)]
    argv += ["--max-num-batched-tokens", str(pool.batched_tokens)] * (pool.batched_tokens is not None)
    argv += ["--max-model-len", str(pool.model_len), "--block-size", str(s.block_tokens),
             "--gpu-memory-utilization", f"{s.memory_utilization:g}"]  # fmt: skip
    if s.policy == "chunked":
        argv.append("--enable-chunked-prefill")
    elif s.policy == "continuous":
        argv.append("--no-enable-chunked-prefill")
    else:
        notes.append(f"policy={s.policy}: vLLM batches continuously; it has no {s.policy} batching")
    return argv + ["--enforce-eager"] * (not pool.cuda_graph)


def _vllm_spec(spec, draft_name, notes: list[str]) -> dict:
    """vLLM's --speculative-config: method ngram, eagle, mtp, or a draft model by name."""
    if spec.method in ("ngram", "mtp"):
        return {"method": spec.method, "num_speculative_tokens": spec.k}
    model, more = _draft(spec, draft_name)
    notes += more
    head = {"method": "eagle"} if spec.method == "eagle" else {}
    return head | {"model": model, "num_speculative_tokens": spec.k}


def sglang(cfg: ModelConfig, model: str, pool, *, disagg: bool, index: int) -> tuple:
    argv = ["python3", "-m", "sglang.launch_server", "--model-path", model]
    notes = _split_notes(pool)
    if pool.dp_attention:  # --tp-size is the instance's GPUs, --dp-size its attention DP ranks
        argv += ["--tp-size", str(pool.instance_gpus), "--dp-size", str(pool.attention_dp),
                 "--enable-dp-attention", "--ep-size", str(pool.instance_gpus),
                 "--moe-a2a-backend", "deepep", "--deepep-mode",
                 {"prefill": "normal", "decode": "low_latency"}.get(pool.role, "auto")]  # fmt: skip
    else:
        argv += ["--tp-size", str(pool.tp)] + ["--ep-size", str(pool.ep)] * (pool.ep > 1)
    argv += ["--pp-size", str(pool.pp)] * (pool.pp > 1)
    flags, more = _weights("sglang", pool)
    argv += flags + ["--kv-cache-dtype", _FP8_KV["sglang"]] * (pool.kv_dtype == "fp8")
    argv += _sglang_scheduler(pool, notes)
    if pool.speculation is not None:
        argv += _sglang_spec(*pool.speculation, notes)
    argv += ["--ep-num-redundant-experts", str(pool.redundant_experts)] * bool(pool.redundant_experts)
    argv += ["--enable-two-batch-overlap"] * pool.two_batch_overlap
    if disagg:
        argv += ["--disaggregation-mode", pool.role, "--disaggregation-transfer-backend", "nixl"]
        notes.append("disaggregated: the SGLang router pairs them (python3 -m "
                     "sglang_router.launch_router --pd-disaggregation --prefill URL --decode URL)")
    return argv, None, notes + more


def _sglang_scheduler(pool, notes: list[str]) -> list[str]:
    s = pool.sched
    argv = ["--max-running-requests", str(s.max_seqs), "--context-length", str(pool.model_len),
            "--page-size", str(s.block_tokens), "--mem-fraction-static", f"{s.memory_utilization:g}"]
    if s.policy == "chunked" and pool.batched_tokens is not None:
        argv += ["--chunked-prefill-size", str(pool.batched_tokens)]
    elif s.policy == "continuous":  # -1 turns chunking off; the prefill batch's token budget
        argv += ["--chunked-prefill-size", "-1"]
        argv += ["--max-prefill-tokens", str(pool.batched_tokens)] * (pool.batched_tokens is not None)
    else:
        notes.append(f"policy={s.policy}: SGLang batches continuously; it has no {s.policy} batching")
    return argv + ["--disable-cuda-graph"] * (not pool.cuda_graph)


def _sglang_spec(spec, draft_name, notes: list[str]) -> list[str]:
    """SGLang's speculative flags: a chain of K drafted tokens (top-k 1, K + 1 draft tokens with
    the root, as its DeepSeek MTP recipe's --speculative-num-steps 1 --speculative-eagle-topk 1
    --speculative-num-draft-tokens 2); MTP runs as EAGLE on the model's own next-token layers."""
    argv = ["--speculative-algorithm", _SGLANG_SPEC[spec.method]]
    if spec.method == "ngram":
        return argv + ["--speculative-num-draft-tokens", str(spec.k)]
    if spec.method in ("eagle", "draft"):
        model, more = _draft(spec, draft_name)
        argv += ["--speculative-draft-model-path", model]
        notes += more
    return argv + ["--speculative-num-steps", str(spec.k), "--speculative-eagle-topk", "1",
                   "--speculative-num-draft-tokens", str(spec.k + 1)]  # fmt: skip


def trtllm(cfg: ModelConfig, model: str, pool, *, disagg: bool, index: int) -> tuple:
    gpus = pool.instance_gpus // pool.pp if pool.dp_attention else pool.tp
    argv = ["trtllm-serve", model, "--backend", "pytorch", "--tp_size", str(gpus)]
    notes = _split_notes(pool)
    ep = pool.instance_gpus if pool.dp_attention else pool.ep
    argv += ["--pp_size", str(pool.pp)] * (pool.pp > 1) + ["--ep_size", str(ep)] * (ep > 1)
    notes += _weights("trt-llm", pool)[1]
    argv += _trtllm_scheduler(pool, notes)
    options = _trtllm_options(pool, notes, disagg=disagg)
    if disagg:
        argv += ["--port", str(_PORT[pool.role])]
        notes.append(f"each further {pool.role} instance: the next port, as disagg.yaml lists")
    if pool.redundant_experts:
        notes.append(f"redundant_experts={pool.redundant_experts}: set moe_config.load_balancer "
                     "in the YAML (no trtllm-serve flag)")  # fmt: skip
    if pool.two_batch_overlap:
        notes.append("two_batch_overlap: no trtllm-serve flag or checked YAML key sets it")
    argv += ["--extra_llm_api_options", f"{pool.role}.yaml"]
    return argv, render_yaml(options), notes


def _trtllm_scheduler(pool, notes: list[str]) -> list[str]:
    s = pool.sched
    argv = ["--max_batch_size", str(s.max_seqs), "--max_seq_len", str(pool.model_len)]
    argv += ["--max_num_tokens", str(pool.batched_tokens)] * (pool.batched_tokens is not None)
    if pool.kv_free_share is not None:
        argv += ["--kv_cache_free_gpu_memory_fraction", f"{pool.kv_free_share:.3f}"]
    else:
        notes.append("kv_cache_free_gpu_memory_fraction: not derived (one replica's weights as "
                     "priced here leave no memory): trtllm-serve's default applies")
    if s.policy == "chunked":
        argv.append("--enable_chunked_prefill")
    elif s.policy != "continuous":
        notes.append(f"policy={s.policy}: TensorRT-LLM batches in flight; it has no {s.policy} batching")
    return argv


def _trtllm_options(pool, notes: list[str], *, disagg: bool) -> dict:
    """The LLM-API options (--extra_llm_api_options YAML) of the pool."""
    kv = {"tokens_per_block": pool.sched.block_tokens} | (
        {"dtype": _FP8_KV["trt-llm"]} if pool.kv_dtype == "fp8" else {})
    out: dict = {"kv_cache_config": kv}
    out["cuda_graph_config"] = ({"enable_padding": True, "max_batch_size": pool.sched.max_seqs}
                                if pool.cuda_graph else None)  # fmt: skip
    if pool.dp_attention:
        out["enable_attention_dp"] = True
    if pool.speculation is not None:
        spec, draft_name = pool.speculation
        out["speculative_config"] = {"decoding_type": _TRTLLM_SPEC[spec.method], "max_draft_len": spec.k}
        if spec.method in ("eagle", "draft"):
            model, more = _draft(spec, draft_name)
            notes += [*more, f"speculative {spec.method}: name the draft {model} in "
                      "speculative_config (its checkpoint field)"]  # fmt: skip
    if disagg:
        out["cache_transceiver_config"] = {"backend": "NIXL"}
    return out


def trtllm_frontend(pools) -> tuple[list[str], str]:
    """``trtllm-serve disaggregated -c disagg.yaml`` and that file: each pool's instances by URL."""
    doc: dict = {"hostname": "localhost", "port": 8000, "backend": "pytorch"}
    for pool in pools:
        base = _PORT[pool.role]
        doc[_TRTLLM_ROLE[pool.role]] = {
            "num_instances": pool.replicas,
            "urls": [f"localhost:{base + i}" for i in range(pool.replicas)],
        }
    return ["trtllm-serve", "disaggregated", "-c", "disagg.yaml"], render_yaml(doc)


def render_yaml(doc: dict, indent: int = 0) -> str:
    """A YAML mapping of scalars, lists of scalars and nested mappings (block style)."""
    lines = []
    pad = " " * indent
    for key, value in doc.items():
        if isinstance(value, dict):
            lines.append(f"{pad}{key}:\n{render_yaml(value, indent + 2)}")
        elif isinstance(value, list):
            lines.append(f"{pad}{key}:" + "".join(f"\n{pad}  - {_scalar(v)}" for v in value))
        else:
            lines.append(f"{pad}{key}: {_scalar(value)}")
    return "\n".join(lines)


def _scalar(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


BUILDERS = {"vllm": vllm, "sglang": sglang, "trt-llm": trtllm}
