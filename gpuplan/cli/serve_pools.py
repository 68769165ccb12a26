"""``gpuplan serve`` with prefill and decode pools of their own: ``--prefill-gpu``,
``--decode-gpu`` and each pool's TP, EP and replicas (``--disaggregate P:D`` is the case of one
GPU type and one layout). Each pool's memory is checked on its own GPU, each is priced at its
own GPU's price, and the KV cache travels over the link between them
(``sim.runtime.serving.disagg``: the slower side's NIC when the GPU types differ)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from gpuplan.cli.argtypes import gpu_count, word
from gpuplan.errors import GpuplanError

POOLS = ("prefill", "decode")
# per pool: the flag's suffix and the shared flag it defaults to
POOL_FIELDS = (("gpu", "gpu"), ("tp", "tp"), ("ep", "ep"), ("replicas", None))


def add_pool_options(p) -> None:
    """``--prefill-gpu``, ``--decode-gpu`` and each pool's ``-tp``, ``-ep`` and ``-replicas``."""
    for pool in POOLS:
        p.add_argument(f"--{pool}-gpu", type=word, default=None,
                       help=f"disaggregated: the {pool} pool's accelerator (default --gpu)")  # fmt: skip
        p.add_argument(f"--{pool}-tp", type=gpu_count, default=None,
                       help=f"disaggregated: tensor-parallel GPUs per {pool} replica (default --tp)")  # fmt: skip
        p.add_argument(f"--{pool}-ep", type=gpu_count, default=None,
                       help=f"disaggregated: MoE expert-parallel GPUs per {pool} replica (default --ep)")  # fmt: skip
        p.add_argument(f"--{pool}-replicas", type=gpu_count, default=None,
                       help=f"disaggregated: {pool} replicas (default: --disaggregate's, else 1)")  # fmt: skip


def pools_asked(args) -> bool:
    """Whether the run is disaggregated: ``--disaggregate`` or any pool flag."""
    return bool(getattr(args, "disaggregate", None)) or any(
        getattr(args, f"{pool}_{field}", None) is not None
        for pool in POOLS
        for field, _ in POOL_FIELDS
    )


def fill_pool_gpu(args) -> None:
    """Without ``--gpu``, the decode pool's GPU names the run (both pools' GPUs given); with
    pools, ``args.disaggregate`` becomes their P:D (``pool_args``)."""
    if getattr(args, "gpu", None) is None and args.prefill_gpu and args.decode_gpu:
        args.gpu = args.decode_gpu
    if pools_asked(args):
        pool_args(args)


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolArgs:
    """One pool as the flags give it."""

    name: str
    gpu: str
    tp: int
    ep: int
    replicas: int


def pool_args(args) -> tuple[PoolArgs, PoolArgs]:
    """Both pools' GPU, TP, EP and replicas; sets ``args.disaggregate`` to their P:D."""
    given = getattr(args, "disaggregate", None)
    out = []
    for k, pool in enumerate(POOLS):
        replicas = getattr(args, f"{pool}_replicas")
        if given and replicas is not None and replicas != given[k]:
            raise GpuplanError(
                f"--{pool}-replicas {replicas} disagrees with --disaggregate "
                f"{given[0]}:{given[1]}: give one of them"
            )
        out.append(PoolArgs(
            name=pool,
            gpu=flag_gpu(f"--{pool}-gpu", getattr(args, f"{pool}_gpu")) or args.gpu,
            tp=getattr(args, f"{pool}_tp") or args.tp,
            ep=getattr(args, f"{pool}_ep") or args.ep,
            replicas=replicas or (given[k] if given else 1),
        ))  # fmt: skip
    args.disaggregate = (out[0].replicas, out[1].replicas)
    return out[0], out[1]


def flag_gpu(flag: str, name: str | None) -> str | None:
    """``name`` (None: not given), checked to be a catalogued accelerator; an unknown one is an
    error that names ``flag``."""
    from gpuplan.hwmodels.accelerators import get_accelerator

    if name is None:
        return None
    try:
        get_accelerator(name)
    except GpuplanError as err:
        raise GpuplanError(f"{flag} {name!r}: {err}") from None
    return name


def pool_namespace(args, pool: PoolArgs) -> argparse.Namespace:
    """``args`` with the pool's GPU, TP and EP in place of the shared ones."""
    return argparse.Namespace(**{**vars(args), "gpu": pool.gpu, "tp": pool.tp, "ep": pool.ep})


def checked_capacity(pool: str, dep, sched):
    """The pool's KV cache on its own GPU; a model that does not fit names the pool."""
    from gpuplan.sim.runtime.serving.kv_cache import kv_capacity

    try:
        return kv_capacity(dep, sched)
    except GpuplanError as err:
        raise GpuplanError(f"{pool} pool: {err}") from None


def pool_doc(pool: PoolArgs, dep, cap) -> dict:
    """One pool's GPUs, layout, memory and price (the price file's, per GPU-hour)."""
    from gpuplan.sim.parallel.cost import price_for

    gpus = pool.replicas * dep.gpus
    price = price_for(dep.acc.key)
    usd = None if price is None else price.usd_per_gpu_hour
    return {
        "gpu": dep.acc.key,
        "tp": dep.tp,
        "ep": dep.ep,
        "pp": dep.pp,
        "replicas": pool.replicas,
        "gpus": gpus,
        "weight_dtype": dep.weight_dtype,
        "kv_dtype": dep.kv_dtype,
        "kv_tokens_per_replica": cap.tokens,
        "weights_bytes_per_gpu": cap.weights_bytes,
        "usd_per_gpu_hour": usd,
        "usd_per_hour": None if usd is None else gpus * usd,
        "price_source": "the price file has none" if price is None
        else price.cited,
    }


