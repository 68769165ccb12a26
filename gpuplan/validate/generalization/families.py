"""Leave one model family out: the stack fit's whole-model parameters refitted without a family's
records, scored on that family's records.

The stack fit (``validate.fit_stacks.kernels``) fits kernel parameters on kernel records (GEMMs,
attention, elementwise: no model family) and the host parameters of ``hf-transformers`` and
``torch-compile`` on the whole-model records (prefill, decode and training steps of five
Hugging Face models). A user's model is a family the fit may never have seen, so for each family
(the Hugging Face ``model_type`` of the record's model) the host parameters are fitted again on
the other families' whole-model records, the kernel parameters kept as fitted on every kernel
record, and the family's records are priced with those values; beside them, the same records
priced with the fit of every record (in-sample).
"""

from __future__ import annotations

import pandas as pd

# the Hugging Face model_type of each model of the stack campaign (its config.json;
# validate/stack_campaign/configs.py gives their sources)
FAMILY = {"llama3-8b": "llama", "qwen2.5-7b": "qwen2", "mistral-7b": "mistral",
          "mixtral-8x7b": "mixtral", "deepseek-v2-lite": "deepseek_v2"}  # fmt: skip


def _values(fitted: dict) -> dict:
    return {k: v["fitted"] for k, v in fitted.items() if v["fitted"] is not None}


def left_out(data_dir, device: str = "h200", progress=print) -> pd.DataFrame:
    """Each whole-model record of ``data_dir`` priced left out of its family and in-sample."""
    from gpuplan.validate.fit_stacks import cases
    from gpuplan.validate.fit_stacks.kernels import Model, fit
    from gpuplan.validate.fit_stacks.parameters import HOST_PARAMS
    from gpuplan.validate.record_kinds import MODEL_KINDS

    records = cases.load(data_dir, device)
    model = Model(device)
    progress(f"fitting every record ({len(records)}) ...")
    everything = _values(fit(model, records))
    kernel_values = {k: v for k, v in everything.items() if k not in HOST_PARAMS}
    whole = [r for r in records if r.kind in MODEL_KINDS]
    rows = []
    for family in sorted({FAMILY.get(r.params["model"], r.params["model"]) for r in whole}):
        mine = [r for r in whole if FAMILY.get(r.params["model"], r.params["model"]) == family]
        others = [r for r in whole if r not in mine]
        progress(f"fitting without {family} ({len(others)} whole-model records) ...")
        base = Model(device)
        base.values = base.values | kernel_values
        values = kernel_values | _values(fit(base, others))
        for r in mine:
            measured = r.measured["time_s"]
            rows.append({"family": family, "model": r.params["model"],
                         "stack": r.params.get("stack", ""), "kind": r.kind,
                         "measured": measured,
                         "left_out": model.predict(r, values)["time_s"],
                         "in_sample": model.predict(r, everything)["time_s"]})  # fmt: skip
    frame = pd.DataFrame(rows)
    for col in ("left_out", "in_sample"):
        frame[f"{col}_abs_pct_error"] = (100 * (frame[col] / frame["measured"] - 1)).abs()
    return frame


def summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Per (stack, kind, family) and per (stack, kind): records, the left-out median and p90
    absolute % error and the in-sample median."""
    parts = [frame, frame.assign(family="all")]
    out = []
    for (stack, kind, family), g in pd.concat(parts).groupby(["stack", "kind", "family"]):
        out.append({"stack": stack, "kind": kind, "family": family, "records": len(g),
                    "left_out_median_pct": g["left_out_abs_pct_error"].median(),
                    "left_out_p90_pct": g["left_out_abs_pct_error"].quantile(0.9),
                    "in_sample_median_pct": g["in_sample_abs_pct_error"].median()})  # fmt: skip
    return pd.DataFrame(out)
