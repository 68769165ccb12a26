"""Scenario and job files: every value a user can get wrong is one line naming it, the schema
that ``gpuplan cluster --check`` applies, the example scenario, and what ``gpuplan cluster``
prints about the run it made."""

import json
import math
import time
import warnings
from pathlib import Path

import jsonschema
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplan.cli import main
from gpuplan.errors import GpuplanError
from gpuplan.sim.parallel.strategy import SCHEDULES
from gpuplan.sim.parallel.topology import PRESETS, get_cluster
from gpuplan.sim.runtime.cluster import ClusterConfig, load_trace
from gpuplan.sim.runtime.cluster.checkpoint import MODES, checkpoint_cost, young_interval
from gpuplan.sim.runtime.cluster.checkpoint import POLICIES as CHECKPOINT_POLICIES
from gpuplan.sim.runtime.cluster.failures import DISTRIBUTIONS, load_causes, mtbf_s
from gpuplan.sim.runtime.cluster.placement import PLACEMENTS
from gpuplan.sim.runtime.cluster.scenario import (
    MAX_FAILURES,
    build,
    builtin_scenarios,
    check_scenario,
    load_scenario,
    run_scenario,
    runs,
)
from gpuplan.sim.runtime.cluster.scheduler import POLICIES
from gpuplan.sim.runtime.cluster.schema import definition, load_yaml, problems, schema

ROOT = Path(__file__).parents[1]
EXAMPLE = ROOT / "examples" / "my_cluster.yaml"
BASE = """\
cluster: {preset: dgx-h100, nodes: 4}
horizon_days: 2
failures: {enabled: false}
jobs: [{id: a, gpus: 8, step_time_s: 1.0, steps: 1000}]
"""


def compose(*sections: str) -> str:
    """BASE with its top-level sections replaced by the ones given (one line each)."""
    given = [line for text in sections for line in text.splitlines()]
    keys = {line.split(":")[0] for line in given}
    kept = [line for line in BASE.splitlines() if line.split(":")[0] not in keys]
    return "\n".join(kept + given) + "\n"


