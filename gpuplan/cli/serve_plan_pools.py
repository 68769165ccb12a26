"""``serve plan``'s pools, targets and frontier: ``--prefill-gpu``/``--decode-gpu`` and each
pool's TPs (``sim.runtime.serving.plan_disagg``), lists given as ``2 4 8`` or ``2,4,8``, TTFT
and TPOT targets of which either may be left out, and the throughput-per-GPU against
throughput-per-user frontier."""

from __future__ import annotations

import argparse
import math

from gpuplan.cli.argtypes import int_list, word
from gpuplan.cli.serve_pools import POOLS, flag_gpu
from gpuplan.errors import GpuplanError
from gpuplan.limits import MAX_GPUS
from gpuplan.tables import format_seconds, render_table


class FirstAndRest(argparse.Action):
    """``--gpu A B C``: A in ``gpu`` (the plan's own GPU, the one its price and device flags
    are for), B and C in ``more_gpus``."""

    def __call__(self, parser, namespace, values, option_string=None):
        namespace.gpu, namespace.more_gpus = values[0], tuple(values[1:])


GPU_KW = {"nargs": "+", "action": FirstAndRest, "metavar": "GPU"}  # serve plan's --gpu


class FlatList(argparse.Action):
    """A list flag given as ``2 4 8``, ``2,4,8`` or both: the values of every word, in order."""

    def __call__(self, parser, namespace, values, option_string=None):
        flat = []
        for v in values:
            flat.extend(v if isinstance(v, tuple) else (v,))
        setattr(namespace, self.dest, tuple(flat))


def tp_list_option(p, flag: str, help: str) -> None:
    """A list of TP degrees, ``2 4 8`` or ``2,4,8``."""
    p.add_argument(flag, type=int_list(MAX_GPUS), nargs="+", action=FlatList, metavar="N",
                   help=help)  # fmt: skip


def add_plan_pool_options(p) -> None:
    """``--prefill-gpu``, ``--decode-gpu``, ``--prefill-tp`` and ``--decode-tp`` of the plan."""
    for pool in POOLS:
        p.add_argument(f"--{pool}-gpu", type=word, nargs="+", action=FlatList, default=(),
                       metavar="GPU", help=f"disaggregated units: {pool} pool GPU types to try "
                       "(default --gpu)")  # fmt: skip
        tp_list_option(p, f"--{pool}-tp", f"disaggregated units: {pool} pool TPs to try "
                       "(default: as --tp)")  # fmt: skip


def plan_pools(args):
    """The pools the plan pairs (``plan_disagg.PoolSpace``)."""
    from gpuplan.sim.runtime.serving.plan_disagg import PoolSpace

    for flag, names in (("--gpu", getattr(args, "more_gpus", ())),
                        ("--prefill-gpu", args.prefill_gpu), ("--decode-gpu", args.decode_gpu)):
        for name in names:
            flag_gpu(flag, name)
    return PoolSpace(gpus=getattr(args, "more_gpus", ()), prefill_gpus=tuple(args.prefill_gpu),
                     decode_gpus=tuple(args.decode_gpu), prefill_tps=args.prefill_tp,
                     decode_tps=args.decode_tp)  # fmt: skip


def plan_slo(args):
    """The SLO of ``--slo-ttft-s`` and ``--slo-tpot-s`` (one may be left out, not both)."""
    from gpuplan.sim.runtime.serving.plan_space import Slo

    if args.slo_ttft_s is None and args.slo_tpot_s is None:
        raise GpuplanError("serve plan needs --slo-ttft-s, --slo-tpot-s or both: the latency "
                           "targets to plan for")  # fmt: skip
    return Slo(ttft_s=math.inf if args.slo_ttft_s is None else args.slo_ttft_s,
               tpot_s=math.inf if args.slo_tpot_s is None else args.slo_tpot_s,
               percentile=args.percentile)  # fmt: skip


