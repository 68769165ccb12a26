"""Structural changes keep every answer: the --json output of a fixed list of commands, byte for byte.

``tests/golden/commands.txt`` lists the commands (the README's examples, the published
reproductions, scoring of committed records); ``tests/golden/outputs.json`` holds, for each, the
exit code and the SHA-256 and length of its stdout. A change that moves, merges or splits code
must leave every entry as it is; a change that moves a price re-records the file with
``--record`` in the same commit, so that the diff shows which answers moved.

    python3 benchmarks/golden_outputs.py            # check the fast list (the test suite does this)
    python3 benchmarks/golden_outputs.py --all      # the fast and the slow list (minutes)
    python3 benchmarks/golden_outputs.py --all --record   # write outputs.json anew
    python3 benchmarks/golden_outputs.py --save DIR # also keep each stdout in DIR, to diff

Each command runs in its own process (``python3 -m gpuplan.cli ... --json``) from the
repository root, with a temporary folder for the files a command writes (``{tmp}``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = ROOT / "tests" / "golden" / "commands.txt"
OUTPUTS = ROOT / "tests" / "golden" / "outputs.json"
SLOW_MARK = "[slow]"


def read_commands(path: Path = COMMANDS, include_slow: bool = False) -> list[str]:
    """The commands of ``path``, the slow section too when ``include_slow``."""
    commands: list[str] = []
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if line == SLOW_MARK:
            if not include_slow:
                break
            continue
        if line and not line.startswith("#"):
            commands.append(line)
    return commands


def _anonymous(data: bytes, tmp: str) -> bytes:
    """``data`` with the temporary folder read as ``{tmp}`` and the checkout as ``{root}``, so
    that the digest is the same in any checkout."""
    return data.replace(tmp.encode(), b"{tmp}").replace(str(ROOT).encode(), b"{root}")


def run_one(command: str, save_dir: Path | None = None) -> dict:
    """Run ``gpuplan COMMAND --json``: its exit code, the digest of its stdout and of every file
    it wrote into ``{tmp}`` (paths of the folder and the checkout anonymous in both)."""
    with tempfile.TemporaryDirectory() as tmp:
        argv = [sys.executable, "-m", "gpuplan.cli", *shlex.split(command.format(tmp=tmp)), "--json"]
        env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONHASHSEED": "0"}
        done = subprocess.run(argv, cwd=ROOT, capture_output=True, env=env, check=False)
        stdout = _anonymous(done.stdout, tmp)
        files = {f.name: _anonymous(f.read_bytes(), tmp)
                 for f in sorted(Path(tmp).iterdir()) if f.is_file()}
    if save_dir is not None:
        name = hashlib.sha256(command.encode()).hexdigest()[:12]
        (save_dir / f"{name}.json").write_bytes(stdout)
        (save_dir / f"{name}.cmd").write_text(command + "\n")
        for file_name, data in files.items():
            (save_dir / f"{name}.{file_name}").write_bytes(data)
    result = {"rc": done.returncode, "sha256": hashlib.sha256(stdout).hexdigest(),
              "bytes": len(stdout)}
    if files:
        result["files"] = {n: hashlib.sha256(d).hexdigest() for n, d in files.items()}
    return result


def run_all(commands: list[str], workers: int, save_dir: Path | None = None) -> dict[str, dict]:
    """Every command's result, in the order given (run ``workers`` at a time)."""
    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = list(pool.map(lambda c: run_one(c, save_dir), commands))
    return dict(zip(commands, results, strict=True))


def differences(got: dict[str, dict], want: dict[str, dict]) -> list[str]:
    """One line per command whose result is not the recorded one."""
    lines = []
    for command, result in got.items():
        expected = want.get(command)
        if expected is None:
            lines.append(f"not recorded: {command}")
        elif result != expected:
            lines.append(f"changed (rc {expected['rc']} -> {result['rc']}, "
                         f"{expected['bytes']} -> {result['bytes']} bytes): {command}")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--all", action="store_true", help="the slow list too")
    p.add_argument("--record", action="store_true", help="write outputs.json anew")
    p.add_argument("--save", type=Path, help="keep each command's stdout in this folder")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = p.parse_args(argv)
    commands = read_commands(include_slow=args.all)
    if args.save:
        args.save.mkdir(parents=True, exist_ok=True)
    got = run_all(commands, args.workers, args.save)
    if args.record:
        recorded = json.loads(OUTPUTS.read_text()) if OUTPUTS.exists() else {}
        recorded.update(got)
        order = read_commands(include_slow=True)
        OUTPUTS.write_text(json.dumps({c: recorded[c] for c in order if c in recorded},
                                      indent=1) + "\n")
        print(f"recorded {len(got)} commands in {OUTPUTS.relative_to(ROOT)}")
        return 0
    lines = differences(got, json.loads(OUTPUTS.read_text()))
    for line in lines:
        print(line)
    print(f"{len(commands) - len(lines)} of {len(commands)} commands unchanged")
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(main())
