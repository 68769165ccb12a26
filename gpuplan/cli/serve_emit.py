"""``--emit vllm|sglang|trt-llm`` of ``serve`` and ``serve plan``: the simulated (or the plan's
chosen) deployment as that engine's launch commands (``sim.runtime.serving.launch``), printed
after the answer, and under ``"launch"`` in ``--json``."""

from __future__ import annotations

import re
import shlex

EMIT_ENGINES = ("vllm", "sglang", "trt-llm")  # sim.runtime.serving.launch.ENGINES (tested equal)


def add_emit_option(p) -> None:
    p.add_argument("--emit", choices=EMIT_ENGINES, default=None, metavar="ENGINE",
                   help="also print the deployment as this engine's launch command(s): "
                   "vllm, sglang or trt-llm (the plan's cheapest row)")  # fmt: skip


def plan_launch(args, rows: list[dict], space) -> list[dict]:
    """The launch commands of the plan's cheapest row (``rows[0]``); [] without --emit."""
    if not getattr(args, "emit", None) or not rows:
        return []
    from gpuplan.sim.runtime.serving.launch import launch_commands, pools_from_row
    from gpuplan.workloads.presets import get_model

    cfg = get_model(args.model)
    pools = pools_from_row(rows[0], cfg=cfg, gpu=args.gpu, space=space)
    stack = getattr(space.stack, "name", "") or ""
    return [c.as_dict() for c in launch_commands(args.emit, cfg, pools, model_arg=args.model,
                                                  stack=stack)]  # fmt: skip


def serve_launch(args, dep, sched, speculation, stack) -> list[dict]:
    """The launch commands of ``serve``'s simulated deployment; [] without --emit."""
    if not getattr(args, "emit", None):
        return []
    from gpuplan.cli.serve_pools import POOLS
    from gpuplan.sim.runtime.serving.launch import launch_commands, pool_of

    roles = (dict(zip(POOLS, args.disaggregate, strict=True)) if args.disaggregate
             else {"colocated": args.replicas})  # fmt: skip
    pools = [pool_of(dep, sched, role=role, replicas=n, speculation=speculation)
             for role, n in roles.items()]  # fmt: skip
    name = getattr(stack, "name", "") or ""
    return [c.as_dict() for c in launch_commands(args.emit, dep.model, pools,
                                                  model_arg=args.model, stack=name)]  # fmt: skip


def render_launch(launch: list[dict]) -> str:
    """The commands as a shell reads them: comments, each YAML file written by a here-document,
    then the command, one flag a line."""
    if not launch:
        return ""
    from gpuplan.sim.runtime.serving.launch import engine_flags

    first = launch[0]
    where = re.split(r" \(|[;,]", engine_flags()[first["engine"]]["source"])[0]
    out = [f"\nlaunch on {first['engine']}: flags of {first['version']}", f"# read from {where}"]
    for cmd in launch:
        out.append("")
        out += [f"# {c}" for c in cmd.get("comments", [])]
        if cmd.get("yaml") is not None:
            name = cmd["argv"][-1]
            out += [f"cat > {name} <<'EOF'", cmd["yaml"], "EOF"]
        out.append(_command_lines(cmd["argv"]))
    return "\n".join(out)


def _command_lines(argv: list[str]) -> str:
    """``argv`` quoted for a shell, a new line before each long flag."""
    parts: list[str] = []
    for token in argv:
        quoted = shlex.quote(token)
        if token.startswith("--") and parts:
            parts.append(" \\\n  " + quoted)
        else:
            parts.append((" " if parts else "") + quoted)
    return "".join(parts)
