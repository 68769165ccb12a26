"""``gpuplan serve``: simulate serving traffic, plan capacity under SLOs, estimate edge devices.

- ``gpuplan serve --model M --gpu G --rate R --prompt-tokens P --output-tokens O`` runs one
  simulation and prints the latency table (``--rate inf``: every request at time zero, an
  offline throughput run);
- ``gpuplan serve plan --model M --gpu G --rate R --slo-ttft-s X --slo-tpot-s Y`` searches
  tensor parallelism, replicas, batch limits, quantization and disaggregation for the cheapest
  configurations that meet the SLOs;
- ``gpuplan serve edge --model M --gpu jetson-agx-orin-64gb`` gives single-stream and
  small-batch tokens/s and memory per weight format, with the bound that limits them.

Token counts (``--prompt-tokens``, ``--output-tokens``) are a number, ``uniform:LO:HI``,
``lognormal:MEDIAN:P90[:MAX]`` or ``conversation`` (a fit to the Azure 2023 conversation trace).
"""

from __future__ import annotations

import argparse
import sys

from gpuplan.cli.dask_workers import with_timing
from gpuplan.cli.serve_args import (
    DEFAULT_STACK,
    add_replica_options,
    add_simulation_options,
    add_traffic_options,
)
from gpuplan.cli.serve_edge_cmd import register_edge
from gpuplan.cli.serve_emit import render_launch, serve_launch
from gpuplan.cli.serve_inputs import (
    efficiency_fit,
    serve_defaults,
    serving_stack_from_args,
    speculation_from_args,
)
from gpuplan.cli.serve_inputs import serve_workload as _workload  # diagnose_pricing's name
from gpuplan.cli.serve_plan_cmd import register_plan
from gpuplan.cli.serve_pools import add_pool_options, fill_pool_gpu, pools_asked, serve_pools
from gpuplan.cli.serve_render import render_serve
from gpuplan.cli.stack_flags import add_stack_options, stack_doc, stack_line
from gpuplan.errors import GpuplanError
from gpuplan.outputs import check_output, write_csv
from gpuplan.tables import dump_json, render_table
from gpuplan.validate.bands import documents as bands


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "serve",
        help="simulate LLM serving; `serve plan` for capacity, `serve edge` for edge devices",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_traffic_options(p, rate_required=False)
    add_stack_options(p, default=DEFAULT_STACK)
    add_replica_options(p)
    add_simulation_options(p)
    add_pool_options(p)
    p.set_defaults(func=run_serve)
    sub = p.add_subparsers(title="subcommands", metavar="{plan,edge}", dest="serve_command")
    register_plan(sub)
    register_edge(sub)



# --- serve -------------------------------------------------------------------------------------


def run_serve(args) -> int:
    from gpuplan.sim.runtime.serving.engine import simulate
    from gpuplan.sim.runtime.serving.wide_ep import group_scheduler

    if getattr(args, "reproduce", False):
        return run_reproduce(args)
    fill_pool_gpu(args)
    missing = [flag for flag in ("model", "gpu") if getattr(args, flag) is None]
    if missing:
        flags = ", ".join("--" + m for m in missing)
        raise GpuplanError(
            f"gpuplan serve needs {flags} (or a subcommand: plan, edge; or --reproduce)"
        )

    _check_serve_outputs(args)
    dep, stack = _stack_deployment(args)
    sched = group_scheduler(_stack_scheduler(args, stack, dep), dep)
    defaults = serve_defaults(args, model=dep.model)
    workload = _workload(args, default_requests=1000)
    common = {
        "horizon_s": args.horizon_s,
        "timeline": True,
        "progress": args.progress and sys.stderr.isatty(),  # a bar on a terminal only
        "slo_ttft_s": args.slo_ttft_s,
        "slo_tpot_s": args.slo_tpot_s,
    }
    speculator = _speculator(args, dep, stack)
    pools = {}
    if pools_asked(args):
        if dep.dp_attention:
            raise GpuplanError("--dp-attention with disaggregated pools (--disaggregate or a "
                               "--prefill-/--decode- flag) is not modelled yet: drop one")  # fmt: skip
        if speculator is not None:
            raise GpuplanError("--speculative with --disaggregate is not modelled: drop one")
        result, (dep, stack, sched), pools = serve_pools(args, workload, common, _pool_build)
        replicas = sum(args.disaggregate)
    else:
        replicas = simulated_replicas(args, dep)
        result = simulate(dep, sched, workload, replicas=replicas, router=args.router,
                          speculator=speculator, **common)  # fmt: skip
    if args.requests_csv:
        write_csv(args.requests_csv, result.requests)
    if args.timeline_csv:
        write_csv(args.timeline_csv, result.timeline)
    doc = with_timing(_serve_doc(args, dep, sched, workload, result, replicas, stack), args,
                      {"wall_s": result.wall_s})  # fmt: skip
    doc["config"]["defaults"] = defaults
    if pools:  # each pool its own GPUs: the total is theirs
        doc["config"]["gpus"] = pools["pools_total"]["gpus"]
        doc |= pools
    doc |= bands.serve_bands(doc, stack=(doc["config"].get("stack") or {}).get("name", ""),
                             device=doc["config"]["gpu"])  # fmt: skip
    launch = serve_launch(args, dep, sched, speculation_from_args(args), stack)
    doc |= {"launch": launch} if launch else {}
    print(dump_json(doc) if args.json else render_serve(doc) + render_launch(launch))
    return 0


