"""A client's part in a round of secure aggregation (DP-FedAvg's and DP-PATE's
``aggregation="secure"``): its round key, the checks of every attempt and its masks.

Each round the server announces the group (``keys_kind``); the member draws a fresh X25519
key pair and returns its public key signed with its identity key over the run, the round,
the group and its own noise parameters (``params().fingerprint()``), which every peer
checks against its own. Each attempt (``attempt_kind``) the member checks, before anything
is computed on its data: this round's key exists, the attempt is new (fresh masks and
fresh noise every time), the group holds it, is at least its own ``min_group`` and adds no
one to the group it keyed for, and every peer's key carries that peer's signature over the
same parameters. The subclass then computes its integer vector, charges its ledger
(:meth:`SecureSumMember.charge_attempt`: never beyond the releases its own plan allows
through the round, one a round plus its ``retries``), adds its own noise share and masks it
(:meth:`SecureSumMember.masked`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from fedlabels.comm import Message
from fedlabels.comm.id_lists import members, members_text
from fedlabels.core.errors import BudgetRefusal, RefusedError
from fedlabels.method.message_config import id_text, planned_round, whole
from fedlabels.method.state import State, StateValue, prefixed, unprefixed


class SecureSumMember:
    """Mixin for a client role (put it first among the bases): the round key, the checks
    of an attempt and the masks. The subclass sets the kinds and ``key_purpose``, and
    ``params()`` (with ``min_group``, ``bits``, ``retries``, ``releases_by(rnd)`` and
    ``fingerprint()``), and calls :meth:`init_member` with the site's trust."""

    keys_kind: ClassVar[str]  # the server's announcement of a round's group
    key_reply_kind: ClassVar[str]  # the member's signed round key
    attempt_kind: ClassVar[str]  # one attempt: the keys and what to compute
    key_purpose: ClassVar[str]  # what a round key's signature is for
    cid: int
    settings: Any
    trust: Any
    handlers: dict[str, Any]

    def init_member(self, trust: Any) -> None:
        """The member's trust (the site's identity key and roster, from its own
        configuration, never from a message: not state), its round-key handler and its
        state before its first round (call from ``__init__``)."""
        self.trust = trust
        self.handlers[self.keys_kind] = self.on_keys
        self.key_round = -1  # the round of the key pair held
        self.key_group = ""  # the group announced with it
        self.attempt = -1  # the last attempt answered in that round
        self.keypair: Any = None

    def params(self) -> Any:
        raise NotImplementedError

    def _authenticator(self, rnd: int, group: list[int]) -> Any:
        if self.trust is None:
            raise RefusedError(f"client {self.cid}: secure aggregation needs this site's "
                               "identity key and roster (prepare the deployment with "
                               "aggregation secure); refusing.")
        return self.trust.authenticator(rnd, group)  # refuses members outside the roster

    def _check_group(self, group: list[int], what: str) -> None:
        need = self.params().min_group
        if self.cid not in group:
            raise RefusedError(f"client {self.cid}: {what} names the group {group} without "
                               "this client; refusing.")
        if len(group) < need:
            raise RefusedError(f"client {self.cid}: {what} names a group of {len(group)} "
                               f"but this client answers groups of at least {need} "
                               "(min_group); refusing.")

    def on_keys(self, message: Message) -> Message:
        """A fresh key pair for the round, its public key signed for the announced group."""
        from fedlabels.secure.identity import ANY_PEER, digest
        from fedlabels.secure.keys import KeyPair, to_u8

        rnd = planned_round(message.config, self.cid, self.settings.rounds)
        if rnd <= self.key_round:  # a round's keys once: masks are never reused
            raise RefusedError(f"client {self.cid}: {self.keys_kind} for round {rnd} after "
                               f"round {self.key_round}; refusing.")
        group = members(id_text(message.config, "participants", self.cid))
        self._check_group(group, self.keys_kind)
        auth = self._authenticator(rnd, group)
        self.keypair = KeyPair()
        self.key_round, self.key_group, self.attempt = rnd, members_text(group), -1
        pub = to_u8(self.keypair.public)
        return Message(self.key_reply_kind, arrays={
            "pub": pub, "sig": auth.sign(self.key_purpose, ANY_PEER,
                                         digest(pub, self.params().fingerprint()))})

    def checked_attempt(self, message: Message) -> tuple[int, int, list[int], dict[int, bytes]]:
        """(round, attempt, group, the peers' verified keys) of an attempt message, after
        every check of the module docstring; the attempt is not yet marked answered."""
        rnd = planned_round(message.config, self.cid, self.settings.rounds)
        attempt = whole(message.config, "attempt", self.cid)
        keys = self.keys_kind
        if self.keypair is None or rnd != self.key_round:
            raise RefusedError(f"client {self.cid}: {self.attempt_kind} for round {rnd} "
                               f"without this round's {keys}; refusing.")
        if attempt <= self.attempt:  # fresh masks and fresh noise for every attempt
            raise RefusedError(f"client {self.cid}: attempt {attempt} of round {rnd} again "
                               f"(answered up to {self.attempt}); refusing.")
        group = members(id_text(message.config, "participants", self.cid))
        self._check_group(group, self.attempt_kind)
        keyed = members(self.key_group)
        outside = sorted(set(group) - set(keyed))
        if outside:
            raise RefusedError(f"client {self.cid}: {self.attempt_kind} adds clients "
                               f"{outside} to the round's group; refusing.")
        return rnd, attempt, group, self._verified_keys(message, rnd, keyed, group)

    def _verified_keys(self, message: Message, rnd: int, keyed: list[int],
                       group: list[int]) -> dict[int, bytes]:
        """The group's public keys, each checked against its member's roster key."""
        from fedlabels.secure.identity import ANY_PEER, digest

        auth = self._authenticator(rnd, keyed)
        peers = {}
        for c in group:
            if c == self.cid:
                continue
            pub = message.arrays.get(f"pub_{c}")
            if pub is None:
                raise RefusedError(f"client {self.cid}: {self.attempt_kind} lacks client "
                                   f"{c}'s key; refusing.")
            # signed over the peer's parameters: checked against this client's own
            auth.verify(c, self.key_purpose, ANY_PEER, message.arrays.get(f"sig_{c}"),
                        digest(np.asarray(pub, dtype=np.uint8), self.params().fingerprint()))
            peers[c] = np.asarray(pub, dtype=np.uint8).tobytes()
        return peers

    def planned_events(self) -> list[Any] | None:
        """What this client's own plan releases over the run: one release a planned round
        (or vote) plus its ``retries``, each its parameters' event."""
        params = self.params()
        return [params.event()] * params.releases

    def charge_attempt(self, rnd: int, attempt: int, event: Any) -> None:
        """Charge one answered attempt, refused (:class:`BudgetRefusal`) where it goes
        beyond what this client's own plan allows through round ``rnd``: one release a
        planned round plus its ``retries`` (so a server that forges dropouts gets at most
        rounds + retries releases, and an honest one's retries never take a later round's)."""
        params = self.params()
        done = len(self.ledger.events)  # type: ignore[attr-defined]
        allowed = int(params.releases_by(rnd))
        if done + 1 > allowed:
            raise BudgetRefusal(
                f"client {self.cid}: attempt {attempt} of round {rnd} would be release "
                f"{done + 1}, beyond the {allowed} this client allows through that round (one "
                f"a round plus retries = {params.retries}, option retries in its plan); "
                "refusing.")
        self.charge(event)  # type: ignore[attr-defined]

    def masked(self, values: np.ndarray, rnd: int, attempt: int, group: list[int],
               peers: Mapping[int, bytes]) -> np.ndarray:
        """``values`` plus this member's pairwise masks for the attempt's view, packed."""
        from fedlabels.secure.masked_sum import group_view, mask_keys, mask_vector

        keys = mask_keys(self.keypair, self.cid, peers, group_view(rnd, attempt, group))
        return mask_vector(values, self.cid, keys, attempt, self.params().bits)

    def state_dict(self) -> State:
        state: State = super().state_dict()  # type: ignore[misc]
        if self.keypair is not None:
            state.update(prefixed("keypair", self.keypair.to_state()))
        return state

    def load_state_dict(self, state: Mapping[str, StateValue]) -> None:
        super().load_state_dict(state)  # type: ignore[misc]
        part = unprefixed("keypair", state)
        self.keypair = None
        if part:
            from fedlabels.secure.keys import KeyPair

            self.keypair = KeyPair.from_state(part)


