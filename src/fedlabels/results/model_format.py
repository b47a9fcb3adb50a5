"""Fitted models as plain data: a file whose loading builds only allow-listed types.

A models file is one ``.npz`` read with ``allow_pickle=False``: a JSON manifest and the
numeric arrays it refers to. An object is written as what it reduces to (its class or
reconstructor, arguments and state, as ``pickle`` would), but loading rebuilds it only if
every class and reconstructor it names is in :data:`ALLOWED` — exactly the types fedlabels
writes: scikit-learn trees, forests, linear models and MLPs, XGBoost (its booster as its
own raw bytes), RuleFit, TF-IDF, and fedlabels' wrappers. A torch learner (the MLPs,
MiniLM, the CNNs) is saved as its constructor parameters and its ``state_dict()`` (plain
arrays), never its tensors' pickles, less its optimiser's moments (the checkpoint keeps
those) and a user's optimiser and loss functions (training only). Nothing else is imported
or called, so a forged file cannot run code; the one exception is your own network, whose
factory is recorded by name and imported only from a module the reader trusts
(:mod:`fedlabels.results.own_network`). Native code that trusts its arrays is checked as
it is rebuilt (scikit-learn's trees and neighbour trees, XGBoost's trees: an index
outside them was a segmentation fault), an archive that inflates far beyond its size is
refused unread (:mod:`fedlabels.core.npz_size`), and a malformed manifest is one line.
"""

from __future__ import annotations

import copyreg
import importlib
import io
import json
import math
import re
import zipfile
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from fedlabels.core.array_table import ArrayTable
from fedlabels.core.errors import FedLabelsError

#: classes and reconstructors a models file may name ("module:qualname")
ALLOWED = frozenset({
    "copyreg:__newobj__",  # cls.__new__(cls) for the classes below
    "sklearn.tree._classes:DecisionTreeClassifier",
    "sklearn.tree._classes:DecisionTreeRegressor",
    "sklearn.tree._tree:Tree",
    "sklearn.ensemble._forest:RandomForestClassifier",
    "sklearn.ensemble._forest:RandomForestRegressor",
    "sklearn.linear_model._logistic:LogisticRegression",
    "sklearn.linear_model._ridge:Ridge",
    "sklearn.neural_network._multilayer_perceptron:MLPClassifier",
    "sklearn.neural_network._multilayer_perceptron:MLPRegressor",
    "sklearn.neural_network._stochastic_optimizers:AdamOptimizer",
    "sklearn.preprocessing._label:LabelBinarizer",
    "numpy.random._pickle:__randomstate_ctor",
    "numpy.random._pickle:__bit_generator_ctor",
    "numpy.random._mt19937:MT19937",
    "xgboost.sklearn:XGBClassifier", "xgboost.sklearn:XGBRegressor", "xgboost.core:Booster",
    "fedlabels.learners.tabular:GlobalLabelClassifier",
    "fedlabels.learners.tabular:RuleFitClassifier",
    "fedlabels.learners._rulefit_binary:BinaryRuleFit",
    "imodels.util.rule:Rule", "imodels.util.transforms:Winsorizer",
    "imodels.util.transforms:FriedScale",
    "fedlabels.learners.torch_mlp:TorchMLPClassifier",
    "fedlabels.learners.torch_regressor:TorchMLPRegressor",
    "fedlabels.learners.tfidf:TfidfClassifier", "numpy:float32",
    "sklearn.feature_extraction.text:TfidfVectorizer",
    "sklearn.feature_extraction.text:TfidfTransformer",
    "fedlabels.learners.transformer:TransformerClassifier",  # params + state_dict
    "fedlabels.learners.torch_net:TorchNetClassifier",  # a built-in network's, by name
    # scikit-learn estimators a user passes (fl.run(model=...)): plain arrays and parameters
    "sklearn.pipeline:Pipeline",
    "sklearn.preprocessing._data:StandardScaler", "sklearn.preprocessing._data:MinMaxScaler",
    "sklearn.naive_bayes:GaussianNB",
    "sklearn.svm._classes:SVC",
    "sklearn.neighbors._classification:KNeighborsClassifier",
    "sklearn.ensemble._forest:ExtraTreesClassifier", "sklearn.tree._classes:ExtraTreeClassifier",
    "sklearn.neighbors._kd_tree:newObj", "sklearn.neighbors._kd_tree:KDTree",
    "sklearn.neighbors._ball_tree:newObj", "sklearn.neighbors._ball_tree:BallTree",
    "sklearn.metrics._dist_metrics:newObj",  # cls.__new__(cls) of an allowed metric
    "sklearn.metrics._dist_metrics:EuclideanDistance64",
    "sklearn.metrics._dist_metrics:ManhattanDistance64",
    "sklearn.metrics._dist_metrics:MinkowskiDistance64",
})
FORMAT = "fedlabels-models/2"
#: state entries that hold an ``id()`` of the writing process (a TF-IDF vectoriser's cache
#: key of its validated stop words): left out, so the same run writes the same bytes; the
#: loaded object recomputes them where it needs them
PROCESS_LOCAL = frozenset({"_stop_words_id"})


