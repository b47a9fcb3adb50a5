"""public_pca=K: every feature vector projected onto U's top-K whitened principal components."""

import json

import numpy as np
import pandas as pd
import pytest
from sklearn.decomposition import PCA

import fedlabels as fl
from fedlabels.core.errors import FedLabelsError
from fedlabels.data import make_federation
from fedlabels.data.preprocessing import Preprocessing
from fedlabels.runs.config import RunConfig, load_config
from fedlabels.runs.federation import federation_for


def _data(n=600, d=20, seed=0):
    """Correlated features on very different scales, three classes."""
    rng = np.random.default_rng(seed)
    latent = rng.standard_normal((n, 5))
    X = latent @ rng.standard_normal((5, d)) + 0.3 * rng.standard_normal((n, d))
    X *= rng.uniform(0.1, 50, d)
    y = (latent[:, 0] > 0).astype(int) + (latent[:, 1] > 0.5).astype(int)
    return X, y


def _fed(X, y, **kw):
    return make_federation(X, y, clients=3, unlabeled=300, test=100, seed=4, **kw)


def _same_up_to_sign(a, b, atol):
    """``a`` equals ``b`` once each column of ``b`` is given ``a``'s sign."""
    signs = np.sign(np.sum(a * b, axis=0))
    assert np.all(signs != 0)
    np.testing.assert_allclose(a, b * signs, atol=atol)


def test_matches_sklearn_whitened_pca_fitted_on_u():
    X, y = _data()
    plain, fed = _fed(X, y), _fed(X, y, public_pca=6)
    sk = PCA(n_components=6, whiten=True).fit(plain.X_public.astype(np.float64))
    for ours, base in [(fed.X_public, plain.X_public), (fed.X_test, plain.X_test),
                       *[(c.X, p.X) for c, p in zip(fed.clients, plain.clients, strict=True)]]:
        assert ours.dtype == np.float32 and ours.shape == (len(base), 6)
        _same_up_to_sign(sk.transform(base.astype(np.float64)), ours, atol=1e-4)
    rec = fed.summary()["public_pca"]
    assert rec["components"] == 6
    assert rec["explained_variance"] == pytest.approx(sk.explained_variance_ratio_.sum(),
                                                      abs=2e-6)
    assert fed.feature_names == [f"pc{i}" for i in range(1, 7)] and fed.n_features == 6
    np.testing.assert_array_equal(fed.y_test, plain.y_test)


def test_signs_are_fixed_largest_entry_positive():
    X, y = _data()
    V = _fed(X, y, public_pca=5).preprocessing.pca.components
    np.testing.assert_allclose(V.T @ V, np.eye(5), atol=1e-10)
    assert np.all(V[np.argmax(np.abs(V), axis=0), np.arange(5)] > 0)


def test_projection_comes_from_u_alone():
    X, y = _data()
    plain = _fed(X, y)
    mean, std = plain.preprocessing.mean, plain.preprocessing.std
    raw_u = plain.X_public.astype(np.float64) * std + mean  # U's raw rows, to find them in X
    in_u = np.zeros(len(X), dtype=bool)
    for row in raw_u:
        in_u[np.argmin(np.abs(X - row).max(axis=1))] = True
    assert in_u.sum() == 300
    rng = np.random.default_rng(9)
    X2, y2 = X.copy(), rng.permutation(y)  # other labels everywhere, U's included
    X2[~in_u] = 100 * rng.standard_normal(((~in_u).sum(), X.shape[1]))  # other private data
    a, b = _fed(X, y, public_pca=4), _fed(X2, y2, public_pca=4)
    assert not np.allclose(a.clients[0].X, b.clients[0].X)  # the private data did change
    for key in ("mean", "components", "scale"):
        np.testing.assert_array_equal(getattr(a.preprocessing.pca, key),
                                      getattr(b.preprocessing.pca, key))
    np.testing.assert_array_equal(a.X_public, b.X_public)


