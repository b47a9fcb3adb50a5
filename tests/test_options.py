"""Declared method options: types, ranges, choices, unknown keys, generated descriptions."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from fedlabels.core.errors import FedLabelsError
from fedlabels.method.options import (
    OPTION_USERS,
    Interval,
    MethodOptions,
    option,
    parse_flag_value,
)


@dataclass(frozen=True)
class Toy(MethodOptions):
    rate: float = option(0.5, "a rate", kind=float, interval=Interval(0, 1, "right"))
    count: int = option(3, "a count", kind=int, interval=Interval(1, None))
    mode: str = option("a", "a mode", kind=str, choices=("a", "b", "none"))
    cap: float | None = option(None, "optional cap", kind=float, nullable=True)

    def check(self) -> None:
        if self.mode == "b" and self.cap is None:
            raise FedLabelsError("mode b needs cap")


def test_defaults_and_valid_values():
    assert Toy.from_mapping({}, "toy") == Toy()
    opts = Toy.from_mapping({"rate": 1, "count": 7, "mode": "b", "cap": 2}, "toy")
    assert opts.rate == 1.0 and isinstance(opts.rate, float) and opts.count == 7
    assert opts.given() == {"rate": 1.0, "count": 7, "mode": "b", "cap": 2.0}
    assert Toy.from_mapping({"mode": None}, "toy").mode == "none"  # --opt mode=none


@pytest.mark.parametrize("data, match", [
    ({"rat": 0.1}, r"no option 'rat' \(did you mean 'rate'\?\); its options: rate, count"),
    ({"rate": 0}, r"rate must lie in \(0, 1\]"),
    ({"rate": float("nan")}, "rate must be finite"),
    ({"count": 0}, r"count must lie in \[1, inf\]"),
    ({"count": 2.5}, "count must be an integer"),
    ({"count": True}, "count must be an integer"),
    ({"mode": "c"}, "mode must be one of a, b, none"),
    ({"rate": "x"}, "rate must be a number"),
    ({"mode": "b"}, "mode b needs cap"),
])
def test_invalid_values_are_one_line_errors(data, match):
    with pytest.raises(FedLabelsError, match=match) as info:
        Toy.from_mapping(data, "toy")
    assert "\n" not in str(info.value)


def test_unknown_key_names_the_methods_that_take_it(monkeypatch):
    # a copy, so the made-up method does not leak into later tests in this process
    monkeypatch.setitem(OPTION_USERS, "epsilon", [*OPTION_USERS.get("epsilon", []), "dp-toy"])
    with pytest.raises(FedLabelsError, match=r"'epsilon' applies to .*dp-toy"):
        Toy.from_mapping({"epsilon": 1.0}, "toy")


def test_interval_membership_and_text():
    assert 0 not in Interval(0, 1, "right") and 1 in Interval(0, 1, "right")
    assert 0 in Interval(0, 1, "left") and 1 not in Interval(0, 1, "left")
    assert 5 in Interval(1, None) and str(Interval(0, 1, "neither")) == "(0, 1)"


def test_descriptions_come_from_the_declarations():
    lines = [info.describe() for info in Toy.declared()]
    assert lines[0] == "rate (float; in (0, 1]; default 0.5): a rate"
    assert "one of a, b, none" in lines[2]
    assert Toy.names() == ["rate", "count", "mode", "cap"]


def test_every_field_must_be_declared():
    @dataclass(frozen=True)
    class Bad(MethodOptions):
        x: int = 1

    with pytest.raises(TypeError, match="not declared"):
        Bad.declared()


@pytest.mark.parametrize("text, value", [("3", 3), ("0.5", 0.5), ("true", True),
                                         ("none", None), ("abc", "abc")])
def test_flag_values(text, value):
    assert parse_flag_value(text) == value