class UnsavableModelError(FedLabelsError):
    """A model the safe format does not write (its type, or your own code inside it)."""


def _name(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '?')}:{getattr(obj, '__qualname__', '?')}"


def _allowed(name: str) -> Any:
    if name not in ALLOWED:
        raise FedLabelsError(f"refusing to load a models file that names {name!r}, which "
                             "fedlabels never writes; load only models files fedlabels wrote.")
    module, _, qualname = name.partition(":")
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


class _Writer:
    def __init__(self) -> None:
        self.table = ArrayTable()  # FedAvg's clients end on the same global weights: once

    @property
    def arrays(self) -> dict[str, np.ndarray]:
        return self.table.arrays

    def array(self, value: np.ndarray) -> int:
        """The index of ``value`` in the file (an equal array already written is named by
        its index; the reader builds a fresh array for every reference)."""
        return self.table.add(_padding_zeroed(np.array(value, order="C")))  # 0-d stays 0-d

    def encode(self, value: Any) -> Any:
        if value is None or isinstance(value, bool | str):
            return value
        if isinstance(value, int) and not isinstance(value, np.integer):
            return value
        if isinstance(value, float) and not isinstance(value, np.floating):
            return value if math.isfinite(value) else {"$t": "float", "v": repr(value)}
        if isinstance(value, np.generic):
            return {"$t": "scalar", "i": self.array(np.asarray(value))}
        if isinstance(value, np.ndarray):
            if value.dtype.hasobject:
                return {"$t": "objects", "shape": list(value.shape),
                        "v": [self.encode(v) for v in value.ravel().tolist()]}
            return {"$t": "nd", "i": self.array(value)}
        if isinstance(value, bytes | bytearray):
            return {"$t": type(value).__name__,
                    "i": self.array(np.frombuffer(bytes(value), dtype=np.uint8))}
        if isinstance(value, list):
            return [self.encode(v) for v in value]
        if isinstance(value, tuple):
            return {"$t": "tuple", "v": [self.encode(v) for v in value]}
        if isinstance(value, dict):
            return {"$t": "dict", "k": [self.encode(k) for k in value],
                    "v": [self.encode(v) for v in value.values()]}
        if isinstance(value, np.dtype):
            return {"$t": "dtype", "v": self.encode(np.lib.format.dtype_to_descr(value))}
        if isinstance(value, type):
            return {"$t": "type", "v": self.class_name(value)}
        if callable(getattr(value, "train_steps", None)):  # a torch learner: params + state
            return self.learner(value)
        return self.reduced(value)

    def learner(self, value: Any) -> dict[str, Any]:
        """A torch learner as its parameters and state; your own network's factory as the
        record that names it (:mod:`fedlabels.results.own_network`), its optimiser and loss
        (training only) left out: the loaded learner predicts, with the defaults."""
        params = value.get_params(deep=False)  # Adam's moments neither copied nor kept:
        state = _for_prediction(value.state_dict(optimizer_slots=False))
        entry: dict[str, Any] = {"$t": "learner", "cls": self.class_name(type(value))}
        if callable(params.get("network")):
            from fedlabels.results.own_network import factory_record

            entry["network"] = self.factory(factory_record(params.pop("network")))
        if callable(params.get("optimizer")):  # its hyper-parameters are not Adam's
            state = {k: v for k, v in state.items() if not k.startswith("opt.")}
        params.update({k: None for k in ("optimizer", "loss") if callable(params.get(k))})
        return {**entry, "params": self.encode(params), "state": self.encode(state)}

    def factory(self, record: dict[str, Any]) -> dict[str, Any]:
        if "kwargs" not in record:
            return record
        try:
            kwargs = self.encode(record["kwargs"])
        except UnsavableModelError:
            raise UnsavableModelError(
                f"cannot save network module:{record['module']}:{record['name']}: its "
                "keyword arguments are not plain values (numbers, strings, lists)") from None
        return {**record, "kwargs": kwargs}

    def class_name(self, cls: Any) -> str:
        name = _name(cls)
        if name not in ALLOWED:
            raise UnsavableModelError(f"cannot save a model holding a {name!r}: the safe models "
                                 "format writes only the types fedlabels loads back.")
        return name

    def reduced(self, value: Any) -> Any:
        reduced = value.__reduce_ex__(4)
        if isinstance(reduced, str) or len(reduced) < 2:
            raise UnsavableModelError(f"cannot save {type(value).__name__} as plain data.")
        func, args, state = reduced[0], reduced[1], reduced[2] if len(reduced) > 2 else None
        if any(len(reduced) > i and reduced[i] is not None for i in (3, 4)):
            raise UnsavableModelError(f"cannot save {type(value).__name__} as plain data "
                                 "(it reduces to list or dict items).")
        if isinstance(state, dict):
            state = {k: v for k, v in state.items() if k not in PROCESS_LOCAL}
        return {"$t": "obj", "f": self.class_name(func), "args": self.encode(tuple(args)),
                "state": self.encode(state)}


