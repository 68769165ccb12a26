"""Multi-token prediction (MTP) as the engines run it for speculative decoding
(``gpuplan serve --speculative mtp``): the model's own MTP module drafts ``k`` tokens a step.

DeepSeek-V3/R1 ship one MTP module (``ModelConfig.mtp_layers``, the HF config's
``num_nextn_predict_layers``): an embedding and an LM head shared with the main model, two
RMSNorms (``enorm`` on the token's embedding, ``hnorm`` on the main model's hidden state), a
``2d -> d`` projection (``eh_proj``) of the two concatenated, one full transformer block of the
main model's last kind (MLA and MoE in DeepSeek-V3), and the shared head's norm (DeepSeek-V3
technical report, arXiv:2412.19437, section 2.2). The engines run that one module
autoregressively for ``k`` draft tokens (SGLang ``--speculative-algorithm EAGLE
--speculative-num-steps k --speculative-eagle-topk 1 --speculative-num-draft-tokens k+1``;
vLLM ``--speculative-config '{"method": "deepseek_mtp", "num_speculative_tokens": k}'``;
TensorRT-LLM ``MTPDecodingConfig(num_nextn_predict_layers=k)``, its "MTP Eagle" path, the default
for DeepSeek-V3/R1: docs/source/blogs/tech_blog/blog2_DeepSeek_R1_MTP_Implementation_and_Optimization.md).

A step's drafting is ``k`` passes of the module (``MtpDraft``), each through the existing
operators and prices (``iteration``): the first over the ``k + 1`` positions the target just
verified (vLLM ``vllm/v1/spec_decode/eagle.py`` ``propose()`` runs the first draft forward over
every scheduled token, SGLang its draft extend over the accepted ones; TensorRT-LLM's blog:
"we use all of them along with their corresponding hidden states as inputs for the first MTP
module forward"), the others over one token a sequence; each pass: the embedding lookup, the
two norms, ``eh_proj``, the block's kernels (``iteration.token_ops``), its attention over the
module's own cache (one layer's share of the target's, ``StepModel``), the shared head's norm
and the LM head (``iteration.sample_ops``, last position only), launched as the deployment
launches decode (one CUDA graph a pass where it captures decode). ``eh_proj`` is a plain
``nn.Linear`` in SGLang (python/sglang/srt/models/deepseek_nextn.py) and vLLM
(vllm/model_executor/models/deepseek_mtp.py): unquantized and whole on every GPU.

Memory: the module's weights less the shared tables (``workloads.params.mtp_params`` counts the
checkpoint's own copies of them): its block split over the tensor-parallel GPUs as the target's,
``eh_proj`` and the norms whole on each; and one layer of KV cache per module (TensorRT-LLM's
blog: "the MTP module reuses the same KV cache when predicting multiple draft tokens").

Acceptance (``default_acceptance``): per position, each the rate at which position ``i`` is
accepted given positions ``1 .. i-1`` were (vLLM's logged "per-position acceptance rate" is
unconditional: divide each by the one before it). Published for DeepSeek's MTP module:

- position 1: the DeepSeek-V3 technical report, section 5.4.3: "the acceptance rate of the
  second token prediction ranges between 85% and 90%" (the midpoint is taken);
- positions 2 and 3: SGLang reports a mean acceptance length of 2.65 tokens a step at
  ``--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4``
  for DeepSeek-V3.2 (the same single MTP module reused;
  https://github.com/sgl-project/sglang/pull/20809); the one rate of positions 2 and 3 that
  gives it after position 1's is solved for (``later_rate``). Beside it, within the "2.x" of
  TensorRT-LLM's DeepSeek-R1 blog at three draft tokens, and vLLM's DeepSeek-R1 k=1 measurement
  of 81-82.3% (https://github.com/vllm-project/vllm/pull/12755).

Beyond three draft tokens nothing is published for the module reused: ``--accept-rate`` is then
required.
"""

from __future__ import annotations

import math
from dataclasses import replace

from gpuplan.errors import GpuplanError

