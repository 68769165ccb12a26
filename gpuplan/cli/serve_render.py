"""The printed ``gpuplan serve`` result: the setup, KV cache and request counts, the features in
use (stack, prefix cache, speculation, images), the latency table, throughput and goodput."""

from __future__ import annotations

from gpuplan.cli.calibration import efficiency_line
from gpuplan.cli.serve_pools import gpus_text, pool_lines
from gpuplan.tables import band_text, format_banded, format_seconds, format_value, render_table
from gpuplan.validate.bands import documents as bands


def defaults_line(defaults: list[str]) -> str:
    return "defaults in force (not given): " + (", ".join(defaults) or "none")


def render_serve(doc: dict) -> str:
    """The simulation's document as people read it."""
    lines = saturation_lines(doc) + _setup_lines(doc) + pool_lines(doc) + _feature_lines(doc)
    lines.append("")
    lines += _latency_lines(doc)
    lines.append(efficiency_line(doc["config"]["efficiency_source"]))
    return "\n".join(lines)


def saturation_lines(doc: dict) -> list[str]:
    """A saturated run's first line (``serving.load``): the load offered, what the deployment
    sustains, the queue's growth; nothing for a run that kept up."""
    if not doc.get("saturated"):
        return []
    band = doc.get("error_band", {}).get("sustainable_requests_per_s")
    sustained = format_banded("", doc["sustainable_requests_per_s"], band, lambda v: f"{v:.4g}")
    return [f"SATURATED: {doc['offered_requests_per_s']:.4g} requests/s offered, about "
            f"{sustained} sustained; the waiting queue grows {doc['queue_growth_per_s']:.3g} "
            "requests/s, so the latencies below grow with the run's length and no cost per "
            "token holds at this load (offer less, or add replicas)"]


def _setup_lines(doc: dict) -> list[str]:
    """The layout, the defaults in force, the KV cache, the requests' fate and conservation."""
    c, kv = doc["config"], doc["kv_cache"]
    layout = (
        f"{c['replicas']} replica(s)"
        if not c["disaggregate"]
        else (f"disaggregated {c['disaggregate']} (prefill:decode)")
    )
    return [
        f"{c['model']} on {gpus_text(doc)}: {layout}, tp={c['tp']}, "
        + (f"pp={c['pp']} (blocks {','.join(map(str, c['pp_layers']))}), " if c.get("pp", 1) > 1 else "")
        + (f"ep={c['ep']}, " if c.get("ep", 1) > 1 else "")
        + (f"attention data-parallel over {c['ep_groups']} group(s) of ep={c['ep']}, "
           if c.get("dp_attention") else "")
        + f"{c['weight_dtype']} weights"
        + (f" (routed experts {c['expert_weight_dtype']})" if c.get("expert_weight_dtype") else "")
        + f", {c['kv_dtype']} KV cache, {c['policy']} batching "
        f"(max {c['max_seqs']} sequences)",
        defaults_line(c.get("defaults", [])),
        *([c["weight_path"]] if c.get("weight_path") else []),
        f"KV cache per replica: {_blocks_text(kv)} "
        f"({kv['tokens']:,} tokens, {format_value('bytes', kv['kv_bytes_per_gpu'])} per GPU); "
        f"weights {format_value('bytes', kv['weights_bytes_per_gpu'])} per GPU",
        f"{c['requests']:,} requests {_offered(c)}: {doc['finished']:,} finished, "
        f"{doc['rejected']:,} rejected, {doc['in_flight']:,} in flight, "
        f"{doc['preemptions']:,} preemptions; simulated {format_seconds(doc['simulated_s'])}"
        + (f" in {format_seconds(doc['timing']['wall_s'])}" if "timing" in doc else ""),
        _render_conservation(doc["conservation"]),
    ]


def _blocks_text(kv: dict) -> str:
    """The pool's blocks; one layer's blocks where windowed layers page the cache per layer."""
    units = kv.get("layer_blocks_per_block", 1)
    if units == 1:
        return f"{kv['blocks']:,} blocks of {kv['block_tokens']} tokens"
    return (f"{kv['blocks']:,} one-layer blocks of {kv['block_tokens']} tokens, "
            f"{units} to a block in every layer")


