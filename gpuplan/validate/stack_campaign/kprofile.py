"""Every kernel one call runs, with its time: SDPA's math backend and cuDNN's backward.

For a few attention cases of the ``sdpa`` part, the calls run back to back under
``torch.profiler`` behind a GPU spin (``common.Timer.device_time``'s method) and each GPU
activity's name, launches per call and summed duration per call are kept, in the order of the
first call. ``kernel_profile.json``: {"profiles": [...]}, one per (case, backend), rewritten
after each case (not a ``.jsonl``: the record readers glob those), ``params`` as the ``sdpa``
part's, ``backend``, ``kernels`` [{name, launches_per_call, time_s_per_call}],
``total_s_per_call``. Not contract records: the breakdown behind the math backend's and cuDNN's
prices (``hwmodels/attention.py``), read by people and by tests of what the prices assume.
"""

from __future__ import annotations

import json
from pathlib import Path

from . import sdpa
from .common import TimeBox, log, profiled_block

REPS = 5


def cases(tiny: bool) -> list[tuple[dict, str]]:
    c = sdpa._case
    if tiny:
        return [(c(1, 4, 2, 32, 32, 16, True, "fwd"), "math")]
    math = [c(16, 16, 16, 1, 4096, 64, False, "fwd"), c(16, 32, 8, 1, 4096, 128, False, "fwd"),
            c(32, 16, 16, 512, 512, 64, False, "fwd"), c(32, 16, 16, 512, 512, 64, True, "fwd"),
            c(8, 32, 8, 2048, 2048, 128, True, "fwd"), c(8, 32, 32, 2048, 2048, 128, False, "fwd"),
            c(32, 16, 16, 512, 512, 64, False, "fwd_bwd"),
            c(32, 16, 16, 512, 512, 64, True, "fwd_bwd"),
            c(8, 32, 8, 2048, 2048, 128, True, "fwd_bwd")]
    cudnn = [c(16384 // s, hq, hkv, s, s, d, causal, "fwd_bwd")
             for hq, hkv, d in ((16, 16, 64), (32, 8, 128), (16, 8, 256))
             for s in (2048, 8192) for causal in (True, False)]
    cudnn += [c(16384 // 8192, 16, 8, 8192, 8192, 256, True, "fwd")]
    return [(p, "math") for p in math] + [(p, "cudnn") for p in cudnn]


def save_profiles(path: Path, profiles: list[dict]) -> None:
    """``{"profiles": profiles}`` to ``path``, whole: written beside it, then moved over it."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"profiles": profiles}, indent=1) + "\n")
    tmp.replace(path)


def profile(torch, fn, cpu_top: int = 0) -> dict:
    t = torch
    got = profiled_block(t, fn, REPS, "kprofile_block")
    if got is None:
        raise RuntimeError("the profiler recorded no kprofile_block")
    prof, events, lo, hi = got
    order, agg = [], {}
    for e in sorted(events, key=lambda e: e.time_range.start):
        if e.device_type != t.autograd.DeviceType.CUDA or "sleep" in e.name.lower():
            continue
        if e.name == "kprofile_block" or not lo <= e.time_range.start <= hi:
            continue
        if e.name not in agg:
            order.append(e.name)
            agg[e.name] = [0, 0.0]
        agg[e.name][0] += 1
        agg[e.name][1] += e.time_range.elapsed_us() * 1e-6
    kernels = [{"name": n[:200], "launches_per_call": agg[n][0] / REPS,
                "time_s_per_call": agg[n][1] / REPS} for n in order]
    out = {"kernels": kernels, "total_s_per_call": sum(k["time_s_per_call"] for k in kernels),
           "block_cpu_s_per_call": (hi - lo) * 1e-6 / REPS}
    if cpu_top:  # the CPU ops taking the most self time (the profiler's own overhead included)
        avg = sorted(prof.key_averages(), key=lambda a: -a.self_cpu_time_total)[:cpu_top]
        out["cpu_ops"] = [{"name": a.key[:120], "calls_per_call": a.count / REPS,
                           "self_cpu_s_per_call": a.self_cpu_time_total * 1e-6 / REPS}
                          for a in avg]
    return out


def run(torch, device: str, device_key: str, out_dir, box: TimeBox, tiny: bool) -> dict:
    if device != "cuda":
        return {"skipped": "no GPU: the profile needs CUDA kernels"}
    path = Path(out_dir) / "kernel_profile.json"
    profiles: list[dict] = []
    for p, backend in cases(tiny):
        if box.over():
            log(f"  kprofile: time box reached after {len(profiles)} cases")
            break
        try:
            fn = sdpa.make_fn(torch, device, p, backend)
            out = profile(torch, fn)
        except RuntimeError as exc:
            log(f"  kprofile {backend} {p} FAILED {str(exc).splitlines()[0][:120]}")
            continue
        profiles.append({"device": device_key, "params": p, "backend": backend,
                         "torch": torch.__version__, **out})
        save_profiles(path, profiles)
        log(f"  kprofile {backend} {p}: {len(out['kernels'])} kernels, "
            f"{out['total_s_per_call'] * 1e3:.3f} ms")
        del fn
        torch.cuda.empty_cache()
    return {"profiles": len(profiles)}


def _profiling_transformers(device: str):
    """transformers (``hf.transformers_or_none``) where a CUDA profile of its models can run;
    else None."""
    from . import hf

    return hf.transformers_or_none() if device == "cuda" else None


# Whole Hugging Face models' forwards (``hf.py``'s prefill call, eager, bf16 weights), layers cut
# to 4: which kernels a prefill runs and how long each takes, MoE experts included.
HF_CASES = (("mixtral-8x7b", 4, ((1, 4096), (1, 512))),
            ("deepseek-v2-lite", 4, ((1, 4096), (1, 512))),
            ("llama3-8b", 4, ((1, 4096),)))
# ``--grid extended`` adds the sliding-window model at and past its window and the host-bound
# short prompts of two dense models, with the CPU ops that take the most time
HF_CASES_EXTENDED = (("mistral-7b", 4, ((1, 4096), (1, 1024))),
                     ("qwen2.5-7b", 4, ((1, 128),)), ("llama3-8b", 4, ((1, 128),)),
                     ("deepseek-v2-lite", 4, ((1, 128),)))


def run_hf(torch, device: str, device_key: str, out_dir, box: TimeBox, tiny: bool,
           extended: bool = False) -> dict:
    """``hf_kernel_profile.json``: {"profiles": [...]}, one per (model, batch, seq)."""
    from . import hf

    tf = _profiling_transformers(device)
    if tf is None:
        return {"skipped": "needs CUDA and transformers"}
    path = Path(out_dir) / "hf_kernel_profile.json"
    profiles: list[dict] = []
    for name, layers, shapes in HF_CASES_EXTENDED if extended else HF_CASES:
        if box.over():
            log(f"  hfprofile: time box reached before {name}")
            break
        model, info = hf._build(torch, tf, device, name, layers, torch.bfloat16, tiny)
        model.eval()
        for b, s in shapes:
            x = torch.randint(0, model.config.vocab_size, (b, s), device=device)

            def fn(x=x, model=model):
                with torch.no_grad():
                    return model(input_ids=x, use_cache=False, logits_to_keep=1)

            out = profile(torch, fn, cpu_top=30 if extended else 0)
            profiles.append({"device": device_key, "torch": torch.__version__,
                             "params": {"model": name, "layers": layers, "batch": b, "seq": s,
                                        "dtype": "bf16", "stack": "hf-transformers"},
                             "hf": info, **out})
            save_profiles(path, profiles)
            log(f"  hfprofile {name} {b}x{s}: {len(out['kernels'])} kernel names, "
                f"{out['total_s_per_call'] * 1e3:.3f} ms")
        model = None
        torch.cuda.empty_cache()
    return {"profiles": len(profiles)}


# ``--grid decode``: one decode step of the sliding-window model below, at and past its window
# (transformers' DynamicSlidingWindowLayer, and its masked attention), beside Llama's, with the
# CPU ops that take the most time: (model, layers, ((batch, context, cache), ...))
HF_DECODE_CASES = (("mistral-7b", 4, ((1, 1024, "dynamic"), (1, 4096, "dynamic"),
                                      (16, 4096, "dynamic"), (16, 1024, "dynamic"),
                                      (1, 1024, "static"), (16, 4096, "static"))),
                   ("llama3-8b", 4, ((1, 1024, "dynamic"), (16, 4096, "dynamic"),
                                     (16, 4096, "static"))))


def run_hf_decode(torch, device: str, device_key: str, out_dir, box: TimeBox,
                  tiny: bool) -> dict:
    """``hf_decode_profile.json``: {"profiles": [...]}, one per (model, batch, context, cache):
    the kernels and top CPU ops of one eager decode step (``hf.decode_case``; the profiled
    calls follow the case's untimed ``before`` once, as their first call does)."""
    from . import hf

    tf = _profiling_transformers(device)
    if tf is None:
        return {"skipped": "needs CUDA and transformers"}
    path = Path(out_dir) / "hf_decode_profile.json"
    profiles: list[dict] = []
    part = hf._Part(torch, device, device_key, None, tiny)
    for name, layers, cases_ in HF_DECODE_CASES:
        if box.over():
            log(f"  hfprofile decode: time box reached before {name}")
            break
        model, info = hf._build(torch, tf, device, name, layers, torch.bfloat16, tiny)
        model.eval()
        for b, ctx, kv in cases_:
            fn, before, _, cache = hf.decode_case(part, tf, model, b, ctx, kv, model.forward)
            if before is not None:
                before()
            out = profile(torch, fn, cpu_top=30)
            profiles.append({"device": device_key, "torch": torch.__version__,
                             "params": {"model": name, "layers": layers, "batch": b,
                                        "context": ctx, "kv_cache": kv, "dtype": "bf16",
                                        "stack": "hf-transformers"},
                             "cache_class": type(cache).__name__, "hf": info, **out})
            save_profiles(path, profiles)
            log(f"  hfprofile decode {name} {b}x{ctx} {kv}: {len(out['kernels'])} kernel "
                f"names, {out['total_s_per_call'] * 1e3:.3f} ms kernels, "
                f"{out['block_cpu_s_per_call'] * 1e3:.3f} ms CPU")
            fn = cache = None
            hf._free(torch, device)
        model = None
        hf._free(torch, device)
    return {"profiles": len(profiles)}
