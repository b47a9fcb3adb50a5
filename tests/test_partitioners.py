"""Quantity skew (quantity, powerlaw), the natural column partition and the shifted U."""

import json

import numpy as np
import pandas as pd
import pytest

import fedlabels as fl
from fedlabels.cli import main
from fedlabels.core.errors import FedLabelsError
from fedlabels.data.partition import largest_remainder, parse_partition, partition
from fedlabels.data.shift import label_tv
from fedlabels.runs.config import RunConfig


def _labels(n=1200, c=10, seed=0):
    return np.random.default_rng(seed).integers(0, c, n)


def gini(sizes) -> float:
    """Gini coefficient from the mean absolute difference (independent of the code)."""
    x = np.asarray(sizes, dtype=float)
    return float(np.abs(x[:, None] - x[None, :]).sum() / (2 * len(x) ** 2 * x.mean()))


def _check_disjoint_cover(parts, n, m):
    flat = np.concatenate(parts)
    assert len(parts) == m
    assert len(flat) == len(np.unique(flat)) == n
    assert set(flat.tolist()) == set(range(n))


@pytest.mark.parametrize("spec", ["quantity:0.5", "quantity:1,30", "powerlaw:1.2",
                                  "powerlaw:2,25"])
def test_quantity_partitions_are_seeded_disjoint_covering_with_a_minimum(spec):
    y = _labels()
    a = partition(y, 7, spec, np.random.default_rng(3))
    b = partition(y, 7, spec, np.random.default_rng(3))
    c = partition(y, 7, spec, np.random.default_rng(4))
    _check_disjoint_cover(a, len(y), 7)
    assert all(np.array_equal(p, q) for p, q in zip(a, b, strict=True))
    assert not all(np.array_equal(p, q) for p, q in zip(a, c, strict=True))
    least = int(spec.split(",")[1]) if "," in spec else 1
    assert min(len(p) for p in a) >= least


def test_quantity_skew_grows_as_claimed_measured_by_gini():
    y = _labels(5000)
    rng = np.random.default_rng(0)

    def g(spec):  # mean over draws: a Dirichlet draw is noisy
        return np.mean([gini([len(p) for p in partition(y, 10, spec, rng)]) for _ in range(5)])

    assert g("quantity:0.2") > g("quantity:2") > g("quantity:100")
    assert g("quantity:100") < 0.1  # near-equal sizes (CV of Dirichlet(100) ~ 0.1)
    assert gini([len(p) for p in partition(y, 10, "powerlaw:0", rng)]) < 0.001
    assert 0 < g("powerlaw:0.5") < g("powerlaw:1") < g("powerlaw:2")


def test_powerlaw_sizes_follow_zipf():
    n, m, a, least = 10_000, 8, 1.5, 10
    parts = partition(_labels(n), m, f"powerlaw:{a},{least}", np.random.default_rng(0))
    sizes = np.sort([len(p) for p in parts])[::-1]
    ranks = np.arange(1, m + 1, dtype=float)
    expected = least + (n - m * least) * ranks ** -a / (ranks ** -a).sum()
    assert np.all(np.abs(sizes - expected) <= 1)  # rounding only
    assert sizes.sum() == n


def test_largest_remainder_sums_and_rounds():
    w = np.array([0.5, 0.3, 0.2, 1e-9])
    got = largest_remainder(7, w)
    assert got.sum() == 7 and np.all(np.abs(got - 7 * w / w.sum()) < 1)


def test_quantity_label_distribution_stays_iid():
    y = _labels(6000)
    parts = partition(y, 5, "powerlaw:1", np.random.default_rng(0))
    for p in parts:
        assert label_tv(y[p], y, 10) < 0.1  # sizes are skewed, classes are not


@pytest.mark.parametrize("spec", ["quantity:1,300", "powerlaw:1,300"])
def test_minimum_size_that_cannot_be_met_is_an_error(spec):
    with pytest.raises(FedLabelsError, match="at least 300"):
        partition(_labels(1000), 5, spec, np.random.default_rng(0))


@pytest.mark.parametrize("spec", ["quantity:0", "powerlaw:-1", "quantity:1,0", "powerlaw:1,2,3",
                                  "column:", "powerlaw:x"])
def test_bad_specs(spec):
    with pytest.raises(FedLabelsError):
        partition(_labels(), 5, spec, np.random.default_rng(0))


# --------------------------------------------------------------------------- column:NAME

