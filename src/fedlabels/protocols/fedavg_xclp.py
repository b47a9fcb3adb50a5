"""FedAvg+XCLP (Algorithm 2): federated semi-supervised learning with XCLP pseudo-labels.

Each round the server samples a fraction τ of the clients (``client_fraction``, default 1)
and broadcasts the global weights θ inside the XCLP setup message. The sampled clients embed
all their private points with the network's feature extractor f_φ (every layer but the last),
run XCLP on those features together (any ``--secure`` mode), and train b local steps on their
labelled points (weight 1) plus their unlabelled points with XCLP pseudo-labels weighted by
the XCLP confidence ``1 − H/log C`` (confidence-weighted cross-entropy). The server averages
the returned weights by client size, as FedAvg does.

Options: ``warmup_rounds`` (default 2) rounds of FedAvg on labelled data only before
pseudo-labelling starts (the paper initialises with a supervised stage);
``propagation=cross|local|none``: ``local`` gives the FedAvg+perclientLP baseline and
``none`` FedAvg on labelled data only.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedlabels.comm import Message
from fedlabels.data import ClientData
from fedlabels.errors import FedLabelsError
from fedlabels.propagation.core import label_propagation
from fedlabels.protocols.base import ClientRole, Grid, Method, MethodContext, ServerRole
from fedlabels.protocols.fedavg import FedAvg
from fedlabels.protocols.xclp import (
    XCLPClientCore,
    XCLPOptions,
    XCLPServerCore,
    _check_clients,
    split_labels,
)

PROPAGATION = ("cross", "local", "none")


def hidden_features(learner: Any, X: np.ndarray, batch: int = 4096) -> np.ndarray:
    """f_φ(X): the torch MLP's last hidden layer (eval mode, no gradients)."""
    return learner.hidden_features(X, batch=batch)


class FedAvgXCLPClient(XCLPClientCore):
    def __init__(self, *args: Any, options: XCLPOptions, label_seed: int, **kwargs: Any):
        super().__init__(*args, options=options, **kwargs)
        self.partial = split_labels(self.data.y, options.labeled_fraction, label_seed)
        self.handlers["fxclp.train"] = self.train

    def ensure_built(self) -> None:
        if not hasattr(self.learner, "model_"):
            self.learner.initialise(self.data.X.shape[1], self.settings.n_classes)

    def load(self, message: Message) -> None:
        if "weights" in message.arrays:
            self.ensure_built()
            self.learner.set_weights(message.arrays["weights"])

    def xclp_features(self, message: Message) -> np.ndarray:
        self.load(message)
        return hidden_features(self.learner, self.data.X)

    def xclp_partial_labels(self) -> np.ndarray:
        return self.partial

    def train(self, message: Message) -> Message:
        self.load(message)
        lab = self.partial >= 0
        unl = ~lab
        propagation = str(message.config["propagation"])
        pseudo, conf = None, None
        if propagation == "cross" and self.xclp_labels is not None:
            pseudo, conf = self.xclp_labels, self.xclp_confidence
        elif propagation == "local" and lab.any() and len(self.partial) > self.opts.k:
            V = hidden_features(self.learner, self.data.X)
            pseudo, conf, _ = label_propagation(V, self.partial, self.settings.n_classes,
                                                k=self.opts.k, alpha=self.opts.alpha,
                                                n_bits=self.opts.n_bits,
                                                seed=self.opts.lsh_seed,
                                                power=self.opts.power)
        steps = int(message.config["steps"])
        if pseudo is not None and unl.any() and lab.any():
            self.train_on_weighted(self.data.X[lab], self.partial[lab], steps,
                                   self.data.X[unl], pseudo[unl], conf[unl])
        elif pseudo is not None and unl.any():  # a client with no labels of its own
            self.train_on(self.data.X[unl], pseudo[unl], steps)
        elif lab.any():
            self.train_on(self.data.X[lab], self.partial[lab], steps)
        self.xclp_labels = None  # pseudo-labels are recomputed every round
        return Message("fxclp.weights", arrays={"weights": self.learner.get_weights()},
                       config={"n": len(self.data)})

    def train_on_weighted(self, X: np.ndarray, y: np.ndarray, steps: int, X_aux: np.ndarray,
                          y_aux: np.ndarray, w_aux: np.ndarray) -> None:
        self.learner.train_steps(X, y, steps, X_aux, y_aux, w_aux=w_aux)
        self.fitted = True

    def evaluate(self, message: Message) -> Message:
        self.load(message)
        return ClientRole.evaluate(self, message)


