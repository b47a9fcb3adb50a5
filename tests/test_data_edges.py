"""The edges of data loading a user meets: a label written "NA", gaps filled or refused,
a target range's ends, a separator's length."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedlabels.core.errors import FedLabelsError
from fedlabels.data.csv_table import read_csv_table


def test_a_label_written_na_is_missing_even_as_the_text_column(tmp_path):
    # the texts-as-written read is for the feature column: a target "NA" stays a gap,
    # never a class named "NA"
    table = tmp_path / "notes.csv"
    table.write_text("note,label\nhello,a\nworld,NA\nfoo,b\n")
    with pytest.raises(FedLabelsError, match=r"1 row\(s\) without a label in column "
                                             r"'label' \(data row\(s\) 2\)"):
        read_csv_table(Path(table), "label", text_column="label")


@pytest.mark.parametrize("sep", ["", ";;", "\\n"])
def test_a_separator_must_be_one_character(sep):
    # an empty --sep '' must not fall back to the default comma unnoticed
    from fedlabels.data.csv_table import normalise_sep

    with pytest.raises(FedLabelsError, match="sep must be one character"):
        normalise_sep(sep)
    assert normalise_sep("\\t") == "\t" and normalise_sep(";") == ";"


@pytest.mark.parametrize("given", ["1,1", (0.5, 0.5), "2,1"])
def test_a_target_range_needs_its_low_end_below_its_high_end(given):
    # LO == HI is no range to scale the targets into
    from fedlabels.data.targets import parse_target_range

    with pytest.raises(FedLabelsError, match="target range needs finite LO < HI"):
        parse_target_range(given)
    assert parse_target_range("0,1") == (0.0, 1.0)


def test_a_column_u_never_observed_is_filled_with_zero():
    from fedlabels.data.gaps import fill_gaps, public_medians

    nan = float("nan")
    public = np.array([[1.0, nan], [3.0, nan], [nan, nan], [10.0, nan]])
    fill = public_medians(public)
    assert fill.tolist() == [3.0, 0.0]  # median of 1, 3, 10; none seen: 0
    rows = np.array([[nan, nan], [2.0, 5.0]], dtype=np.float32)
    filled = fill_gaps(rows, fill)
    assert filled.dtype == np.float32 and filled.tolist() == [[3.0, 0.0], [2.0, 5.0]]
