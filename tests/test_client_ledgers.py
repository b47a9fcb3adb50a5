"""``reconcile_client_ledgers``: a result's per-client steps and ε are raised to what a
client's own ledger spent where it took more DP-SGD steps than the server accounted (a
reply too late or lost), and only then; the run's ε is then the worst of them."""

from __future__ import annotations

from typing import Any

from fedlabels.engines.client_ledgers import ACCOUNTED_FROM, reconcile_client_ledgers
from fedlabels.method.dpsgd_client import SecretNoiseClient
from fedlabels.privacy.dpsgd_accounting import DPSGDRoundEvent
from fedlabels.privacy.ledger import Ledger


def _client(cid: int, *steps: int) -> SecretNoiseClient:
    """A DP-SGD client role whose ledger holds one round of ``k`` steps per entry."""
    role = SecretNoiseClient.__new__(SecretNoiseClient)
    role._ledger = Ledger(1e-5, what=f"client {cid}")
    for k in steps:
        role._ledger.add(DPSGDRoundEvent(1.0, 0.1, 1.0, ((cid, k),)))
    return role


def _privacy(steps: dict[int, int], eps: dict[int, float]) -> dict[str, Any]:
    return {"epsilon": max(eps.values()), "steps_per_client": dict(steps),
            "epsilon_per_client": dict(eps)}


def test_only_a_client_whose_ledger_took_more_steps_is_raised() -> None:
    clients = {0: _client(0, 5, 5), 1: _client(1, 5, 5, 5)}
    own = {c: r.ledger.spent().epsilon for c, r in clients.items()}
    # the server received client 0's both rounds and client 1's first two of three
    privacy = _privacy({0: 10, 1: 10}, {0: own[0], 1: own[0]})
    reconcile_client_ledgers(privacy, clients)
    assert privacy["steps_per_client"] == {0: 10, 1: 15}
    assert privacy["epsilon_per_client"] == {0: own[0], 1: own[1]} and own[1] > own[0]
    assert privacy["epsilon"] == own[1]
    assert privacy["clients_with_unreceived_steps"] == [1]
    assert privacy["accounted_from"] == ACCOUNTED_FROM


def test_a_ledger_that_agrees_with_the_server_changes_nothing() -> None:
    clients = {0: _client(0, 5), 1: _client(1, 5)}
    eps = clients[0].ledger.spent().epsilon
    privacy = _privacy({0: 5, 1: 5}, {0: eps, 1: eps})
    before = {k: (dict(v) if isinstance(v, dict) else v) for k, v in privacy.items()}
    reconcile_client_ledgers(privacy, clients)
    assert privacy == before


def test_the_runs_epsilon_is_never_lowered() -> None:
    """A server ε above the raised client's (another client's, or the labels') stays."""
    clients = {0: _client(0, 5, 5)}
    own = clients[0].ledger.spent().epsilon
    privacy = _privacy({0: 5}, {0: own / 2})
    privacy["epsilon"] = own * 3
    reconcile_client_ledgers(privacy, clients)
    assert privacy["epsilon_per_client"] == {0: own}
    assert privacy["epsilon"] == own * 3
