"""CPU-bound whole-model steps timed in rounds, each round paired with the host probes.

Why: the eager Hugging Face decode steps are CPU-bound (the kernels take 6-10 ms of a 25-120 ms
step at batch 1), and on the lent H200 the same case measured up to 4.5x apart across calls
and runs (``data/h200_stacks/run2``, ``run3``) while one record's own repetitions agreed within
about 10%: the host's speed changes between seconds and minutes (the machine is a microVM on a
shared host). One launch probe per record (64 tiny kernels) tracked that weakly. Here each case
is timed in ``ROUNDS`` rounds, and each round is

1. the module probe (``module_probe_s``): one forward of one token through a toy two-layer
   Llama from transformers (``configs.tiny_config``, no cache: a cache object shared with the
   timed model's StaticCache cases broke them, an index_copy_ out of bounds on the H200), median
   of ``PROBE_REPS`` synchronized calls: the same Python and dispatch work per module that the
   model's step is made of, in about a millisecond;
2. the launch probe (``host_probe_s``, s per launch: ``common.host_probe_s_per_launch``);
3. ``REPS`` synchronized calls of the case (``common.Timer``, isolated timing).

Records: ``hostpair.jsonl``, kinds ``prefill_step`` and ``model_decode_step`` of stack
``hf-transformers`` as the ``hf`` part writes them; ``time_s`` is the median of every round's
calls; the record adds ``module_probe_s`` and ``host_probe_s`` (the medians of the rounds'
probes), ``rounds`` (each round's probes and call times) and ``device_kernel_s`` (the kernels'
own time of one call, ``hf._Part.kernels``). ``gpuplan.validate.harness.host_probe --kind
module`` runs the same module probe on a user's machine.
"""

from __future__ import annotations

import statistics

from ..harness.records import RecordWriter
from . import hf
from .common import TimeBox, _stats, host_probe_s_per_launch, log
from .configs import MODELS
from .hf_grids import EXT_DECODE

ROUNDS = 5
REPS = 3
PROBE_REPS = 7
PROBE_TOKENS = 1  # tokens of the module probe's forward (no cache)
PREFILL = ((1, 128), (1, 512))  # the host-bound prompts
DECODE = EXT_DECODE
TINY_PREFILL, TINY_DECODE = ((1, 8),), ((1, 8),)


class ModuleProbe:
    """The module probe: a toy Llama's one-token forward, built once on ``device``; calling it
    times ``PROBE_REPS`` synchronized calls with ``timer`` (``common.Timer``) and returns their
    median in seconds."""

    def __init__(self, torch, tf, device: str, timer) -> None:
        self.model, _ = hf._build(torch, tf, device, "llama3-8b", 2, torch.bfloat16, tiny=True)
        self.model.eval()
        x = torch.randint(0, self.model.config.vocab_size, (1, PROBE_TOKENS), device=device)

        def fn(x=x):
            with torch.no_grad():
                return self.model(input_ids=x, use_cache=False, logits_to_keep=1)

        self.fn = fn
        self.timer = timer

    def __call__(self) -> float:
        return self.timer.isolated(self.fn, warmup=1, reps=PROBE_REPS)["median_s"]


def paired(part, probe: ModuleProbe, fn, before=None) -> dict:
    """``ROUNDS`` rounds of (module probe, launch probe, ``REPS`` calls of ``fn``)."""
    torch = part.torch
    rounds, times = [], []
    for _ in range(2):  # warm-up calls of the case
        if before is not None:
            before()
        fn()
    for _ in range(ROUNDS if not part.tiny else 2):
        module_s = probe()
        launch_s = host_probe_s_per_launch(torch, part.device)
        got = [part.timer._once(fn, before) for _ in range(REPS)]
        times += got
        rounds.append({"module_probe_s": module_s, "host_probe_s": launch_s,
                       "median_s": statistics.median(got), "times_s": got})
    stats = _stats(sorted(times), "isolated")
    return {"stats": stats, "rounds": rounds,
            "module_probe_s": statistics.median(r["module_probe_s"] for r in rounds),
            "host_probe_s": statistics.median(r["host_probe_s"] for r in rounds)}


def _emit(part, kind, params, got, peak, before_bytes, what, info, **extra) -> None:
    part.emit(kind, params, got["stats"], peak, before_bytes, what, info,
              host_probe_s=got["host_probe_s"], module_probe_s=got["module_probe_s"],
              rounds=got["rounds"], **extra)


def _model(part, tf, probe, name, box, tiny) -> None:
    torch = part.torch
    layers = 2 if tiny else MODELS[name]["layers"]["infer"]
    model, info = hf._build(torch, tf, part.device, name, layers, torch.bfloat16, tiny)
    model.eval()
    stack = "hf-transformers"
    vocab = model.config.vocab_size
    for b, s in TINY_PREFILL if tiny else PREFILL:
        if box.over():
            return
        fwd = hf.prefill_call(part, model, b, s, vocab)
        got = paired(part, probe, fwd)
        peak, before_bytes = hf._peak(torch, part.device, fwd)
        params = {"model": name, "layers": layers, "batch": b, "seq": s, "dtype": "bf16",
                  "stack": stack, "timing": "isolated"}
        _emit(part, "prefill_step", params, got, peak, before_bytes,
              f"{name} forward ({stack}), rounds paired with host probes", info,
              **part.kernels(fwd))
    for b, ctx in TINY_DECODE if tiny else DECODE:
        for kv in ("dynamic", "static"):
            if box.over():
                return
            fn, before, max_len, cache = hf.decode_case(part, tf, model, b, ctx, kv,
                                                        model.forward)
            got = paired(part, probe, fn, before)
            peak, before_bytes = hf.decode_peak(torch, part.device, fn, before)
            params = {"model": name, "layers": layers, "batch": b, "context": ctx,
                      "kv_cache": kv, "dtype": "bf16", "stack": stack, "timing": "isolated"}
            if max_len:
                params["max_cache_len"] = max_len
            _emit(part, "model_decode_step", params, got, peak, before_bytes,
                  f"{name} decode step ({kv} cache, {stack}), rounds paired with host probes",
                  info, cache_class=type(cache).__name__, **part.kernels(fn, before))
            cache = fn = None
            hf._free(torch, part.device)


def run(torch, device, device_key, out_dir, box: TimeBox, tiny: bool) -> dict:
    tf = hf.transformers_or_none()
    if tf is None:
        log("  hostpair: transformers is not installed here: part skipped")
        return {"skipped": "transformers is not installed"}
    part = hf._Part(torch, device, device_key, RecordWriter(out_dir, "hostpair"), tiny)
    part.extended = True  # the kernels' own time beside each record
    probe = ModuleProbe(torch, tf, device, part.timer)
    failed = {}
    names = ("llama3-8b",) if tiny else tuple(MODELS)
    for i, name in enumerate(names):
        if box.over():
            log(f"  hostpair: time box reached before {name}")
            break
        share = TimeBox(box.left_s() / (len(names) - i))
        try:
            _model(part, tf, probe, name, share, tiny)
        except Exception as exc:  # one model's failure must not end the part
            failed[name] = hf.failure(exc)
            log(f"  hostpair {name} FAILED {failed[name]}")
        hf._free(torch, device)
    return {"records": part.writer.count, "failed": failed}