class FedAvgXCLPServer(ServerRole):
    def __init__(self, initial_weights: np.ndarray, period: int, core: XCLPServerCore,
                 fraction: float, warmup: int, propagation: str, seed: int) -> None:
        self.weights = initial_weights.astype(np.float32)
        self.period = period
        self.core = core
        self.fraction = fraction
        self.warmup = warmup
        self.propagation = propagation
        self.rng = np.random.default_rng(seed)
        self.history: list[dict[str, Any]] = []

    def run_round(self, rnd: int, grid: Grid) -> dict[str, float]:
        ids = grid.client_ids
        n_pick = max(1, int(np.ceil(self.fraction * len(ids))))
        P = sorted(self.rng.choice(ids, size=n_pick, replace=False).tolist())
        propagation = self.propagation if rnd >= self.warmup else "none"
        metrics: dict[str, float] = {"sampled": float(len(P))}
        weights_sent = False
        if propagation == "cross":
            outcome = self.core.run(grid, rnd, P, session=rnd + 1,
                                    setup_arrays={"weights": self.weights})
            weights_sent = True
            metrics["xclp_seconds"] = outcome.seconds["total"]
            self.history.append({"round": rnd + 1, "members": outcome.rowsum_members,
                                 "seconds": outcome.seconds})
        arrays = {} if weights_sent else {"weights": self.weights}
        msg = Message("fxclp.train", arrays=arrays,
                      config={"steps": self.period, "propagation": propagation})
        replies = grid.exchange({c: msg for c in P}, rnd)
        sizes = np.array([replies[c].config["n"] for c in sorted(replies)], dtype=np.float64)
        stacked = np.stack([replies[c].arrays["weights"] for c in sorted(replies)])
        self.weights = (sizes @ stacked / sizes.sum()).astype(np.float32)
        return metrics

    def evaluation_message(self, cid: int) -> Message:
        return Message("evaluate", arrays={"weights": self.weights}, category="evaluation")

    def result_extra(self) -> dict[str, Any]:
        o = self.core.opts
        return {"xclp": {"secure": o.secure, "lsh_bits": o.n_bits, "knn": o.k,
                         "alpha": o.alpha, "labeled_fraction": o.labeled_fraction,
                         "client_fraction": self.fraction, "warmup_rounds": self.warmup,
                         "propagation": self.propagation, "rounds": self.history}}


class FedAvgXCLP(Method):
    name = "fedavg-xclp"
    description = ("FedAvg+XCLP (Algorithm 2): FedAvg with confidence-weighted XCLP "
                   "pseudo-labels on partly labelled clients")
    requires_weights = True

    def uses_public(self) -> bool:
        return False

    def client_datasets(self, clients: list[ClientData]) -> list[ClientData]:
        return _check_clients(clients)

    @staticmethod
    def _extra(extra: dict[str, Any]) -> tuple[float, int, str]:
        fraction = extra.get("client_fraction", 1.0)
        if not isinstance(fraction, int | float) or not 0.0 < float(fraction) <= 1.0:
            raise FedLabelsError(f"client_fraction (tau) must be in (0, 1], got {fraction!r}.")
        warmup = extra.get("warmup_rounds", 2)
        if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
            raise FedLabelsError(f"warmup_rounds must be an int >= 0, got {warmup!r}.")
        raw = extra.get("propagation", "cross")
        propagation = "none" if raw is None else str(raw).lower()  # --opt parses "none"
        if propagation not in PROPAGATION:
            raise FedLabelsError(f"propagation must be one of {', '.join(PROPAGATION)}, got "
                                 f"{propagation!r}.")
        return float(fraction), warmup, propagation

    def validate(self, n_clients: int, settings: Any, learners: list[Any]) -> None:
        FedAvg().validate(n_clients, settings, learners)
        XCLPOptions.from_extra(settings.extra)
        self._extra(settings.extra)

    def make_server(self, ctx: MethodContext, n_public: int, learners: list[Any],
                    client_sizes: list[int]) -> ServerRole:
        from sklearn.base import clone

        init = clone(learners[0]).set_params(random_state=ctx.server_seed)
        init.initialise(ctx.settings.extra["n_features"], ctx.settings.n_classes)
        opts = XCLPOptions.from_extra(ctx.settings.extra)
        fraction, warmup, propagation = self._extra(ctx.settings.extra)
        return FedAvgXCLPServer(init.get_weights(), ctx.settings.period,
                                XCLPServerCore(opts, ctx.settings.n_classes), fraction, warmup,
                                propagation, ctx.server_seed)

    def make_client(self, cid: int, data: ClientData, learner: Any, ctx: MethodContext,
                    X_public: np.ndarray | None, X_test: np.ndarray,
                    y_test: np.ndarray) -> ClientRole:
        return FedAvgXCLPClient(cid, data, learner, ctx.settings, None, X_test, y_test,
                                options=XCLPOptions.from_extra(ctx.settings.extra),
                                label_seed=ctx.seeds[cid])
