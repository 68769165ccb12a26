"""What each of the five layers offers a training or serving setup (``sim.diagnose.walk``), and the
physical limit the walk ends on. Each offer is a tuple of flag edits gpuplan can price; what a
layer cannot express as a flag (padding a model's dimensions needs a new config.json) is said.
"""

from __future__ import annotations

from gpuplan.sim.diagnose.walk import Candidate, LayerOffer, Limit, Priced, Settings
from gpuplan.sim.parallel.cost import usd_per_million_tokens
from gpuplan.sim.parallel.fp8 import RATE_DTYPE, supports_precision

TILE = 128  # tensor-core tile edge of Hopper's WGMMA kernels (CUTLASS 3 tile shapes)
# gpuplan has no prefill or training fit of FlashInfer (pricing it fails): left out
DECODE_ONLY_KERNELS = ("flashinfer",)
OVERLAPS = ("--overlap-dp", "--overlap-tp", "--overlap-pp")


def unaligned_dims(cfg) -> list[str]:
    """The model's GEMM dimensions that are not multiples of ``TILE``."""
    dims = {"d_model": cfg.d_model, "d_ff": cfg.d_ff, "vocab_size": cfg.vocab_size}
    return [f"{k}={v}" for k, v in dims.items() if v % TILE]


def _padding_note(cfg) -> str:
    bad = unaligned_dims(cfg)
    if not bad:
        return f"dimensions already multiples of {TILE}"
    return (f"{', '.join(bad)} not multiples of {TILE}: padding them needs a config.json "
            "(--model FILE), which the walk does not write")  # fmt: skip


# -- training ------------------------------------------------------------------------------


def training_offers(cfg, cluster, *, search_layout, default_stack: str):
    """The layers' offers for ``gpuplan train`` settings; ``search_layout(priced)`` returns the
    flag edits of the fastest layout the search finds for the same GPUs and batch (or None);
    ``default_stack``: the stack ``gpuplan train`` runs when ``--stack`` is not given."""
    acc = cluster.accelerator

    def offers(layer: int, s: Settings, now: Priced) -> LayerOffer:
        st = now.detail.strategy
        if layer == 1:
            c = ([Candidate(change="fused attention (flash) instead of materialized scores",
                            edits={"--attention": "flash"})]
                 if st.attention == "unfused" else [])  # fmt: skip
            why = ("attention already fused; training keeps no KV cache; " + _padding_note(cfg))
            return LayerOffer(candidates=tuple(c), why=why)
        if layer == 2:
            edits = search_layout(now)
            why = "the layout as given is the fastest the search finds"
            if edits is None:
                return LayerOffer(why=why)
            return LayerOffer(candidates=(Candidate(change="search's fastest layout: " +
                                                    _layout(edits), edits=edits),), why=why)  # fmt: skip
        if layer == 3:
            return LayerOffer(candidates=tuple(_runtime(cfg, st)),
                              why="schedule and overlaps as given are the fastest")  # fmt: skip
        if layer == 4:
            return _training_compilation(stack_of(s, default_stack), s, st)
        c = []
        if supports_precision(acc, "nvfp4") and st.precision != "nvfp4":  # Blackwell's recipe
            c.append(Candidate(change="NVFP4 GEMMs (docs/precision.md)",
                               edits={"--precision": "nvfp4", "--impl": None}))  # fmt: skip
        if acc.supports("fp8") and st.precision == "bf16":
            c.append(Candidate(change="FP8 GEMMs", edits={"--precision": "fp8"}))
            own = stack_of(s, default_stack).elementwise
            if s.get("--impl", own) != own:  # the fp8 casts follow the elementwise kernels
                c.append(Candidate(change=f"FP8 GEMMs with the stack's own {own} casts "
                                   f"(--impl {own}, sim.parallel.fp8)",
                                   edits={"--precision": "fp8", "--impl": None}))  # fmt: skip
        c += [Candidate(change=f"attention kernel {k}", edits={"--attention-kernel": k})
              for k in runnable_kernels(acc) if s.get("--attention-kernel") != k
              and k not in DECODE_ONLY_KERNELS]  # fmt: skip
        why = "" if acc.supports("fp8") else f"{acc.key} has no FP8 tensor cores"
        return LayerOffer(candidates=tuple(c), why=why + ("; " if why else "") + _padding_note(cfg))

    return offers


def runnable_kernels(acc) -> list[str]:
    """Attention kernels the device runs (``sim.stacks.kernels.check_kernel``)."""
    from gpuplan.errors import GpuplanError
    from gpuplan.sim.stacks import ATTENTION_KERNELS
    from gpuplan.sim.stacks.kernels import check_kernel

    out = []
    for k in ATTENTION_KERNELS:
        try:
            check_kernel(k, acc, field="--attention-kernel")
        except GpuplanError:
            continue
        out.append(k)
    return out


# How each elementwise implementation is offered (``sim.estimate.compilation``): hand-fused kernels (TE's,
# Apex's, a serving engine's), or torch.compile's Inductor fusion of each run of elementwise ops.
IMPL_CHANGES = {"fused": "hand-fused elementwise kernels",
                "compiled": "torch.compile of the model (Inductor-fused elementwise)"}  # fmt: skip
