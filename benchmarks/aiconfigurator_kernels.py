"""Another party's kernel timings, held out: aiconfigurator-core 0.12.0's tables (TensorRT-LLM,
vLLM and SGLang kernels on B200, GB200, H100, H200, A100, timed as CUDA-graph replays) priced by
gpuplan through ``estimate gemm|attention|collective``'s path on each framework's stack.
Nothing in gpuplan is fitted on these rows (``gpuplan.validate.published.aiconfigurator_cases``
says how a row becomes a case).

Prints per device x kind x dtype x framework: rows, answered, median and p90 absolute percent
error and the signed median (negative: predicted too fast), then every no-answer reason.

    python3 benchmarks/aiconfigurator_kernels.py [--data DIR] [--sample 5000] [--seed 0]
        [--systems b200_sxm,gb200] [--kinds gemm,nccl] [--by kernel_source]
        [--json F] [--markdown F]

Needs pyarrow for the parquet tables (``pip install 'gpuplan[aiconfigurator]'``); ``--data
data/aiconfigurator_sample`` reads the committed CSV sample without it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import pandas as pd

from gpuplan.errors import GpuplanError
from gpuplan.validate.published import aiconfigurator as aic
from gpuplan.validate.published import aiconfigurator_cases as cases

DEVICE_ORDER = ("b200", "gb200", "b300", "gb300", "h100-sxm", "h200", "a100-sxm-80gb")
KIND_ORDER = aic.KINDS
COLUMNS = {"n": "rows", "answered": "answered", "median_abs_pct": "median |err| %",
           "p90_abs_pct": "p90 |err| %", "signed_median_pct": "signed median %"}


def ordered(table: pd.DataFrame) -> pd.DataFrame:
    """B200 and GB200 first, then the kinds in their table order."""
    dev = table["device"].map({d: i for i, d in enumerate(DEVICE_ORDER)}).fillna(99)
    kind = table["kind"].map({k: i for i, k in enumerate(KIND_ORDER)})
    return (table.assign(_d=dev, _k=kind)
            .sort_values(["_d", "_k", "dtype", "framework"], kind="stable")
            .drop(columns=["_d", "_k"]).reset_index(drop=True))


def markdown(frame: pd.DataFrame) -> str:
    frame = frame.rename(columns=COLUMNS)
    head = "| " + " | ".join(frame.columns) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    rows = ["| " + " | ".join(_cell(v) for v in r) + " |" for r in frame.itertuples(index=False)]
    return "\n".join([head, rule, *rows])


def _cell(v) -> str:
    if isinstance(v, float):
        return "-" if pd.isna(v) else f"{v:.1f}"
    return str(v)


def run(args) -> dict:
    data = aic.find_data(args.data)
    started = time.perf_counter()
    rows = aic.read_tables(data, kinds=args.kinds, systems=args.systems, sample=args.sample,
                           seed=args.seed)
    scored = cases.score(rows)
    by = cases.GROUP + ([args.by] if args.by else [])
    table = ordered(cases.summarize(scored, by)).drop(columns="answered_frac")
    kinds = ordered(cases.summarize(scored, ["device", "kind", "dtype"]).assign(framework="all"))
    return {
        "source": f"{aic.PACKAGE} {aic.VERSION} (PyPI, Apache-2.0): {data}",
        "sample_per_table": args.sample, "seed": args.seed,
        "rows": len(scored), "answered": int((scored["reason"] == "").sum()),
        "seconds": round(time.perf_counter() - started, 1),
        "tables": sorted(rows["path"].unique()),
        "by_kind_dtype": kinds.drop(columns=["framework", "answered_frac"]),
        "by_framework": table,
        "reasons": cases.reasons(scored),
    }


def render(out: dict) -> str:
    lines = [f"source: {out['source']}",
             f"rows: {out['rows']:,} ({out['answered']:,} answered); sample per table: "
             f"{out['sample_per_table'] or 'all'} (seed {out['seed']}); {out['seconds']} s",
             "", "## Per device, kind and dtype (all frameworks)", "",
             markdown(out["by_kind_dtype"]), "",
             "## Per device, kind, dtype and framework", "", markdown(out["by_framework"]), "",
             "## Rows without an answer", "",
             markdown(out["reasons"]) if len(out["reasons"]) else "none", "",
             "## Tables read", "", *(f"- `{t}`" for t in out["tables"])]
    return "\n".join(lines)


def write_sample(args) -> int:
    """``--sample`` rows of each table (seeded), with their own columns, as CSV under the
    table's own relative path (``<system>/<family>/<framework>/<version>/<table>.csv``)."""
    from pathlib import Path

    data = aic.find_data(args.data)
    rows = aic.read_tables(data, kinds=args.kinds, systems=args.systems, sample=args.sample,
                           seed=args.seed)
    extra = ["system", "device", "kind", "fw", "fw_version", "path"]
    for path, table in rows.groupby("path", sort=True):
        out = Path(args.write_sample) / Path(path).with_suffix(".csv")
        out.parent.mkdir(parents=True, exist_ok=True)
        own = table.drop(columns=extra).dropna(axis=1, how="all").convert_dtypes()
        own.rename(columns={"device_name": "device"}).to_csv(out, index=False)
        print(f"{out}: {len(table)} rows")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", help="aiconfigurator's systems/data folder (or one above it)")
    p.add_argument("--sample", type=int, default=5000,
                   help="rows kept per table, drawn with --seed (0: every row; default 5000)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--systems", type=lambda s: s.split(","), default=None,
                   help=f"comma-separated, of {', '.join(aic.SYSTEMS)} (default: all known)")
    p.add_argument("--kinds", type=lambda s: s.split(","), default=aic.KINDS)
    p.add_argument("--by", choices=("kernel_source", "version"), help="one more grouping")
    p.add_argument("--write-sample", metavar="DIR",
                   help="write --sample rows of each table read as CSV under DIR (the committed "
                   "data/aiconfigurator_sample) and stop")
    p.add_argument("--json", metavar="F")
    p.add_argument("--markdown", metavar="F")
    args = p.parse_args(argv)
    if args.sample < 0:
        p.error(f"--sample={args.sample} is invalid: use 0 (every row) or more")
    try:
        if args.write_sample:
            return write_sample(args)
        out = run(args)
    except GpuplanError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    text = render(out)
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text + "\n")
    if args.json:
        doc = {k: v.to_dict(orient="records") if isinstance(v, pd.DataFrame) else v
               for k, v in out.items()}
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1, default=float)
    return 0


if __name__ == "__main__":
    sys.exit(main())
