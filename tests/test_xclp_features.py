"""XCLP's own preprocessing (option ``features``): raw undoes the federation's z-scoring.

The oracle is the federation built from the same rows without scaling (``scale="none"``,
same seed and sizes: the same split), never a number copied from a run.
"""

from __future__ import annotations

import numpy as np
import pytest

import fedlabels as fl
from fedlabels.core.errors import FedLabelsError
from fedlabels.data import make_federation
from fedlabels.data.loading import load_table
from fedlabels.method.base import MethodContext, Settings
from fedlabels.methods.xclp import (
    XCLP,
    FedAvgXCLP,
    PerClientLP,
    PerClientLPOptions,
    XCLPOptions,
)
from fedlabels.runs.config import RunConfig

N_CLIENTS, SEED = 3, 4
SPLIT = {"clients": N_CLIENTS, "unlabeled": 150, "private": 600, "test": 120,
         "partition": "quantity:1", "seed": SEED}  # unequal client sizes


@pytest.fixture(scope="module")
def digits_pair():
    """The digits federation as every method gets it (z-scored) and the same split unscaled."""
    _, raw = load_table("digits")
    scaled = make_federation(raw.X, raw.y, scale="public", **SPLIT)
    unscaled = make_federation(raw.X, raw.y, scale="none", **SPLIT)
    return scaled, unscaled


def test_option_is_declared_and_validated():
    assert XCLPOptions().features == "raw" and PerClientLPOptions().features == "raw"
    assert XCLPOptions().balance == "class"
    assert XCLPOptions.from_mapping({"features": "Federation"}, "xclp").features == "federation"
    with pytest.raises(FedLabelsError, match="raw"):
        XCLPOptions.from_mapping({"features": "l2"}, "xclp")
    # fedavg-xclp propagates over the network's hidden features: the option does not apply
    with pytest.raises(FedLabelsError, match="features"):
        FedAvgXCLP().parse_options({"features": "raw"})


def _clients(method, fed, features):
    opts = method.parse_options({"features": features, "knn": 3})
    settings = Settings(n_classes=fed.n_classes, n_features=fed.n_features,
                        n_clients=fed.n_clients, options=opts)
    ctx = MethodContext(settings, seeds=[7 + c for c in range(fed.n_clients)], server_seed=1)
    ctx.scaling = fed.public_scaling
    return [method.make_client(c, fed.clients[c], None, ctx, None, fed.X_test, fed.y_test)
            for c in range(fed.n_clients)]


@pytest.mark.parametrize("method", [XCLP(), PerClientLP()], ids=["xclp", "perclient-lp"])
def test_raw_recovers_the_unscaled_features(method, digits_pair):
    scaled, unscaled = digits_pair
    assert scaled.public_scaling is not None and unscaled.public_scaling is None
    assert len({len(c) for c in scaled.clients}) > 1
    raw = _clients(method, scaled, "raw")
    plain = _clients(method, unscaled, "raw")  # nothing to undo: the data as loaded
    as_given = _clients(method, scaled, "federation")
    for r, p, g, c in zip(raw, plain, as_given, scaled.clients, strict=True):
        V, truth = r.xclp_features(), p.xclp_features()
        assert V.dtype == np.float32 and V.shape == truth.shape
        # pixel counts 0..16: the float32 round trip is within 1e-5 and rounds back exactly
        np.testing.assert_allclose(V, truth, rtol=0, atol=1e-5)
        assert np.array_equal(np.rint(V), truth)
        assert np.array_equal(g.xclp_features()[:len(c)], c.X)  # federation: untouched


def test_raw_run_equals_a_run_on_unscaled_data(digits_pair):
    """End to end: raw features on the z-scored federation give the unscaled run's labels."""
    scaled, unscaled = digits_pair
    opts = {"lsh_bits": 64, "knn": 5}
    raw = fl.run("xclp", scaled, rounds=1, seed=SEED, options={**opts, "features": "raw"})
    plain = fl.run("xclp", unscaled, rounds=1, seed=SEED, options=opts)
    given = fl.run("xclp", scaled, rounds=1, seed=SEED,
                   options={**opts, "features": "federation"})
    assert raw.rounds[-1].accuracies == plain.rounds[-1].accuracies
    assert raw.rounds[-1].accuracies != given.rounds[-1].accuracies  # the option matters
    assert raw.extra["xclp"]["features"] == "raw"


def test_flower_site_carries_the_public_scaling(tmp_path):
    """A deployed site's role undoes the same scaling as the simulator's."""
    pytest.importorskip("flwr")
    from fedlabels.engines.flower.client_app import build_role
    from fedlabels.engines.flower.prepare import prepare_run
    from fedlabels.engines.flower.site import load_site
    from fedlabels.runs.federation import federation_for

    cfg = RunConfig(method="xclp", dataset="digits", clients=N_CLIENTS, private=300,
                    unlabeled=100, test=60, seed=SEED, rounds=1,
                    options={"lsh_bits": 32, "knn": 3})
    fed = federation_for(cfg)
    prepared = prepare_run(cfg, tmp_path / "sites")
    simulated = _clients(XCLP(), fed, "raw")
    for cid in range(N_CLIENTS):
        site = load_site(prepared.node_settings(cid))
        assert site.scaling is not None and fed.public_scaling is not None
        for a, b in zip(site.scaling, fed.public_scaling, strict=True):
            assert np.array_equal(a, b)
        role = build_role(prepared.spec, site, prepared.node_settings(cid))
        assert np.array_equal(role.xclp_features(), simulated[cid].xclp_features())
