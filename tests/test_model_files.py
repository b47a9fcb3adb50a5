"""Models files load without running code: a forged or received file cannot execute
anything, and pickles from earlier versions are refused with a one-line message."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
from sklearn.datasets import load_iris

from conftest import RunsCode
from fedlabels.cli import main
from fedlabels.core.errors import FedLabelsError
from fedlabels.core.files import models_path
from fedlabels.learners import build_learner, parse_model_spec
from fedlabels.results.model_format import read_models_file, write_models_file
from fedlabels.results.models_file import load_models


def _trained_on_iris(spec: str) -> tuple[np.ndarray, object]:
    """Iris's features (float32) and a learner of ``spec`` trained on it (5 steps or a
    fit)."""
    X, y = load_iris(return_X_y=True)
    X = X.astype(np.float32)
    model = build_learner(parse_model_spec(spec)[0], n_classes=3, random_state=0)
    if hasattr(model, "train_steps"):
        model.train_steps(X, y, 5)
    else:
        model.fit(X, y)
    return X, model

@pytest.mark.parametrize("spec", ["dt", "rf(n_estimators=3)", "logreg", "sk_mlp",
                                  "xgboost(n_estimators=3)", "rulefit(n_estimators=10)",
                                  "mlp(hidden=8)"])
def test_every_model_type_we_write_comes_back_predicting_the_same(tmp_path, spec):
    X, model = _trained_on_iris(spec)
    write_models_file(tmp_path / "m.models.npz", {"models": [model], "seed": 3})
    back = read_models_file(tmp_path / "m.models.npz")
    assert back["seed"] == 3 and type(back["models"][0]) is type(model)
    np.testing.assert_array_equal(back["models"][0].predict(X), model.predict(X))


def _forge(path: Path, payload: object) -> None:
    manifest = json.dumps({"format": "fedlabels-models/2", "payload": payload})
    np.savez(path, manifest=np.array(manifest))


@pytest.mark.parametrize("entry", [
    {"$t": "obj", "f": "os:mkdir", "args": {"$t": "tuple", "v": ["MARK"]}, "state": None},
    {"$t": "obj", "f": "builtins:eval", "args": {"$t": "tuple", "v": ["1"]}, "state": None},
    {"$t": "type", "v": "subprocess:Popen"},
    {"$t": "obj", "f": "copyreg:__newobj__",
     "args": {"$t": "tuple", "v": [{"$t": "type", "v": "os:_wrap_close"}]}, "state": None},
    {"$t": "learner", "cls": "posix:system", "params": {"$t": "dict", "k": [], "v": []},
     "state": None},
])
def test_a_forged_file_naming_other_callables_is_refused(tmp_path, entry):
    marker = tmp_path / "MARK"
    text = json.dumps(entry).replace("MARK", str(marker))
    _forge(tmp_path / "x.models.npz", {"$t": "dict", "k": ["models"],
                                       "v": [[json.loads(text)]]})
    with pytest.raises(FedLabelsError, match=r"fedlabels never writes|names no class"):
        read_models_file(tmp_path / "x.models.npz")
    assert not marker.exists()


@pytest.mark.parametrize(("manifest", "refused"), [
    ({}, "is not a fedlabels models file"),
    ({"format": "fedlabels-models/2", "payload": {"$t": "dict", "k": ["models"],
                                                  "v": [[{"$t": "nd", "i": 0}]]}},
     r"cannot be read as a fedlabels models file \(ValueError\)"),  # the array asked for
])
def test_an_object_array_is_not_unpickled(tmp_path, manifest, refused):
    marker = tmp_path / "made"
    payload = np.empty(1, dtype=object)
    payload[0] = RunsCode(marker)
    np.savez(tmp_path / "x.models.npz", manifest=np.array(json.dumps(manifest)), a0=payload)
    with pytest.raises(FedLabelsError, match=refused):
        read_models_file(tmp_path / "x.models.npz")
    assert not marker.exists()


def test_predict_never_loads_a_received_pickle(tmp_path, capsys):
    """Today's main unpickled ``RESULT.models.pkl`` owned by the user: the file ran code."""
    res = tmp_path / "res.json"
    assert main(["run", "--model", "dt", "--rounds", "1", "--no-progress", "--output",
                 str(res)]) == 0
    models_path(res).unlink()
    marker = tmp_path / "made"
    with open(tmp_path / "res.models.pkl", "wb") as fh:  # a received file, owned by us
        pickle.dump({"format": "fedlabels-models/1", "x": RunsCode(marker)}, fh)
    (tmp_path / "res.models.pkl").chmod(0o600)
    new = tmp_path / "new.csv"
    new.write_text("a\n1\n")
    capsys.readouterr()
    for argv in (["predict", str(res), str(new), "-o", str(tmp_path / "p.csv")],
                 ["inspect", str(res)]):
        code = main(argv)
        assert not marker.exists(), "loading the models file ran the file's code"
        err = capsys.readouterr().err
        assert code == 2 and "re-run" in err and err.count("\n") == 1, err
    with pytest.raises(FedLabelsError, match="earlier fedlabels as a pickle"):
        load_models(tmp_path / "res.models.pkl")