def _site_table(seed=0):
    rng = np.random.default_rng(seed)
    sizes = {"Bonn": 140, "aachen": 60, "Cologne": 220}  # unequal sites
    site = np.repeat(list(sizes), list(sizes.values()))
    rng.shuffle(site)
    n = len(site)
    return pd.DataFrame({"row": np.arange(n, dtype=float), "Site": site,
                         "x": rng.normal(size=n)}), rng.integers(0, 3, n)


def test_column_partition_gives_each_site_to_one_client():
    X, y = _site_table()
    fed = fl.make_federation(X, y, clients=3, unlabeled=100, test=50, scale="none",
                             partition="column:Site", seed=1)
    assert fed.feature_names == ["row", "x"]  # the site column is no feature
    names = sorted(X["Site"].unique())
    assert fed.info["client_sites"] == names
    seen = [fed.X_public[:, 0], fed.X_test[:, 0]]
    for i, client in enumerate(fed.clients):
        rows = client.X[:, 0].astype(int)
        assert set(X["Site"].to_numpy()[rows]) == {names[i]}
        seen.append(client.X[:, 0])
    flat = np.concatenate(seen).astype(int)
    assert len(flat) == len(np.unique(flat)) == len(X)  # disjoint and covering
    # every private row of a site is on that site's client (oracle: the table itself)
    private = set(range(len(X))) - set(fed.X_public[:, 0].astype(int)) \
        - set(fed.X_test[:, 0].astype(int))
    for i, client in enumerate(fed.clients):
        want = {r for r in private if X["Site"].iloc[r] == names[i]}
        assert set(client.X[:, 0].astype(int)) == want
    again = fl.make_federation(X, y, clients=3, unlabeled=100, test=50, scale="none",
                               partition="column:Site", seed=1)
    assert all(np.array_equal(a.X, b.X) for a, b in zip(fed.clients, again.clients,
                                                         strict=True))


def test_column_partition_errors():
    X, y = _site_table()
    with pytest.raises(FedLabelsError, match="--clients 3"):
        fl.make_federation(X, y, clients=4, unlabeled=100, partition="column:Site")
    with pytest.raises(FedLabelsError, match=r"no column 'site' \(did you mean 'Site'\?\)"):
        fl.make_federation(X, y, clients=3, unlabeled=100, partition="column:site")
    with pytest.raises(FedLabelsError, match="named columns"):
        fl.make_federation(X[["row", "x"]].to_numpy(), y, clients=3, unlabeled=100,
                           partition="column:Site")
    with pytest.raises(FedLabelsError, match="no column 'Site'"):  # a dataset without it
        fl.load_federation("digits", clients=3, partition="column:Site")


def test_column_partition_from_a_csv_reads_the_column_even_when_not_a_feature(tmp_path):
    X, y = _site_table()
    path = tmp_path / "sites.csv"
    X.assign(label=y).to_csv(path, index=False)
    fed = fl.load_federation(f"csv:{path}:label", clients=3, unlabeled=100,
                             partition="column:Site", features="x")
    assert fed.feature_names == ["x"]
    assert [len(c) for c in fed.clients] == fed.summary()["client_sizes"]
    assert sum(fed.summary()["client_sizes"]) == fed.info["n_private"]


# --------------------------------------------------------------------------- shifted U

def _fed(shift=0.0, seed=0, n_unlabeled=400):
    return fl.load_federation("digits", clients=4, seed=seed, unlabeled=n_unlabeled,
                              private=300, unlabeled_shift=shift)


def test_zero_shift_is_exactly_the_unshifted_u():
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    fed = fl.make_federation(X, y, clients=4, unlabeled=600, test=360, scale="none",
                             seed=5, unlabeled_shift=0)
    # oracle: the documented construction (a permutation from the first seed stream; the
    # test rows first, then U)
    order = np.random.default_rng(np.random.SeedSequence(5).spawn(2)[0]).permutation(len(y))
    np.testing.assert_array_equal(fed.X_public, X[order[360:960]].astype(np.float32))
    np.testing.assert_array_equal(fed.y_public, y[order[360:960]])
    plain = fl.make_federation(X, y, clients=4, unlabeled=600, test=360, scale="none",
                               seed=5)
    assert all(np.array_equal(a.X, b.X) for a, b in zip(fed.clients, plain.clients,
                                                         strict=True))


