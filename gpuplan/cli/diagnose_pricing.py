"""How ``gpuplan diagnose`` prices a setup: each ``Settings`` is parsed by the ``train`` or
``serve`` parser and priced through the same steps as that command, so that every row's
printed command gives the row's figures."""

from __future__ import annotations

import dataclasses
import math

from gpuplan.sim.diagnose.walk import Priced, argv_of, walk, with_edits

# -- training ------------------------------------------------------------------------------


def _train_context(args):
    from gpuplan.cli.calibration import efficiency_from_args
    from gpuplan.cli.train_cmd import _strategy, resolve_cluster, resolve_stack
    from gpuplan.errors import GpuplanError
    from gpuplan.sim.parallel.strategy import default_seq
    from gpuplan.workloads.presets import get_model

    if not args.model:
        raise GpuplanError("gpuplan diagnose train needs --model")
    cfg = get_model(args.model)
    cluster = resolve_cluster(args)
    stack = resolve_stack(args, cluster.accelerator)
    strategy = _strategy(args, args.gpus, stack, cfg)
    seq = args.seq or default_seq(cfg)
    eff = efficiency_from_args(args, cluster.accelerator.key)
    return cfg, cluster, stack, strategy, seq, eff


def train_pricer(parser):
    """``price(settings)`` as ``gpuplan train`` prices them (its own helpers, in its order)."""
    from gpuplan.sim.parallel.estimate import estimate_training

    def price(settings) -> Priced:
        args = parser.parse_args(argv_of(settings))
        cfg, cluster, stack, strategy, seq, eff = _train_context(args)
        est = estimate_training(cfg, strategy, cluster=cluster, seq=seq, gpus=args.gpus,
                                stack=stack, eff=eff)  # fmt: skip
        figures = {"step_time_s": est.step_time_s, "tokens_per_s": est.tokens_per_s,
                   "mfu": est.mfu, "peak_memory_per_gpu_bytes": est.peak_memory_per_gpu_bytes}
        return Priced(metric=est.step_time_s, figures=figures, ok=est.fits, detail=est)

    return price


def train_walk(settings, parser):
    from gpuplan.cli.train_cmd import DEFAULT_TRAINING_STACK
    from gpuplan.sim.diagnose.layers import training_limit, training_offers

    args = parser.parse_args(argv_of(settings))
    cfg, cluster, stack, strategy, seq, eff = _train_context(args)
    gpus = args.gpus or strategy.world

    def search_layout(now):
        return _search_edits(cfg, cluster, stack, now.detail.strategy, seq, eff, gpus)

    settings = dict(settings)
    if "--gpus" not in settings:  # the layer-2 layout keeps the world size the setup has
        settings["--gpus"] = str(gpus)
    settings, notes = _start_from_fit(settings, parser, cfg, cluster, stack, strategy, seq, eff)
    if notes:  # the layers walk the layout that fits, on its GPUs
        gpus = int(settings["--gpus"])
    diagnosis = walk(settings, price=train_pricer(parser),
                     offers=training_offers(cfg, cluster, search_layout=search_layout,
                                            default_stack=DEFAULT_TRAINING_STACK),
                     limit=lambda s, now: training_limit(now, cluster.accelerator),
                     kind="train", metric="step_time_s")  # fmt: skip
    return dataclasses.replace(diagnosis, notes=(*notes, *diagnosis.notes))


def _start_from_fit(settings, parser, cfg, cluster, stack, strategy, seq, eff):
    """(settings, notes): a setup that does not fit starts the walk from the nearest change that
    does (``cli.feasibility``), said in a note; one that fits, as given."""
    from gpuplan.cli.feasibility import training_infeasible

    now = train_pricer(parser)(settings)
    if now.ok:
        return settings, ()
    err = training_infeasible(cfg, cluster, stack.name, gpus=strategy.world,
                              global_batch=strategy.global_batch, seq=seq, eff=eff,
                              peak_bytes=now.figures["peak_memory_per_gpu_bytes"],
                              label=strategy.label)  # fmt: skip
    if not err.fix:
        raise err
    note = f"as given it does not fit: {err}; the layers below start from that change"
    return with_edits(settings, err.fix), (note,)


def _search_edits(cfg, cluster, stack, st, seq, eff, gpus):
    """The flag edits of the fastest layout ``search`` finds for the same GPUs, batch, schedule
    kind, recomputation, precision and stack (those are the other layers' to change)."""
    from gpuplan.errors import GpuplanError
    from gpuplan.sim.diagnose.layers import layout_edits
    from gpuplan.sim.parallel.search import SearchSpace, row_strategy, search

    space = SearchSpace(recompute=(st.recompute,), precision=(st.precision,),
                        schedules=(st.schedule,), attention=st.attention,
                        state_precision=st.state_precision, overlap_dp=st.overlap_dp,
                        overlap_tp=st.overlap_tp, overlap_pp=st.overlap_pp,
                        overlap_ep=st.overlap_ep, load=st.expert_imbalance, stack=stack)  # fmt: skip
    try:
        result = search(cfg, cluster=cluster, gpus=gpus, global_batch=st.global_batch, seq=seq,
                        space=space, eff=eff)  # fmt: skip
    except GpuplanError:
        return None
    best = row_strategy(result.frame.iloc[0], global_batch=st.global_batch, space=space)
    edits = layout_edits(best) | {"--schedule": best.schedule,
                                  "--virtual-stages": str(best.virtual_stages)}  # fmt: skip
    return edits


