"""The public API's annotations are what a typed user's checker sees (the package is
``py.typed``): no ``Any`` where the value has a known type, and no parameter typed narrower
than what the function accepts."""

from __future__ import annotations

import os
import typing
from pathlib import Path

import pandas as pd
import pytest

import fedlabels as fl
from fedlabels.results import RunResult


def test_to_frame_is_typed_as_the_dataframe_it_returns() -> None:
    # it was ``Any``: a checker with pandas' types (pandas-stubs, pyright) lost the frame
    hints = typing.get_type_hints(RunResult.to_frame, localns={"pd": pd})
    assert hints["return"] is pd.DataFrame



@pytest.mark.parametrize("cls", [fl.Federation, RunResult])
def test_preprocessing_is_typed_as_what_it_holds(cls: type) -> None:
    # it was ``Any``: result.preprocessing.mean and the like went unchecked
    from fedlabels.data.preprocessing import Preprocessing

    hints = typing.get_type_hints(cls, localns={"Preprocessing": Preprocessing,
                                                "IntLike": int, "pd": pd})
    assert hints["preprocessing"] == Preprocessing | None

# A typed user's calls, each as the docs show it and the function takes it at run time (a
# numpy integer from ``np.arange``, a pathlib.Path, an image size as a number or a pair, a
# tuple of names); checked by mypy itself, as the user's checker would.
USER_CODE = '''
from pathlib import Path
from typing import Any, assert_type

import numpy as np

import fedlabels as fl
from fedlabels.learners.tabular import GlobalLabelClassifier
from fedlabels.learners.torch_net import TorchNetClassifier
from fedlabels.learners.torch_regressor import TorchMLPRegressor

X = np.zeros((40, 3))
y = np.arange(40) % 2
for seed in np.arange(3):
    fl.make_federation(X, y, clients=np.int64(3), unlabeled=np.int64(10), seed=seed,
                       public_pca=np.int64(2))
    fl.load_federation("wine", clients=np.int64(3), test=np.int64(30), seed=seed,
                       public_pca=np.int64(2))
fl.load_federation("imagefolder:pets", image_size=32, public=Path("public"))
# a share or shift as numpy gives it, as fl.run's unlabeled_shift takes it (RunParams)
fl.make_federation(X, y, unlabeled_shift=np.float32(0.1), test_fraction=np.float32(0.2))
fl.load_federation("imagefolder:pets", unlabeled_shift=np.float32(0.1),
                   image_peak=np.float32(4095))
fl.load_federation("imagefolder:pets", image_size=(32, 48))
fl.inspect_models(Path("run.json"), feature_names=("a", "b", "c"), client=np.int64(0))
fl.load_run("run.json").predict(X, client=np.int64(1))
fl.load_run("run.json").predict_proba(X, client=np.int64(1))
# RunConfig's constructor takes what its checks accept, not only the types it stores
cfg = fl.RunConfig(method="fedct", rounds=np.int64(5), clients=np.int64(3),
                   seed=np.int64(1), unlabeled_shift=np.float64(0.1), public=Path("u.csv"),
                   output=Path("run.json"), batch_clients=True, image_size=(32, 48),
                   target_range=(0, 400), features=("a", "b"), participation=np.int64(2))
# a target range as numpy gives it (a pair of numpy's numbers, an array), as
# make_federation's target_range takes it
fl.RunConfig(task="regression", target_range=(np.float32(0), np.int64(400)))
fl.RunConfig(task="regression", target_range=np.array([0.0, 400.0]))
fl.run("local", "diabetes", task="regression", target_range=np.array([0.0, 400.0]))
fl.run_config(cfg, threads=np.int64(1))
fl.load_config("run.toml", method="fedct", dataset="wine", rounds=np.int64(3),
               output=Path("run.json"), options={"quorum": 0.8})
cfg.replace(rounds=np.int64(2), model="dt", public=Path("u.csv"))
# your own network, as docs/neural.md builds it
import torch
def make_net(n_features: int, n_classes: int) -> torch.nn.Module:
    return torch.nn.Linear(n_features, n_classes)
fl.TorchModel(make_net, lr=1e-3, batch_size=64, shape=(1, 28, 28))
fl.TorchModel(make_net, optimizer=lambda params: torch.optim.SGD(params, lr=0.05),
              loss=torch.nn.CrossEntropyLoss(label_smoothing=0.1), random_state=0)
fl.run("fedct", "wine", threads=np.int64(1), rounds=np.int64(2))
fl.run("fedct", "wine", participation=0.5, features=("a", "b"), public=Path("u.csv"),
       image_size=(32, 48), options={"quorum": 0.8}, seed=np.int64(1))
settings: dict[str, Any] = {"rounds": 2}
fl.run("fedct", "wine", **settings)  # a dict of settings, as a sweep builds them
fl.resume("run.json", rounds=np.int64(5), threads=np.int64(1), workers=np.int64(2))
# fit returns the estimator it is called on: a subclass's fit was typed as the base class
# (assert_type: a class with an untyped base, scikit-learn's, passes any assignment)
assert_type(TorchMLPRegressor(max_steps=1).fit(X, y.astype(float)), TorchMLPRegressor)
assert_type(TorchNetClassifier(max_steps=1).fit(X, y), TorchNetClassifier)
class MyLabels(GlobalLabelClassifier):
    pass
assert_type(MyLabels().fit(X, y), MyLabels)
'''


