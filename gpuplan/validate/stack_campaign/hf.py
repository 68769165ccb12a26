"""Whole Hugging Face transformers models (``configs.MODELS``, random weights): prefill, decode
with ``DynamicCache`` and ``StaticCache``, training steps; eager (``stack: hf-transformers``) and
under ``torch.compile`` (``stack: torch-compile``).

- ``prefill_step``: one forward of ``batch`` prompts of ``seq`` tokens, no cache kept,
  ``logits_to_keep=1`` (what ``generate`` asks for); bf16 weights.
- ``model_decode_step``: one token per sequence against ``context`` cached tokens. The cache is
  filled by one forward of random prompts first. ``dynamic``: the model's default
  ``DynamicCache``, cropped back to ``context`` before each timed call (untimed), so every step
  concatenates onto the same length; ``static``: ``StaticCache`` of ``max_cache_len`` positions,
  the new token written at ``cache_position = context``. Compiled: the forward under
  ``torch.compile(mode="reduce-overhead")`` (CUDA graphs), static cache only.
- ``model_train_step``: ``zero_grad(set_to_none=True)``, forward with ``labels`` under
  ``torch.autocast(bfloat16)`` over fp32 weights, backward, ``torch.optim.AdamW`` (its default
  foreach implementation) step: the HF Trainer's ``bf16=True`` with ``optim="adamw_torch"``.
  Compiled: the model under ``torch.compile`` (default mode).

``peak_bytes``: ``torch.cuda.max_memory_allocated()`` over one call after
``reset_peak_memory_stats()``, weights (and cache, optimizer state) included; the record keeps
``allocated_before_bytes``. Every record keeps the host probe taken before its model was built.
"""

from __future__ import annotations

import gc
import time

from ..harness.records import RecordWriter
from .common import TimeBox, Timer, host_probe_s_per_launch, lib_source, log, make_record
from .configs import MODELS, tiny_config
from .hf_grids import EXT_TRAIN, grids, model_names

STATIC_EXTRA = 16  # StaticCache positions beyond the context: a generate() of 16 new tokens


def transformers_or_none():
    """Hugging Face transformers with its logging quietened to errors, or None where it is
    not installed."""
    try:
        import transformers
    except ImportError:
        return None
    if hasattr(transformers, "logging"):
        transformers.logging.set_verbosity_error()
    return transformers


def failure(exc: Exception) -> str:
    """One line for a case or model that failed: the exception's type and first line."""
    return f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"


def decode_peak(torch, device: str, fn, before) -> tuple[int, int]:
    """``_peak`` of one decode call after its untimed ``before``."""
    def once():
        if before is not None:
            before()
        fn()

    return _peak(torch, device, once)


def _build(torch, tf, device: str, name: str, layers: int, dtype, tiny: bool):
    cfg_dict = tiny_config(name) if tiny else dict(MODELS[name]["hf_config"])
    cfg_dict["num_hidden_layers"] = layers
    model_type = cfg_dict.pop("model_type")
    cfg_dict.pop("architectures", None)
    cfg = tf.AutoConfig.for_model(model_type, **cfg_dict)
    with torch.device(device):
        try:
            model = tf.AutoModelForCausalLM.from_config(cfg, dtype=dtype)
        except TypeError:  # transformers 4.x spells it torch_dtype
            model = tf.AutoModelForCausalLM.from_config(cfg, torch_dtype=dtype)
    model.to(device=device, dtype=dtype)
    info = {"attn_implementation": getattr(model.config, "_attn_implementation", None),
            "experts_implementation": getattr(model.config, "experts_implementation", None),
            "num_params": sum(p.numel() for p in model.parameters()),
            "transformers": tf.__version__, "model_source": MODELS[name]["source"]}
    return model, info


def _static_cache(tf, model, batch: int, max_len: int, device, dtype):
    try:  # transformers 5: shapes are taken at the first update
        return tf.StaticCache(config=model.config, max_cache_len=max_len)
    except TypeError:
        return tf.StaticCache(config=model.config, max_batch_size=batch, max_cache_len=max_len,
                              device=device, dtype=dtype)


def _peak(torch, device: str, fn) -> tuple[int, int]:
    if device != "cuda":
        fn()
        return 1, 1
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return max(1, torch.cuda.max_memory_allocated()), before


