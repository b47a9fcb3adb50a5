"""The public API's annotations are what a typed user's checker sees (the package is
``py.typed``): no ``Any`` where the value has a known type, and no parameter typed narrower
than what the function accepts."""

from __future__ import annotations

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

import numpy as np

import fedlabels as fl

X = np.zeros((40, 3))
y = np.arange(40) % 2
for seed in np.arange(3):
    fl.make_federation(X, y, clients=np.int64(3), unlabeled=np.int64(10), seed=seed)
    fl.load_federation("wine", clients=np.int64(3), test=np.int64(30), seed=seed)
fl.load_federation("imagefolder:pets", image_size=32, public=Path("public"))
fl.load_federation("imagefolder:pets", image_size=(32, 48))
fl.inspect_models(Path("run.json"), feature_names=("a", "b", "c"), client=np.int64(0))
fl.load_run("run.json").predict(X, client=np.int64(1))
'''


@pytest.mark.slow
def test_a_typed_users_calls_pass_mypy_strict(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    api = pytest.importorskip("mypy.api")
    user = tmp_path / "user.py"
    user.write_text(USER_CODE)
    monkeypatch.setenv("MYPYPATH", str(Path(fl.__file__).resolve().parents[1]))
    # no config file: the user's own checker; fedlabels' modules followed silently (the
    # project's mypy configuration checks them), so only the user's lines can fail
    out, err, _ = api.run(["--config-file=", "--strict", "--follow-imports=silent",
                           "--cache-dir", str(tmp_path / "cache"), str(user)])
    errors = [line for line in out.splitlines() if line.startswith(str(user))]
    assert not errors, "\n".join(errors) + err