# -- serving -------------------------------------------------------------------------------


def serve_pricer(parser):
    """``price(settings)`` as ``gpuplan serve`` prices them: its deployment, scheduler,
    workload and simulation, in its order."""
    from gpuplan.cli.serve_cmd import (
        _check_serve_outputs,
        _stack_deployment,
        _stack_scheduler,
        _workload,
    )
    from gpuplan.sim.parallel.cost import usd_per_hour, usd_per_million_tokens
    from gpuplan.sim.runtime.serving.engine import simulate

    def price(settings) -> Priced:
        args = parser.parse_args(argv_of(settings))
        _check_serve_outputs(args)
        dep, stack = _stack_deployment(args)
        sched = _stack_scheduler(args, stack, dep)
        workload = _workload(args, default_requests=DEFAULT_REQUESTS)
        result = simulate(dep, sched, workload, replicas=args.replicas, router=args.router,
                          horizon_s=args.horizon_s, timeline=True, progress=False,
                          slo_ttft_s=args.slo_ttft_s, slo_tpot_s=args.slo_tpot_s)  # fmt: skip
        s = result.summary
        gpus = args.replicas * dep.gpus  # tp x pp a replica
        out_per_s = s["output_tokens_per_s"]
        usd = (usd_per_million_tokens(gpus, usd_per_hour(dep.acc.key), out_per_s) if out_per_s
               else math.inf)  # fmt: skip
        figures = {"ttft_s": s["ttft_s"]["mean"], "tpot_s": s["tpot_s"]["mean"],
                   "e2e_s": s["e2e_s"]["mean"], "output_tokens_per_s": out_per_s,
                   "usd_per_million_tokens": usd}  # fmt: skip
        ok = s["rejected"] == 0 and s["finished"] > 0
        metric = usd if math.isinf(args.rate or 0.0) else figures["e2e_s"]
        return Priced(metric=metric, figures=figures, ok=ok,
                      detail=(result.capacity.weights_bytes, workload))

    return price


def serve_walk(settings, parser):
    from gpuplan.cli.serve_cmd import DEFAULT_STACK
    from gpuplan.errors import GpuplanError
    from gpuplan.hwmodels.accelerators import get_accelerator
    from gpuplan.sim.diagnose.layers import serving_limit, serving_offers
    from gpuplan.sim.parallel.cost import usd_per_hour
    from gpuplan.workloads.presets import get_model

    args = parser.parse_args(argv_of(settings))
    missing = [f"--{m}" for m in ("model", "gpu") if getattr(args, m) is None]
    if missing:
        raise GpuplanError(f"gpuplan diagnose serve needs {', '.join(missing)}")
    price = serve_pricer(parser)
    settings, notes = _serve_start_from_fit(dict(settings), price)
    args = parser.parse_args(argv_of(settings))
    cfg, acc = get_model(args.model), get_accelerator(args.gpu)
    gpus = args.tp * args.pp * args.replicas
    offline = math.isinf(args.rate or 0.0)

    def limit(s, now):
        weights_bytes_per_gpu, workload = now.detail
        a = parser.parse_args(argv_of(s))
        return serving_limit(now, cfg=cfg, acc=acc, gpus=gpus, tp=a.tp,
                             weights_bytes_per_gpu=weights_bytes_per_gpu,
                             prompt_tokens=float(workload.prompt_tokens.mean()),
                             output_tokens=float(workload.output_tokens.mean()),
                             offline=offline, usd_per_gpu_hour=usd_per_hour(acc.key))  # fmt: skip

    n = args.requests or DEFAULT_REQUESTS

    def screen(s):  # the same traffic, its first SCREEN_REQUESTS requests
        return price(with_edits(s, {"--requests": str(min(n, SCREEN_REQUESTS))}))

    diagnosis = walk(dict(settings), price=price, screen=screen if n > SCREEN_REQUESTS else None,
                     offers=serving_offers(cfg, acc, gpus=gpus, default_stack=DEFAULT_STACK),
                     limit=limit, kind="serve",
                     metric="usd_per_million_tokens" if offline else "e2e_s")  # fmt: skip
    return dataclasses.replace(diagnosis, notes=(*notes, *diagnosis.notes))


def _serve_start_from_fit(settings, price):
    """(settings, notes): a deployment that cannot hold the model starts the walk from the
    nearest change that does (the TP, pipeline or model length ``kv_cache`` names), said in a
    note; one that fits, as given."""
    from gpuplan.errors import Infeasible

    try:
        price(settings)
    except Infeasible as err:
        if not err.fix:
            raise
        note = f"as given it does not fit: {err}; the layers below start from that change"
        return with_edits(settings, err.fix), (note,)
    return settings, ()


DEFAULT_REQUESTS = 1000  # gpuplan serve's (serve_cmd._workload)
SCREEN_REQUESTS = 200  # requests of the screening simulations that rank a layer's candidates

