"""PATE and DP-PATE (Papernot et al., ICLR 2017 / 2018): teachers vote, a student learns.

The clients are the **teachers**, each trained on its own (disjoint) private data. Then:

* **round 1** — the server sends each teacher the ``queries`` indices of U it wants labelled
  (a seeded random subset); each teacher first trains to convergence (``teacher_steps`` steps
  for torch models, one fit for scikit-learn models), then replies with its hard labels on
  the queries (bit-packed). The server counts votes and labels each query by the plain argmax
  (``pate``) or by GNMax, optionally confident GNMax (``dp-pate``), and **releases** the
  labelled queries (indices + bit-packed labels + an abstention mask);
* **every round** — the released labels are public, so the holders of U train the
  **student** on the labelled queries only: each client builds the same student (the same
  model spec and the same seed, sent by the server) and trains it b (``period``) steps per
  round (one fit for scikit-learn students). Every client therefore holds an identical
  student and reports its test accuracy: ``final.mean_accuracy`` *is* the student's accuracy,
  and the per-round records are the student's learning curve. (In a deployment one party
  would train it; the simulator repeats that training m times.)

Privacy (``privacy`` in the result JSON): ε from the data-independent GNMax RDP bound
(:mod:`fedlabels.privacy.pate`), the data-dependent bound reported separately and marked as
not itself DP. Plain PATE has no noise and no guarantee. The GNMax sensitivity assumes each
private record trains one teacher — true here (clients hold disjoint data).

Options: ``queries`` (default |U|), ``noise_sigma`` σ, or ``epsilon`` (a total target at
``delta``, default 1e-5, from which σ is calibrated), ``threshold`` and ``threshold_sigma``
(confident GNMax), ``teacher_steps`` (default 20·b), ``student_model`` (a model spec; default
the client's own model), ``teachers`` (must equal the number of clients).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fedlabels.comm import Message, pack_labels, unpack_labels
from fedlabels.consensus import ABSTAIN, vote_counts
from fedlabels.data import ClientData
from fedlabels.errors import FedLabelsError
from fedlabels.learners import build_learner, clone_fresh_learner, is_iterative, parse_model_spec
from fedlabels.privacy.pate import (
    DISJOINT_TEACHERS,
    account_gnmax,
    calibrate_gnmax_sigma,
    check_sigma,
    gnmax_aggregate,
)
from fedlabels.privacy.validation import check_delta, check_epsilon
from fedlabels.protocols.base import (
    ClientRole,
    Grid,
    LearnerFitError,
    Method,
    MethodContext,
    ServerRole,
    Settings,
)
from fedlabels.protocols.fedct import decode_consensus, encode_consensus

DEFAULT_DELTA = 1e-5


# ------------------------------------------------------------------ options

def _opt(settings: Settings, key: str, default: Any = None) -> Any:
    return settings.extra.get(key, default)


def check_int_option(settings: Settings, key: str, default: int | None, low: int = 1
                     ) -> int | None:
    value = _opt(settings, key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise FedLabelsError(f"option {key} must be an int >= {low}, got {value!r}.")
    return int(value)


def check_teachers(method: str, n_clients: int, settings: Settings) -> None:
    """Teachers are the clients: at least 2, and ``teachers`` (if given) must equal m."""
    given = _opt(settings, "teachers")
    if given is not None and (isinstance(given, bool) or not isinstance(given, int)):
        raise FedLabelsError(f"teachers must be an int, got {given!r}.")
    if given is not None and given != n_clients:
        raise FedLabelsError(f"{method}: the teachers are the clients, so --teachers {given} "
                             f"must equal the number of clients ({n_clients}); give "
                             f"--clients {given} (or only --teachers {given}).")
    if n_clients < 2:
        raise FedLabelsError(f"{method} needs at least 2 teachers to vote, got {n_clients}. "
                             "Use --teachers N (or --clients N) with N >= 2.")


def n_queries(settings: Settings, n_public: int) -> int:
    """Number of queries Q (default all of U); more than |U| is an error."""
    q = check_int_option(settings, "queries", n_public)
    if q > n_public:
        raise FedLabelsError(f"--queries {q} exceeds the public set U ({n_public} examples); "
                             f"use at most {n_public} or a larger --unlabeled.")
    return q


def check_student_spec(settings: Settings) -> None:
    spec = _opt(settings, "student_model")
    if spec is not None:
        specs = parse_model_spec(str(spec))
        if len(specs) != 1:
            raise FedLabelsError(f"student_model must be one model spec, got {spec!r}.")


def delta_option(settings: Settings) -> float:
    return check_delta(_opt(settings, "delta", DEFAULT_DELTA))


# ------------------------------------------------------------------ roles

class TeacherStudentClient(ClientRole):
    """A teacher that votes on queries, then trains the (shared-seed) student."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.student: Any = None
        self.handlers["pate.vote"] = self.vote
        self.handlers["pate.student"] = self.train_student

    def train_teacher(self, message: Message) -> None:
        steps = int(message.config["steps"])
        if is_iterative(self.learner) or not self.fitted:
            self.train_on(self.data.X, self.data.y, steps)

    def vote(self, message: Message) -> Message:
        self.train_teacher(message)
        queries = np.asarray(message.arrays["queries"], dtype=np.int64)
        labels = self.predict(self.X_public[queries])
        teacher_acc = float(np.mean(self.predict(self.X_test) == self.y_test))
        return Message("pate.votes",
                       arrays={"labels": pack_labels(labels, self.settings.n_classes)},
                       config={"teacher_accuracy": teacher_acc})

    def _build_student(self, seed: int) -> Any:
        spec = self.settings.extra.get("student_model")
        if spec is not None:
            return build_learner(parse_model_spec(str(spec))[0],
                                 n_classes=self.settings.n_classes, random_state=seed)
        student = clone_fresh_learner(self.learner)
        if "random_state" in student.get_params():
            student.set_params(random_state=seed)
        return student

    def train_student(self, message: Message) -> Message:
        if "queries" in message.arrays:  # the release: build the student and its data
            queries = np.asarray(message.arrays["queries"], dtype=np.int64)
            labels = decode_consensus(message.arrays, len(queries), self.settings.n_classes)
            keep = labels != ABSTAIN
            self.student_X = self.X_public[queries[keep]]
            self.student_y = labels[keep]
            self.student = self._build_student(int(message.config["student_seed"]))
            self.student_fitted = False
            if len(self.student_y) == 0:
                raise FedLabelsError("the aggregator labelled none of the queries (confident "
                                     "GNMax declined them all), so there is nothing to train "
                                     "the student on; lower --opt threshold or raise "
                                     "--queries.")
        if self.student is None:
            raise FedLabelsError(f"client {self.cid}: student training before the release.")
        if is_iterative(self.student) or not self.student_fitted:
            try:
                if is_iterative(self.student):
                    self.student.train_steps(self.student_X, self.student_y,
                                             int(message.config["steps"]))
                else:
                    self.student.fit(self.student_X, self.student_y)
            except FedLabelsError:
                raise
            except Exception as exc:
                present = np.unique(self.student_y).tolist()
                raise LearnerFitError(
                    f"the student model {type(self.student).__name__} cannot be trained on the "
                    f"{len(self.student_y)} labelled queries (classes present: {present[:10]}): "
                    f"{type(exc).__name__}: {exc}. Use more --queries, a smaller noise, or "
                    "another --opt student_model.") from exc
            self.student_fitted = True
        return Message("pate.student.done", category="control")

    def evaluate(self, message: Message) -> Message:
        if self.student is None:
            return super().evaluate(message)
        acc = float(np.mean(np.asarray(self.student.predict(self.X_test)) == self.y_test))
        return Message("evaluate.reply", config={"accuracy": acc}, category="evaluation")