def test_shift_moves_u_class_proportions_as_defined():
    from sklearn.datasets import load_digits

    base = _fed(0.0)
    y_all = load_digits().target
    pool = np.bincount(y_all, minlength=10) - np.bincount(base.y_test, minlength=10)
    p = pool / pool.sum()
    tvs = []
    for s in (0.0, 0.3, 0.6, 0.9):
        fed = _fed(s)
        rec = fed.info["unlabeled_shift"]
        counts = np.bincount(fed.y_public, minlength=10)
        if s:
            favoured = rec["favoured_classes"]
            assert len(favoured) == 5
            q = (1 - s) * p
            q[favoured] += s / 5
            assert np.all(np.abs(counts - 400 * q) <= 1)
        # only U moves: test set and clients are those of S = 0
        np.testing.assert_array_equal(fed.y_test, base.y_test)  # (X: z-scored by U)
        assert all(np.array_equal(a.y, b.y) for a, b in zip(fed.clients, base.clients,
                                                             strict=True))
        private = np.concatenate([c.y for c in fed.clients])
        assert rec["label_tv"] == pytest.approx(
            0.5 * np.abs(counts / 400 - np.bincount(private, minlength=10) / len(private)).sum(),
            abs=1e-6)
        tvs.append(rec["label_tv"])
        assert rec["feature_smd"] >= 0
    assert tvs == sorted(tvs) and 0.35 < tvs[-1] < 0.55  # about S/2 on near-balanced digits


def test_shifted_u_is_seeded_and_disjoint():
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    X = np.column_stack([np.arange(len(y)), X])  # column 0: the row id

    def fed(seed):
        return fl.make_federation(X, y, clients=4, unlabeled=600, test=360,
                                  private=400, scale="none", seed=seed,
                                  unlabeled_shift=0.5, partition="quantity:1")

    a, b, c = fed(2), fed(2), fed(3)
    np.testing.assert_array_equal(a.X_public, b.X_public)
    assert not np.array_equal(a.X_public, c.X_public)
    ids = np.concatenate([a.X_public[:, 0], a.X_test[:, 0],
                          *[cl.X[:, 0] for cl in a.clients]]).astype(int)
    assert len(ids) == len(np.unique(ids)) == 600 + 360 + 400  # U, test, private: disjoint


def test_shift_errors():
    with pytest.raises(FedLabelsError, match="in \\[0, 1\\]"):
        RunConfig(dataset="digits", unlabeled_shift=1.5)
    with pytest.raises(FedLabelsError, match="smaller --private"):
        _fed(1.0, n_unlabeled=1000)  # five classes cannot fill 1000 rows of U
    with pytest.raises(FedLabelsError, match="regression"):
        fl.load_federation("diabetes", unlabeled_shift=0.2)
    with pytest.raises(FedLabelsError, match="make_federation"):
        fl.run("local", _fed(), model="dt", rounds=1, unlabeled_shift=0.2)


