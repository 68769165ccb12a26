"""Wide expert parallelism (``serving.wide_ep``) beside published figures.

    PYTHONPATH=$PWD python3 benchmarks/wide_ep.py

Part 1, the mechanism: DeepEP's own kernel timings (``deepseek-ai/DeepEP`` docs/legacy.md,
"Performance": H800, NVLink ~160 GB/s, CX7 400 Gb/s ~50 GB/s; low-latency kernels at 128 tokens
per rank, 7168 hidden, top-8, FP8 dispatch and BF16 combine; normal kernels at 4096 tokens) set
against gpuplan's price of the same dispatch and combine (``dispatch_combine_ops``, priced on the
catalogue's links through ``hwmodels.collectives``). The H800 is the catalogue's H100 SXM with
its NVLink cut to 400 GB/s both ways (NVIDIA H800 SXM5 product brief), i.e. 200e9 one way.

Part 2, deployments: the steady state of a saturated wide-EP group (every rank at the batch the
source names or that is assumed, marked ``*``) priced by ``StepModel``, as tokens per second per
GPU, beside the published figure. Prefill and decode pools are priced apart (the sources run
them disaggregated; gpuplan's ``--dp-attention`` does not yet model the pools' handoff).
"""

from __future__ import annotations

from dataclasses import replace

from gpuplan.hwmodels.accelerators import get_accelerator
from gpuplan.sim.runtime.serving.deployment import Deployment, serving_efficiency
from gpuplan.sim.runtime.serving.iteration import price_op
from gpuplan.sim.runtime.serving.step_model import Batch, StepModel
from gpuplan.sim.runtime.serving.wide_ep import concurrent_links, dispatch_combine_ops
from gpuplan.units import GB, US
from gpuplan.workloads.presets import get_model

# DeepEP docs/legacy.md low-latency table: EP -> (dispatch us, combine us)
DEEPEP_LL = {8: (77, 114), 16: (118, 195), 32: (155, 273), 64: (173, 314), 128: (192, 369),
             256: (194, 360)}  # fmt: skip
# normal kernels: EP -> bottleneck bandwidth GB/s (dispatch, combine); NVLink at 8, RDMA above
DEEPEP_NORMAL = {8: (153, 158), 16: (43, 43), 32: (58, 57), 64: (51, 50)}


def h800():
    return replace(get_accelerator("h100-sxm"), key="h800", name="NVIDIA H800 SXM5 (H100 SXM, "
                   "NVLink 400 GB/s)", scaleup_bytes_per_s=200e9)  # fmt: skip


def group(gpu, ep: int, **kw) -> Deployment:
    acc = gpu if not isinstance(gpu, str) else get_accelerator(gpu)
    eff = serving_efficiency("h100-sxm" if acc.key == "h800" else acc.key)
    base = {"tp": 1, "ep": ep, "dp_attention": True, "weight_dtype": "fp8", "kv_dtype": "bf16"}
    return Deployment(model=get_model("deepseek-v3"), acc=acc, eff=eff, **(base | kw))


def a2a_s(dep, tokens: int, *, low_latency: bool) -> tuple[float, float]:
    """(dispatch, combine) seconds of one MoE block, links concurrent."""
    ops = dispatch_combine_ops(dep, rank_tokens=tokens, low_latency=low_latency)
    times = concurrent_links(ops, [price_op(op, dep).total_s for op in ops])
    return tuple(sum(t for op, t in zip(ops, times, strict=True) if op.name.startswith(name))
                 for name in ("ep dispatch", "ep combine"))  # fmt: skip


