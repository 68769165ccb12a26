"""The images of one sequence of a vision-language model: how many, and their size in pixels
(``--image-size WxH``); ``workloads.vision`` says what a model's tower makes of them."""

from __future__ import annotations

from dataclasses import dataclass

from gpuplan.errors import GpuplanError, check_whole, shown


@dataclass(frozen=True, slots=True, kw_only=True)
class Images:
    """The images of one sequence (a request, a training sample): ``count`` of W x H pixels."""

    count: int
    width: int
    height: int

    def __post_init__(self) -> None:
        check_whole("images", self.count, low=0)
        for field in ("width", "height"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise GpuplanError(f"image {field}={shown(value)} is invalid: give a whole number of "
                                   "pixels, 1 or more (--image-size WxH)")


def parse_image_size(text: str) -> tuple[int, int]:
    """``"448x448"`` -> (width, height); a one-line error for anything else."""
    w, sep, h = str(text).strip().lower().partition("x")
    if not sep or not w.isdigit() or not h.isdigit() or int(w) < 1 or int(h) < 1:
        raise GpuplanError(f"image size {text!r} is invalid: give WIDTHxHEIGHT in pixels, each 1 "
                           "or more, e.g. 448x448")
    return int(w), int(h)
