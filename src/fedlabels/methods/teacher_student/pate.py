"""PATE and DP-PATE (Papernot et al., ICLR 2017 / 2018): teachers vote, a student learns.

The clients are the **teachers**, each trained on its own (disjoint) private data. Then:

* **round 1** — the server sends each teacher the ``queries`` indices of U it wants labelled
  (a seeded random subset), or with ``query_selection=clusters`` the seed of Q k-means
  clusters of U (:mod:`fedlabels.methods.teacher_student.clusters`); each teacher first
  trains to convergence (``teacher_steps`` steps for torch models, one fit for scikit-learn
  models), then replies with its hard labels on the queries (bit-packed; on a cluster, the
  class it predicts for most members). With ``teachers_per_client`` k a client trains k
  teachers on disjoint parts of its data (:class:`PATEClient`) and sends k rows of votes.
  The server counts votes and labels each query by the plain argmax (``pate``) or by GNMax,
  optionally confident GNMax (``dp-pate``), and **releases** the labelled queries (indices
  or the cluster seed + bit-packed labels + an abstention mask);
* **every round** — the released labels are public, so the holders of U train the
  **student** on the labelled queries (with clusters: every member of a labelled
  cluster): each client builds the same student (the same model spec and the same seed,
  sent by the server) and trains it b (``period``) steps per round (one fit for
  scikit-learn students). Every client therefore holds an identical student and reports
  its test accuracy: ``final.mean_accuracy`` *is* the student's accuracy, and the per-round
  records are the student's learning curve. (In a deployment one party
  would train it; the simulator repeats that training m times.) The shared roles are in
  :mod:`fedlabels.methods.teacher_student.roles`.

Privacy (``privacy`` in the result JSON): ``--epsilon`` is the run's total budget over all
queries (σ calibrated from it, the release checked against it); the GNMax noise is drawn by
the aggregator from OS entropy, never from the run seed (which also picks the queries).
ε from the data-independent GNMax analysis composed exactly (the Q queries are one Gaussian
mechanism, :func:`~fedlabels.privacy.vote_accounting.gnmax_exact_epsilon`; σ is calibrated
with the same accountant), its RDP bound and the data-dependent bound reported beside it,
the latter marked as not itself DP. Plain PATE has no noise and no guarantee. The GNMax
sensitivity assumes each private record trains one teacher — true here (clients hold
disjoint data, and a client's teachers disjoint parts of it); a teacher casts one vote per
query whether the query is a row or a cluster, so one record still moves at most one vote
per query.

With ``--epsilon`` and nothing else chosen, DP-PATE asks 20 cluster queries, each client
votes with one teacher per 8 private records (at most 10), and the student is ``logreg``
(measured best on digits and breast_cancer; docs/privacy.md, Defaults).

Options: :class:`PATEOptions` and :class:`DPPATEOptions`, with the teacher client and the
plain server in :mod:`~fedlabels.methods.teacher_student.pate_roles`. ``aggregation=secure``
moves the noise to the clients under secure aggregation
(:mod:`~fedlabels.methods.teacher_student.pate_secure`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, ClassVar

import numpy as np

from fedlabels.core.randomness import numpy_generator
from fedlabels.data import ClientData
from fedlabels.method.base import ClientRole, MethodContext, ServerRole, Settings
from fedlabels.method.options import MethodOptions
from fedlabels.method.threat import (
    EVALUATION_PAYLOADS,
    HONEST_BUT_CURIOUS_SERVER,
    Payload,
    ThreatModel,
)
from fedlabels.methods.teacher_student.pate_roles import (
    DPPATEOptions,
    PATEClient,
    PATEOptions,
    PATEServer,
)
from fedlabels.methods.teacher_student.roles import (
    RELEASE_OUTSIDE,
    VOTE_PAYLOADS,
    TeacherStudentMethod,
    check_teachers,
)
from fedlabels.privacy.events import DISJOINT_TEACHERS, GNMaxEvent
from fedlabels.privacy.gaussian_calibration import SIGMA_GIVEN
from fedlabels.privacy.gnmax import gnmax_aggregate, gnmax_event
from fedlabels.privacy.ledger import Ledger, LedgerEvents
from fedlabels.privacy.vote_accounting import (
    GNMAX_ACCOUNTANT,
    account_gnmax,
    calibrate_gnmax_sigma,
)


class DPPATEServer(LedgerEvents, PATEServer):
    """GNMax (optionally confident GNMax) aggregation, accounted by the exact Gaussian
    composition."""

    state_attrs: ClassVar[tuple[str, ...]] = ("events",)

    def __init__(self, settings: Settings, n_public: int, seed: int,
                 truth_public: np.ndarray | None = None,
                 client_sizes: list[int] | None = None) -> None:
        super().__init__(settings, n_public, seed, truth_public, client_sizes)
        opts = settings.options_as(DPPATEOptions)
        self.delta = opts.delta
        self.threshold, self.threshold_sigma = opts.threshold, opts.threshold_sigma
        self.calibrated_from = opts.epsilon
        if opts.noise_sigma is not None:
            self.sigma = opts.noise_sigma
        else:
            assert opts.epsilon is not None  # DPPATEOptions.check: one of the two
            self.sigma = calibrate_gnmax_sigma(opts.epsilon, self.n_queries, self.delta)
        # the released labels, each batch recorded once; ε and the budget are views of it
        self.ledger = Ledger(self.delta, opts.epsilon, what="each teacher")
        self.ledger.calibrated_by = SIGMA_GIVEN if opts.noise_sigma is not None \
            else GNMAX_ACCOUNTANT  # calibrate_gnmax_sigma's default
        self.ledger.check_plan(self._asked(self.n_queries), f"{self.n_queries} query(s)")

    def _asked(self, n_queries: int) -> list[GNMaxEvent]:
        """``n_queries`` queries as the data-independent accounting charges them."""
        return [GNMaxEvent(self.sigma, n_queries, n_queries, self.threshold,
                           self.threshold_sigma if self.threshold is not None else None)]

    def aggregate(self, counts: np.ndarray) -> np.ndarray:
        # stops before a release that would exceed the target
        self.ledger.check(self._asked(len(counts)), tight=False)
        # the aggregator's noise is its secret: OS entropy, never the run seed
        release = gnmax_aggregate(counts, self.sigma, numpy_generator(), self.threshold,
                                  self.threshold_sigma)
        self.ledger.record(gnmax_event(counts, release.answered, self.sigma, self.threshold,
                                       self.threshold_sigma), tight=False)
        account = account_gnmax(self.events, self.delta)  # beside ε: the other bounds
        self.privacy = {**account.to_dict(), "epsilon": self.ledger.spent().epsilon,
                        "calibrated_from_epsilon": self.calibrated_from,
                        "calibrated_by": self.ledger.calibrated_by,
                        "target": self.ledger.target_view(
                            "query", self.n_queries, sum(ev.n_queries for ev in self.events)),
                        "assumptions": [DISJOINT_TEACHERS, "the server that sees the vote "
                                        "counts is trusted (PATE's setting)"]}
        return release.labels


# ------------------------------------------------------------------ methods

#: what a teacher holder sends with aggregation secure (instead of its votes)
SECURE_PAYLOADS = (
    Payload("pate.masked", "masked", "votes", rows="queries", covered=True,
            note="aggregation secure: the client's integer vote counts plus its own discrete "
                 "Gaussian share, masked mod 2^k by pairwise masks that cancel only in the "
                 "group's sum (formal record-level (ε, δ) against the server too, set per run "
                 "in privacy)"),
    Payload("pate.masked", "teacher_accuracy", "metric", source="config",
            note="aggregation secure: the teachers' mean test accuracy, in the clear (not "
                 "sent by a Flower site with evaluate=false)"),
    Payload("pate.key", "pub", "crypto", note="aggregation secure: the client's fresh X25519 "
            "public key of the round (no private data)"),
    Payload("pate.key", "sig", "crypto", note="aggregation secure: the client's "
            "identity-key signature of its round key (no private data)"),
)

_SEES = ("each teacher's hard-label votes on the Q queries of U (once, in round 1) and its "
         "teacher's test accuracy")


class PATE(TeacherStudentMethod):
    name = "pate"
    description = "PATE: teachers (clients) vote once on queries from U; a student learns them"
    options_class: ClassVar[type[MethodOptions]] = PATEOptions
    threat_model = ThreatModel(
        view="teacher-votes-on-queries",
        adversary=HONEST_BUT_CURIOUS_SERVER + "; it chooses the queries from U",
        sees=_SEES, guarantee="none",
        payloads=(*VOTE_PAYLOADS, *EVALUATION_PAYLOADS))
    server_class: ClassVar[type[PATEServer]] = PATEServer

    def validate(self, n_clients: int, settings: Settings, learners: list[Any]) -> None:
        self.check_clients(n_clients, settings)

    def check_clients(self, n_clients: int, settings: Settings) -> None:
        check_teachers(self.name.upper(), n_clients, settings)

    def make_server(self, ctx: MethodContext, n_public: int, learners: list[Any],
                    client_sizes: list[int]) -> ServerRole:
        return self.server_class(ctx.settings, n_public, ctx.server_seed, ctx.truth_public,
                                 client_sizes)

    def make_client(self, cid: int, data: ClientData, learner: Any, ctx: MethodContext,
                    X_public: np.ndarray | None, X_test: np.ndarray,
                    y_test: np.ndarray) -> ClientRole:
        return PATEClient(cid, data, learner, ctx.settings, X_public, X_test, y_test,
                          scaling=ctx.scaling)


class DPPATE(PATE):
    name = "dp-pate"
    description = ("DP-PATE: PATE with GNMax (optionally confident GNMax) vote aggregation, "
                   "exact Gaussian accounting")
    options_class = DPPATEOptions
    roster_stake = ("as every peer of this site's secure-aggregation group it then removes "
                    "their masks and noise shares and sees this site's vote counts with its "
                    "own noise share only, below the run's ε")
    #: logistic-regression teachers: at ε = 8 they beat decision trees on every dataset
    #: measured (docs/privacy.md, Defaults: digits 0.762 against 0.418, breast_cancer 0.928
    #: against 0.854); ``--model`` chooses another
    capabilities = replace(PATE.capabilities, default_model="logreg")
    threat_model = ThreatModel(
        view="teacher-votes-on-queries",
        adversary=HONEST_BUT_CURIOUS_SERVER + "; it chooses the queries from U and is PATE's "
        "trusted aggregator, which adds the GNMax noise",
        sees=_SEES, guarantee="formal",
        against="anyone who sees the released labels or the student trained on them (other "
                "clients, users of the student); not the aggregator, which sees the votes in "
                "the clear",
        neighbouring=DISJOINT_TEACHERS,
        assumptions=(
            "each private record trains exactly one teacher (disjoint teacher data): true "
            "here, the teachers are the clients and hold disjoint data",
            "the aggregator adds the noise honestly and keeps the votes to itself (PATE's "
            "trusted aggregator); the votes are outside the guarantee",
            "the data-dependent ε is reported beside the guarantee and is not itself DP",
            "the teachers' test accuracies are released without noise, outside the guarantee",
        ),
        payloads=(*VOTE_PAYLOADS, *SECURE_PAYLOADS, *EVALUATION_PAYLOADS),
        outside=(*RELEASE_OUTSIDE,
                 ("privacy.epsilon_data_dependent", "data-dependent bound computed from the "
                  "raw vote counts; not itself differentially private"),
                 ("rounds[].server.attempts", "aggregation secure: the attempts the vote "
                  "took (who answered is the server's view, not private data)"),
                 ("rounds[].server.group_size", "aggregation secure: the size of the group "
                  "whose sum was decoded"),
                 ("pate.teachers", "aggregation secure: the teachers of the decoded group, "
                  "from the clients' sizes")))
    server_class = DPPATEServer

    def trusted_setup(self, settings: Settings, n_clients: int) -> Any:
        """aggregation secure: the sites' identity keys, the roster and the run id
        (:func:`fedlabels.secure.identity.trusted_setup`); otherwise none."""
        if settings.options_as(DPPATEOptions).aggregation != "secure":
            return None
        from fedlabels.secure.identity import trusted_setup

        return trusted_setup(range(n_clients))

    def make_server(self, ctx: MethodContext, n_public: int, learners: list[Any],
                    client_sizes: list[int]) -> ServerRole:
        if ctx.settings.options_as(DPPATEOptions).aggregation == "secure":
            from fedlabels.methods.teacher_student.pate_secure import SecurePATEServer

            return SecurePATEServer(ctx.settings, n_public, ctx.server_seed, ctx.truth_public,
                                    client_sizes)
        return super().make_server(ctx, n_public, learners, client_sizes)

    def make_client(self, cid: int, data: ClientData, learner: Any, ctx: MethodContext,
                    X_public: np.ndarray | None, X_test: np.ndarray,
                    y_test: np.ndarray) -> ClientRole:
        if ctx.settings.options_as(DPPATEOptions).aggregation == "secure":
            from fedlabels.methods.teacher_student.pate_secure import SecurePATEClient

            return SecurePATEClient(cid, data, learner, ctx.settings, X_public, X_test,
                                    y_test, scaling=ctx.scaling, trust=ctx.trust)
        return super().make_client(cid, data, learner, ctx, X_public, X_test, y_test)


__all__ = ["DPPATE", "PATE", "DPPATEOptions", "DPPATEServer", "PATEClient", "PATEOptions",
           "PATEServer"]
