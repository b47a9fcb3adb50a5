"""Every warning of fedlabels points at the user's line: a warning's ``filename`` and
``lineno`` are where Python says it came from ("file:line: FedLabelsWarning: ..."), and a
fixed ``stacklevel`` pointed inside fedlabels for some entry points (``fl.load_federation``
goes through a keyword wrapper, ``fl.run`` through the run's layers). Each case triggers
one warning through a public entry point and checks the recorded warning names this file
(``core.errors.user_stacklevel``: the first frame outside fedlabels)."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import pytest

import fedlabels as fl


def _located(call: Callable[[], Any], match: str) -> tuple[list[str], Any]:
    """The files the warnings whose message holds ``match`` point at, and ``call``'s value;
    a warning that is not given at all fails here."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = call()
    files = [w.filename for w in caught if match in str(w.message)]
    assert files, [str(w.message) for w in caught]
    return files, value


def _at_this_file(call: Callable[[], Any], match: str) -> Any:
    files, value = _located(call, match)
    assert set(files) == {__file__}, files
    return value


def _table(n: int = 120, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 4))
    frame = pd.DataFrame(X, columns=[f"f{i}" for i in range(4)])
    frame["target"] = np.where(X[:, 0] + 0.3 * X[:, 1] > 0, "yes", "no")
    return frame


def _xy(n: int = 150) -> tuple[np.ndarray, np.ndarray]:
    frame = _table(n)
    return frame.drop(columns="target").to_numpy(), frame["target"].to_numpy()


# ------------------------------------------------------------------ tables (data/columns.py)


def test_a_column_of_row_numbers(tmp_path):
    """columns.py's row-counter warning (stacklevel 4: data/loading.py from load_federation,
    data/federation.py from make_federation)."""
    frame = _table().sort_values("target").reset_index(drop=True)
    frame.insert(0, "patient_id", np.arange(1, len(frame) + 1))
    path = tmp_path / "ids.csv"
    frame.to_csv(path, index=False)
    _at_this_file(lambda: fl.load_federation(f"csv:{path}:target", clients=3),
                  "holds the numbers of the rows")
    _at_this_file(lambda: fl.make_federation(frame.drop(columns="target"), frame["target"],
                                             clients=3, unlabeled=40),
                  "holds the numbers of the rows")


def test_a_pandas_index_column(tmp_path):
    """columns.py's dropped ``Unnamed: 0`` (stacklevel 2: inside data/)."""
    path = tmp_path / "indexed.csv"
    _table().sample(frac=1.0, random_state=0).to_csv(path, index=True)
    _at_this_file(lambda: fl.load_federation(f"csv:{path}:target", clients=3),
                  "a pandas index written by")


# ------------------------------------------------------------------ texts (data/text*.py)


def _texts(tmp_path) -> str:
    """A table of 300 texts, 150 of them twice (copies on both sides of the split), and a
    column ``shop`` of two values (a category, not text)."""
    words = np.array(["good", "bad", "fine", "poor", "great", "awful", "ok", "nice"])
    rng = np.random.default_rng(3)
    texts = [" ".join(rng.choice(words, 6)) + f" r{i}" for i in range(300)]
    texts += texts[:150]
    frame = pd.DataFrame({"review": texts, "stars": np.arange(len(texts)) % 2,
                          "shop": np.array(["A", "B"])[np.arange(len(texts)) % 2]})
    path = tmp_path / "reviews.csv"
    frame.to_csv(path, index=False)
    return f"csv:{path}:stars"


def test_a_text_column_of_categories(tmp_path):
    """text.py's category warning (stacklevel 5: core/renamed.py from load_federation)."""
    source = _texts(tmp_path)
    _at_this_file(lambda: fl.load_federation(source, clients=3, text_column="shop"),
                  "distinct values")


def test_test_texts_seen_in_training(tmp_path):
    """text_overlap.py's warning (stacklevel 4: data/loading.py from load_federation)."""
    source = _texts(tmp_path)
    _at_this_file(lambda: fl.load_federation(source, clients=3, text_column="review",
                                             test=90),
                  "occur verbatim")


