"""benchmarks/dp_defaults.py: the cases that document dp-pate's former defaults run those
defaults, whatever the defaults are today (docs/privacy.md, Defaults)."""

from __future__ import annotations

import warnings

import pytest

import fedlabels as fl
from conftest import load_benchmark

dp_defaults = load_benchmark("dp_defaults")


def _case(label: str) -> tuple[str, str | None, dict]:
    cases = [c for name in ("pate", "clusters") for c in dp_defaults.CASES[name]]
    (_, method, model, options), = [c for c in cases if c[0] == label]
    return method, model, options


@pytest.fixture(scope="module")
def digits() -> fl.Federation:
    return fl.load_federation("digits", clients=5, seed=0)


@pytest.mark.parametrize("label, selection, teachers", [
    # the pate case: the defaults before cluster queries (one teacher per client, random rows)
    ("dp-pate Q=10 logreg", "random", 5),
    # the first clusters row: today's --epsilon defaults (clusters, 10 teachers per client)
    ("dp-pate default, dt teachers", "clusters", 50),
])
def test_former_default_cases_train_decision_tree_teachers(digits, label, selection, teachers):
    """The rows were measured with dt teachers (dp-pate's default model then); a case that
    left the model to the default now measured logreg teachers, and the pate case cluster
    queries with up to 10 teachers per client."""
    method, model, options = _case(label)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # one-shot method run with R = 20
        result = fl.run(method, digits, model=model, rounds=20, seed=0,
                        options=dp_defaults._options(options, digits), progress=False)
    record = result.to_dict()
    assert set(record["models"]) == {"decision_tree"}
    assert record["pate"]["query_selection"] == selection
    assert record["pate"]["teachers"] == teachers