def test_whitened_u_has_unit_variance_and_uncorrelated_components():
    X, y = _data()
    Xp = _fed(X, y, public_pca=7).X_public.astype(np.float64)
    np.testing.assert_allclose(Xp.mean(axis=0), 0, atol=1e-5)
    np.testing.assert_allclose(np.cov(Xp, rowvar=False), np.eye(7), atol=1e-5)


def test_transform_of_raw_rows_is_the_federations_test_set():
    X, y = _data()
    cols = [f"f{i}" for i in range(X.shape[1])]
    frame, test = pd.DataFrame(X[:500], columns=cols), pd.DataFrame(X[500:], columns=cols)
    fed = make_federation(frame, y[:500], X_test=test, y_test=y[500:], clients=3,
                          unlabeled=200, seed=1, public_pca=5)
    prep = fed.preprocessing
    assert prep.feature_names == cols  # the raw columns it reads, not pc1..pc5
    np.testing.assert_allclose(prep.transform(test), fed.X_test, atol=1e-5)
    again = Preprocessing.from_dict(json.loads(json.dumps(prep.to_dict())))
    np.testing.assert_array_equal(again.transform(test), prep.transform(test))


def test_default_leaves_the_features_as_they_were():
    X, y = _data()
    Xt, yt = X[500:], y[500:]
    fed = make_federation(X[:500], y[:500], X_test=Xt, y_test=yt, clients=3,
                          unlabeled=200, seed=1)
    assert fed.n_features == X.shape[1] and fed.feature_names[0] == "x0"
    assert "public_pca" not in fed.summary() and fed.preprocessing.pca is None
    mean, std = fed.public_scaling
    np.testing.assert_array_equal(fed.X_test, ((Xt - mean) / std).astype(np.float32))
    assert "pca" not in fed.preprocessing.to_dict()


def test_regression_and_unscaled_data_are_projected_too():
    X, y = _data()
    fed = make_federation(X, y.astype(float) + X[:, 0], clients=3, unlabeled=300,
                          seed=0, task="regression", public_pca=3)
    assert fed.X_public.shape[1] == 3 and fed.task == "regression"
    raw = make_federation(X, y, clients=3, unlabeled=300, seed=0, scale="none",
                          public_pca=3)
    sk = PCA(n_components=3, whiten=True).fit(
        make_federation(X, y, clients=3, unlabeled=300, seed=0,
                        scale="none").X_public.astype(np.float64))
    assert raw.public_scaling is None
    _same_up_to_sign(sk.transform(X[:5]), raw.preprocessing.transform(X[:5]), atol=1e-3)


@pytest.mark.parametrize("k,message", [
    (0, "public_pca must be an integer >= 1"),
    (True, "public_pca must be an integer >= 1"),
    (21, "at most 20 components exist"),
])
def test_bad_k_is_one_line_error(k, message):
    X, y = _data()
    with pytest.raises(FedLabelsError, match=message) as err:
        _fed(X, y, public_pca=k)
    assert "\n" not in str(err.value)


def test_k_above_the_size_of_u_is_refused():
    X, y = _data()
    _fed(X, y, public_pca=20)  # min(|U|, d) itself is allowed
    with pytest.raises(FedLabelsError, match=r"U has 12 rows of 20 features.*between 1 and 12"):
        make_federation(X, y, clients=3, unlabeled=12, seed=0, public_pca=13)
    with pytest.raises(FedLabelsError, match="public_pca must be an integer >= 1"):
        RunConfig(dataset="digits", public_pca=0)


def test_text_is_refused():
    texts = [f"word{i % 7} other{i % 3} text" for i in range(60)]
    labels = [i % 2 for i in range(60)]
    with pytest.raises(FedLabelsError, match="leave public_pca unset for text"):
        make_federation(texts, labels, clients=2, unlabeled=20, seed=0, public_pca=2)


def test_run_with_a_built_federation_refuses_it():
    fed = fl.load_federation("wine", clients=2, seed=0)
    with pytest.raises(FedLabelsError, match="public_pca applies when the federation is built"):
        fl.run("fedct", fed, model="dt", rounds=1, public_pca=3)


