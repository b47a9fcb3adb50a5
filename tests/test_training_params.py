"""One check of the torch learners' training parameters, on the spec path (a ``--model``
string, a ``ModelSpec``) and the learner path (``fit``): each case here was taken by one path
and refused by the other, or refused by both in other words."""

from __future__ import annotations

import numpy as np
import pytest

from fedlabels.cli import main
from fedlabels.core.errors import FedLabelsError
from fedlabels.learners.model_spec import ModelSpec
from fedlabels.learners.specs import build_learner, parse_model_spec
from fedlabels.learners.torch_mlp import TorchMLPClassifier
from fedlabels.learners.torch_net import TorchNetClassifier

_X = np.random.default_rng(0).normal(size=(24, 4)).astype(np.float32)
_Y = np.arange(24) % 2


def _flat(n_features: int, n_classes: int):  # a network of your own (flat rows)
    from torch import nn

    return nn.Linear(n_features, n_classes)


def _learners(params: dict):
    """The MLP and a network learner with ``params`` under the learners' own names."""
    named = {"max_steps": 2, **{{"lr": "learning_rate"}.get(k, k): v
                                for k, v in params.items()}}
    yield TorchMLPClassifier(hidden_layer_sizes=4, **named)
    yield TorchNetClassifier(network=_flat, **named)


def _spec_error(spec: str) -> str:
    with pytest.raises(FedLabelsError) as info:
        parse_model_spec(spec)
    return str(info.value)


def _fit_error(learner) -> str:
    with pytest.raises(FedLabelsError) as info:
        learner.fit(_X, _Y)
    return str(info.value)


@pytest.mark.parametrize("params, needle", [
    ({"lr": "inf"}, r"lr\)? must be a finite number > 0, got '?inf'?"),
    ({"lr": "nan"}, r"lr\)? must be a finite number > 0"),
    ({"weight_decay": "inf"}, r"weight_decay must be a finite number >= 0, got '?inf'?"),
    ({"warm_start": "1"}, r"warm_start must be true or false, got '?1'?"),
    ({"max_steps": "true"}, r"max_steps must be an integer >= 1, got '?True'?"),
])
def test_a_value_is_refused_alike_by_a_spec_and_by_its_learner(params, needle):
    """lr=inf and weight_decay=inf passed a spec (the learner refused them when fitted),
    warm_start=1 passed the learner (the spec refused it), and the two said "int" and
    "integer": one check now refuses each on both paths in the same words."""
    import re

    body = ",".join(f"{k}={v}" for k, v in params.items())
    for kind in ("mlp", "cnn"):
        assert re.search(needle, _spec_error(f"{kind}({body})")), kind
    for learner in _learners({k: _value(v) for k, v in params.items()}):
        message = _fit_error(learner)
        assert re.search(needle, message) and "\n" not in message, message


def _value(text: str):
    return {"inf": float("inf"), "nan": float("nan"), "1": 1, "true": True}[text]


def test_numpy_numbers_are_taken_by_a_spec_as_by_its_learner():
    """A spec refused np.float32(0.01) and np.int64(2) ("must be a number > 0, got
    np.float32(0.01)"), which the learner and scikit-learn's grid searches take."""
    numpy_params = {"lr": np.float32(0.01), "weight_decay": np.float64(0.0),
                    "max_steps": np.int64(2), "batch_size": np.int32(8),
                    "warm_start": np.False_}
    for kind in ("mlp", "cnn", "module"):
        params = dict(numpy_params, **({"factory": f"{__name__}:_flat"}
                                       if kind == "module" else {}))
        if kind == "cnn":
            params["shape"] = (1, 2, 2)
        learner = build_learner(ModelSpec(kind, params), n_classes=2, random_state=0)
        assert learner.fit(_X, _Y).predict(_X).shape == _Y.shape
    for learner in _learners(numpy_params):
        assert learner.fit(_X, _Y).predict(_X).shape == _Y.shape