def _speculator(args, dep, stack):
    """``--speculative``'s drafter for the replica ``dep`` (``speculative.stack_speculator``),
    or None."""
    speculation = speculation_from_args(args)
    if speculation is None:
        return None
    from gpuplan.sim.runtime.serving.speculative import stack_speculator

    spec, draft_name = speculation
    fit = efficiency_fit(args) if draft_name is not None else None
    return stack_speculator(spec, dep, stack, args.gpu, draft_model=draft_name, fit=fit)


def _stack_deployment(args):
    """The replica as ``--stack`` serves it, with the flags that override the stack's choices
    (``on_stack.overridden_deployment``)."""
    from gpuplan.hwmodels.accelerators import get_accelerator
    from gpuplan.sim.runtime.serving.on_stack import overridden_deployment

    stack = serving_stack_from_args(args, get_accelerator(args.gpu))
    pp, ep, layers = getattr(args, "pp", 1), getattr(args, "ep", 1), _pp_layers(args)
    dep = overridden_deployment(args.model, args.gpu, stack, fit=efficiency_fit(args), tp=args.tp,
                                weight_dtype=args.weight_dtype, kv_dtype=args.kv_dtype, pp=pp,
                                ep=ep, pp_layers=layers, eager_decode=args.no_cuda_graph,
                                impl=args.impl, **wide_ep_fields(args))  # fmt: skip
    return dep, stack


def wide_ep_fields(args) -> dict:
    """The ``Deployment`` fields of --dp-attention and its companions (those given only)."""
    names = ("dp_attention", "expert_imbalance", "redundant_experts", "two_batch_overlap")
    unset = (False, None, 0, False)
    return {n: getattr(args, n) for n, u in zip(names, unset, strict=True)
            if getattr(args, n, u) != u}  # fmt: skip


def simulated_replicas(args, dep) -> int:
    """Replicas the simulator runs: ``--replicas``, or under --dp-attention the groups of
    ``ep`` GPUs that ``--replicas`` ranks of ``--tp`` GPUs make."""
    if not dep.dp_attention:
        return args.replicas
    gpus = args.replicas * dep.tp
    if gpus % dep.ep:
        raise GpuplanError(
            f"--replicas {args.replicas} x --tp {dep.tp} = {gpus} GPUs do not make whole groups "
            f"of --ep {dep.ep} GPUs under --dp-attention: give --replicas a multiple of "
            f"{dep.ep // dep.tp}"
        )
    return gpus // dep.ep


def _pool_build(ns):
    """One pool's (deployment, stack, scheduler) from its flags (``serve_pools``)."""
    dep, stack = _stack_deployment(ns)
    return dep, stack, _stack_scheduler(ns, stack, dep)


def _pp_layers(args) -> tuple[int, ...] | None:
    """The stage split of --pp-layers / --pp-first-last, resolved as train's (None: even)."""
    from gpuplan.cli.train_args import resolve_pp_layers
    from gpuplan.workloads.presets import get_model

    pp = getattr(args, "pp", 1)
    if pp == 1 and getattr(args, "pp_layers", None) is None and not getattr(args, "pp_first_last", None):
        return None
    return resolve_pp_layers(args, get_model(args.model), pp)


def _stack_scheduler(args, stack, dep):
    """The scheduler of ``--stack`` with the flags given (``on_stack.serving_scheduler``)."""
    from gpuplan.sim.runtime.serving.on_stack import serving_scheduler

    return serving_scheduler(stack, dep, policy=args.policy, max_seqs=args.max_seqs,
                             max_batched_tokens=args.max_batched_tokens,
                             block_tokens=args.block_tokens, preemption=args.preemption,
                             batch_timeout_s=args.batch_timeout_s,
                             memory_utilization=args.memory_utilization,
                             max_model_len=args.max_model_len)  # fmt: skip


def _check_serve_outputs(args) -> None:
    """Output paths and the replica count checked before any work."""
    for flag in ("requests_csv", "timeline_csv"):
        if getattr(args, flag):
            check_output(getattr(args, flag), "--" + flag.replace("_", "-"))
    if args.disaggregate and args.replicas not in (1, sum(args.disaggregate)):
        p, d = args.disaggregate
        raise GpuplanError(
            f"--replicas {args.replicas} disagrees with --disaggregate {p}:{d}, which runs "
            f"{p} + {d} = {p + d} replicas: drop --replicas or give a P:D that sums to it"
        )


def _wide_ep_doc(dep, groups: int) -> dict:
    """The wide-EP keys of a ``--dp-attention`` run's config (none otherwise)."""
    if not dep.dp_attention:
        return {}
    return {"dp_attention": True, "ep_groups": groups, "expert_imbalance": dep.expert_imbalance,
            "redundant_experts": dep.redundant_experts,
            "two_batch_overlap": dep.two_batch_overlap}  # fmt: skip