#: the options that apply only with aggregation secure
SECURE_ONLY_OPTIONS = ("min_group", "retries")
#: how far the σ a secure attempt names may differ from the one a client calibrates from its
#: own options (the same calibration, another machine's floating point); the client adds
#: its own share of noise whatever the message says
SIGMA_REL_TOL = 1e-6


def refuse_secure_only(method: str, aggregation: str, given: Any, needs: str) -> None:
    """Refuse :data:`SECURE_ONLY_OPTIONS` given to ``method`` without aggregation secure
    (``needs``: what aggregation secure runs with)."""
    if aggregation == "secure":
        return
    for name in SECURE_ONLY_OPTIONS:
        if name in given:
            from fedlabels.core.errors import FedLabelsError

            raise FedLabelsError(f"{method} option {name} applies only with aggregation "
                                 f"secure; {needs}.")


def answered(events: Sequence[Any], cid: int) -> int:
    """How many releases of ``events`` (a server's ledger: each names its members) asked
    client ``cid``."""
    return sum(cid in event.clients for event in events)


def allowance_spent(events: Sequence[Any], group: Sequence[int], allowed: int) -> list[int]:
    """The members of ``group`` that answered ``allowed`` releases already (an honest server
    asks them no further attempt: :meth:`SecureSumMember.charge_attempt` would refuse)."""
    return [c for c in group if answered(events, c) >= allowed]


def warn_without_retries(method: str, params: Any, then: str) -> None:
    """Warn at plan time where ``min_group`` is below the run's clients (so a group could
    go on after a dropout) but the plan allows no retried attempt (``retries`` 0)."""
    if params.retries or params.min_group >= params.n_clients:
        return
    import warnings

    from fedlabels.core.errors import FedLabelsWarning, user_stacklevel

    warnings.warn(FedLabelsWarning(
        f"{method} aggregation secure: min_group {params.min_group} of {params.n_clients} "
        f"clients lets a group go on after a dropout, but retries = 0, so each client "
        f"answers one attempt a {params.unit} and {then}; --opt retries=A lets each client "
        "answer A retried attempts over the run, each charged as one more release (with "
        "--epsilon, σ is calibrated for them all)."), stacklevel=user_stacklevel())


__all__ = ["SECURE_ONLY_OPTIONS", "SecureSumMember", "allowance_spent", "answered",
           "refuse_secure_only", "warn_without_retries"]
