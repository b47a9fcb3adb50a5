"""On imbalanced classes a model that finds the rare class scores below the majority
class's accuracy: the caveat says so, and claims that the models learnt next to nothing only
where their balanced accuracy is not clearly above chance either."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score, balanced_accuracy_score, confusion_matrix

import fedlabels as fl
from fedlabels.results.caveats import chance_warning

NOTHING = "the models learnt next to nothing"


def _clinical(y_true: np.ndarray, predictions: list[np.ndarray]) -> dict:
    """A ``clinical`` entry as a run records it, computed with scikit-learn."""
    bas = [balanced_accuracy_score(y_true, p) for p in predictions]
    return {"metrics": {"balanced_accuracy": {"mean": float(np.mean(bas))}},
            "confusion_matrices": [confusion_matrix(y_true, p, labels=[0, 1]).tolist()
                                   for p in predictions]}


def _baseline(y_true: np.ndarray) -> dict:
    p = float(np.mean(y_true == 0))
    return {"class": 0, "name": "no", "accuracy": p,
            "half_width_95": 1.96 * np.sqrt(p * (1 - p) / len(y_true))}


def test_a_model_that_finds_the_rare_class_is_not_said_to_have_learnt_nothing():
    rng = np.random.default_rng(0)
    y = np.r_[np.zeros(540, int), np.ones(60, int)]
    # recall 0.7 on 'no', 0.6 on 'yes': accuracy 0.69, far below the baseline's 0.90
    pred = np.where(y == 0, rng.random(600) > 0.7, rng.random(600) < 0.6).astype(int)
    acc = accuracy_score(y, pred)
    text = chance_warning(acc, _baseline(y), _clinical(y, [pred, pred]))
    assert text is not None and f"mean accuracy {acc:.3f} is below" in text
    assert NOTHING not in text
    ba = balanced_accuracy_score(y, pred)
    assert f"balanced accuracy {ba:.3f} ±" in text and "above chance, 0.500" in text
    assert "trade accuracy on the commonest class" in text


@pytest.mark.parametrize("rate", [0.0, 0.3])
def test_a_constant_or_random_answer_has_learnt_next_to_nothing(rate):
    rng = np.random.default_rng(1)
    y = np.r_[np.zeros(540, int), np.ones(60, int)]
    pred = (rng.random(600) < rate).astype(int)  # independent of the truth
    text = chance_warning(accuracy_score(y, pred), _baseline(y), _clinical(y, [pred]))
    assert text is not None and text.endswith(NOTHING)


def test_fl_run_of_a_class_weighted_model_on_an_imbalanced_table_says_it_learnt():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(1500, 4))
    y = np.where(X[:, 0] + rng.normal(scale=1.0, size=1500) > 2.0, "yes", "no")
    fed = fl.make_federation(X, y, clients=3, seed=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = fl.run("fedct", fed, model=LogisticRegression(class_weight="balanced"),
                        rounds=1, seed=0, progress=False)
    said = [str(w.message) for w in caught if issubclass(w.category, fl.RunCaveatWarning)]
    assert result.mean_accuracy < result.clinical["baseline"]["accuracy"]
    assert result.clinical["metrics"]["balanced_accuracy"]["mean"] > 0.7
    assert len(said) == 1 and "below the majority-class baseline" in said[0]
    assert NOTHING not in said[0] and "balanced accuracy" in said[0]



def _result(y: np.ndarray, pred: np.ndarray) -> object:
    """A classification run's result as learnt_note reads it, of one client."""
    from types import SimpleNamespace

    c = int(y.max()) + 1
    p = float(np.bincount(y).max() / y.size)
    clinical = {"metrics": {"balanced_accuracy": {"mean": balanced_accuracy_score(y, pred)}},
                "confusion_matrices": [confusion_matrix(y, pred, labels=range(c)).tolist()],
                "baseline": {"class": 0, "accuracy": p,
                             "half_width_95": 1.96 * np.sqrt(p * (1 - p) / y.size)}}
    return SimpleNamespace(extra={"clinical": clinical},
                           final={"mean_accuracy": accuracy_score(y, pred)},
                           federation={"n_test": y.size,
                                       "client_class_counts": [np.bincount(y).tolist()]})


def _balanced(hits: int) -> object:
    """10 balanced classes of 200 test rows; a model that answers class 0 but for ``hits``
    rows of each other class: accuracy within noise of the majority class's 0.100 ± 0.013,
    balanced accuracy (1 + 9 · hits / 200) / 10 above chance by the test set."""
    y = np.repeat(np.arange(10), 200)
    pred = np.zeros(2000, int)
    for k in range(1, 10):
        pred[np.flatnonzero(y == k)[:hits]] = k
    return _result(y, pred)


def test_the_learnt_note_says_imbalanced_only_on_imbalanced_classes():
    """DP-FedAvg on digits (10 balanced classes) near chance was said to have learnt
    '(imbalanced classes)'."""
    from fedlabels.reporting.plots import learnt_note
    from fedlabels.results.caveats import balanced_above_chance

    run = _balanced(2)
    ba, half, _ = balanced_above_chance(run.extra["clinical"])
    assert learnt_note([run]) == (f"\n    balanced accuracy {ba:.3f} ± {half:.3f} (test set), "
                                  "above chance 0.100: it learnt")
    rng = np.random.default_rng(0)  # 540 'no', 60 'yes', recall 0.7 and 0.6
    y = np.r_[np.zeros(540, int), np.ones(60, int)]
    pred = np.where(y == 0, rng.random(600) > 0.7, rng.random(600) < 0.6).astype(int)
    assert learnt_note([_result(y, pred)]).endswith("it learnt (imbalanced classes)")


def test_the_learnt_note_over_seeds_needs_their_interval_above_chance():
    """Each seed's run above chance by its test set is not enough for several seeds: their
    mean's 95 % t-interval must lie above chance too (oracle: scipy's one-sample t-test)."""
    from scipy import stats

    from fedlabels.reporting.plots import learnt_note

    for hits, said in (((1, 1, 2), False), ((2, 2, 1), True)):
        runs = [_balanced(h) for h in hits]
        bas = [r.extra["clinical"]["metrics"]["balanced_accuracy"]["mean"] for r in runs]
        assert all(learnt_note([r]) for r in runs)  # each above chance on its own
        p = stats.ttest_1samp(bas, 0.1, alternative="greater").pvalue
        assert bool(p < 0.025) is said
        note = learnt_note(runs)
        assert bool(note) is said and ("(3 seeds), above chance 0.100" in note) is said


def test_the_caveat_advises_by_whether_the_classes_are_imbalanced():
    """The caveat said 'on imbalanced classes judge them by balanced accuracy' of a run on
    10 balanced classes too; it words its advice by caveats.classes_imbalanced."""
    from fedlabels.results.caveats import classes_imbalanced, run_warnings

    rng = np.random.default_rng(0)  # 540 'no', 60 'yes', recall 0.7 and 0.6
    y = np.r_[np.zeros(540, int), np.ones(60, int)]
    pred = np.where(y == 0, rng.random(600) > 0.7, rng.random(600) < 0.6).astype(int)
    for run, imbalanced in ((_balanced(2), False), (_result(y, pred), True)):
        run.config, run.rounds = {}, []
        assert classes_imbalanced(run) is imbalanced
        (said,) = [t for t in run_warnings(run) if "majority-class baseline" in t]
        assert "they learnt" in said
        assert ("on imbalanced classes judge them by" in said) is imbalanced
        assert ("the classes are balanced" in said) is not imbalanced
