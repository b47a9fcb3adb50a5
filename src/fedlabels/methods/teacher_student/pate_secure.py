"""DP-PATE with the noise added by the teachers under secure aggregation (``aggregation="secure"``).

Kairouz, Liu & Steinke (2021)'s distributed discrete Gaussian on the vote counts, with
Bonawitz et al. (2017)'s pairwise masks (:mod:`fedlabels.secure.masked_sum`). In round 1:

1. ``pate.keys``: the server announces the group; each member that accepts it draws a
   fresh X25519 key pair and returns its public key signed with its identity key
   (:mod:`fedlabels.secure.identity`, bound to the run, the round, the group and the
   member's σ, min_group, ring bits, Q and C, which every peer checks against its own).
2. ``pate.secure_vote`` (attempt a = 0, 1, ...): the queries (or the cluster seed), the
   members of this attempt and their signed keys. A member checks everything against its
   own configuration, charges the release to its own ledger, counts its teachers' votes
   (an integer (Q, C) matrix: a teacher adds 1 to the class it votes per query), adds its
   own share N_Z(0, σ²/min_group) per count from its OS-entropy generator and returns the
   counts plus its pairwise mask mod 2^k.
3. Where every member answered, the masks cancel: the server decodes the noisy counts
   Σ counts + Σ shares and labels each query by their argmax (post-processing). Where one
   did not, it starts attempt a + 1 with the members that answered (new view, new masks,
   new shares); every attempt a member answered is charged. No decoded sum: nothing is
   released and the run stops with an error.

Retries are releases: a client answers at most 1 + ``retries`` attempts (the allowance its
own plan declares), so a server that forges dropouts gets no more from it; with ``epsilon``
its σ is calibrated for 1 + retries releases, so the stated ε covers them all.

Accounting (:mod:`fedlabels.privacy.distributed_discrete`). Under the method's relation
(:data:`~fedlabels.privacy.events.DISJOINT_TEACHERS`: one record of one teacher replaced)
one teacher's vote moves on a query: -1 in one class, +1 in another, ℓ2 √2, ℓ1 2. The
record trains that teacher, so it may move its vote on **every** query: the release of the
Q·C counts moves by an integer vector of ℓ2 at most √(2Q) and ℓ1 at most 2Q. One answered
attempt is one release of a sum of at least min_group shares of std σ/√min_group on
d = Q·C coordinates, shift Δ = √(2Q) (KLS21 Prop. 14; the Gaussian part α·2Q/(2σ²) = Q·α/σ²,
the data-independent GNMax charge of Q queries, plus the τ terms): a
:class:`~fedlabels.privacy.events.DistributedDiscreteGaussianEvent` with noise multiplier
σ/Δ, grid 1 and ``clip_norm`` Δ (votes are integers). Confident GNMax (a second noisy sum)
and the data-dependent bound (noiseless counts) are refused or not computed.

Ring: k is the smallest with 2^{k−1} above n·K + 40·(σ/√min_group)·√n (n: the run's
clients, K: the most teachers a client's options give it), so an honest group's counts
never wrap.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any, ClassVar

import numpy as np

from fedlabels.comm import Message
from fedlabels.comm.id_lists import members_text
from fedlabels.consensus import vote_counts
from fedlabels.core.errors import (
    BudgetRefusal,
    FedLabelsError,
    LearnerOutputError,
    refuse_other_value,
)
from fedlabels.method.base import Grid, Settings
from fedlabels.method.dpsgd_client import SecretNoiseClient
from fedlabels.method.message_config import SEED_MAX, whole
from fedlabels.method.secure_member import (
    SIGMA_REL_TOL,
    SecureSumMember,
    allowance_spent,
    warn_without_retries,
)
from fedlabels.methods.teacher_student.pate_roles import (
    DPPATEOptions,
    PATEClient,
    PATEServer,
    teacher_steps,
)
from fedlabels.methods.teacher_student.roles import n_queries
from fedlabels.privacy.discrete_gaussian import NOISE_TAIL_SDS
from fedlabels.privacy.events import DISJOINT_TEACHERS, DistributedDiscreteGaussianEvent
from fedlabels.privacy.gaussian_calibration import SIGMA_GIVEN
from fedlabels.privacy.ledger import Ledger, LedgerEvents

#: the attempts a server makes before it gives the vote up
MAX_ATTEMPTS = 3
#: the signature purpose of a member's round key
KEY_PURPOSE = "pate-round-key"


class SecureVoteParameters:
    """One party's parameters of the mechanism, all from its own options and plan: Q, C,
    the shift Δ = √(2Q), σ (given, or calibrated from its ε for 1 + retries releases), the
    smallest group, each share's std and the ring's bits."""

    def __init__(self, options: DPPATEOptions, settings: Settings, n_public: int) -> None:
        from fedlabels.privacy.distributed_discrete import (
            MIN_SHARE_SIGMA,
            calibrate_distributed_noise_multiplier,
        )
        from fedlabels.secure.masked_sum import ring_bits

        self.queries, self.classes = n_queries(options, n_public), int(settings.n_classes)
        self.selection = options.selection()
        self.dim = self.queries * self.classes
        self.sensitivity = math.sqrt(2 * self.queries)  # one teacher's votes on Q queries
        self.delta, self.epsilon = float(options.delta), options.epsilon
        n = int(settings.n_clients)
        self.n_clients, self.unit = n, "vote"
        self.retries = int(options.retries)
        self.releases = 1 + self.retries  # the most a client answers in the run
        self.min_group = int(options.min_group or n)
        if self.min_group > n:
            raise FedLabelsError(f"dp-pate min_group {self.min_group} exceeds the run's {n} "
                                 "clients; no group could be answered.")
        if options.noise_sigma is not None:
            self.noise_multiplier = float(options.noise_sigma) / self.sensitivity
        else:
            assert options.epsilon is not None  # DPPATEOptions.check: one of the two
            self.noise_multiplier = calibrate_distributed_noise_multiplier(
                options.epsilon, self.delta, self.min_group, self.sensitivity, self.dim,
                self.releases)
        self.sigma = self.noise_multiplier * self.sensitivity  # std of the sum per count
        self.share_sigma = self.sigma / math.sqrt(self.min_group)
        if self.share_sigma < MIN_SHARE_SIGMA:
            raise FedLabelsError(f"dp-pate aggregation secure: each client's noise share "
                                 f"σ/√min_group = {self.share_sigma:.3g} votes is below "
                                 f"{MIN_SHARE_SIGMA}, where the sum's bound does not hold; "
                                 "raise --noise-sigma.")
        most = options.teachers_per_client
        if most is None:
            most = (options.budget_teachers_per_client or 1) if options.under_budget() else 1
        self.teachers_bound = int(most)
        worst = n * most + NOISE_TAIL_SDS * self.share_sigma * math.sqrt(n)
        self.bits = ring_bits(worst)

    def releases_by(self, rnd: int) -> int:
        """The releases a client answers (one vote, in whichever round): 1 + retries."""
        return self.releases

    def fingerprint(self) -> bytes:
        """What a member's key signature binds of its parameters: a peer checks it against
        its own, so every member adds shares of the same size on the same Q·C counts."""
        return (np.asarray([self.sigma], dtype="<f8").tobytes()
                + np.asarray([self.min_group, self.bits, self.queries, self.classes],
                             dtype="<i8").tobytes())

    def event(self, clients: tuple[int, ...] = ()) -> DistributedDiscreteGaussianEvent:
        """One answered attempt (``clients``: the members asked, on a server's ledger)."""
        return DistributedDiscreteGaussianEvent(
            self.noise_multiplier, self.min_group, self.sensitivity, 1.0, self.sensitivity,
            self.dim, tuple(sorted(clients)), DISJOINT_TEACHERS)


def query_digest(message: Message, cid: int) -> str:
    """What a vote message asks: the cluster seed and count, or the query rows."""
    config = message.config
    if "cluster_seed" in config:
        text = (f"clusters|{whole(config, 'cluster_seed', cid, 0, SEED_MAX)}|"
                f"{whole(config, 'clusters', cid, 1)}")
        return hashlib.sha256(text.encode()).hexdigest()
    rows = np.asarray(message.arrays["queries"], dtype="<i8")
    return hashlib.sha256(b"rows|" + rows.tobytes()).hexdigest()


class SecurePATEClient(SecureSumMember, SecretNoiseClient, PATEClient):
    """A teacher holder in the secure aggregation: its own share, masks, checks and ledger."""

    state_attrs: ClassVar[tuple[str, ...]] = ("key_round", "key_group", "attempt",
                                              "counts_for", "round_counts", "round_accuracy")
    #: a vote's attempts after dropouts come within one round
    multi_step_kinds: ClassVar[frozenset[str]] = frozenset({"pate.secure_vote"})
    keys_kind, key_reply_kind, attempt_kind = "pate.keys", "pate.key", "pate.secure_vote"
    key_purpose = KEY_PURPOSE

    def __init__(self, *args: Any, trust: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.handlers["pate.secure_vote"] = self.on_vote
        self.handlers.pop("pate.vote", None)  # never the votes in the clear
        self.init_member(trust)
        self.counts_for = ""  # the queries the stored counts answer
        self.round_counts: np.ndarray | None = None  # this client's (Q, C) vote counts
        self.round_accuracy = 0.0
        self._params: SecureVoteParameters | None = None

    def params(self) -> SecureVoteParameters:
        """This client's own parameters (its options, its plan, the size of U)."""
        if self._params is None:
            assert self.public is not None  # a teacher-student client holds U
            self._params = SecureVoteParameters(self.settings.options_as(DPPATEOptions),
                                                self.settings, len(self.public))
        return self._params

    @property
    def ledger(self) -> Ledger:
        """This client's releases, refused beyond its own ε (when it has one)."""
        if self._ledger is None:
            opts = self.settings.options_as(DPPATEOptions)
            self._ledger = Ledger(float(opts.delta), opts.epsilon, what=f"client {self.cid}")
        return self._ledger

    def _check_queries(self, message: Message) -> None:
        """The server asks the client's own Q queries of its own kind (more queries would
        move its teachers' votes on more counts than it accounts for)."""
        params = self.params()
        clusters = "cluster_seed" in message.config
        refuse_other_value(self.cid, "query_selection", "clusters" if clusters else "random",
                           params.selection, read=str)
        asked = whole(message.config, "clusters", self.cid, 1) if clusters \
            else int(np.asarray(message.arrays["queries"]).size)
        refuse_other_value(self.cid, "queries", asked, params.queries, read=int)

    def on_vote(self, message: Message) -> Message:
        """One attempt: checks, the charge, the noisy masked vote counts."""
        from fedlabels.privacy.discrete_gaussian import sample_discrete_gaussian

        params = self.params()
        config = message.config
        refuse_other_value(self.cid, "aggregation", config.get("aggregation", "plain"),
                           "secure", read=str)
        # the releases it answers are its own plan's: another allowance is refused at the
        # first attempt, before anything is charged (under epsilon also its σ's releases)
        refuse_other_value(self.cid, "retries", config.get("retries"), params.retries,
                           read=int)
        refuse_other_value(self.cid, "noise_multiplier", config.get("noise_multiplier"),
                           params.noise_multiplier, rel_tol=SIGMA_REL_TOL)
        refuse_other_value(self.cid, "bits", config.get("bits"), params.bits, read=int)
        self.checked_steps(config, teacher_steps(self.settings))  # never the server's
        self._check_queries(message)
        rnd, attempt, group, peers = self.checked_attempt(message)
        counts = self._counts(message)
        self.attempt = attempt
        # before anything leaves; refused beyond its ε or 1 + its retries
        self.charge_attempt(rnd, attempt, params.event())
        noise = sample_discrete_gaussian(params.share_sigma, params.dim, self.noise_rng)
        return Message("pate.masked", arrays={
            "masked": self.masked(counts.ravel() + noise, rnd, attempt, group, peers)},
            config=self.teacher_score(self.round_accuracy))

    def train_student(self, message: Message) -> Message:
        """The student's steps a round are the client's own (``period``), never the
        server's (2⁶² kept a site training for good)."""
        self.checked_steps(message.config)
        return super().train_student(message)

    def _counts(self, message: Message) -> np.ndarray:
        """This client's (Q, C) integer vote counts on the message's queries: its teachers
        vote once per query set (a retry reuses them; iterative teachers train once)."""
        asked = query_digest(message, self.cid)
        if self.round_counts is None or self.counts_for != asked:
            labels, accuracy = self.teacher_labels(message)
            votes, C = np.stack(labels), self.settings.n_classes
            if votes.size and (votes.min() < 0 or votes.max() >= C):  # as pack_labels
                raise LearnerOutputError(f"labels must lie in [0, {C}); got range "
                                         f"[{votes.min()}, {votes.max()}]")
            self.round_counts, self.round_accuracy = vote_counts(votes, C), accuracy
            self.counts_for = asked
        counts = np.asarray(self.round_counts, dtype=np.int64)
        if counts.max(initial=0) > self.params().teachers_bound:
            raise FedLabelsError(f"client {self.cid}: a vote count of {counts.max()} exceeds "
                                 f"the {self.params().teachers_bound} teachers the ring was "
                                 "sized for.")
        return counts


class SecurePATEServer(LedgerEvents, PATEServer):
    """Announces the group, relays the signed keys, sums the masked vote counts and labels
    each query by the argmax of the noisy sum."""

    state_attrs: ClassVar[tuple[str, ...]] = ("events", "attempts", "group_size",
                                              "n_teachers")

    def __init__(self, settings: Settings, n_public: int, seed: int,
                 truth_public: np.ndarray | None = None,
                 client_sizes: list[int] | None = None) -> None:
        super().__init__(settings, n_public, seed, truth_public, client_sizes)
        opts = settings.options_as(DPPATEOptions)
        self.params = SecureVoteParameters(opts, settings, n_public)
        self.ledger = Ledger(self.params.delta, opts.epsilon, what="each client",
                             per_client=True)
        p = self.params
        self.ledger.check_plan([p.event()] * p.releases,
                               f"one vote and {p.retries} retried attempt(s)")
        warn_without_retries("dp-pate", p, "a dropout stops the run")
        self.attempts = 0  # the attempts the vote took
        self.group_size = 0  # the members whose sum was decoded (0: none)
        self.n_teachers = 0  # their teachers (from the sizes the server holds)

    def check_reply(self, cid: int, request: Message, reply: Message) -> None:
        from fedlabels.method.replies import MalformedReply
        from fedlabels.secure.masked_sum import packed_size

        super().check_reply(cid, request, reply)
        expect = {"pate.key": {"pub": (np.dtype(np.uint8), 32),
                               "sig": (np.dtype(np.uint8), 64)},
                  "pate.masked": {"masked": (np.dtype(np.uint8), packed_size(
                      self.params.dim, self.params.bits))}}.get(reply.kind)
        for key, (dtype, size) in (expect or {}).items():
            arr = reply.arrays.get(key)
            if arr is None or np.asarray(arr).dtype != dtype or np.asarray(arr).size != size:
                raise MalformedReply(f"client {cid}'s {reply.kind} needs {key} as {size} "
                                     f"values of {dtype}.")

    def collect_counts(self, rnd: int, grid: Grid, vote: Message
                       ) -> tuple[np.ndarray, dict[int, Message]]:
        """The noisy sum of a complete group's vote counts (retried after a dropout)."""
        from fedlabels.secure.masked_sum import ring_sum

        p = self.params
        group = sorted(grid.client_ids)
        announce = Message("pate.keys", config={"round": rnd,
                                                "participants": members_text(group)})
        keys = grid.exchange({c: announce for c in group}, rnd) if group else {}
        group = sorted(keys)
        while self.attempts < MAX_ATTEMPTS and len(group) >= p.min_group:
            if allowance_spent(self.events, group, p.releases):
                break  # a member's plan allows no further attempt
            try:  # every member asked is charged, on the server's ledger as on its own
                self.ledger.add(p.event(tuple(group)))
            except BudgetRefusal:
                break  # an honest server stops asking once a member's budget is spent
            arrays = dict(vote.arrays)
            for c in group:
                arrays[f"pub_{c}"] = keys[c].arrays["pub"]
                arrays[f"sig_{c}"] = keys[c].arrays["sig"]
            message = Message("pate.secure_vote", arrays=arrays, config={
                **vote.config, "round": rnd, "attempt": self.attempts,
                "participants": members_text(group), "aggregation": "secure",
                "bits": p.bits, "retries": p.retries,
                "noise_multiplier": p.noise_multiplier})
            replies = grid.exchange({c: message for c in group}, rnd)
            self.attempts += 1
            if set(replies) == set(group):
                total = ring_sum({c: replies[c].arrays["masked"] for c in group}, p.bits,
                                 p.dim)
                self.group_size = len(group)
                self.n_teachers = sum(self.teachers_of(c) for c in group)
                return total.reshape(p.queries, p.classes), replies
            group = sorted(replies)  # the masks of a missing member never cancel: again
        raise FedLabelsError(f"dp-pate aggregation secure: no group of at least "
                             f"{p.min_group} clients answered a whole attempt "
                             f"({self.attempts} made, at most {MAX_ATTEMPTS}, each within "
                             f"the clients' ε and 1 + retries = {p.releases} attempts); nothing "
                             "was released. Rerun with fewer dropouts, a smaller --opt "
                             "min_group or --opt retries=A (each site's plan too: A more "
                             "releases).")

    def aggregate(self, counts: np.ndarray) -> np.ndarray:
        """The argmax of the noisy counts (ties -> smallest class): post-processing."""
        p = self.params
        self.privacy = {
            "method": "dp-pate",
            "aggregation": "secure",
            "mechanism": "distributed discrete Gaussian under secure aggregation: each client "
                         "adds N_Z(0, σ²/min_group) to each of its integer vote counts and "
                         "masks them; the server learns only the group's noisy counts and "
                         "labels each query by their argmax",
            **self.ledger.spent().to_dict(),
            "noise_sigma": p.sigma,
            "noise_sigma_source": (f"calibrated from target epsilon {p.epsilon}"
                                   if p.epsilon is not None else SIGMA_GIVEN),
            "min_group": p.min_group,
            "share_std_votes": p.share_sigma,
            "ring_bits": p.bits,
            "queries": p.queries,
            "sensitivity": {"value": p.sensitivity, "norm": "L2", "l1": 2 * p.queries,
                            "unit": "votes", "source": "one record trains one teacher, "
                            "whose vote may move on each of the Q queries: ±1 in two classes "
                            "per query, √(2Q) over the Q·C counts"},
            "attempts": self.attempts,
            "decoded_group": self.group_size,
            "retries": p.retries,
            "releases_planned": p.releases,
            "releases_accounted": len(self.events),
            "target": self.ledger.target_view("attempt", p.releases, len(self.events),
                                              enforced=CLIENTS_ENFORCE),
            "accounting": "RDP of a sum of min_group discrete Gaussian shares (Kairouz, Liu "
                          "& Steinke 2021, Prop. 14, with its τ term) on the Q·C counts, "
                          "shift ℓ2 √(2Q) and ℓ1 2Q, one release per attempt a client "
                          "answered, converted by dp-accounting's RDP conversion; no "
                          "data-dependent bound (it would read the noiseless counts)",
            "guarantee": "formal",
            "guarantee_against": GUARANTEE_AGAINST,
            "adversary": SECURE_ADVERSARY,
            "sees": SECURE_SEES,
            "neighbouring": DISJOINT_TEACHERS,
            "unit": "per private record of each client, over the whole run; the worst client",
            "assumptions": list(SECURE_ASSUMPTIONS),
        }
        return np.asarray(counts).argmax(axis=1).astype(np.int64)

    def release_metrics(self, replies: dict[int, Message]) -> dict[str, float]:
        out = super().release_metrics(replies)
        out.pop("labels_equal_plain_argmax", None)  # the server has no noiseless counts
        return {**out, "attempts": float(self.attempts), "group_size": float(self.group_size)}

    def summary(self) -> dict[str, Any]:
        out = super().summary()
        out["pate"]["teachers"] = self.n_teachers or None  # not the noisy counts' sum
        out["pate"]["aggregation"] = "secure"
        return out


CLIENTS_ENFORCE = ("each client charges every attempt it answers to its own ledger and "
                   "refuses one beyond its own ε or beyond 1 + its retries; the server stops "
                   "asking at the same point")
SECURE_ADVERSARY = ("a server that may deviate from the protocol (announce small groups, "
                    "forge dropouts, relay other keys or ask other queries: each refused or "
                    "charged by the clients) and does not collude with clients (with t "
                    "colluding members of a group of n, n − t noise shares are left)")
SECURE_SEES = ("each member's vote counts plus its noise shares, masked mod 2^k with its pairwise "
               "masks (uniform), and the noisy sum of a whole group's counts; never one "
               "client's votes")
GUARANTEE_AGAINST = ("the server (honest-but-curious or deviating: it sees only masked "
                     "vote counts and the group's noisy sum), other clients and anyone who "
                     "sees the released labels or the student; against a server colluding "
                     "with t members of a group of n, the noise left is the n − t honest "
                     "shares, σ scaled by √((n − t)/min_group)")
SECURE_ASSUMPTIONS = (
    "each private record trains exactly one teacher (disjoint teacher data): one record "
    "moves one vote on each of the Q queries",
    "each client follows the protocol: it counts its teachers' votes, adds its own share "
    "from its OS entropy and masks; σ, Q and min_group come from its own options, never "
    "from a message",
    "at least min_group members of the group whose sum is decoded are honest and do not "
    "collude with the server (colluding members know their shares: with t of them in a "
    "group of n, the honest noise has variance (n − t)σ²/min_group)",
    "the roster of identity keys is distributed out of band (no Sybil keys); X25519, "
    "HKDF-SHA256, ChaCha20 and Ed25519 are secure",
    "the guarantee covers the server's whole view (masked counts, the noisy sum) and the "
    "released labels; a forged dropout makes a client answer another attempt, each charged "
    "as a release",
    "outside it: who is in each group, the group sizes and attempts, the round keys, the "
    "teachers' test accuracies (sent in the clear) and the teacher counts from the sizes",
)


__all__ = ["MAX_ATTEMPTS", "SecurePATEClient", "SecurePATEServer", "SecureVoteParameters"]
