"""The operators of one serving iteration, and their prices one by one (the reference).

An iteration of a replica (Orca, Yu et al. OSDI 2022; vLLM; Sarathi-Serve, Agrawal et al. OSDI
2024) runs every scheduled token through the model once:

- the token part: each block's kernels over T = prefill tokens + decode sequences (norms, the
  q/k/v, output and MLP GEMMs, RoPE, residual adds, the KV-cache append, and under tensor
  parallelism two all-reduces per block), the embedding and the final norm;
- the sampling part: the LM head and the fp32 logits of the S sequences that emit a token;
- attention: the decode sequences read their caches in one flash-decoding kernel (C cached
  tokens in all); each prefill piece (new tokens of one or more sequences after the tokens
  they already cached) attends causally in its own kernel;
- padding: a decode-only iteration of a deployment with ``decode_buckets`` or
  ``decode_context_tokens`` runs the padded batch (``Deployment.padded_decode``): every
  operator over the bucket's rows, the attention over the fixed span of each;
- the cache: a masked static-cache decode's GQA K/V repeat (``masked_decode_attention``) and a
  dynamic cache's ``torch.cat`` (``cache_concat``), both linear in the tokens cached;
- launch: the CPU issues every kernel eagerly, except that decode-only iterations replay a CUDA
  graph when ``cuda_graph`` is set (vLLM captures decode batches only); eager issue hides
  behind the share ``host_overlap`` of the device's time (``iteration_launch``); plus a fixed
  CPU cost per iteration (``Deployment.iteration_overhead_s``) and per running sequence
  (``seq_overhead_s``).

``iteration_breakdown`` prices those operators through ``hwmodels`` (quantized GEMMs through
``quantization``) and returns a ``Breakdown`` whose items sum to the iteration's time.
``step_model.StepModel`` gives the same number fast, from the same operator lists
(``token_ops``, ``outer_ops``, ``sample_ops``, ``decode_ops``, ``cache_ops``,
``prefill_attention``) and the same launch model (``iteration_launch``):
``tests/test_one_cost_path.py`` holds them equal for every stack preset.

Under pipeline parallelism (``pipeline``) each stage runs the token part and the attention of
its own blocks, the first the embedding, the last the final norm and the sampling part, and
every stage issues its own kernels (one worker process per GPU); the stages of one iteration
are joined by point-to-point sends (``pipeline_breakdown``, whose time is ``StepModel``'s).
Under expert parallelism a MoE block's routed experts are cut whole, every GPU of the stage
holding every token and the MoE all-reduce combining (``pipeline.expert_parallel_ops``); a
wide-EP group with data-parallel attention (``wide_ep``) moves its tokens in all-to-alls and
runs in lockstep, its iteration priced as its busiest rank runs it.
"""

from __future__ import annotations

from dataclasses import replace

from gpuplan.hwmodels.kernel_time import KernelTime
from gpuplan.hwmodels.launch import launch_cost
from gpuplan.hwmodels.price import price
from gpuplan.sim.estimate.breakdown import Breakdown, Item, priced_items
from gpuplan.sim.estimate.compilation import eager, fuse_elementwise, fuse_residual_norms
from gpuplan.sim.estimate.composite import layer_groups
from gpuplan.sim.runtime.serving.all_reduce import tp_all_reduce
from gpuplan.sim.runtime.serving.batch import Batch
from gpuplan.sim.runtime.serving.mla_forms import (
    absorbed_decode,
    cache_bytes_per_token_rank,
    caches_latent,
    expanded_prefill,
    without_expansion,
)
from gpuplan.sim.runtime.serving.pipeline import (
    micro_batches,
    send_items,
    stage_groups,
)
from gpuplan.sim.runtime.serving.quantization import (
    compute_dtype,
    op_weight_dtype,
    quantized_gemm_time,
)
from gpuplan.sim.runtime.serving.wide_ep import (
    busiest_rank_pieces,
    micro_batch_tokens,
    moe_ops,
    priced_together,
    rank_share,
)
from gpuplan.workloads.attention_block import MLA_ABSORB_GEMMS, kv_cache_append
from gpuplan.workloads.dtypes import dtype_bytes
from gpuplan.workloads.layer_kinds import TOKEN_CACHE_KINDS
from gpuplan.workloads.operators import embedding_forward, layer_forward, logit_softcap
from gpuplan.workloads.ops import (
    INDUCTOR_COPY,
    Attention,
    Collective,
    Elementwise,
    Gemm,
    Memory,
    Op,
    Scan,
)

