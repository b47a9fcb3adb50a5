"""Issue 3: the clients' final models can be saved and inspected (API and CLI)."""

from __future__ import annotations

import json

import pytest

import fedlabels as fl
from fedlabels.cli import main
from fedlabels.core.files import models_path
from fedlabels.results.models_file import load_models

TEAM = "dt,rf(n_estimators=5),rulefit(n_estimators=20),xgboost(n_estimators=5),logreg"


@pytest.fixture(scope="module")
def mixed_result():
    fed = fl.load_federation("breast_cancer", clients=5, seed=0)
    return fl.run("fedct", fed, model=TEAM, rounds=1, seed=0, progress=False)


def test_inspect_models_describes_every_client(mixed_result):
    desc = fl.inspect_models(mixed_result, top=5)
    assert [d["kind"] for d in desc] == ["decision_tree", "random_forest", "rulefit",
                                         "xgboost", "linear"]
    names = set(mixed_result.feature_names)
    assert "mean radius" in names
    tree = desc[0]
    assert tree["depth"] >= 1 and "|--- " in tree["text"]
    assert any(n in tree["text"] for n in names)  # real feature names, not x0..x29
    assert "class: 1" in tree["text"] or "class: 0" in tree["text"]
    for d in desc:
        assert d["classes_seen"] == ["0 (malignant)", "1 (benign)"]
        assert 0 < len(d["feature_importances"]) <= 5
        assert all(n in names for n, _ in d["feature_importances"])
    rules = desc[2]["rules"]
    assert rules and {"class", "rule", "coef", "support"} <= set(rules[0])
    assert any(n in rules[0]["rule"] for n in names)
    assert desc[2]["n_rules"] <= 200
    assert desc[3]["n_trees"] == 5
    assert any(n in desc[3]["text"] for n in names)  # the first tree, with feature names
    assert set(desc[4]["coefficients"]) == {"1 (benign)"}
    json.dumps(desc)  # JSON-friendly


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_mlp_models_are_described():
    fed = fl.load_federation("wine", clients=3, seed=0)
    result = fl.run("fedct", fed, model="mlp(hidden=8),sk_mlp(hidden=8,max_iter=30),dt", rounds=1,
                    period=5, seed=0, progress=False)
    desc = fl.inspect_models(result, client=0)
    assert len(desc) == 1 and desc[0]["kind"] == "opaque"
    assert desc[0]["n_parameters"] == 13 * 8 + 8 + 8 * 3 + 3
    # a network: its layers and what it trains, no thresholds' units to speak of
    assert "layers: Linear(13->8), ReLU, Linear(8->3)" in desc[0]["text"]
    assert "trained parameters" in desc[0]["text"] and desc[0]["units"] is None
    assert fl.inspect_models(result)[1]["n_parameters"] == 13 * 8 + 8 + 8 * 3 + 3
    with pytest.raises(fl.FedLabelsError, match="client 7 does not exist"):
        fl.inspect_models(result, client=7)


