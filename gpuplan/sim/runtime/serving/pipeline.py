"""Pipeline and expert parallelism of one serving replica: stages, their weights and KV, and the
traffic between GPUs that they add.

A replica of ``tp * pp`` GPUs splits the model's blocks into ``pp`` stages, first to last (an
even split, or ``pp_layers``, checked by the rule training uses: ``sim.parallel.strategy``);
each stage is ``tp`` GPUs, the embedding on the first, the final norm, LM head and sampling on
the last (vLLM's ``PPMissingLayer`` placement, ``vllm/model_executor/models/utils.py``
``make_layers``; a tied LM head is a second copy of the embedding on the last stage).

- Point to point: between consecutive stages each GPU sends the iteration's hidden states and
  residual, ``2 * tokens * d_model`` activations (vLLM's ``IntermediateTensors`` of
  ``hidden_states`` and ``residual``, ``vllm/model_executor/models/llama.py``), over NVLink when
  both stages are in one node of ``MAX_TP`` GPUs, else over the GPU's own NIC (the one-host
  model ``hwmodels.collectives.collective_time`` on that link).
- Expert parallelism (``ep``): a MoE block's routed experts are sharded over ``ep`` GPUs of the
  stage, ``n_experts / ep`` whole experts each, each sliced over the remaining ``tp / ep``
  (SGLang's ``moe_tp_size = tp_size / ep_size``, ``python/sglang/srt/server_args.py``; vLLM's
  ``--enable-expert-parallel`` is the case ``ep = tp``, docs "Expert Parallel Deployment").
  Routing is balanced: each GPU runs ``tokens * top_k / ep`` routed rows. No all-to-all runs:
  the attention is tensor-parallel, so after its all-reduce every GPU of the stage holds every
  token, picks the rows routed to its own experts, and the block's MoE all-reduce (one of its
  two TP all-reduces) sums the experts' outputs, as the engines run expert parallelism without
  attention data parallelism (vLLM ``FusedMoEParallelConfig.use_all2all_kernels``: ``dp_size >
  1 and use_ep``, vllm/model_executor/layers/fused_moe/config.py; TensorRT-LLM
  ``select_alltoall_method_type``: ``NotEnabled`` unless ``mapping.enable_attention_dp``,
  tensorrt_llm/_torch/modules/fused_moe/fused_moe_cutlass.py). Dispatch and combine
  all-to-alls belong to data-parallel attention ranks (``wide_ep``).
  Weight bytes per GPU are unchanged by ``ep``: the same experts cut whole rather than in slices.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from gpuplan.errors import GpuplanError
from gpuplan.hwmodels.collectives import collective_time
from gpuplan.sim.estimate.breakdown import Item
from gpuplan.sim.runtime.serving.quantization import block_weights_bytes
from gpuplan.workloads.dtypes import dtype_bytes
from gpuplan.workloads.model import ModelConfig
from gpuplan.workloads.ops import Gemm, Op
from gpuplan.workloads.params import count_params

# GPUs of one node joined by the scale-up link (DGX/HGX H100: 8 GPUs over NVSwitch, NVIDIA DGX
# H100 user guide, "Hardware Overview"); also the widest TP (``deployment.MAX_TP``)
NODE_GPUS = 8
PP_TENSORS = 2  # hidden states and residual cross each stage boundary (vLLM IntermediateTensors)


@dataclass(frozen=True, slots=True)
class Stage:
    """Blocks ``start`` to ``stop - 1`` of the model on one pipeline stage; ``first``/``last``:
    it also runs the embedding / the final norm, LM head and sampling."""

    index: int
    start: int
    stop: int
    first: bool
    last: bool

    @property
    def n_layers(self) -> int:
        return self.stop - self.start


def stage_split(cfg: ModelConfig, pp: int, pp_layers: tuple[int, ...] | None) -> tuple[int, ...]:
    """Blocks per stage, first to last, checked by training's rule (one rule for both): a ``pp``
    that does not divide the blocks needs ``pp_layers``, which must sum to them."""
    # imported here: ``sim.parallel``'s package pulls in pandas, which a serve run never loads
    from gpuplan.sim.parallel.strategy import Strategy, check_stages, stage_layer_counts

    strategy = Strategy(pp=pp, pp_layers=pp_layers)
    check_stages(strategy, cfg)
    return stage_layer_counts(strategy, cfg.n_layers)


def pipeline_fields(pp: int, ep: int, pp_layers: tuple[int, ...] | None = None) -> dict:
    """A replica's ``Deployment`` fields of pipeline and expert parallelism: ``pp`` stages of
    ``pp_layers`` blocks each (None: even), experts over ``ep`` GPUs of a stage."""
    if pp == 1 and pp_layers is None:
        return {"pp": 1, "ep": ep}
    return {"pp": pp, "pp_layers": pp_layers, "ep": ep}


def auto_split(n_layers: int, pp: int) -> tuple[int, ...]:
    """Training's ``--pp-layers auto`` (``strategy.auto_pp_layers``)."""
    from gpuplan.sim.parallel.strategy import auto_pp_layers

    return auto_pp_layers(n_layers, pp)