# Layer 4 changes only these flags: the stack (its optimizer, its runtime's buckets, overlaps
# and layouts, its attention kernels) stays the one in force, so a gain here is compilation's.
TRAIN_COMPILATION_FLAGS = ("--impl", "--recompute")
SERVE_COMPILATION_FLAGS = ("--impl", "--no-cuda-graph")


def stack_of(s: Settings, default: str):
    """The preset ``--stack`` names in ``s`` (``default``: the command's own)."""
    from gpuplan.sim.stacks import get_stack

    return get_stack(s.get("--stack") or default)


def _training_compilation(stack, s: Settings, st) -> LayerOffer:
    """Layer 4 of a training step: the elementwise kernels (``--impl``) and the recomputation
    policy (``--recompute``; memory decides whether ``none`` fits), on ``stack``, in force."""
    impl = s.get("--impl") or stack.elementwise
    c = [Candidate(change=f"{what} (--impl {i})", edits={"--impl": i})
         for i, what in IMPL_CHANGES.items() if i != impl]  # fmt: skip
    c += [Candidate(change=f"recompute {r}", edits={"--recompute": r})
          for r in ("none", "selective", "full") if r != st.recompute]  # fmt: skip
    why = (f"on {stack.name} as it is (its {stack.optimizer} AdamW and runtime kept): "
           f"elementwise {impl}, recompute {st.recompute}; CUDA graphs of a training step are "
           "not priced by gpuplan")  # fmt: skip
    return LayerOffer(candidates=tuple(c), why=why)


def _runtime(cfg, st) -> list[Candidate]:
    from gpuplan.sim.parallel.degrees import valid_virtual_stages
    from gpuplan.sim.parallel.strategy import stage_layer_counts

    c = [Candidate(change=f"overlap {f[10:]} communication", edits={f: True})
         for f in OVERLAPS if not getattr(st, "overlap_" + f[10:])]  # fmt: skip
    if len(c) > 1:
        c.append(Candidate(change="overlap all communication", edits={f: True for f in OVERLAPS}))
    if st.pp > 1:
        if st.schedule != "1f1b":
            c.append(Candidate(change="1F1B schedule",
                               edits={"--schedule": "1f1b", "--virtual-stages": "1"}))  # fmt: skip
        for v in valid_virtual_stages(stage_layer_counts(st, cfg.n_layers)):
            if (st.schedule, st.virtual_stages) != ("interleaved", v):
                c.append(Candidate(change=f"interleaved schedule, {v} virtual stages",
                                   edits={"--schedule": "interleaved",
                                          "--virtual-stages": str(v)}))  # fmt: skip
    return c


LAYOUT_FLAGS = ("--tp", "--pp", "--dp", "--cp", "--ep", "--zero", "--micro-batch")


def layout_edits(st) -> dict:
    """A strategy's degrees as the flags of ``gpuplan train``."""
    edits = {"--tp": str(st.tp), "--pp": str(st.pp), "--dp": str(st.dp), "--cp": str(st.cp),
             "--ep": str(st.ep), "--zero": str(st.zero), "--micro-batch": str(st.micro_batch),
             "--global-batch": str(st.global_batch), "--sp": True if st.sp else None,
             "--no-sp": True if st.tp > 1 and not st.sp else None,  # the stack's default off
             "--pp-layers": ",".join(map(str, st.pp_layers)) if st.pp_layers else None,
             "--pp-first-last": None}  # fmt: skip
    return edits


def _layout(edits) -> str:
    parts = [f"{f[2:]}={edits[f]}" for f in LAYOUT_FLAGS]
    return " ".join(parts) + (" sp" if edits.get("--sp") else "")


def training_limit(now: Priced, acc) -> Limit:
    """Model FLOPs of the step over every GPU's fastest dense tensor rate a training recipe runs
    at (FP4 where the device trains in NVFP4, else FP8 where it has it, else BF16;
    accelerators.csv, datasheets): a compute roofline that no communication, bubble, memory
    traffic or host time is allowed to lengthen."""
    est = now.detail
    precision = next(RATE_DTYPE[p] for p in ("nvfp4", "fp8", "bf16") if supports_precision(acc, p))
    bound_s = est.model_flops_per_step / (est.gpus * acc.peak(precision))
    return Limit(metric=bound_s, figures={"step_time_s": bound_s, "mfu": 1.0},
                 basis=f"model FLOPs / ({est.gpus} GPUs x {precision} dense peak)")


# -- serving -------------------------------------------------------------------------------


