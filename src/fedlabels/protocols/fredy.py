"""FREDY (Anastasakis et al., 2024): FedAvg-trained teachers, Laplace noisy-max, a student.

Round 1 of the run holds the whole teacher phase and the release:

1. ``teacher_rounds`` (R_T, default 10 as in the paper) FedAvg rounds over the teachers (the
   clients): R_T - 1 exchanges of weights, each client taking b (``period``) local steps from
   the global model, the server averaging by data size;
2. the vote: the server sends the last global model with the query indices; each teacher
   takes its last b local steps from it, **keeps that local model** (no upload) and returns
   its hard labels on the queries;
3. the server adds Laplace noise of scale b = 2/ε to each vote count (``epsilon`` = ε per
   query, :mod:`fedlabels.privacy.noisy_max`) and releases the argmax labels.

Then, as in PATE, every client trains the same student on the labelled queries, b steps per
round; ``final.mean_accuracy`` is the student's accuracy.

**Privacy and the non-disjoint-teacher caveat** (docs/privacy.md §2.6). ε per query = 2/b holds
if each private record influences one teacher's vote (L1 sensitivity 2). FREDY's teachers all
start every round from the FedAvg model trained on *all* clients' data, so one record can move
every teacher's vote: the L1 sensitivity is 2·n and the same noise gives n·ε per query. The
result's ``privacy.epsilon`` is this formal bound (``privacy.l1_sensitivity`` = 2n);
``privacy.if_disjoint_teachers`` gives the per-query-ε reading of the paper, valid only under
an assumption FedAvg violates. Both are composed over the Q queries by basic composition,
RDP and PLD (dp-accounting); the smallest is reported.

The paper's noise is Lap(1/ε) (PATE 2017's γ = ε), which is (2ε)-DP per query under the same
disjoint-teacher assumption; our ε per query is the actual per-query guarantee, so our ε = x
corresponds to the paper's ε = x/2.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedlabels.comm import Message
from fedlabels.data import ClientData
from fedlabels.errors import FedLabelsError
from fedlabels.privacy.noisy_max import (
    VOTE_L1_SENSITIVITY,
    account_laplace,
    laplace_noisy_max,
    laplace_scale,
)
from fedlabels.privacy.validation import check_epsilon
from fedlabels.protocols.base import ClientRole, Grid, MethodContext, ServerRole, Settings
from fedlabels.protocols.fedavg import FedAvg
from fedlabels.protocols.pate import (
    PATE,
    TeacherStudentClient,
    TeacherStudentServer,
    check_int_option,
)

NON_DISJOINT_CAVEAT = (
    "FREDY's teachers are trained with FedAvg: every teacher starts each round from a global "
    "model that depends on all clients' data, so one private record can change every "
    "teacher's vote (L1 sensitivity 2 x teachers, not 2). 'epsilon' uses that sensitivity; "
    "'if_disjoint_teachers' is the per-query epsilon of the paper's reading, valid only if "
    "each record influenced a single teacher, which FedAvg does not guarantee.")


class FredyClient(TeacherStudentClient):
    """A FedAvg participant that keeps its last local model as its teacher."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.handlers["fredy.fedavg"] = self.fedavg

    def ensure_built(self) -> None:
        if not hasattr(self.learner, "model_"):
            self.learner.initialise(self.data.X.shape[1], self.settings.n_classes)

    def fedavg(self, message: Message) -> Message:
        self.ensure_built()
        self.learner.set_weights(message.arrays["weights"])
        self.train_on(self.data.X, self.data.y, int(message.config["steps"]))
        return Message("fredy.weights", arrays={"weights": self.learner.get_weights()},
                       config={"n": len(self.data)})

    def train_teacher(self, message: Message) -> None:
        # the last FedAvg round: local steps from the global model, kept (not uploaded)
        self.ensure_built()
        self.learner.set_weights(message.arrays["weights"])
        self.train_on(self.data.X, self.data.y, int(message.config["steps"]))


