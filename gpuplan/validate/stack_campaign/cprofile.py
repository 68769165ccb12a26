"""Every kernel a compiled whole-model forward runs, with its time: what ``torch-compile`` records
(``hf.py``'s compiled prefill and static-cache decode) are made of.

The compiled decode of the ``compile`` part replays CUDA graphs (``mode="reduce-overhead"``), and
profiling a replay hit a device-side assert on the H200 (data/h200_stacks/run2). Here the same
forward runs under ``torch.compile(model.forward)`` in its default mode, no CUDA graphs: Inductor
generates the same kernels, which the graphs would replay, so the kernels' own times are those
of the records (the host's launch cost is not: a graph replay hides it). Models are built by
``hf._build`` (random weights, bf16), their layers cut to ``CUT_LAYERS`` (each model's compile
dominates the part's time; every layer of a model past its first dense ones runs the same
kernels), decode caches by ``hf.decode_case`` (a ``StaticCache`` of context + 16 positions,
rewound to the context before the first call and before the profile's calls).

Per model and phase one compiled function serves the cases in order, as in ``hf.py``: the first
shape compiles static, a later one recompiles with dynamic sizes (Dynamo's automatic dynamic
shapes), a new ``StaticCache`` recompiles on its tensors' identity.

``compiled_kernel_profile.json``: {"profiles": [...]}, one per case, rewritten after each case
(not a ``.jsonl``: the record readers glob those). Each profile: ``kind`` (``prefill_step`` or
``model_decode_step``), ``params`` (the ``hf.py`` record's, ``mode`` added), ``kernels``
[{name, launches_per_call, time_s_per_call}] in first-call order, ``total_s_per_call``,
``block_cpu_s_per_call`` (``kprofile.profile``), ``first_call_s`` (compile included),
``graph_breaks`` (Dynamo's reasons and counts since the model's phase began), ``hf`` (the
build's info) and the device and torch version.
"""

from __future__ import annotations

import time
from pathlib import Path

from . import kprofile
from .common import TimeBox, log

CUT_LAYERS = 2  # at most this many layers a model (deepseek-v2-lite: one dense, one MoE)
# (model, phase, shapes): prefill (batch, seq), decode (batch, context); most wanted first
CASES = (("llama3-8b", "decode", ((16, 4096), (32, 1024), (1, 1024), (16, 1024), (32, 4096),
                                  (1, 4096))),
         ("llama3-8b", "prefill", ((2, 4096), (1, 8192))),
         ("mixtral-8x7b", "prefill", ((1, 8192), (1, 2048))),
         ("deepseek-v2-lite", "prefill", ((1, 8192), (1, 2048))),
         ("mixtral-8x7b", "decode", ((16, 1024),)),
         ("deepseek-v2-lite", "decode", ((16, 1024),)))
FILE = "compiled_kernel_profile.json"


def case_params(name: str, layers: int, phase: str, b: int, n: int,
                max_cache_len: int | None) -> tuple[str, dict]:
    """(record kind, params) of one case, as ``hf.py``'s compiled record of it names them."""
    params = {"model": name, "layers": layers, "batch": b, "dtype": "bf16",
              "stack": "torch-compile", "mode": "default (no CUDA graphs)"}
    if phase == "prefill":
        return "prefill_step", params | {"seq": n}
    return "model_decode_step", params | {"context": n, "kv_cache": "static",
                                          "max_cache_len": max_cache_len}


def profile_entry(kind: str, params: dict, prof: dict, **extra) -> dict:
    """One profile of the file from ``kprofile.profile``'s answer ``prof``."""
    return {"kind": kind, "params": params, **extra, "kernels": prof["kernels"],
            "total_s_per_call": prof["total_s_per_call"],
            "block_cpu_s_per_call": prof.get("block_cpu_s_per_call")}


def _graph_breaks(torch) -> dict:
    try:
        from torch._dynamo.utils import counters
    except ImportError:
        return {}
    return {str(k)[:160]: int(v) for k, v in counters["graph_break"].items()}


def _reset_dynamo(torch) -> None:
    torch._dynamo.reset()
    try:
        from torch._dynamo.utils import counters

        counters.clear()
    except ImportError:
        pass


def _rewind(before) -> None:
    """A static cache back to its context (``hf.decode_case``'s ``before``), untimed."""
    if before is not None:
        before()


def _phase(torch, tf, hf, part, name, phase, shapes, box, emit) -> None:
    """One model's compiled cases of one phase, each profiled and handed to ``emit``."""
    from .configs import MODELS

    layers = 2 if part.tiny else min(MODELS[name]["layers"]["compile"], CUT_LAYERS)
    model, info = hf._build(torch, tf, part.device, name, layers, torch.bfloat16, part.tiny)
    model.eval()
    fwd = hf._compile(torch, part.device, model.forward)  # default mode: no CUDA graphs
    for b, n in shapes:
        if box.over():
            log(f"  cprofile: time box reached before {name} {phase} {b}x{n}")
            break
        if phase == "prefill":
            fn = hf.prefill_call(part, fwd, b, n, model.config.vocab_size)
            max_len, rewind = None, None
        else:
            fn, rewind, max_len, _ = hf.decode_case(part, tf, model, b, n, "static", fwd)
        _rewind(rewind)
        start = time.monotonic()
        fn()  # compiles (or recompiles) here
        part.timer.sync()
        first_s = time.monotonic() - start
        fn()
        _rewind(rewind)  # the profile's 1 + REPS calls write 6 of the cache's 16 spare positions
        prof = kprofile.profile(torch, fn)
        kind, params = case_params(name, layers, phase, b, n, max_len)
        emit(profile_entry(kind, params, prof, first_call_s=first_s,
                           graph_breaks=_graph_breaks(torch), hf=info))
        log(f"  cprofile {name} {phase} {b}x{n}: {len(prof['kernels'])} kernel names, "
            f"{prof['total_s_per_call'] * 1e3:.3f} ms kernels, first call {first_s:.1f} s")
        fn = None
    model = fwd = None


def run(torch, device: str, device_key: str, out_dir, box: TimeBox, tiny: bool) -> dict:
    """The cases of ``CASES`` in order while the time box lasts; a case that fails is logged."""
    from . import hf

    tf = hf.transformers_or_none()
    if device != "cuda" or tf is None:
        why = "needs CUDA and transformers" + (" (transformers is not installed)" if tf is None
                                               else "")
        log(f"  cprofile: skipped: {why}")
        return {"skipped": why}
    torch._dynamo.config.cache_size_limit = 64
    part = hf._Part(torch, device, device_key, None, tiny)
    path = Path(out_dir) / FILE
    profiles: list[dict] = []
    failed: dict[str, str] = {}

    def emit(entry: dict) -> None:
        profiles.append({"device": device_key, "torch": torch.__version__, **entry})
        kprofile.save_profiles(path, profiles)

    for name, phase, shapes in CASES:
        if box.over():
            log(f"  cprofile: time box reached before {name} {phase}")
            break
        start = time.monotonic()
        try:
            _phase(torch, tf, hf, part, name, phase, shapes, box, emit)
        except Exception as exc:  # one model's failure must not end the part
            failed[f"{name}/{phase}"] = f"{type(exc).__name__}: {str(exc)[:200]}"
            log(f"  cprofile {name} {phase} FAILED {failed[f'{name}/{phase}']}")
        hf._free(torch, device)
        _reset_dynamo(torch)
        log(f"  cprofile {name} {phase}: {time.monotonic() - start:.1f} s")
    return {"profiles": len(profiles), "failed": failed}