class TeacherStudentServer(ServerRole):
    """Round 1: teachers vote, the aggregator releases labels; every round: student steps."""

    mechanism = "argmax"

    def __init__(self, settings: Settings, n_public: int, seed: int,
                 truth_public: np.ndarray | None = None) -> None:
        self.settings = settings
        self.n_public = n_public
        self.n_queries = n_queries(settings, n_public)
        self.teacher_steps = check_int_option(settings, "teacher_steps", 20 * settings.period)
        self.delta = delta_option(settings)
        self.rng = np.random.default_rng(seed)
        self.truth_public = truth_public
        self.queries: np.ndarray | None = None
        self.labels: np.ndarray | None = None
        self.counts: np.ndarray | None = None
        self.privacy: dict[str, Any] = {}

    # hooks for subclasses
    def train_teachers(self, rnd: int, grid: Grid) -> dict[str, Any]:
        """Anything before the vote (FREDY: FedAvg rounds). Returns the vote's extra payload."""
        return {}

    def aggregate(self, counts: np.ndarray) -> np.ndarray:
        """Label each query from its vote counts (plain argmax; ties -> smallest class)."""
        self.privacy = {"epsilon": math.inf, "delta": 0.0, "accountant": "none",
                        "mechanism": "argmax (no noise)",
                        "assumptions": "no noise is added: PATE without GNMax gives no "
                                       "differential-privacy guarantee"}
        return counts.argmax(axis=1).astype(np.int64)

    def run_round(self, rnd: int, grid: Grid) -> dict[str, float]:
        metrics: dict[str, float] = {}
        config: dict[str, Any] = {"round": rnd, "steps": self.settings.period}
        if rnd == 0:
            extra = self.train_teachers(rnd, grid)
            self.queries = np.sort(self.rng.choice(self.n_public, self.n_queries,
                                                   replace=False)).astype(np.uint32)
            vote = Message("pate.vote", arrays={"queries": self.queries, **extra},
                           config={"round": rnd, "steps": self.teacher_steps})
            replies = grid.exchange({cid: vote for cid in grid.client_ids}, rnd)
            votes = np.stack([unpack_labels(replies[c].arrays["labels"], self.n_queries,
                                            self.settings.n_classes) for c in sorted(replies)])
            self.counts = vote_counts(votes, self.settings.n_classes)
            self.labels = self.aggregate(self.counts)
            metrics = self.release_metrics(votes, replies)
            config["student_seed"] = int(self.rng.integers(0, 2**31 - 1))
            release = Message("pate.student",
                              arrays={"queries": self.queries,
                                      **encode_consensus(self.labels, self.settings.n_classes)},
                              config=config)
            grid.exchange({cid: release for cid in grid.client_ids}, rnd)
        else:
            msg = Message("pate.student", config=config, category="control")
            grid.exchange({cid: msg for cid in grid.client_ids}, rnd)
        return metrics

    def release_metrics(self, votes: np.ndarray, replies: dict[int, Message]
                        ) -> dict[str, float]:
        answered = self.labels != ABSTAIN
        plain = self.counts.argmax(axis=1)
        out = {"teacher_mean_accuracy": float(np.mean([replies[c].config["teacher_accuracy"]
                                                       for c in sorted(replies)])),
               "answered_fraction": float(answered.mean()),
               "labels_equal_plain_argmax": float(np.mean(self.labels[answered]
                                                          == plain[answered]))
               if answered.any() else float("nan")}
        if self.truth_public is not None:  # diagnostic only
            truth = np.asarray(self.truth_public)[self.queries.astype(np.int64)]
            out["label_accuracy"] = float(np.mean(self.labels[answered] == truth[answered])) \
                if answered.any() else float("nan")
        return out

    def result_extra(self) -> dict[str, Any]:
        return {"privacy": dict(self.privacy),
                "pate": {"queries": self.n_queries, "teacher_steps": self.teacher_steps,
                         "student": "every client trains the same student (same spec and "
                                    "seed) on the released labelled queries; the reported "
                                    "accuracies are the student's"}}