class FredyServer(TeacherStudentServer):
    mechanism = "laplace"

    def __init__(self, settings: Settings, n_public: int, seed: int,
                 truth_public: np.ndarray | None, initial_weights: np.ndarray,
                 n_teachers: int) -> None:
        super().__init__(settings, n_public, seed, truth_public)
        self.teacher_steps = settings.period  # each FedAvg round: b local steps
        self.teacher_rounds = check_int_option(settings, "teacher_rounds", 10)
        self.epsilon_query = check_epsilon(settings.extra.get("epsilon"), "epsilon per query")
        self.weights = initial_weights.astype(np.float32)
        self.n_teachers = n_teachers

    def train_teachers(self, rnd: int, grid: Grid) -> dict[str, Any]:
        for _ in range(self.teacher_rounds - 1):
            msg = Message("fredy.fedavg", arrays={"weights": self.weights},
                          config={"round": rnd, "steps": self.settings.period})
            replies = grid.exchange({cid: msg for cid in grid.client_ids}, rnd)
            sizes = np.array([replies[c].config["n"] for c in sorted(replies)], dtype=float)
            stacked = np.stack([replies[c].arrays["weights"] for c in sorted(replies)])
            self.weights = (sizes @ stacked / sizes.sum()).astype(np.float32)
        return {"weights": self.weights}

    def aggregate(self, counts: np.ndarray) -> np.ndarray:
        release = laplace_noisy_max(counts, self.epsilon_query, self.rng)
        scale = release.scale
        formal = account_laplace(scale, len(counts), self.delta,
                                 l1_sensitivity=VOTE_L1_SENSITIVITY * self.n_teachers)
        disjoint = account_laplace(scale, len(counts), self.delta)
        self.privacy = {**formal.to_dict(),
                        "mechanism": "Laplace noisy-max (LNMax), scale 2/epsilon_per_query",
                        "epsilon_per_query_nominal": self.epsilon_query,
                        "if_disjoint_teachers": disjoint.to_dict(),
                        "assumptions": NON_DISJOINT_CAVEAT,
                        "teachers": self.n_teachers,
                        "teacher_rounds": self.teacher_rounds}
        return release.labels

    def result_extra(self) -> dict[str, Any]:
        out = super().result_extra()
        out["fredy"] = {"teacher_rounds": self.teacher_rounds,
                        "local_steps_per_round": self.settings.period,
                        "teachers": self.n_teachers}
        del out["pate"]
        return out


class FREDY(PATE):
    name = "fredy"
    description = ("FREDY: FedAvg-trained teachers keep their last local models; Laplace "
                   "noisy-max labels for a student")
    requires_weights = True

    def validate(self, n_clients: int, settings: Settings, learners: list[Any]) -> None:
        super().validate(n_clients, settings, learners)
        FedAvg().validate(n_clients, settings, learners)
        check_int_option(settings, "teacher_rounds", 10)
        eps = settings.extra.get("epsilon")
        if eps is None:
            raise FedLabelsError("FREDY needs --epsilon, the ε per query of its Laplace "
                                 "noisy-max aggregation (e.g. --epsilon 0.2).")
        check_epsilon(eps, "epsilon per query")
        laplace_scale(eps)

    def make_server(self, ctx: MethodContext, n_public: int, learners: list[Any],
                    client_sizes: list[int]) -> ServerRole:
        init = FedAvg().make_server(ctx, n_public, learners, client_sizes).weights
        return FredyServer(ctx.settings, n_public, ctx.server_seed, ctx.truth_public, init,
                           len(client_sizes))

    def make_client(self, cid: int, data: ClientData, learner: Any, ctx: MethodContext,
                    X_public: np.ndarray | None, X_test: np.ndarray,
                    y_test: np.ndarray) -> ClientRole:
        return FredyClient(cid, data, learner, ctx.settings, X_public, X_test, y_test)


__all__ = ["FREDY", "NON_DISJOINT_CAVEAT", "FredyClient", "FredyServer"]
