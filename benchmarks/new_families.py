"""Whole Hugging Face models of families no fit has read, priced as a user gets them:
``python3 benchmarks/new_families.py [FOLDER ...] [--json FILE]``.

The records of the stack campaign's ``families`` part (``data/families_h100``,
``data/families_h200``: prefill, decode with DynamicCache and StaticCache, training steps of
Qwen3, Qwen3-MoE, Gemma 2, Gemma 3, Phi-3/4, gpt-oss, OLMo 2, GLM-4.5 and hybrids, eager
``hf-transformers``, random weights) are held out by construction: no fit reads these folders.
Each record's model is read from the config it was built from (``params.hf_config``) by
``gpuplan.workloads.hf_config`` (what ``gpuplan models --hf-config`` reads) and priced by
``gpuplan.validate.record_prediction.predict_record``, the path the leave-one-device-out tables
of ``benchmarks/generalization.py`` take. Nothing is fitted here.

Printed per device, family (the config's ``model_type``) and kind (``prefill``,
``decode-dynamic``, ``decode-static``, ``train``): records, median and p90 absolute % error of
``time_s`` and the median signed one (+: gpuplan slow). A family the reader cannot read yet is
printed as ``unread`` with the reader's reason; records marked ``impl: torch-fallback`` (hybrid
models run through transformers' pure-torch loops, no fla / mamba_ssm kernels) are counted as
``fallback`` and not scored. Family ``all`` pools every scored record of a device per kind.
``--json`` writes
``{device: {family: {kind: {n, median_pct, p90_pct, signed_median_pct, status, not_priced}}}}``.

Targets (issue 23): prefill and training <= 12%, decode <= 20% median on the H100 and H200.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("families_h100", "families_h200")
KIND_LABEL = {"prefill_step": "prefill", "model_train_step": "train"}
ALL = "all"  # the family key of every scored record of a device, pooled


def kind_label(record) -> str:
    """``prefill``, ``decode-dynamic``, ``decode-static`` or ``train``."""
    if record.kind == "model_decode_step":
        return f"decode-{record.params['kv_cache']}"
    return KIND_LABEL.get(record.kind, record.kind)


def family_of(record) -> str:
    """The Hugging Face ``model_type`` of the config the record's model was built from."""
    from gpuplan.validate.stack_campaign.family_configs import FAMILIES

    cfg = record.params.get("hf_config") or FAMILIES.get(record.params["model"], {}).get(
        "hf_config", {})
    return str(cfg.get("model_type", record.params["model"]))


def records_in(folders) -> list:
    """The good records of ``DIR/*.jsonl`` and ``DIR/*/*.jsonl`` of each folder (whole-model
    kinds only); a bad line is reported on stderr and skipped."""
    from gpuplan.validate.record_kinds import MODEL_KINDS
    from gpuplan.validate.records import read_records

    out = []
    for root in map(Path, folders):
        for path in sorted([*root.glob("*.jsonl"), *root.glob("*/*.jsonl")]):
            records, errors = read_records(path)
            for err in errors:
                print(f"{path}: {err}", file=sys.stderr)
            out += [r for r in records if r.kind in MODEL_KINDS]
    return out


def price(record) -> tuple[str, float | None]:
    """``("scored", error %)``, ``("fallback", None)``, ``("unread", reason)`` or
    ``("error", reason)`` for one record."""
    from gpuplan.errors import GpuplanError
    from gpuplan.validate.record_prediction import predict_record, record_model

    if record.params.get("impl") == "torch-fallback":
        return "fallback", None
    try:
        record_model(record.params["model"], record.params.get("hf_config"))
    except GpuplanError as err:
        return "unread", str(err).split(": ", 1)[-1][:160]
    try:
        predicted = predict_record(record)["time_s"]
    except GpuplanError as err:
        return "error", str(err)[:160]
    measured = record.measured["time_s"]
    return "scored", 100.0 * (predicted - measured) / measured


def summarise(records) -> dict:
    """``{device: {family: {kind: {n, median_pct, p90_pct, signed_median_pct, status,
    not_priced}}}}``; ``status`` is ``scored`` (``scored; k not priced: reason`` where some
    records of a scored group were refused), ``fallback``, ``unread: reason`` or ``error:
    reason`` (the first record's where a group is not scored); ``n`` counts the records
    scored, or all of the group's where none is."""
    groups: dict = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for r in records:
        priced = price(r)
        groups[r.device][family_of(r)][kind_label(r)].append(priced)
        if priced[0] == "scored":  # every family's scored records together
            groups[r.device][ALL][kind_label(r)].append(priced)
    out: dict = {}
    for device, fams in sorted(groups.items()):
        for family, kinds in sorted(fams.items(), key=lambda kv: (kv[0] == ALL, kv[0])):
            for kind, priced in sorted(kinds.items()):
                errs = [e for status, e in priced if status == "scored"]
                other = [(s, e) for s, e in priced if s != "scored"]
                status = "scored" if errs else (
                    priced[0][0] if priced[0][1] is None else f"{priced[0][0]}: {priced[0][1]}")
                cell = {"n": len(priced), "median_pct": None, "p90_pct": None,
                        "signed_median_pct": None, "status": status,
                        "not_priced": len(other) if errs else 0}
                if errs and other:  # e.g. a prompt longer than the model's position table
                    cell["status"] = f"scored; {len(other)} not priced: {other[0][1]}"
                if errs:
                    cell |= {"n": len(errs),
                             "median_pct": round(float(np.median(np.abs(errs))), 2),
                             "p90_pct": round(float(np.quantile(np.abs(errs), 0.9)), 2),
                             "signed_median_pct": round(float(np.median(errs)), 2)}
                out.setdefault(device, {}).setdefault(family, {})[kind] = cell
    return out


def _pct(v) -> str:
    return "-" if v is None else f"{v:.1f}%"


def render(summary: dict) -> str:
    """The table, one line per device, family and kind."""
    lines = [f"{'device':<10} {'family':<14} {'kind':<15} {'n':>3} {'median':>8} {'p90':>8} "
             f"{'signed':>8}  status"]
    for device, fams in summary.items():
        for family, kinds in fams.items():
            for kind, c in kinds.items():
                status = c["status"][:90]
                lines.append(f"{device:<10} {family:<14} {kind:<15} {c['n']:>3} "
                             f"{_pct(c['median_pct']):>8} {_pct(c['p90_pct']):>8} "
                             f"{_pct(c['signed_median_pct']):>8}  {status}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="*", help="record folders (default: data/families_h100, "
                                               "data/families_h200)")
    ap.add_argument("--json", default=None, help="write the summary as JSON to this file")
    args = ap.parse_args(argv)
    folders = args.folders or [ROOT / "data" / f for f in FOLDERS
                               if (ROOT / "data" / f).is_dir()] or [ROOT / "data" / FOLDERS[0]]
    missing = [str(f) for f in folders if not Path(f).is_dir()]
    if missing:
        print(f"new_families: no record folder {', '.join(missing)}", file=sys.stderr)
        return 2
    summary = summarise(records_in(folders))
    print(render(summary))
    scored = sorted({f for fams in summary.values() for f, kinds in fams.items()
                     if f != ALL and any(c["status"].startswith("scored")
                                         for c in kinds.values())})
    unread = sorted({f for fams in summary.values() for f, kinds in fams.items()
                     if all(c["status"].startswith("unread") for c in kinds.values())})
    print(f"\nscored: {', '.join(scored) or 'none'}; unread: {', '.join(unread) or 'none'}")
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
