"""Model specs by name: ``decision_tree``, ``rf(n_estimators=50)``, ``mlp(hidden=512-512)``,
``cnn(arch=svhn)``, or your own torch network as ``module:pkg.mod:factory(lr=0.01)``.

A spec string lists one spec per client, comma-separated (``dt,rf,mlp``); one spec alone
means every client. Parameters go in parentheses: ``name(key=value,key=value)``. Values are
parsed as int, float, bool, ``None``, ``A-B-C`` int tuples, or strings.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

from fedlabels.core.errors import FedLabelsError, did_you_mean, unknown_parameters
from fedlabels.learners.builders import Factory, sklearn_factory, torch_mlp_factory
from fedlabels.learners.model_spec import ModelSpec, check_rulefit, check_training_params, quoted
from fedlabels.learners.text_input import register_text_model as _register_text_model


@dataclass(frozen=True)
class ModelEntry:
    """A registered model: its factory and what it is."""

    factory: Factory
    description: str
    aliases: tuple[str, ...] = ()
    #: checks a spec's parameters when the spec is parsed (raises FedLabelsError)
    check: Callable[[dict[str, Any]], None] | None = None


MODELS: dict[str, ModelEntry] = {}
_ALIASES: dict[str, str] = {}


def register_model(name: str, factory: Factory, description: str,
                   aliases: tuple[str, ...] = (),
                   check: Callable[[dict[str, Any]], None] | None = None,
                   text: bool = False) -> None:
    """Make a model available by name (and aliases) in specs, with the one-line
    ``description`` that ``fedlabels models`` lists; ``check`` validates a spec's
    parameters when it is parsed, so a bad value fails before any data is loaded; ``text``:
    the model takes raw text ``X`` (a 1-D array of strings), so text datasets accept it.

    ``factory(n_classes=..., random_state=..., **params)`` returns a fresh estimator."""
    MODELS[name] = ModelEntry(factory, description, aliases, check)
    for alias in (name, *aliases):
        _ALIASES[alias] = name
    if text:
        _register_text_model(name)


def _parse_value(text: str) -> Any:
    t = text.strip()
    low = t.lower()
    if low in ("true", "false"):
        return low == "true"
    if low == "none":
        return None
    if re.fullmatch(r"\d+(-\d+)+", t):
        return tuple(int(p) for p in t.split("-"))
    for cast in (int, float):
        try:
            return cast(t)
        except ValueError:
            pass
    return t


def _split_top_level(text: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                raise FedLabelsError(f"unbalanced parentheses in model spec {text!r}.")
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    if depth != 0:
        raise FedLabelsError(f"unbalanced parentheses in model spec {text!r}.")
    parts.append("".join(current))
    return [p.strip() for p in parts]


def _file_as_module(part: str) -> str | None:
    """The one-line fix for a ``module:`` spec that names a file (``module:nets/my.py:make``)
    where the module's import name belongs; None for any other spec."""
    where, sep, rest = part[len("module:"):].partition(":")
    if not sep or not (where.endswith(".py") or "/" in where or "\\" in where):
        return None
    path = PurePath(where.replace("\\", "/"))
    folder = str(path.parent) if str(path.parent) != "." else "."
    return (f"model spec {part!r} names the file {where}, but module: takes an import name: "
            f"put its folder on the module path and give module:{path.stem}:{rest} "
            f"(PYTHONPATH={folder} fedlabels run ...; in Python, sys.path).")


def parse_model_spec(text: str) -> list[ModelSpec]:
    """Parse a (possibly per-client) spec string into a list of :class:`ModelSpec`."""
    specs = []
    for part in _split_top_level(str(text)):
        if not part:
            raise FedLabelsError(f"empty model spec in {text!r}.")
        factory = re.fullmatch(r"module:([\w.]+:[\w.]+)\s*(?:\((.*)\))?", part, flags=re.S)
        match = re.fullmatch(r"([A-Za-z_][\w\-]*)\s*(?:\((.*)\))?", part, flags=re.S)
        if factory:  # your own torch network: module:pkg.mod:factory(params)
            match = re.fullmatch(r"(module)\s*(?:\((.*)\))?",
                                 f"module({factory.group(2) or ''})", flags=re.S)
        if part.startswith("module:") and (file_hint := _file_as_module(part)):
            raise FedLabelsError(file_hint)
        if part.startswith("module:") and not factory:
            raise FedLabelsError(f"cannot parse model spec {part!r}; use "
                                 "module:PACKAGE.MODULE:FACTORY or module:P.M:F(key=value,...).")
        if not match:
            raise FedLabelsError(f"cannot parse model spec {part!r}; use name or "
                                 "name(key=value,...).")
        name, body = match.group(1), match.group(2)
        params: dict[str, Any] = {}
        if factory:
            params["factory"] = factory.group(1)
        if body and body.strip():
            for item in _split_top_level(body):
                key, eq, value = item.partition("=")
                if not eq or not key.strip():
                    raise FedLabelsError(f"model parameter {item!r} in {part!r} must be "
                                         "key=value.")
                params[key.strip()] = _parse_value(value)
        specs.append(checked_spec(ModelSpec(name, params), part))
    return specs