# DeepSeek-V3 technical report (arXiv:2412.19437) section 5.4.3: 85-90% second-token acceptance
FIRST_POSITION_ACCEPT = (0.85 + 0.90) / 2
# SGLang, DeepSeek-V3.2 with MTP at 3 steps, top-k 1, 4 draft tokens: accept length 2.65
# (https://github.com/sgl-project/sglang/pull/20809)
THREE_DRAFT_ACCEPT_LENGTH = 2.65
MAX_PUBLISHED_K = 3
ACCEPT_SOURCE = ("DeepSeek-V3 report sec. 5.4.3 (position 1) and SGLang's 2.65 tokens a step at "
                 "3 draft tokens (positions 2-3)")  # fmt: skip


def later_rate() -> float:
    """The one conditional rate ``c`` of positions 2 and 3 with
    ``1 + a1 + a1 c + a1 c^2`` = the published three-draft acceptance length."""
    a1, length = FIRST_POSITION_ACCEPT, THREE_DRAFT_ACCEPT_LENGTH
    q = (length - 1 - a1) / a1  # c^2 + c - q = 0
    return (-1 + math.sqrt(1 + 4 * q)) / 2


def mtp_models() -> list[str]:
    """The presets that carry MTP layers."""
    from gpuplan.workloads.presets import PRESETS

    return sorted(name for name, cfg in PRESETS.items() if cfg.mtp_layers)


def check_mtp(cfg) -> None:
    """One line naming the models that have MTP layers, and the other methods, unless ``cfg``
    has them."""
    if not cfg.mtp_layers:
        raise GpuplanError(
            f"--speculative mtp: model {cfg.name} has no MTP layers (num_nextn_predict_layers=0); "
            f"MTP runs on {', '.join(mtp_models())} or a config.json with "
            "num_nextn_predict_layers >= 1; for this model give ngram, eagle or draft:MODEL"
        )


def default_acceptance(cfg, k: int) -> tuple[float, ...]:
    """The published per-position acceptance of DeepSeek's MTP module (module docstring) for
    ``k`` draft tokens of a DeepSeek-V3-architecture model; otherwise ``--accept-rate`` is
    needed."""
    check_mtp(cfg)
    if not cfg.is_mla:
        raise GpuplanError(f"--speculative mtp on {cfg.name}: no published acceptance for its MTP "
                           "module: give --accept-rate (one rate, or one a position)")  # fmt: skip
    if k > MAX_PUBLISHED_K:
        raise GpuplanError(f"--spec-tokens {k} with --speculative mtp: published MTP acceptance "
                           f"covers 1 to {MAX_PUBLISHED_K} draft tokens: give --accept-rate "
                           "(one rate, or one a position)")  # fmt: skip
    return (FIRST_POSITION_ACCEPT, *[later_rate()] * (k - 1))


def mtp_layer(cfg) -> int:
    """The main model's block the MTP module's block is like: the last one (``mtp_params``)."""
    return cfg.n_layers - 1


def mtp_weights_bytes(dep, tp: int) -> float:
    """The MTP modules' weights on each GPU, the shared embedding and head left out."""
    from gpuplan.sim.runtime.serving.quantization import block_weights_bytes
    from gpuplan.workloads.dtypes import dtype_bytes
    from gpuplan.workloads.params import layer_params, norm_params

    cfg = dep.model
    d = cfg.d_model
    block = block_weights_bytes(cfg, layer_params(cfg, mtp_layer(cfg)), dep.weight_dtype) / tp
    whole = (2 * d * d + 3 * norm_params(cfg, d)) * dtype_bytes("bf16")  # eh_proj, 3 norms
    return cfg.mtp_layers * (block + whole)


def mtp_kv_bytes_per_token(dep, tp: int) -> float:
    """KV-cache bytes a cached token adds on each GPU: one layer per MTP module."""
    from gpuplan.sim.runtime.serving.kv_cache import kv_bytes_per_token_layer

    return dep.model.mtp_layers * kv_bytes_per_token_layer(dep.model, tp=tp, kv_dtype=dep.kv_dtype)