def _padding_zeroed(value: np.ndarray) -> np.ndarray:
    """``value`` with the padding bytes of a structured dtype zeroed (a tree's nodes: 57
    bytes of fields in 64, the rest whatever memory scikit-learn's ``malloc`` returned), so
    the same model writes the same bytes, and equal arrays are found equal."""
    if value.dtype.names is None:
        return value
    out = np.zeros(value.shape, dtype=value.dtype)
    for name in value.dtype.names:
        out[name] = value[name]
    return out


_OPTIMISER_SLOT = re.compile(r"opt\.\d+\.")


def _for_prediction(state: Mapping[str, Any]) -> dict[str, Any]:
    """A torch learner's state without its optimiser's per-parameter slots (Adam's
    ``step``, ``exp_avg``, ``exp_avg_sq``: twice the weights, and per client, so they were
    two thirds of a FedAvg models file). Predicting and inspecting never read them; the
    loaded learner gets a fresh optimiser, as the learner's loader does for a state without
    them (``load_state_dict(state, optimizer=False)``). Resuming a run reads the checkpoint,
    which keeps them, and refuses a state without its optimiser."""
    return {k: v for k, v in state.items() if not _OPTIMISER_SLOT.match(k)}


class _Reader:
    def __init__(self, arrays: Mapping[str, np.ndarray],
                 trusted: frozenset[str] = frozenset()) -> None:
        self.arrays = arrays
        self.trusted = trusted  # modules whose network factories may be imported

    def decode(self, value: Any, where: str = "") -> Any:
        """The value an entry encodes; ``where`` names it (``models[0].coef_``) in an error."""
        if isinstance(value, list):
            return [self.decode(v, f"{where}[{i}]") for i, v in enumerate(value)]
        if not isinstance(value, dict):
            return value
        kind = value["$t"]
        if kind == "float":
            return float(value["v"])
        if kind == "scalar":
            return self.arrays[f"a{value['i']}"][()]
        if kind == "nd":
            return _finite(np.array(self.arrays[f"a{value['i']}"]), where)
        if kind == "objects":
            out = np.empty(len(value["v"]), dtype=object)
            out[:] = [self.decode(v, f"{where}[{i}]") for i, v in enumerate(value["v"])]
            return out.reshape(value["shape"])
        if kind in ("bytes", "bytearray"):
            raw = self.arrays[f"a{value['i']}"].tobytes()
            return raw if kind == "bytes" else bytearray(raw)
        if kind == "tuple":
            return tuple(self.decode(v, f"{where}[{i}]") for i, v in enumerate(value["v"]))
        if kind == "dict":
            keys = [self.decode(k) for k in value["k"]]
            return dict(zip(keys, (self.decode(v, _member(where, k))
                                   for k, v in zip(keys, value["v"], strict=True)), strict=True))
        if kind == "dtype":
            return np.lib.format.descr_to_dtype(self.decode(value["v"]))
        if kind == "type":
            return _allowed(value["v"])
        if kind == "learner":
            return self.learner(value, where)
        if kind == "obj":
            return self.rebuild(value, where)
        raise FedLabelsError(f"a models file entry of unknown kind {kind!r}.")

    def learner(self, value: Mapping[str, Any], where: str = "") -> Any:
        cls, params = _allowed(value["cls"]), self.decode(value["params"], where)
        if "network" not in value:
            learner = cls(**params)
            learner.load_state_dict(self.decode(value["state"], where), optimizer=False)
            return learner
        from fedlabels.learners.torch_net import TorchNetClassifier
        from fedlabels.results.own_network import rebuild_factory

        if cls is not TorchNetClassifier or not isinstance(params, dict):
            raise FedLabelsError(f"a models file entry gives {value['cls']} a network "
                                 "factory; load only models files fedlabels wrote.")
        params["network"] = rebuild_factory(value["network"], self.trusted, self.decode)
        learner = cls(**params)
        state = self.decode(value["state"], where)
        state["arch.network"] = learner._name()  # the record above names the network
        learner.load_state_dict(state, optimizer=False)
        stored = {k[len("model."):] for k in state
                  if k.startswith("model.") and k != "model.training"}
        if stored != set(learner.model_.state_dict()):  # strict: no weight left over
            extra = sorted(stored ^ set(learner.model_.state_dict()))
            raise FedLabelsError(f"the models file's weights do not fit network "
                                 f"{learner._name()} (entries {', '.join(extra[:3])} differ); "
                                 "was the factory changed since the run?")
        return learner

    def rebuild(self, value: Mapping[str, Any], where: str = "") -> Any:
        func, args = _allowed(value["f"]), self.decode(value["args"], f"{where}(args)")
        if func is copyreg.__newobj__ and not (  # type: ignore[attr-defined]
                args and isinstance(args[0], type)):
            raise FedLabelsError("a models file entry names no class to build.")
        obj = func(*args)  # __newobj__'s class was decoded through the allow-list
        state = self.decode(value["state"], where)
        if state is not None:
            setstate = getattr(obj, "__setstate__", None)
            if setstate is not None:
                setstate(state)
            else:
                obj.__dict__.update(state)
        _check_trees(obj)
        _check_shapes(obj, where)
        return obj