# --- the operators of an iteration (the reference) ------------------------------------------


def _as_run(ops: list[Op], dep) -> list[Op]:
    """The block's kernels as the runtime's elementwise implementation runs them: eager PyTorch
    op by op; an engine's fused kernels, each residual add inside its RMSNorm where the engine
    does that (``Deployment.fused_add_norm``: ``fuse_residual_norms``), and under torch.compile
    the remaining runs fused by Inductor."""
    if dep.impl == "eager":
        return eager(ops)
    if dep.fused_add_norm:
        ops = fuse_residual_norms(ops)
    return fuse_elementwise(ops) if dep.impl == "compiled" else ops


def token_ops(dep, *, tokens: int, layer: int = 0, group_tokens: int | None = None,
              low_latency: bool = True) -> list[Op]:  # fmt: skip
    """One block's kernels over ``tokens`` tokens, attention excepted: GEMMs, norms, RoPE, adds,
    the KV-cache append and, under tensor parallelism, its two all-reduces (Megatron); a MoE
    block's experts under expert parallelism as ``wide_ep.moe_ops`` runs them."""
    cfg = dep.model
    ops = layer_forward(cfg, batch=1, seq=tokens, dtype=dep.act_dtype, layer=layer, tp=dep.tp,
                        grouped_experts=dep.grouped_experts, moe_glue=dep.moe_glue)
    ops = [op for op in ops if not isinstance(op, Attention | Scan)]  # ``mixer_templates``
    ops = without_expansion(dep, ops)  # MLA: decode tokens keep the latent (``mla_forms``)
    if dep.ep > 1 and cfg.is_moe_layer(layer):
        ops = moe_ops(ops, dep, tokens=tokens, group_tokens=group_tokens, low_latency=low_latency)
    kind = cfg.layer_kind(layer)
    if kind in TOKEN_CACHE_KINDS:  # a fixed-state layer writes its state in its scan
        ops.append(kv_cache_append(cfg, tokens=tokens, dtype=dep.kv_dtype, tp=dep.tp,
                                   indexer=kind == "dsa", latent=caches_latent(cfg, dep.stack)))
    if dep.tp > 1:
        reduce_bytes = tokens * cfg.d_model * dtype_bytes(dep.act_dtype)
        ops.append(tp_all_reduce(dep, "tp all_reduce", nbytes=reduce_bytes, tokens=tokens,
                                 count=2))
    return _as_run(ops, dep)


def token_part(dep, *, tokens: int, layer: int = 0, group_tokens: int | None = None,
               low_latency: bool = True) -> tuple[list[Op], dict[int, KernelTime], int]:  # fmt: skip
    """(kernels, their times by ``id``, micro-batches) of one block's token part as it runs:
    ``token_ops`` priced as a wide-EP group overlaps them (``wide_ep.priced_together``): the
    one price of the token part of ``iteration_breakdown`` and ``StepModel``."""
    parts, tokens, group_tokens = micro_batch_tokens(dep, tokens, group_tokens)
    ops = token_ops(dep, tokens=tokens, layer=layer, group_tokens=group_tokens,
                    low_latency=low_latency)  # fmt: skip
    return ops, priced_together(dep, ops, [price_op(op, dep) for op in ops]), parts