def test_shift_through_cli_toml_and_api_is_recorded(tmp_path):
    out = tmp_path / "r.json"
    assert main(["run", "--dataset", "digits", "--clients", "4", "--method", "local",
                 "--model", "dt", "--rounds", "1", "--no-progress", "--unlabeled", "600",
                 "--private", "300",
                 "--unlabeled-shift", "0.5", "--partition", "powerlaw:1,20",
                 "--output", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["config"]["unlabeled_shift"] == 0.5
    fed = data["federation"]
    assert fed["unlabeled_shift"]["S"] == 0.5 and fed["unlabeled_shift"]["label_tv"] > 0.2
    assert min(fed["client_sizes"]) >= 20
    assert [sum(c) for c in fed["client_class_counts"]] == fed["client_sizes"]
    cfg = tmp_path / "run.toml"
    cfg.write_text('dataset = "digits"\nunlabeled_shift = 0.5\nunlabeled = 600\n')
    from fedlabels.runs.config import load_config

    assert load_config(cfg).unlabeled_shift == 0.5
    # a dataset name with its default sizes: every labelled row left is private, so no row
    # is left to draw a shifted U from (a clear error, from fl.run's own argument)
    with pytest.raises(FedLabelsError, match="smaller --private"):
        fl.run("local", "digits", model="dt", rounds=1, unlabeled_shift=0.2)


@pytest.mark.parametrize("spec", ["dirichlet", "dirichlet:", "dirichlet:0", "dirichlet:1,2,3"])
def test_a_bad_dirichlet_partition_names_both_accepted_forms(spec):
    """The error listed only 'dirichlet:A1,A2', though 'dirichlet:A' is accepted."""
    with pytest.raises(FedLabelsError) as caught:
        fl.make_federation(np.random.default_rng(0).random((60, 3)), np.arange(60) % 2,
                           partition=spec)
    message = str(caught.value)
    assert "'dirichlet:A1,A2' or 'dirichlet:A'" in message and "\n" not in message
    assert str(parse_partition("dirichlet:0.5")) == "dirichlet:0.5,0.5"  # what A means


def test_feature_smd_in_blocks_of_rows_equals_it_at_once(monkeypatch):
    # large images: the moments of the clients' rows are summed a block at a time, not of
    # one float64 copy of them all; the figure is the formula's on the rows together
    from fedlabels.data import shift

    rng = np.random.default_rng(0)
    public = rng.normal(0.3, 1.0, (40, 7)).astype(np.float32)
    clients = [rng.normal(0.0, s, (n, 7)).astype(np.float32) for n, s in ((9, 1), (13, 2), (1, 3))]
    clients[0][:, 2] = 5.0  # a column constant in one client only
    rows = np.concatenate(clients).astype(np.float64)
    sd = rows.std(axis=0)
    expected = np.mean(np.abs(public.mean(axis=0, dtype=np.float64) - rows.mean(axis=0)) / sd)
    assert shift.feature_smd(public, clients) == pytest.approx(expected, rel=1e-12)
    monkeypatch.setattr(shift, "_BLOCK_ELEMENTS", 10)  # blocks of one row, across clients
    assert shift.feature_smd(public, clients) == pytest.approx(expected, rel=1e-12)
    assert shift.feature_smd(public, [np.ones((3, 7), np.float32)]) == 0.0  # all constant


def test_column_partition_orders_numeric_sites_as_numbers():
    """Client i is the i-th distinct value in numeric order for a numeric column: site 2
    before site 10 (as text, "10" sorts first)."""
    n = 300
    X = pd.DataFrame({"row": np.arange(n, dtype=float),
                      "site": np.array([2, 10, 33])[np.arange(n) % 3]})
    y = (np.arange(n) // 3) % 2
    fed = fl.make_federation(X, y, clients=3, unlabeled=60, test=30, scale="none",
                             partition="column:site")
    assert fed.info["client_sites"] == ["2", "10", "33"]
    for client, site in zip(fed.clients, [2, 10, 33], strict=True):
        assert set(X["site"].to_numpy()[client.X[:, 0].astype(int)]) == {site}


def test_shards_may_give_every_client_every_class():
    """shards:K with K = C (the number of classes) is allowed: every client holds every
    class, and each class's rows are shared out among all of them."""
    y = _labels(300, c=4)
    parts = partition(y, 3, "shards:4", np.random.default_rng(0))
    _check_disjoint_cover(parts, len(y), 3)
    assert all(set(y[p].tolist()) == {0, 1, 2, 3} for p in parts)
    with pytest.raises(FedLabelsError, match="K from 1 to 4"):
        partition(y, 3, "shards:5", np.random.default_rng(0))


@pytest.mark.parametrize("kind", ["quantity:0.5", "powerlaw:1"])
def test_a_minimum_that_takes_every_row_gives_each_client_exactly_it(kind):
    """n = m * MIN is enough: every client gets exactly MIN rows; one row less is refused."""
    y = _labels(40, c=2)
    parts = partition(y, 4, f"{kind},10", np.random.default_rng(3))
    _check_disjoint_cover(parts, 40, 4)
    assert [len(p) for p in parts] == [10, 10, 10, 10]
    with pytest.raises(FedLabelsError, match="needs 40 private examples; only 39"):
        partition(y[:39], 4, f"{kind},10", np.random.default_rng(3))


@pytest.mark.parametrize("seed", range(8))
def test_a_shifted_u_never_takes_a_private_row(seed):
    """U is drawn from the pool's rows that are neither private nor test: at S = 1 the
    favoured classes need rows from past the private block, and none of the private rows
    (those of S = 0) may be among U's, whatever the class counts ask."""
    from fedlabels.data.shift import shifted_public

    rng = np.random.default_rng(seed)
    y = rng.integers(0, 4, 200)
    pool = rng.permutation(200)[20:]  # 20 rows held out to test
    n_unlabeled, n_private = 30, 70
    u, favoured = shifted_public(pool, y, n_unlabeled, n_private, 1.0, 4,
                                 np.random.default_rng(seed))
    private = set(pool[n_unlabeled:n_unlabeled + n_private].tolist())
    assert len(u) == n_unlabeled == len(set(u.tolist()))
    assert not private & set(u.tolist())
    assert set(u.tolist()) <= set(pool.tolist())
    assert set(y[u].tolist()) <= set(favoured)