def _serve_doc(args, dep, sched, workload, result, replicas: int, stack=None) -> dict:
    """The run's document: its summary, with no served rate above the offered load and the
    verdict on the load (``serving.load``), its setup and KV cache."""
    from gpuplan.sim.runtime.serving.load import capped, load_verdict
    from gpuplan.sim.runtime.serving.quantization import weight_path

    cap = result.capacity
    config = {
        "stack": None if stack is None else {**stack_doc(stack, dep.acc),
                                             "line": stack_line(stack, dep.acc)},
        "model": dep.model.name,
        "gpu": dep.acc.key,
        "tp": dep.tp,
        "pp": dep.pp,
        "pp_layers": list(dep.pp_layers or (dep.model.n_layers,)),
        "ep": dep.ep,
        "replicas": replicas * dep.dp,  # a wide-EP group's attention ranks are its replicas
        "gpus": replicas * dep.gpus,
        **_wide_ep_doc(dep, replicas),
        "disaggregate": None if not args.disaggregate else "{}:{}".format(*args.disaggregate),
        "policy": sched.policy,
        "max_seqs": sched.max_seqs,
        "max_batched_tokens": sched.batched_tokens(dep.model),
        "weight_dtype": dep.weight_dtype,
        **({"expert_weight_dtype": e} if (e := dep.model.expert_weight_dtype) else {}),
        "kv_dtype": dep.kv_dtype,
        "rate_per_s": args.rate,
        "requests": workload.n,
        "seed": args.seed,
        "efficiency_source": dep.eff.source,
    }
    if path := weight_path(dep.acc, dep.weight_dtype):  # a block format: how it runs there
        config["weight_path"] = path
    verdict = load_verdict(result.request_columns, result.timeline_columns, rate_per_s=args.rate)
    return {
        **capped(result.summary, verdict),
        **verdict,
        "config": config,
        "kv_cache": {
            "blocks": cap.blocks,
            "block_tokens": cap.block_tokens,
            "layer_blocks_per_block": cap.layer_blocks_per_block,
            "tokens": cap.tokens,
            "kv_bytes_per_gpu": cap.kv_bytes / dep.dp,  # a wide-EP group pools dp ranks
            "weights_bytes_per_gpu": cap.weights_bytes,
            "workspace_bytes_per_gpu": cap.workspace_bytes,
        },
        "simulated_s": result.end_s,
    }


# --- reproduce ---------------------------------------------------------------------------------


def run_reproduce(args) -> int:
    """Predict the published serving rows; print the per-source error left out of every fit
    (each source priced with the stacks' values fitted without it), then the per-source tables
    of the committed fit (held-out rows and all rows) and the rows that cannot be run."""
    from gpuplan.validate.generalization.published import serving_left_out
    from gpuplan.validate.generalization.published import summary as left_summary
    from gpuplan.validate.published.serving import HOLDOUT_SHARE, cannot_run, summary

    rows = serving_left_out()
    left = left_summary(rows, "source", left="left_abs_error_pct")
    held, every, bad = summary(rows, split="holdout"), summary(rows, split=None), cannot_run(rows)
    if args.json:
        print(dump_json({"seed": args.seed, "holdout_share": HOLDOUT_SHARE, "rows": rows,
                         "summary_left_out": left, "summary_holdout": held,
                         "summary_all": every, "cannot_run": bad}))  # fmt: skip
        return 0
    cols = ["source", "kind", "rows", "predicted", "cannot_run", "median_abs_pct_error",
            "p90_abs_pct_error", "median_pct_error"]  # fmt: skip
    pct = {c: (lambda v: f"{v:.1f}%") for c in cols[-3:-1]}
    pct[cols[-1]] = lambda v: f"{v:+.1f}%"
    left_cols = ["source", "kind", "rows", "predicted", "left_out_median_pct", "left_out_p90_pct",
                 "in_sample_median_pct"]  # fmt: skip
    predicted = int(rows["predicted"].notna().sum())
    print(
        f"Published serving results against gpuplan: {len(rows):,} rows from "
        f"{rows['source'].nunique()} sources, {predicted:,} predicted "
        f"({100 * predicted / len(rows):.1f}%); each row priced on its engine's stack\n"
    )
    print("left out of every fit: each source priced with the stacks' values fitted on the other "
          "sources (gpuplan/sim/runtime/serving/data/stack_fit_loso.json; a stack no other "
          "source runs keeps its priors)\n"
          + render_table(left, left_cols, formats={c: (lambda v: f"{v:.1f}%") for c in left_cols[4:]}))
    print(f"\nin sample: the committed fit (gpuplan/sim/runtime/serving/data/stack_fit.json), "
          f"fitted on {1 - HOLDOUT_SHARE:g} of each source's rows (seed {args.seed}); its "
          "held-out rows\n" + render_table(held, cols, formats=pct))
    print("\nin sample, all rows\n" + render_table(every, cols, formats=pct))
    print("\nrows that cannot be run\n" + render_table(bad, ["source", "rows", "reason"]))
    return 0