class MtpDraft:
    """The MTP module's drafting passes on a target ``StepModel`` (module docstring); the token
    part of a pass memoized by (sequences, positions a sequence)."""

    def __init__(self, dep):
        check_mtp(dep.model)
        self.dep = dep
        self._memo: dict[tuple[int, int], tuple[float, int, int]] = {}

    def _token_part(self, seqs: int, rows: int) -> tuple[float, int, int]:
        """(seconds, kernels, host calls) of a pass's kernels but its attention, and of one
        layer's attention kernels (counted, not timed)."""
        key = (seqs, rows)
        hit = self._memo.get(key)
        if hit is None:
            hit = self._memo[key] = _pass_token_part(self.dep, seqs=seqs, rows=rows)
        return hit

    def draft_s(self, step, k: int, *, seqs: int, context: int) -> float:
        """``k`` passes for ``seqs`` sequences of ``context`` cached tokens each (before the
        ``k + 1`` verified ones)."""
        from gpuplan.sim.runtime.serving.iteration import iteration_launch

        layers = step.dep.model.n_layers  # the module's attention: one layer's share
        graph = self.dep.cuda_graph
        total = 0.0
        for j in range(k):
            rows = k + 1 if j == 0 else 1
            token_s, kernels, calls = self._token_part(seqs, rows)
            if j == 0:
                attention_s = step.prefill_attention_s(rows, context, seqs) / layers
            else:
                kv = seqs * (context + k + 1 + j)
                attention_s = step.decode_attention_s(seqs, kv) / layers
            kernels_s = token_s + attention_s
            total += kernels_s + iteration_launch(self.dep, kernels, kernels_s, calls,
                                                  graph=graph).total_s  # fmt: skip
        return total


def _pass_token_part(dep, *, seqs: int, rows: int) -> tuple[float, int, int]:
    """(seconds, kernels, torch calls) of one MTP pass's token part: its block through
    ``iteration.token_part`` (the one price of a block's token part: a wide-EP group's busiest
    rank, its all-to-alls and two-batch overlap included), and its ends at that rank's share."""
    from gpuplan.hwmodels.price import host_calls, kernel_count
    from gpuplan.sim.runtime.serving.iteration import (
        decode_ops,
        mixer_templates,
        outer_ops,
        price_op,
        sample_ops,
        token_part,
    )
    from gpuplan.sim.runtime.serving.wide_ep import busiest_rank_tokens
    from gpuplan.workloads.ops import Elementwise, Gemm

    cfg = dep.model
    group, layer, d = seqs * rows, mtp_layer(cfg), cfg.d_model
    tokens, rank_seqs = busiest_rank_tokens(dep, group), busiest_rank_tokens(dep, seqs)
    norms = [Elementwise(name=f"mtp_{n}", op=cfg.norm, tokens=tokens, hidden=d, pass_="fwd",
                         dtype=dep.act_dtype) for n in ("enorm", "hnorm")]  # fmt: skip
    eh_proj = Gemm(name="eh_proj", m=tokens, n=d, k=2 * d, dtype=dep.act_dtype)
    block, times, parts = token_part(dep, tokens=tokens, layer=layer, group_tokens=group)
    ends = [*outer_ops(dep, tokens=tokens), *norms, *sample_ops(dep, seqs=rank_seqs)]
    seconds = sum(price_op(op, dep).total_s for op in ends)
    seconds += parts * sum(times[id(op)].total_s for op in block)
    seconds += price_op(eh_proj, replace(dep, weight_dtype="bf16")).total_s  # unquantized
    ops = [*ends, eh_proj, *[op for att in mixer_templates(dep, layer=layer)
                             for op in decode_ops(dep, att, seqs=1, kv_tokens=1)]]  # fmt: skip
    kernels = sum(kernel_count(op) for op in ops) + parts * sum(kernel_count(op) for op in block)
    calls = sum(host_calls(op) for op in ops) + parts * sum(host_calls(op) for op in block)
    return seconds, kernels, calls
