"""Look inside the clients' final models: tree text, rule lists, feature importances.

After ``fedlabels run`` the final models are saved beside the result JSON as
``RESULT.models.npz`` (plain arrays and data, written atomically; loading builds only the
model types fedlabels writes, :mod:`fedlabels.results.model_format`).
``fedlabels inspect RESULT`` prints them; in Python, :func:`inspect_models` takes a
:class:`~fedlabels.results.RunResult` (in-process ``client_models``) or a path and
returns one structured description per client::

    result = fl.run("fedct", "breast_cancer", model="dt,rf,rulefit,xgboost,rf")
    for d in fl.inspect_models(result):
        print(d["client"], d["kind"], d["feature_importances"][:3])

Loading a models file never unpickles: a file from someone else cannot run code. Files
saved by earlier versions as ``.models.pkl`` (pickles) are refused; re-run to save them.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fedlabels.core.class_names import shown_names_of
from fedlabels.core.errors import FedLabelsError
from fedlabels.data.pixel_names import PixelNames, names_copy
from fedlabels.results.models_file import load_models
from fedlabels.results.predict import client_index

if TYPE_CHECKING:
    from fedlabels.data.federation import IntLike
    from fedlabels.results import RunResult

# ------------------------------------------------------------------ descriptions

def _names(feature_names: Sequence[str] | None, n: int) -> Sequence[str]:
    """The ``n`` features' names: an image's :class:`PixelNames` as they are (each made when
    read), others as strings; ``x0``, ``x1``, ... without names of that count."""
    if feature_names and len(feature_names) == n:
        return feature_names if isinstance(feature_names, PixelNames) else \
            [str(f) for f in feature_names]
    return [f"x{i}" for i in range(n)]


#: a split line of ``export_text`` without names: ``|--- feature_12 <= 0.50``
_SPLIT = re.compile(r"^(.*?\|--- )feature_(\d+) (<=|>)(\s+)(-?[\d.]+(?:e[-+]?\d+)?)$", re.M)


def _tree_text(tree: Any, names: Sequence[str],
               scaling: tuple[np.ndarray, np.ndarray] | None, **kwargs: Any) -> str:
    """``export_text`` of ``tree`` with the names of the features it splits on, and with
    ``scaling`` (U's mean and std) each threshold ``z`` of feature ``j`` in the data's own
    units, ``z * std[j] + mean[j]``. Only the names used are made: export_text's own
    ``feature_names`` takes a list of every name (27 million for 3 x 3000 x 3000 images)."""
    from sklearn.tree import export_text

    def named(m: re.Match[str]) -> str:
        j = int(m.group(2))
        if scaling is None or j >= len(scaling[0]):
            return f"{m.group(1)}{names[j]} {m.group(3)}{m.group(4)}{m.group(5)}"
        value = float(m.group(5)) * float(scaling[1][j]) + float(scaling[0][j])
        return f"{m.group(1)}{names[j]} {m.group(3)} {value:.4g}"

    return _SPLIT.sub(named, export_text(tree, **kwargs))


def _top(values: np.ndarray, names: Sequence[str], top: int) -> list[tuple[str, float]]:
    values = np.asarray(values, dtype=float).ravel()
    order = np.argsort(-np.abs(values), kind="stable")[:top]
    return [(names[i], float(values[i])) for i in order if values[i] != 0]


def _class_label(c: Any, class_names: list[str] | None) -> str:
    c = int(c)
    return class_names[c] if class_names and 0 <= c < len(class_names) else str(c)


def units_note(preprocessing: Any) -> str:
    """In which units a model's thresholds and coefficients are (one line)."""
    if preprocessing is None:
        return "thresholds in the model's input units (no preprocessing stored)"
    get = preprocessing.get if isinstance(preprocessing, dict) else \
        lambda key: getattr(preprocessing, key, None)
    if get("pca") is not None:
        return "inputs are U's whitened principal components (pc1..pcK), not raw features"
    if get("mean") is not None:
        return ("tree thresholds in the data's own units; rule thresholds and coefficients "
                "in z-scores of U's mean and std")
    return "thresholds in the data's own units (features were not scaled)"


def _scaling(preprocessing: Any) -> tuple[np.ndarray, np.ndarray] | None:
    """U's (mean, std) that z-scored the inputs, or None (not scaled, or PCA inputs)."""
    if preprocessing is None:
        return None
    get = preprocessing.get if isinstance(preprocessing, dict) else \
        lambda key: getattr(preprocessing, key, None)
    if get("pca") is not None or get("mean") is None or get("std") is None:
        return None
    return np.asarray(get("mean"), dtype=float), np.asarray(get("std"), dtype=float)


def _target_range(preprocessing: Any) -> tuple[float, float] | None:
    """A regression run's public target range, or None."""
    if preprocessing is None:
        return None
    value = preprocessing.get("target_range") if isinstance(preprocessing, dict) else \
        getattr(preprocessing, "target_range", None)
    return None if value is None else (float(value[0]), float(value[1]))


def describe_model(model: Any, feature_names: Sequence[str] | None = None,
                   class_names: list[str] | None = None, top: int = 10,
                   scaling: tuple[np.ndarray, np.ndarray] | None = None,
                   target_range: tuple[float, float] | None = None) -> dict[str, Any]:
    """A structured, JSON-friendly description of one fitted model.

    Keys: ``kind``, ``estimator`` (class name), ``classes_seen``, ``feature_importances``
    (``[(feature, value)]``, largest first), ``text`` (tree text, rule list or summary) and
    kind-specific entries (``rules``, ``depth``, ``n_trees``, ``coefficients``, ...).
    ``scaling`` (U's mean and std) turns tree thresholds back into the data's own units;
    ``target_range`` (a regression run's) turns a linear regressor's coefficients and
    intercept from the unit scale it learnt on back into the target's units.
    """
    from fedlabels.learners.tabular import GlobalLabelClassifier, RuleFitClassifier

    seen = getattr(model, "classes_", None)
    inner, code_to_global = model, None
    if isinstance(model, GlobalLabelClassifier):  # classes_ are the run's, seen_ its data's
        inner, code_to_global = model.estimator_, model.seen_
        seen = code_to_global
    n_features = getattr(model, "n_features_in_", None) or len(feature_names or [])
    names = _names(feature_names, int(n_features or 0))
    out: dict[str, Any] = {
        "estimator": type(inner if inner is not None else model).__name__,
        "classes_seen": [_class_label(c, class_names) for c in seen] if seen is not None
        else None,
        "feature_importances": [],
    }
    kind = type(inner).__name__
    if inner is None:
        out.update(kind="constant", text=f"predicts {out['classes_seen'][0]!r} (the only class "
                   "in its training data)")
        return out
    if hasattr(inner, "feature_importances_") and n_features:
        with contextlib.suppress(ValueError, AttributeError):  # e.g. a linear booster
            out["feature_importances"] = _top(inner.feature_importances_, names, top)
    if kind == "DecisionTreeClassifier":
        cls = [_class_label(c, class_names) for c in inner.classes_]
        text = _tree_text(inner, names, scaling, class_names=cls,
                          decimals=3 if scaling is None else 6)
        out.update(kind="decision_tree", depth=int(inner.get_depth()),
                   n_leaves=int(inner.get_n_leaves()), text=text)
    elif kind == "DecisionTreeRegressor":
        text = _tree_text(inner, names, scaling, decimals=6)
        lo, hi = target_range or (0.0, 1.0)
        text = re.sub(r"value: \[(-?[\d.]+(?:e[-+]?\d+)?)\]",
                      lambda m: f"value: {lo + (hi - lo) * float(m.group(1)):.6g}", text)
        out.update(kind="decision_tree", depth=int(inner.get_depth()),
                   n_leaves=int(inner.get_n_leaves()),
                   text=("leaf values in the target's units\n" if target_range else "")
                   + text)
    elif kind in ("RandomForestClassifier", "ExtraTreesClassifier"):
        depths = [e.get_depth() for e in inner.estimators_]
        out.update(kind="random_forest", n_trees=len(inner.estimators_),
                   mean_depth=float(np.mean(depths)),
                   text=f"{len(depths)} trees, depth {min(depths)}..{max(depths)} "
                        f"(mean {np.mean(depths):.1f}); see feature_importances")
    elif kind == "XGBClassifier":
        booster = inner.get_booster()
        dump = booster.get_dump()
        first = re.sub(r"\[f(\d+)([<>=])", lambda m: f"[{names[int(m.group(1))]}{m.group(2)}",
                       dump[0]) if dump else ""
        out.update(kind="xgboost", n_trees=len(dump),
                   boosting_rounds=int(booster.num_boosted_rounds()),
                   objective=str(inner.get_params().get("objective") or
                                 inner.get_xgb_params().get("objective")),
                   text=f"{len(dump)} trees; the first one:\n{first}".rstrip())
    elif isinstance(inner, RuleFitClassifier):
        rules = inner.rules(names)
        for r in rules:
            r["class"] = _class_label(r["class"], class_names)
        out.update(kind="rulefit", n_rules=len(rules), rules=rules[:max(top, 0) * 5],
                   text="\n".join(f"[{r['class']}] {r['coef']:+.3f}  if {r['rule']}  "
                                  f"(support {r['support']:.3f})" for r in rules))
    elif hasattr(inner, "coef_") and not hasattr(inner, "classes_"):  # a linear regressor
        lo, hi = target_range or (0.0, 1.0)
        coef = (hi - lo) * np.ravel(inner.coef_)
        intercept = lo + (hi - lo) * float(np.ravel(inner.intercept_)[0])
        ranked = _top(coef, names, top)
        unit = "the target's units" if target_range else "the model's output units"
        out.update(kind="linear", coefficients={"target": ranked}, intercept=intercept,
                   text=f"target ({unit}) = {intercept:.6g} "
                        + " ".join(f"{v:+.4g}·{n}" for n, v in ranked)
                        + (" + ..." if len(ranked) < coef.size else ""))
        if not out["feature_importances"]:
            out["feature_importances"] = _top(np.abs(coef), names, top)
    elif hasattr(inner, "coef_"):
        coef = np.atleast_2d(inner.coef_)
        cls = list(inner.classes_) if coef.shape[0] > 1 else [inner.classes_[-1]]
        coefficients = {_class_label(code_to_global[c] if code_to_global is not None else c,
                                     class_names): _top(row, names, top)
                        for c, row in zip(cls, coef, strict=True)}
        out.update(kind="linear", coefficients=coefficients,
                   text="\n".join(f"class {k}: " + ", ".join(f"{n} {v:+.3f}" for n, v in vs)
                                  for k, vs in coefficients.items()))
        if not out["feature_importances"]:
            out["feature_importances"] = _top(np.abs(coef).sum(axis=0), names, top)
    else:
        n_params, what = None, "parameters"
        if callable(getattr(inner, "get_weights", None)):  # a torch learner: what it trains
            n_params = int(sum(np.asarray(w).size for w in inner.get_weights()))
            what = "trained parameters"
        elif hasattr(inner, "coefs_"):
            n_params = int(sum(w.size for w in inner.coefs_) +
                           sum(b.size for b in inner.intercepts_))
        layers = _layers(inner)
        out.update(kind="opaque", n_parameters=n_params,
                   text=f"{kind}: no built-in interpretation"
                        + (f" ({n_params:,} {what})" if n_params else "")
                        + (f"\nlayers: {layers}" if layers else ""))
    return out


def _layers(learner: Any, most: int = 12) -> str:
    """A torch network's top-level layers, one short name each (``Linear(784->512)``,
    ``Conv2d(1->32, 3x3)``, ``ReLU``); empty for anything else."""
    walk = getattr(getattr(learner, "model_", None), "children", None)
    children = list(walk()) if callable(walk) else []
    names = []
    for layer in children[:most]:
        kind = type(layer).__name__
        if hasattr(layer, "in_features") and hasattr(layer, "out_features"):
            kind += f"({layer.in_features}->{layer.out_features})"
        elif hasattr(layer, "in_channels") and hasattr(layer, "kernel_size"):
            k = layer.kernel_size
            size = "x".join(map(str, k)) if isinstance(k, tuple) else str(k)
            kind += f"({layer.in_channels}->{layer.out_channels}, {size})"
        names.append(kind)
    more = f", ... ({len(children) - most} more)" if len(children) > most else ""
    return ", ".join(names) + more


def inspect_models(result: RunResult | str | Path,
                   feature_names: Sequence[str] | None = None, top: int = 10,
                   client: IntLike | None = None,
                   trust_modules: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Describe each client's final model (see :func:`describe_model`).

    ``result`` is a :class:`~fedlabels.results.RunResult` from this process, or the path of
    a result JSON / ``.models.npz``. ``feature_names`` default to the federation's; ``top``
    most important features are listed per model; ``client`` (an index) describes that
    client's model alone.
    ``trust_modules``: modules whose network factories may be imported to rebuild a saved
    run's own network (``--trust-module``; importing runs their code).
    """
    from fedlabels.results import RunResult

    if not isinstance(result, RunResult):
        from fedlabels.core.files import given_path

        payload = load_models(given_path(result, "inspect_models' result (a RunResult or "
                                                 "a result file)"), trust_modules)
        models, specs = payload["models"], payload["model_specs"]
        names = names_copy(feature_names or payload["feature_names"] or [])
        classes = shown_names_of(payload)
        preprocessing = payload.get("preprocessing")
    else:
        models, specs = list(result.client_models), list(result.models)
        names = names_copy(feature_names or getattr(result, "feature_names", []) or [])
        classes = shown_names_of(result.federation)
        preprocessing = getattr(result, "preprocessing", None)
    scaling = _scaling(preprocessing)
    if not models:
        raise FedLabelsError("this result holds no client models (runs loaded from JSON do "
                             "not; pass the result JSON path so the saved models are read).")
    client = client_index(client, len(models))
    out = []
    for cid, model in enumerate(models):
        if client is not None and cid != client:
            continue
        desc = describe_model(model, names, classes, top=top, scaling=scaling,
                              target_range=_target_range(preprocessing))
        spec = specs[cid] if cid < len(specs) else (specs[0] if specs else "")
        units = units_note(preprocessing) if desc["kind"] != "opaque" else None
        out.append({"client": cid, "spec": spec, **desc, "units": units})
    return out


def format_inspection(descriptions: list[dict[str, Any]], max_lines: int = 40) -> str:
    """Plain text of :func:`inspect_models` output, ``max_lines`` lines of text per model."""
    blocks = []
    for d in descriptions:
        head = f"== client {d['client']}: {d['spec']} ({d['estimator']}, {d['kind']})"
        lines = [head]
        if d.get("units"):
            lines.append(f"units: {d['units']}")
        if d.get("classes_seen") is not None:
            lines.append(f"classes seen in training: {', '.join(d['classes_seen'])}")
        if d["feature_importances"]:
            lines.append("feature importances: " + ", ".join(
                f"{n} {v:.3f}" for n, v in d["feature_importances"]))
        text = str(d.get("text", "")).splitlines()
        lines += text[:max_lines]
        if len(text) > max_lines:
            lines.append(f"... ({len(text) - max_lines} more lines; --max-lines to see more)")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)
