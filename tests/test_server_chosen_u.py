"""A deviating server chooses U: only DP-FedCT's ``sensitivity=worst`` holds against that.

On Flower the coordinator ships the shared public file, so it chooses U. A U made of copies
of one of a client's own records moves every label on U when that record's label changes,
while an empirical s* (the client's own estimate, from random neighbours) sees none of it.
The xor/kary noise of a non-worst s* is then calibrated to far fewer bits than one record
moves; ``worst`` (2|U|) still bounds it. docs/privacy.md ("Who is protected from whom")
states this; the test measures it on the client role the simulator builds.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from fedlabels.api import load_federation
from fedlabels.methods.fedct.sensitivity import _fit_predict, _neighbour
from fedlabels.testing import _Run
from test_method_contract import CLIENTS, DATASET, PERIOD, ROUNDS, SEED

OPTIONS = {"epsilon_per_round": 2.0, "mechanism": "kary", "sensitivity": "empirical",
           "sensitivity_neighbours": 3}


def test_copies_of_a_private_record_as_u_defeat_an_empirical_sensitivity() -> None:
    from fedlabels.methods import METHODS

    fed = load_federation(DATASET, clients=CLIENTS, seed=SEED)
    record = fed.clients[0].X[:1]
    chosen = replace(fed, X_public=np.repeat(record, len(fed.X_public), axis=0))
    run = _Run(METHODS["dp-fedct"], dict(OPTIONS), "dt", DATASET, CLIENTS, ROUNDS, PERIOD,
               SEED)
    run._federation = chosen
    client = run.fresh_role()(0)
    estimated = client.sensitivity_of_options().bits  # what its noise is calibrated to

    # the record's label replaced: the client's model changes its label on every copy
    X, y, U = client.data.X, client.data.y, client.public
    rng = np.random.default_rng(0)
    moved = 2 * int(np.sum(_fit_predict(client.learner, *_neighbour(X, y, 0, "replace", 2, rng),
                                        U, None) != _fit_predict(client.learner, X, y, U, None)))
    assert moved == 2 * len(U)  # all copies are one point: none or all of them move
    assert moved > 100 * estimated  # the empirical s* misses it
    assert moved <= client.sensitivity_bits()  # the ledger's worst case 2|U| still holds