# ------------------------------------------------------------------ images (data/images.py)


def _images(root, big: bool = False) -> str:
    from PIL import Image

    rng = np.random.default_rng(0)
    for k in ("cat", "dog"):
        (root / k).mkdir(parents=True)
        for i in range(6):
            Image.fromarray(rng.integers(0, 255, (12, 10, 3)).astype(np.uint8)).save(
                root / k / f"{i}.png")
    if big:
        Image.fromarray(np.zeros((12, 15, 3), np.uint8)).save(root / "dog" / "big.png")
    else:
        Image.fromarray(np.zeros((12, 10, 3), np.uint8)).save(root / "stray.png")
    return f"imagefolder:{root}"


def test_an_image_beside_the_class_folders(tmp_path):
    """images.py's stray image (stacklevel 2: inside data/images.py)."""
    source = _images(tmp_path / "imgs")
    _at_this_file(lambda: fl.load_federation(source, clients=2, unlabeled=4),
                  "belong to no class folder")


def test_an_image_over_pillows_limit(tmp_path, monkeypatch):
    """images.py's large image (stacklevel 3: inside data/images.py)."""
    from PIL import Image

    source = _images(tmp_path / "imgs", big=True)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 150)  # warns over 150 (big: 180)
    _at_this_file(lambda: fl.load_federation(source, clients=2, unlabeled=4,
                                             image_size="12x10"),
                  "decompression-bomb limit")


# ------------------------------------------------------------------ runs


def test_a_one_shot_method_given_more_rounds():
    """runs/loop.py's rounds note (stacklevel 2: runs/session.py from fl.run)."""
    fed = fl.make_federation(*_xy(), clients=3, unlabeled=40, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fl.RunCaveatWarning)
        _at_this_file(lambda: fl.run("pate", fed, model="dt", rounds=3, progress=False),
                      "round(s); runs 1 of the 3 requested")


def test_secure_aggregation_without_retries():
    """secure_member.py's plan-time warning (stacklevel 3: the method's module)."""
    fed = fl.make_federation(*_xy(), clients=3, unlabeled=40, seed=0)
    options = {"aggregation": "secure", "noise_sigma": 4.0, "queries": 10,
               "query_selection": "random", "min_group": 2}
    _at_this_file(lambda: fl.run("dp-pate", fed, model="dt", rounds=1, progress=False,
                                 options=options),
                  "lets a group go on after a dropout")


def test_fedct_regression_levels_wider_than_the_targets():
    """fedct/regression.py's warning (stacklevel 2: inside the method)."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(150, 3))
    y = 0.5 + 1e-4 * rng.normal(size=150)
    fed = fl.make_federation(X, y, clients=3, unlabeled=40, task="regression",
                             target_range=(0, 1), seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fl.RunCaveatWarning)
        _at_this_file(lambda: fl.run("fedct", fed, model="dt", rounds=1, progress=False),
                      "wider than the spread")


def test_run_and_report_caveats_guard(tmp_path):
    """api.py's caveats: right before (fl.run, fl.report); kept as guards."""
    rng = np.random.default_rng(0)
    fed = fl.make_federation(rng.normal(size=(150, 4)), rng.integers(0, 2, 150), clients=3,
                             unlabeled=40, seed=0)  # random labels: near chance
    result = _at_this_file(lambda: fl.run("fedct", fed, model="dt", rounds=1,
                                          progress=False), "within noise")
    _at_this_file(lambda: fl.report(result, tmp_path / "page.html"), "within noise")


def test_a_renamed_keyword_guard(monkeypatch):
    """core/renamed.py's warning (stacklevel 3: the wrapper's caller, whom it warns
    about): right before, kept as a guard."""
    import fedlabels.core.renamed as renamed

    monkeypatch.setattr(renamed, "_WARNED", set())  # once per process: again here
    _at_this_file(lambda: fl.make_federation(*_xy(), n_clients=3, unlabeled=40),
                  "n_clients= is now clients=")


# ------------------------------------------------------------------ results


