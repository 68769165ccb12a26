"""A board held below its rated power: the sustained clock by the cube law (hwmodels.power)."""

import pytest

from gpuplan.errors import GpuplanError
from gpuplan.hwmodels.efficiency import efficiency_for
from gpuplan.hwmodels.power import power_capped
from gpuplan.validate.published import training as P


def test_cube_law_and_no_op_at_or_above_rated_power():
    eff = efficiency_for("h100-sxm")
    capped = power_capped(eff, 700.0, 500.0)
    assert capped.sustained_clock_fraction == pytest.approx(
        eff.sustained_clock_fraction * (500 / 700) ** (1 / 3))
    assert power_capped(eff, 700.0, 700.0) is eff
    assert power_capped(eff, 700.0, None) is eff
    with pytest.raises(GpuplanError, match="power_limit_w"):
        power_capped(eff, 700.0, -5.0)


def test_capped_row_is_slower_than_the_same_row_at_rated_power():
    row = next(r for r in P.training_rows() if r["id"] == "tt24-t1-8b-g8-fsdp")
    assert row["options"]["power_limit_w"] == 500
    capped = P.predict_row(row, {})
    options = {k: v for k, v in row["options"].items() if k != "power_limit_w"}
    rated = P.predict_row(dict(row, options=options), {})
    assert capped[0] == rated[0] == "ok"
    assert capped[1] < rated[1]  # tokens per second per GPU
    assert capped[2] == rated[2]  # memory does not depend on the clock
