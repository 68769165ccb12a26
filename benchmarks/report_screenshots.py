"""Render every kind of report in headless Chromium and check that what a reader sees is there.

For ``gpuplan report train``, ``serve`` and ``cluster``: write the HTML, screenshot its first
page in Chromium (Debian's ``chromium`` package: ``apt-get install chromium``), and check the
page holds its tables and its embedded figures and that the screenshot is not blank (a share of
dark pixels: text, rules, bars). With ``--out DIR`` the first-page screenshots are kept there
(``docs/img/`` holds the ones the docs show).

    python3 benchmarks/report_screenshots.py [--out docs/img]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from html.parser import HTMLParser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

REPORTS = {
    "train": ["report", "train", "--model", "llama3-70b", "--gpu", "h100-sxm", "--gpus", "1024",
              "--tp", "8", "--pp", "4", "--global-batch", "1024", "--seq", "4096",
              "--tokens", "15e12", "--electricity-price", "0.12"],
    "serve": ["report", "serve", "--model", "llama3-8b", "--gpu", "h200", "--stack", "vllm",
              "--rate", "5", "--prompt-tokens", "1000", "--output-tokens", "200",
              "--requests", "300", "--electricity-price", "0.12"],
    "cluster": ["report", "cluster", "thousand-gpu", "--no-progress", "--electricity-price", "0.12"],
}  # fmt: skip


class Counts(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tables = self.images = self.cells = 0

    def handle_starttag(self, tag, attrs):
        self.tables += tag == "table"
        self.images += tag == "img" and dict(attrs).get("src", "").startswith("data:image/png")
        self.cells += tag == "td"


def dark_share(png: Path) -> float:
    from matplotlib.image import imread

    pixels = imread(png)[..., :3]
    return float((pixels.mean(axis=2) < 0.6).mean())


def check(kind: str, argv: list[str], work: Path, chromium: str, out: Path | None) -> dict:
    from gpuplan.cli import main

    html = work / f"{kind}.html"
    t0 = time.perf_counter()
    assert main([*argv, "--out", str(html)]) == 0, kind
    counts = Counts()
    counts.feed(html.read_text())
    shot = (out or work) / f"report_{kind}_first_page.png"
    subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--screenshot={shot}", "--window-size=1100,1100", html.as_uri()],
                   check=True, capture_output=True, timeout=120)  # fmt: skip
    dark = dark_share(shot)
    ok = counts.tables >= 3 and counts.images >= 1 and counts.cells >= 10 and 0.005 < dark < 0.6
    return {"kind": kind, "tables": counts.tables, "figures": counts.images, "cells": counts.cells,
            "dark_share": dark, "ok": ok, "seconds": time.perf_counter() - t0, "shot": str(shot)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=None, help="keep the screenshots in this folder")
    args = ap.parse_args(argv)
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        print("chromium is not installed (Debian: apt-get install chromium)", file=sys.stderr)
        return 2
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        rows = [check(k, a, Path(tmp), chromium, args.out) for k, a in REPORTS.items()]
    for r in rows:
        print(f"{r['kind']:8s} tables {r['tables']:2d}  figures {r['figures']:2d}  cells "
              f"{r['cells']:4d}  dark pixels {100 * r['dark_share']:5.1f}%  "
              f"{'ok' if r['ok'] else 'EMPTY'}  ({r['seconds']:.1f} s)  {r['shot'] if args.out else ''}")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
