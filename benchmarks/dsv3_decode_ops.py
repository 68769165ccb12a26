"""DeepSeek-V3 decode, operator by operator: gpuplan's iteration breakdown beside aiconfigurator's
per-operator times for the same step (``docs/vs_aiconfigurator.md``: where the two differ).

    python3 benchmarks/dsv3_decode_ops.py [--gpu h200] [--stack trt-llm] [--context 2000]

Each layout is one decode step of ``batch`` sequences per attention rank at ``context`` cached
tokens, FP8 weights and FP8 KV cache: TP8 with the experts over the 8 GPUs (EP8), and eight
data-parallel attention ranks of TP1 with the experts over the 8 GPUs (``--dp-attention``).
gpuplan's items (``iteration.iteration_breakdown``) are summed into aiconfigurator's operator
groups (``GROUPS``); milliseconds a step, every layer. With aiconfigurator installed (the
optional extra), its operators are evaluated one by one on its SILICON database through
``cli_estimate(mode="static_gen")``'s model (aiconfigurator 0.12.0's private single-op path,
``aiconfigurator_core.sdk.engine._evaluate_single_op``); without it, gpuplan's column alone.
Nothing here is fitted: aiconfigurator's times are held out (``docs/aiconfigurator.md``).
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
from collections import defaultdict

from gpuplan.hwmodels.accelerators import get_accelerator
from gpuplan.sim.runtime.serving.batch import Batch
from gpuplan.sim.runtime.serving.deployment import Deployment
from gpuplan.sim.runtime.serving.iteration import iteration_breakdown
from gpuplan.sim.runtime.serving.on_stack import deployment_fields, stack_serving_efficiency
from gpuplan.sim.stacks import get_stack
from gpuplan.workloads.presets import get_model

LAYOUTS = ((8, 8, False), (1, 8, True))  # (tp, ep, dp_attention)
BATCHES = (1, 8, 32, 128)
AIC_SYSTEM = {"h100-sxm": "h100_sxm", "h200": "h200_sxm"}
AIC_BACKEND = {"trt-llm": "trtllm", "vllm": "vllm"}
# group: (gpuplan's item names, aiconfigurator's operator names)
GROUPS = {
    "norms": (("attn_norm", "mlp_norm", "attn_residual", "mlp_residual", "final_norm",
               "mlp_residual+attn_norm", "attn_residual+mlp_norm"),  # engines' fused add + norm
              ("generation_add_norm_1", "generation_add_norm_2")),
    "MLA block": (("q_a_proj", "kv_a_proj", "q_b_proj", "mla_w_uk", "decode_attention", "mla_w_uv",
                   "o_proj", "rope_q", "rope_k", "attn_out_layout", "kv_cache_append",
                   "q_a_norm", "kv_a_norm"), ("generation_mla_module",)),
    "  of which attention": (("decode_attention",), ("generation_attention",)),
    "router": (("router", "router_softmax"), ("generation_router_gemm",)),
    "routed experts": (("expert_gate_up_proj", "expert_silu_mul", "expert_down_proj", "permute",
                        "unpermute"), ("generation_moe",)),
    "expert grouping": (("expert_grouping", "moe_sort_rows", "moe_align_block_size"), ()),
    "shared expert": (("shared_gate_up_proj", "shared_silu_mul", "shared_down_proj"),
                      ("generation_shared_gate_up_gemm", "generation_shared_act_gate",
                       "generation_shared_ffn2_gemm")),
    "communication": (("tp all_reduce", "ep dispatch/combine all_to_all",
                       "ep dispatch low-latency scaleup", "ep combine low-latency scaleup",
                       "embedding all_reduce", "logits gather"),
                      ("generation_moe_pre_dispatch", "generation_moe_post_dispatch",
                       "generation_tp_allreduce")),
    "embedding, LM head": (("embedding", "lm_head", "logits"),
                           ("generation_embedding", "generation_logits_gemm")),
    "launch (graph gaps)": (("graph replay gaps", "host issue time not hidden"), ()),
    "CPU per iteration": (("per-iteration CPU work", "per-sequence CPU work"), ()),
}


def gpuplan_ops(gpu: str, stack: str, tp: int, ep: int, dpa: bool, batch: int,
                context: int) -> dict[str, float]:  # fmt: skip
    """gpuplan's items of one decode step, ms by item name."""
    acc, st = get_accelerator(gpu), get_stack(stack)
    dep = Deployment(model=get_model("deepseek-v3"), acc=acc, eff=stack_serving_efficiency(st, acc),
                     tp=tp, ep=ep, dp_attention=dpa, weight_dtype="fp8", kv_dtype="fp8",
                     **deployment_fields(st, tp=tp, gpu=acc.key))  # fmt: skip
    seqs = batch * (ep // tp if dpa else 1)
    out: dict[str, float] = defaultdict(float)
    for item in iteration_breakdown(dep, Batch(decode_seqs=seqs,
                                               decode_kv_tokens=seqs * (context + 1))).items:
        out[item.op] += item.time_s * 1e3
    return dict(out)


def _leaves(op):
    """aiconfigurator's leaf operators under its composites (overlap groups, a fallback's
    primary: the measured module, not its granular fallback)."""
    kids = [c for g in ("_group_a", "_group_b") for c in (getattr(op, g, None) or ())]
    if getattr(op, "_primary", None) is not None:
        kids.append(op._primary)
    if not kids:
        yield op
    for c in kids:
        yield from _leaves(c)


def _granular(op):
    for c in getattr(op, "_fallback", None) or ():
        yield from _leaves(c)
    for g in ("_group_a", "_group_b"):
        for c in getattr(op, g, None) or ():
            yield from _granular(c)


def aic_ops(gpu: str, stack: str, tp: int, ep: int, dpa: bool, batch: int,
            context: int) -> dict[str, float] | None:  # fmt: skip
    """aiconfigurator's operators of the same step, ms by name (``tpot`` its total), or None."""
    if importlib.util.find_spec("aiconfigurator") is None or gpu not in AIC_SYSTEM:
        return None
    logging.disable(logging.WARNING)
    import aiconfigurator.sdk.inference_session as session
    from aiconfigurator.cli.api import cli_estimate
    from aiconfigurator_core.sdk.engine import _evaluate_single_op

    seen = {}
    run_static = session.InferenceSession.run_static

    def keep(self, *a, **k):
        seen["model"], seen["db"] = self._model, self._database
        return run_static(self, *a, **k)

    session.InferenceSession.run_static = keep
    try:
        r = cli_estimate("deepseek-ai/DeepSeek-V3", AIC_SYSTEM[gpu], mode="static_gen",
                         backend_name=AIC_BACKEND[stack], isl=context, osl=2, batch_size=batch,
                         tp_size=tp, attention_dp_size=ep // tp if dpa else 1, moe_tp_size=1,
                         moe_ep_size=ep, stride=1)  # fmt: skip
    finally:
        session.InferenceSession.run_static = run_static
    out = {"tpot": float(r.tpot)}
    for op in seen["model"].generation_ops:
        for leaf in [*_leaves(op), *_granular(op)]:
            res = _evaluate_single_op(seen["db"], leaf, is_context=False, batch_size=batch,
                                      s=context + 1, prefix=0, x=None,
                                      imbalance_correction_scale=1.0)  # fmt: skip
            out[leaf._name] = float(getattr(res, "latency", res))
    return out


def table(gpu: str, stack: str, context: int) -> str:
    """Markdown tables, one per layout: each group's gpuplan / aiconfigurator ms a step."""
    lines = []
    for tp, ep, dpa in LAYOUTS:
        cols = [(gpuplan_ops(gpu, stack, tp, ep, dpa, b, context),
                 aic_ops(gpu, stack, tp, ep, dpa, b, context)) for b in BATCHES]  # fmt: skip
        name = f"TP1 DP{ep // tp} EP{ep}" if dpa else f"TP{tp} EP{ep}"
        lines.append(f"\n{gpu} {stack} {name}, context {context}: ms a step, gpuplan / aiconfigurator\n")
        lines.append("| op | " + " | ".join(f"batch {b}/rank" for b in BATCHES) + " |")
        lines.append("|---|" + "---|" * len(BATCHES))
        total = ["step (sum)", *[f"{sum(g.values()):.2f} / "
                                 + (f"{a['tpot']:.2f}" if a else "-") for g, a in cols]]  # fmt: skip
        for group, (ours, theirs) in GROUPS.items():
            row = [group]
            for g, a in cols:
                mine = sum(g.get(n, 0.0) for n in ours)
                other = f"{sum(a.get(n, 0.0) for n in theirs):.2f}" if a and theirs else "-"
                row.append(f"{mine:.2f} / {other}")
            lines.append("| " + " | ".join(row) + " |")
        named = {n for ours, _ in GROUPS.values() for n in ours}
        lines.append("| other | " + " | ".join(
            f"{sum(v for n, v in g.items() if n not in named):.2f} / -" for g, _ in cols) + " |")
        lines.append("| " + " | ".join(total) + " |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gpu", default="h200")
    p.add_argument("--stack", default="trt-llm", choices=sorted(AIC_BACKEND))
    p.add_argument("--context", type=int, default=2000)
    a = p.parse_args()
    print(table(a.gpu, a.stack, a.context))


if __name__ == "__main__":
    main()
