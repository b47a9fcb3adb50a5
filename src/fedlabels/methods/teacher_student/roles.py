"""The teacher-student roles shared by PATE, DP-PATE and FREDY.

The clients are the **teachers**. In round 1 the server (optionally after a teacher phase,
FREDY's FedAvg rounds) sends each teacher the query indices of U, or the seed of Q clusters
of U (``query_selection=clusters``, :mod:`~fedlabels.methods.teacher_student.clusters`);
each teacher replies with its hard labels on them (``pate.votes``: one label per query, on a
cluster the class it predicts for most members); the server aggregates the vote counts (a
method's :meth:`TeacherStudentServer.aggregate`) and **releases** the labelled queries with a
student seed (a cluster's label labels all its members). From then on every client trains
the same student (same spec, same seed) on the released labels, b steps per round (one fit
for scikit-learn students), and reports the student's test accuracy.

A client's state is its teacher (the base :class:`~fedlabels.method.base.ClientRole`
rules) and its student: the released query indices and labels, the student seed, whether it
was fitted and, for an iterative student, the student's own ``state_dict`` under
``student.``. A refit student is rebuilt from the seed and refitted on the stored data when
it is next needed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from fedlabels.comm import Message, pack_labels, unpack_labels
from fedlabels.consensus import ABSTAIN, vote_counts
from fedlabels.core.errors import FedLabelsError, ParameterRefusal, refuse_other_value
from fedlabels.learners import build_learner, clone_fresh_learner, is_iterative, parse_model_spec
from fedlabels.method.base import (
    Capabilities,
    ClientRole,
    Grid,
    Method,
    ServerRole,
    Settings,
    fit_or_train,
)
from fedlabels.method.blocks import broadcast, decode_consensus, encode_consensus
from fedlabels.method.message_config import SEED_MAX, own_count, own_value, whole
from fedlabels.method.options import Interval, MethodOptions, option
from fedlabels.method.state import StateValue, prefixed, unprefixed
from fedlabels.method.threat import Payload
from fedlabels.methods.teacher_student.clusters import (
    CLUSTER_SPACES,
    cluster_votes,
    public_clusters,
    spread_labels,
    unscale,
)

#: what a query can be (``query_selection``)
QUERY_SELECTIONS = ("random", "clusters")

# ------------------------------------------------------------------ options


@dataclass(frozen=True)
class TeacherStudentOptions(MethodOptions):
    """Options every teacher-student method takes."""

    queries: int | None = option(
        None, "number of queries Q drawn from U for the teachers to label; none: all of U",
        kind=int, interval=Interval(1, None), nullable=True, flag=True)
    teachers: int | None = option(
        None, "number of teachers; the teachers are the clients, so it must equal the number "
        "of clients (--teachers N alone sets --clients N); none: the clients",
        kind=int, interval=Interval(2, None), nullable=True, flag=True)
    student_model: str | None = option(
        None, "model spec of the student (e.g. dt, mlp(hidden=32)); none: the client's own "
        "model", kind=str, nullable=True)
    query_selection: str | None = option(
        None, "what a query is: random (Q random rows of U) or clusters (Q k-means clusters "
        "of U, each teacher votes one class per cluster and the released label labels every "
        "member); none: random", kind=str, choices=QUERY_SELECTIONS, nullable=True)
    cluster_space: str | None = option(
        None, "with query_selection=clusters: cluster U as the learners see it (features) or "
        "with the federation's z-scoring undone (unscaled: for features in one unit, e.g. "
        "pixels); none: features", kind=str, choices=CLUSTER_SPACES, nullable=True)

    #: with a total ``epsilon`` and no ``queries`` / ``student_model`` / ``query_selection``
    #: given: the query budget, student and queries a DP method uses (measured best; a total
    #: budget buys few queries)
    budget_queries: ClassVar[int | None] = None
    budget_student: ClassVar[str | None] = None
    budget_selection: ClassVar[str | None] = None

    def under_budget(self) -> bool:
        """A total ε was given: the budget defaults apply to what the user left out."""
        return getattr(self, "epsilon", None) is not None

    def query_count(self, n_public: int) -> int | None:
        """Q as given, else the budget default under a total ε (at most |U|), else None."""
        if self.queries is None and self.budget_queries is not None and self.under_budget():
            return min(self.budget_queries, n_public)
        return self.queries

    def student_spec(self) -> str | None:
        """The student's spec as given, else the budget default under a total ε, else None
        (the client's own model)."""
        if self.student_model is None and self.under_budget():
            return self.budget_student
        return self.student_model

    def selection(self) -> str:
        """The query selection as given, else the budget default under a total ε, else
        random."""
        if self.query_selection is not None:
            return self.query_selection
        if self.under_budget() and self.budget_selection is not None:
            return self.budget_selection
        return "random"

    def check(self) -> None:
        if self.student_model is not None and len(parse_model_spec(self.student_model)) != 1:
            raise FedLabelsError(f"student_model must be one model spec, got "
                                 f"{self.student_model!r}.")
        if self.cluster_space is not None and self.selection() != "clusters":
            raise FedLabelsError("--opt cluster_space applies only to cluster queries; give "
                                 "--opt query_selection=clusters too, or leave it out.")


class TeacherStudentMethod(Method):
    """A teacher-student method: every message is exchanged in round 1 (the vote and the
    release); later rounds only train the student, so with a refit (scikit-learn) student,
    fitted once, they would change nothing and the run stops after round 1."""

    # one exchange of votes; a canary audit observes the released labels on the queries
    capabilities = Capabilities(communication_rounds=1, canary_view="released-labels")

    def text_refusal(self, settings: Settings) -> tuple[str, str] | None:
        """Cluster queries (k-means on U's features) and a numeric student cannot take
        text; under a total ε both are defaults, so say which option replaces each."""
        from fedlabels.learners.text_input import accepts_text

        opts = settings.options_as(TeacherStudentOptions)
        if opts.selection() == "clusters":
            return (f"{self.name}'s query_selection=clusters (k-means on U's features)",
                    "give --opt query_selection=random (Python: "
                    "options={'query_selection': 'random'})")
        spec = opts.student_spec()
        if spec is not None and not accepts_text(parse_model_spec(spec)[0]):
            return (f"{self.name}'s student {spec!r}",
                    "give a text student, e.g. --opt student_model=tfidf")
        return super().text_refusal(settings)

    def rounds_used(self, settings: Settings, learners: list[Any]) -> int | None:
        spec = settings.options_as(TeacherStudentOptions).student_spec()
        if spec is not None:
            student = build_learner(parse_model_spec(spec)[0], n_classes=settings.n_classes,
                                    random_state=0)
            return None if is_iterative(student) else 1
        return None if any(is_iterative(ln) for ln in learners) else 1


def check_teachers(method: str, n_clients: int, settings: Settings) -> None:
    """Teachers are the clients: at least 2, and ``teachers`` (if given) must equal m."""
    given = settings.options_as(TeacherStudentOptions).teachers
    if given is not None and given != n_clients:
        raise FedLabelsError(f"{method}: the teachers are the clients, so --teachers {given} "
                             f"must equal the number of clients ({n_clients}); give "
                             f"--clients {given} (or only --teachers {given}).")
    if n_clients < 2:
        raise FedLabelsError(f"{method} needs at least 2 teachers to vote, got {n_clients}. "
                             "Use --teachers N (or --clients N) with N >= 2.")


def n_queries(options: TeacherStudentOptions, n_public: int) -> int:
    """Number of queries Q (default all of U, or a DP method's budget default under a total
    ε); more than |U| is an error."""
    queries = options.query_count(n_public)
    if queries is None:
        return n_public
    if queries > n_public:
        raise FedLabelsError(f"--queries {queries} exceeds the public set U ({n_public} "
                             f"examples); use at most {n_public} or a larger --unlabeled.")
    return queries


#: what a teacher sends when it votes (PATE, DP-PATE and FREDY)
VOTE_PAYLOADS = (
    Payload("pate.votes", "labels", "votes", rows="queries",
            note="each teacher's votes reach the server in the clear; only the aggregated "
                 "labels are released"),
    Payload("pate.votes", "teacher_accuracy", "metric", source="config",
            note="the teacher's test accuracy, a statistic of the teacher model released "
                 "without noise (not sent by a Flower site with evaluate=false)"),
)

#: what the server computes from the raw votes and publishes beside the noisy release
RELEASE_OUTSIDE = (
    ("rounds[].server.teacher_mean_accuracy", "mean of the teachers' test accuracies, "
     "received and published without noise"),
    ("rounds[].server.labels_equal_plain_argmax", "agreement of the released labels with the "
     "noiseless vote argmax, computed from the raw vote counts"),
)

# ------------------------------------------------------------------ client


@dataclass(frozen=True)
class ConstantModel:
    """A model that predicts one class: a teacher whose data held one class, or a student
    whose released labels did."""

    label: int

    def predict(self, X: np.ndarray) -> np.ndarray:
        return np.full(len(X), self.label, dtype=np.int64)


class TeacherStudentClient(ClientRole):
    """A teacher that votes on queries, then trains the (shared-seed) student."""

    state_attrs: ClassVar[tuple[str, ...]] = ("student_index", "student_y", "student_seed",
                                              "student_fitted")

    def __init__(self, *args: Any, scaling: tuple[np.ndarray, np.ndarray] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.scaling = scaling  # U's public z-scoring, to cluster U unscaled
        self._clusters: tuple[int, int, np.ndarray] | None = None  # (seed, Q, assignment)
        self.student_index: np.ndarray | None = None  # rows of U the released labels label
        self.student_y: np.ndarray | None = None  # the released labels (abstentions left out)
        self.student_seed: int | None = None
        self.student_fitted = False
        self._student: Any = None  # rebuilt from the seed when restored
        self.handlers["pate.vote"] = self.vote
        self.handlers["pate.student"] = self.train_student

    # ---------------------------------------------------------------- teacher
    def train_teacher(self, message: Message) -> None:
        """Train the teacher before it votes (a refit teacher fits once)."""
        if is_iterative(self.learner) or not self.fitted:
            self.train_on(self.data.X, self.data.y, own_count(message.config, "steps", self.cid,
                                                              self.own_teacher_steps()))

    def own_teacher_steps(self) -> int:
        """The steps this client's plan trains a teacher before a vote."""
        return int(self.settings.period)

    def teachers(self, message: Message) -> list[Any]:
        """The models that vote: this client's teacher (trained first)."""
        self.train_teacher(message)
        return [self.model()]

    def clusters(self, seed: int, n_clusters: int) -> np.ndarray:
        """The cluster of each row of U for the server's seed (computed once, from U only)."""
        if self._clusters is None or self._clusters[:2] != (seed, n_clusters):
            opts = self.settings.options_as(TeacherStudentOptions)
            space = self.public if (opts.cluster_space or "features") == "features" \
                else unscale(self.public, self.scaling)
            self._clusters = (seed, n_clusters, public_clusters(space, n_clusters, seed))
        return self._clusters[2]

    def vote(self, message: Message) -> Message:
        """Each teacher's one label per query: on a row of U, or on a cluster of U (its
        majority prediction over the members); one packed row per teacher."""
        labels, teacher_acc = self.teacher_labels(message)
        packed = [pack_labels(row, self.settings.n_classes) for row in labels]
        return Message("pate.votes",
                       arrays={"labels": packed[0] if len(packed) == 1 else np.stack(packed)},
                       config=self.teacher_score(teacher_acc))

    def teacher_score(self, accuracy: float) -> dict[str, int | float | str | bool]:
        """The vote reply's ``teacher_accuracy``: none where the client reports no test
        score (:attr:`~fedlabels.method.base.ClientRole.reports_test_scores`)."""
        return {"teacher_accuracy": accuracy} if self.reports_test_scores else {}

    def teacher_labels(self, message: Message) -> tuple[list[np.ndarray], float]:
        """Each teacher's labels on the message's queries (one array of Q per teacher) and
        the teachers' mean test accuracy (NaN, not computed, where the client reports no
        test score)."""
        C = self.settings.n_classes
        rows = self.asked_queries(message)
        if rows is None:
            Q = whole(message.config, "clusters", self.cid, 1, len(self.public))
            assignment = self.clusters(whole(message.config, "cluster_seed", self.cid, 0,
                                             SEED_MAX), Q)

            def labels_of(model: Any) -> np.ndarray:
                return cluster_votes(np.asarray(model.predict(self.public)), assignment, Q, C)
        else:
            asked = self.public[rows]

            def labels_of(model: Any) -> np.ndarray:
                return np.asarray(model.predict(asked)).astype(np.int64)
        teachers = self.teachers(message)
        teacher_acc = float(np.mean([np.mean(np.asarray(t.predict(self.X_test)) == self.y_test)
                                     for t in teachers])) if self.reports_test_scores \
            else float("nan")
        return [labels_of(t) for t in teachers], teacher_acc

    def asked_queries(self, message: Message) -> np.ndarray | None:
        """The rows of U a vote or a release is about (None: Q clusters of U), refused
        (:class:`ParameterRefusal`) unless they are the client's own Q queries of its own
        ``query_selection``, each a row of U once: a server asking for all of U had every
        row voted on by a client whose plan said Q (a row past U was ``error: internal``)."""
        opts = self.settings.options_as(TeacherStudentOptions)
        own = n_queries(opts, len(self.public))
        clusters = "cluster_seed" in message.config
        refuse_other_value(self.cid, "query_selection", "clusters" if clusters else "random",
                           opts.selection(), read=str)
        if clusters:
            own_value(message.config, "clusters", self.cid, own)
            return None
        rows = np.asarray(message.arrays.get("queries", []))
        if rows.ndim != 1 or rows.dtype.kind not in "iu" or rows.size != own \
                or (own and (rows.min() < 0 or rows.max() >= len(self.public))) \
                or np.unique(rows).size != rows.size:
            raise ParameterRefusal(f"client {self.cid}: the server's queries ({rows.size} "
                                   f"values of {rows.dtype}) are not this client's own {own} "
                                   "distinct rows of U; refusing.",
                                   named=f"the site's queries is {own}")
        return rows.astype(np.int64)

    # ---------------------------------------------------------------- student
    @property
    def student_X(self) -> np.ndarray:
        """The labelled queries (rows of the shared U, not kept per client)."""
        return self.public[self.student_index]

    @property
    def student(self) -> Any:
        """The student learner (None before the release); a restored refit student is
        rebuilt from its seed and refitted on the stored labelled queries."""
        if self._student is None and self.student_seed is not None:
            self._student = self._build_student(int(self.student_seed))
            if self.student_fitted:
                self._fit_student(0)
        return self._student

    def _build_student(self, seed: int) -> Any:
        spec = self.settings.options_as(TeacherStudentOptions).student_spec()
        if spec is not None:
            return build_learner(parse_model_spec(spec)[0],
                                 n_classes=self.settings.n_classes, random_state=seed)
        student: Any = clone_fresh_learner(self.learner)
        if "random_state" in student.get_params():
            student.set_params(random_state=seed)
        return student

    def _fit_student(self, steps: int) -> None:
        student, X, y = self.student, self.student_X, self.student_y
        assert y is not None  # set with the release
        if not is_iterative(student) and len(np.unique(y)) == 1:
            # every released label is one class (noise or unanimous teachers): the student
            # predicts it, as a refit model would if it could be fitted on one class
            self._student = ConstantModel(int(y[0]))
            self.student_fitted = True
            return
        fit_or_train(student, X, y, steps, lambda exc: (
            f"the student model {type(student).__name__} cannot be trained on the "
            f"{len(y)} labelled queries (classes present: {np.unique(y).tolist()[:10]}): "
            f"{type(exc).__name__}: {exc}. Use more --queries, a smaller noise, or "
            "another --opt student_model."))
        self.student_fitted = True

    def receive_release(self, message: Message) -> None:
        """Keep the released labelled queries and build the student from the sent seed."""
        asked = self.asked_queries(message)
        if asked is None:  # a label per cluster labels its members
            n_clusters = whole(message.config, "clusters", self.cid, 1, len(self.public))
            labels = spread_labels(
                decode_consensus(message.arrays, n_clusters, self.settings.n_classes),
                self.clusters(whole(message.config, "cluster_seed", self.cid, 0, SEED_MAX),
                              n_clusters))
            queries = np.arange(len(labels), dtype=np.int64)
        else:
            queries = asked
            labels = decode_consensus(message.arrays, len(queries), self.settings.n_classes)
        keep = labels != ABSTAIN
        self.student_index, self.student_y = queries[keep], labels[keep]
        self.student_seed = whole(message.config, "student_seed", self.cid, 0, SEED_MAX)
        self.student_fitted = False
        self._student = self._build_student(self.student_seed)
        if len(self.student_y) == 0:
            raise FedLabelsError("the aggregator labelled none of the queries (confident "
                                 "GNMax declined them all), so there is nothing to train "
                                 "the student on; lower --opt threshold or raise --queries.")

    def train_student(self, message: Message) -> Message:
        if "student_seed" in message.config:
            self.receive_release(message)
        if self.student_seed is None:
            raise FedLabelsError(f"client {self.cid}: student training before the release.")
        # an iterative student takes its steps every round; a refit one is fitted once
        if not self.student_fitted or is_iterative(self._student):
            self._fit_student(own_count(message.config, "steps", self.cid, self.settings.period))
        return Message("pate.student.done", category="control")

    def evaluate(self, message: Message) -> Message:
        student = self.student
        if student is None:
            return super().evaluate(message)
        acc = float(np.mean(np.asarray(student.predict(self.X_test)) == self.y_test))
        return Message("evaluate.reply", config={"accuracy": acc}, category="evaluation")

    # ---------------------------------------------------------------- state
    def state_dict(self) -> dict[str, StateValue]:
        out = super().state_dict()
        if self._student is not None and is_iterative(self._student):
            out.update(prefixed("student", self._student.state_dict()))
        return out

    def load_state_dict(self, state: Mapping[str, StateValue]) -> None:
        super().load_state_dict(state)
        if self.student_y is not None:  # a writable copy (torch warns on read-only arrays)
            self.student_y = np.array(self.student_y)
        self._student = None
        if self.student_seed is not None:
            student = self._build_student(int(self.student_seed))
            if is_iterative(student):
                student.load_state_dict(unprefixed("student", state))
                self._student = student


# ------------------------------------------------------------------ server


class TeacherStudentServer(ServerRole):
    """Round 1: teacher phase, vote, release; every round: the student's steps.

    Subclasses implement :meth:`aggregate` (and set ``privacy``) and :meth:`summary`, and
    may add a teacher phase (:meth:`train_teachers`).
    """

    state_attrs: ClassVar[tuple[str, ...]] = ("rng", "queries", "labels", "counts", "privacy",
                                              "cluster_seed")

    def __init__(self, settings: Settings, options: TeacherStudentOptions, n_public: int,
                 seed: int, truth_public: np.ndarray | None, teacher_steps: int) -> None:
        self.settings = settings
        self.n_public = n_public
        self.n_queries = n_queries(options, n_public)
        self.selection = options.selection()
        self.cluster_seed: int | None = None  # with cluster queries: the seed of k-means
        self.teacher_steps = teacher_steps
        self.rng = np.random.default_rng(seed)
        self.truth_public = truth_public
        self.queries: np.ndarray | None = None
        self.labels: np.ndarray | None = None
        self.counts: np.ndarray | None = None
        self.privacy: dict[str, Any] = {}

    def train_teachers(self, rnd: int, grid: Grid) -> dict[str, np.ndarray]:
        """Anything before the vote (FREDY: FedAvg rounds); returns arrays for the vote."""
        return {}

    def teachers_of(self, cid: int) -> int:
        """How many teachers (vote rows) client ``cid`` has: one here."""
        return 1

    def check_reply(self, cid: int, request: Message, reply: Message) -> None:
        """A vote holds one packed row of the queries' labels per teacher of the client,
        each a class (a client sent 20 rows and outvoted the others)."""
        from fedlabels.method.replies import checked_labels

        super().check_reply(cid, request, reply)
        if request.kind == "pate.vote":
            checked_labels(reply, "labels", self.n_queries, self.settings.n_classes,
                           rows=self.teachers_of(cid))

    def aggregate(self, counts: np.ndarray) -> np.ndarray:
        """Label each query from its (Q, C) vote counts; sets ``privacy``."""
        raise NotImplementedError

    def summary(self) -> dict[str, Any]:
        """The method's own top-level entry of the result (``{"pate": {...}}``)."""
        raise NotImplementedError

    def run_round(self, rnd: int, grid: Grid) -> dict[str, float]:
        metrics: dict[str, float] = {}
        config: dict[str, Any] = {"round": rnd, "steps": self.settings.period}
        if rnd == 0:
            extra = self.train_teachers(rnd, grid)
            vote_config: dict[str, Any] = {"round": rnd, "steps": self.teacher_steps}
            where: dict[str, Any] = {}  # what the release must say about the queries
            if self.selection == "clusters":  # Q clusters of U, from U and this seed only
                self.cluster_seed = int(self.rng.integers(0, 2**31 - 1))
                where = {"cluster_seed": self.cluster_seed, "clusters": self.n_queries}
                vote_config.update(where)
            else:
                self.queries = np.sort(self.rng.choice(self.n_public, self.n_queries,
                                                       replace=False)).astype(np.uint32)
                extra = {"queries": self.queries, **extra}
            self.counts, replies = self.collect_counts(
                rnd, grid, Message("pate.vote", arrays=extra, config=vote_config))
            self.labels = self.aggregate(self.counts)
            metrics = self.release_metrics(replies)
            config["student_seed"] = int(self.rng.integers(0, 2**31 - 1))
            arrays = encode_consensus(self.labels, self.settings.n_classes)
            if self.queries is not None:  # random queries: which rows were labelled
                arrays = {"queries": self.queries, **arrays}
            release = Message("pate.student", arrays=arrays, config={**config, **where})
            broadcast(grid, release, rnd)
        else:
            broadcast(grid, Message("pate.student", config=config, category="control"), rnd)
        return metrics

    def collect_counts(self, rnd: int, grid: Grid, vote: Message
                       ) -> tuple[np.ndarray, dict[int, Message]]:
        """The (Q, C) vote counts of the teachers that answer ``vote``, and their replies."""
        replies = broadcast(grid, vote, rnd)
        votes = np.concatenate([
            np.stack([unpack_labels(row, self.n_queries, self.settings.n_classes)
                      for row in np.atleast_2d(replies[c].arrays["labels"])])
            for c in sorted(replies)])  # one row per teacher (a client may hold several)
        return vote_counts(votes, self.settings.n_classes), replies

    def release_metrics(self, replies: dict[int, Message]) -> dict[str, float]:
        assert self.labels is not None and self.counts is not None
        answered = self.labels != ABSTAIN
        plain = self.counts.argmax(axis=1)
        scores = [float(replies[c].config["teacher_accuracy"]) for c in sorted(replies)
                  if "teacher_accuracy" in replies[c].config]  # none from a declining site
        out = {"teacher_mean_accuracy": float(np.mean(scores)) if scores else float("nan"),
               "answered_fraction": float(answered.mean()),
               "labels_equal_plain_argmax": float(np.mean(self.labels[answered]
                                                          == plain[answered]))
               if answered.any() else float("nan")}
        if self.truth_public is not None and self.queries is not None:  # diagnostic only
            truth = np.asarray(self.truth_public)[self.queries.astype(np.int64)]
            out["label_accuracy"] = float(np.mean(self.labels[answered] == truth[answered])) \
                if answered.any() else float("nan")
        return out

    def result_extra(self) -> dict[str, Any]:
        return {"privacy": dict(self.privacy), **self.summary()}