def even_or_auto_split(n_layers: int, pp: int) -> tuple[int, ...] | None:
    """``pp_layers`` of a suggested pipeline: None (an even split) where ``pp`` divides the
    blocks, else ``auto_split``'s."""
    return None if n_layers % pp == 0 else auto_split(n_layers, pp)


def stages(cfg: ModelConfig, counts: tuple[int, ...]) -> tuple[Stage, ...]:
    """The stages of a split, first to last."""
    out, start = [], 0
    for i, n in enumerate(counts):
        out.append(Stage(i, start, start + n, first=i == 0, last=i == len(counts) - 1))
        start += n
    return tuple(out)


def stage_groups(cfg: ModelConfig, stage: Stage) -> list[tuple[int, int]]:
    """(a representative block, how many blocks of its shape) on ``stage``: dense and MoE, and
    windowed and full-attention blocks apart, as ``sim.estimate.composite.layer_groups`` groups a model."""
    mixers = cfg.layer_kinds
    kinds: dict[tuple, tuple[int, int]] = {}
    for i in range(stage.start, stage.stop):
        key = (cfg.is_moe_layer(i), bool(cfg.sliding_window) and not cfg.is_windowed_layer(i),
               cfg.ffn_kind(i), mixers[i])  # every layer kind apart (``layer_kinds``)
        first, n = kinds.get(key, (i, 0))
        kinds[key] = (first, n + 1)
    return [kinds[k] for k in sorted(kinds)]


def check_ep(cfg: ModelConfig, tp: int, ep: int) -> None:
    """``ep`` shards a MoE model's experts over GPUs of one stage: it must divide the experts
    and the stage's ``tp`` GPUs."""
    if ep == 1:
        return
    if not cfg.is_moe:
        raise GpuplanError(
            f"ep={ep} is invalid for {cfg.name}: expert parallelism needs a MoE model; "
            "this one is dense (use ep=1)"
        )
    if cfg.n_experts % ep:
        valid = [d for d in range(1, tp + 1) if cfg.n_experts % d == 0 and tp % d == 0]
        raise GpuplanError(
            f"ep={ep} does not divide {cfg.name}'s n_experts={cfg.n_experts}; valid ep at "
            f"tp={tp}: {', '.join(map(str, valid))}"
        )
    if tp % ep:
        raise GpuplanError(
            f"ep={ep} is invalid at tp={tp}: the experts are sharded over GPUs of one pipeline "
            f"stage, so ep must divide tp (ep=tp is vLLM's --enable-expert-parallel); for experts "
            f"over ep={ep} GPUs of data-parallel attention ranks add --dp-attention"
        )