def outer_ops(dep, *, tokens: int, first: bool = True, last: bool = True) -> list[Op]:
    """Embedding lookup (vocab-parallel: an all-reduce under TP) on the ``first`` stage and the
    final norm on the ``last`` (one stage: both)."""
    cfg = dep.model
    ops: list[Op] = []
    if first:
        ops += embedding_forward(cfg, tokens=tokens, dtype=dep.act_dtype)
    if first and dep.tp > 1:
        nbytes = tokens * cfg.d_model * dtype_bytes(dep.act_dtype)
        ops.append(tp_all_reduce(dep, "embedding all_reduce", nbytes=nbytes, tokens=tokens))
    if last:
        ops.append(Elementwise(name="final_norm", op=cfg.norm, tokens=tokens, hidden=cfg.d_model,
                               pass_="fwd", dtype=dep.act_dtype))  # fmt: skip
    return _as_run(ops, dep)


def sample_ops(dep, *, seqs: int) -> list[Op]:
    """LM head over the vocabulary shard, fp32 logits written and read by the sampler, and
    their gather onto one rank under TP."""
    cfg = dep.model
    shard = -(-cfg.vocab_size // dep.tp)
    ops: list[Op] = [
        Gemm(name="lm_head", m=seqs, n=shard, k=cfg.d_model, dtype=dep.act_dtype),
        # a final soft-cap (Gemma 2): vLLM's LogitsProcessor divides, tanh, multiplies (eager)
        *[replace(op, impl="eager") for op in logit_softcap(cfg, tokens=seqs,
                                                           dtype=dep.act_dtype, vocab=shard)],
        Memory(name="logits", op="softmax", bytes_moved=seqs * shard * (4 + 4)),
    ]
    if dep.tp > 1:
        ops.append(_collective("logits gather", "all_gather", dep.tp, seqs * shard * 4))
    return ops


def cache_concat(dep, kv_tokens: float) -> Memory:
    """HF DynamicCache's torch.cat in one block: the cached keys and values (``kv_tokens`` in
    all) read and written again with the new token, one kernel each."""
    per_token = cache_bytes_per_token_rank(dep)
    return Memory(name="kv_cache_cat", op="copy", bytes_moved=2 * kv_tokens * per_token, calls=2,
                  count=1)


def _collective(name: str, op: str, world: int, nbytes: float, count: int = 1) -> Collective:
    return Collective(name=name, op=op, world=world, bytes_per_rank=nbytes, count=count)


def mixer_templates(dep, *, layer: int = 0) -> list[Attention | Scan]:
    """Block ``layer``'s context-dependent mixer kernels for one sequence (heads per rank, dims
    and dtype): its attention (a sparse-attention block: the indexer's scoring, then the
    attention), or its state scan (linear attention, Mamba-2), or none (a mixer-less block)."""
    ops = layer_forward(dep.model, batch=1, seq=1, dtype=dep.act_dtype, layer=layer, tp=dep.tp)
    return [op for op in ops if isinstance(op, Attention | Scan)]


def attention_template(dep, *, layer: int = 0) -> Attention:
    """Block ``layer``'s attention for one sequence (its heads per rank, dims and dtype)."""
    return next(op for op in mixer_templates(dep, layer=layer) if isinstance(op, Attention)
                and op.name == "attention")


def decode_attention(dep, att: Attention | Scan, *, seqs: int,
                     kv_tokens: float) -> Attention | Scan:
    """One flash-decoding kernel for ``seqs`` sequences reading ``kv_tokens`` cached tokens in
    all (as ``seqs`` sequences of the mean length: the bytes are the same), in the cache's dtype
    (a sparse-attention indexer: in its own fp8); a state scan's recurrent step of ``seqs``
    sequences, each reading and writing its state in the cache's dtype."""
    if isinstance(att, Scan):
        return replace(att, name=f"decode_{att.name}", batch=seqs, seq_q=1,
                       state_dtype=dep.kv_dtype)
    return replace(
        att,
        name="decode_attention",
        batch=seqs,
        seq_q=1,
        seq_kv=kv_tokens / seqs,
        causal=False,
        dtype=att.dtype if att.name == "indexer" else dep.kv_dtype,
    )


def masked_decode_attention(dep, dec: Attention) -> list[Op]:
    """A decode's attention as the deployment runs it: under ``repeat_kv_masked`` with a fixed
    masked span (a static cache), GQA keys and values are first copied to every query head
    (transformers' ``repeat_kv``: an expand and a reshape each, one copy kernel each, reading
    the cache once and writing it ``heads_q / heads_kv`` times), and the kernel reads the copies;
    compiled (``impl == "compiled"``), the copies are one Triton kernel each (``INDUCTOR_COPY``).
    A sliding-window block's static cache holds at most its window a sequence (transformers
    ``cache_utils``: a sliding layer's cache is ``min(sliding_window, max_cache_len)`` long), so
    its copies stop growing at the window, as its attention's reads do (``Attention.kv_read``)."""
    if (not isinstance(dec, Attention) or dec.name != "decode_attention"
            or not dep.repeat_kv_masked or dep.decode_context_tokens is None
            or dec.heads_kv >= dec.heads_q or dep.eff.attention_kernel == "eager"
            or dec.shared_kv):  # an absorbed MLA decode reads its latent as it is
        return [dec]  # (transformers' eager attention prices its own repeat_kv)
    held = min(dec.seq_kv, dec.window) if dec.window else dec.seq_kv
    kv_tokens = dec.batch * held
    per_token = cache_bytes_per_token_rank(dep)
    rep = dec.heads_q / dec.heads_kv
    family = INDUCTOR_COPY if dep.impl == "compiled" else "copy"
    copy = Memory(name="repeat_kv", op=family, bytes_moved=kv_tokens * per_token * (1 + rep) / 2,
                  count=2, calls=3)  # keys and values: index with None, expand, reshape
    return [copy, replace(dec, heads_kv=dec.heads_q)]


def decode_ops(dep, att: Attention, *, seqs: int, kv_tokens: float) -> list[Op]:
    """One block's decode attention as the deployment runs it (``decode_attention`` under
    ``masked_decode_attention``; MLA absorbed, ``mla_forms``): what ``iteration_breakdown``
    prices and ``StepModel`` fits."""
    dec = decode_attention(dep, att, seqs=seqs, kv_tokens=kv_tokens)
    return [out for op in absorbed_decode(dep, dec) for out in masked_decode_attention(dep, op)]


def cache_ops(dep, kv_tokens: float) -> list[Op]:
    """One block's cache maintenance of a decode beyond its append: a dynamic cache's
    ``cache_concat``, none for a static or paged one."""
    return [cache_concat(dep, kv_tokens)] if dep.kv_cache == "dynamic" else []


def iteration_launch(dep, n_kernels: int, kernels_s: float, host_calls: int, *, graph: bool,
                     overlap: float | None = None):
    """``launch_cost`` of one iteration's ``n_kernels`` kernels (``kernels_s`` of device time,
    ``host_calls`` torch calls) as the deployment issues them: a CUDA-graph replay when
    ``graph``, else eager issue with the framework's ``host_extra_s``, hidden behind the share
    ``host_overlap`` of the device's time. The one launch model of ``iteration_breakdown`` and
    ``StepModel`` (``overlap``: another share, 0 for the CPU's whole issue time)."""
    return launch_cost(n_kernels, kernels_s, dep.eff, cuda_graph=graph, host_calls=host_calls,
                       extra_host_s=0.0 if graph else dep.host_extra_s,
                       overlap=dep.host_overlap if overlap is None else overlap)  # fmt: skip


def prefill_attention(att: Attention | Scan, *, tokens: int, cached: int,
                      seqs: int) -> Attention | Scan:
    """Causal attention of ``tokens`` new tokens after ``cached`` ones, for ``seqs`` sequences
    (a state scan: its chunked scan over the new tokens, from each sequence's state)."""
    if isinstance(att, Scan):
        return replace(att, name=f"prefill_{att.name}", batch=seqs, seq_q=tokens)
    name = "prefill_indexer" if att.name == "indexer" else "prefill_attention"
    return replace(att, name=name, batch=seqs, seq_q=tokens, seq_kv=cached + tokens)


def prefill_ops(dep, att: Attention | Scan, *, tokens: int, cached: int, seqs: int) -> list[Op]:
    """One block's kernels of a prefill piece beyond the token part (``prefill_attention``; MLA
    expanded first, ``mla_forms``): what ``iteration_breakdown`` prices and ``StepModel`` fits."""
    pre = prefill_attention(att, tokens=tokens, cached=cached, seqs=seqs)
    return expanded_prefill(dep, pre, tokens=tokens, cached=cached, seqs=seqs)


def price_op(op: Op, dep) -> KernelTime:
    """``hwmodels.price``, with quantized weights for GEMMs and a math-dtype fallback for
    devices that publish no 16-bit rate (``quantization``)."""
    if isinstance(op, Gemm) and op.name in MLA_ABSORB_GEMMS:  # a 16-bit bmm: one kernel
        return price(op, dep.acc, dep.eff)  # over its heads (``hwmodels.gemm.is_grouped``)
    if isinstance(op, Gemm):
        weight_dtype = op_weight_dtype(dep.model, op.name, dep.weight_dtype)
        return quantized_gemm_time(dep.acc, op, dep.eff, weight_dtype=weight_dtype)
    if isinstance(op, Attention) and op.seq_q > 1 and not dep.acc.supports(op.dtype):
        op = replace(op, dtype=compute_dtype(dep.acc, op.dtype))
    return price(op, dep.acc, dep.eff)


def _items(ops: list[Op], dep, *, repeat: int = 1, phase: str = "iteration") -> list[Item]:
    return priced_items(
        ops, dep.acc, dep.eff, phase=phase, repeat=repeat, price_fn=lambda op: price_op(op, dep)
    )


def padded_batch(dep, batch: Batch) -> Batch:
    """The batch a decode-only iteration really runs under the deployment's decode padding
    (``batch`` itself when there is none, or when the iteration has prefill work)."""
    if batch.prefill or not batch.decode_seqs or not dep.pads_decode:
        return batch
    rows, kv = dep.padded_decode(batch.decode_seqs, batch.decode_kv_tokens)
    return Batch(decode_seqs=rows, decode_kv_tokens=kv,
                 sampled=batch.samples + rows - batch.decode_seqs)  # fmt: skip


def iteration_breakdown(dep, batch: Batch) -> Breakdown:
    """Every kernel of one iteration priced one by one, plus launch and the CPU's fixed cost
    (under pipeline parallelism: ``pipeline_breakdown``)."""
    if dep.pp > 1:
        return pipeline_breakdown(dep, batch)
    return stage_breakdown(dep, batch, None, overhead=True)


def stage_breakdown(dep, batch: Batch, stage, *, overhead: bool) -> Breakdown:
    """One iteration's kernels on one pipeline ``stage`` (None: the whole model), with their
    launch, and the CPU's fixed cost when ``overhead`` (a wide-EP group: its busiest rank)."""
    items: list[Item] = []
    running = batch.seqs  # before any padding
    batch = padded_batch(dep, batch)
    tokens, rank = batch.tokens, rank_share(dep, batch)
    first, last = (True, True) if stage is None else (stage.first, stage.last)
    groups = layer_groups(dep.model) if stage is None else stage_groups(dep.model, stage)
    n_layers = sum(count for _, count in groups)
    if tokens:
        items += _items(outer_ops(dep, tokens=rank.tokens, first=first, last=last), dep)
    pieces: list[list[Item]] = [[] for _ in batch.prefill]
    for layer, count in groups:
        if tokens:
            ops, times, parts = token_part(dep, tokens=rank.tokens, layer=layer,
                                           group_tokens=tokens, low_latency=not batch.prefill)
            items += priced_items(ops, dep.acc, dep.eff, phase="iteration", repeat=count * parts,
                                  price_fn=lambda op, t=times: t[id(op)])  # fmt: skip
        for att in mixer_templates(dep, layer=layer):
            if rank.decode_seqs:
                dec = decode_ops(dep, att, seqs=rank.decode_seqs, kv_tokens=rank.kv_tokens)
                items += _items(dec, dep, repeat=count)
            for j, (c, cached, seqs) in enumerate(batch.prefill):
                pre = prefill_ops(dep, att, tokens=c, cached=cached, seqs=seqs)
                pieces[j] += _items(pre, dep, repeat=count)
    items += busiest_rank_pieces(dep, pieces)
    if rank.decode_seqs:
        items += _items(cache_ops(dep, rank.kv_tokens), dep, repeat=n_layers)
    if rank.samples and last:
        items += _items(sample_ops(dep, seqs=rank.samples), dep)
    graph = dep.cuda_graph and not batch.prefill
    kernels_s = sum(i.time_s for i in items)
    cost = iteration_launch(dep, sum(i.kernels for i in items), kernels_s,
                            sum(i.host_calls for i in items), graph=graph)
    what = "graph replay gaps" if graph else "host issue time not hidden"
    items.append(Item(layer="runtime", category="launch", op=what, phase="iteration",
                      time_s=cost.total_s, bound="launch"))  # fmt: skip
    if overhead:
        items += _cpu_items(dep, running)
    return Breakdown(items=tuple(items))


def _cpu_items(dep, running: int) -> list[Item]:
    """The replica's CPU work of one iteration of ``running`` sequences beyond issuing kernels
    (``Deployment.iteration_overhead_s``, ``seq_overhead_s``), once per iteration."""
    items = []
    if dep.iteration_overhead_s:
        items.append(Item(layer="runtime", category="scheduler", op="per-iteration CPU work",
                          phase="iteration", time_s=dep.iteration_overhead_s, bound="launch"))  # fmt: skip
    if dep.seq_overhead_s and running:
        items.append(Item(layer="runtime", category="scheduler", op="per-sequence CPU work",
                          phase="iteration", time_s=running * dep.seq_overhead_s, bound="launch"))  # fmt: skip
    return items


def pipeline_breakdown(dep, batch: Batch) -> Breakdown:
    """One iteration of a replica of ``dep.pp`` stages (``pipeline.pipeline_period_s``): the
    items of the path that sets its time, either one micro-batch through every stage and its
    sends (latency-bound) or one stage running every micro-batch (throughput-bound), plus the
    CPU's fixed cost."""
    # each micro-batch is padded as its own graph runs it (in ``stage_breakdown``)
    parts = micro_batches(batch.prefill, batch.decode_seqs, batch.decode_kv_tokens, batch.samples,
                          dep.pp)  # fmt: skip
    cells = [[stage_breakdown(dep, Batch(prefill=p, decode_seqs=d, decode_kv_tokens=kv,
                                         sampled=s), st, overhead=False)
              for st in dep.stages] for p, d, kv, s in parts]  # fmt: skip
    sends = [send_items(dep, padded_batch(dep, Batch(prefill=p, decode_seqs=d)).tokens)
             for p, d, _, _ in parts]  # fmt: skip
    paths = [[i for cell in row for i in cell.items] + items for row, items in zip(cells, sends, strict=True)]
    paths += [[i for row in cells for i in row[s].items] for s in range(dep.pp)]
    items = max(paths, key=lambda path: sum(i.time_s for i in path))
    return Breakdown(items=tuple(items + _cpu_items(dep, batch.seqs)))
