"""The edges of a method option's validation (method.options): an empty value, the ends of
an interval."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from fedlabels.core.errors import FedLabelsError
from fedlabels.method.options import PROBABILITY, Interval, MethodOptions, option


@dataclass(frozen=True)
class _Options(MethodOptions):
    rate: float = option(0.5, "a rate", kind=float, interval=PROBABILITY)
    cap: float | None = option(None, "a cap", kind=float, nullable=True)
    top_k: int = option(1, "how many", kind=int)


def test_none_is_refused_where_the_option_has_a_value_by_default():
    with pytest.raises(FedLabelsError, match="demo option rate cannot be empty; rate "):
        _Options.from_mapping({"rate": None}, "demo")
    assert _Options.from_mapping({"cap": None}, "demo").cap is None


@pytest.mark.parametrize("closed, low_in, high_in", [
    ("both", True, True), ("left", True, False), ("right", False, True),
    ("neither", False, False)])
def test_an_intervals_ends_belong_to_it_as_it_says(closed, low_in, high_in):
    span = Interval(1.0, 2.0, closed)
    assert (1.0 in span, 2.0 in span, 1.5 in span) == (low_in, high_in, True)
    assert 0.999 not in span and 2.001 not in span


@pytest.mark.parametrize("text, value", [
    ("yes", True), ("True", True), (" no ", False), ("FALSE", False), ("none", None),
    ("null", None), ("3", 3), ("0.25", 0.25), (" fedct ", "fedct")])
def test_an_opt_value_is_read_as_the_cli_documents(text, value):
    from fedlabels.method.options import parse_flag_value

    got = parse_flag_value(text)
    assert got == value and type(got) is type(value)


def test_an_option_key_may_be_written_with_dashes():
    # --opt top-k=3 as the flags are spelled; an unknown key still names the valid ones
    assert _Options.from_mapping({"top-k": 3}, "demo").top_k == 3
    with pytest.raises(FedLabelsError, match=r"has no option 'top_n'.*its options: rate, cap, "
                                             "top_k"):
        _Options.from_mapping({"top-n": 3}, "demo")


def test_nan_is_refused_by_an_interval_open_above():
    @dataclass(frozen=True)
    class _Open(MethodOptions):
        scale: float = option(1.0, "a scale", kind=float, interval=Interval(0.0, None))

    with pytest.raises(FedLabelsError, match=r"scale must lie in \[0, inf\], got nan"):
        _Open.from_mapping({"scale": float("nan")}, "demo")
    assert _Open.from_mapping({"scale": 1e300}, "demo").scale == 1e300
