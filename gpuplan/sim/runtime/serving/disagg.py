"""Prefill/decode disaggregation: separate prefill and decode pools with a KV-cache transfer.

As DistServe (Zhong et al., OSDI 2024) and Splitwise (Patel et al., ISCA 2024) run it: a
request's prompt is prefilled on a prefill replica, which emits the first token (TTFT ends
there); its KV cache then travels to a decode replica, which admits it straight into decoding
(no prefill) and emits the rest. Assumptions, named:

- each GPU of the prefill replica sends its own shard of the cache over its own link, so the
  transfer takes the per-GPU cache bytes over one link: the scale-out NIC (``scaleout``, pools
  on different nodes, as Splitwise over InfiniBand) or the scale-up link (``scaleup``, pools in
  one NVLink domain, as DistServe places them when it can), at the collective model's
  achievable fraction plus one step's latency (``hwmodels.collectives``);
- the pools may differ (``decode_dep``: another GPU type, TP, EP or format, as Splitwise's
  mixed H100/A100 clusters): each side moves its own per-GPU shard over its own link and the
  slower side bounds the transfer; pools of different GPU types are different nodes, so they
  talk over the scale-out NICs only (``check_pool_link``);
- a prefill replica's transfers go one at a time over its link (first come, first served), and
  its blocks are freed when the prefill ends (the cache is staged out of the block pool);
- routers: least outstanding requests into each pool, by default.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import simpy

from gpuplan.errors import GpuplanError, check_choice, check_positive
from gpuplan.sim.runtime.serving.engine import (
    Replica,
    ServingResult,
    arrivals,
    make_replica,
    watch_replicas,
)
from gpuplan.sim.runtime.serving.kv_cache import kv_bytes_per_sequence, kv_capacity
from gpuplan.sim.runtime.serving.metrics import Timeline, conservation, request_columns, summarize
from gpuplan.sim.runtime.serving.progress import Progress, arrival_watched, watched_progress
from gpuplan.sim.runtime.serving.request_table import RequestTable
from gpuplan.sim.runtime.serving.router import Router
from gpuplan.sim.runtime.serving.step_model import StepModel, check_servable
from gpuplan.sim.runtime.serving.vision import cross_attention_step, encoder_summary, prepare_images

LINKS = ("scaleout", "scaleup")


@dataclass(frozen=True, slots=True, kw_only=True)
class Disaggregation:
    prefill_replicas: int
    decode_replicas: int
    link: str = "scaleout"
    prefill_router: str = "least_outstanding"
    decode_router: str = "least_outstanding"

    def __post_init__(self) -> None:
        check_positive("prefill_replicas", self.prefill_replicas)
        check_positive("decode_replicas", self.decode_replicas)
        check_choice("kv_link", self.link, LINKS)

    @property
    def replicas(self) -> int:
        return self.prefill_replicas + self.decode_replicas


def link_bytes_per_s(dep, link: str) -> float:
    """One GPU's link of the kind named, one direction."""
    acc = dep.acc
    value = acc.scaleout_bytes_per_s if link == "scaleout" else acc.scaleup_bytes_per_s
    if not value:
        raise GpuplanError(
            f"{acc.key} has no {link} link bandwidth in the catalogue: choose the other --kv-link"
        )
    return value


def check_pool_link(dep, decode_dep, link: str) -> None:
    """Pools of different GPU types sit on different nodes: no scale-up link joins them."""
    if link == "scaleup" and dep.acc.key != decode_dep.acc.key:
        raise GpuplanError(
            f"kv_link='scaleup' is invalid with prefill on {dep.acc.key} and decode on "
            f"{decode_dep.acc.key}: different GPU types are different nodes; use --kv-link scaleout"
        )