def part1() -> None:
    print("DeepEP low-latency kernels, H800, 128 tokens per rank (us): published vs gpuplan")
    print(f"{'EP':>4} {'dispatch':>9} {'gpuplan':>8} {'ratio':>6} {'combine':>8} {'gpuplan':>8} {'ratio':>6}")
    for ep, (d, c) in DEEPEP_LL.items():
        pd_, pc = a2a_s(group(h800(), ep), 128, low_latency=True)
        print(f"{ep:>4} {d:>9} {pd_ / US:>8.0f} {pd_ / US / d:>6.2f} {c:>8} {pc / US:>8.0f} "
              f"{pc / US / c:>6.2f}")  # fmt: skip
    print("\nDeepEP normal kernels, H800, 4096 tokens per rank: bottleneck GB/s, published vs "
          "gpuplan (bytes on the binding link over gpuplan's time)")  # fmt: skip
    for ep, (d, c) in DEEPEP_NORMAL.items():
        dep = group(h800(), ep)
        ops = dispatch_combine_ops(dep, rank_tokens=4096, low_latency=False)
        link = "scaleup" if ep == 8 else "scaleout"
        out = []
        for name, pub in (("ep dispatch", d), ("ep combine", c)):
            op = next(o for o in ops if o.name.startswith(name) and o.link == link)
            sent = op.bytes_per_rank * (op.world - 1) / op.world
            t = a2a_s(dep, 4096, low_latency=False)[name == "ep combine"]
            out.append(f"{name.split()[1]} {pub} vs {sent / t / GB:.0f}")
        print(f"  EP{ep} ({link}): " + "; ".join(out))


# (label, gpu, ep, phase, per-rank load, context, published tokens/s per GPU, source, extra fields)
DEPLOYMENTS = (
    ("SGLang 96xH100 decode EP72", "h100-sxm", 72, "decode", 256, 2000, 22282 / 8,
     "lmsys.org/blog/2025-05-05-large-scale-ep (22,282 tok/s per node, 2000-token inputs); "
     "sgl-project/sglang#6017 decode flags: --cuda-graph-bs 256 --ep-num-redundant-experts 32 "
     "--enable-two-batch-overlap", {"redundant_experts": 32, "two_batch_overlap": True}),
    ("SGLang 32xH100 prefill EP32", "h100-sxm", 32, "prefill", (4, 4096), 0, 50302 / 8,
     "lmsys.org/blog/2025-05-05-large-scale-ep (50,302 tok/s per node, 4K prompts, EP32); "
     "4 prompts a rank*", {"redundant_experts": 32, "two_batch_overlap": True}),
    ("DeepSeek H800 decode EP144", h800, 144, "decode", 256, 2000, 14800 / 8,
     "github.com/deepseek-ai/open-infra-index Day 6 (~14.8k output tok/s per node; MTP on, "
     "not modelled); batch and context*", {"redundant_experts": 32, "two_batch_overlap": True}),
    ("DeepSeek H800 prefill EP32", h800, 32, "prefill", (4, 4096), 0, 73700 / 8,
     "github.com/deepseek-ai/open-infra-index Day 6 (~73.7k input tok/s per node, cache hits "
     "included); prompts*", {"redundant_experts": 32, "two_batch_overlap": True}),
    ("vLLM H200 wide-EP decode", "h200", 16, "decode", 256, 2000, 2200,
     "blog.vllm.ai 2025-12 'DeepSeek @ 2.2k tok/s/H200 with Wide-EP'; EP, batch and context*",
     {"two_batch_overlap": True}),
    ("SGLang GB200 NVL72 decode EP48", "gb200", 48, "decode", 256, 2000, 7583,
     "lmsys.org/blog/2025-06-16-gb200-part-1 (7,583 tok/s per GPU, 12 decode nodes of 4, "
     "2000-token inputs); batch*", {"redundant_experts": 32}),
)


def per_gpu_tokens_s(dep, phase: str, load, context: int) -> float:
    step = StepModel(dep)
    if phase == "decode":
        seqs = load * dep.dp
        return load / step.iteration_s(Batch(decode_seqs=seqs, decode_kv_tokens=seqs * context))
    n, prompt = load
    return n * prompt / step.iteration_s(Batch(prefill=((prompt, 0, 1),) * (n * dep.dp)))


def part2() -> None:
    print("\nPublished wide-EP deployments of DeepSeek-V3/R1: tokens/s per GPU (* assumed)")
    print(f"{'deployment':<32} {'published':>9} {'gpuplan':>8} {'ratio':>6}  source")
    for label, gpu, ep, phase, load, ctx, pub, source, extra in DEPLOYMENTS:
        dep = group(gpu() if callable(gpu) else gpu, ep, **extra)
        got = per_gpu_tokens_s(dep, phase, load, ctx)
        print(f"{label:<32} {pub:>9.0f} {got:>8.0f} {got / pub:>6.2f}  {source}")


if __name__ == "__main__":
    part1()
    part2()
