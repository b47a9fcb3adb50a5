"""Whether a run's stated DP guarantee bounds what an audit's adversary learns.

A membership-inference audit attacks one party's view (``--threat``); a DP method states its
guarantee against a party (``privacy.guarantee_against``). Where the two differ, the audit's
VUL is no evidence for or against the ε: FREDY's and DP-PATE's ε excludes the server, which
sees the votes in the clear; DP-FedCT's label mechanisms protect the labels the clients
release, not the clients' own models; client-level DP-FedAvg gives nothing against the
server, which sees each clipped update.
"""

from __future__ import annotations

from typing import Any

SERVER_THREATS = ("forged-u", "fixed-u")


def uncovered_note(threat: str, canary_view: str | None, privacy: dict[str, Any]) -> str | None:
    """A sentence when the run states a DP guarantee that does not hold against the
    adversary of ``threat``; None where it does, or where there is no guarantee."""
    if privacy.get("guarantee") not in ("formal", "conditional"):
        return None
    why = None
    mechanism = str(privacy.get("mechanism") or "label").split(":")[0]  # "xor: bitwise ..."
    if canary_view == "replies" and threat == "released-model" and mechanism != "dpsgd":
        why = (f"the {mechanism} mechanism protects the labels the "
               "clients release, and the clients' own models, which this audit attacks, are "
               "trained on private data without noise")
    elif canary_view == "released-labels" and threat in SERVER_THREATS:
        why = ("the guarantee holds for the released labels and the student, and this "
               "audit's adversary is the server, which sees the votes in the clear")
    elif canary_view == "final-model" and threat in SERVER_THREATS \
            and not str(privacy.get("neighbouring", "")).startswith("record-level"):
        why = ("client-level DP-FedAvg holds for observers of the global model, and this "
               "audit's adversary is the server, which sees each clipped update")
    if why is None:
        return None
    return (f"the stated ε does not bound this audit's adversary ({threat}): {why}; a VUL "
            "above the null here is no evidence against the ε, nor is one near it evidence "
            "for it")
