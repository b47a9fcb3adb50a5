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
ε from the data-independent GNMax RDP bound
(:mod:`fedlabels.privacy.gnmax`), the data-dependent bound reported separately and marked as
not itself DP. Plain PATE has no noise and no guarantee. The GNMax sensitivity assumes each
private record trains one teacher — true here (clients hold disjoint data, and a client's
teachers disjoint parts of it); a teacher casts one vote per query whether the query is a
row or a cluster, so one record still moves at most one vote per query.

With ``--epsilon`` and nothing else chosen, DP-PATE asks 20 cluster queries, each client
votes with one teacher per 8 private records (at most 10), and the student is ``logreg``
(measured best on digits and breast_cancer; docs/privacy.md, Defaults).

Options: :class:`PATEOptions` and :class:`DPPATEOptions`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import numpy as np

from fedlabels.comm import Message
from fedlabels.core.errors import FedLabelsError
from fedlabels.core.randomness import numpy_generator
from fedlabels.data import ClientData
from fedlabels.learners import clone_fresh_learner
from fedlabels.method.base import (
    ClientRole,
    MethodContext,
    ServerRole,
    Settings,
    fit_or_train,
)
from fedlabels.method.options import (
    DP_SCALE,
    STEPS,
    Interval,
    MethodOptions,
    delta_option,
    option,
)
from fedlabels.method.threat import EVALUATION_PAYLOADS, HONEST_BUT_CURIOUS_SERVER, ThreatModel
from fedlabels.methods.teacher_student.roles import (
    QUERY_SELECTIONS,
    RELEASE_OUTSIDE,
    VOTE_PAYLOADS,
    ConstantModel,
    TeacherStudentClient,
    TeacherStudentMethod,
    TeacherStudentOptions,
    TeacherStudentServer,
    check_teachers,
)
from fedlabels.privacy.events import DISJOINT_TEACHERS, GNMaxEvent
from fedlabels.privacy.gnmax import gnmax_aggregate, gnmax_event
from fedlabels.privacy.ledger import Ledger, LedgerEvents
from fedlabels.privacy.vote_accounting import account_gnmax, calibrate_gnmax_sigma

# ------------------------------------------------------------------ options