def write(tmp_path, text: str, name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def error_of(path) -> str:
    with pytest.raises(GpuplanError) as err:
        doc, p = load_scenario(path)
        for _name, run_doc in runs(doc):
            build(run_doc, p.parent, where=str(p))
    message = str(err.value)
    assert "\n" not in message
    return message


# -- values refused, not coerced ----------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("cluster: {preset: dgx-h100, nodes: 2.5}", "cluster.nodes=2.5 is invalid"),
        ("cluster: {preset: dgx-h100, nodes: abc}", "cluster.nodes='abc' is invalid"),
        ("cluster: {preset: dgx-h100, nodes: .nan}", "cluster.nodes=nan is invalid"),
        ("cluster: {preset: dgx-h100, nodes: .inf}", "cluster.nodes=inf is invalid"),
        ("cluster: {preset: dgx-h100, nodes: true}", "cluster.nodes=True is invalid"),
        ("cluster: {preset: 5, nodes: 4}", "cluster.preset=5 is invalid"),
        ("cluster: {preset: dgx-h10, nodes: 4}", "did you mean dgx-h100?"),
        ("cluster: {preset: dgx-h100, nodes: 4, nodez: 1}", "unknown cluster key 'nodez'"),
        ("cluster: {preset: dgx-h100, nodes: 1000000}", "from 1 to 100,000"),
        ("failures: {enabled: 'no'}", "failures.enabled='no' is invalid: it must be true or false"),
        ("failures: {enabled: 0}", "failures.enabled=0 is invalid"),
        ("failures: {scale: 1e9}", "failures.scale=1000000000.0 is invalid"),
        ("failures: {scale: -1}", "failures.scale=-1 is invalid"),
        ("horizon_days: .nan", "horizon_days=nan is invalid"),
        ("horizon_days: .inf", "horizon_days=inf is invalid"),
        ("horizon_days: 0", "horizon_days=0 is invalid"),
        ("checkpoint: {write_bytes_per_s: .nan}", "checkpoint.write_bytes_per_s=nan is invalid"),
        ("checkpoint: {write_bytes_per_s: '2e12'}", "checkpoint.write_bytes_per_s='2e12'"),
        ("checkpoint: {policy: yung}", "did you mean young?"),
        ("scheduler: {backfill_depth: 2.5}", "scheduler.backfill_depth=2.5"),
        ("seed: -1", "seed=-1 is invalid"),
        ("schedular: {policy: fifo}", "unknown key 'schedular'; did you mean scheduler"),
        ("jobs: [{id: b, gpus: true, step_time_s: 1, steps: 1}]", "jobs[0].gpus=True"),
        ("jobs: [{id: b, gpus: -8, step_time_s: 1, steps: 1}]", "jobs[0].gpus=-8"),
        ("jobs: [{id: b, gpus: 8, step_time_s: 1, steps: 1, priorty: 1}]",
         "unknown jobs[0] key 'priorty'; did you mean priority?"),
        ("jobs: [{id: b, gpus: 8, model: llama3-8b, strategy: {tp: 0}, steps: 1}]",
         "jobs[0].strategy.tp=0 is invalid"),
        ("jobs: [{id: b, gpus: 8, step_time_s: .nan, steps: 1}]", "jobs[0].step_time_s=nan"),
        ("jobs: [{id: b, gpus: 8, step_time_s: 1, steps: .inf}]", "jobs[0].steps=inf"),
        ("jobs: [{id: b, gpus: 8, step_time_s: 1, steps: 1, arrival_s: -5}]",
         "jobs[0].arrival_s=-5"),
        ("jobs: [{id: b, gpus: 8, step_time_s: 1, steps: 1, comm_fraction: 2}]",
         "jobs[0].comm_fraction=2"),
        ("jobs: {id: b}", "jobs={'id': 'b'} is invalid: it must be a list"),
        ("variants: [{name: v, scheduler: {policy: fifo, placment: random}}]",
         "unknown variants[0].scheduler key 'placment'"),
        ("trace: {file: missing.csv}", "trace.file='missing.csv' is invalid: no such file"),
        ("expect: {utilization: high}", "expect.utilization='high' is invalid"),
    ],
)  # fmt: skip
def test_a_bad_value_is_one_line_naming_the_key_and_the_value(tmp_path, text, expected):
    message = error_of(write(tmp_path, compose(text)))
    assert expected in message and "s.yaml" in message


def test_numbers_read_as_yaml_1_2_writes_them_and_booleans_as_yaml_booleans(tmp_path):
    path = write(tmp_path, compose("checkpoint: {write_bytes_per_s: 2e12}",
                                   "failures: {enabled: no}"))  # fmt: skip
    doc, _ = load_scenario(path)
    assert doc["checkpoint"]["write_bytes_per_s"] == 2e12 and doc["failures"]["enabled"] is False
    cfg, _ = build(doc, tmp_path)
    assert cfg.causes == () and cfg.checkpoint.write_bytes_per_s == 2e12


def test_a_section_left_empty_is_a_section_not_given(tmp_path):
    path = write(tmp_path, compose("scheduler:", "failures:", "variants:", "expect:",
                                   "checkpoint:"))  # fmt: skip
    doc, _ = load_scenario(path)
    jsonschema.validate(doc, schema())
    (result,) = run_scenario(path)
    assert result.summary["policy"] == "fifo"  # failures: the default rates, not none
    assert result.summary["checkpoint_policy"] == "young"
    assert "cluster=None is invalid" in error_of(write(tmp_path, "cluster:\n", "c.yaml"))


def test_a_whole_number_written_with_a_point_zero_is_that_number(tmp_path):
    cfg, _ = build(load_scenario(write(tmp_path, BASE.replace("nodes: 4", "nodes: 4.0")))[0],
                   tmp_path)  # fmt: skip
    assert cfg.nodes == 4 and isinstance(cfg.nodes, int)


def test_a_yaml_syntax_error_is_one_line_with_file_line_and_column(tmp_path):
    message = error_of(write(tmp_path, BASE + "scheduler:\n  policy: [fifo\n"))
    assert message.startswith(f"{tmp_path / 's.yaml'}:") and "not valid YAML" in message
    line, column = message.split(":")[1:3]
    assert line.isdigit() and column.isdigit()


