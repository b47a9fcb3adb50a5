"""FREDY (Anastasakis et al., 2024): FedAvg-trained teachers, Laplace noisy-max, a student.

Round 1 of the run holds the whole teacher phase and the release:

1. ``teacher_rounds`` (R_T, default 10 as in the paper) FedAvg rounds over the teachers (the
   clients): R_T - 1 exchanges of weights, each client taking b (``period``) local steps from
   the global model, the server averaging by data size;
2. the vote: the server sends the last global model with the query indices; each teacher
   takes its last b local steps from it, **keeps that local model** (no upload) and returns
   its hard labels on the queries;
3. the server adds Laplace noise of scale b to each vote count (drawn from OS entropy, never
   the run seed; :mod:`fedlabels.privacy.noisy_max`) and releases the argmax labels. With
   ``epsilon`` (the run's total budget over the Q queries) b is calibrated so that the formal
   composition (L1 sensitivity 2·n, basic or RDP) meets it; with ``epsilon_per_query`` (the
   paper's reading) b = 2/ε_query.

With ``query_selection=clusters`` the queries are k-means clusters of U, as in PATE: each
teacher still casts one vote per query, so the formal L1 sensitivity stays 2·n.

Then, as in PATE, every client trains the same student on the labelled queries, b steps per
round; ``final.mean_accuracy`` is the student's accuracy (the shared teacher-student roles are
in :mod:`fedlabels.methods.teacher_student.roles`; the FedAvg pieces in
:mod:`fedlabels.method.blocks`).

**Privacy and the non-disjoint-teacher caveat** (docs/privacy.md §2.6). ε per query = 2/b holds
if each private record influences one teacher's vote (L1 sensitivity 2). FREDY's teachers all
start every round from the FedAvg model trained on *all* clients' data, so one record can move
every teacher's vote: the L1 sensitivity is 2·n (tight: :func:`vote_l1_sensitivity`) and the
same noise gives n·ε per query. The result's ``privacy.epsilon`` is this formal bound
(``privacy.l1_sensitivity`` = 2n; 2 with ``teacher_rounds=1``, where no weights are exchanged);
``privacy.if_disjoint_teachers`` gives the per-query-ε reading of the paper, valid only under
an assumption FedAvg violates. Both are composed over the Q queries by basic composition,
RDP and PLD (dp-accounting); the smallest is reported.

The paper's noise is Lap(1/ε) (PATE 2017's γ = ε), which is (2ε)-DP per query under the same
disjoint-teacher assumption; our ε per query is the actual per-query guarantee, so our ε = x
corresponds to the paper's ε = x/2.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, ClassVar

import numpy as np

from fedlabels.comm import Message
from fedlabels.core.errors import FedLabelsError
from fedlabels.core.randomness import numpy_generator
from fedlabels.data import ClientData
from fedlabels.method.base import ClientRole, Grid, MethodContext, ServerRole, Settings
from fedlabels.method.blocks import (
    WeightsClient,
    broadcast,
    check_weight_learners,
    initial_weights,
    size_weighted_average,
)
from fedlabels.method.options import (
    DP_SCALE,
    ROUNDS,
    Interval,
    MethodOptions,
    delta_option,
    option,
)
from fedlabels.method.threat import (
    EVALUATION_PAYLOADS,
    HONEST_BUT_CURIOUS_SERVER,
    Payload,
    ThreatModel,
)
from fedlabels.methods.teacher_student.roles import (
    RELEASE_OUTSIDE,
    VOTE_PAYLOADS,
    TeacherStudentClient,
    TeacherStudentMethod,
    TeacherStudentOptions,
    TeacherStudentServer,
    check_teachers,
)
from fedlabels.privacy.events import DISJOINT_TEACHERS, RECORD_LEVEL, LaplaceNoisyMaxEvent
from fedlabels.privacy.ledger import Ledger, LedgerEvents
from fedlabels.privacy.noisy_max import VOTE_L1_SENSITIVITY, laplace_noisy_max, laplace_scale
from fedlabels.privacy.vote_accounting import (
    account_laplace,
    calibrate_laplace_scale,
)

NON_DISJOINT_CAVEAT = (
    "FREDY's teachers are trained with FedAvg: every teacher starts each round from a global "
    "model that depends on all clients' data, so one private record can change every "
    "teacher's vote (L1 sensitivity 2 x teachers, not 2). 'epsilon' uses that sensitivity; "
    "'if_disjoint_teachers' is the per-query epsilon of the paper's reading, valid only if "
    "each record influenced a single teacher, which FedAvg does not guarantee.")


def vote_l1_sensitivity(n_teachers: int, teacher_rounds: int) -> float:
    """L1 sensitivity of the vote-count vector of one query under record-level neighbours.

    With ``teacher_rounds`` R_T > 1 each teacher starts its last local steps from a FedAvg
    model that was averaged over every client's updates, so one record (unbounded, no
    clipping) may move all n votes from one class to another: Δ₁ = 2n, the largest distance
    between two count vectors that sum to n, so the bound is tight (docs/privacy.md,
    "FREDY's sensitivity"). With R_T = 1 no weights are exchanged: each teacher trains from
    the data-independent initial model on its own client's data only, so a record moves at
    most its own teacher's vote: Δ₁ = 2.
    """
    return VOTE_L1_SENSITIVITY * (n_teachers if teacher_rounds > 1 else 1)


DISJOINT_WITHOUT_FEDAVG = (
    "teacher_rounds=1: no FedAvg round, so no weights are exchanged; each teacher trains "
    "from the data-independent initial model on its own client's data, so one private "
    "record moves at most its own teacher's vote (L1 sensitivity 2, as PATE's disjoint "
    "teachers); 'epsilon' uses that sensitivity.")


@dataclass(frozen=True)
class FREDYOptions(TeacherStudentOptions):
    """FREDY's options: no ``teacher_steps`` (each FedAvg round takes b = period steps)."""

    queries: int | None = option(
        None, "number of queries Q drawn from U for the teachers to label; none: all of U "
        "(required with --epsilon: each query spends the budget)", kind=int,
        interval=Interval(1, None), nullable=True, flag=True)
    epsilon: float | None = option(
        None, "total (ε, δ) budget of the run over all queries, with the formal L1 "
        "sensitivity 2·n (one record may move every teacher's vote); the Laplace scale is "
        "calibrated from it (basic or RDP composition) and the release is checked against it; "
        "with teacher_rounds=1 (no weights exchanged) the sensitivity is 2; "
        "give this or epsilon_per_query", kind=float, interval=DP_SCALE, nullable=True,
        flag=True)
    epsilon_per_query: float | None = option(
        None, "nominal ε per query of the paper's reading (Laplace scale 2/ε, valid only for "
        "disjoint teachers; the formal per-query ε is n times it, 1 time with "
        "teacher_rounds=1); no run target; give this "
        "or epsilon", kind=float, interval=DP_SCALE, nullable=True, flag=True)
    delta: float = delta_option()
    teacher_rounds: int = option(
        10, "FedAvg rounds R_T of the teacher phase, the last one ending in the vote (each "
        "teacher keeps its last local model); 1: no FedAvg round, each teacher trains on "
        "its own data only (disjoint teachers, L1 sensitivity 2)", kind=int,
        interval=ROUNDS)

    def check(self) -> None:
        super().check()
        if (self.epsilon is None) == (self.epsilon_per_query is None):
            raise FedLabelsError("FREDY needs exactly one of --epsilon (the total (ε, δ) "
                                 "budget of the run over all queries, e.g. --epsilon 8) and "
                                 "--epsilon-per-query (the nominal per-query ε of the "
                                 "paper's Laplace noisy-max, e.g. --epsilon-per-query 0.2); in "
                                 "Python: fl.run(..., options={'epsilon': 8}).")
        if self.epsilon is not None and self.queries is None:
            raise FedLabelsError(
                "fredy with a total --epsilon needs --queries Q: every query spends the "
                "budget and the formal L1 sensitivity is 2·n, so at ε = 8 with 5 clients we "
                "measured chance accuracy on digits for all of U, for Q = 5 and for 2 or 10 "
                "cluster queries (docs/privacy.md, Defaults). Give --queries to run it "
                "anyway (with --opt query_selection=clusters on few classes); for DP labels "
                "that keep their accuracy use dp-pate --model logreg (cluster queries by "
                "default) or dp-fedct --mechanism dpsgd --opt site_model=private --quorum 0.8 "
                "--opt labeller_lr=0.01 --model 'mlp(hidden=128)'.")