def _categorical() -> tuple[pd.DataFrame, pd.Series]:
    rng = np.random.default_rng(0)
    X = pd.DataFrame({"a": rng.normal(size=120), "c": rng.choice(["x", "y", "z"], 120)})
    return X, pd.Series((X["a"] > 0).astype(int), name="label")


def test_unseen_categories_guard(tmp_path):
    """preprocessing.py's unseen categories (a level handed down, 6 and 7): right from
    make_federation's X_test, predict and a loaded run's predict; kept as guards."""
    X, y = _categorical()
    new = X.iloc[:20].copy()
    new.loc[new.index[0], "c"] = "new"
    _at_this_file(lambda: fl.make_federation(X, y, X_test=new, y_test=y.iloc[:20], clients=3,
                                             unlabeled=40, seed=0),
                  "not seen in training")
    fed = fl.make_federation(X, y, clients=3, unlabeled=40, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fl.RunCaveatWarning)
        result = fl.run("fedct", fed, model="dt", rounds=1, progress=False)
    _at_this_file(lambda: result.predict(new), "not seen in training")
    result.save(tmp_path / "r.json")
    loaded = fl.load_run(tmp_path / "r.json")
    _at_this_file(lambda: loaded.predict(new), "not seen in training")


def test_a_models_file_without_the_labels_type_guard(tmp_path):
    """models_file.py's untyped labels (stacklevel 4): right from fl.load_run; a guard."""
    from fedlabels.core.files import models_path
    from fedlabels.results.model_format import write_models_file
    from fedlabels.results.models_file import load_models

    fed = fl.make_federation(*_xy(), clients=3, unlabeled=40, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fl.RunCaveatWarning)
        fl.run("fedct", fed, model="dt", rounds=1, progress=False).save(tmp_path / "r.json")
    payload = load_models(tmp_path / "r.json")
    del payload["preprocessing"]["label_dtype"]  # as fedlabels of 26 Nov 2026 wrote it
    write_models_file(models_path(tmp_path / "r.json"), payload)
    _at_this_file(lambda: fl.load_run(tmp_path / "r.json"), "did not record the labels")


def test_a_model_the_models_file_cannot_hold_guard(tmp_path):
    """run_result.py's unsaved models file (stacklevel 2 from RunResult.save): a guard."""
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import FunctionTransformer
    from sklearn.tree import DecisionTreeClassifier

    model = make_pipeline(FunctionTransformer(np.abs), DecisionTreeClassifier())
    fed = fl.make_federation(*_xy(), clients=3, unlabeled=40, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fl.RunCaveatWarning)
        result = fl.run("fedct", fed, model=model, rounds=1, progress=False)
    _at_this_file(lambda: result.save(tmp_path / "r.json"), "models file was not written")


def test_a_network_the_models_file_cannot_rebuild(tmp_path):
    """models_file.py's lambda network (stacklevel 3: results/run_result.py from save)."""
    torch = pytest.importorskip("torch")
    model = fl.TorchModel(lambda n_features, n_classes: torch.nn.Linear(n_features, n_classes),
                          max_steps=5)
    fed = fl.make_federation(*_xy(), clients=3, unlabeled=40, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fl.RunCaveatWarning)
        result = fl.run("fedct", fed, model=model, rounds=1, progress=False)
    _at_this_file(lambda: result.save(tmp_path / "r.json"), "cannot be rebuilt")


# ------------------------------------------------------------------ what a command prints


def _python_default(message, category, filename, lineno, file=None, line=None):
    """Python's own ``showwarning`` (pytest replaces it while it records warnings)."""
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