class DPPATEServer(TeacherStudentServer):
    """GNMax (optionally confident GNMax) aggregation with RDP accounting."""

    def __init__(self, settings: Settings, n_public: int, seed: int,
                 truth_public: np.ndarray | None = None) -> None:
        super().__init__(settings, n_public, seed, truth_public)
        sigma, eps = _opt(settings, "noise_sigma"), _opt(settings, "epsilon")
        self.threshold = _opt(settings, "threshold")
        self.threshold_sigma = _opt(settings, "threshold_sigma")
        if sigma is None:
            eps = check_epsilon(eps)
            if self.threshold is not None:
                raise FedLabelsError("with confident GNMax (--opt threshold) give "
                                     "--noise-sigma and --opt threshold_sigma; calibrating σ "
                                     "from --epsilon covers plain GNMax only.")
            sigma = calibrate_gnmax_sigma(eps, self.n_queries, self.delta)
            self.calibrated_from = eps
        else:
            self.calibrated_from = None
        self.sigma = check_sigma(sigma)

    def aggregate(self, counts: np.ndarray) -> np.ndarray:
        release = gnmax_aggregate(counts, self.sigma, self.rng, self.threshold,
                                  self.threshold_sigma)
        account = account_gnmax(counts, release.answered, self.sigma, self.delta,
                                self.threshold, self.threshold_sigma)
        self.privacy = {**account.to_dict(),
                        "calibrated_from_epsilon": self.calibrated_from,
                        "assumptions": DISJOINT_TEACHERS + "; the server that sees the vote "
                                       "counts is trusted (PATE's setting)"}
        return release.labels


