"""benchmarks/fedct_label_ceiling.py: its clients are the clients a run builds, trained with
FedCT's step, and each labeller labels U as it says."""

from __future__ import annotations

import numpy as np
import pytest

import fedlabels as fl
from conftest import load_benchmark

SETTING = {"dataset": "digits", "clients": 3, "unlabeled": 300, "private": 900, "test": 300,
           "model": "mlp(hidden=32)"}


def load_script():
    return load_benchmark("fedct_label_ceiling")


@pytest.fixture(scope="module")
def row():
    return load_script().one_seed(SETTING, "digits", seed=3, steps=40)


def test_local_only_clients_are_those_of_a_local_run(row):
    """Same seeds, same steps: the script's local models are the run's (an independent
    path through the session builder and the run loop)."""
    fed = fl.load_federation("digits", clients=3, unlabeled=300, private=900, test=300, seed=3)
    res = fl.run("local", fed, model="mlp(hidden=32)", rounds=4, period=10, seed=3,
                 eval_every=4, progress=False)
    assert row["local_acc"] == pytest.approx(res.final["mean_accuracy"], abs=1e-12)


def test_labellers(row):
    labellers = row["labellers"]
    assert labellers["true"]["label_acc_on_U"] == 1.0
    # a vote of three models trained on a third of the data each is better than one of them,
    # and the pooled labeller (all private data, three times the steps) better still
    assert labellers["own"]["label_acc_on_U"] < labellers["vote"]["label_acc_on_U"] \
        < labellers["pooled"]["label_acc_on_U"] < 1.0
    # better labels make better clients here: true labels on U beat self-training
    assert labellers["true"]["student_acc"] > labellers["own"]["student_acc"]
    assert 0.5 < row["pooled_test_acc"] <= 1.0


def test_the_summary_lists_every_labeller(row):
    def with_true(seed: int, acc: float) -> dict:
        labellers = {**row["labellers"], "true": {"label_acc_on_U": 1.0, "student_acc": acc}}
        return {**row, "seed": seed, "labellers": labellers}

    table = load_script().summarise([with_true(3, 0.80), with_true(4, 0.82),
                                     with_true(5, 0.84)])
    for labeller in ("own", "vote", "pooled", "true"):
        assert f"| digits | 40 | {labeller} | 3,4,5 |" in table
    half = 4.302653 * 0.02 / np.sqrt(3)  # t(0.975, 2) x s / sqrt(3)
    assert f"| digits | 40 | true | 3,4,5 | 1.0000 | 0.8200 ± {half:.4f} |" in table
