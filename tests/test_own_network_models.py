"""Predicting with your own network after a run: its models file holds the weights and the
factory's name, and loading rebuilds the network only from a module the caller trusts
(``--trust-module``, ``trust_modules=``); a lambda, a tampered weight or an untrusted module
is a one-line refusal, and an untrusted module is never imported."""

from __future__ import annotations

import functools
import json
import sys
import textwrap
import warnings

import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import load_breast_cancer

import fedlabels as fl
from fedlabels.cli import main
from fedlabels.core.errors import FedLabelsError, FedLabelsWarning

MODULE = "mynets_pred"


@pytest.fixture
def nets(tmp_path, monkeypatch):
    """A user's factory module in tmp_path, importable as when the run started."""
    (tmp_path / f"{MODULE}.py").write_text(textwrap.dedent("""
        import torch
        from torch import nn

        def make(n_features, n_classes, hidden=8):
            return nn.Sequential(nn.Linear(n_features, hidden), nn.Tanh(),
                                 nn.Dropout(0.2), nn.Linear(hidden, n_classes))

        def sgd(params):
            return torch.optim.SGD(params, lr=0.05, momentum=0.9)
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, MODULE, raising=False)
    import importlib

    yield importlib.import_module(MODULE)
    sys.modules.pop(MODULE, None)


@pytest.fixture(scope="module")
def rows():
    return load_breast_cancer(as_frame=True).frame.drop(columns="target").iloc[::7]


def _run(model, path):
    result = fl.run("fedct", "breast_cancer", model=model, clients=3, rounds=1, seed=0,
                    progress=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result.save(path)
    return result, [str(w.message) for w in caught if issubclass(w.category, FedLabelsWarning)]


def test_a_saved_own_network_predicts_as_the_run_did_only_when_its_module_is_trusted(
        nets, tmp_path, rows, capsys):
    path = tmp_path / "r.json"
    result, warned = _run(f"module:{MODULE}:make(hidden=6,max_steps=30)", path)
    assert warned == [] and (tmp_path / "r.models.npz").is_file()
    expected = result.predict(rows)
    sys.modules.pop(MODULE)  # loading without trust must not import it again
    with pytest.raises(FedLabelsError) as err:
        fl.load_run(path)
    assert f"--trust-module {MODULE}" in str(err.value) and f"['{MODULE}']" in str(err.value)
    assert len(str(err.value).splitlines()) == 1 and MODULE not in sys.modules
    loaded = fl.load_run(path, trust_modules=[MODULE])
    assert np.array_equal(loaded.predict(rows), expected)
    X = result.preprocessing.transform(rows)
    for mine, again in zip(result.client_models, loaded.client_models, strict=True):
        assert np.array_equal(mine.predict_proba(X), again.predict_proba(X))  # exact, CPU
    rows.to_csv(tmp_path / "new.csv", index=False)
    capsys.readouterr()
    sys.modules.pop(MODULE)
    out = tmp_path / "p.csv"
    assert main(["predict", str(path), str(tmp_path / "new.csv"), "-o", str(out)]) == 2
    message = capsys.readouterr().err
    assert len(message.splitlines()) == 1 and f"--trust-module {MODULE}" in message
    assert MODULE not in sys.modules and not out.exists()
    assert main(["predict", str(path), str(tmp_path / "new.csv"), "-o", str(out),
                 "--trust-module", MODULE]) == 0
    assert np.array_equal(pd.read_csv(out)["prediction"].to_numpy(), expected)
    with pytest.raises(FedLabelsError, match="list of module names"):
        fl.load_run(path, trust_modules=MODULE)


def test_a_python_factory_is_rebuilt_with_its_keywords_and_a_lambda_is_named(nets, tmp_path,
                                                                            rows):
    model = fl.TorchModel(functools.partial(nets.make, hidden=5), optimizer=nets.sgd,
                          max_steps=20)
    result, warned = _run(model, tmp_path / "p.json")
    assert warned == []
    loaded = fl.load_run(tmp_path / "p.json", trust_modules=[MODULE])
    assert loaded.client_models[0].model_[0].out_features == 5
    assert np.array_equal(loaded.predict(rows), result.predict(rows))
    lam = fl.TorchModel(lambda n_features, n_classes: nets.make(n_features, n_classes),
                        max_steps=5)
    _, warned = _run(lam, tmp_path / "l.json")
    assert len(warned) == 1 and "<lambda> cannot be rebuilt" in warned[0]
    with pytest.raises(FedLabelsError, match=r"<lambda> cannot be rebuilt .*importable "
                                             r"module") as err:
        fl.load_run(tmp_path / "l.json", trust_modules=[MODULE])
    assert len(str(err.value).splitlines()) == 1


def _tamper(models_file, change):
    """Rewrite a models file's manifest and arrays with ``change(manifest, arrays)``."""
    with np.load(models_file, allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    manifest = json.loads(str(arrays.pop("manifest")[()]))
    change(manifest, arrays)
    np.savez(models_file, manifest=np.array(json.dumps(manifest)), **arrays)


def _learners(manifest):
    payload = manifest["payload"]
    return payload["v"][payload["k"].index("models")]


def test_a_tampered_own_network_file_is_refused_in_one_line(nets, tmp_path, rows, capsys):
    path = tmp_path / "r.json"
    _run(f"module:{MODULE}:make(max_steps=5)", path)
    models_file = tmp_path / "r.models.npz"
    original = models_file.read_bytes()

    def wrong_shape(manifest, arrays):
        state = _learners(manifest)[1]["state"]
        entry = state["v"][state["k"].index("model.0.weight")]
        arrays[f"a{entry['i']}"] = np.zeros((3, 3), dtype=np.float32)

    _tamper(models_file, wrong_shape)
    loaded = fl.load_run(path, trust_modules=[MODULE])  # the models are built when used
    with pytest.raises(FedLabelsError, match=r"model.0.weight has shape \(3, 3\)") as err:
        loaded.predict(rows)
    assert len(str(err.value).splitlines()) == 1

    def other_module(manifest, arrays):
        for learner in _learners(manifest):
            learner["network"]["module"] = "evil_nets"

    models_file.write_bytes(original)
    _tamper(models_file, other_module)
    rows.to_csv(tmp_path / "x.csv", index=False)
    capsys.readouterr()
    assert main(["predict", str(path), str(tmp_path / "x.csv"), "-o", str(tmp_path / "o.csv"),
                 "--trust-module", MODULE]) == 2
    message = capsys.readouterr().err
    assert len(message.splitlines()) == 1 and "module:evil_nets:make" in message
    assert "--trust-module evil_nets" in message and "evil_nets" not in sys.modules

    def imported_function(manifest, arrays):  # reachable from the trusted module, not its own
        for learner in _learners(manifest):
            learner["network"]["name"] = "torch.load"

    models_file.write_bytes(original)
    _tamper(models_file, imported_function)
    with pytest.raises(FedLabelsError, match=rf"names {MODULE}:torch.load, which is not a "
                                             rf"function or class that module") as err:
        fl.load_run(path, trust_modules=[MODULE]).predict(rows)
    assert len(str(err.value).splitlines()) == 1


@pytest.mark.parametrize(("change", "refused"), [
    ("drop", r"lacks the entry 'model\.0\.weight'"),
    ("add", r"weights do not fit network .*entries 9\.weight differ"),
])
def test_an_own_network_file_missing_a_weight_or_holding_another_is_refused(
        nets, tmp_path, rows, change, refused):
    """The stored weights must be exactly the network's: one left out would keep the freshly
    built layer's random values, one more is no weight of this network."""
    path = tmp_path / "r.json"
    _run(f"module:{MODULE}:make(max_steps=5)", path)

    def edit(manifest, arrays):
        state = _learners(manifest)[1]["state"]
        at = state["k"].index("model.0.weight")
        if change == "drop":
            del state["k"][at], state["v"][at]
        else:
            state["k"].append("model.9.weight")
            state["v"].append(state["v"][at])

    _tamper(tmp_path / "r.models.npz", edit)
    loaded = fl.load_run(path, trust_modules=[MODULE])
    with pytest.raises(FedLabelsError, match=refused) as err:
        loaded.predict(rows)
    assert len(str(err.value).splitlines()) == 1
