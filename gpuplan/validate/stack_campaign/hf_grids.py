"""The models and shapes the Hugging Face parts (``hf``) measure: the base grid, the
``--grid extended`` grid (``EXT_*``), ``--grid compile2`` (``EXT2_*``) and the tiny smoke grid.
"""

from __future__ import annotations

from .configs import MODELS

PREFILL = ((1, 512), (1, 4096), (8, 2048))  # (batch, seq)
DECODE = ((1, 1024), (16, 4096), (64, 1024))  # (batch, context)
TRAIN = ((1, 2048), (2, 4096))  # (micro_batch, seq)
COMPILE_MODELS = ("llama3-8b", "deepseek-v2-lite")
TINY_PREFILL, TINY_DECODE, TINY_TRAIN = ((1, 16),), ((2, 16),), ((1, 16),)
# ``--grid extended`` (the second H200 run, data/h200_stacks/run2): more sizes, every case timed
# in ``ROUNDS`` rounds (a model built once, the cases cycled), each case's host probe and its
# kernels' own time (``device_kernel_s``: torch.profiler's summed kernel durations of one call,
# ``common.Timer.device_time``) kept beside the isolated time, so that host and device cost
# can be told apart. Training adds the MoE models' sizes (grouped_mm backward) and torch-compile
# gets prefill, decode and training sizes of two dense models.
EXT_PREFILL = ((1, 128), (1, 512), (1, 1024), (4, 1024), (1, 4096))
EXT_DECODE = ((1, 256), (1, 1024), (1, 4096), (8, 2048), (16, 4096), (64, 1024))
EXT_TRAIN = {"mixtral-8x7b": ((1, 512), (1, 1024), (1, 2048), (2, 2048), (2, 4096)),
             "deepseek-v2-lite": ((1, 512), (1, 1024), (1, 2048), (2, 4096)),
             "default": ((1, 1024), (4, 2048))}
EXT_COMPILE_MODELS = ("qwen2.5-7b", "llama3-8b")
EXT_COMPILE_PREFILL = ((1, 512), (1, 2048), (4, 2048))
EXT_COMPILE_DECODE = ((1, 512), (4, 2048), (32, 1024))
EXT_COMPILE_TRAIN = ((1, 1024), (2, 2048))
# ``--grid compile2`` (H200 run8): more compiled sizes, none of them the extended grid's
EXT2_COMPILE_PREFILL = ((1, 1024), (2, 4096), (8, 512))
EXT2_COMPILE_DECODE = ((1, 2048), (16, 1024), (8, 4096))
EXT2_COMPILE_TRAIN = ((1, 512), (1, 4096))
ROUNDS = 2


def model_names(compiled: bool, extended: bool, models: tuple[str, ...] | None) -> tuple:
    """The models a part runs: every model eager, ``COMPILE_MODELS`` (the extended grid's
    ``EXT_COMPILE_MODELS``) compiled; models named on the command line run as given."""
    names = COMPILE_MODELS if compiled else tuple(MODELS)
    if extended and compiled:
        names = EXT_COMPILE_MODELS
    # models named on the command line run as given (compiled ones too)
    return tuple(models) if models is not None else names


def grids(tiny: bool, compiled: bool, extended: bool, grid: str) -> tuple[tuple, tuple, tuple]:
    """The (prefill, decode, train) shapes of a part (on the extended eager grid each model's
    training shapes are ``EXT_TRAIN``'s instead)."""
    pre, dec, tr = (TINY_PREFILL, TINY_DECODE, TINY_TRAIN) if tiny else (PREFILL, DECODE, TRAIN)
    if compiled and not tiny:
        pre, dec, tr = pre[1:2], dec[:2], tr[:1]
    if extended and not tiny:
        pre, dec = EXT_PREFILL * ROUNDS, EXT_DECODE * ROUNDS
        if grid == "decode":
            pre, dec = (), EXT_DECODE
        if compiled:
            pre, dec, tr = EXT_COMPILE_PREFILL, EXT_COMPILE_DECODE, EXT_COMPILE_TRAIN
        if compiled and grid == "compile2":
            pre, dec, tr = EXT2_COMPILE_PREFILL, EXT2_COMPILE_DECODE, EXT2_COMPILE_TRAIN
    return pre, dec, tr