@dataclass(frozen=True)
class PATEOptions(TeacherStudentOptions):
    teacher_steps: int | None = option(
        None, "local steps each torch teacher trains before it votes (scikit-learn teachers "
        "fit once); none: 20 x period", kind=int, interval=STEPS, nullable=True)
    teachers_per_client: int | None = option(
        None, "teachers each client trains on disjoint parts of its private data (its "
        "model, one part each; subsample-and-aggregate), each casting one vote per query; "
        "none: 1 (dp-pate with --epsilon: one per 8 private records, at most 10; measured "
        "best in docs/privacy.md, Defaults)", kind=int, interval=Interval(1, None),
        nullable=True)

    #: with a total ε and no ``teachers_per_client`` given: at most this many teachers per
    #: client, one per ``budget_records_per_teacher`` private records (see budget_queries)
    budget_teachers_per_client: ClassVar[int | None] = None
    budget_records_per_teacher: ClassVar[int] = 8

    def teachers_per_client_count(self, n_records: int) -> int:
        """Teachers of a client with ``n_records`` records: as given, else the budget
        default under a total ε, else 1; never more than its records."""
        k = 1 if self.teachers_per_client is None else self.teachers_per_client
        if self.teachers_per_client is None and self.under_budget() \
                and self.budget_teachers_per_client is not None:
            k = min(self.budget_teachers_per_client,
                    n_records // self.budget_records_per_teacher)
        return max(1, min(k, n_records))


@dataclass(frozen=True)
class DPPATEOptions(PATEOptions):
    budget_queries: ClassVar[int | None] = 20
    budget_student: ClassVar[str | None] = "logreg"
    budget_selection: ClassVar[str | None] = "clusters"
    budget_teachers_per_client: ClassVar[int | None] = 10

    queries: int | None = option(
        None, "number of queries Q for the teachers to label (rows of U, or clusters of U "
        "with query_selection=clusters); none: 20 clusters with --epsilon (each query "
        "spends budget; measured best in docs/privacy.md, Defaults), else all of U",
        kind=int, interval=Interval(1, None), nullable=True, flag=True)
    query_selection: str | None = option(
        None, "what a query is: random (Q random rows of U) or clusters (Q k-means clusters "
        "of U, each teacher votes one class per cluster and the released label labels every "
        "member); none: clusters with --epsilon (measured best), else random", kind=str,
        choices=QUERY_SELECTIONS, nullable=True)
    student_model: str | None = option(
        None, "model spec of the student (e.g. dt, mlp(hidden=32)); none: logreg with "
        "--epsilon (measured best), else the client's own model",
        kind=str, nullable=True)
    noise_sigma: float | None = option(
        None, "GNMax noise σ on each vote count (σ = 0 is plain PATE: --method pate); give "
        "this or epsilon", kind=float, interval=DP_SCALE, nullable=True, flag=True)
    epsilon: float | None = option(
        None, "total (ε, δ) budget of the run over all queries (data-independent GNMax "
        "bound); σ is calibrated from it (plain GNMax only) and the release is checked "
        "against it; give this or noise_sigma", kind=float, interval=DP_SCALE,
        nullable=True, flag=True)
    delta: float = delta_option()
    threshold: float | None = option(
        None, "confident GNMax: answer a query only if its largest vote count plus "
        "N(0, threshold_sigma²) reaches this threshold T; none: answer every query",
        kind=float, interval=Interval(0.0, math.inf, "left"), nullable=True)
    threshold_sigma: float | None = option(
        None, "confident GNMax: noise σ₁ of the threshold check (needs threshold)",
        kind=float, interval=DP_SCALE, nullable=True)

    def check(self) -> None:
        super().check()
        if self.noise_sigma is None and self.epsilon is None:
            raise FedLabelsError("DP-PATE needs --noise-sigma σ (GNMax noise on each vote "
                                 "count) or --epsilon (a total ε target at --delta, from "
                                 "which σ is calibrated); in Python: fl.run(..., "
                                 "options={'epsilon': 8}).")
        if self.noise_sigma is not None and self.epsilon is not None:
            raise FedLabelsError("DP-PATE takes --noise-sigma or --epsilon, not both: σ is "
                                 "either given or calibrated from the ε target.")
        if self.threshold is None:
            if self.threshold_sigma is not None:
                raise FedLabelsError("--opt threshold_sigma applies only to confident GNMax; "
                                     "give --opt threshold=T too, or leave it out.")
            return
        if self.threshold_sigma is None:
            raise FedLabelsError("confident GNMax (--opt threshold=T) needs --opt "
                                 "threshold_sigma > 0.")
        if self.epsilon is not None:
            raise FedLabelsError("with confident GNMax (--opt threshold) give --noise-sigma "
                                 "and --opt threshold_sigma; calibrating σ from --epsilon "
                                 "covers plain GNMax only.")


# ------------------------------------------------------------------ client


class PATEClient(TeacherStudentClient):
    """A client that votes with one teacher, or with ``teachers_per_client`` teachers trained
    on disjoint parts of its private data.

    The parts are a fixed seeded permutation of the record positions, cut into near-equal
    slices: which part a record falls in depends on its position and the number of records,
    never on any record's values, so replacing one record changes one teacher and moves at
    most one vote per query (the GNMax sensitivity of disjoint teachers). The extra teachers
    only vote; they are not kept (the client's model after the vote is the student).
    """

    def teachers(self, message: Message) -> list[Any]:
        k = self.settings.options_as(PATEOptions).teachers_per_client_count(len(self.data.y))
        if k == 1:
            return super().teachers(message)
        order = np.random.default_rng([0x7EAC, self.cid]).permutation(len(self.data.y))
        return [self._part_teacher(part, int(message.config["steps"]))
                for part in np.array_split(order, k)]

    def _part_teacher(self, part: np.ndarray, steps: int) -> Any:
        X, y = self.data.X[part], self.data.y[part]
        if len(np.unique(y)) == 1:  # one class seen: that teacher votes it everywhere
            return ConstantModel(int(y[0]))
        teacher: Any = clone_fresh_learner(self.learner)
        fit_or_train(teacher, X, y, steps, lambda exc: (
            f"client {self.cid}: a teacher ({type(teacher).__name__}) failed to fit on "
            f"its part of {len(y)} records: {type(exc).__name__}: {exc}. Use fewer "
            "--opt teachers_per_client."))
        return teacher


# ------------------------------------------------------------------ servers


class PATEServer(TeacherStudentServer):
    """Plain PATE: teachers train ``teacher_steps`` steps, the argmax labels are released."""

    def __init__(self, settings: Settings, n_public: int, seed: int,
                 truth_public: np.ndarray | None = None,
                 client_sizes: list[int] | None = None) -> None:
        opts = settings.options_as(PATEOptions)
        steps = 20 * settings.period if opts.teacher_steps is None else opts.teacher_steps
        super().__init__(settings, opts, n_public, seed, truth_public, steps)
        self.client_sizes = client_sizes

    def teachers_of(self, cid: int) -> int:
        """The teachers client ``cid``'s own options give its records (as the client
        computes them)."""
        if self.client_sizes is None:
            return 1
        opts = self.settings.options_as(PATEOptions)
        return opts.teachers_per_client_count(int(self.client_sizes[cid]))

    def aggregate(self, counts: np.ndarray) -> np.ndarray:
        """Label each query from its vote counts (plain argmax; ties -> smallest class)."""
        self.privacy = {"epsilon": math.inf, "delta": 0.0, "accountant": "none",
                        "mechanism": "argmax (no noise)",
                        "assumptions": ["no noise is added: PATE without GNMax gives no "
                                        "differential-privacy guarantee"]}
        return counts.argmax(axis=1).astype(np.int64)

    def summary(self) -> dict[str, Any]:
        student = self.settings.options_as(TeacherStudentOptions).student_spec()
        teachers = int(self.counts.sum(axis=1).max()) if self.counts is not None \
            and len(self.counts) else None
        return {"pate": {"queries": self.n_queries, "teacher_steps": self.teacher_steps,
                         "query_selection": self.selection, "teachers": teachers,
                         "student_model": student or "the client's own model",
                         "student": "every client trains the same student (same spec and "
                                    "seed) on the released labelled queries; the reported "
                                    "accuracies are the student's"}}


class DPPATEServer(LedgerEvents, PATEServer):
    """GNMax (optionally confident GNMax) aggregation with RDP accounting."""

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
                        "target": self.ledger.target_view(
                            "query", self.n_queries, sum(ev.n_queries for ev in self.events)),
                        "assumptions": [DISJOINT_TEACHERS, "the server that sees the vote "
                                        "counts is trusted (PATE's setting)"]}
        return release.labels


# ------------------------------------------------------------------ methods

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
                   "RDP accounting")
    options_class = DPPATEOptions
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
        payloads=(*VOTE_PAYLOADS, *EVALUATION_PAYLOADS),
        outside=(*RELEASE_OUTSIDE,
                 ("privacy.epsilon_data_dependent", "data-dependent bound computed from the "
                  "raw vote counts; not itself differentially private")))
    server_class = DPPATEServer


__all__ = ["DPPATE", "PATE", "DPPATEOptions", "DPPATEServer", "PATEClient", "PATEOptions",
           "PATEServer"]
