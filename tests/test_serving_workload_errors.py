"""A serving workload's image and shared-prefix columns, and a deployment's pipeline split,
checked: each bad input is a one-line error naming the field and what is valid."""

import numpy as np
import pytest

from gpuplan.errors import GpuplanError
from gpuplan.sim.runtime.serving.deployment import deployment
from gpuplan.sim.runtime.serving.requests import Workload, read_trace


def _load(**columns) -> Workload:
    return Workload(arrival_s=np.zeros(2), prompt_tokens=np.array([100, 100]),
                    output_tokens=np.array([8, 8]), **columns)  # fmt: skip


@pytest.mark.parametrize("columns, message", [
    ({"images": np.array([1, 1])}, "images need image_tokens"),
    ({"image_tokens": np.array([256])}, "image_tokens must have one entry per request (2)"),
    ({"image_tokens": np.array([256, 1.5])},
     "request 2: image_tokens=1.5 is invalid: it must be a whole number, zero or more"),
    ({"image_tokens": np.array([256, 0]), "images": np.array([1, 1])},
     "request 2: images=1 and image_tokens=0 disagree: both are zero or neither"),
    ({"prefix_id": np.array([0]), "prefix_tokens": np.array([10])},
     "prefix_id and prefix_tokens must have one entry per request"),
    ({"prefix_id": np.array([0, 0]), "prefix_tokens": np.array([10, -1])},
     "prefix_tokens must be whole numbers, zero or more"),
])  # fmt: skip
def test_bad_image_and_prefix_columns_are_named(columns, message):
    with pytest.raises(GpuplanError) as err:
        _load(**columns)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_trace_with_fractional_image_tokens_is_refused(tmp_path):
    path = tmp_path / "trace.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens,image_tokens\n0,100,8,256.5\n")
    with pytest.raises(GpuplanError, match="image_tokens must be whole numbers"):
        read_trace(path)


def test_a_trace_with_prefix_id_but_no_prefix_tokens_is_refused(tmp_path):
    path = tmp_path / "trace.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens,prefix_id\n0,100,8,3\n")
    with pytest.raises(GpuplanError, match="give prefix_id and prefix_tokens columns together"):
        read_trace(path)


def test_a_pipeline_split_given_as_a_word_other_than_auto_is_refused():
    with pytest.raises(GpuplanError, match=r"pp_layers='even' is invalid: give one block count "
                                           r"per stage \(e.g. \(30, 31\)\) or 'auto'"):
        deployment("llama3-8b", "h100-sxm", pp=2, pp_layers="even")


def test_a_trace_with_negative_image_tokens_names_the_request_and_the_plain_value(tmp_path):
    path = tmp_path / "trace.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens,image_tokens\n0,100,8,-1\n")
    with pytest.raises(GpuplanError) as err:
        read_trace(path)
    assert str(err.value) == ("request 1: image_tokens=-1 is invalid: it must be a whole number, "
                              "zero or more")