class MalformedArrayError(FedLabelsError):
    """An array of a models file with NaN or infinite values (a model cannot predict)."""


def _member(where: str, key: Any) -> str:
    """``where``'s entry ``key``: an attribute name as ``.name``, other keys as ``[key]``."""
    if isinstance(key, str) and key.isidentifier():
        return f"{where}.{key}" if where else key
    return f"{where}[{key!r}]"


def _finite(array: np.ndarray, where: str) -> np.ndarray:
    """``array`` if its floats (and its record fields' floats: a tree's thresholds) are all
    finite, as every fitted model's are: a NaN weight predicted one class for every row
    without a word (NumPy's argmax of NaN scores is 0)."""
    fields = [array[n] for n in array.dtype.names] if array.dtype.names else [array]
    if any(f.dtype.kind in "fc" and not np.all(np.isfinite(f)) for f in fields):
        bad = sum(int(np.count_nonzero(~np.isfinite(f))) for f in fields if f.dtype.kind in "fc")
        raise MalformedArrayError(f"its array {where or '(top level)'} holds {bad} NaN or "
                                  "infinite value(s), so the model cannot predict (a damaged "
                                  "or edited file, or a training that diverged)")
    return array


def _check_shapes(obj: Any, where: str) -> None:
    """Refuse a scikit-learn estimator whose weights do not fit together or its input
    width ``n_features_in_`` (a linear model's ``coef_`` and ``intercept_``, an MLP's
    ``coefs_`` and ``intercepts_``, a scaler's statistics, naive Bayes' means, SVC's
    support vectors): such a file loaded and its model failed in ``predict`` with NumPy's
    broadcasting error. A model fedlabels fits always fits together."""
    attrs = vars(obj) if hasattr(obj, "__dict__") else {}
    given = attrs.get("n_features_in_")
    if not isinstance(given, int | np.integer):
        return
    width = int(given)
    want: list[tuple[str, tuple[int | None, ...]]] = []  # (attribute, shape; None: any)
    coef = attrs.get("coef_")
    if isinstance(coef, np.ndarray):
        rows = coef.shape[0] if coef.ndim == 2 else None
        want += [("coef_", (rows, width) if coef.ndim == 2 else (width,)),
                 ("intercept_", (rows,) if coef.ndim == 2 else ())]
    layers = attrs.get("coefs_")
    if isinstance(layers, list) and all(isinstance(w, np.ndarray) for w in layers):
        fan_in: int | None = width
        for i, w in enumerate(layers):
            want += [(f"coefs_[{i}]", (fan_in, w.shape[-1] if w.ndim == 2 else None)),
                     (f"intercepts_[{i}]", (w.shape[-1] if w.ndim == 2 else None,))]
            fan_in = w.shape[-1] if w.ndim == 2 else None
    theta = attrs.get("theta_")
    if not isinstance(theta, np.ndarray):  # a scaler's statistics (None: not kept)
        want += [(name, (width,)) for name in ("mean_", "scale_", "var_", "data_min_",
                                               "data_max_", "data_range_", "min_")
                 if attrs.get(name) is not None]
    else:  # naive Bayes: a mean and variance per class and feature
        classes = len(attrs.get("classes_", ()))
        want += [("theta_", (classes, width)), ("var_", (classes, width)),
                 ("class_prior_", (classes,))]
    if isinstance(attrs.get("support_vectors_"), np.ndarray):
        want.append(("support_vectors_", (None, width)))
    for name, shape in want:
        value = _attr(attrs, name)
        if value is None and name.startswith("intercept"):
            continue  # fit_intercept=False
        got = np.shape(value) if isinstance(value, np.ndarray | np.generic | float) else None
        if got is None or len(got) != len(shape) or any(
                w is not None and g != w for g, w in zip(got, shape, strict=True)):
            shown = "x".join("?" if w is None else str(w) for w in shape) or "a scalar"
            raise MalformedArrayError(
                f"its array {where}.{name} has shape {got} where the model "
                f"({type(obj).__name__}, {width} input features) needs {shown}")