def _side_s(dep, prompt_tokens: int, link: str) -> float:
    """One side's share of a transfer: its per-GPU cache bytes (under pipeline parallelism, of
    its largest stage's blocks) over its own link at the achievable fraction."""
    per_gpu = kv_bytes_per_sequence(dep.model, prompt_tokens, tp=dep.tp, kv_dtype=dep.kv_dtype)
    if dep.pp > 1:
        per_gpu *= max(st.n_layers for st in dep.stages) / dep.model.n_layers
    return per_gpu / (link_bytes_per_s(dep, link) * dep.eff.collective_bw_fraction)


def kv_transfer_s(dep, prompt_tokens: int, link: str, decode_dep=None) -> float:
    """Time to move one request's KV cache of ``prompt_tokens`` tokens between the pools (each
    GPU sends its own share at once); with ``decode_dep``, the receiving pool's GPUs take their
    own shares over their own links, and the slower side bounds the transfer."""
    sides = (dep,) if decode_dep is None or decode_dep is dep else (dep, decode_dep)
    fixed_s = max(d.eff.collective_launch_s + d.eff.collective_latency_s for d in sides)
    return fixed_s + max(_side_s(d, prompt_tokens, link) for d in sides)


class _Links:
    """Each prefill replica's outgoing link: busy until a time, first come first served."""

    def __init__(self, env, deps, link: str, n: int, on_arrival):
        self.env, self.deps, self.link = env, deps, link
        self.free_at = [0.0] * n
        self.on_arrival = on_arrival

    def send(self, replica: int, rid: int, table: RequestTable, now_s: float) -> None:
        start = max(now_s, self.free_at[replica])
        done = start + kv_transfer_s(self.deps[0], table.cached[rid], self.link, self.deps[1])
        self.free_at[replica] = done
        table.remote[rid] = True
        event = self.env.timeout(done - now_s)
        event.callbacks.append(lambda _event: self.on_arrival(rid))


def simulate_disaggregated(
    dep,
    sched,
    workload,
    dis: Disaggregation,
    *,
    prefill_sched=None,
    horizon_s: float | None = None,
    timeline: bool = True,
    progress: bool = False,
    slo_ttft_s: float | None = None,
    slo_tpot_s: float | None = None,
    step: StepModel | None = None,
    watch=None,
    decode_dep=None,
    decode_step: StepModel | None = None,
) -> ServingResult:
    """Serve ``workload`` with a prefill pool and a decode pool (``sched`` rules the decode
    replicas; ``prefill_sched``, default ``sched``, the prefill replicas' limits; ``watch``: as
    ``engine.simulate``'s). ``decode_dep`` (default ``dep``): the decode pool's replica, which
    may be another GPU type or parallelism, priced by ``decode_step``."""
    if sched.policy in ("static", "dynamic"):
        raise GpuplanError(
            f"policy={sched.policy!r} cannot run disaggregated: decode replicas admit requests "
            "mid-batch; choose continuous or chunked"
        )
    started = time.perf_counter()
    workload = prepare_images(dep, workload)  # a VLM's image tokens and encoder, if any
    env, table = simpy.Environment(), RequestTable(workload)
    pre_sched = prefill_sched or sched
    decode_dep = decode_dep or dep
    check_pool_link(dep, decode_dep, dis.link)
    step, decode_step = _step_models((dep, decode_dep), (pre_sched, sched), (step, decode_step),
                                     workload)  # fmt: skip
    line = Timeline(timeline)
    bar = watched_progress(workload.n, progress, watch, table)
    pre, dec = _pools(env, table, (dep, decode_dep), (pre_sched, sched), (step, decode_step),
                      line, dis)  # fmt: skip
    dispatch = _routed(env, table, (dep, decode_dep), dis, pre, dec, bar)
    env.process(arrivals(env, table, arrival_watched(dispatch, watch, table, env)))
    env.run(until=horizon_s)
    bar.close()
    frame = request_columns(table, end_s=env.now)
    summary = summarize(frame, slo_ttft_s=slo_ttft_s, slo_tpot_s=slo_tpot_s)
    summary["conservation"] = conservation(frame, table, [r.state for r in pre + dec])
    if workload.encoder_s is not None:
        summary["vision"] = encoder_summary(workload, dep)
    return ServingResult(
        request_columns=frame,
        timeline_columns=line.columns(),
        summary=summary,
        capacity=kv_capacity(decode_dep, sched),
        end_s=env.now,
        wall_s=time.perf_counter() - started,
    )