def serving_offers(cfg, acc, *, gpus: int, default_stack: str):
    """The layers' offers for ``gpuplan serve`` settings on ``gpus`` GPUs; ``default_stack``:
    the stack ``gpuplan serve`` runs when ``--stack`` is not given."""
    from gpuplan.sim.parallel.degrees import valid_tp
    from gpuplan.sim.runtime.serving.deployment import (
        MAX_TP,  # one HGX/DGX node (DGX H100 user guide)
    )

    def offers(layer: int, s: Settings, now: Priced) -> LayerOffer:
        if layer == 1:
            c = ([Candidate(change="FP8 KV cache", edits={"--kv-dtype": "fp8"})]
                 if s.get("--kv-dtype", "bf16") == "bf16" and acc.supports("fp8") else [])  # fmt: skip
            return LayerOffer(candidates=tuple(c),
                              why="attention is fused on every serving stack; " + _padding_note(cfg))  # fmt: skip
        if layer == 2:
            tp_now = int(s.get("--tp", "1"))
            c = [Candidate(change=f"tp={tp} x {gpus // tp} replicas",
                           edits={"--tp": str(tp), "--replicas": str(gpus // tp)})
                 for tp in valid_tp(cfg, min(gpus, MAX_TP))
                 if gpus % tp == 0 and tp != tp_now]  # fmt: skip
            return LayerOffer(candidates=tuple(c), why=f"tp={tp_now} is the best split of {gpus} GPUs")
        if layer == 3:
            c = [Candidate(change=f"router {r}", edits={"--router": r})
                 for r in ("least_outstanding", "shortest_queue_tokens")
                 if s.get("--router", "round_robin") != r and gpus > int(s.get("--tp", "1"))]
            c += [Candidate(change=f"policy {p}", edits={"--policy": p})
                  for p in ("continuous", "chunked") if s.get("--policy") != p]  # fmt: skip
            return LayerOffer(candidates=tuple(c), why="batching and routing as given")
        if layer == 4:
            return _serving_compilation(stack_of(s, default_stack), s)
        c = []
        if acc.supports("fp8") and s.get("--weight-dtype", "bf16") == "bf16":
            c.append(Candidate(change="FP8 weights", edits={"--weight-dtype": "fp8"}))
        c += [Candidate(change=f"attention kernel {k}", edits={"--attention-kernel": k})
              for k in runnable_kernels(acc) if s.get("--attention-kernel") != k
              and k not in DECODE_ONLY_KERNELS]  # fmt: skip
        return LayerOffer(candidates=tuple(c), why=_padding_note(cfg))

    return offers


def _serving_compilation(stack, s: Settings) -> LayerOffer:
    """Layer 4 of a serving deployment: CUDA-graph decode where the stack's runtime has it and
    ``--no-cuda-graph`` turned it off, and the elementwise kernels (``--impl``), on the stack in
    force (its scheduler, buckets and host costs kept)."""
    from gpuplan.sim.runtime.serving.on_stack import deployment_fields

    own = deployment_fields(stack)
    impl = s.get("--impl") or own["impl"]
    c = []
    if "--no-cuda-graph" in s:
        c.append(Candidate(change="CUDA graphs for decode", edits={"--no-cuda-graph": None}))
    c += [Candidate(change=f"{what} (--impl {i})", edits={"--impl": i})
          for i, what in IMPL_CHANGES.items() if i != impl]  # fmt: skip
    if "--no-cuda-graph" in s:
        graphs = "decode without CUDA graphs (--no-cuda-graph)"
    elif own["cuda_graph"]:
        graphs = "decode already replayed from CUDA graphs"
    else:
        graphs = (f"{stack.name} decodes without CUDA graphs and `gpuplan serve` has no flag "
                  "that captures them")  # fmt: skip
    return LayerOffer(candidates=tuple(c),
                      why=f"on {stack.name} as it is: elementwise {impl}; {graphs}")


def serving_limit(now: Priced, *, cfg, acc, gpus: int, tp: int, weights_bytes_per_gpu: float,
                  prompt_tokens: float, output_tokens: float, offline: bool,
                  usd_per_gpu_hour: float) -> Limit:
    """Roofline bounds of one request on ``tp`` GPUs: the prefill's 2 N FLOPs per prompt token
    at the dense BF16/FP8 peak, each decode step's read of the weights at the HBM bandwidth
    (Kaplan et al. 2020 eq. 2.1 for 2 N; datasheet rates). Offline, the cost bound is every GPU
    at its peak on 2 N FLOPs per token, prompt and output alike."""
    precision = "fp8" if acc.supports("fp8") else "bf16"
    from gpuplan.workloads.params import count_params

    n = count_params(cfg).active
    ttft = 2 * n * prompt_tokens / (tp * acc.peak(precision))
    tpot = weights_bytes_per_gpu / acc.hbm_bytes_per_s
    e2e = ttft + max(output_tokens - 1, 0) * tpot
    out_per_s = gpus * acc.peak(precision) / (2 * n) * output_tokens / (prompt_tokens + output_tokens)
    usd_per_m = usd_per_million_tokens(gpus, usd_per_gpu_hour, out_per_s)
    figures = {"ttft_s": ttft, "tpot_s": tpot, "e2e_s": e2e, "output_tokens_per_s": out_per_s,
               "usd_per_million_tokens": usd_per_m}  # fmt: skip
    return Limit(metric=usd_per_m if offline else e2e, figures=figures,
                 basis=f"2N FLOPs per token at the {precision} peak, the weights read once per "
                 "decode step at the HBM bandwidth")  # fmt: skip