def _attr(attrs: Mapping[str, Any], name: str) -> Any:
    """``attrs[name]``, or item ``i`` of the list ``attrs[base]`` for ``base[i]``."""
    base, _, index = name.partition("[")
    value = attrs.get(base)
    if index:
        i = int(index.rstrip("]"))
        return value[i] if isinstance(value, list) and i < len(value) else None
    return value


def _check_trees(obj: Any) -> None:
    """Refuse a scikit-learn tree whose nodes would send its C code out of its arrays.

    ``Tree.__setstate__`` checks the arrays' dtype and shape only; prediction then follows
    the children and reads the feature columns that the nodes name, unchecked, so a forged
    file with a child index past the last node or a feature past the last column crashed
    ``inspect`` and ``predict`` with a segmentation fault, and a child pointing back made
    them loop for ever. A tree fedlabels fits numbers every child after its parent."""
    from sklearn.neighbors import BallTree, KDTree
    from sklearn.tree._tree import Tree

    if _name(type(obj)) == "xgboost.core:Booster":
        _check_booster(obj)
        return
    if isinstance(obj, KDTree | BallTree):
        _check_binary_tree(obj)
        return
    if isinstance(obj, Tree):
        # node_count nodes: __setstate__ clamps a larger node_count to the nodes stored
        nodes, count = obj.__getstate__()["nodes"], obj.node_count
        left, right, feature = nodes["left_child"], nodes["right_child"], nodes["feature"]
        index = np.arange(len(nodes))
        leaf = (left == -1) & (right == -1)
        inner = ~leaf & (left > index) & (right > index) & (left < count) & (right < count) \
            & (feature >= 0) & (feature < obj.n_features)
        if count < 1 or not np.all(leaf | inner):
            raise FedLabelsError("a models file holds a decision tree whose nodes point "
                                 "outside it; load only models files fedlabels wrote.")
        return
    tree, n_in = getattr(obj, "tree_", None), getattr(obj, "n_features_in_", None)
    members = getattr(obj, "estimators_", None)
    trees = [e.tree_ for e in (members if isinstance(members, list) else [])
             if isinstance(getattr(e, "tree_", None), Tree)]
    if isinstance(tree, Tree):
        trees.append(tree)
    if trees and any(t.n_features != n_in for t in trees):  # a forest skips its trees' check
        raise FedLabelsError("a models file holds a decision tree for another number of "
                             "features than its model's; load only models files fedlabels "
                             "wrote.")