def expert_parallel_ops(ops: list[Op], *, ep: int) -> list[Op]:
    """One MoE block's kernels (``ops``, priced at ``tp``) under ``ep``: the routed experts'
    GEMMs and activation for the GPU's ``n_experts / ep`` experts, each sliced over ``tp / ep``
    only (``ep`` times wider than under pure TP); no all-to-all (module docstring: the tokens
    are on every GPU of the stage, the MoE all-reduce combines)."""
    out: list[Op] = []
    for op in ops:
        if not op.name.startswith("expert_") or op.name.startswith("expert_grouping"):
            out.append(op)
            continue
        if isinstance(op, Gemm):
            # the slice of d_ff_expert over tp becomes a slice over tp / ep
            wide = {"gate_up_proj": "n", "fc1": "n", "down_proj": "k", "fc2": "k"}
            dim = wide.get(op.name.removeprefix("expert_"))
            grown = {dim: getattr(op, dim) * ep} if dim else {}
            out.append(replace(op, count=max(1, op.count // ep), **grown))
        else:  # the activation between the projections: per expert, ep times wider
            out.append(replace(op, hidden=op.hidden * ep, count=max(1, op.count // ep),
                               tokens=op.tokens if op.count > 1 else max(1, op.tokens // ep)))  # fmt: skip
    return out


def boundary_crosses_node(tp: int, boundary: int) -> bool:
    """Whether the send after stage ``boundary`` leaves its node: stage s holds GPUs
    s*tp .. (s+1)*tp - 1, nodes hold ``NODE_GPUS`` consecutive GPUs."""
    return ((boundary + 1) * tp) // NODE_GPUS != ((boundary + 1) * tp - 1) // NODE_GPUS


def p2p_bytes(cfg: ModelConfig, tokens: int, act_dtype: str) -> float:
    """Bytes each GPU sends to the next stage for an iteration of ``tokens`` tokens."""
    return PP_TENSORS * tokens * cfg.d_model * dtype_bytes(act_dtype)


def p2p_s(dep, tokens: int, boundary: int) -> float:
    """One stage boundary's send of ``tokens`` tokens' activations (module docstring)."""
    if not tokens:
        return 0.0
    acc = dep.acc
    link = None
    if boundary_crosses_node(dep.tp, boundary):
        link = acc.scaleout_bytes_per_s
        if not link:
            raise GpuplanError(
                f"tp={dep.tp} x pp={dep.pp} spans more than one {NODE_GPUS}-GPU node of "
                f"{acc.key}, which has no scale-out bandwidth in the catalogue"
            )
    nbytes = p2p_bytes(dep.model, tokens, dep.act_dtype)
    return collective_time(acc, "send_recv", 2, nbytes, dep.eff,
                           link_bytes_per_s_override=link).total_s  # fmt: skip


def send_items(dep, tokens: int) -> list[Item]:
    """The ``pp - 1`` stage-to-stage sends of a micro-batch of ``tokens`` tokens, as items."""
    return [Item(layer="parallel", category="communication", op=f"pp send stage {b} -> {b + 1}",
                 phase="iteration", time_s=p2p_s(dep, tokens, b), bound="bandwidth")
            for b in range(dep.pp - 1)]  # fmt: skip


def stage_param_counts(pc, stage: Stage, pp: int) -> tuple[int, int, int]:
    """(block, 16-bit split and final-norm parameters) a stage holds, of ``count_params``'s."""
    blocks = sum(pc.per_layer[stage.start : stage.stop])
    # a VLM's vision tower runs before the first block: 16 bits, split over tp like the vocabulary
    vocab = pc.embedding + pc.vision if stage.first else 0
    if not stage.last:
        return blocks, vocab, 0
    # a tied head is the embedding again, on the last stage, once the stages are apart
    vocab += pc.lm_head or (pc.embedding if pp > 1 else 0)
    return blocks, vocab, pc.final_norms


def micro_batches(prefill, decode_seqs: int, kv_tokens: float, sampled: int, pp: int) -> list:
    """An iteration's work as the micro-batches in flight through ``pp`` stages: the decode
    sequences split as evenly as they go over ``min(pp, decode_seqs)`` micro-batches, the prefill
    pieces joining the first (a piece is one sequence's chunk and is not split); each as
    (prefill, decode sequences, cached tokens they read, sequences sampled)."""
    n = min(pp, decode_seqs) if decode_seqs else 1
    if n == 1:
        return [(prefill, decode_seqs, kv_tokens, sampled)]
    base, extra = divmod(decode_seqs, n)
    out = []
    for j in range(n):
        d = base + (j < extra)
        # every decode sequence samples; what else samples (finished prompts) is the first's
        out.append((prefill if j == 0 else (), d, kv_tokens * d / decode_seqs,
                    d if j else sampled - (decode_seqs - d)))  # fmt: skip
    return out


def pipeline_period_s(stage_s: list[list[float]], p2p_s: list[float], overhead_s: float) -> float:
    """Wall time of one iteration of a replica whose micro-batch j spends ``stage_s[j][i]`` on
    stage i and ``p2p_s[j]`` in its sends: each micro-batch passes every stage in turn (its
    latency), and each stage runs every micro-batch (its busy time); the longer sets the pace
    (the steady state of ``pp`` micro-batches in flight, vLLM's ``pipeline_parallel_size``
    concurrent batches: v1 ``EngineCore.step_with_batch_queue``), plus the CPU's fixed cost."""
    latency = max(sum(row) + p for row, p in zip(stage_s, p2p_s, strict=True))
    busy = max(sum(col) for col in zip(*stage_s, strict=True))
    return max(latency, busy) + overhead_s


def stage_weights_bytes(dep, stage: Stage, *, tp: int, pc=None) -> float:
    """Weight bytes on each GPU of ``stage``: its blocks in the weight format split over ``tp``
    (experts whole over ``ep``, sliced over ``tp / ep``: the same bytes), its embedding (and a
    VLM's vision tower) or LM head in 16 bits split over ``tp``, its final norm replicated (as
    ``kv_cache.weights_bytes_per_gpu`` counts a whole replica)."""
    pc = pc or count_params(dep.model)
    blocks, vocab, norms = stage_param_counts(pc, stage, dep.pp)
    return (block_weights_bytes(dep.model, blocks, dep.weight_dtype) / tp
            + (vocab / tp + norms) * dtype_bytes("bf16"))  # fmt: skip


def binding_stage(
    dep, *, tp: int, free_bytes: float, block_bytes: float
) -> tuple[float, float, int]:
    """(weight bytes per GPU, bytes of one block per GPU, blocks) of the stage that holds the
    fewest blocks: every stage keeps its own blocks' share of each block of tokens (``free_bytes``:
    what each GPU has left after the workspace; ``block_bytes``: a block of every layer)."""
    n, pc = dep.model.n_layers, count_params(dep.model)
    options = []
    for st in dep.stages:
        weights = stage_weights_bytes(dep, st, tp=tp, pc=pc)
        share = block_bytes * st.n_layers / n
        options.append((max(0, math.floor((free_bytes - weights) / share)), weights, share))
    blocks, weights, share = min(options)
    return weights, share, blocks


MAX_PP_ADVICE = 16  # the deepest pipeline an error message suggests (16 nodes of 8 GPUs)


def fitting_pp(dep, sched, fits) -> tuple[str, dict[str, str]] | None:
    """Advice for a model that fits no single node: the shallowest pipeline of stages of the
    widest TP that divides the heads on which ``fits(deployment)`` holds, as (advice, its flags),
    or None."""
    cfg = dep.model
    tp = max(t for t in range(1, NODE_GPUS + 1) if cfg.n_heads % t == 0)
    for pp in range(2, min(cfg.n_layers, MAX_PP_ADVICE) + 1):
        if tp * pp <= dep.gpus:
            continue
        try:
            layers = even_or_auto_split(cfg.n_layers, pp)
            ep = dep.ep if tp % dep.ep == 0 else 1
            trial = replace(dep, tp=tp, pp=pp, pp_layers=layers, ep=ep)
        except GpuplanError:
            continue
        if fits(trial):
            flags = {"--tp": str(tp), "--pp": str(pp)}
            if layers is not None:
                flags["--pp-layers"] = ",".join(map(str, layers))
            given = " ".join(f"{k} {v}" for k, v in flags.items())
            return f"it needs tp={tp} x pp={pp} ({tp * pp} GPUs per replica: {given})", flags
    return None
