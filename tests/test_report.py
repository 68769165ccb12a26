"""gpuplan report, as a person sees it: the page parses, its figures are embedded, the command's
own headline numbers are on it, it renders to a non-blank page, a bad --out leaves nothing."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from html.parser import HTMLParser

import pytest
from tiny_cluster import TINY_SCENARIO

from gpuplan.cli import main
from gpuplan.report.build import band_section, banded, fmt
from gpuplan.report.first_page import kwh
from gpuplan.tables import format_value

TRAIN = ["--model", "llama3-8b", "--gpus", "8", "--tp", "2", "--global-batch", "16", "--seq",
         "2048", "--tokens", "1e10"]  # fmt: skip
SERVE = ["--model", "llama3-8b", "--gpu", "h200", "--replicas", "2", "--rate", "20",
         "--prompt-tokens", "512", "--output-tokens", "64", "--requests", "40"]  # fmt: skip
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


class Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.images, self.links, self.scripts, self.text = [], [], 0, []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "img":
            self.images.append(a.get("src", ""))
        if tag == "script":
            self.scripts += 1
        if tag in ("link", "a") and a.get("href"):
            self.links.append(a["href"])

    def handle_data(self, data):
        self.text.append(data)


def _doc(capsys, argv) -> dict:
    capsys.readouterr()  # what ran before
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


@pytest.fixture(scope="module")
def train_html(tmp_path_factory):
    path = tmp_path_factory.mktemp("report") / "train.html"
    assert main(["report", "train", *TRAIN, "--electricity-price", "0.12", "--out",
                 str(path)]) == 0  # fmt: skip
    return path


@pytest.mark.slow
def test_train_report_embeds_its_figures_and_shows_the_headline(train_html, capsys):
    page = Page()
    page.feed(train_html.read_text())
    assert page.scripts == 0 and page.links == []  # nothing to fetch: opens offline
    assert len(page.images) >= 3  # by layer, by operator class, the diagnosis
    for src in page.images:
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
    text = " ".join(page.text)
    doc = _doc(capsys, ["train", *TRAIN, "--json"])
    b = doc["budget"]
    for shown in (format_value("step_time_s", doc["step_time_s"]), f"{100 * doc['mfu']:.1f}%",
                  f"{doc['tokens_per_s']:,.0f}", f"${b['cost_usd']:,.0f}",
                  f"{b['energy_kwh']:,.0f} kWh", fmt("cost_usd", b["energy_kwh"] * 0.12),
                  f"{b['gpu_hours']:,.0f} GPU-hours", "2026-03-17"):  # fmt: skip
        assert shown in text, shown
    for key in ("step_time_s", "cost_usd"):
        band = doc.get("error_band", {}).get(key)  # the band the command prints, else none
        assert (f"({fmt(key, band[0])}-{fmt(key, band[1])})" if band else "(no band)") in text
    diag = _doc(capsys, ["diagnose", "train", *TRAIN, "--json"])
    for r in diag["layers"]:
        assert r["command"] in text


@pytest.mark.slow
def test_train_report_renders_in_chromium_to_a_page_that_is_not_blank(train_html, tmp_path):
    if not shutil.which(CHROMIUM):
        pytest.skip("chromium is not installed")
    shot = tmp_path / "shot.png"
    subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                    f"--screenshot={shot}", "--window-size=1200,1600",
                    train_html.as_uri()], check=True, capture_output=True, timeout=120)  # fmt: skip
    from matplotlib.image import imread

    pixels = imread(shot)[..., :3]
    dark = (pixels.mean(axis=2) < 0.6).mean()  # text, table rules, bars
    assert 0.005 < dark < 0.6


@pytest.mark.slow
def test_serve_report_in_markdown_is_the_same_bytes_twice(tmp_path, capsys):
    a, b = tmp_path / "a.md", tmp_path / "b.md"
    for path in (a, b):
        assert main(["report", "serve", *SERVE, "--out", str(path)]) == 0
    assert a.read_bytes() == b.read_bytes()
    text = a.read_text()
    assert text.count("](data:image/png;base64,") >= 2
    doc = _doc(capsys, ["serve", *SERVE, "--json"])
    assert format_value("e2e_s", doc["e2e_s"]["mean"]) in text
    assert "request rate" in text and "no band" not in text  # every headline latency has one
    lo, hi = doc["error_band"]["e2e_mean_s"]
    assert f"{format_value('e2e_s', lo)}-{format_value('e2e_s', hi)}" in text


def test_out_in_a_missing_folder_is_one_line_and_leaves_no_file(tmp_path, capsys):
    out = tmp_path / "missing" / "r.html"
    assert main(["report", "train", *TRAIN, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--out" in err and "does not exist" in err
    assert list(tmp_path.iterdir()) == []


def test_bad_extension_is_refused_before_any_work(tmp_path, capsys):
    assert main(["report", "train", *TRAIN, "--out", str(tmp_path / "r.pdf")]) == 2
    assert ".html" in capsys.readouterr().err and list(tmp_path.iterdir()) == []


def test_a_band_is_rendered_where_the_document_has_one():
    doc = {"error_band": {"step_time_s": [0.54, 0.61]}}
    assert banded(doc, "step_time_s", 0.577) == "577 ms (540 ms-610 ms)"
    assert banded({}, "step_time_s", 0.577) == "577 ms (no band)"
    assert "no band" in band_section({}).paragraphs[0]
    assert band_section(doc).tables[0].rows == (("step time", "540 ms to 610 ms"),)


@pytest.mark.slow
def test_cluster_report_shows_each_run_and_its_energy(tmp_path, capsys):
    scenario, out = tmp_path / "tiny.yaml", tmp_path / "c.html"
    scenario.write_text(TINY_SCENARIO)
    assert main(["report", "cluster", str(scenario), "--no-progress", "--electricity-price",
                 "0.1", "--out", str(out)]) == 0  # fmt: skip
    page = Page()
    page.feed(out.read_text())
    assert page.images and all(s.startswith("data:image/png;base64,") for s in page.images)
    doc = _doc(capsys, ["cluster", str(scenario), "--no-progress", "--json"])
    text = " ".join(page.text)
    for run in doc["runs"]:
        assert run["name"] in text
    assert kwh(doc["runs"][0]["summary"]["energy_kwh"]) in text
    # the first page: the question, the answer, costs, no band (said), the changes; costs and a
    # sensitivity table of three priced rows
    assert "How much of a" in text and "of GPU time allocated" in text and "no band" in text
    assert "Cost per run" in text and "electricity price $" in text


def test_a_document_other_than_one_setup_is_refused(tmp_path, capsys):
    assert main(["report", "cluster", "tiny", "--list", "--out", str(tmp_path / "r.html")]) == 2
    assert "drop --list" in capsys.readouterr().err and list(tmp_path.iterdir()) == []


def test_the_report_has_a_table_per_measured_stack(tmp_path):
    import json

    from gpuplan.tables import render_table
    from gpuplan.validate.report import stack_section

    (tmp_path / "camp").mkdir()
    (tmp_path / "h200").mkdir()
    runs = [{"folder": "h200", "device": "h200", "host": "reference"}]
    (tmp_path / "runs.json").write_text(json.dumps({"runs": runs, "stack_runs": [
        {"folder": "camp", "device": "h200"}]}))
    (tmp_path / "camp" / "fit.json").write_text(json.dumps({"fit_share": 0.7, "held_out": [
        {"stack": "pytorch", "kind": "gemm", "records": 3, "fit_median_pct": 5.0},
        {"stack": "hf-transformers", "kind": "prefill_step", "records": 2,
         "fit_median_pct": 9.0}]}))
    text = stack_section(tmp_path, render_table)
    assert "### stack `pytorch`" in text and "### stack `hf-transformers`" in text
    assert "held-out 30%" in text