def test_the_models_file_is_readable_by_its_owner_only(tmp_path):
    """Every client's model is trained on its private data: its file is 0600 whatever the
    umask, from the CLI and from ``RunResult.save``; the result beside it stays shareable."""
    import fedlabels as fl

    old = os.umask(0o022)
    try:
        out = tmp_path / "cli.json"
        assert main(["run", "--method", "fedct", "--dataset", "breast_cancer", "--model", "dt",
                     "--clients", "3", "--rounds", "1", "--no-progress", "-o", str(out)]) == 0
        result = fl.run("fedct", "breast_cancer", model="dt", clients=3, rounds=1,
                        progress=False)
        result.save(tmp_path / "api.json")
    finally:
        os.umask(old)
    for name in ("cli", "api"):
        assert (tmp_path / f"{name}.models.npz").stat().st_mode & 0o777 == 0o600, name
        assert (tmp_path / f"{name}.json").stat().st_mode & 0o777 == 0o644, name


def _users_estimator(name: str):
    from sklearn.ensemble import ExtraTreesClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.naive_bayes import GaussianNB
    from sklearn.neighbors import KNeighborsClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import MinMaxScaler, StandardScaler
    from sklearn.svm import SVC

    return {"pipeline": lambda: make_pipeline(StandardScaler(), LogisticRegression()),
            "scaled_svc": lambda: make_pipeline(MinMaxScaler(), SVC()),
            "gaussian_nb": GaussianNB,
            "knn": lambda: KNeighborsClassifier(3),
            "knn_ball_tree": lambda: KNeighborsClassifier(3, algorithm="ball_tree",
                                                          metric="manhattan"),
            "extra_trees": lambda: ExtraTreesClassifier(n_estimators=3, random_state=0)}[name]()


@pytest.mark.parametrize("name", ["pipeline", "scaled_svc", "gaussian_nb", "knn",
                                  "knn_ball_tree", "extra_trees"])
def test_a_users_common_estimators_are_saved_and_predict_the_same(tmp_path, name):
    X, y = load_iris(return_X_y=True)
    model = _users_estimator(name).fit(X, y)
    write_models_file(tmp_path / "m.models.npz", {"models": [model]})
    back = read_models_file(tmp_path / "m.models.npz")["models"][0]
    assert type(back) is type(model)
    np.testing.assert_array_equal(back.predict(X), model.predict(X))


def test_a_pipeline_holding_your_own_code_is_still_refused(tmp_path):
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import FunctionTransformer
    from sklearn.tree import DecisionTreeClassifier

    from fedlabels.results.model_format import UnsavableModelError

    X, y = load_iris(return_X_y=True)
    model = make_pipeline(FunctionTransformer(np.log1p), DecisionTreeClassifier()).fit(X, y)
    with pytest.raises(UnsavableModelError, match="FunctionTransformer"):
        write_models_file(tmp_path / "m.models.npz", {"models": [model]})


def test_equal_arrays_are_written_once_and_read_back_apart(tmp_path):
    """FedAvg's clients end on the same global weights; the file holds them once (100
    clients of the default MLP on digits: 363 MB before, a third of it copies), and each
    model read back has arrays of its own. Arrays that differ in dtype or content stay."""
    from fedlabels.learners.torch_mlp import TorchMLPClassifier

    X, y = load_iris(return_X_y=True)
    models = []
    for seed in range(20):
        m = TorchMLPClassifier(hidden_layer_sizes=(256,), n_classes=3, random_state=seed)
        m.train_steps(X.astype(np.float32), y, 2)
        models.append(m)
    apart = tmp_path / "apart.npz"
    write_models_file(apart, {"models": models})
    common = models[0].get_weights()
    for m in models[1:]:
        m.set_weights(common)  # equal weights, different Adam moments
    path = tmp_path / "m.npz"
    write_models_file(path, {"models": models, "a": np.arange(4, dtype=np.int64),
                             "b": np.arange(4, dtype=np.int32), "c": np.arange(4.0)})
    # 19 of the 20 copies of the weights are not written
    assert os.path.getsize(apart) - os.path.getsize(path) > 0.95 * 19 * common.nbytes
    back = read_models_file(path)
    assert back["a"].dtype == np.int64 and back["b"].dtype == np.int32
    assert back["c"].dtype == np.float64
    first, second = back["models"][0], back["models"][1]
    np.testing.assert_array_equal(first.get_weights(), common)
    np.testing.assert_array_equal(second.get_weights(), common)
    for orig, got in zip(models, back["models"], strict=True):
        np.testing.assert_array_equal(got.predict_proba(X.astype(np.float32)),
                                      orig.predict_proba(X.astype(np.float32)))
    with __import__("torch").no_grad():
        next(first.model_.parameters()).add_(1.0)  # one model's weights are its own
    np.testing.assert_array_equal(second.get_weights(), common)