class FredyClient(TeacherStudentClient, WeightsClient):
    """A FedAvg participant that keeps its last local model as its teacher."""

    #: the teachers' FedAvg rounds all come within the run's first round
    multi_step_kinds: ClassVar[frozenset[str]] = frozenset({"fredy.fedavg"})

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.handlers["fredy.fedavg"] = self.fedavg

    def fedavg(self, message: Message) -> Message:
        self.local_steps_from(message)
        return self.weights_reply("fredy.weights")

    def train_teacher(self, message: Message) -> None:
        # the last FedAvg round: local steps from the global model, kept (not uploaded)
        self.local_steps_from(message)


class FredyServer(LedgerEvents, TeacherStudentServer):
    """R_T - 1 FedAvg rounds, the vote from the last global model, Laplace noisy-max."""

    state_attrs: ClassVar[tuple[str, ...]] = ("weights", "events")

    def __init__(self, settings: Settings, n_public: int, seed: int,
                 truth_public: np.ndarray | None, initial: np.ndarray,
                 n_teachers: int) -> None:
        opts = settings.options_as(FREDYOptions)
        super().__init__(settings, opts, n_public, seed, truth_public, settings.period)
        self.teacher_rounds = opts.teacher_rounds
        self.delta = opts.delta
        self.weights = np.asarray(initial, dtype=np.float32)
        self.n_teachers = n_teachers
        self.l1_sensitivity = vote_l1_sensitivity(n_teachers, opts.teacher_rounds)
        if opts.epsilon_per_query is not None:
            self.scale = laplace_scale(opts.epsilon_per_query)
        else:
            assert opts.epsilon is not None  # FREDYOptions.check: one of the two
            self.scale = calibrate_laplace_scale(opts.epsilon, self.n_queries, self.delta,
                                                 self.l1_sensitivity)
        self.epsilon_query = VOTE_L1_SENSITIVITY / self.scale  # nominal (disjoint reading)
        # the released labels (formal L1 sensitivity 2n), each batch recorded once; ε and
        # the budget are views of it
        self.ledger = Ledger(self.delta, opts.epsilon, what="each client")
        self.ledger.check_plan([self._formal(self.scale, self.n_queries)],
                               f"{self.n_queries} query(s)")

    def _formal(self, scale: float, n_queries: int) -> LaplaceNoisyMaxEvent:
        """``n_queries`` releases at ``scale`` with the formal L1 sensitivity (2n, or 2)."""
        return LaplaceNoisyMaxEvent(scale, self.l1_sensitivity, n_queries)

    def train_teachers(self, rnd: int, grid: Grid) -> dict[str, np.ndarray]:
        for _ in range(self.teacher_rounds - 1):
            msg = Message("fredy.fedavg", arrays={"weights": self.weights},
                          config={"round": rnd, "steps": self.settings.period})
            self.weights = size_weighted_average(broadcast(grid, msg, rnd))
        return {"weights": self.weights}

    def aggregate(self, counts: np.ndarray) -> np.ndarray:
        # stops before a release that would exceed the target
        self.ledger.check([self._formal(self.scale, len(counts))], tight=False)
        # the aggregator's noise is its secret: OS entropy, never the run seed
        release = laplace_noisy_max(counts, self.epsilon_query, numpy_generator())
        scale = release.scale
        self.ledger.record(self._formal(scale, len(counts)), tight=False)
        formal = account_laplace(self.events, self.delta)  # the ledger's ε, with its details
        disjoint = account_laplace([LaplaceNoisyMaxEvent(
            scale, VOTE_L1_SENSITIVITY, len(counts), DISJOINT_TEACHERS)], self.delta)
        self.privacy = {**formal.to_dict(), "epsilon": self.ledger.spent().epsilon,
                        "mechanism": "Laplace noisy-max (LNMax), scale 2/epsilon_per_query",
                        "epsilon_per_query_nominal": self.epsilon_query,
                        "target": self.ledger.target_view(
                            "query", self.n_queries, sum(ev.n_queries for ev in self.events)),
                        "if_disjoint_teachers": disjoint.to_dict(),
                        "assumptions": [NON_DISJOINT_CAVEAT if self.teacher_rounds > 1
                                        else DISJOINT_WITHOUT_FEDAVG],
                        "teachers": self.n_teachers,
                        "teacher_rounds": self.teacher_rounds}
        return release.labels

    def summary(self) -> dict[str, Any]:
        return {"fredy": {"teacher_rounds": self.teacher_rounds,
                          "local_steps_per_round": self.settings.period,
                          "teachers": self.n_teachers}}