def test_a_key_given_twice_is_refused(tmp_path):
    assert "the key 'nodes' is given twice" in error_of(
        write(tmp_path, "cluster: {preset: dgx-h100, nodes: 4, nodes: 8}\n")
    )


@pytest.mark.parametrize(
    ("data", "expected"),
    [(b"\xff\xfe\x00binary", "not UTF-8"), (b"- 1\n- 2\n", "not list"), (b"", "not NoneType"),
     (b"just text", "not str")],
)  # fmt: skip
def test_a_file_that_is_no_scenario_is_one_line(tmp_path, data, expected):
    path = tmp_path / "s.yaml"
    path.write_bytes(data)
    assert expected in error_of(path)


@pytest.mark.parametrize("value", ["9" * 5000, "9" * 401, "[" * 3000 + "]" * 3000])
def test_numbers_too_long_and_nesting_too_deep_are_one_line(tmp_path, value):
    message = error_of(write(tmp_path, f"cluster: {{preset: dgx-h100, nodes: {value}}}\n"))
    assert "s.yaml" in message and len(message) < 300


def test_a_failure_count_no_run_could_finish_is_refused_at_once(tmp_path):
    text = ("cluster: {preset: dgx-h100, nodes: 2048}\nhorizon_days: 54\n"
            "failures: {scale: 1000}\njobs: [{id: a, gpus: 8, step_time_s: 1.0, steps: 10}]\n")  # fmt: skip
    started = time.perf_counter()
    message = error_of(write(tmp_path, text))
    assert time.perf_counter() - started < 2.0
    assert f"more than the {MAX_FAILURES:,}" in message and "failures.scale=1000" in message


def test_weibull_failures_on_a_huge_cluster_are_refused_at_once(tmp_path):
    path = write(tmp_path, compose("cluster: {preset: dgx-h100, nodes: 4, spare_nodes: 100000}",
                                   "failures: {distribution: weibull}"))  # fmt: skip
    started = time.perf_counter()
    assert "random draws, more than 10,000,000" in error_of(path)
    assert time.perf_counter() - started < 2.0


def test_a_run_without_a_horizon_stops_at_ten_years_however_long_its_jobs(tmp_path):
    path = write(tmp_path, "cluster: {preset: dgx-h100, nodes: 4}\n"
                 "jobs: [{id: a, gpus: 8, step_time_s: 1.0, steps: 1.0e15},\n"
                 "       {id: b, gpus: 8, step_time_s: 1.0, steps: 100}]\n")  # fmt: skip
    (result,) = run_scenario(path)
    s = result.summary
    assert s["simulated_s"] == 3650 * 86400.0 and (s["finished"], s["running"]) == (1, 1)
    assert result.conservation["ok"]


def test_a_seed_that_numpy_cannot_take_is_refused():
    with pytest.raises(GpuplanError, match="seed=-3 is invalid"):
        run_scenario("llama3-405b", seed=-3)


def test_a_horizon_that_is_not_finite_is_refused_by_the_config_too():
    for bad in (math.nan, math.inf, -1.0):
        with pytest.raises(GpuplanError, match="horizon_s="):
            ClusterConfig(cluster=get_cluster("dgx-h100"), nodes=4, horizon_s=bad)


# -- job traces ---------------------------------------------------------------------------------
CSV_HEAD = "id,arrival_s,gpus,step_time_s,steps\n"


@pytest.mark.parametrize(
    ("rows", "expected"),
    [("a,0,8,1.0,100\nb,10,-8,1.0,100\n", "t.csv line 3: gpus=-8 is invalid"),
     ("a,0,2.5,1.0,100\n", "t.csv line 2: gpus=2.5 is invalid"),
     ("a,0,eight,1.0,100\n", "gpus='eight' is invalid"),
     ("a,0,8,nan,100\n", "step_time_s=nan is invalid"),
     ("a,-1,8,1.0,100\n", "arrival_s=-1"),
     ("a,0,8,1.0,inf\n", "steps=inf")],
)  # fmt: skip
def test_a_bad_csv_row_is_refused_naming_its_line(tmp_path, rows, expected):
    with pytest.raises(GpuplanError, match="line") as err:
        load_trace(write(tmp_path, CSV_HEAD + rows, "t.csv"))
    assert expected in str(err.value) and "\n" not in str(err.value)