def slo_text(args) -> str:
    """The targets given, e.g. ``TTFT p99 <= 2 s and TPOT p99 <= 50 ms``."""
    pct = f"p{args.percentile:g}"
    return " and ".join(f"{name} {pct} <= {format_seconds(value)}" for name, value in
                        (("TTFT", args.slo_ttft_s), ("TPOT", args.slo_tpot_s)) if value is not None)


FRONTIER_KEYS = ("layout", "gpu", "tp", "prefill_gpu", "prefill_tp", "decode_gpu", "decode_tp",
                 "weight_dtype", "kv_dtype", "max_seqs", "replicas", "gpus",
                 "tokens_per_s_per_gpu", "tokens_per_s_per_user", "usd_per_m_output_tokens")  # fmt: skip


def frontier_doc(result, args, load) -> list[dict]:
    """The plan's frontier (``plan_disagg.frontier``) as the document lists it."""
    from gpuplan.sim.runtime.serving.plan_disagg import frontier, searched_rows

    mean_output = float(sum(load.output_tokens[: load.n])) / load.n
    rows = frontier(searched_rows(result.rows, result.top), rate_per_s=args.rate,
                    mean_output_tokens=mean_output, percentile=args.percentile)  # fmt: skip
    pooled = ("gpu", "prefill_gpu", "prefill_tp", "decode_gpu", "decode_tp")  # "" and 0: none
    return [{k: (r.get(k) or None) if k in pooled else r.get(k) for k in FRONTIER_KEYS}
            for r in rows]


def frontier_lines(doc: dict) -> list[str]:
    """The frontier as a table, with what its two axes are."""
    rows = doc.get("frontier") or []
    if not rows:
        return ["\nfrontier: no configuration simulated met the SLO"]
    cols = [c for c in FRONTIER_KEYS if any(r.get(c) is not None for r in rows)]
    fmt = {"tokens_per_s_per_gpu": lambda v: f"{v:,.1f}", "tokens_per_s_per_user": lambda v: f"{v:,.1f}",
           "usd_per_m_output_tokens": lambda v: f"${v:,.2f}"}  # fmt: skip
    return ["\nfrontier: output tokens/s per GPU (at the offered rate) against tokens/s per user "
            "(1 / TPOT at the percentile): of the configurations searched to the end that meet "
            "the SLO (--top widens them), those no other beats on both",
            render_table(rows, cols, formats=fmt)]  # fmt: skip


def gpu_text(args) -> str:
    """The GPU types the plan tries: ``h200``, or ``h200, h100-sxm``."""
    return ", ".join((args.gpu, *getattr(args, "more_gpus", ())))


def gpu_prices(args, result) -> dict:
    """Each GPU type the plan priced: USD per GPU-hour and its source (--gpu's first as the
    plan priced it, the others from the price file)."""
    from gpuplan.hwmodels.accelerators import get_accelerator
    from gpuplan.sim.parallel.cost import price_for

    own = get_accelerator(args.gpu).key
    names = (*getattr(args, "more_gpus", ()), *args.prefill_gpu, *args.decode_gpu)
    out = {own: {"usd_per_gpu_hour": args.price_per_gpu_hour or price_for(own).usd_per_gpu_hour,
                 "source": result.price_source}}  # fmt: skip
    for key in dict.fromkeys(get_accelerator(n).key for n in names):
        if key not in out and (price := price_for(key)) is not None:
            out[key] = {"usd_per_gpu_hour": price.usd_per_gpu_hour,
                        "source": price.cited}  # fmt: skip
    return out


def price_lines(doc: dict) -> list[str]:
    """The other GPU types' prices, one line each (the plan's own is on its price line)."""
    rest = list(doc["gpu_prices"].items())[1:]
    return [f"price of {key}: ${p['usd_per_gpu_hour']:,.2f} per GPU-hour, {p['source']}"
            for key, p in rest]  # fmt: skip