def _check_booster(booster: Any) -> None:
    """Refuse an XGBoost model whose trees point outside themselves: XGBoost loads a
    child index past the last node, or a feature past the last column, unchecked, and
    predicting then read past its arrays (a segmentation fault of ``predict``). Read from
    the model's own JSON; a tree XGBoost grows numbers every child after its parent, and
    fedlabels' models split on numbers only (no categorical splits)."""
    try:
        model = json.loads(bytes(booster.save_raw("json")))
        learner = model["learner"]
        features = int(learner["learner_model_param"]["num_feature"])
        groups = max(int(learner["learner_model_param"].get("num_class", 0)), 1)
        boosted = learner["gradient_booster"]["model"]
        trees, info = boosted["trees"], boosted["tree_info"]
        ok = len(info) == len(trees) and all(0 <= int(g) < groups for g in info)
        for tree in trees if ok else []:
            count = int(tree["tree_param"]["num_nodes"])
            left, right = np.asarray(tree["left_children"]), np.asarray(tree["right_children"])
            split = np.asarray(tree["split_indices"])
            sizes = {len(tree[k]) for k in ("left_children", "right_children",
                                            "split_indices", "split_conditions",
                                            "default_left", "split_type", "base_weights")}
            index = np.arange(count)
            leaf = left == -1
            inner = (left > index) & (right > index) & (left < count) & (right < count) \
                & (split >= 0) & (split < features)
            ok = (sizes == {count} and count >= 1 and bool(np.all(leaf | inner))
                  and not any(tree["split_type"]))
            if not ok:
                break
    except (KeyError, TypeError, ValueError, AttributeError):
        ok = False
    if not ok:
        raise FedLabelsError("a models file holds an XGBoost model whose trees point outside "
                             "themselves; load only models files fedlabels wrote.")