class _Part:
    """What the HF cases share: torch, the device, the writer, the timer, the host probe."""

    def __init__(self, torch, device, device_key, writer, tiny):
        self.torch, self.device, self.key, self.writer, self.tiny = (torch, device, device_key,
                                                                     writer, tiny)
        self.timer = Timer(torch, device, target_s=0.3, max_reps=10)
        self.probe_s = None
        self.extended = False
        self.extra = {}  # params every record of the model carries (the families part's)

    def emit(self, kind, params, stats, peak, before, what, info, **extra):
        rec = make_record(kind, self.key, params | self.extra,
                          {"time_s": stats["median_s"], "peak_bytes": int(peak)},
                          lib_source(self.torch, self.device, what, stats), stats=stats,
                          allocated_before_bytes=int(before),
                          host_probe_s=extra.pop("host_probe_s", self.probe_s), hf=info, **extra)
        self.writer.write(rec)
        log(f"  {kind} {params} {stats['median_s'] * 1e3:.3f} ms peak {peak / 1e9:.2f} GB")

    def probe(self) -> float | None:
        """The host probe now (s per launch), in the extended grid; else the model's."""
        if not self.extended:
            return self.probe_s
        return host_probe_s_per_launch(self.torch, self.device)

    def kernels(self, fn, before=None) -> dict:
        """The kernels' own time of one call (extended grid only): ``device_kernel_s``."""
        if not self.extended:
            return {}
        if before is not None:
            before()
        try:
            stats = self.timer.device_time(fn, reps=2)
        except Exception as exc:  # a profiler failure must not cost the isolated record
            log(f"  device kernel time failed: {type(exc).__name__}: {str(exc)[:160]}")
            return {}
        if stats is None:
            return {}
        return {"device_kernel_s": stats["median_s"],
                "kernels_per_call": stats.get("kernels_per_call")}

    def ids(self, batch, seq, vocab):
        return self.torch.randint(0, vocab, (batch, seq), device=self.device)


def prefill_call(part, fwd, batch: int, seq: int, vocab: int):
    """A prefill's timed call: ``fwd`` over ``batch`` random prompts of ``seq`` tokens, no cache
    kept, ``logits_to_keep=1`` (what ``generate`` asks for)."""
    x = part.ids(batch, seq, vocab)

    def fn(x=x):
        with part.torch.no_grad():
            return fwd(input_ids=x, use_cache=False, logits_to_keep=1)

    return fn


def _prefill(part, model, name, layers, stack, info, shapes, box):
    torch = part.torch
    vocab = model.config.vocab_size
    fwd = _compile(torch, part.device, model) if stack == "torch-compile" else model
    for b, s in shapes:
        if box.over():
            return
        fn = prefill_call(part, fwd, b, s, vocab)
        probe = part.probe()
        stats = part.timer.isolated(fn, warmup=3 if stack == "torch-compile" else 1)
        peak, before = _peak(torch, part.device, fn)
        params = {"model": name, "layers": layers, "batch": b, "seq": s, "dtype": "bf16",
                  "stack": stack, "timing": "isolated"}
        part.emit("prefill_step", params, stats, peak, before, f"{name} forward ({stack})", info,
                  host_probe_s=probe, **part.kernels(fn))


def decode_case(part, tf, model, b: int, ctx: int, kv: str, step_fwd):
    """One decode case's timed call: ``(fn, before, max_len, cache)``. The cache is filled by a
    forward of ``b`` random prompts of ``ctx`` tokens; ``before`` (None or untimed before each
    call) crops a dynamic cache back to ``ctx`` or rewinds a static one (``_rewind_static``);
    ``max_len`` is a static cache's length."""
    torch = part.torch
    vocab = model.config.vocab_size
    prompt = part.ids(b, ctx, vocab)
    tok = part.ids(b, 1, vocab)
    dt = next(model.parameters()).dtype
    before = None
    with torch.no_grad():
        if kv == "static":
            max_len = ctx + STATIC_EXTRA
            cache = _static_cache(tf, model, b, max_len, part.device, dt)
            model(input_ids=prompt, past_key_values=cache, use_cache=True,
                  cache_position=torch.arange(ctx, device=part.device), logits_to_keep=1)

            def before(cache=cache, ctx=ctx):
                _rewind_static(cache, ctx)

        else:
            max_len = None
            cache = model(input_ids=prompt, use_cache=True, logits_to_keep=1).past_key_values

            def before(cache=cache, ctx=ctx):
                cache.crop(ctx)

            if getattr(model.config, "sliding_window", None) or not _croppable(cache, ctx):
                # Sliding-window layers keep no past to crop back to (transformers 5), nor do
                # linear-attention ones: the cache grows by one token a repetition (at most
                # 12 here).
                before = None
    pos = torch.tensor([ctx], device=part.device)

    def fn(cache=cache, tok=tok, pos=pos):
        with torch.no_grad():
            return step_fwd(input_ids=tok, past_key_values=cache, use_cache=True,
                            cache_position=pos, position_ids=pos.expand(tok.shape[0], 1))

    return fn, before, max_len, cache


