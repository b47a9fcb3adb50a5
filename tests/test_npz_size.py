"""An .npz handed over (a models file, a checkpoint, a site's data) is refused when it
would inflate far beyond its size, before ``np.load`` inflates it into memory."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np
import pytest

from fedlabels.core import npz_size
from fedlabels.core.errors import FedLabelsError


def _bomb(path: Path, inflated: int) -> Path:
    """An .npz whose one member is ``inflated`` bytes of zeros, deflated (~1000-fold)."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<f8", "fortran_order": False, "shape": (inflated // 8,)})
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf, \
            zf.open("manifest.npy", "w") as fh:
        fh.write(header.getvalue())
        fh.write(bytes(inflated // 8 * 8))
    return path


@pytest.fixture
def small_slack(monkeypatch):
    """A bound of 64 x the file's size + 1 MB, so that the test's bomb inflates 16 MB (the
    real slack is 256 MB)."""
    monkeypatch.setattr(npz_size, "SLACK", 1 << 20)


def test_a_models_file_that_inflates_a_thousand_fold_is_refused_unread(tmp_path,
                                                                      small_slack):
    from fedlabels.results.model_format import read_models_file

    path = _bomb(tmp_path / "x.models.npz", 16 << 20)
    with pytest.raises(FedLabelsError, match="bytes inflate to 16,777,"):
        read_models_file(path)


def test_a_checkpoint_that_inflates_a_thousand_fold_is_refused_unread(tmp_path, small_slack):
    from fedlabels.runs.checkpoint import load_checkpoint

    path = _bomb(tmp_path / "x.checkpoint.npz", 16 << 20)
    with pytest.raises(FedLabelsError, match=r"refusing checkpoint .* bytes inflate to"):
        load_checkpoint(path, key=bytes(32))


def test_a_sites_file_that_inflates_a_thousand_fold_is_refused_unread(tmp_path, small_slack):
    from fedlabels.engines.flower.site import _load_npz

    path = _bomb(tmp_path / "client_0.npz", 16 << 20)
    with pytest.raises(FedLabelsError, match="bytes inflate to"):
        _load_npz(path, "site 0", ("X", "y"))


def test_files_fedlabels_writes_pass_the_bound(tmp_path, small_slack):
    """A forest's models file and a site's uncompressed data lie far below the bound."""
    from sklearn.datasets import load_digits
    from sklearn.ensemble import RandomForestClassifier

    from fedlabels.results.model_format import read_models_file, write_models_file

    X, y = load_digits(return_X_y=True)
    path = tmp_path / "rf.models.npz"
    write_models_file(path, {"models": [RandomForestClassifier(5, random_state=0).fit(X, y)]})
    assert len(read_models_file(path)["models"]) == 1
    np.savez(tmp_path / "site.npz", X=np.zeros((1000, 64)), y=np.zeros(1000))
    npz_size.check_inflated_size(tmp_path / "site.npz", "site file")