def test_a_models_file_holds_no_optimiser_moments_and_reads_older_files_that_do(
        tmp_path, monkeypatch):
    """Adam's moments are twice the weights and per client (two thirds of a FedAvg
    models file); predicting never reads them and resuming reads the checkpoint, so the
    models file leaves them out. A file written with them (before) still loads them."""
    from fedlabels.learners.torch_mlp import TorchMLPClassifier
    from fedlabels.learners.torch_state import mlp_state_dict
    from fedlabels.results import model_format

    X, y = load_iris(return_X_y=True)
    X = X.astype(np.float32)
    model = TorchMLPClassifier(hidden_layer_sizes=(256,), n_classes=3, random_state=0)
    model.train_steps(X, y, 3)
    weights = model.get_weights()
    write_models_file(tmp_path / "new.npz", {"models": [model]})
    with np.load(tmp_path / "new.npz", allow_pickle=False) as npz:
        stored = sum(npz[n].nbytes for n in npz.files if n != "manifest")
        manifest = str(npz["manifest"])
    assert '"opt.0.exp_avg"' not in manifest and stored < 1.5 * weights.nbytes  # 3x with
    back = read_models_file(tmp_path / "new.npz")["models"][0]
    np.testing.assert_array_equal(back.predict_proba(X), model.predict_proba(X))
    assert back.optimizer_.state_dict()["state"] == {}  # a fresh optimiser

    monkeypatch.setattr(model_format, "_for_prediction", dict)  # as written before
    monkeypatch.setattr(TorchMLPClassifier, "state_dict",
                        lambda self, **_: mlp_state_dict(self))
    write_models_file(tmp_path / "old.npz", {"models": [model]})
    monkeypatch.undo()
    old = read_models_file(tmp_path / "old.npz")["models"][0]
    np.testing.assert_array_equal(old.predict_proba(X), model.predict_proba(X))
    assert (old.optimizer_.state_dict()["state"][0]["exp_avg"]
            .equal(model.optimizer_.state_dict()["state"][0]["exp_avg"]))


def test_a_models_file_copies_a_networks_weights_only_and_writes_the_same_bytes(
        tmp_path, monkeypatch):
    """The models file leaves Adam's moments out: they are not copied to be dropped (three
    times the copies of the weights, per client). The file's bytes are those of the state
    taken whole and filtered (as before)."""
    from fedlabels.learners import torch_state
    from fedlabels.learners.torch_mlp import TorchMLPClassifier

    X, y = load_iris(return_X_y=True)
    models = [TorchMLPClassifier(hidden_layer_sizes=(32, 16), n_classes=3, random_state=s)
              .train_steps(X.astype(np.float32), y, 3) for s in range(3)]
    made: list[np.ndarray] = []
    real = torch_state.made_for_caller
    monkeypatch.setattr(torch_state, "made_for_caller",
                        lambda a: made.append(a) or real(a))
    write_models_file(tmp_path / "new.npz", {"models": models})
    assert len(made) == sum(len(list(m.model_.parameters())) for m in models)
    monkeypatch.undo()
    monkeypatch.setattr(TorchMLPClassifier, "state_dict",  # the whole state, as before
                        lambda self, **_: torch_state.mlp_state_dict(self))
    write_models_file(tmp_path / "old.npz", {"models": models})
    assert (tmp_path / "new.npz").read_bytes() == (tmp_path / "old.npz").read_bytes()


def test_the_deflate_test_samples_8_kb_and_chooses_as_64_kb_did(tmp_path, monkeypatch):
    """Whether a member is deflated is tested on its first 8 kB (the 64 kB before cost 40 %
    of writing networks' weights); for the built-in models' members, trees, linear models
    and networks, the choice, and so the file, is the same as with 64 kB."""
    import zlib

    from fedlabels.results import model_format

    X, y = load_iris(return_X_y=True)
    X = np.tile(X, (20, 1)).astype(np.float32)  # trees of some hundreds of nodes
    y = np.tile(y, 20)
    X = X + np.random.default_rng(0).normal(scale=0.3, size=X.shape).astype(np.float32)
    models = [build_learner(parse_model_spec(name)[0], n_classes=3, random_state=0)
              .fit(X, y) for name in ("dt", "rf", "logreg", "mlp")]
    sampled: list[int] = []

    class Counting:
        @staticmethod
        def compress(data: bytes, level: int) -> bytes:
            sampled.append(len(data))
            return zlib.compress(data, level)

    monkeypatch.setattr(model_format, "zlib", Counting)
    write_models_file(tmp_path / "new.npz", {"models": models})
    assert sampled and max(sampled) <= 8192
    monkeypatch.setattr(model_format, "DEFLATE_SAMPLE", 1 << 16)  # as before
    write_models_file(tmp_path / "old.npz", {"models": models})
    assert max(sampled) > 8192  # the old test did sample more
    assert (tmp_path / "new.npz").read_bytes() == (tmp_path / "old.npz").read_bytes()


