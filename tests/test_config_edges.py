"""The edges of a run's configuration (runs.config): combinations refused before any data
loads."""

from __future__ import annotations

import pytest

from fedlabels.core.errors import FedLabelsError
from fedlabels.runs.config import RunConfig

BASE = {"method": "fedct", "dataset": "breast_cancer"}


@pytest.mark.parametrize("keys, refusal", [
    ({"private": 2, "private_per_client": 1}, "set private or private_per_client, not both."),
    ({"target_range": "0,1", "task": "classification"},
     "target_range applies to a regression task only."),
])
def test_combinations_that_contradict_are_refused(keys, refusal):
    with pytest.raises(FedLabelsError) as caught:
        RunConfig.from_mapping({**BASE, **keys}).validate()
    assert str(caught.value) == refusal
    for key in keys:  # each on its own is taken
        if key != "task":
            RunConfig.from_mapping({**BASE, key: keys[key],
                                    **({"task": "regression", "dataset": "diabetes"}
                                       if key == "target_range" else {})}).validate()
