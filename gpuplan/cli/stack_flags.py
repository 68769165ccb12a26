"""``--stack`` and its overrides, declared once for every pricing command.

``--stack NAME`` picks a preset (``gpuplan stacks`` lists them); ``--attention-kernel`` forces
one fused-attention kernel in every phase; ``--host-speed`` sets the host's speed factor (the
CPU cost per torch call against the reference host; 2.0 is twice as slow), as measured on the
user's machine by ``python3 -m gpuplan.validate.harness.host_probe``. The stack is checked
against the device: a kernel it cannot run is a one-line error listing those it can.
"""

from __future__ import annotations

import argparse

from gpuplan.cli.argtypes import positive_float


class _StackName(argparse.Action):
    """``--stack NAME``, remembering that it was given (``stack_given``): a stack left unset is
    a default the command lists in its ``defaults in force``."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        setattr(namespace, self.dest, values)
        namespace.stack_given = True


def add_stack_options(parser, *, default: str, kernels: bool = True) -> None:
    """The stack flags on ``parser``; ``default`` is the command's stack when none is named."""
    parser.set_defaults(stack_given=False)
    parser.add_argument(
        "--stack",
        default=default,
        action=_StackName,
        help=f"software stack that runs the work (default: {default}; `gpuplan stacks` lists them)",
    )
    if kernels:
        parser.add_argument(
            "--attention-kernel",
            dest="attention_kernel",
            default=None,
            help="force one attention kernel in every phase: flash2, flash3, cudnn, efficient, "
            "math, flashinfer, or triton (llm-foundry's Triton flash attention, training and "
            "prefill only) (default: the stack's own choice on the device)",
        )
    parser.add_argument(
        "--host-speed",
        dest="host_speed",
        type=positive_float,
        default=None,
        help="host CPU cost factor against the reference host (default 1.0; measured by "
        "python3 -m gpuplan.validate.harness.host_probe)",
    )


def stack_from_args(args: argparse.Namespace, acc):
    """The stack the flags name, with their overrides, checked on ``acc``."""
    from gpuplan.errors import check_choice
    from gpuplan.sim.stacks import ATTENTION_KERNELS, get_stack, resolved_attention, with_overrides
    from gpuplan.sim.stacks.kernels import check_kernel
    from gpuplan.sim.stacks.stack import TRAIN_ONLY_KERNELS

    forced = getattr(args, "attention_kernel", None)
    if forced is not None:
        check_choice("--attention-kernel", forced, (*ATTENTION_KERNELS, *TRAIN_ONLY_KERNELS))
        check_kernel(forced, acc, field="--attention-kernel")
    stack = with_overrides(
        get_stack(args.stack),
        attention_kernel=getattr(args, "attention_kernel", None),
        host_speed=getattr(args, "host_speed", None),
    )
    resolved_attention(stack, acc)  # a kernel the device cannot run fails here, in one line
    return stack


def stack_doc(stack, acc) -> dict:
    """What a JSON document says of the stack it priced."""
    from gpuplan.sim.stacks import resolved_attention

    kernels = resolved_attention(stack, acc)
    return {
        "name": stack.name,
        "attention": {"prefill": kernels.prefill, "train": kernels.train, "decode": kernels.decode},
        "elementwise": stack.elementwise,
        "host": {"mode": stack.host.mode, "speed_factor": stack.host.speed_factor},
        "kv_cache": stack.kv_cache,
        "measured": stack.measured,
    }


def stack_line(stack, acc) -> str:
    """The printout's line naming the stack, and saying when no measurement backs it."""
    line = stack.describe(acc)
    from gpuplan.sim.stacks import MEASURED_ON

    if not stack.measured:
        line += " - not measured as a whole: priced from its kernels' fits and priors"
    elif acc.key != MEASURED_ON:
        line += f" - measured on {MEASURED_ON}, not on {acc.key}"
    return line