def test_an_unknown_csv_column_is_refused_with_the_nearest_known_one(tmp_path):
    path = write(tmp_path, "id,gpus,step_time_s,steps,priorty\na,8,1.0,100,1\n", "t.csv")
    with pytest.raises(GpuplanError, match="t.csv line 2: unknown key 'priorty'; did you mean priority"):
        load_trace(path)


def test_cpu_rows_are_skipped_and_the_helios_columns_ignored(tmp_path):
    path = write(tmp_path, "job_id,user,vc,gpu_num,cpu_num,state,submit_time,duration,step_time_s\n"
                 "x,u1,vc1,0,4,COMPLETED,0,60,1.0\ny,u2,vc1,8,16,FAILED,30,3600,1.0\n",
                 "helios.csv")  # fmt: skip
    (job,) = load_trace(path)
    assert (job.id, job.gpus, job.duration_s) == ("y", 8, 3600.0)


def test_strategy_columns_of_a_csv_are_read_as_whole_numbers(tmp_path):
    path = write(tmp_path, "id,gpus,model,tp,pp,seq,tokens\nm,16,llama3-8b,2,2,4096,1e9\n",
                 "t.csv")  # fmt: skip
    (job,) = load_trace(path)
    assert (job.strategy.tp, job.strategy.pp, job.strategy.dp) == (2, 2, 4)
    bad = write(tmp_path, "id,gpus,model,tp,seq,tokens\nm,16,llama3-8b,2.5,4096,1e9\n", "b.csv")
    with pytest.raises(GpuplanError, match=r"line 2: strategy\.tp=2\.5 is invalid"):
        load_trace(bad)


def test_a_bad_json_line_names_its_line_and_a_binary_trace_is_one_line(tmp_path):
    good = json.dumps({"id": "a", "gpus": 8, "step_time_s": 1.0, "steps": 10})
    path = write(tmp_path, good + "\n{oops\n", "t.jsonl")
    with pytest.raises(GpuplanError, match="t.jsonl line 2: not valid JSON"):
        load_trace(path)
    path.write_text(good + "\n" + json.dumps({"id": "b", "gpus": True, "steps": 1}) + "\n")
    with pytest.raises(GpuplanError, match="t.jsonl line 2: gpus=True is invalid"):
        load_trace(path)
    path.write_bytes(bytes(range(256)))
    with pytest.raises(GpuplanError, match="not UTF-8"):
        load_trace(path)
    path.write_text('{"gpus": ' + "9" * 5000 + "}\n")
    with pytest.raises(GpuplanError, match="t.jsonl line 1: not valid JSON"):
        load_trace(path)


# -- the schema, --check, the documentation and the example ------------------------------------
def test_the_schema_is_json_schema_and_its_choices_are_the_codes():
    jsonschema.Draft202012Validator.check_schema(schema())
    enum = {name: definition(section)["properties"][key]["enum"]
            for name, (section, key) in {
                "presets": ("cluster", "preset"), "policies": ("scheduler", "policy"),
                "placements": ("scheduler", "placement"),
                "distributions": ("failures", "distribution"),
                "checkpoint": ("checkpoint", "policy"), "modes": ("checkpoint", "mode"),
                "schedules": ("strategy", "schedule")}.items()}  # fmt: skip
    assert enum == {"presets": list(PRESETS), "policies": list(POLICIES),
                    "placements": list(PLACEMENTS), "distributions": list(DISTRIBUTIONS),
                    "checkpoint": list(CHECKPOINT_POLICIES), "modes": list(MODES),
                    "schedules": list(SCHEDULES)}  # fmt: skip


@pytest.mark.parametrize("path", [*builtin_scenarios().values(), EXAMPLE], ids=lambda p: p.stem)
def test_the_shipped_scenarios_and_the_example_meet_the_schema(path):
    jsonschema.validate(load_yaml(path), schema())  # any validator agrees
    assert check_scenario(path) == []