def test_run_saves_models_and_inspect_prints_them(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["run", "--model", "dt,rulefit(n_estimators=10),dt,xgb(n_estimators=3),dt",
                 "--rounds", "1", "--no-progress", "--output", str(out)]) == 0
    saved = models_path(out)
    assert saved.name == "r.models.npz" and saved.is_file()
    assert not list(tmp_path.glob(".*tmp"))  # atomic write left no temporary file
    payload = load_models(out)
    assert len(payload["models"]) == 5 and "mean radius" in payload["feature_names"]
    capsys.readouterr()
    assert main(["inspect", str(out), "--max-lines", "5"]) == 0
    text = capsys.readouterr().out
    assert "== client 0: decision_tree" in text and "|--- " in text
    assert "== client 1: rulefit(n_estimators=10)" in text and "if " in text
    assert "feature importances:" in text and "more lines" in text
    assert main(["inspect", str(saved), "--client", "3", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [d["kind"] for d in data] == ["xgboost"]
    # the run's other files name it too (said "no saved models at r.checkpoint.models.npz")
    for sibling in ("r.rounds.csv", "r.checkpoint.npz", "r.checkpoint.journal"):
        assert models_path(tmp_path / sibling) == saved
        assert main(["inspect", str(tmp_path / sibling), "--client", "3", "--json"]) == 0
        assert [d["kind"] for d in json.loads(capsys.readouterr().out)] == ["xgboost"]


def test_inspect_errors(tmp_path, capsys):
    assert main(["inspect", str(tmp_path / "missing.json")]) == 2
    assert "missing.json does not exist" in capsys.readouterr().err  # not "no models"
    (tmp_path / "bare.json").write_text("{}")
    assert main(["inspect", str(tmp_path / "bare.json")]) == 2
    assert "no saved models at" in capsys.readouterr().err
    bogus = tmp_path / "x.models.npz"
    import numpy as np

    np.savez(bogus, manifest=np.array('{"not": "ours"}'))
    assert main(["inspect", str(bogus)]) == 2
    assert "is not a fedlabels models file" in capsys.readouterr().err
    loaded = fl.RunResult(method="fedct", dataset="d", seed=0, config={}, federation={},
                          models=[], rounds=[], communication={}, wall_seconds=0.0)
    with pytest.raises(fl.FedLabelsError, match="holds no client models"):
        fl.inspect_models(loaded)


def test_a_single_class_client_model_is_described_as_constant():
    import numpy as np

    from fedlabels.learners import build_learner, parse_model_spec
    from fedlabels.reporting.inspect import describe_model

    model = build_learner(parse_model_spec("xgb(n_estimators=3)")[0], n_classes=3,
                          random_state=0).fit(np.zeros((4, 2)), np.full(4, 2))
    desc = describe_model(model, ["a", "b"], ["x", "y", "z"])
    assert desc["kind"] == "constant" and "'z'" in desc["text"]


def test_tree_thresholds_are_in_the_data_own_units():
    """The printed threshold splits raw rows exactly as the model splits the scaled ones."""
    import re

    import numpy as np
    from sklearn.datasets import load_wine

    X, y = load_wine(return_X_y=True)
    fed = fl.make_federation(X, y, clients=3, unlabeled=60, partition="powerlaw:1.5",
                             seed=1)
    result = fl.run("fedct", fed, model="dt", rounds=1, seed=1, progress=False)
    desc = fl.inspect_models(result, client=0)[0]
    assert "data's own units" in desc["units"]
    feature, _, value = re.match(r"\|--- (x\d+) (<=|>)\s+(\S+)", desc["text"]).groups()
    j, threshold = int(feature[1:]), float(value)
    assert X[:, j].min() <= threshold <= X[:, j].max()  # a raw value, not a z-score
    tree = result.client_models[0]
    tree = getattr(tree, "estimator_", tree)
    Z = result.preprocessing.transform(X)
    goes_left = tree.decision_path(Z).toarray()[:, tree.tree_.children_left[0]] == 1
    near = np.isclose(X[:, j], threshold, rtol=1e-3)
    np.testing.assert_array_equal(goes_left[~near], X[~near, j] <= threshold)


def test_inspect_says_when_inputs_are_principal_components(capsys):
    result = fl.run("fedct", "breast_cancer", model="dt", rounds=1, public_pca=4,
                    progress=False)
    desc = fl.inspect_models(result, client=1)[0]
    assert "principal components" in desc["units"] and "pc" in desc["text"]



def _former_text(tree, names, scaling, **kwargs):
    """The former tree text: export_text with the list of every name, then each threshold
    of the feature so named in the data's units."""
    import re

    from sklearn.tree import export_text

    text = export_text(tree, feature_names=list(names), **kwargs)
    if scaling is None:
        return text
    index = {n: i for i, n in enumerate(names)}

    def undo(m):
        j = index[m.group(2)]
        value = float(m.group(4)) * float(scaling[1][j]) + float(scaling[0][j])
        return f"{m.group(1)}{m.group(2)} {m.group(3)} {value:.4g}"

    return re.sub(r"^(.*?\|--- )(.+) (<=|>)\s+(-?[\d.]+(?:e[-+]?\d+)?)$", undo, text,
                  flags=re.M)


@pytest.mark.parametrize("scaled", [False, True])
def test_a_trees_text_makes_only_the_pixel_names_it_splits_on(scaled, monkeypatch):
    """inspect built a list of every feature's name for export_text (27 million pixel names
    for 3 x 3000 x 3000 images); the text is the former one, and only the names of the
    features the tree splits on are made."""
    import numpy as np
    from sklearn.tree import DecisionTreeClassifier

    from fedlabels.data.pixel_names import PixelNames
    from fedlabels.reporting.inspect import describe_model

    rng = np.random.default_rng(0)
    X = rng.random((80, 3 * 5 * 4))
    y = (X[:, 7] > 0.5).astype(int) + (X[:, 41] > 0.3)
    tree = DecisionTreeClassifier(max_depth=3, random_state=0).fit(X, y)
    names = PixelNames((3, 5, 4))
    scaling = (rng.random(60), rng.random(60) + 0.5) if scaled else None
    want = _former_text(tree, names, scaling, class_names=["a", "b", "c"],
                        decimals=6 if scaled else 3)
    made: list[int] = []
    real = PixelNames._name
    monkeypatch.setattr(PixelNames, "_name", lambda self, i: made.append(i) or real(self, i))
    monkeypatch.setattr(PixelNames, "__iter__", lambda self: pytest.fail("every name made"))
    got = describe_model(tree, names, ["a", "b", "c"], scaling=scaling)
    assert got["text"] == want
    assert made and set(made) <= {int(f) for f in tree.tree_.feature if f >= 0}
