"""Command-line number types: the message names the value and what would be valid."""

import argparse

import pytest

from gpuplan.cli.argtypes import non_negative, open_fraction, positive, positive_int


@pytest.mark.parametrize(
    ("parse", "text", "message"),
    [
        (positive_int, "x", "'x' is not a whole number"),
        (positive_int, "0", "must be greater than zero"),
        (positive(float), "-1.5", "must be greater than zero"),
        (positive(float), "ten", "'ten' is not a number"),
        (non_negative(int), "-1", "must be zero or more"),
        (open_fraction, "1", "must lie between 0 and 1"),
    ],
)
def test_a_bad_number_is_refused_with_a_message_naming_it(parse, text, message):
    with pytest.raises(argparse.ArgumentTypeError, match=message):
        parse(text)


def test_good_numbers_come_back_in_their_type():
    assert positive_int("8") == 8 and positive(float)("0.5") == 0.5
    assert non_negative(int)("0") == 0 and open_fraction("0.7") == 0.7