def test_check_lists_every_problem_one_line_each_and_exits_2(tmp_path, capsys):
    path = write(tmp_path, "cluster: {preset: dgx-h10, nodes: 2.5}\nhorizon_days: .nan\n"
                 "jobs: [{gpus: -1, priorty: 2}]\n")  # fmt: skip
    assert main(["cluster", "--check", str(path)]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 5 and all(line.startswith("gpuplan: error: ") for line in lines)
    assert main(["cluster", "--check", str(path), "--json"]) == 2
    doc = json.loads(capsys.readouterr().out)
    assert doc["valid"] is False and len(doc["problems"]) == 5
    assert main(["cluster", "--check", str(write(tmp_path, BASE, "ok.yaml"))]) == 0
    assert "valid" in capsys.readouterr().out


def test_check_builds_a_valid_file_and_reports_what_only_a_build_finds(tmp_path, capsys):
    path = write(tmp_path, BASE.replace("step_time_s: 1.0", "model: llama-9"))
    assert main(["cluster", "--check", str(path)]) == 2
    assert "unknown model 'llama-9'" in capsys.readouterr().err


def test_check_prices_every_job_and_reports_a_strategy_the_model_cannot_take(tmp_path, capsys):
    path = write(tmp_path, compose("jobs: [{id: m, gpus: 16, model: llama3-8b, strategy: {ep: 16}, "
                                   "steps: 10}]"))  # fmt: skip
    assert main(["cluster", "--check", str(path)]) == 2
    err = capsys.readouterr().err
    assert "run 'scenario': ep=16 needs a mixture-of-experts model" in err and err.count("\n") == 1


def test_the_documentation_describes_every_key_of_the_schema():
    text = (ROOT / "docs" / "scenario.md").read_text()
    keys = set(schema()["properties"])
    for name in ("cluster", "scheduler", "failures", "cause_override", "recovery", "checkpoint",
                 "trace", "generate", "job", "strategy"):  # fmt: skip
        keys |= set(definition(name)["properties"])
    assert not [k for k in sorted(keys) if f"`{k}`" not in text]


def test_the_readme_example_runs_as_written(tmp_path, capsys):
    assert "gpuplan cluster examples/my_cluster.yaml --seed 3" in (ROOT / "README.md").read_text()
    jobs = tmp_path / "jobs.csv"
    assert main(["cluster", str(EXAMPLE), "--seed", "3", "--jobs", str(jobs), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in doc["runs"]] == ["my-cluster", "fifo-random", "daly-blocking"]
    assert all(r["conservation"]["ok"] and r["seed"] == 3 for r in doc["runs"])
    import pandas as pd

    assert set(pd.read_csv(jobs)["seed"]) == {3}  # the seed used, not the repeat's index


# -- what the command prints about its run ----------------------------------------------------------
def test_the_checkpoint_interval_is_young_s_optimum_and_is_printed(tmp_path, capsys):
    text = ("cluster: {preset: dgx-h100, nodes: 64}\nhorizon_days: 1\n"
            "checkpoint: {policy: young, write_bytes_per_s: 1.0e11}\n"
            "jobs: [{id: a, gpus: 512, step_time_s: 1.0, steps: 1.0e7, state_bytes: 1.0e11}]\n")  # fmt: skip
    path = write(tmp_path, text)
    assert main(["cluster", str(path), "--json", "--seed", "1"]) == 0
    summary = json.loads(capsys.readouterr().out)["runs"][0]["summary"]
    cfg, _ = build(load_scenario(path)[0], tmp_path)
    causes, _ = load_causes()
    delta = checkpoint_cost(1e11, nodes=64, gpus=512, host_copy_bytes_per_s=1.0,
                            cfg=cfg.checkpoint).blocking_s  # fmt: skip
    expected = young_interval(delta, mtbf_s(causes, gpus=512, nodes=64))
    assert summary["checkpoint_policy"] == "young"
    assert summary["checkpoint_interval_s"] == pytest.approx(expected, rel=1e-9)
    assert main(["cluster", str(path), "--no-progress", "--seed", "1"]) == 0
    out = capsys.readouterr().out
    assert f"{expected / 60:.1f} min (young)" in out


def test_a_run_without_checkpoints_prints_none(tmp_path, capsys):
    path = write(tmp_path, compose("checkpoint: {policy: none}"))
    assert main(["cluster", str(path), "--no-progress"]) == 0
    assert "checkpoint interval (median of jobs)  none\n" in capsys.readouterr().out


def test_list_honours_json(capsys):
    assert main(["cluster", "--list", "--json"]) == 0
    names = [s["name"] for s in json.loads(capsys.readouterr().out)["scenarios"]]
    assert {"llama3-405b", "thousand-gpu"} <= set(names)


def test_the_csv_seed_column_is_the_seed_of_each_repeat(tmp_path):
    jobs = tmp_path / "jobs.csv"
    path = write(tmp_path, BASE)
    assert main(["cluster", str(path), "--seed", "3", "--repeat", "2", "--jobs", str(jobs),
                 "--no-progress"]) == 0  # fmt: skip
    import pandas as pd

    assert sorted(set(pd.read_csv(jobs)["seed"])) == [3, 4]


# -- any value: a scenario or a GpuplanError, never another exception -----------------------------
PATHS = [("cluster", "nodes"), ("cluster", "spare_nodes"), ("cluster", "preset"),
         ("cluster", "nodes_per_leaf"), ("cluster", "oversubscription"), ("horizon_days",),
         ("seed",), ("failures", "enabled"), ("failures", "scale"), ("failures", "distribution"),
         ("failures", "overrides"), ("scheduler", "policy"), ("scheduler", "quantum_s"),
         ("checkpoint", "policy"), ("checkpoint", "interval_s"), ("checkpoint", "write_bytes_per_s"),
         ("recovery", "restart_s"), ("trace", "generate"), ("jobs",), ("on_oversize",),
         ("variants",), ("expect",), ("priorty",)]  # fmt: skip
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**400), 10**400) | st.floats()
    | st.sampled_from(["fifo", "young", "dgx-h100", "1e9", "no", ""]) | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["gpus", "steps", "step_time_s", "tp", "jobs", "load", "name", "x"]),
        inner, max_size=3),
    max_leaves=8,
)  # fmt: skip


