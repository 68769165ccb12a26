"""aiconfigurator's kernel tables: where they are, which tables and versions are read, and reading
them into one DataFrame of rows (held out: nothing in gpuplan is fitted on them).

NVIDIA's ``aiconfigurator-core`` 0.12.0 wheel (PyPI, Apache-2.0) carries per-kernel timings of
TensorRT-LLM, vLLM and SGLang, taken as CUDA-graph replays, under
``aiconfigurator_core/systems/data/<system>/<family>/<framework>/<version>/<table>.parquet``
(latency in milliseconds). The data directory is found, in order: an explicit ``--data DIR``
(the ``data`` folder itself, or a folder above it holding ``systems/data`` or
``aiconfigurator_core/systems/data``); the installed ``aiconfigurator_core`` package; a cache
under ``~/.cache/gpuplan`` filled once by ``pip download aiconfigurator-core==0.12.0 --no-deps``
and unzipping only ``systems/`` (its data and the version files). Tables may be parquet (needs
pyarrow: ``pip install gpuplan[aiconfigurator]``) or CSV of the same columns (the committed
sample ``data/aiconfigurator_sample``).

Versions as aiconfigurator itself queries them: per (system, framework) the ``current`` version
of ``systems/query_versions.yaml`` (its defaults, then its per-system overrides), and for NCCL
the ``misc.nccl_version`` of ``systems/<system>.yaml``; where that folder is missing (or the
files are), the newest version present.
"""

from __future__ import annotations

import functools
import importlib.util
import re
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import yaml

from gpuplan.errors import GpuplanError

PACKAGE = "aiconfigurator-core"
VERSION = "0.12.0"
CACHE_DIR = Path.home() / ".cache" / "gpuplan" / f"aiconfigurator-core-{VERSION}"
# The wheel is built for one platform, but its systems/ folder is plain data: any build serves.
PIP_PLATFORM = ("--only-binary=:all:", "--platform", "manylinux_2_28_x86_64",
                "--python-version", "3.11")

# aiconfigurator system -> gpuplan catalogue key. b300/gb300 are read only where the catalogue
# knows them (``known_devices``).
SYSTEMS = {"b200_sxm": "b200", "gb200": "gb200", "b300_sxm": "b300", "gb300": "gb300",
           "h100_sxm": "h100-sxm", "h200_sxm": "h200", "a100_sxm": "a100-sxm-80gb"}
FRAMEWORKS = {"trtllm": "trt-llm", "vllm": "vllm", "sglang": "sglang"}


@dataclass(frozen=True, slots=True)
class Table:
    """One table to read: ``kind`` is gpuplan's name for its rows."""
    kind: str  # gemm, context_attention, generation_attention, nccl, custom_allreduce
    family: str  # the folder under the system: gemm, attention, comm
    stem: str  # the file's name without its suffix
    framework: str  # trtllm, vllm, sglang or nccl


TABLES = (
    Table("gemm", "gemm", "gemm_perf", ""),
    Table("context_attention", "attention", "context_attention_perf", ""),
    Table("generation_attention", "attention", "generation_attention_perf", ""),
    Table("custom_allreduce", "comm", "custom_allreduce_perf", ""),
    Table("nccl", "comm", "nccl_perf", "nccl"),
)
KINDS = tuple(t.kind for t in TABLES)


def find_data(explicit: str | Path | None = None, *, download: bool = True) -> Path:
    """The ``systems/data`` directory of aiconfigurator-core (module docstring's order)."""
    if explicit is not None:
        return _resolve(Path(explicit))
    spec = importlib.util.find_spec("aiconfigurator_core")
    if spec is not None and spec.submodule_search_locations:
        for root in spec.submodule_search_locations:
            if (Path(root) / "systems" / "data").is_dir():
                return Path(root) / "systems" / "data"
    cached = CACHE_DIR / "aiconfigurator_core" / "systems" / "data"
    if cached.is_dir():
        return cached
    if not download:
        raise GpuplanError("aiconfigurator data: none given (--data DIR), no aiconfigurator_core "
                           f"installed, and no cache at {CACHE_DIR}")
    return _download()


def _resolve(path: Path) -> Path:
    for cand in (path, path / "systems" / "data", path / "aiconfigurator_core" / "systems" / "data"):
        if cand.is_dir() and any((cand / s).is_dir() for s in SYSTEMS):
            return cand
    raise GpuplanError(f"--data={str(path)!r} holds no aiconfigurator tables: give the "
                       f"systems/data folder (with {', '.join(sorted(SYSTEMS))} in it) or one above it")