def test_predict_batch_size_none_is_what_the_learner_takes_on_both_paths():
    """A network learner chooses its rows per pass by device with predict_batch_size=None,
    which cnn(predict_batch_size=none) refused; the MLP has no such choice and took None at
    fit, to fail at predict."""
    spec = parse_model_spec("cnn(predict_batch_size=none)")[0]
    assert spec.params == {"predict_batch_size": None}
    assert "predict_batch_size must be an integer >= 1, got 'None'" in _spec_error(
        "mlp(predict_batch_size=none)")
    mlp, net = _learners({"predict_batch_size": None})
    assert "predict_batch_size must be an integer >= 1, got None" in _fit_error(mlp)
    assert net.fit(_X, _Y).predict(_X).shape == _Y.shape


def test_the_command_line_refuses_an_infinite_learning_rate_before_any_data(tmp_path,
                                                                             capsys):
    code = main(["run", "--dataset", "digits", "--model", "mlp(lr=inf)", "--output",
                 str(tmp_path / "r.json"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "lr must be a finite number > 0, got 'inf'" in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "r.json").exists()


def test_the_text_learner_and_its_spec_refuse_an_infinite_learning_rate():
    """minilm(lr=inf) passed the spec and TransformerClassifier(learning_rate=inf) had no
    check at all (Adam takes inf); both are refused before a model is loaded."""
    from fedlabels.learners.transformer import TransformerClassifier

    assert "lr must be a finite number > 0, got 'inf'" in _spec_error("minilm(lr=inf)")
    with pytest.raises(FedLabelsError, match=r"learning_rate \(lr\) must be a finite "
                                             r"number > 0, got inf"):
        TransformerClassifier(learning_rate=float("inf"), model_dir="/nonexistent").fit(
            ["a b", "c d"], [0, 1])


@pytest.mark.parametrize("spec, needle", [
    (ModelSpec("mlp", {"lr": float("inf")}),
     r"^model spec 'mlp\(lr=inf\)': lr must be a finite number > 0, got 'inf'\.$"),
    (ModelSpec("cnn", {"warm_start": 1}),
     r"^model spec 'cnn\(warm_start=1\)': warm_start must be true or false, got '1'\.$"),
    (ModelSpec("mlpp"), r"^unknown model 'mlpp' \(did you mean 'mlp'\?\); available: "),
])
def test_a_model_spec_given_in_python_is_checked_as_its_string_before_any_data(
        monkeypatch, spec, needle):
    """fl.run(model=ModelSpec(...)) skipped the spec's check: lr=inf failed only when the
    first client fitted, after the data loaded, and an unknown name or an alias (dt) was a
    bare KeyError; it is checked as its string is, before the data loads."""
    import fedlabels as fl
    import fedlabels.api

    def no_data(*args, **kwargs):
        raise AssertionError("the data was loaded before the model spec was checked")

    monkeypatch.setattr(fedlabels.api, "federation_for", no_data)
    with pytest.raises(FedLabelsError, match=needle):
        fl.run("fedct", "breast_cancer", model=spec, rounds=1, progress=False)


def test_a_model_spec_given_by_an_alias_runs_as_its_model():
    from fedlabels.learners.specs import as_models

    assert as_models(ModelSpec("dt", {"max_depth": 3})) == [
        ModelSpec("decision_tree", {"max_depth": 3})]


def test_a_run_records_a_model_spec_as_the_string_that_names_it():
    """A run given a ModelSpec recorded its dataclass repr (``ModelSpec(name='dt', ...)``)
    as the result's model, which legends and report rows showed; it records the spec as
    the same run given the string does."""
    import fedlabels as fl
    from conftest import digits_with_sizes

    fed = digits_with_sizes((30, 40, 30), n_unlabeled=30, n_test=40)
    given = fl.run("fedct", fed, model=ModelSpec("dt", {"max_depth": 3}), rounds=1, seed=0)
    typed = fl.run("fedct", fed, model="dt(max_depth=3)", rounds=1, seed=0)
    assert given.config["model"] == typed.config["model"] == "decision_tree(max_depth=3)"


#: a bad value of every spec parser, and its refusal's end: the value quoted as the spec
#: writes it (cnn, module: and minilm said "got inf", mlp "got 'inf'"), an integer in the
#: words of every parser (rulefit, and the run parameters, said "an int"; rulefit took
#: tree_size=2.5 at parse and failed at build)
_SPEC_REFUSALS = [
    ("mlp(lr=inf)", "lr must be a finite number > 0, got 'inf'."),
    ("cnn(lr=inf)", "lr must be a finite number > 0, got 'inf'."),
    ("module:torch.nn:Linear(lr=inf)", "lr must be a finite number > 0, got 'inf'."),
    ("minilm(lr=inf)", "lr must be a finite number > 0, got 'inf'."),
    ("mlp(max_steps=2.5)", "max_steps must be an integer >= 1, got '2.5'."),
    ("cnn(max_steps=2.5)", "max_steps must be an integer >= 1, got '2.5'."),
    ("module:torch.nn:Linear(batch_size=0)", "batch_size must be an integer >= 1, got '0'."),
    ("minilm(r=0)", "r must be an integer >= 1, got '0'."),
    ("rulefit(tree_size=2.5)", "tree_size must be an integer >= 1, got '2.5'."),
    ("rulefit(max_rules=x)", "max_rules must be an integer >= 1, got 'x'."),
    ("tfidf(min_df=0)", "min_df must be an integer >= 1, got '0'."),
    ("tfidf(C=-1)", "C must be a number > 0, got '-1'."),
    ("cnn(warm_start=2)", "warm_start must be true or false, got '2'."),
    ("rulefit(linear=2)", "linear must be true or false, got '2'."),
    ("tfidf(sublinear=2)", "sublinear must be true or false, got '2'."),
    ("cnn(shape=1-2)", "shape must be C-H-W (three positive integers joined by '-'), "
                       "got '1-2'."),
    ("cnn(arch=zz)", "got 'zz'."),
    ("minilm(mode=x)", "got 'x'."),
    ("mlp(hidden=a)", "got 'a'."),
]


@pytest.mark.parametrize("spec, ending", _SPEC_REFUSALS)
def test_every_spec_parser_quotes_the_value_and_says_integer_alike(spec, ending):
    text = _spec_error(spec)
    assert text == f"model spec {spec!r}: {text.split(': ', 1)[1]}" and text.endswith(ending)
    assert " int " not in text and "\n" not in text


@pytest.mark.parametrize("kwargs, needle", [
    ({"rounds": 2.5}, "rounds must be an integer in [1, 1000000], got 2.5."),
    ({"clients": 0}, "clients must be an integer >= 1, got 0."),
    ({"unlabeled_shift": "x"}, "unlabeled_shift must be a number in [0, 1], got 'x'."),
])
def test_the_run_parameters_say_integer_as_the_spec_parsers(kwargs, needle):
    """The run parameters said 'must be an int' and 'a float', where every spec parser says
    'an integer' and 'a number'."""
    from fedlabels.runs.config import RunConfig

    with pytest.raises(FedLabelsError) as info:
        RunConfig(method="fedct", dataset="breast_cancer", **kwargs).validate()
    assert str(info.value) == needle


@pytest.mark.parametrize("call, message", [
    ("threads", "threads must be an integer >= 1, got 0."),
    ("workers", "workers must be an integer >= 1 (1: every client in this process), got 0."),
    ("node", "node config threads must be an integer >= 1, got '0'."),
])
def test_the_process_settings_say_integer_as_the_run_parameters(call, message):
    """threads, workers and a site's node config threads said 'a whole number', where the
    run parameters and every spec parser say 'an integer'."""
    from fedlabels.core.threads import set_threads
    from fedlabels.engines.workers import resolve_workers

    calls = {"threads": lambda: set_threads(0), "workers": lambda: resolve_workers(0, 3),
             "node": lambda: _node_threads()({"threads": "0"})}
    with pytest.raises(FedLabelsError) as info:
        calls[call]()
    assert str(info.value) == message


def _node_threads():
    pytest.importorskip("flwr")
    from fedlabels.engines.flower.site import node_threads

    return node_threads