def _croppable(cache, ctx: int) -> bool:
    """Whether a dynamic cache can be cropped back to ``ctx`` (a hybrid model's
    linear-attention layers keep no past: transformers 5.17 raises; 5.25 refuses a positive
    length)."""
    try:
        cache.crop(ctx)
    except (RuntimeError, AttributeError, NotImplementedError, ValueError):
        return False
    return True


def _rewind_static(cache, ctx: int) -> None:
    """Back to ``ctx`` written tokens. transformers 5.17's ``StaticLayer`` writes each update at
    its own ``cumulative_length`` (a 0-d tensor it advances), not at the ``cache_position`` the
    call passes: on the H200 the 17th call of a case with 16 spare positions failed an
    ``index_copy_`` bound (data/h200_stacks/run9/campaign.log.gz). Earlier runs, without this
    rewind, wrote their 13-16 calls one position further each (the mask spans the whole static
    length either way)."""
    for layer in getattr(cache, "layers", ()):
        written = getattr(layer, "cumulative_length", None)
        if hasattr(written, "fill_"):
            written.fill_(ctx)
        elif isinstance(written, int):
            layer.cumulative_length = ctx


def _decode(part, tf, model, name, layers, stack, info, shapes, box, caches):
    torch = part.torch
    compiled = stack == "torch-compile"
    step_fwd = model.forward
    if compiled:
        step_fwd = _compile(torch, part.device, model.forward, mode="reduce-overhead")
    for b, ctx in shapes:
        for kv in caches:
            if box.over():
                return
            fn, before, max_len, cache = decode_case(part, tf, model, b, ctx, kv, step_fwd)
            probe = part.probe()
            stats = part.timer.isolated(fn, warmup=4 if compiled else 2, before=before)
            peak, before_bytes = decode_peak(torch, part.device, fn, before)
            params = {"model": name, "layers": layers, "batch": b, "context": ctx,
                      "kv_cache": kv, "dtype": "bf16", "stack": stack, "timing": "isolated"}
            if max_len:
                params["max_cache_len"] = max_len
            # no kernel time under CUDA-graph replay: profiling the replayed graph of the
            # compiled decode hit a device-side assert on the H200 (data/h200_stacks/run2)
            kern = {} if compiled else part.kernels(fn, before)
            part.emit("model_decode_step", params, stats, peak, before_bytes,
                      f"{name} decode step ({kv} cache, {stack})", info,
                      cache_class=type(cache).__name__, host_probe_s=probe, **kern)
            cache = fn = before = None  # ``before`` holds the cache too
            _free(torch, part.device)


def _train(part, model, name, layers, stack, info, shapes, box):
    torch = part.torch
    vocab = model.config.vocab_size
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    fwd = _compile(torch, part.device, model) if stack == "torch-compile" else model
    dev_type = "cuda" if part.device == "cuda" else "cpu"
    for mb, s in shapes:
        if box.over():
            return
        x = part.ids(mb, s, vocab)

        def step(x=x):
            opt.zero_grad(set_to_none=True)
            with torch.autocast(dev_type, dtype=torch.bfloat16):
                loss = fwd(input_ids=x, labels=x).loss
            loss.backward()
            opt.step()

        probe = part.probe()
        stats = part.timer.isolated(step, warmup=3 if stack == "torch-compile" else 2,
                                    reps=3 if not part.tiny else 2)
        peak, before = _peak(torch, part.device, step)
        params = {"model": name, "layers": layers, "micro_batch": mb, "seq": s,
                  "optimizer": "adamw", "precision": "bf16-mixed", "stack": stack,
                  "timing": "isolated"}
        part.emit("model_train_step", params, stats, peak, before,
                  f"{name} train step, AdamW foreach, bf16 autocast over fp32 ({stack})", info,
                  optimizer_impl="torch.optim.AdamW (foreach)", host_probe_s=probe,
                  **part.kernels(step))
    _free(torch, part.device)