@pytest.mark.slow
@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(changes=st.lists(st.tuples(st.sampled_from(PATHS), VALUES), max_size=3))
def test_any_values_give_a_scenario_or_one_gpuplan_error(tmp_path, changes):
    doc = yaml.safe_load(BASE)
    for path, value in changes:
        if len(path) == 1:
            doc[path[0]] = value
            continue
        if not isinstance(doc.get(path[0]), dict):
            doc[path[0]] = {}
        doc[path[0]][path[1]] = value
    file = tmp_path / "h.yaml"
    file.write_text(yaml.safe_dump(doc))
    try:
        loaded, p = load_scenario(file)
        assert jsonschema.Draft202012Validator(schema()).is_valid(_plain(loaded))
        for _, run_doc in runs(loaded):
            build(run_doc, p.parent)
    except GpuplanError as err:
        assert "\n" not in str(err)


def test_what_any_json_schema_validator_refuses_the_loader_refuses_too():
    doc = yaml.safe_load(BASE)
    for bad in ({"nodes": 0}, {"nodes": "4"}, {"preset": "x"}, {"extra": 1}):
        changed = doc | {"cluster": doc["cluster"] | bad}
        assert not jsonschema.Draft202012Validator(schema()).is_valid(changed)
        assert problems(changed)


def _plain(value):
    """``value`` as JSON holds it (no NaN there: the loader refuses it before JSON could)."""
    return json.loads(json.dumps(value))


def test_the_documented_example_is_a_valid_scenario(tmp_path):
    text = (ROOT / "docs" / "scenario.md").read_text()
    block = text.split("```yaml\n", 1)[1].split("```", 1)[0]
    (tmp_path / "my_jobs.csv").write_text((ROOT / "examples" / "my_jobs.csv").read_text())
    assert check_scenario(write(tmp_path, block)) == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [("causes: [{name: x, category: gpu, unit: gpu, scope: node, count: 1e3}]",
      "causes[0]: give rate_per_hour, or count and exposure_hours"),
     ("causes: [{name: x, category: gpu, unit: gpus, scope: node, rate_per_hour: 1}]",
      "causes[0].unit='gpus' is invalid"),
     ("causes: [{name: x, category: gpu, unit: gpu, scope: node, rate_per_hour: .nan}]",
      "causes[0].rate_per_hour=nan"),
     ("{}", "causes is missing"),
     ("- 1", "not list")],
)  # fmt: skip
def test_a_bad_rates_file_is_one_line_naming_the_key(tmp_path, text, expected):
    write(tmp_path, text, "rates.yaml")
    path = write(tmp_path, compose("failures: {rates: rates.yaml}"))
    message = error_of(path)
    assert expected in message and "rates.yaml" in message