def test_members_that_deflate_are_deflated_and_float_weights_stored(tmp_path):
    """A tree's nodes and class counts deflate about tenfold (letter, 300 trees: 44 MB
    stored); a network's float weights barely deflate, at a CPU cost, so they are stored.
    The file stays an ``.npz`` np.load reads, predicting as before."""
    import zipfile

    from fedlabels.learners.torch_mlp import TorchMLPClassifier

    X, y = load_iris(return_X_y=True)
    X = X.astype(np.float32)
    tree = build_learner(parse_model_spec("dt")[0], n_classes=3, random_state=0).fit(X, y)
    net = TorchMLPClassifier(hidden_layer_sizes=(4096,), n_classes=3, random_state=0)
    net.train_steps(X, y, 2)
    path = tmp_path / "m.models.npz"
    write_models_file(path, {"tree": tree, "net": net})
    with zipfile.ZipFile(path) as zf:
        kinds = {i.filename: i.compress_type for i in zf.infolist()}
    with np.load(path, allow_pickle=False) as npz:
        arrays = {n: npz[n] for n in npz.files}
    big_floats = [n for n, a in arrays.items() if a.dtype == np.float32 and a.size >= 4096]
    assert big_floats and all(kinds[f"{n}.npy"] == zipfile.ZIP_STORED for n in big_floats)
    assert kinds["manifest.npy"] == zipfile.ZIP_DEFLATED
    nodes = [n for n, a in arrays.items() if a.dtype.names and "left_child" in a.dtype.names]
    assert nodes and kinds[f"{nodes[0]}.npy"] == zipfile.ZIP_DEFLATED
    back = read_models_file(path)
    np.testing.assert_array_equal(back["tree"].predict(X), tree.predict(X))
    np.testing.assert_array_equal(back["net"].predict_proba(X), net.predict_proba(X))


def test_a_tfidf_models_file_holds_nothing_of_the_writing_process(tmp_path):
    """scikit-learn's vectoriser keeps ``_stop_words_id = id(stop_words)``, an address that
    differs in every process: two identical runs wrote different models files. The file is
    now the same whatever that address is, and the model read back predicts the same."""
    texts = np.array(["good movie", "bad movie", "great film", "awful film", "good fun",
                      "bad acting"])
    y = np.array([1, 0, 1, 0, 1, 0])
    model = build_learner(parse_model_spec("tfidf")[0], n_classes=2, random_state=0)
    model.fit(texts, y)
    model.predict(texts)  # transforming sets the id again, as evaluation does in a run
    write_models_file(tmp_path / "a.models.npz", {"models": [model]})
    model.vectorizer_._stop_words_id += 4096  # what another process would hold
    write_models_file(tmp_path / "b.models.npz", {"models": [model]})
    assert (tmp_path / "a.models.npz").read_bytes() == (tmp_path / "b.models.npz").read_bytes()
    back = read_models_file(tmp_path / "a.models.npz")["models"][0]
    np.testing.assert_array_equal(back.predict(texts), model.predict(texts))


def test_a_trees_padding_bytes_do_not_reach_the_models_file(tmp_path):
    """A tree's node records are 57 bytes of fields padded to 64, and the padding is
    whatever memory scikit-learn allocated: the same run wrote different files. Two trees
    with equal nodes and different padding now write the same bytes and predict alike."""
    import copy

    from sklearn.tree import DecisionTreeClassifier

    X, y = load_iris(return_X_y=True)
    tree = DecisionTreeClassifier(random_state=0).fit(X, y)
    state = tree.tree_.__getstate__()
    nodes = state["nodes"]
    paths = []
    for fill in (0x00, 0xAB):
        padded = np.full(nodes.nbytes, fill, dtype=np.uint8).view(nodes.dtype)
        for name in nodes.dtype.names:
            padded[name] = nodes[name]
        same = copy.deepcopy(tree)
        same.tree_.__setstate__({**state, "nodes": padded})  # copies the padding too
        paths.append(tmp_path / f"{fill}.models.npz")
        write_models_file(paths[-1], {"models": [same]})
    assert paths[0].read_bytes() == paths[1].read_bytes()
    back = read_models_file(paths[1])["models"][0]
    np.testing.assert_array_equal(back.predict(X), tree.predict(X))


@pytest.mark.parametrize("payload", [
    {"models": 1},  # no "$t"
    {"$t": "nd", "i": 999},  # an array the file does not hold
    {"$t": "scalar", "i": "x"},
    {"$t": "objects", "shape": [5, 5], "v": [1]},
    {"$t": "float", "v": "not a float"},
    {"$t": "dict", "k": ["a", "b"], "v": [1]},
])
def test_a_malformed_manifest_is_one_line_not_a_traceback(tmp_path, payload):
    _forge(tmp_path / "x.models.npz", payload)
    with pytest.raises(FedLabelsError, match="not a valid fedlabels models file"):
        read_models_file(tmp_path / "x.models.npz")


