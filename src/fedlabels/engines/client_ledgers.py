"""The ε a result reports for a client: what the client's own ledger says it spent.

A server accounts the releases it received. A client that took DP-SGD steps whose reply came
too late (``--deadline``) or was lost spent privacy all the same: its ledger
(:attr:`~fedlabels.method.dpsgd_client.SecretNoiseClient.ledger`) recorded every round
when it was taken. Where a client's ledger holds more DP-SGD steps than the server
accounted, the result's per-client steps and ε, and the run's worst ε, are the ledger's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fedlabels.method.base import ClientRole
from fedlabels.method.dpsgd_client import SecretNoiseClient
from fedlabels.privacy.dpsgd_accounting import DPSGDRoundEvent

ACCOUNTED_FROM = ("the clients' own ledgers: DP-SGD steps counted when taken, whether or not "
                  "the reply arrived in time")


def reconcile_client_ledgers(privacy: dict[str, Any], clients: Mapping[int, ClientRole]) -> None:
    """Raise ``privacy``'s per-client steps and ε to what the clients' ledgers spent."""
    steps = privacy.get("steps_per_client")
    per_client = privacy.get("epsilon_per_client")
    if not isinstance(steps, dict) or not isinstance(per_client, dict):
        return
    raised = []
    for cid, role in sorted(clients.items()):
        if not isinstance(role, SecretNoiseClient):
            continue
        taken = sum(int(k) for ev in role.ledger.events if isinstance(ev, DPSGDRoundEvent)
                    for _, k in ev.steps)
        if taken > int(steps.get(cid, 0)):
            steps[cid] = taken
            per_client[cid] = role.ledger.spent().epsilon
            raised.append(cid)
    if raised:
        privacy["epsilon"] = max(float(privacy.get("epsilon") or 0.0),
                                 *(per_client[c] for c in raised))
        privacy["accounted_from"] = ACCOUNTED_FROM
        privacy["clients_with_unreceived_steps"] = raised