def test_a_rates_file_of_yaml_1_2_numbers_reads(tmp_path):
    write(tmp_path, "causes: [{name: x, category: gpu, unit: gpu, scope: node, count: 1e3, "
                    "exposure_hours: 2e9}]\n", "rates.yaml")  # fmt: skip
    cfg, _ = build(load_scenario(write(tmp_path, compose("failures: {rates: rates.yaml}")))[0],
                   tmp_path)  # fmt: skip
    assert cfg.causes[0].rate_per_hour == pytest.approx(1e3 / 2e9)


@pytest.mark.parametrize(
    ("mix", "expected"),
    [("classes: [{gpus: 8, share: 1, median_s: 60, sigma: .inf}]\ntemplates: []",
      "classes[0].sigma=inf"),
     ("classes: [{gpus: 8, share: 1, median_s: 60, sigma: 1}]\n"
      "templates: [{min_gpus: 16, model: llama3-8b, seq: 4096}]", "no template for jobs of 8 GPUs"),
     ("classes: [{gpus: 64, share: 1, median_s: 60, sigma: 1}]\n"
      "templates: [{min_gpus: 1, model: llama3-8b, seq: 4096}]", "no class of the job mix fits 32"),
     ("classes: [{gpus: 8, share: 0, median_s: 60, sigma: 1}]\n"
      "templates: [{min_gpus: 1, model: llama3-8b, seq: 4096}]", "share above 0")],
)  # fmt: skip
def test_a_bad_job_mix_is_one_line(tmp_path, mix, expected):
    write(tmp_path, mix + "\n", "mix.yaml")
    path = write(tmp_path, compose("trace: {generate: {jobs: 10, mix: mix.yaml}}", "jobs: []"))
    assert expected in error_of(path)


@pytest.mark.parametrize(
    "change",
    [{"gpus": True}, {"gpus": 8.0}, {"arrival_s": "0"}, {"arrival_s": math.inf},
     {"steps": math.nan}, {"priority": 1.5}, {"comm_fraction": None, "state_bytes": "big"}],
)  # fmt: skip
def test_a_job_built_in_python_checks_its_types_too(change):
    from gpuplan.sim.runtime.cluster import JobSpec

    fields = {"id": "a", "arrival_s": 0.0, "gpus": 8, "step_time_s": 1.0, "steps": 10.0} | change
    fields = {k: v for k, v in fields.items() if v is not None}
    with pytest.raises(GpuplanError, match=f"job 'a': {next(iter(c for c in change if change[c] is not None))}="):
        JobSpec(**fields)


CELLS = st.sampled_from(["", "8", "-8", "0", "2.5", "nan", "inf", "1e400", "true", "x", '"',
                         "a,b", "llama3-8b", "2020-01-01 00:00:10", "tomorrow", "9" * 5000])
COLUMNS = st.lists(st.sampled_from(["id", "gpus", "gpu_num", "steps", "step_time_s", "submit_time",
                                    "duration", "model", "tp", "seq", "tokens", "user", "zz"]),
                   min_size=1, max_size=6)  # fmt: skip


@pytest.mark.slow
@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(columns=COLUMNS, rows=st.lists(st.lists(CELLS, max_size=7), max_size=4),
       raw=st.text(max_size=40), as_text=st.booleans())  # fmt: skip
def test_any_csv_gives_jobs_or_one_gpuplan_error(tmp_path, columns, rows, raw, as_text):
    text = raw if as_text else ",".join(columns) + "\n" + "\n".join(map(",".join, rows)) + "\n"
    path = write(tmp_path, text, "t.csv")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a warning would be a second, garbled line
        try:
            load_trace(path)
        except GpuplanError as err:
            assert "\n" not in str(err)