class FREDY(TeacherStudentMethod):
    name = "fredy"
    description = ("FREDY: FedAvg-trained teachers keep their last local models; Laplace "
                   "noisy-max labels for a student")
    options_class: ClassVar[type[MethodOptions]] = FREDYOptions
    capabilities = replace(TeacherStudentMethod.capabilities, requires_weights=True)
    threat_model = ThreatModel(
        view="parameters-and-votes",
        adversary=HONEST_BUT_CURIOUS_SERVER + "; it chooses the queries from U and adds the "
        "Laplace noise (PATE's trusted aggregator)",
        sees="each teacher's model parameters after its local steps in the R_T - 1 FedAvg "
             "rounds, its hard-label votes on the Q queries and its teacher's test accuracy",
        guarantee="formal",
        against="anyone who sees the released labels or the student trained on them (other "
                "clients, users of the student); not the server, which receives the weights "
                "and the votes in the clear",
        neighbouring=RECORD_LEVEL,
        assumptions=(
            "the server adds the Laplace noise honestly and keeps the weights and votes to "
            "itself; they are outside the guarantee",
            "the formal ε (privacy.epsilon) uses L1 sensitivity 2·n: every teacher starts "
            "from the FedAvg model, so one record may move all n votes (with "
            "teacher_rounds=1 no weights are exchanged and the sensitivity is 2)",
            "the paper's reading (privacy.if_disjoint_teachers, L1 sensitivity 2) holds only "
            "if each record influenced a single teacher, which FedAvg does not guarantee",
        ),
        payloads=(Payload("fredy.weights", "weights", "weights",
                          note="FedAvg weights of the teacher phase, sent to the server "
                               "in the clear: outside the guarantee"),
                  Payload("fredy.weights", "n", "size", source="config",
                          note="the client's number of records, sent in the clear"),
                  *VOTE_PAYLOADS, *EVALUATION_PAYLOADS),
        outside=RELEASE_OUTSIDE)

    def validate(self, n_clients: int, settings: Settings, learners: list[Any]) -> None:
        self.check_clients(n_clients, settings)
        check_weight_learners("FREDY", learners)

    def check_clients(self, n_clients: int, settings: Settings) -> None:
        check_teachers("FREDY", n_clients, settings)

    def make_server(self, ctx: MethodContext, n_public: int, learners: list[Any],
                    client_sizes: list[int]) -> ServerRole:
        return FredyServer(ctx.settings, n_public, ctx.server_seed, ctx.truth_public,
                           initial_weights(learners, ctx), len(client_sizes))

    def make_client(self, cid: int, data: ClientData, learner: Any, ctx: MethodContext,
                    X_public: np.ndarray | None, X_test: np.ndarray,
                    y_test: np.ndarray) -> ClientRole:
        return FredyClient(cid, data, learner, ctx.settings, X_public, X_test, y_test,
                           scaling=ctx.scaling)


__all__ = ["DISJOINT_WITHOUT_FEDAVG", "FREDY", "NON_DISJOINT_CAVEAT", "FREDYOptions",
           "FredyClient", "FredyServer", "vote_l1_sensitivity"]
