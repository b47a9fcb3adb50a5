"""A value an error shows is bounded: one ``shown`` (core/errors.py) for the message
readers, the torch learners' state and the scores' sample weights."""

from __future__ import annotations

import numpy as np
import pytest

from fedlabels.core.errors import FedLabelsError, shown
from fedlabels.learners.torch_mlp import TorchMLPClassifier


def _state() -> dict[str, object]:
    X, y = np.random.default_rng(0).random((12, 3)), np.arange(12) % 2
    return TorchMLPClassifier(hidden_layer_sizes=(4,), max_steps=1).fit(X, y).state_dict()


def test_a_huge_architecture_in_a_learner_state_is_shown_short() -> None:
    """A state file's ``arch.hidden_layer_sizes`` of 10⁵ values was written out whole in
    the error (torch_state's own ``_shown``); it is cut at 40 characters."""
    state = {**_state(), "arch.hidden_layer_sizes": np.arange(10**5)}
    with pytest.raises(FedLabelsError) as caught:
        TorchMLPClassifier(hidden_layer_sizes=(4,), max_steps=1).load_state_dict(state)
    text = str(caught.value)
    assert "hidden_layer_sizes=(0, 1, 2, 3," in text and "this learner has (4,)." in text
    assert len(text) < 120, text


def test_shown_bounds_every_value_and_shows_an_array_as_its_values() -> None:
    assert shown(np.array([64, 32])) == "(64, 32)"
    assert shown(np.int64(7)) == repr(np.int64(7)) and shown("x" * 10) == repr("x" * 10)
    for huge in ("x" * 10**4, 2**400, np.zeros((300, 300)), list(range(10**4))):
        assert len(shown(huge)) == 40 and shown(huge).endswith("...")