@pytest.mark.parametrize("payload", [
    {"$t": "dict", "k": ["seed"], "v": [1]},  # no models
    {"$t": "dict", "k": ["models", "model_specs", "feature_names", "class_names",
                         "class_descriptions", "preprocessing"],
     "v": [[5], ["dt"], [], [], [], None]},  # a "model" that is a number
    {"$t": "dict", "k": ["models", "model_specs", "feature_names", "class_names",
                         "class_descriptions", "preprocessing"],
     "v": [[], ["dt"], [], [], [], 7]},
])
def test_inspect_and_predict_refuse_a_payload_of_the_wrong_shape_in_one_line(
        tmp_path, capsys, payload):
    """Before, a forged file's ``{"models": 5}`` or a missing ``model_specs`` were a
    ``KeyError``/``TypeError`` traceback (exit 1) in ``inspect`` and ``predict``."""
    _forge(tmp_path / "x.models.npz", payload)
    (tmp_path / "new.csv").write_text("a\n1\n")
    for argv in (["inspect", str(tmp_path / "x.models.npz")],
                 ["predict", str(tmp_path / "x.models.npz"), str(tmp_path / "new.csv"),
                  "-o", str(tmp_path / "p.csv")]):
        code = main(argv)
        err = capsys.readouterr().err
        assert code == 2 and "not a valid fedlabels models file" in err, err
        assert err.count("\n") == 1, err


def test_predict_refuses_a_malformed_preprocessing_in_one_line(tmp_path, capsys):
    _forge(tmp_path / "x.models.npz", {
        "$t": "dict", "k": ["models", "model_specs", "feature_names", "class_names",
                            "class_descriptions", "preprocessing"],
        "v": [[], [], [], [], [], {"$t": "dict", "k": ["mean"], "v": [1]}]})
    (tmp_path / "new.csv").write_text("a\n1\n")
    code = main(["predict", str(tmp_path / "x.models.npz"), str(tmp_path / "new.csv"),
                 "-o", str(tmp_path / "p.csv")])
    err = capsys.readouterr().err
    assert code == 2 and "preprocessing is malformed" in err and err.count("\n") == 1, err


def _tree_file(tmp_path: Path, spec: str, damage) -> Path:
    """A models file of a fitted ``spec`` whose first tree's nodes ``damage`` changes."""
    X, y = load_iris(return_X_y=True)
    model = build_learner(parse_model_spec(spec)[0], n_classes=3, random_state=0).fit(X, y)
    path = tmp_path / "m.models.npz"
    write_models_file(path, {"models": [model]})
    with np.load(path) as npz:
        arrays = {k: npz[k] for k in npz.files}
    nodes = next(k for k, a in arrays.items() if a.dtype.names and "left_child" in
                 a.dtype.names)
    arrays[nodes] = arrays[nodes].copy()
    damage(arrays[nodes])
    np.savez(path, **arrays)
    return path


def _child_past_the_end(nodes):
    nodes["left_child"][0] = 10**9


def _feature_past_the_end(nodes):
    nodes["feature"][0] = 10**6


def _child_pointing_back(nodes):
    nodes["right_child"][0] = 0


# The loader of the damaged files: one process that has imported the reader and scikit-learn
# (1.5-2 CPU-s a Python process, for each of this module's 12 damaged files before) forks a
# fresh child for each file, so that each file is still read and predicted with in a process
# of its own, whose crash or endless loop fails its test and leaves pytest (and the loader)
# standing. It forks while it has one thread only (checked): no lock held by another thread
# is copied locked, and the children start their own thread pools. The check counts every
# thread of the process where /proc lists them (Linux), else Python's threads (macOS and
# other systems without /proc: a native pool would go uncounted there, which the BLAS and
# OpenMP settings of ``loader`` keep from starting).
_LOADER = """
import json, os, pathlib, select, signal, sys, threading, time, traceback
import numpy as np
import sklearn.ensemble, sklearn.neighbors, sklearn.tree
from fedlabels.core.errors import FedLabelsError
from fedlabels.results.model_format import read_models_file


def threads():
    try:
        return len(os.listdir("/proc/self/task"))
    except FileNotFoundError:
        return threading.active_count()


assert threads() == 1, "the loader must fork with one thread"


def load(path, out):
    try:
        m = read_models_file(pathlib.Path(path))
    except FedLabelsError as e:
        out.write(f"refused: {e}\\n")
        return 0
    m["models"][0].predict(np.zeros((4, 4)))
    out.write("loaded\\n")
    return 0


for line in sys.stdin:
    path, timeout = json.loads(line)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        with os.fdopen(w, "w") as out:
            try:
                code = load(path, out)
            except BaseException:
                out.write(traceback.format_exc())
                code = 1
        os._exit(code)
    os.close(w)
    # what the child writes, read as it comes (a long traceback fills no pipe), until it
    # ends or its time is up
    deadline, chunks, killed = time.monotonic() + timeout, [], False
    while (left := deadline - time.monotonic()) > 0 and select.select([r], [], [], left)[0]:
        if not (chunk := os.read(r, 65536)):
            break
        chunks.append(chunk)
    else:
        os.kill(pid, signal.SIGKILL)
        killed = True
    os.close(r)
    status = os.waitpid(pid, 0)[1]
    code = f"still running after {timeout} s" if killed else os.waitstatus_to_exitcode(status)
    print(json.dumps([code, b"".join(chunks).decode(errors="replace")]), flush=True)
"""


@pytest.fixture(scope="module")
def loader():
    """The loader process (``_LOADER``), started once for this module's damaged files."""
    import subprocess
    import sys

    # numpy's BLAS starts no threads of its own at import with one thread asked for
    pools = dict.fromkeys(("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"), "1")
    proc = subprocess.Popen([sys.executable, "-c", _LOADER], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env={**os.environ, **pools})
    yield proc
    assert proc.stdin is not None
    proc.stdin.close()
    proc.wait(timeout=60)