def _step_models(deps, scheds, steps, workload) -> tuple[StepModel, StepModel]:
    """Each pool's step model (given, or made for the larger token budget); the decode pool's is
    the prefill pool's when they are one deployment."""
    (dep, decode_dep), (pre_sched, sched), (step, decode_step) = deps, scheds, steps
    check_servable(dep)
    check_servable(decode_dep)
    budget = max(pre_sched.batched_tokens(dep.model) or 0, sched.batched_tokens(dep.model) or 0)
    tokens = max(budget, sched.max_seqs)
    step = step or StepModel(dep, max_tokens=tokens)
    step = cross_attention_step(step, dep, workload, disaggregated=True)  # refused with images
    if decode_dep is dep:
        return step, step
    return step, decode_step or StepModel(decode_dep, max_tokens=tokens)


def continuous_prefill(sched):
    """The prefill pool's scheduler as ``serve`` and ``serve plan`` run it: ``sched``'s limits
    under continuous batching."""
    return replace(sched, policy="continuous")


def serve_disaggregated(dep, sched, workload, dis: Disaggregation, **kw) -> ServingResult:
    """``simulate_disaggregated`` with the prefill pool on ``continuous_prefill(sched)`` (the
    decode pool on ``sched``); ``kw`` as ``simulate_disaggregated``'s."""
    pre = continuous_prefill(sched)
    return simulate_disaggregated(dep, sched, workload, dis, prefill_sched=pre, **kw)


def _pools(env, table: RequestTable, deps, scheds, steps, line: Timeline,
           dis: Disaggregation) -> tuple[list[Replica], list[Replica]]:  # fmt: skip
    """The prefill replicas (``deps``', ``scheds``' and ``steps``' first, prefill only) and the
    decode replicas (their second), numbered in that order."""
    (pre_dep, dec_dep), (pre_sched, sched), (pre_step, dec_step) = deps, scheds, steps
    pre = [
        make_replica(env, i, table, pre_dep, pre_sched, pre_step, line, prefill_only=True)
        for i in range(dis.prefill_replicas)
    ]
    dec = [
        make_replica(env, dis.prefill_replicas + j, table, dec_dep, sched, dec_step, line)
        for j in range(dis.decode_replicas)
    ]
    return pre, dec


def _routed(env, table: RequestTable, deps, dis: Disaggregation, pre: list[Replica],
            dec: list[Replica], bar: Progress):  # fmt: skip
    """The pools wired together: a prefill's cache sent to a decode replica its router picks,
    every replica watched by ``bar``; returns the dispatch of an arrival to a prefill replica."""
    to_decode = Router(dis.decode_router, len(dec))

    def decode_arrival(rid: int) -> None:
        loads = [to_decode.load_of(r.state) for r in dec] if to_decode.needs_load else ()
        j = to_decode.pick(loads)
        table.decode_replica[rid] = dec[j].state.index
        dec[j].offer(rid)

    links = _Links(env, deps, dis.link, len(pre), decode_arrival)
    for i, rep in enumerate(pre):
        rep.state.handoff = lambda rid, at, i=i: links.send(i, rid, table, at)
    watch_replicas(pre + dec, bar)
    to_prefill = Router(dis.prefill_router, len(pre))

    def dispatch(rid: int) -> None:
        loads = [to_prefill.load_of(r.state) for r in pre] if to_prefill.needs_load else ()
        i = to_prefill.pick(loads)
        table.replica[rid] = i
        pre[i].offer(rid)

    return dispatch
