"""The public API's annotations are what a typed user's checker sees (the package is
``py.typed``): no ``Any`` where the value has a known type, and no parameter typed narrower
than what the function accepts."""

from __future__ import annotations

import typing

import pandas as pd

from fedlabels.results import RunResult


def test_to_frame_is_typed_as_the_dataframe_it_returns() -> None:
    # it was ``Any``: a checker with pandas' types (pandas-stubs, pyright) lost the frame
    hints = typing.get_type_hints(RunResult.to_frame, localns={"pd": pd})
    assert hints["return"] is pd.DataFrame
