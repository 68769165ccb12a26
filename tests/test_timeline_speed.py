"""The timeline's cost: the same results as before it was made linear (recorded on synthetic
plans in ``data/timeline_golden.json``), the fast trace writer's bytes, and event counts that
grow linearly with the replicas simulated (constant when replicas are alike)."""

import json

import pytest
from timeline_plans import CASES, digest, golden_of, plan

from gpuplan.sim.runtime.timeline import play
from gpuplan.sim.runtime.timeline.result import GpuInfo, StepTimeline
from gpuplan.sim.runtime.timeline.trace import chrome_trace, trace_slices, write_chrome_trace

GOLDEN = json.loads((__import__("pathlib").Path(__file__).parent / "data" /
                     "timeline_golden.json").read_text())  # fmt: skip


def timeline(name: str, replicas: int | None = None, jitter: float | None = None) -> StepTimeline:
    opts, n, factors, jit = CASES[name]
    played = play(plan(**opts), replicas=list(range(n if replicas is None else replicas)),
                  factors=factors, jitter=jit if jitter is None else jitter, seed=7)  # fmt: skip
    gpus = tuple(GpuInfo(gid=g, dp=d, stage=s, ranks=(2 * g, 2 * g + 1)) for g, d, s in played.gpus)
    return StepTimeline(model="synthetic", strategy_label=name, gpus=gpus, slices=played.slices,
                        waits=played.waits, ends=played.ends, links=played.links,
                        world=2 * len(gpus), all_ranks=True, notes=("synthetic",),
                        events=played.events)  # fmt: skip


@pytest.mark.parametrize("name", list(CASES))
def test_the_engine_reproduces_the_step_summary_links_and_trace_it_recorded(name):
    tl, want = timeline(name), GOLDEN[name]
    got = golden_of(tl)
    assert got["step_time_s"] == want["step_time_s"]
    assert got["summary"] == want["summary"]
    assert tl.links == want["links"]
    for detail in ("kernel", "step"):
        # alike replicas are simulated once and copied: the same slices in another order
        assert got[f"trace_{detail}_events_sha256"] == want[f"trace_{detail}_events_sha256"]
        if CASES[name][3]:  # under jitter every replica is simulated: the very same bytes
            assert got[f"trace_{detail}_sha256"] == want[f"trace_{detail}_sha256"]


@pytest.mark.parametrize("detail", ["kernel", "step", "task"])
@pytest.mark.parametrize("every_rank", [True, False])
def test_the_trace_file_holds_the_bytes_of_the_trace_document(tmp_path, detail, every_rank):
    tl = timeline("interleaved-zero1")
    path = tmp_path / "t.json"
    n = write_chrome_trace(tl, path, detail=detail, every_rank=every_rank)
    doc = chrome_trace(tl, detail=detail, every_rank=every_rank)
    assert digest(path.read_text()) == digest(json.dumps(doc, separators=(",", ":")))
    assert n == sum(e["ph"] == "X" for e in doc["traceEvents"])
    assert n == trace_slices(tl, detail, every_rank)


def test_a_task_trace_draws_each_task_once_spanning_its_kernels():
    tl = timeline("1f1b-fsdp")
    doc = chrome_trace(tl, detail="task", every_rank=False)
    tasks = [e for e in doc["traceEvents"] if e.get("cat") == "task"]
    opts = CASES["1f1b-fsdp"][0]
    per_gpu = 2 * opts["m"] * opts["v"] + 1  # a forward and a backward per micro-batch, the optimizer
    assert len(tasks) == per_gpu * len(tl.gpus)
    assert not any(e.get("cat") in ("tp", "ep", "cp") for e in doc["traceEvents"])
    g0 = [e for e in tasks if e["pid"] == 0]
    assert all(a["ts"] + a["dur"] <= b["ts"] + 1e-3 for a, b in zip(g0, g0[1:], strict=False))


def test_events_grow_linearly_with_the_replicas_and_not_at_all_when_they_are_alike():
    counts = {n: timeline("interleaved-zero1", replicas=n) for n in (2, 4, 8)}
    events = {n: tl.events for n, tl in counts.items()}
    slices = {n: len(tl.slices) for n, tl in counts.items()}
    # jitter moves where transfers meet on a link (a few wake-ups more or less): within 1%
    assert events[8] / events[4] == pytest.approx(2, rel=0.01)
    assert events[4] / events[2] == pytest.approx(2, rel=0.01)
    assert slices[8] == 2 * slices[4] == 4 * slices[2]
    alike = {n: timeline("interleaved-zero1", replicas=n, jitter=0.0) for n in (2, 8)}
    assert alike[8].events == alike[2].events  # the straggler's replica and one other
    assert len(alike[8].slices) == 4 * len(alike[2].slices)
