"""SDPA per backend: ``F.scaled_dot_product_attention`` under each ``sdpa_kernel`` backend
(flash, efficient, cudnn, math) and under no ``sdpa_kernel`` at all (PyTorch's default
dispatch), over GQA/MQA/MHA heads, head_dim 64/128/256, 512-32k tokens, causal and not,
forward, forward+backward and one-query decode, in both timings.

Records are ``attention`` records with ``stack: pytorch`` and ``timing``; a forced backend adds
``attention_kernel`` (flash -> ``flash2``: PyTorch's flash backend is FlashAttention-2, Dao 2023;
efficient -> ``efficient``: xFormers' memory-efficient kernel; cudnn -> ``cudnn``; math ->
``math``); a default-dispatch record has none (the stack's own resolution prices it) and its
``backend`` key says ``default``. A backend that refuses a case is logged and counted, not
recorded. q [B, Hq, Sq, D], k/v [B, Hkv, Skv, D], bf16, ``enable_gqa`` when Hq != Hkv.
"""

from __future__ import annotations

from ..harness.context import interleaved
from ..harness.records import RecordWriter
from .common import TimeBox, Timer, lib_source, log, make_record, timed

# (heads_q, heads_kv, head_dim): Llama-3-8B GQA, Llama-2-7B MHA, an MQA model, a head_dim-64
# MHA model, a head_dim-256 GQA model (Gemma-7B's head_dim, Gemma report Table 1).
HEADS = ((32, 8, 128), (32, 32, 128), (32, 1, 128), (16, 16, 64), (16, 8, 256))
SEQS = (512, 2048, 8192, 32768)
TOKENS_PER_CALL = 16384  # as the harness's attention kind: batch = 16384 // seq
DECODE = ((1, 4096), (16, 4096), (64, 2048), (8, 32768))  # (batch, context)
BACKENDS = ("default", "cudnn", "flash", "efficient", "math")
KERNEL_OF = {"flash": "flash2", "efficient": "efficient", "cudnn": "cudnn", "math": "math"}
MATH_MAX_SCORE_BYTES = 8 * 2**30  # the math backend materializes [B, Hq, Sq, Skv] scores


def _case(b, hq, hkv, sq, skv, d, causal, pass_) -> dict:
    return {"batch": b, "heads_q": hq, "heads_kv": hkv, "seq_q": sq, "seq_kv": skv,
            "head_dim": d, "causal": causal, "pass": pass_, "dtype": "bf16"}


def cases(tiny: bool) -> list[dict]:
    """Shapes, shuffled (seed 1) with decode interleaved, so a time-boxed run spans the grid."""
    if tiny:
        return [_case(1, 4, 2, 32, 32, 16, True, "fwd"), _case(2, 4, 4, 32, 32, 16, False, "fwd_bwd"),
                _case(2, 4, 1, 1, 64, 16, False, "fwd")]
    prefill = [_case(max(1, TOKENS_PER_CALL // s), hq, hkv, s, s, d, causal, p)
               for hq, hkv, d in HEADS for s in SEQS for causal in (True, False)
               for p in ("fwd", "fwd_bwd")]
    decode = [_case(b, hq, hkv, 1, ctx, d, False, "fwd")
              for hq, hkv, d in HEADS for b, ctx in DECODE]
    return interleaved(prefill, decode, take_a=3, take_b=1, seed=1)


def _backend_ctx(torch, backend: str):
    import contextlib

    if backend == "default":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    names = {"flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION",
             "cudnn": "CUDNN_ATTENTION", "math": "MATH"}
    return sdpa_kernel([getattr(SDPBackend, names[backend])])


def make_fn(torch, device: str, p: dict, backend: str):
    import torch.nn.functional as F

    b, hq, hkv, d = p["batch"], p["heads_q"], p["heads_kv"], p["head_dim"]
    grad = p["pass"] == "fwd_bwd"
    dt = torch.bfloat16 if device == "cuda" else torch.float32

    def rnd(*shape, g=False):
        return torch.randn(*shape, device=device, dtype=dt).requires_grad_(g)

    q, k, v = rnd(b, hq, p["seq_q"], d, g=grad), rnd(b, hkv, p["seq_kv"], d, g=grad), \
        rnd(b, hkv, p["seq_kv"], d, g=grad)
    do = rnd(b, hq, p["seq_q"], d) if grad else None
    kw = {"is_causal": p["causal"], "enable_gqa": hq != hkv}

    def fn():
        with _backend_ctx(torch, backend):
            o = F.scaled_dot_product_attention(q, k, v, **kw)
            return torch.autograd.grad(o, (q, k, v), do) if grad else o

    return fn


def _math_fits(p: dict) -> bool:
    return p["batch"] * p["heads_q"] * p["seq_q"] * p["seq_kv"] * 4 <= MATH_MAX_SCORE_BYTES


def run(torch, device: str, device_key: str, out_dir, box: TimeBox, tiny: bool) -> dict:
    writer = RecordWriter(out_dir, "attention")
    timer = Timer(torch, device, max_reps=3 if tiny else 20)
    refused: dict[str, int] = {}
    shapes = 0
    for p in cases(tiny):
        if box.over():
            log(f"  sdpa: time box reached after {shapes} shapes")
            break
        shapes += 1
        for backend in BACKENDS:
            if backend == "math" and not _math_fits(p):
                continue
            try:
                fn = make_fn(torch, device, p, backend)
                fn()
            except RuntimeError as exc:
                refused[backend] = refused.get(backend, 0) + 1
                if refused[backend] <= 2:
                    log(f"  sdpa {backend} refused {p}: {str(exc).splitlines()[0][:120]}")
                _free(torch, device)
                continue
            for timing in ("isolated", "device"):
                stats = timed(timer, fn, timing)
                if stats is None:
                    continue
                params = dict(p, stack="pytorch", timing=timing)
                if backend != "default":
                    params["attention_kernel"] = KERNEL_OF[backend]
                what = f"F.scaled_dot_product_attention ({backend})"
                writer.write(make_record("attention", device_key, params,
                                         {"time_s": stats["median_s"]},
                                         lib_source(torch, device, what, stats),
                                         backend=backend, stats=stats))
            del fn
            _free(torch, device)
        log(f"  sdpa [{shapes}] {p} done ({writer.count} records)")
    return {"records": writer.count, "shapes": shapes, "refused": refused}


def _free(torch, device: str) -> None:
    if device == "cuda":
        torch.cuda.empty_cache()