# A misspelt public name: the lazy imports' module __getattr__ (returning Any) made every
# attribute of ``fedlabels`` pass a checker, ``fl.rnu(...)`` included.
TYPO_CODE = '''
import fedlabels as fl

fl.rnu("fedct", "wine")
fl.load_federaton("wine")
fl.RunConfig(method="fedct", roundz=3)
fl.run("fedct", "wine", roundz=3)
fl.run("fedct", "wine", rounds="3")
fl.load_run("run.json").predict_proba([[0.0]], clinet=1)
fl.load_config("run.toml", roundz=3)
fl.RunConfig().replace(rounds="3")
import torch
fl.TorchModel(torch.nn.Linear, lrr=1e-3)
'''


def _method_skeleton() -> str:
    """The method skeleton of docs/architecture.md, which a method's author copies."""
    import re

    doc = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"
    block = re.search(r"## Writing a method.*?```python\n(.*?)```", doc.read_text(), re.DOTALL)
    assert block, "docs/architecture.md lost its method skeleton"
    return block.group(1)


@pytest.fixture(scope="module")
def mypy_output(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """mypy --strict on USER_CODE and TYPO_CODE, as a typed user's checker runs it."""
    api = pytest.importorskip("mypy.api")
    folder = tmp_path_factory.mktemp("typed_user")
    before = os.environ.get("MYPYPATH")
    root = Path(fl.__file__).resolve().parents[1]  # this checkout's src/, not an older install
    if root.name not in ("site-packages", "dist-packages"):  # installed: mypy finds it there
        os.environ["MYPYPATH"] = str(root)
        # a checkout's own folder, its mypy cache kept between runs (cold: 13 s of an idle
        # core, mostly numpy's and torch's stubs; warm: 0.3 s). mypy checks again every
        # module whose source changed and replays the others' errors under the paths they
        # were checked at, so the user's files keep one path (written only when changed:
        # two workers may run this fixture at once)
        folder = root.parent / ".mypy_cache" / "typed-user-strict"
        folder.mkdir(parents=True, exist_ok=True)
        if not (folder.parent / ".gitignore").exists():  # as mypy writes it in its cache
            (folder.parent / ".gitignore").write_text("# Automatically created by mypy\n*\n")
    for name, code in (("user.py", USER_CODE), ("typo.py", TYPO_CODE),
                       ("method.py", _method_skeleton())):
        if not (folder / name).exists() or (folder / name).read_text() != code:
            (folder / name).write_text(code)
    try:
        # no config file: the user's own checker; fedlabels' modules followed silently
        # (the project's mypy configuration checks them), so only the user's lines fail
        out, err, _ = api.run(["--config-file=", "--strict", "--follow-imports=silent",
                               "--show-absolute-path",
                               "--cache-dir", str(folder / "cache"),
                               str(folder / "user.py"), str(folder / "typo.py"),
                               str(folder / "method.py")])
    finally:
        if before is None:
            os.environ.pop("MYPYPATH", None)
        else:
            os.environ["MYPYPATH"] = before
    return folder, out + err


@pytest.mark.slow
def test_a_typed_users_calls_pass_mypy_strict(mypy_output: tuple[Path, str]) -> None:
    folder, out = mypy_output
    assert f"{folder / 'typo.py'}:4: error" in out, out  # mypy ran, and read fedlabels
    errors = [line for line in out.splitlines() if line.startswith(str(folder / "user.py"))]
    assert not errors, "\n".join(errors)


@pytest.mark.slow
def test_the_docs_method_skeleton_passes_mypy_strict(mypy_output: tuple[Path, str]) -> None:
    # it was unannotated and passed self.X_public (None for a method without U) to
    # predict: a typed author's copy failed the checker
    folder, out = mypy_output
    errors = [line for line in out.splitlines() if line.startswith(str(folder / "method.py"))]
    assert not errors, "\n".join(errors)


@pytest.mark.slow
def test_a_misspelt_public_name_is_a_checkers_error(mypy_output: tuple[Path, str]) -> None:
    folder, out = mypy_output
    typo = str(folder / "typo.py")
    assert f'{typo}:4: error: Module has no attribute "rnu"' in out, out
    assert f'{typo}:5: error: Module has no attribute "load_federaton"' in out, out
    assert f'{typo}:6: error: Unexpected keyword argument "roundz" for "RunConfig"' in out, out
    # fl.run's **params were Any: a misspelt or mistyped run parameter passed the checker
    assert f'{typo}:7: error: Unexpected keyword argument "roundz" for "run"' in out, out
    assert f'{typo}:8: error: Argument "rounds" to "run" has incompatible type "str"' in out, out
    # predict_proba (a property, so hasattr says a regression run has none) was typed
    # Callable[..., ndarray]: a misspelt keyword of the function it returns passed
    assert f'{typo}:9: error: Unexpected keyword argument "clinet"' in out, out
    # load_config's overrides and RunConfig.replace's changes were **Any
    assert f'{typo}:10: error: Unexpected keyword argument "roundz" for "load_config"' in out, \
        out
    assert f'{typo}:11: error: Argument "rounds" to "replace" of "RunConfig" has incompatible ' \
        'type "str"' in out, out
    # fl.TorchModel's **params were Any (a misspelt keyword failed at run time only)
    assert f'{typo}:13: error: Unexpected keyword argument "lrr" for "TorchModel"' in out, out


def test_run_params_are_typed_as_run_configs_constructor_takes_them() -> None:
    """fl.run's typed keywords (RunParams) are its run parameters, each typed as
    RunConfig's constructor takes it (options: or None)."""
    import ast
    import inspect

    from fedlabels.runs import config
    from fedlabels.runs.spec import by_name

    tree = ast.parse(inspect.getsource(config))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "RunConfig")
    init = next(f for block in cls.body if isinstance(block, ast.If)
                for f in block.body if isinstance(f, ast.FunctionDef) and f.name == "__init__")
    takes = {a.arg: ast.unparse(a.annotation) for a in init.args.args[1:] if a.annotation}
    params = next(n for block in tree.body if isinstance(block, ast.If)
                  for n in block.body if isinstance(n, ast.ClassDef) and n.name == "RunParams")
    typed = {f.target.id: ast.unparse(f.annotation) for f in params.body
             if isinstance(f, ast.AnnAssign) and isinstance(f.target, ast.Name)}
    keywords = [k for k, p in by_name(config.RunConfig).items() if p.python and k != "model"]
    assert list(typed) == keywords  # every run parameter fl.run takes in **params
    for name, annotation in typed.items():
        expected = "dict[str, Any] | None" if name == "options" else takes[name]
        assert annotation == expected, name