def _compile(torch, device: str, fn, mode: str | None = None):
    """torch.compile on a GPU (inductor; ``mode`` as given); aot_eager on a CPU (smoke path)."""
    if device != "cuda":
        return torch.compile(fn, backend="aot_eager")
    return torch.compile(fn, mode=mode) if mode else torch.compile(fn)


def _free(torch, device):
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()


def _run_phase(part, tf, name: str, phase: str, lay: dict, stack: str, shapes: tuple,
               share: TimeBox, *, compiled: bool, extended: bool) -> None:
    """One model's ``infer`` phase (prefill, then decode) or ``train`` phase, on a model built
    for it (bf16 weights to infer, fp32 to train)."""
    torch, device, tiny = part.torch, part.device, part.tiny
    pre, dec, tr = shapes
    if phase == "infer":
        infer_layers = lay["compile"] if compiled else lay["infer"]
        model, info = _build(torch, tf, device, name, infer_layers, torch.bfloat16, tiny)
        model.eval()
        _prefill(part, model, name, infer_layers, stack, info, pre, share)
        _decode(part, tf, model, name, infer_layers, stack, info, dec, share,
                ("static",) if compiled else ("dynamic", "static"))
    else:
        layers = lay["compile"] if compiled else lay["train"]
        if extended and not tiny and not compiled:
            tr = EXT_TRAIN.get(name, EXT_TRAIN["default"])
        model, info = _build(torch, tf, device, name, layers, torch.float32, tiny)
        model.train()
        _train(part, model, name, layers, stack, info, tr, share)


def run(torch, device, device_key, out_dir, box: TimeBox, tiny: bool, *, compiled: bool,
        models: tuple[str, ...] | None = None, extended: bool = False,
        grid: str = "base") -> dict:
    """Every model in turn (eager), or the compiled cases of ``COMPILE_MODELS``; ``extended``:
    the extended grid (``hf_grids``' ``EXT_*``)."""
    tf = transformers_or_none()
    if tf is None:
        log("  hf: transformers is not installed here: whole-model parts skipped")
        return {"skipped": "transformers is not installed"}
    torch._dynamo.config.cache_size_limit = 64
    part = _Part(torch, device, device_key, RecordWriter(out_dir, "models"), tiny)
    part.extended = extended
    names = model_names(compiled, extended, models)
    stack = "torch-compile" if compiled else "hf-transformers"
    failed = {}
    shapes = grids(tiny, compiled, extended, grid)
    decode_only = grid == "decode"
    for i, name in enumerate(names):
        if box.over():
            log(f"  hf: time box reached before {name}")
            break
        model_s = box.left_s() / (len(names) - i)
        lay = {k: 2 for k in MODELS[name]["layers"]} if tiny else MODELS[name]["layers"]
        part.probe_s = host_probe_s_per_launch(torch, device)
        for phase in ("infer",) if decode_only and not compiled else ("infer", "train"):
            start = time.monotonic()
            # Inference gets 60% of the model's share, training the rest (and what is left).
            share = TimeBox(0.6 * model_s if phase == "infer" else box.left_s() / (len(names) - i))
            try:
                _run_phase(part, tf, name, phase, lay, stack, shapes, share, compiled=compiled,
                           extended=extended)
            except Exception as exc:  # one model's failure must not end the part
                msg = failure(exc)
                failed[f"{name}/{phase}"] = msg
                log(f"  hf {name} {phase} ({stack}) FAILED {msg}")
            _free(torch, device)
            torch._dynamo.reset()
            log(f"  hf {name} {phase} ({stack}): {time.monotonic() - start:.1f} s")
    return {"records": part.writer.count, "failed": failed}
