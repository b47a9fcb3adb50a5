"""`fedlabels deploy prepare` on a table whose image column holds the pictures: U is pixels
in [0, 1] (no standardisation to ship), as `fedlabels run` reads the same table."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedlabels.api import load_federation
from fedlabels.cli import main


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDLABELS_CACHE", str(tmp_path / "cache"))


def test_prepare_reads_a_tables_image_column(tmp_path: Path) -> None:
    from test_image_data import make_folder

    make_folder(tmp_path / "imgs", sizes=(12, 15, 18))
    rows = sorted((tmp_path / "imgs").glob("*/*.png"))
    (tmp_path / "t.csv").write_text("file,label\n" + "".join(
        f"{p.relative_to(tmp_path)},{p.parent.name}\n" for p in rows))
    dataset = f"csv:{tmp_path / 't.csv'}:label"
    # before: the table was read again without its image column to standardise U, and the
    # path column was refused as an identifier, after the sites' files were written
    code = main(["deploy", "prepare", "--dataset", dataset, "--image-column", "file",
                 "--clients", "3", "--model", "cnn(arch=small)", "--rounds", "1",
                 "--out-dir", str(tmp_path / "dep")])
    assert code == 0
    shared = np.load(tmp_path / "dep" / "shared.npz")
    assert "scale_mean" not in shared and shared["image_shape"].tolist() == [3, 12, 10]
    fed = load_federation(dataset, clients=3, image_column="file", seed=0)
    assert np.array_equal(shared["X_public"], fed.X_public)  # the simulator's U, unscaled
    assert shared["X_public"].min() >= 0.0 and shared["X_public"].max() <= 1.0
