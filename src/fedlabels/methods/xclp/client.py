"""Client side of XCLP (Algorithm 1): one handler per message kind of the protocol.

``xclp.setup`` (features, keys, seed commitment) — ``xclp.seed`` (sealed seed reveals) —
``xclp.hamming`` step 1 (LSH bits; SecureHamming from here, see
:mod:`fedlabels.secure.hamming_protocol`) and steps 2-5 — ``xclp.influence`` (the columns
S_L of this client's labelled points) — ``xclp.rowsums`` (masked Z̄) — ``xclp.result``
(this client's rows of Z: labels and confidences).

Everything a client keeps between messages is in :meth:`XCLPClientCore.state_dict` as plain
arrays and scalars (key material as uint8 bytes), so a deployment can rebuild the role for
every message and restore it (Flower starts a new process per message).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from fedlabels.comm import Message
from fedlabels.comm.id_lists import listed
from fedlabels.core.errors import FedLabelsError, ParameterRefusal, RefusedError, shown
from fedlabels.method.base import ClientRole
from fedlabels.method.message_config import id_text, whole
from fedlabels.method.state import (
    State,
    StateValue,
    bytes_to_state,
    prefixed,
    state_to_bytes,
    unprefixed,
)
from fedlabels.propagation.core import (
    balance_scores,
    class_counts,
    labels_and_confidence,
    lsh_bits,
    lsh_projection,
    one_hot,
)

if TYPE_CHECKING:  # the secure extra is imported only by runs that use it
    from fedlabels.secure.channels import PeerChannels
    from fedlabels.secure.hamming_protocol import HammingParty
    from fedlabels.secure.identity import Authenticator, SiteTrust
    from fedlabels.secure.keys import KeyPair
    from fedlabels.secure.seed import SeedAgreement

PHASE_KINDS = ("setup", "seed", "hamming", "influence", "rowsums", "result")


def row_ranges(text: Any, participants: list[int],
               n_rows: int | None = None) -> dict[int, np.ndarray]:
    """``"0:24,42:63"`` with participants [0, 2] -> {0: rows 0..23, 2: rows 42..62}: one
    range ``a:b`` (a <= b, within the ``n_rows`` rows of the joint graph where given) per
    participant, disjoint; else a refusal naming ``row_ranges`` (what it must be, nothing
    of the client's data)."""
    spans = [t.split(":") for t in text.split(",") if t != ""] if isinstance(text, str) \
        else []
    whole_spans = len(spans) == len(participants) and all(
        len(s) == 2 and all(p.isascii() and p.isdigit() for p in s) for s in spans)
    bounds = [(int(a), int(b)) for a, b in spans] if whole_spans else []
    if not whole_spans or any(a > b or (n_rows is not None and b > n_rows)
                              for a, b in bounds):
        within = "" if n_rows is None else f" within 0:{n_rows}"
        raise ParameterRefusal(f"xclp.rowsums: row ranges {shown(text)} are not one range a:b"
                               f"{within} for each of the participants {participants}; "
                               "refusing.", named=f"row_ranges must be one range a:b{within} "
                               "a participant")
    rows = {c: np.arange(a, b) for c, (a, b) in zip(participants, bounds, strict=True)}
    every = np.concatenate(list(rows.values())) if rows else np.zeros(0, dtype=np.int64)
    if len(np.unique(every)) != len(every):
        raise ParameterRefusal(f"xclp.rowsums: row ranges {shown(text)} overlap; refusing.",
                               named="row_ranges must not overlap")
    return rows


class XCLPClientCore(ClientRole):
    """Client side of Algorithm 1; subclasses supply the features and the partial labels.

    ``self.options`` is an :class:`~fedlabels.methods.xclp.options.XCLPProtocolOptions`.
    ``trust`` (secure modes): this site's identity key, the federation's roster and run id,
    from its own configuration (:mod:`fedlabels.secure.identity`); with it the site signs
    what it publishes through the server and refuses a peer's value without a valid
    signature. None: keys are relayed unauthenticated.
    """

    state_attrs: ClassVar[tuple[str, ...]] = (
        "session", "group", "mode", "n_points", "packed", "S_L", "own_offset", "own_masked",
        "xclp_labels", "xclp_confidence", "xclp_scores", "xclp_class_counts",
        "rowsums_attempt")
    #: SecureHamming's steps and SecureRowSums' restarts come within one round
    multi_step_kinds: ClassVar[frozenset[str]] = frozenset({"xclp.hamming", "xclp.rowsums"})

    def __init__(self, *args: Any, trust: SiteTrust | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.trust = trust  # from the site's configuration, never from a message: not state
        for kind in PHASE_KINDS:  # the seed agreement only where its options are secure
            if kind != "seed" or self.options.secure != "none":
                self.handlers[f"xclp.{kind}"] = getattr(self, f"on_{kind}")
        self.session = -1
        self.group = ""  # the group the server announced at setup (ids, comma-separated)
        self.rowsums_attempt = -1  # the last SecureRowSums attempt answered this session
        self.mode = "none"
        # features, from setup until the LSH is computed; not state (they are the private
        # rows): a restored role recomputes them from its data (features_again)
        self.V: np.ndarray | None = None
        self.n_points = 0
        self.packed: np.ndarray | None = None  # packed LSH bits
        self.S_L: np.ndarray | None = None
        self.own_offset = 0  # first row of this client's points in the joint graph
        self.own_masked: np.ndarray | None = None
        self.xclp_labels: np.ndarray | None = None
        self.xclp_confidence: np.ndarray | None = None
        self.xclp_scores: np.ndarray | None = None
        self.xclp_class_counts: np.ndarray | None = None  # balance=class: members' totals
        self._reset_secure()

    def _reset_secure(self) -> None:
        self.keypair: KeyPair | None = None
        self.seed_agreement: SeedAgreement | None = None
        self.commitments: dict[int, bytes] = {}
        self.peer_pubs: dict[int, bytes] = {}
        self.hamming: HammingParty | None = None
        self.lsh_seed_used: bytes | int | None = None  # stays on the client

    # hooks ---------------------------------------------------------------------------
    def xclp_features(self, message: Message | None) -> np.ndarray:
        """This client's XCLP points (``message``: the setup, or None for a restored role
        whose setup already loaded what the features need)."""
        raise NotImplementedError

    def xclp_partial_labels(self) -> np.ndarray:
        """This client's labels for its XCLP points, -1 where unlabelled."""
        raise NotImplementedError

    def features_again(self) -> np.ndarray:
        """The setup's features, recomputed by a restored role (its state holds none)."""
        if self.n_points == 0:
            raise FedLabelsError(f"client {self.cid}: xclp.hamming arrived before "
                                 "xclp.setup.")
        V = np.asarray(self.xclp_features(None), dtype=np.float32)
        if len(V) != self.n_points:
            raise FedLabelsError(f"client {self.cid}: its data changed since xclp.setup "
                                 f"({len(V)} points, {self.n_points} at setup).")
        return V

    # helpers -------------------------------------------------------------------------
    def channels(self) -> PeerChannels:
        """Sealed channels to the peers (derived from the key pair and their keys)."""
        from fedlabels.secure.channels import PeerChannels

        if self.keypair is None:
            raise FedLabelsError(f"client {self.cid}: a secure XCLP step arrived before "
                                 "xclp.setup.")
        return PeerChannels(self.keypair, self.cid, self.session, self.peer_pubs,
                            self.authenticator())

    def authenticator(self) -> Authenticator | None:
        """Signs and checks relayed values for this session and group (None: no trust)."""
        if self.trust is None:
            return None
        return self.trust.authenticator(self.session, listed(self.group))

    def own_rows(self) -> np.ndarray:
        return np.arange(self.own_offset, self.own_offset + self.n_points)

    # phases ---------------------------------------------------------------------------
    def on_setup(self, message: Message) -> Message:
        """Features for this session; a key pair and a seed commitment (secure modes),
        signed with the site's identity key when it has one."""
        session = whole(message.config, "session", self.cid, default=0)
        if self.trust is not None and session <= self.session:  # a session is used once
            raise RefusedError(f"client {self.cid}: xclp.setup for session {session} after "
                               f"session {self.session}; refusing.")
        self.session = session
        group = listed(id_text(message.config, "participants", self.cid, default=""))
        if self.trust is not None and self.cid not in group:
            raise FedLabelsError(f"client {self.cid}: xclp.setup names the group {group} "
                                 "without this client; refusing.")
        self.group = ",".join(map(str, sorted(group)))
        mine, asked = self.options.secure, str(message.config.get("secure"))
        if asked != mine:  # the client's own options decide how its rows are protected
            raise ParameterRefusal(f"client {self.cid}: the server asked for secure = "
                                   f"{asked!r} but this client's options say {mine!r}; "
                                   "refusing.", named=f"the site's secure is {mine!r}")
        self.mode = mine
        V = np.asarray(self.xclp_features(message), dtype=np.float32)
        if len(V) == 0:
            raise FedLabelsError(f"client {self.cid} has no data; every XCLP participant "
                                 "needs at least one point.")
        self.V, self.n_points = V, len(V)
        self.packed = self.S_L = self.own_masked = None
        self.rowsums_attempt = -1
        self.xclp_labels = self.xclp_confidence = self.xclp_scores = None
        self.xclp_class_counts = None
        self._reset_secure()
        arrays: dict[str, np.ndarray] = {}
        if self.mode != "none":
            from fedlabels.secure.keys import KeyPair, to_u8
            from fedlabels.secure.seed import SeedAgreement

            self.keypair = KeyPair()
            self.seed_agreement = SeedAgreement(self.cid)
            arrays = {"pub": to_u8(self.keypair.public),
                      "commit": to_u8(self.seed_agreement.commitment)}
            auth = self.authenticator()
            if auth is not None:  # every peer of the group relies on this key and commitment
                from fedlabels.secure.identity import ANY_PEER, digest

                arrays["sig"] = auth.sign("x25519-key", ANY_PEER,
                                          digest(arrays["pub"], arrays["commit"]))
        return Message("xclp.setup.reply", arrays=arrays, config={"n": self.n_points})

    def on_seed(self, message: Message) -> Message:
        """Keep the peers' keys and commitments (each checked against the peer's roster key
        when this site has a roster); send the seed contribution, sealed. Once a session:
        a second xclp.seed would have the site seal its contribution again, to whatever
        keys that message names."""
        if self.commitments:
            raise RefusedError(f"client {self.cid}: a second xclp.seed in session "
                               f"{self.session}; refusing.")
        participants = listed(id_text(message.config, "participants", self.cid))
        peers = [c for c in participants if c != self.cid]
        auth = self.authenticator()
        if auth is not None:
            from fedlabels.secure.identity import ANY_PEER, digest
            from fedlabels.secure.keys import SecureProtocolError

            outside = sorted(set(participants) - set(auth.group))
            if outside:
                raise SecureProtocolError(f"client {self.cid}: xclp.seed adds clients "
                                          f"{outside} to the group of xclp.setup; refusing.")
            for c in peers:  # before any of the peer's values is used
                auth.verify(c, "x25519-key", ANY_PEER, message.arrays.get(f"sig_{c}"),
                            digest(message.arrays[f"pub_{c}"], message.arrays[f"commit_{c}"]))
        self.commitments = {c: message.arrays[f"commit_{c}"].tobytes() for c in participants}
        self.peer_pubs = {c: message.arrays[f"pub_{c}"].tobytes() for c in peers}
        channels = self.channels()
        contribution = _need(self.seed_agreement, self.cid, "seed").contribution
        return Message("xclp.seed.reply",
                       arrays={f"to_{c}": channels.seal(c, "seed", contribution) for c in peers})

    def on_hamming(self, message: Message) -> Message:
        """Step 1: LSH bits and the first SecureHamming message; later steps: relay answers."""
        step = whole(message.config, "step", self.cid)
        peers = [c for c in listed(id_text(message.config, "peers", self.cid)) if c != self.cid]
        n_points = {c: whole(message.config, f"n_{c}", self.cid) for c in peers}
        if step == 1:
            return self._hamming_first(message, peers, n_points)
        party = _need(self.hamming, self.cid, "hamming")
        return Message("xclp.hamming.reply",
                       arrays=party.step(step, peers, n_points, message.arrays,
                                         self.channels()))

    def _hamming_first(self, message: Message, peers: list[int],
                       n_points: dict[int, int]) -> Message:
        from fedlabels.secure.hamming_protocol import HammingParty

        V = self.V if self.V is not None else self.features_again()
        opts = self.options
        labeled = np.flatnonzero(self.xclp_partial_labels() >= 0).astype(np.int32)
        channels = None
        if self.mode == "none":
            seed: bytes | int = whole(message.config, "lsh_seed", self.cid)
        else:
            channels = self.channels()
            reveals = {c: channels.open(message.arrays, c, "seed") for c in peers}
            seed = _need(self.seed_agreement, self.cid, "seed").derive(
                reveals, {c: self.commitments[c] for c in [*peers, self.cid]})
        self.lsh_seed_used = seed
        self.packed = lsh_bits(V, lsh_projection(seed, opts.lsh_bits, V.shape[1]))
        self.V = None  # the features are not needed any more
        arrays: dict[str, np.ndarray] = {"labeled_idx": labeled}
        if self.mode == "none":  # plaintext baseline: the bits go to the server
            arrays["bits"] = self.packed
        else:
            self.hamming = HammingParty(self.mode, self.cid, self.packed, opts.lsh_bits,
                                        opts.key_bits, opts.insecure_small_keys)
            arrays.update(self.hamming.step(1, peers, n_points, message.arrays, channels))
        return Message("xclp.hamming.reply", arrays=arrays)

    def on_influence(self, message: Message) -> Message:
        """Keep S_L (this client's labelled columns) and where its rows are; once a
        session (a second S_L, say zeros, with the same rows and attempt would make the
        mask of SecureRowSums reveal S_L·Y_L in the clear)."""
        if self.S_L is not None:
            raise RefusedError(f"client {self.cid}: a second xclp.influence in session "
                               f"{self.session}; refusing.")
        self.S_L = np.asarray(message.arrays["S_L"], dtype=np.float64)
        self.own_offset = whole(message.config, "offset", self.cid)
        return Message("xclp.influence.reply", config={"ok": True})

    def on_rowsums(self, message: Message) -> Message:
        """Z̄ = S_L Y_L on the other participants' rows only, masked (SecureRowSums)."""
        from fedlabels.secure.rowsums import (
            bind_keys,
            encode_fixed,
            mask_rows,
            participant_rows,
            view_digest,
        )

        S_L = _need(self.S_L, self.cid, "influence")
        attempt = whole(message.config, "attempt", self.cid)
        if attempt <= self.rowsums_attempt:  # a mask is used once: never the same attempt
            raise RefusedError(f"client {self.cid}: xclp.rowsums attempt {attempt} again "
                               f"(answered up to {self.rowsums_attempt}); refusing.")
        y = self.xclp_partial_labels()
        Zbar = S_L @ one_hot(y[np.flatnonzero(y >= 0)], self.settings.n_classes)
        participants = listed(id_text(message.config, "participants", self.cid))
        rows = row_ranges(message.config.get("row_ranges"), participants, len(S_L))
        if self.cid not in rows or not np.array_equal(rows[self.cid], self.own_rows()):
            raise ParameterRefusal(f"client {self.cid}: xclp.rowsums names rows that are not "
                                   "this client's own as its rows (or leaves it out); "
                                   "refusing.", named="row_ranges must give this client its "
                                   "own rows")
        send = participant_rows(rows, self.cid)  # never a departed client's rows
        self.rowsums_attempt = attempt
        arrays = self._counts_part(y, attempt)
        if self.mode == "none":
            enc = encode_fixed(Zbar, len(participants))
            self.own_masked = enc[self.own_rows()]
            return Message("xclp.rowsums.reply", arrays={"part": enc[send], **arrays})
        keypair = _need(self.keypair, self.cid, "setup")
        keys = bind_keys({c: keypair.shared_key(self.cid, c, self.peer_pubs[c], "rowsums")
                          for c in participants if c != self.cid}, view_digest(rows, attempt))
        part, self.own_masked = mask_rows(Zbar, self.own_rows(), self.cid, keys, attempt,
                                          send)
        return Message("xclp.rowsums.reply", arrays={"part": part, **arrays})

    def _counts_part(self, y: np.ndarray, attempt: int) -> dict[str, np.ndarray]:
        """balance=class: this client's labelled count per class, masked in secure modes."""
        if self.options.balance != "class":
            return {}
        from fedlabels.secure.rowsums import mask_counts

        counts = class_counts(y, self.settings.n_classes)
        if self.mode == "none":
            return {"counts": counts.view(np.uint64)}
        seed = _need(self.lsh_seed_used, self.cid, "hamming")
        return {"counts": mask_counts(counts, bytes(seed), self.cid, attempt)}

    def on_result(self, message: Message) -> Message:
        """Unmask this client's rows of Z: XCLP labels and confidences (class-balanced with
        the members' total class counts when ``balance=class``)."""
        from fedlabels.secure.rowsums import unmask_counts, unmask_rows

        Z = unmask_rows(message.arrays["rows"], _need(self.own_masked, self.cid, "rowsums"))
        balanced = self.options.balance == "class"
        if balanced:
            total = np.asarray(message.arrays["counts"], dtype=np.uint64)
            if self.mode == "none":
                counts = total.view(np.int64)
            else:
                counts = unmask_counts(total, bytes(_need(self.lsh_seed_used, self.cid,
                                                          "hamming")),
                                       listed(id_text(message.config, "participants",
                                                      self.cid)),
                                       whole(message.config, "attempt", self.cid))
            self.xclp_class_counts = counts.copy()
            Z = balance_scores(Z, counts)
        self.xclp_labels, self.xclp_confidence = labels_and_confidence(Z, normalise=balanced)
        self.xclp_scores = Z
        return Message("xclp.result.reply", category="control")

    # state ----------------------------------------------------------------------------
    def state_dict(self) -> State:
        """Declared attributes plus the key pair, seed party, peers' keys and commitments
        and the SecureHamming party, as plain values (secret: keep on the client)."""
        state = super().state_dict()
        if self.keypair is not None:
            state.update(prefixed("keypair", self.keypair.to_state()))
        if self.seed_agreement is not None:
            state.update(prefixed("seed", self.seed_agreement.to_state()))
        if self.hamming is not None:
            state.update(prefixed("hamming", self.hamming.to_state()))
        for name, table in (("commit", self.commitments), ("pub", self.peer_pubs)):
            state.update({f"{name}.{c}": bytes_to_state(v) for c, v in table.items()})
        seed = self.lsh_seed_used
        state["lsh_seed_used"] = bytes_to_state(seed) if isinstance(seed, bytes) else seed
        return state

    def load_state_dict(self, state: Mapping[str, StateValue]) -> None:
        super().load_state_dict(state)
        if "lsh_seed_used" not in state:
            raise FedLabelsError(f"client {self.cid}: state has no entry 'lsh_seed_used'.")
        self._reset_secure()
        parts = {name: unprefixed(name, state) for name in ("keypair", "seed", "hamming")}
        if parts["keypair"]:
            from fedlabels.secure.keys import KeyPair

            self.keypair = KeyPair.from_state(parts["keypair"])
        if parts["seed"]:
            from fedlabels.secure.seed import SeedAgreement

            self.seed_agreement = SeedAgreement.from_state(parts["seed"])
        if parts["hamming"]:
            from fedlabels.secure.hamming_protocol import HammingParty

            self.hamming = HammingParty.from_state(parts["hamming"])
        self.commitments = {int(c): state_to_bytes(v)
                            for c, v in unprefixed("commit", state).items()}
        self.peer_pubs = {int(c): state_to_bytes(v) for c, v in unprefixed("pub", state).items()}
        seed = state["lsh_seed_used"]
        self.lsh_seed_used = (state_to_bytes(seed) if isinstance(seed, np.ndarray)
                              else None if seed is None else int(seed))


def _need(value: Any, cid: int, phase: str) -> Any:
    if value is None:
        raise FedLabelsError(f"client {cid}: an XCLP message arrived before xclp.{phase} had "
                             "been handled (messages out of order, or state not restored).")
    return value
