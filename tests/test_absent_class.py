"""A class with fewer examples than clients: an iid split leaves most clients without it.
Every method runs (no crash) and the run says which class is absent where, since the
accuracy alone does not show that a client's own model cannot predict it."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import fedlabels as fl


@pytest.fixture(scope="module")
def rare():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 4))
    y = np.where(X[:, 0] > 0, "a", "b").astype(object)
    y[:3], X[:3] = "rare", X[:3] + 3  # 3 examples in all, for 8 clients (and U, test)
    return fl.make_federation(X, y, clients=8, unlabeled=150, seed=0)


def _absent(fed) -> tuple[int, int]:
    """Clients without 'rare' and its examples at the clients, from their labels."""
    code = fed.class_names.index("rare")
    held = [int(np.count_nonzero(np.asarray(c.y) == code)) for c in fed.clients]
    return sum(h == 0 for h in held), sum(held)


@pytest.mark.parametrize(("method", "options", "model"), [
    ("fedct", None, "dt"), ("fedavg", None, "mlp(hidden=8)"), ("local", None, "dt"),
    ("dp-fedct", {"epsilon": 8, "mechanism": "xor"}, "dt")])
def test_every_method_runs_and_says_which_class_is_absent(rare, method, options, model):
    missing, held = _absent(rare)
    assert missing >= 6  # the worst case: most clients never see the class
    with pytest.warns(fl.RunCaveatWarning) as caught:
        result = fl.run(method, rare, model=model, rounds=2, seed=0, options=options,
                        progress=False)
    assert 0 <= result.final["mean_accuracy"] <= 1
    said = [str(w.message) for w in caught if "absent" in str(w.message)]
    assert len(said) == 1
    assert (f"'rare' at {missing} of 8 clients ({held} example(s) in all their data)"
            in said[0]), said


def test_a_split_by_label_or_every_class_everywhere_says_nothing(rare):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(300, 3))
    y = (X[:, 0] > 0).astype(int)
    fed = fl.make_federation(X, y, clients=3, unlabeled=100, seed=0)
    assert all(min(np.bincount(c.y, minlength=2)) > 0 for c in fed.clients)
    with warnings.catch_warnings():
        warnings.simplefilter("error", fl.RunCaveatWarning)
        fl.run("local", fed, model="dt", rounds=1, progress=False)
    from fedlabels.results.caveats import absent_class_warning

    skewed = {"partition": "dirichlet:0.1,0.1", "client_class_counts": [[5, 0], [0, 5]]}
    assert absent_class_warning(skewed) is None  # what a label-skew split is asked for
    assert "'1' at 1 of 2 clients" in absent_class_warning({**skewed, "partition": "iid"})


def test_the_warning_of_many_absent_classes_is_one_short_line_that_names_them():
    """With 26 classes (letter), 25 absent somewhere, the warning described each in one
    1.5 kB line; it describes the classes absent at the most clients, names a few more and
    counts the rest, each long class name cut."""
    from fedlabels.results.caveats import absent_class_warning

    rng = np.random.default_rng(0)
    counts = rng.integers(1, 9, (10, 26))
    rows, cols = np.indices((10, 26))
    counts[((rows + cols) % 3 == 0) & (cols > 0)] = 0  # 1..25 absent at 3 or 4 clients
    counts[:, 5] = [0] * 7 + [2, 3, 4]  # class 5: absent at the most clients (7 of 10)
    lacking = (counts == 0).sum(axis=0)
    for names in ([chr(97 + i) for i in range(26)], [f"class {i} " * 20 for i in range(26)]):
        said = absent_class_warning({"partition": "iid", "client_class_counts": counts.tolist(),
                                     "class_names": names})
        assert said is not None and "\n" not in said and len(said) < 700, said
        absent = int((lacking > 0).sum())
        assert said.startswith(f"{absent} of 26 classes are absent from clients' data")
        assert f"at 7 of 10 clients ({counts[:, 5].sum()} example(s) in all their data)" in said
        shown = names[5] if len(names[5]) <= 24 else names[5][:23] + "…"
        assert f"{shown!r} at 7 of 10" in said
        assert f"({absent - 8} more)" in said  # 3 described, 5 named, the rest counted
        assert repr(names[0]) not in said and "…" in said  # class 0 is everywhere
