"""A site's own data is checked when it loads (``site.load_site``), each fault one line naming
the file: no rows, rows of another width than U, gaps, labels that are no class index; and
the fingerprint the sites compare at the hello covers the shared file's values, not only
its names and shapes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fedlabels.core.errors import FedLabelsError
from fedlabels.engines.flower.prepare import PreparedRun, prepare_run
from fedlabels.engines.flower.site import load_site
from fedlabels.runs.config import RunConfig


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> PreparedRun:
    cfg = RunConfig(method="fedct", dataset="breast_cancer", clients=3, model="dt", rounds=1)
    return prepare_run(cfg, tmp_path_factory.mktemp("sites"))


def _with(prepared: PreparedRun, tmp_path: Path, **arrays: Any) -> dict[str, Any]:
    """Site 0's node config with its private file's arrays replaced by ``arrays``."""
    with np.load(prepared.client_paths[0]) as data:
        own = {k: data[k] for k in data.files}
    path = tmp_path / "client_0.npz"
    np.savez(path, **{**own, **arrays})
    return {**prepared.node_settings(0), "data-path": str(path)}


def _rows(prepared: PreparedRun) -> tuple[np.ndarray, np.ndarray]:
    with np.load(prepared.client_paths[0]) as data:
        return data["X"], data["y"]


def test_a_site_without_rows_is_one_line(prepared: PreparedRun, tmp_path: Path) -> None:
    X, y = _rows(prepared)
    node = _with(prepared, tmp_path, X=X[:0], y=y[:0])
    with pytest.raises(FedLabelsError, match=r"has 0 rows and 0 labels; it needs at least one"):
        load_site(node)


@pytest.mark.parametrize("fault,said", [
    ("narrow", r"features of shape \(29,\) but the shared public set U has 30"),
    ("nan", r"contains NaN or inf"),
    ("class", r"must be class indices in \[0, 2\); got dtype int64, range \[0, 2\]"),
    ("float", r"must be class indices in \[0, 2\); got dtype float64"),
])
def test_a_sites_bad_rows_are_named(prepared: PreparedRun, tmp_path: Path, fault: str,
                                    said: str) -> None:
    X, y = _rows(prepared)
    X, y = X.copy(), y.astype(np.int64)
    if fault == "narrow":
        X = X[:, 1:]
    elif fault == "nan":
        X[3, 4] = np.nan
    elif fault == "class":
        y[0] = 2  # breast_cancer has classes 0 and 1
    else:
        y = y.astype(np.float64)
    with pytest.raises(FedLabelsError, match=said):
        load_site(_with(prepared, tmp_path, X=X, y=y))


def test_the_hello_fingerprint_covers_the_shared_files_values(prepared: PreparedRun,
                                                              tmp_path: Path) -> None:
    """Two shared files with the same U but another scaling (same names, dtypes and shapes)
    must not look alike at the hello: their sites would train on rows scaled otherwise."""
    node = prepared.node_settings(0)
    with np.load(prepared.shared_path) as data:
        shared = {k: data[k] for k in data.files}
    assert "scale_std" in shared
    other = tmp_path / "shared.npz"
    np.savez(other, **{**shared, "scale_std": shared["scale_std"] * 2})
    mine, theirs = load_site(node), load_site({**node, "shared-path": str(other)})
    assert np.array_equal(mine.X_public, theirs.X_public)
    assert mine.public_digest() != theirs.public_digest()
    assert load_site(node).public_digest() == mine.public_digest()