def test_toml_key_reaches_the_federation(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('dataset = "wine"\nclients = 2\npublic_pca = 4\n')
    cfg = load_config(path)
    assert cfg.public_pca == 4
    fed = federation_for(cfg)
    assert fed.X_public.shape[1] == 4 and fed.summary()["public_pca"]["components"] == 4


def test_cli_run_records_it_and_predict_reuses_it(tmp_path):
    from fedlabels.cli import main
    from fedlabels.data import get_dataset

    out = tmp_path / "r.json"
    assert main(["run", "--dataset", "breast_cancer", "--method", "fedct", "--model", "dt",
                 "--clients", "3", "--rounds", "2", "--public-pca", "8", "--no-progress",
                 "--output", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["config"]["public_pca"] == 8
    rec = data["federation"]["public_pca"]
    assert rec["components"] == 8 and 0.5 < rec["explained_variance"] < 1
    assert data["federation"]["n_features"] == 8
    raw = get_dataset("breast_cancer").load()
    rows = tmp_path / "rows.csv"
    raw.X.head(40).to_csv(rows, index=False)
    pred = tmp_path / "pred.csv"
    assert main(["predict", str(out), str(rows), "-o", str(pred)]) == 0
    labels = pd.read_csv(pred)["prediction"].astype(str)
    assert len(labels) == 40 and set(labels) <= {"0", "1"}
    # the saved models see the projected rows: most of these training rows are right
    assert np.mean(labels.to_numpy() == raw.y.head(40).astype(str).to_numpy()) > 0.8


def test_deploy_site_files_hold_the_projected_features(tmp_path):
    from fedlabels.engines.flower.prepare import prepare_run

    cfg = RunConfig(method="fedct", dataset="wine", clients=3, model="dt", public_pca=4)
    prepared = prepare_run(cfg, tmp_path)
    fed = federation_for(cfg)
    with np.load(prepared.shared_path) as shared:
        np.testing.assert_array_equal(shared["X_public"], fed.X_public)
    with np.load(prepared.client_paths[0]) as site:
        assert site["X"].shape[1] == 4


def test_a_deploy_site_with_raw_csv_rows_gets_them_projected(tmp_path):
    """A site that brings its own raw CSV rows gets what ``predict`` would make of them:
    z-scored by U, then projected onto U's components (the shared file carries both)."""
    from sklearn.datasets import load_wine

    from fedlabels.engines.flower.prepare import prepare_run
    from fedlabels.engines.flower.site import load_site

    cfg = RunConfig(method="fedct", dataset="wine", clients=3, model="dt", public_pca=4)
    prepared = prepare_run(cfg, tmp_path / "sites")
    fed = federation_for(cfg)
    wine = load_wine(as_frame=True)
    frame = wine.data.head(30).copy()
    frame["label"] = wine.target.head(30).astype(str)
    frame.to_csv(tmp_path / "site0.csv", index=False)
    site = load_site({"partition-id": 0, "data-path": str(tmp_path / "site0.csv"),
                      "target": "label", "shared-path": str(prepared.shared_path)})
    assert site.private.X.shape == (30, 4)
    want = fed.preprocessing.transform(wine.data.head(30))
    np.testing.assert_allclose(site.private.X, want, atol=1e-5)


def test_a_component_u_has_no_variance_along_keeps_scale_one():
    """U of rank 1 (the second feature twice the first): its second component holds no
    variance, so it keeps scale 1 instead of dividing by a singular value of ~1e-16, and a
    row off U's line projects to a value of its own size, not ~1e16."""
    from fedlabels.data.public_pca import fit_public_pca

    t = np.random.default_rng(0).normal(size=50)
    pca = fit_public_pca(np.c_[t, 2 * t], 2)
    assert pca.scale[1] == 1.0 and pca.scale[0] == pytest.approx(np.sqrt(5) * t.std(ddof=1))
    off = np.array([[2.0, -1.0]])
    u = np.array([1.0, 2.0]) / np.sqrt(5)  # U's line; the component is its normal
    centred = off[0] - pca.mean
    assert abs(pca.project(off)[0, 1]) == pytest.approx(np.linalg.norm(centred - centred @ u * u))