def _feature_lines(doc: dict) -> list[str]:
    """The stack, and the prefix cache, speculative decoding and images where they are used."""
    c, lines = doc["config"], []
    if c.get("stack"):
        lines.append(c["stack"]["line"])
    if doc.get("prefix_cache"):
        pc = doc["prefix_cache"]
        lines.append(f"prefix cache: {pc['saved_prefill_tokens']:,} prompt tokens found cached "
                     f"({100 * pc['hit_rate']:.1f}% of prompt tokens; {pc['requests_hit']:,} "
                     "requests hit)")
    if doc.get("speculative"):
        sp = doc["speculative"]
        drafter = f"draft model {sp['draft_model']}" if sp["draft_model"] else sp["method"]
        rates = sp["accept_rate_per_position"]
        acceptance = f"{rates[0]:g}" if len(set(rates)) == 1 else ",".join(f"{r:.3g}" for r in rates)
        if sp.get("accept_rate_source", "given") != "given":
            acceptance += f" by position, from {sp['accept_rate_source']}"
        lines.append(f"speculative decoding ({drafter}, {sp['spec_tokens']} tokens proposed a "
                     f"step, acceptance {acceptance}): "
                     f"{sp['mean_accepted_tokens_per_step']:.3g} tokens a sequence per step "
                     f"(expected {sp['expected_tokens_per_step']:.3g}); drafting "
                     f"{100 * sp['draft_cost_share']:.1f}% of the speculative steps' time")
    if doc.get("vision"):
        v = doc["vision"]
        lines.append(f"images: {v['images']:,} on {v['requests_with_images']:,} requests, "
                     f"{v['image_tokens_mean']:,.0f} image tokens a request ("
                     + ("in its prompt" if v.get("style", "inline") == "inline"
                        else "cross-attention keys and values") + "); "
                     f"encoder {format_seconds(v['encoder_s_mean'])} a request")
    return lines


def _latency_lines(doc: dict) -> list[str]:
    """The TTFT, TPOT and end-to-end table, throughput, the error band and goodput."""
    band = doc.get("error_band", {})
    rows = [{"metric": m, **{k: format_banded("_s", v, band.get(bands.latency_key(m, k)))
                             for k, v in doc[m].items()}} for m in ("ttft_s", "tpot_s", "e2e_s")]
    cols = ["metric", "mean", "p50", "p90", "p99"]
    lines = [render_table(rows, cols)]
    tps = format_banded("", doc["output_tokens_per_s"], band.get("output_tokens_per_s"),
                        lambda v: f"{v:,.1f}")  # fmt: skip
    rps = format_banded("", doc["requests_per_s"], band.get("requests_per_s"), lambda v: f"{v:.4g}")
    lines += [
        "",
        f"throughput: {tps} output tokens/s (first arrival to last "
        f"finish), {rps} requests/s ({_rate_window(doc)})" + _offered_note(doc),
    ]
    if text := band_text(doc):
        lines.append(f"band p10-p90: {text}")
    if "goodput_requests_per_s" in doc:
        lines.append(
            f"goodput: {doc['goodput_requests_per_s']:.4g} requests/s within "
            f"the SLO ({100 * doc['slo_attainment']:.1f}% of finished requests)"
        )
    return lines


def _offered(c: dict) -> str:
    rate = c["rate_per_s"]
    return "at the trace's own arrival times" if rate is None else f"at {rate:g}/s"


def _offered_note(doc: dict) -> str:
    """What was offered, beside the served rates (none for an offline run)."""
    if doc.get("offered_requests_per_s") is None:
        return ""
    return (f"; offered {doc['offered_requests_per_s']:.4g} requests/s, "
            f"{doc['offered_output_tokens_per_s']:,.1f} output tokens/s")


def _rate_window(doc: dict) -> str:
    if doc.get("arrival_window_s"):
        return f"finished within the {format_seconds(doc['arrival_window_s'])} arrival window"
    return "all arrived at once: over the whole run"


def _render_conservation(c: dict) -> str:
    parts = [f"{c[k]:,} {k.replace('_', ' ')}" for k in ("finished", "running", "queued",
             "rejected", "transferring", "not_arrived") if c[k] or k in ("finished", "rejected")]  # fmt: skip
    verdict = "ok" if c.get("ok") else "FAILED"
    return f"conservation checks: {c['requests']:,} requests = {' + '.join(parts)}: {verdict}"