def _check_binary_tree(tree: Any) -> None:
    """Refuse a nearest-neighbour KD-tree or ball tree whose index or nodes lie outside its
    data: ``__setstate__`` checks nothing, and a query then read past the arrays (a
    segmentation fault of ``predict``). Its nodes form a complete binary tree, node ``i``'s
    children ``2i+1`` and ``2i+2``, the last level's nodes leaves; each node's points are
    ``idx_array[idx_start:idx_end]``, a permutation of the data's rows."""
    state = tree.__getstate__()
    data, index, nodes, bounds = (np.asarray(a) for a in state[:4])
    levels, count, weights = state[5], state[6], state[12]
    n = len(data) if data.ndim == 2 else -1
    ok = (data.ndim == 2 and isinstance(levels, int) and 0 < levels < 64
          and count == len(nodes) == 2 ** levels - 1
          and bounds.shape[1:] == (count, data.shape[1])
          and np.array_equal(np.sort(index), np.arange(n))
          and (weights is None or np.shape(weights) == (n,)))
    if ok:
        start, end, leaf = nodes["idx_start"], nodes["idx_end"], nodes["is_leaf"]
        last_level = 2 * np.arange(count) + 1 >= count
        ok = bool(np.all((start >= 0) & (start <= end) & (end <= n))
                  and np.all(leaf[last_level] != 0))
    if not ok:
        raise FedLabelsError(f"a models file holds a {type(tree).__name__} whose index or "
                             "nodes lie outside its data; load only models files fedlabels "
                             "wrote.")


def write_models_file(path: Path, payload: Mapping[str, Any]) -> None:
    """Write ``payload`` (plain values and fitted models) to ``path`` as a safe ``.npz``.

    The ``.npz`` is a zip of ``.npy`` members, as ``np.savez`` writes it, but a member
    whose first 8 kB deflate to under 80 % (a tree's nodes and class counts, the
    manifest) is deflated (level 1) and the rest (a network's float weights, which deflate
    to about 93 % at 30 MB/s) are stored as they are; ``np.load`` reads both. (A sample of
    64 kB, before 2026-11-30, made the same choices for the built-in models, and its test
    was 40 % of the CPU time of writing 100 clients' MLPs.)"""
    writer = _Writer()
    manifest = json.dumps({"format": FORMAT, "payload": writer.encode(dict(payload))})
    members = {"manifest": np.array(manifest), **writer.arrays}
    with zipfile.ZipFile(path, "w", allowZip64=True) as zf:
        for name, array in members.items():
            buffer = io.BytesIO()
            np.lib.format.write_array(buffer, array, allow_pickle=False)
            data = buffer.getbuffer()
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            if _deflates(data):
                zf.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED, compresslevel=1)
            else:
                zf.writestr(info, data, compress_type=zipfile.ZIP_STORED)
            del data


#: a member is deflated when this much of it deflates to under DEFLATE_RATIO of its size
DEFLATE_SAMPLE, DEFLATE_RATIO = 1 << 13, 0.8


def _deflates(data: memoryview) -> bool:
    sample = data[:DEFLATE_SAMPLE]
    return len(zlib.compress(sample, 1)) < DEFLATE_RATIO * len(sample)


def read_models_file(path: Path, trusted: frozenset[str] = frozenset()) -> dict[str, Any]:
    """Read a file of :func:`write_models_file`; only allow-listed types are built, and
    your own networks' factories only from the modules in ``trusted``."""
    archive = ModelsArchive(path, trusted)
    return {key: archive.decode(key) for key in archive.entries}