def _download() -> Path:
    """``pip download`` the wheel into the cache (no install) and unzip only ``systems/``."""
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", f"{PACKAGE}=={VERSION}", "--no-deps",
           *PIP_PLATFORM, "-d", str(CACHE_DIR)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wheels = sorted(CACHE_DIR.glob("aiconfigurator_core-*.whl"))
    if done.returncode or not wheels:
        last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no wheel"]
        raise GpuplanError(f"aiconfigurator data: `{' '.join(cmd[2:])}` failed ({last[0]}); "
                           "give the unpacked tables with --data DIR")
    with zipfile.ZipFile(wheels[-1]) as wheel:
        members = [n for n in wheel.namelist() if n.startswith("aiconfigurator_core/systems/")]
        wheel.extractall(CACHE_DIR, members=members)
    return CACHE_DIR / "aiconfigurator_core" / "systems" / "data"


def known_devices() -> dict[str, str]:
    """The aiconfigurator systems whose gpuplan key the accelerator catalogue holds."""
    from gpuplan.hwmodels.accelerators import list_accelerators

    keys = {acc.key for acc in list_accelerators()}
    return {system: key for system, key in SYSTEMS.items() if key in keys}


def version_key(version: str) -> tuple:
    """'1.3.0rc20' -> (1, 3, 0, 'rc', 20): numbers compare as numbers; a pre-release word
    sorts before the release (aiconfigurator's folders: 0.5.6.post2, 1.3.0rc20, 2.27.3)."""
    parts = re.findall(r"\d+|[a-z]+", version.lower())
    return tuple((1, int(p), "") if p.isdigit() else (0, 0, p) for p in parts)


@functools.cache
def _yaml(path: Path) -> dict:
    return yaml.safe_load(path.read_text()) if path.is_file() else {}


def wanted_version(data: Path, system: str, framework: str) -> str | None:
    """The version aiconfigurator queries for ``system`` and ``framework`` (module docstring)."""
    systems = data.parent
    if framework == "nccl":
        return (_yaml(systems / f"{system}.yaml").get("misc") or {}).get("nccl_version")
    versions = _yaml(systems / "query_versions.yaml")
    slot = (versions.get("overrides") or {}).get(system, {}).get(framework) \
        or (versions.get("defaults") or {}).get(framework) or {}
    return slot.get("current")


def table_files(data: Path, system: str, table: Table) -> list[tuple[str, str, Path]]:
    """(framework, version, file) of ``table`` for ``system``: one version per framework."""
    root = data / system / table.family
    frameworks = [table.framework] if table.framework else list(FRAMEWORKS)
    out = []
    for fw in frameworks:
        found = {d.name: f for d in (root / fw).glob("*") if d.is_dir()
                 for f in _table_file(d, table.stem)}
        if not found:
            continue
        want = wanted_version(data, system, fw)
        version = want if want in found else max(found, key=version_key)
        out.append((fw, version, found[version]))
    return out


def _table_file(folder: Path, stem: str) -> list[Path]:
    return [p for p in (folder / f"{stem}.parquet", folder / f"{stem}.csv") if p.is_file()][:1]


def read_file(path: Path) -> pd.DataFrame:
    if path.suffix == ".csv":
        return pd.read_csv(path, keep_default_na=False)
    try:
        return pd.read_parquet(path)
    except ImportError as exc:
        raise GpuplanError(f"reading {path.name} needs pyarrow ({exc}): pip install "
                           "'gpuplan[aiconfigurator]'") from None


def read_tables(data: Path, *, kinds=KINDS, systems=None, sample: int = 0,
                seed: int = 0) -> pd.DataFrame:
    """Every row of the chosen tables, one frame, with ``system``, ``device`` (gpuplan's key),
    ``kind``, ``fw`` (the folder's framework), ``fw_version`` and ``path`` beside the table's own
    columns (its own ``device`` renamed ``device_name``). ``sample`` > 0 keeps that many rows of each table, drawn with ``seed``."""
    devices = known_devices()
    unknown = sorted(set(systems or ()) - set(SYSTEMS))
    if unknown:
        raise GpuplanError(f"system={unknown[0]!r} is not read: choose from {', '.join(SYSTEMS)}")
    bad = sorted(set(kinds) - set(KINDS))
    if bad:
        raise GpuplanError(f"kind={bad[0]!r} is unknown: choose from {', '.join(KINDS)}")
    frames = []
    for system in systems or SYSTEMS:
        if system not in devices or not (data / system).is_dir():
            continue
        for table in (t for t in TABLES if t.kind in kinds):
            for fw, version, path in table_files(data, system, table):
                # the table's own ``device`` (e.g. "NVIDIA B200") kept as ``device_name``
                df = read_file(path).rename(columns={"device": "device_name"})
                if sample and len(df) > sample:
                    df = df.sample(n=sample, random_state=seed).sort_index()
                frames.append(df.assign(system=system, device=devices[system], kind=table.kind,
                                        fw=fw, fw_version=version,
                                        path=str(path.relative_to(data))))
    if not frames:
        raise GpuplanError(f"no aiconfigurator tables of {', '.join(kinds)} under {data}")
    return pd.concat(frames, ignore_index=True)