def link_doc(pre_dep, dec_dep, link: str) -> dict:
    """The KV link: each side's per-GPU rate (catalogue), and the side that bounds it."""
    from gpuplan.sim.runtime.serving.disagg import link_bytes_per_s

    pre, dec = link_bytes_per_s(pre_dep, link), link_bytes_per_s(dec_dep, link)
    slower = "both sides" if pre == dec else ("prefill" if pre < dec else "decode")
    return {"link": link, "prefill_bytes_per_s": pre, "decode_bytes_per_s": dec,
            "bytes_per_s": min(pre, dec), "bound_by": slower}  # fmt: skip


def pools_summary(pools: dict) -> dict:
    """The pools' GPUs and cost per hour together (None where a GPU has no price)."""
    usd = [p["usd_per_hour"] for p in pools.values()]
    return {"gpus": sum(p["gpus"] for p in pools.values()),
            "usd_per_hour": None if None in usd else sum(usd)}  # fmt: skip


def pool_lines(doc: dict) -> list[str]:
    """The pools as people read them: GPUs, layout and price of each, and the KV link."""
    pools = doc.get("pools")
    if not pools:
        return []
    lines = []
    for name in POOLS:
        p = pools[name]
        cost = "no price" if p["usd_per_hour"] is None else (
            f"${p['usd_per_hour']:,.2f}/h at ${p['usd_per_gpu_hour']:,.2f} per GPU-hour")
        lines.append(f"{name} pool: {p['replicas']} x tp={p['tp']}"
                     + (f" ep={p['ep']}" if p["ep"] > 1 else "")
                     + f" on {p['gpu']} ({p['gpus']} GPUs, {p['kv_tokens_per_replica']:,} KV "
                     f"tokens a replica), {cost}")  # fmt: skip
    link = doc["kv_link"]
    rate = link["bytes_per_s"] / 1e9
    total = doc["pools_total"]
    money = "" if total["usd_per_hour"] is None else f", ${total['usd_per_hour']:,.2f}/h"
    side = link["bound_by"]
    bound = side if side == "both sides" else f"the {side} side"
    lines.append(f"KV transfer over {link['link']}: {rate:g} GB/s per GPU, bound by {bound}; "
                 f"{total['gpus']} GPUs in all{money}")  # fmt: skip
    return lines


def serve_pools(args, workload, common: dict, build):
    """Simulate the two pools: ``build(namespace)`` gives a pool's (deployment, stack,
    scheduler) from the flags. Returns the result, the decode pool's (deployment, stack,
    scheduler) and the pools' part of the document."""
    from gpuplan.sim.runtime.serving.disagg import (
        Disaggregation,
        check_pool_link,
        continuous_prefill,
        simulate_disaggregated,
    )

    pre, dec = pool_args(args)
    pre_dep, _, pre_sched = build(pool_namespace(args, pre))
    dec_dep, dec_stack, dec_sched = build(pool_namespace(args, dec))
    pre_sched = continuous_prefill(pre_sched)  # as serve_disaggregated runs the prefill pool
    check_pool_link(pre_dep, dec_dep, args.kv_link)
    caps = (checked_capacity("prefill", pre_dep, pre_sched),
            checked_capacity("decode", dec_dep, dec_sched))  # fmt: skip
    dis = Disaggregation(prefill_replicas=pre.replicas, decode_replicas=dec.replicas,
                         link=args.kv_link)  # fmt: skip
    same = (pre.gpu, pre.tp, pre.ep) == (dec.gpu, dec.tp, dec.ep)  # one deployment, one step model
    result = simulate_disaggregated(pre_dep, dec_sched, workload, dis, prefill_sched=pre_sched,
                                    decode_dep=None if same else dec_dep, **common)  # fmt: skip
    pools = {"prefill": pool_doc(pre, pre_dep, caps[0]), "decode": pool_doc(dec, dec_dep, caps[1])}
    extra = {"pools": pools, "pools_total": pools_summary(pools),
             "kv_link": link_doc(pre_dep, dec_dep, args.kv_link)}  # fmt: skip
    return result, (dec_dep, dec_stack, dec_sched), extra


def gpus_text(doc: dict) -> str:
    """``8 x h200``; pools of their own: ``8 GPUs (4 x h100-sxm tp=4 prefill, 4 x h200 tp=2
    decode)``."""
    c, pools = doc["config"], doc.get("pools")
    same = pools and all((p["gpu"], p["tp"], p["ep"]) == (c["gpu"], c["tp"], c["ep"])
                         for p in pools.values())  # fmt: skip
    if not pools or same:
        return f"{c['gpus']} x {c['gpu']}"
    parts = [f"{p['gpus']} x {p['gpu']} tp={p['tp']} {name}" for name, p in pools.items()]
    return f"{c['gpus']} GPUs ({', '.join(parts)})"