class ModelsArchive:
    """A models file read once (its bytes kept, its manifest parsed), whose payload's
    entries are decoded one at a time, when asked: ``fl.load_run`` decodes the names and the
    preprocessing at once and the models (the bulk of the work) when they are first used.
    Every error is one line naming the file; a malformed array is named when its entry is
    decoded."""

    def __init__(self, path: Path, trusted: frozenset[str] = frozenset()) -> None:
        from fedlabels.core.npz_size import check_inflated_size

        self.path, self.trusted = path, trusted
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise FedLabelsError(f"{path} cannot be read as a fedlabels models file "
                                 f"({type(exc).__name__}); re-run the run to write it "
                                 "again.") from None
        check_inflated_size(path, "models file", data)
        try:  # the bytes read once: what is decoded later is what was checked here
            self._npz = np.load(io.BytesIO(data), allow_pickle=False)
            manifest = json.loads(str(self._npz["manifest"][()]))
        except Exception as exc:  # not an npz of ours, truncated, or an object array
            raise FedLabelsError(f"{path} cannot be read as a fedlabels models file "
                                 f"({type(exc).__name__}); re-run the run to write it "
                                 "again.") from None
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            raise FedLabelsError(f"{path} is not a fedlabels models file ({FORMAT}); re-run "
                                 "the run to write it again.")
        entries = _entries(manifest.get("payload"))
        if entries is None:  # not a table of names: decoded whole, to say what it is
            payload = self._decoded(manifest.get("payload"), "")
            raise FedLabelsError(f"{path} is not a fedlabels models file ({FORMAT})."
                                 if not isinstance(payload, dict) else
                                 f"{path} is not a valid fedlabels models file (an entry is "
                                 "malformed); re-run the run to write it again.")
        self.entries: dict[str, Any] = entries  # name -> value as encoded (a list: a list)

    def decode(self, key: str) -> Any:
        """The value of entry ``key``, its arrays read from the bytes kept."""
        return self._decoded(self.entries[key], _member("", key))

    def check_networks(self, key: str = "models") -> None:
        """Refuse now (one line), building nothing, a list ``key`` of models one of which is
        your own network from a module not trusted, or one that cannot be rebuilt."""
        from fedlabels.results.own_network import trusted_factory

        entries = self.entries.get(key)
        for entry in entries if isinstance(entries, list) else []:
            if isinstance(entry, dict) and entry.get("$t") == "learner" and "network" in entry:
                trusted_factory(entry["network"], self.trusted,
                                lambda value: self._decoded(value, key))

    def _decoded(self, value: Any, where: str) -> Any:
        path = self.path
        try:
            return _Reader(_ArraysRead(self._npz), self.trusted).decode(value, where)
        except MalformedArrayError as exc:
            raise FedLabelsError(f"{path} is not a valid fedlabels models file: {exc}; re-run "
                                 "the run to write it again.") from None
        except _UnreadableArray as exc:
            raise FedLabelsError(f"{path} cannot be read as a fedlabels models file ({exc}); "
                                 "re-run the run to write it again.") from None
        except FedLabelsError:
            raise
        except Exception as exc:  # a forged or damaged manifest: a missing key, a wrong type,
            # an array index that is not in the file, nesting too deep (RecursionError), or
            # state an allowed class refuses; a file this module wrote never raises here
            raise FedLabelsError(f"{path} is not a valid fedlabels models file (an entry is "
                                 f"malformed: {type(exc).__name__}); re-run the run to write "
                                 "it again.") from None


def _entries(payload: Any) -> dict[str, Any] | None:
    """The encoded payload (a dict of names) as {name: encoded value}; None if it is not
    one (a forged manifest)."""
    if not isinstance(payload, dict) or payload.get("$t") != "dict":
        return None
    keys, values = payload.get("k"), payload.get("v")
    if not isinstance(keys, list) or not isinstance(values, list) \
            or len(keys) != len(values) or not all(isinstance(k, str) for k in keys):
        return None
    return dict(zip(keys, values, strict=True))


class _UnreadableArray(Exception):
    """A member of the archive that ``np.load`` cannot read without pickle, or at all."""


class _ArraysRead(Mapping[str, np.ndarray]):
    """An ``.npz``'s arrays, each read from it when first asked for (an array several
    models share, FedAvg's global weights, once)."""

    def __init__(self, npz: Any) -> None:
        self.npz = npz
        self.read: dict[str, np.ndarray] = {}

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self.read:
            try:
                self.read[name] = self.npz[name]
            except KeyError:
                raise
            except Exception as exc:  # a damaged member, or an object array (no pickle)
                raise _UnreadableArray(type(exc).__name__) from None
        return self.read[name]

    def __iter__(self) -> Any:
        return iter(self.npz.files)

    def __len__(self) -> int:
        return len(self.npz.files)