class PATE(Method):
    name = "pate"
    description = "PATE: teachers (clients) vote once on queries from U; a student learns them"
    server_class: type[TeacherStudentServer] = TeacherStudentServer

    def validate(self, n_clients: int, settings: Settings, learners: list[Any]) -> None:
        check_teachers(self.name.upper(), n_clients, settings)
        check_int_option(settings, "queries", None)
        check_int_option(settings, "teacher_steps", 1)
        check_student_spec(settings)
        delta_option(settings)

    def make_server(self, ctx: MethodContext, n_public: int, learners: list[Any],
                    client_sizes: list[int]) -> ServerRole:
        return self.server_class(ctx.settings, n_public, ctx.server_seed, ctx.truth_public)

    def make_client(self, cid: int, data: ClientData, learner: Any, ctx: MethodContext,
                    X_public: np.ndarray | None, X_test: np.ndarray,
                    y_test: np.ndarray) -> ClientRole:
        return TeacherStudentClient(cid, data, learner, ctx.settings, X_public, X_test, y_test)


class DPPATE(PATE):
    name = "dp-pate"
    description = ("DP-PATE: PATE with GNMax (optionally confident GNMax) vote aggregation, "
                   "RDP accounting")
    server_class = DPPATEServer

    def validate(self, n_clients: int, settings: Settings, learners: list[Any]) -> None:
        super().validate(n_clients, settings, learners)
        sigma, eps = _opt(settings, "noise_sigma"), _opt(settings, "epsilon")
        if sigma is None and eps is None:
            raise FedLabelsError("DP-PATE needs --noise-sigma σ (GNMax noise on each vote "
                                 "count) or --epsilon (a total ε target at --delta, from "
                                 "which σ is calibrated).")
        if sigma is not None:
            if check_sigma(sigma) == 0:
                raise FedLabelsError("DP-PATE needs --noise-sigma > 0; σ = 0 is plain PATE "
                                     "(--method pate).")
        else:
            check_epsilon(eps)
        if _opt(settings, "threshold") is not None:
            thr = _opt(settings, "threshold")
            if isinstance(thr, bool) or not isinstance(thr, int | float):
                raise FedLabelsError(f"threshold must be a number, got {thr!r}.")
            ts = _opt(settings, "threshold_sigma")
            if ts is None or check_sigma(ts, "threshold sigma") == 0:
                raise FedLabelsError("confident GNMax (--opt threshold=T) needs --opt "
                                     f"threshold_sigma > 0, got {ts!r}.")
