"""A site whose own ledger spent more ε in the run than the coordinator states is named in
the result's ``privacy.site_ledgers``, at any excess beyond the ledgers' relative
tolerance (``REL_TOL``), not only a large one."""

from __future__ import annotations

from fedlabels.engines.flower.site_ledgers import site_ledgers_block
from fedlabels.privacy.ledger import REL_TOL
from test_flower_site_ledgers import _report


def test_a_site_that_spent_more_than_the_coordinators_epsilon_is_named() -> None:
    privacy = {"epsilon": 1.0, "delta": 1e-5}
    config = {"method": "dp-fedct", "rounds": 2, "period": 1, "options": {"epsilon": 1.0}}
    over = 1.0 + 1000 * REL_TOL  # far above the tolerance, far below twice the ε
    sites = {0: _report(epsilon=over, ledger_epsilon=over, budget=over),
             1: _report(epsilon=1.0 + REL_TOL / 2)}  # the same ε, within the tolerance
    block = site_ledgers_block(privacy, config, sites, {}, 2)
    assert block is not None
    assert block["disagreements"] == [
        f"site 0's ledger spent ε = {over:.6g} in this run (2 release(s)), more than the "
        "coordinator's ε = 1"]
