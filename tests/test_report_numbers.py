"""The numbers a person reads in ``fedlabels report``'s summary, checked against independent
oracles (numpy, scipy.stats, a hand count): which runs are averaged, over what, and which
caveat and privacy figure each row shows. Each test kills a hand-made mutation of the
reporting code that the other tests let through (notes: session65_mutate_reporting)."""

from __future__ import annotations

import pytest

from fedlabels.reporting.report import group_runs, summary_rows
from test_report import _result


@pytest.mark.parametrize("delta", [1 / 3000, 1.4e-5, 2.5e-6])
def test_the_page_shows_the_delta_a_run_states_not_one_rounded_to_one_digit(delta):
    """δ was shown with one significant digit: 1/3000 read '3e-04' and 1.4e-5 '1e-05', a
    weaker δ than the guarantee holds; 2.5e-6 read '3e-06'."""
    import re

    from fedlabels.reporting.report_page import cost_columns, guarantee_text

    privacy = {"guarantee": "formal", "epsilon": 1.0, "delta": delta,
               "neighbouring": "record-level", "guarantee_against": "the server"}
    res = _result("dp-fedct", 0, [0.7], privacy=privacy)
    (cell,) = [show for _, key, show in cost_columns() if key == "delta"]
    (stated,) = re.findall(r"δ = ([0-9.e+-]+);", guarantee_text(res))
    shown = [cell(summary_rows(group_runs([res]))[0]), stated]
    assert [float(s) for s in shown] == pytest.approx([delta, delta], rel=1e-5)