def test_the_loader_checks_its_threads_without_proc() -> None:
    """The loader's one-thread check listed /proc/self/task, which exists on Linux only:
    elsewhere the loader died of FileNotFoundError before reading a file. Without /proc
    (every listing of it refused here) it counts Python's threads and starts; a second
    Python thread still stops it."""
    import subprocess
    import sys

    no_proc = ("import os\n_listdir = os.listdir\n"
               "def listdir(path='.'):\n"
               "    if str(path).startswith('/proc'):\n"
               "        raise FileNotFoundError(path)\n"
               "    return _listdir(path)\n"
               "os.listdir = listdir\n")
    pools = dict.fromkeys(("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"), "1")
    env = {**os.environ, **pools}
    started = subprocess.run([sys.executable, "-c", no_proc + _LOADER], input="",
                             capture_output=True, text=True, env=env, timeout=120)
    assert started.returncode == 0, started.stderr
    thread = ("import threading\nthreading.Thread(target=threading.Event().wait, "
              "daemon=True).start()\n")
    refused = subprocess.run([sys.executable, "-c", no_proc + thread + _LOADER], input="",
                             capture_output=True, text=True, env=env, timeout=120)
    assert refused.returncode != 0 and "one thread" in refused.stderr


def _refused_in_a_child(loader, path: Path, needle: str, timeout: float = 60) -> None:
    """Load the models file at ``path`` and predict four rows with its first model in a
    child process of ``loader`` (a crash fails the test rather than ending pytest): it must
    be refused in one line holding ``needle``."""
    assert loader.stdin is not None and loader.stdout is not None
    loader.stdin.write(json.dumps([str(path), timeout]) + "\n")
    loader.stdin.flush()
    reply = loader.stdout.readline()
    assert reply, f"the loader ended (exit {loader.poll()})"
    code, text = json.loads(reply)
    assert code == 0 and text.startswith("refused:") and needle in text, (code, text)
    assert text.count("\n") == 1, text


@pytest.mark.parametrize("spec", ["dt", "rf(n_estimators=2)"])
@pytest.mark.parametrize("damage", [_child_past_the_end, _feature_past_the_end,
                                    _child_pointing_back])
def test_a_tree_whose_nodes_point_outside_it_is_refused_not_a_crash(tmp_path, loader, spec,
                                                                   damage):
    """Before, such a file loaded and predicting with it read memory past the tree's arrays
    (a segmentation fault of ``fedlabels inspect`` / ``predict``) or looped for ever. Run
    in a subprocess so that a crash fails the test rather than ending pytest."""

    path = _tree_file(tmp_path, spec, damage)
    _refused_in_a_child(loader, path, "point outside")


@pytest.mark.parametrize("spec", ["dt", "rf(n_estimators=2)"])
def test_a_tree_for_more_features_than_its_model_takes_is_refused(tmp_path, spec):
    """A forest hands its trees the rows it checked without their own check: a tree built
    for 1000 features could name column 999 of a 4-column row."""
    path = _tree_file(tmp_path, spec, lambda nodes: None)
    with np.load(path) as npz:
        arrays = {k: npz[k] for k in npz.files}
    text = str(arrays["manifest"][()])
    forged = text.replace('"f": "sklearn.tree._tree:Tree", "args": {"$t": "tuple", "v": [4,',
                          '"f": "sklearn.tree._tree:Tree", "args": {"$t": "tuple", "v": [1000,')
    assert forged != text
    arrays["manifest"] = np.array(forged)
    np.savez(path, **arrays)
    with pytest.raises(FedLabelsError, match="another number of features"):
        read_models_file(path)


@pytest.mark.parametrize("algorithm", ["kd_tree", "ball_tree"])
@pytest.mark.parametrize("damaged", ["idx_array", "node_data"])
def test_a_neighbour_tree_whose_index_lies_outside_its_data_is_refused(
        tmp_path, loader, algorithm, damaged):
    """A KD-tree's or ball tree's state is not checked by scikit-learn: an index past the
    data made ``predict`` read unmapped memory (a segmentation fault). In a subprocess so
    that a crash fails the test rather than ending pytest."""

    from sklearn.neighbors import KNeighborsClassifier

    X, y = load_iris(return_X_y=True)
    path = tmp_path / "m.models.npz"
    write_models_file(path, {"models": [KNeighborsClassifier(algorithm=algorithm).fit(X, y)]})
    with np.load(path) as npz:
        arrays = {k: npz[k] for k in npz.files}
    if damaged == "idx_array":  # the tree's permutation of the 150 rows
        key = next(k for k, a in arrays.items() if a.shape == (150,) and a.dtype.kind == "i"
                   and sorted(a.tolist()) == list(range(150)) and (a != np.arange(150)).any())
        arrays[key] = np.full_like(arrays[key], 10**8)
    else:
        key = next(k for k, a in arrays.items() if a.dtype.names and "is_leaf" in a.dtype.names)
        arrays[key] = arrays[key].copy()
        arrays[key]["is_leaf"] = 0  # the last level's nodes would have children past the end
    np.savez(path, **arrays)
    _refused_in_a_child(loader, path, "lie outside its data")


