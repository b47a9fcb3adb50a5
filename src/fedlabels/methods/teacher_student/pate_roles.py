"""PATE's options, its teacher-holding client and its plain server, shared by PATE and
DP-PATE's two aggregations (the server's GNMax, :mod:`~fedlabels.methods.teacher_student.pate`,
and secure aggregation, :mod:`~fedlabels.methods.teacher_student.pate_secure`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from fedlabels.comm import Message
from fedlabels.core.errors import FedLabelsError
from fedlabels.learners import clone_fresh_learner
from fedlabels.method.base import Settings, fit_or_train
from fedlabels.method.message_config import own_count
from fedlabels.method.options import DP_SCALE, STEPS, Interval, delta_option, option
from fedlabels.method.secure_member import refuse_secure_only
from fedlabels.methods.teacher_student.roles import (
    QUERY_SELECTIONS,
    ConstantModel,
    TeacherStudentClient,
    TeacherStudentOptions,
    TeacherStudentServer,
)

# ------------------------------------------------------------------ options

AGGREGATIONS = ("plain", "secure")
#: what aggregation secure runs with (the one line naming the valid combination)
SECURE_NEEDS = ("aggregation secure runs with --noise-sigma or --epsilon and no threshold "
                "(e.g. --epsilon 8 --opt aggregation=secure)")


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
    aggregation: str = option(
        "plain", "plain: the aggregator sees each teacher's votes and adds the GNMax noise "
        "(no guarantee against it); secure: each client adds its own discrete Gaussian "
        "share to its vote counts and masks them, so the server learns only the noisy sum "
        "(record-level (ε, δ) against the server too; "
        "methods/teacher_student/pate_secure.py)", kind=str, choices=AGGREGATIONS)
    min_group: int | None = option(
        None, "aggregation secure: the smallest group a client answers; its share has "
        "variance σ²/min_group, so min_group honest members carry the full noise; none: "
        "every client of the run", kind=int, interval=Interval(1, None), nullable=True)
    retries: int = option(
        0, "aggregation secure: the attempts a client answers beyond the one vote (the vote "
        "retried after a dropout); each is a release, so with epsilon σ is calibrated for "
        "1 + retries releases; 0: a dropout stops the vote", kind=int,
        interval=Interval(0, None))

    def check(self) -> None:
        super().check()
        if self.aggregation == "secure" and self.threshold is not None:
            raise FedLabelsError(f"dp-pate aggregation secure does not run with confident "
                                 f"GNMax (threshold): its check would need a second noisy "
                                 f"sum; {SECURE_NEEDS}.")
        refuse_secure_only("dp-pate", self.aggregation, self.given(), SECURE_NEEDS)
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


def teacher_steps(settings: Settings) -> int:
    """The steps a teacher trains (for torch models): ``teacher_steps``, else 20 rounds'."""
    opts = settings.options_as(PATEOptions)
    return int(20 * settings.period if opts.teacher_steps is None else opts.teacher_steps)


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

    def own_teacher_steps(self) -> int:
        return teacher_steps(self.settings)

    def teachers(self, message: Message) -> list[Any]:
        k = self.settings.options_as(PATEOptions).teachers_per_client_count(len(self.data.y))
        if k == 1:
            return super().teachers(message)
        order = np.random.default_rng([0x7EAC, self.cid]).permutation(len(self.data.y))
        return [self._part_teacher(part, own_count(message.config, "steps", self.cid,
                                                          self.own_teacher_steps()))
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
        steps = teacher_steps(settings)
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
        self.privacy = {"epsilon": math.inf, "delta": None, "accountant": "none",
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


__all__ = ["AGGREGATIONS", "SECURE_NEEDS", "DPPATEOptions", "PATEClient", "PATEOptions",
           "PATEServer"]