def test_run_configs_typed_constructor_names_every_field_with_its_default() -> None:
    """The constructor a checker sees (declared under TYPE_CHECKING, typed with what each
    setting accepts) lists the dataclass's fields in order with their defaults."""
    import ast
    import dataclasses
    import inspect

    from fedlabels.runs import config

    tree = ast.parse(inspect.getsource(config))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "RunConfig")
    init = next(f for block in cls.body if isinstance(block, ast.If)
                for f in block.body if isinstance(f, ast.FunctionDef) and f.name == "__init__")
    names = [a.arg for a in init.args.args[1:]]
    fields = dataclasses.fields(config.RunConfig)
    assert names == [f.name for f in fields]
    for f, default in zip(fields, init.args.defaults, strict=True):
        stated = ast.literal_eval(default)
        assert stated == (... if f.name == "options" else f.default), f.name


def test_help_shows_what_each_run_config_field_takes() -> None:
    """``help(fl.RunConfig)`` showed the types the fields store (``target_range: str |
    None``, ``clients: int``), though the constructor takes a pair, a numpy integer, a
    Path; only a checker saw the typed constructor. Its signature and docstring now say
    what a checker reads there, field by field."""
    import ast
    import inspect
    import pydoc

    from fedlabels.runs import config

    tree = ast.parse(inspect.getsource(config))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "RunConfig")
    init = next(f for block in cls.body if isinstance(block, ast.If)
                for f in block.body if isinstance(f, ast.FunctionDef) and f.name == "__init__")
    typed = {a.arg: ast.unparse(a.annotation) for a in init.args.args[1:] if a.annotation}
    shown = inspect.signature(fl.RunConfig).parameters
    assert list(shown) == list(typed)
    page = pydoc.render_doc(fl.RunConfig, renderer=pydoc.plaintext)
    for name, annotation in typed.items():
        spelt = annotation
        for alias, meaning in config.SHOWN_ALIASES.items():
            spelt = spelt.replace(alias, meaning)
        assert shown[name].annotation == spelt, name
        assert f" {name} : {spelt}\n" in page, name
    # what parse_target_range takes (a numpy pair, an array), not a sequence of floats alone
    assert ("target_range : str | Sequence[float | numpy.floating | numpy.integer] | "
            "numpy.ndarray | None") in page
    assert shown["options"].default == {} and shown["clients"].default == 5


def test_torch_models_typed_keywords_are_torch_net_classifiers_parameters() -> None:
    """fl.TorchModel's typed keywords are TorchNetClassifier's parameters (its own network
    aside, and width, ResNet-18's, which a factory refuses), each typed as the constructor
    takes it, and the spec names lr and shape."""
    import inspect

    from fedlabels.learners.model_spec import SPEC_NAMES
    from fedlabels.learners.torch_net import TorchModelParams, TorchNetClassifier

    takes = {name: p.annotation for name, p in
             inspect.signature(TorchNetClassifier).parameters.items()
             if name not in ("network", "width")}
    typed = {name: ref.__forward_arg__ for name, ref in TorchModelParams.__annotations__.items()}
    assert set(typed) == set(takes) | set(SPEC_NAMES)
    for name, annotation in typed.items():
        assert annotation == takes[SPEC_NAMES.get(name, name)], name