def test_predict_with_a_model_that_loads_but_cannot_predict_is_one_line(tmp_path, capsys):
    """A forged tree whose classes lie past the run's loads (its arrays are consistent) and
    then predicted a class code past the run's: an IndexError traceback in ``predict``."""
    res = tmp_path / "res.json"
    assert main(["run", "--model", "dt", "--rounds", "1", "--no-progress", "--output",
                 str(res)]) == 0
    path = models_path(res)
    with np.load(path) as npz:
        arrays = {k: npz[k] for k in npz.files}
    manifest = json.loads(str(arrays["manifest"][()]))
    text = json.dumps(manifest)
    at = text.index('"classes_"')
    keys = json.loads(text[text.rindex('"k": ', 0, at) + 5:text.index("]", at) + 1])
    state = text[text.index('"v": ', at) + 5:]
    first = json.JSONDecoder().raw_decode(state)[0]  # the estimator's state values
    classes = first[keys.index("classes_")]["i"]
    arrays[f"a{classes}"] = arrays[f"a{classes}"] + 1000
    np.savez(path, **arrays)
    rows = tmp_path / "rows.csv"
    capsys.readouterr()
    features = load_models(res)["feature_names"]
    rows.write_text(",".join(features) + "\n" + ",".join("0" for _ in features) + "\n")
    code = main(["predict", str(res), str(rows), "-o", str(tmp_path / "p.csv")])
    err = capsys.readouterr().err
    assert code == 2 and "could not predict" in err and err.count("\n") == 1, err


def test_predict_refuses_data_that_is_a_device_or_a_pipe_unread(tmp_path, capsys):
    """``fedlabels predict RESULT /dev/zero`` read until memory ran out; a named pipe hung."""
    from conftest import fed_fifo

    res = tmp_path / "res.json"
    assert main(["run", "--model", "dt", "--rounds", "1", "--no-progress", "--output",
                 str(res)]) == 0
    capsys.readouterr()
    # without the check, a reader gets a table (it would hang else)
    with fed_fifo(tmp_path / "rows.csv", b"a\n1\n"):
        code = main(["predict", str(res), str(tmp_path / "rows.csv"), "-o",
                     str(tmp_path / "p.csv")])
    err = capsys.readouterr().err
    assert code == 2 and "is not a regular file" in err and err.count("\n") == 1, err


@pytest.mark.parametrize("field, value", [("left_children", 10**8),
                                          ("split_indices", 10**6)])
def test_an_xgboost_tree_pointing_outside_itself_is_refused_not_a_crash(tmp_path, loader,
                                                                       field, value):
    """XGBoost loads its trees' child and feature indices unchecked: a forged models file
    loaded, and predicting read past the arrays (a segmentation fault). The booster's raw
    bytes are UBJSON: the first element of the typed array ``field`` is overwritten (int32,
    big-endian). In a subprocess so that a crash fails the test, not pytest."""

    pytest.importorskip("xgboost")
    X, y = load_iris(return_X_y=True)
    model = build_learner(parse_model_spec("xgboost(n_estimators=3)")[0], n_classes=3,
                          random_state=0).fit(X, y)
    path = tmp_path / "m.models.npz"
    write_models_file(path, {"models": [model]})
    with np.load(path) as npz:
        arrays = {k: npz[k] for k in npz.files}
    key = next(k for k, a in arrays.items() if a.dtype == np.uint8
               and b"left_children" in a.tobytes())
    raw = bytearray(arrays[key].tobytes())
    count = raw.find(b"#", raw.find(field.encode()))  # [$l#L<8-byte count><int32s>
    raw[count + 10:count + 14] = value.to_bytes(4, "big")
    arrays[key] = np.frombuffer(bytes(raw), dtype=np.uint8)
    np.savez(path, **arrays)
    _refused_in_a_child(loader, path, "point outside", timeout=120)



def _array_of(node: object, attribute: str) -> int | None:
    """The index of the first array that the manifest ``node`` stores under the dict key
    ``attribute`` (an estimator's state, a torch learner's ``state_dict``)."""
    if isinstance(node, list):
        return next((i for v in node if (i := _array_of(v, attribute)) is not None), None)
    if not isinstance(node, dict):
        return None
    if node.get("$t") == "nd":
        return node["i"]
    if node.get("$t") == "dict" and attribute in node["k"]:
        return _array_of(node["v"][node["k"].index(attribute)], attribute)
    return next((i for v in node.values() if (i := _array_of(v, attribute)) is not None),
                None)


def _edit(path: Path, attribute: str, edit) -> Path:
    """Replace the models file's array ``attribute`` by ``edit(array)``, as a hand edit of
    the ``.npz`` would."""
    with np.load(path) as npz:
        arrays = {k: npz[k] for k in npz.files}
    index = _array_of(json.loads(str(arrays["manifest"][()])), attribute)
    arrays[f"a{index}"] = edit(arrays[f"a{index}"].copy())
    np.savez(path, **arrays)
    return path