def checked_spec(spec: ModelSpec, shown: str | None = None) -> ModelSpec:
    """``spec`` under its model's name (an alias resolved, an unknown name one line) with
    its parameters checked by the model's check, as a spec string is when parsed;
    ``shown`` is the spec as the user wrote it, for the message."""
    canonical = resolve_model_name(spec.name)
    check = MODELS[canonical].check
    if check is not None:
        try:
            check(dict(spec.params))
        except FedLabelsError as exc:
            raise FedLabelsError(f"model spec {shown or str(spec)!r}: {exc}") from None
    return spec if canonical == spec.name else ModelSpec(canonical, dict(spec.params))


def canonical_model_spec(text: str) -> str:
    """A spec string with every alias replaced by its model's name (``dt`` ->
    ``decision_tree``), so one configuration has one spelling."""
    return ",".join(str(spec) for spec in parse_model_spec(text))


def resolve_model_name(name: str) -> str:
    """Canonical model name for a name or alias."""
    try:
        return _ALIASES[name.lower()]
    except KeyError:
        known = ", ".join(f"{n} ({'/'.join(e.aliases)})" if e.aliases else n
                          for n, e in sorted(MODELS.items()))
        raise FedLabelsError(f"unknown model {name!r}{did_you_mean(name, _ALIASES)}; "
                             f"available: {known}.") from None


def check_estimator(estimator: Any, where: str = "model") -> Any:
    """Fail early if an object lacks the scikit-learn classifier interface."""
    if isinstance(estimator, type):
        raise FedLabelsError(f"{where} {estimator.__name__} is a class; pass an instance, "
                             f"e.g. {estimator.__name__}().")
    missing = [m for m in ("fit", "predict") if not callable(getattr(estimator, m, None))]
    if missing:
        raise FedLabelsError(f"{where} {type(estimator).__name__} has no "
                             f"{' or '.join(missing)} method; a learner needs the scikit-learn "
                             "estimator interface (fit(X, y) and predict(X)).")
    return estimator


def build_learner(spec: ModelSpec | Any, *, n_classes: int, random_state: int,
                  task: str = "classification") -> Any:
    """Instantiate a fresh learner from a spec, or clone an estimator object; on a
    regression ``task`` a spec gives its regressor (:mod:`fedlabels.learners.regression`)."""
    if not isinstance(spec, ModelSpec):
        estimator = clone_fresh(check_estimator(spec))
        if callable(getattr(estimator, "get_params", None)):
            if "random_state" in estimator.get_params():
                estimator.set_params(random_state=random_state)
        elif hasattr(estimator, "random_state"):  # a plain object: set the attribute
            estimator.random_state = random_state
        return estimator
    factory = MODELS[spec.name].factory
    if task == "regression":
        from fedlabels.learners.regression import regressor_factory

        factory = regressor_factory(spec.name)
    try:
        return factory(n_classes=n_classes, random_state=random_state, **spec.params)
    except TypeError as exc:
        reason = str(exc).rstrip(".")
        raise FedLabelsError(f"invalid parameters for model {spec.name!r}: {reason}.") from None


def expand_per_client(specs: list[Any], n_clients: int) -> list[Any]:
    """One spec per client: a single spec is repeated; otherwise the count must be m."""
    if len(specs) == 1:
        return specs * n_clients
    if len(specs) != n_clients:
        raise FedLabelsError(f"got {len(specs)} model specs for {n_clients} clients; give one "
                             "spec for all clients or exactly one per client.")
    return list(specs)


