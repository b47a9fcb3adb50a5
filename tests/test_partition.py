import numpy as np
import pytest

from fedlabels.core.errors import FedLabelsError
from fedlabels.data.partition import parse_partition, partition


def _labels(n=1000, c=10, seed=0):
    return np.random.default_rng(seed).integers(0, c, n)


@pytest.mark.parametrize("spec", ["iid", "dirichlet:100,0.01", "dirichlet:0.5", "shards:2"])
def test_partitions_are_disjoint_and_cover_the_pool(spec):
    y = _labels()
    parts = partition(y, 5, spec, np.random.default_rng(1))
    allidx = np.concatenate(parts)
    assert len(parts) == 5
    assert len(allidx) == len(np.unique(allidx)), "client sets overlap"
    assert set(allidx.tolist()) == set(range(len(y))), "pool not covered"
    assert all(len(p) > 0 for p in parts)


@pytest.mark.parametrize("spec", ["iid", "dirichlet:100,0.01", "shards:2"])
def test_partitions_are_seeded(spec):
    y = _labels()
    a = partition(y, 5, spec, np.random.default_rng(7))
    b = partition(y, 5, spec, np.random.default_rng(7))
    c = partition(y, 5, spec, np.random.default_rng(8))
    assert all(np.array_equal(p, q) for p, q in zip(a, b, strict=True))
    assert not all(np.array_equal(p, q) for p, q in zip(a, c, strict=True))


def _mean_class_entropy(y, parts, c=10):
    ent = []
    for p in parts:
        counts = np.bincount(y[p], minlength=c) / len(p)
        nz = counts[counts > 0]
        ent.append(-(nz * np.log(nz)).sum())
    return float(np.mean(ent))


def test_dirichlet_skew_is_visible():
    y = _labels(4000)
    rng = np.random.default_rng(0)
    iid = _mean_class_entropy(y, partition(y, 10, "iid", rng))
    mild = _mean_class_entropy(y, partition(y, 10, "dirichlet:100,2", rng))
    patho = _mean_class_entropy(y, partition(y, 10, "dirichlet:0.01,0.01", rng))
    assert iid > 2.2  # close to log(10) = 2.30
    assert patho < mild < iid + 1e-9
    assert patho < 1.0  # each client dominated by very few classes


def test_dirichlet_two_halves_use_their_own_alpha():
    y = _labels(4000)
    parts = partition(y, 10, "dirichlet:100,0.01", np.random.default_rng(0))
    ent = _mean_class_entropy(y, parts)
    # half iid-like, half pathological: in between the two extremes
    assert 1.0 < ent < 2.25


def test_shards_give_k_classes_per_client():
    y = _labels(2000)
    parts = partition(y, 5, "shards:2", np.random.default_rng(0))
    for p in parts:
        assert len(np.unique(y[p])) == 2


def test_bad_partition_specs():
    for spec in ["dirichlet:-1,2", "shards:0", "dirichlet:a", "banana", "shards:"]:
        with pytest.raises(FedLabelsError):
            parse_partition(spec)


def test_partition_leaving_a_client_empty_is_an_error():
    y = np.zeros(3, dtype=int)
    with pytest.raises(FedLabelsError, match="no data"):
        partition(y, 5, "iid", np.random.default_rng(0))