def _nan_first(a):
    a.flat[0] = np.nan
    return a


@pytest.mark.parametrize(("spec", "attribute", "edit", "needle"), [
    ("logreg", "coef_", _nan_first, r"its array models\[0\]\.coef_ holds 1 NaN"),
    ("sk_mlp", "coefs_", _nan_first, r"its array models\[0\]\.coefs_\[0\] holds 1 NaN"),
    ("mlp(hidden=8)", "model.0.weight", _nan_first,
     r"its array models\[0\]\['model\.0\.weight'\] holds 1 NaN"),
    ("logreg", "coef_", lambda a: a[:, :-1],
     r"models\[0\]\.coef_ has shape \(3, 3\) where the model \(LogisticRegression, 4 input "
     r"features\) needs 3x4"),
    ("logreg", "intercept_", lambda a: a[:-1],
     r"models\[0\]\.intercept_ has shape \(2,\) .* needs 3;"),
    ("sk_mlp", "coefs_", lambda a: a[:-1],
     r"models\[0\]\.coefs_\[0\] has shape \(3, 100\) .* needs 4x100"),
])
def test_an_edited_array_is_refused_at_load_naming_it(tmp_path, spec, attribute, edit, needle):
    """A NaN weight loaded and predicted one class for every row without a word (NumPy's
    argmax of NaN scores); a wrong-shaped one loaded and failed later in ``predict`` with a
    broadcasting error naming no array."""
    X, model = _trained_on_iris(spec)
    path = tmp_path / "m.models.npz"
    write_models_file(path, {"models": [model]})
    _edit(path, attribute, lambda a: a)  # the file as written: loads, predicts as the model
    np.testing.assert_array_equal(read_models_file(path)["models"][0].predict(X),
                                  model.predict(X))
    _edit(path, attribute, edit)
    with pytest.raises(FedLabelsError, match=f"{path} is not a valid fedlabels models file: "
                                             f".*{needle}") as refused:
        read_models_file(path)
    assert "\n" not in str(refused.value)


def test_predict_refuses_an_edited_array_in_one_line(tmp_path, capsys):
    res = tmp_path / "res.json"
    assert main(["run", "--model", "logreg", "--rounds", "1", "--no-progress", "--output",
                 str(res)]) == 0
    features = load_models(res)["feature_names"]
    rows = tmp_path / "rows.csv"
    rows.write_text(",".join(features) + "\n" + ",".join("0" for _ in features) + "\n")
    _edit(models_path(res), "coef_", _nan_first)
    capsys.readouterr()
    code = main(["predict", str(res), str(rows), "-o", str(tmp_path / "p.csv")])
    err = capsys.readouterr().err
    assert code == 2 and "coef_ holds 1 NaN" in err and err.count("\n") == 1, err
    assert not (tmp_path / "p.csv").exists()


@pytest.mark.parametrize("fmt", ["fedlabels-models/1", "fedlabels-models/3", None])
def test_a_models_file_naming_another_format_is_refused(tmp_path, fmt):
    """A whole, readable file whose manifest names another format (or none) is refused,
    not read as this one."""
    _, model = _trained_on_iris("dt")
    path = tmp_path / "m.models.npz"
    write_models_file(path, {"models": [model]})
    with np.load(path) as npz:
        arrays = {k: npz[k] for k in npz.files}
    manifest = json.loads(str(arrays["manifest"][()]))
    assert manifest["format"] == "fedlabels-models/2"
    manifest["format"] = fmt
    arrays["manifest"] = np.array(json.dumps(manifest))
    np.savez(path, **arrays)
    with pytest.raises(FedLabelsError, match=r"is not a fedlabels models file \("):
        read_models_file(path)


@pytest.mark.parametrize("shift", [-2, 5])
def test_a_trees_node_count_beside_its_nodes_cannot_reach_outside_them(tmp_path, shift):
    """A forged node_count: scikit-learn's ``Tree.__setstate__`` clamps one above the nodes
    stored to them, and ``__getstate__`` hands back node_count nodes, so the loader sees a
    count that agrees with its nodes; one below leaves children past the count: refused."""
    X, model = _trained_on_iris("dt")
    path = tmp_path / "m.models.npz"
    write_models_file(path, {"models": [model]})
    n = model.tree_.node_count
    with np.load(path) as npz:
        arrays = {k: npz[k] for k in npz.files}
    text = str(arrays["manifest"][()])
    old = f'"node_count", "nodes", "values"], "v": [{model.tree_.max_depth}, {n},'
    assert text.count(old) == 1
    arrays["manifest"] = np.array(text.replace(old, old.replace(f" {n},", f" {n + shift},")))
    np.savez(path, **arrays)
    if shift < 0:
        with pytest.raises(FedLabelsError, match="point outside"):
            read_models_file(path)
        return
    tree = read_models_file(path)["models"][0].tree_
    assert tree.node_count == len(tree.__getstate__()["nodes"]) == n
    np.testing.assert_array_equal(read_models_file(path)["models"][0].predict(X),
                                  model.predict(X))