# ------------------------------------------------------------------ built-in models

_MLP_INTS = ("batch_size", "max_steps", "predict_batch_size")
_MLP_PARAMS = ("hidden", "lr", "weight_decay", "warm_start", *_MLP_INTS)


def _check_mlp(params: dict[str, Any]) -> None:
    """The torch MLP's parameters, checked without importing torch."""
    unknown = sorted(set(params) - set(_MLP_PARAMS))
    if unknown:
        raise FedLabelsError(f"{unknown_parameters(unknown, _MLP_PARAMS)}; mlp takes "
                             f"{', '.join(_MLP_PARAMS)}.")
    hidden = params.get("hidden", (512, 512))
    sizes = (hidden,) if isinstance(hidden, int) and not isinstance(hidden, bool) else hidden
    if not isinstance(sizes, tuple) or not sizes or any(
            isinstance(h, bool) or not isinstance(h, int) or h < 1 for h in sizes):
        raise FedLabelsError(f"hidden must be layer widths like 512 or 512-256 (positive "
                             f"integers joined by '-'), got {quoted(hidden)}.")
    check_training_params(params, _MLP_INTS, ("warm_start",))


def _names_of(model: str, *class_paths: str, rename: dict[str, str] | None = None,
              extra: tuple[str, ...] = ()) -> Callable[[dict[str, Any]], None]:
    """A spec check: the parameter names of the classifier and regressor ``model`` builds."""
    from fedlabels.learners.builders import check_param_names

    return lambda params: check_param_names(model, params, *class_paths, rename=rename,
                                            extra=extra)


register_model("decision_tree", sklearn_factory("sklearn.tree.DecisionTreeClassifier",
                                                criterion="gini", min_samples_split=2),
               "CART decision tree (Gini, min_samples_split=2)", aliases=("dt", "tree"),
               check=_names_of("decision_tree", "sklearn.tree.DecisionTreeClassifier",
                               "sklearn.tree.DecisionTreeRegressor"))
register_model("random_forest", sklearn_factory("sklearn.ensemble.RandomForestClassifier",
                                                n_estimators=100),
               "random forest, 100 trees", aliases=("rf",),
               check=_names_of("random_forest", "sklearn.ensemble.RandomForestClassifier",
                               "sklearn.ensemble.RandomForestRegressor"))
register_model("logreg", sklearn_factory("sklearn.linear_model.LogisticRegression",
                                         max_iter=2000),
               "L2-regularised logistic regression", aliases=("lr", "logistic_regression"),
               check=_names_of("logreg", "sklearn.linear_model.LogisticRegression",
                               "sklearn.linear_model.Ridge"))
register_model("sk_mlp", sklearn_factory("sklearn.neural_network.MLPClassifier",
                                         rename={"hidden": "hidden_layer_sizes"},
                                         hidden_layer_sizes=(100,), max_iter=500),
               "scikit-learn MLPClassifier (refit from scratch)",
               check=_names_of("sk_mlp", "sklearn.neural_network.MLPClassifier",
                               "sklearn.neural_network.MLPRegressor",
                               rename={"hidden": "hidden_layer_sizes"}))
register_model("mlp", torch_mlp_factory,
               "torch MLP, warm-started iterative training; mlp(hidden=512-512,lr=0.001,"
               "batch_size=64)", aliases=("torch_mlp",), check=_check_mlp)


def clone_fresh(estimator: Any) -> Any:
    """An unfitted copy with the same parameters.

    scikit-learn ``clone`` for objects with ``get_params``; any other object with
    ``fit``/``predict`` is deep-copied, so pass it unfitted (its ``fit`` must train from
    scratch each time it is called, as scikit-learn's does).
    """
    if not callable(getattr(estimator, "get_params", None)):
        import copy

        return copy.deepcopy(estimator)
    from sklearn.base import clone  # lazily: importing fedlabels must not load scikit-learn

    return clone(estimator)


# ------------------------------------------------------------------ tabular models
def _xgboost(n_classes: int, random_state: int, **params: Any) -> Any:
    from fedlabels.learners.tabular import make_xgboost

    return make_xgboost(n_classes, random_state, **params)


def _rulefit(n_classes: int, random_state: int, **params: Any) -> Any:
    from fedlabels.learners.tabular import make_rulefit

    return make_rulefit(n_classes, random_state, **params)