def test_a_site_task_prints_a_warning_as_the_cli_does(monkeypatch, capsys):
    """A task process of the site's executor (``python -m fedlabels.deploy.site_exec``)
    printed Python's ``.../fedlabels/data/preprocessing.py:NNN: FedLabelsWarning: ...`` and
    the source line for a site's rows with a new category; now ``fedlabels: warning: ...``,
    one line, as ``fedlabels`` commands print it."""
    flower_task = pytest.importorskip("flwr.supernode.runtime.run_clientapp")
    from fedlabels.data.preprocessing import encode_frame
    from fedlabels.deploy import site_exec

    for name in ("install_from_fab", "get_load_client_app_fn"):  # run_task replaces them
        monkeypatch.setattr(flower_task, name, getattr(flower_task, name))
    rows = pd.DataFrame({"c": ["x", "w"]})
    monkeypatch.setattr(flower_task, "run_clientapp",
                        lambda **_: encode_frame(rows, ["c"], ["c"], ["c_x", "c_y"]))
    with warnings.catch_warnings():  # restores pytest's showwarning after
        warnings.simplefilter("always")
        warnings.showwarning = _python_default  # what a fresh process has
        site_exec.run_task("127.0.0.1:1", "token", None)
    said = capsys.readouterr().err.splitlines()
    assert said == ["fedlabels: warning: column 'c': 1 of 2 rows hold categories not seen in "
                    "training ('w'); they encode as no category (all zeros)."], said


def test_the_deployed_server_prints_a_warning_as_the_cli_does(monkeypatch, capsys):
    """The deployed ServerApp's process (``flwr-serverapp``) printed a warning of the run's
    plan in Python's form: ``fedlabels deploy local --method pate --rounds 3`` wrote
    ``.../fedlabels/engines/flower/server_app.py:266: FedLabelsWarning: pate uses 1
    round(s); ...`` and the source line into logs/flwr_run.log."""
    pytest.importorskip("flwr")
    from fedlabels.engines.flower import server_app

    def plan(grid: Any, context: Any) -> None:
        warnings.warn(fl.FedLabelsWarning("pate uses 1 round(s); runs 1 of the 3 requested"),
                      stacklevel=2)

    monkeypatch.setattr(server_app, "run_server", plan)
    with warnings.catch_warnings():  # restores pytest's showwarning after
        warnings.simplefilter("always")
        warnings.showwarning = _python_default
        server_app.main(None, None)  # type: ignore[arg-type]
    said = capsys.readouterr().err.splitlines()
    assert said == ["fedlabels: warning: pate uses 1 round(s); runs 1 of the 3 requested"], said


# ------------------------------------------------------------------ worker threads


def _unconverged_solve():
    """fedlabels' conjugate gradient stopped after one iteration: it warns."""
    import functools

    import scipy.sparse as sp

    from fedlabels.propagation.core import solve_cg

    W = sp.csr_matrix(np.array([[0.0, 0.5, 0.5], [0.5, 0.0, 0.5], [0.5, 0.5, 0.0]]))
    return functools.partial(solve_cg, W, np.eye(3), 0.99, max_iter=1)


def _warned_in(thread_target: Callable[[], Any]) -> list[tuple[str, int]]:
    import threading

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        worker = threading.Thread(target=thread_target)
        worker.start()
        worker.join()
    return [(w.filename, w.lineno) for w in caught if "conjugate gradient" in str(w.message)]


def test_a_warning_in_a_worker_thread_names_the_call_that_started_the_work():
    """A warning raised by fedlabels' code in a worker thread fedlabels started (clients
    trained together, the crypto pool, the checkpoint writer) pointed at threading.py: the
    first frame outside fedlabels was threading's bootstrap. It names the user's call that
    started the work (here this test's line that hands the work to a thread)."""
    from fedlabels.core.user_frames import carry_caller

    started_at = sys._getframe().f_lineno + 1
    work = carry_caller(_unconverged_solve())
    assert _warned_in(work) == [(__file__, started_at)]


def test_a_worker_without_a_carried_call_points_past_threading_and_concurrent():
    """Without a carried call, a warning from a worker running the user's own function
    names that function's line, past threading's and concurrent.futures' frames; one
    running fedlabels' code alone names the thread's outermost frame, as before."""
    from concurrent.futures import ThreadPoolExecutor

    def users_function():
        return _unconverged_solve()()

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with ThreadPoolExecutor(1) as pool:
            pool.submit(users_function).result()
    assert [w.filename for w in caught if "conjugate" in str(w.message)] == [__file__]
    assert [f for f, _ in _warned_in(_unconverged_solve())] == [__import__("threading").__file__]