def _check_xgboost(params: dict[str, Any]) -> None:
    import importlib.util

    if params and importlib.util.find_spec("xgboost") is not None:  # else: its own error
        _names_of("xgboost", "xgboost.XGBClassifier", "xgboost.XGBRegressor")(params)


register_model("xgboost", _xgboost,
               "XGBoost, 100 trees of depth 6, binary or multi-class objective from the classes "
               "present; xgboost(n_estimators=100,max_depth=6,learning_rate=0.3)",
               aliases=("xgb",), check=_check_xgboost)
register_model("rulefit", _rulefit,
               "RuleFit (imodels): rules of boosted trees of size 4, at most 200 rules, "
               "one-vs-rest for C > 2; rulefit(tree_size=4,max_rules=200,linear=false)",
               aliases=("rule_fit",), check=check_rulefit)


# ------------------------------------------------------------------ text models
def _register_lazy_text_model(name: str, module: str, description: str,
                              aliases: tuple[str, ...]) -> None:
    """A text model whose module (scikit-learn, transformers) is imported only when used:
    ``module`` defines ``make_<name>(n_classes, random_state, **params)`` and
    ``check_<name>(params)``."""
    import importlib

    def factory(n_classes: int, random_state: int, **params: Any) -> Any:
        return getattr(importlib.import_module(module), f"make_{name}")(
            n_classes, random_state, **params)

    def check(params: dict[str, Any]) -> None:
        getattr(importlib.import_module(module), f"check_{name}")(params)

    register_model(name, factory, description, aliases=aliases, check=check)
    _register_text_model(name)


_register_lazy_text_model(
    "tfidf", "fedlabels.learners.tfidf",
    "text: TF-IDF word n-grams + logistic regression; tfidf(max_features=20000,"
    "ngram=1-2,C=4.0,min_df=1)", aliases=("tfidf_logreg",))
_register_lazy_text_model(
    "minilm", "fedlabels.learners.transformer",
    "text: MiniLM encoder (`fedlabels fetch minilm`) + linear head, torch, "
    "iterative; minilm(mode=lora|frozen|full,r=8,alpha=16,max_len=64,batch=16,"
    "lr=...,head=linear)", aliases=("transformer",))


# ------------------------------------------------------------------ torch networks
def _register_net(name: str, description: str) -> None:
    def factory(n_classes: int, random_state: int, **params: Any) -> Any:
        from fedlabels.learners.net_specs import make_net

        return make_net(name, n_classes, random_state, **params)

    def check(params: dict[str, Any]) -> None:
        from fedlabels.learners.net_specs import (
            check_net,
            import_factory,
            split_factory_arguments,
        )

        check_net(name, params)
        if name == "module":
            path = params.get("factory", "")
            split_factory_arguments(dict(params), import_factory(path), path)

    register_model(name, factory, description, check=check)


_register_net("cnn", "torch CNN for images: the FedCT paper's cifar10 (Table 10), "
              "pneumonia/mri (Tables 12-13), svhn (Table 14), or small (28x28 grey); "
              "cnn(arch=small,lr=0.001,batch_size=64,augment=false,shape=C-H-W)")
_register_net("resnet18", "torch ResNet-18 for small images (CIFAR stem); "
              "resnet18(width=64,lr=0.001,augment=false,shape=C-H-W)")
_register_net("module", "your own torch network: module:PACKAGE.MODULE:FACTORY(lr=0.001,"
              "batch_size=64,shape=C-H-W, and the factory's own keywords), FACTORY(n_features, "
              "n_classes, input_shape, ...) -> nn.Module")
_register_lazy_text_model(
    "hf", "fedlabels.learners.transformer",
    "text: a local Hugging Face BERT-style model directory (offline) + linear head; "
    "hf(model_dir=PATH,mode=full|lora|frozen,...), the parameters of minilm", aliases=())


def as_models(model: Any) -> list[Any]:
    """Model specs from a spec string, a :class:`ModelSpec`, an estimator, or a list of them."""
    if isinstance(model, str):
        return parse_model_spec(model)
    if isinstance(model, ModelSpec):  # checked as its string would be
        return [checked_spec(model)]
    if isinstance(model, list | tuple):
        out: list[Any] = []
        for m in model:
            out.extend(as_models(m))
        return out
    return [check_estimator(model)]
