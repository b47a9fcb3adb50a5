"""The methods: one-shot ``xclp``, its baseline ``perclient-lp`` and ``fedavg-xclp``.

``xclp`` and ``perclient-lp`` label each client's unlabelled private points and its share of
the test set, its "new data" (the paper's inference setting, Section 4.1): the test set is
split into m slices, slice j belongs to client j (``test_points=N`` keeps its first N). The
whole protocol runs in the first round; later rounds only re-evaluate (use ``--rounds 1``).
A client that dropped out of XCLP falls back to per-client LP for its own evaluation.

``fedavg-xclp`` (Algorithm 2): each round the server samples a fraction τ of the clients
(``client_fraction``) and broadcasts the global weights θ inside the XCLP setup message; the
sampled clients embed their private points with the network's feature extractor f_φ (every
layer but the last), run XCLP on those features together (any ``secure`` mode), and train b
local steps on their labelled points (weight 1) plus their unlabelled points with XCLP
pseudo-labels weighted by the confidence ``1 − H/log C``; the server averages by size.
``warmup_rounds`` rounds of labelled-only FedAvg come first; ``propagation=local`` gives
FedAvg+perclientLP and ``none`` FedAvg on labelled data only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any, ClassVar

import numpy as np

from fedlabels.comm import Message
from fedlabels.core.errors import FedLabelsError, ParameterRefusal, shown
from fedlabels.data import ClientData
from fedlabels.method.base import (
    Capabilities,
    ClientRole,
    Grid,
    Method,
    MethodContext,
    ServerRole,
    Settings,
)
from fedlabels.method.blocks import (
    GlobalModelServer,
    WeightsClient,
    broadcast,
    check_weight_learners,
    initial_weights,
    size_weighted_average,
)
from fedlabels.method.message_config import own_count
from fedlabels.methods.xclp.client import XCLPClientCore
from fedlabels.methods.xclp.groups import outcomes_record, run_groups
from fedlabels.methods.xclp.options import (
    FedAvgXCLPOptions,
    LPOptions,
    PerClientLPOptions,
    XCLPOptions,
    XCLPProtocolOptions,
)
from fedlabels.methods.xclp.server import XCLPOutcome, XCLPServerCore
from fedlabels.methods.xclp.threat import FEDAVG_XCLP_THREAT, PERCLIENT_LP_THREAT, XCLP_THREAT
from fedlabels.propagation.core import (
    check_label_matrix,
    class_counts,
    class_loss_weights,
    label_propagation,
)


def split_labels(y: np.ndarray, fraction: float, seed: int) -> np.ndarray:
    """Keep labels for a seeded ``fraction`` of the points; -1 marks unlabelled ones."""
    rng = np.random.default_rng(seed)
    n_lab = round(fraction * len(y))
    partial = np.full(len(y), -1, dtype=np.int64)
    keep = rng.permutation(len(y))[:n_lab]
    partial[keep] = y[keep]
    return partial


def evaluation_slice(n_test: int, n_clients: int, cid: int) -> np.ndarray:
    """Client ``cid``'s share of the test set (its "new data" to be labelled)."""
    return np.array_split(np.arange(n_test), n_clients)[cid]


def propagate_alone(V: np.ndarray, y: np.ndarray, n_classes: int,
                    opts: LPOptions) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Plaintext label propagation on one client's points: (labels, confidences, Z)."""
    return label_propagation(V, y, n_classes, k=opts.knn, alpha=opts.alpha,
                             n_bits=opts.lsh_bits, seed=opts.lsh_seed, power=opts.power,
                             balance=opts.balance)


def raw_features(X: np.ndarray, scaling: tuple[np.ndarray, np.ndarray] | None) -> np.ndarray:
    """``X`` with the federation's z-scoring undone (``X·std + mean``, U's public statistics),
    as float32; ``X`` itself when the federation did not scale."""
    if scaling is None:
        return X
    mean, std = scaling
    return (np.asarray(X, dtype=np.float64) * std + mean).astype(np.float32)


def hidden_features(learner: Any, X: np.ndarray, batch: int = 4096) -> np.ndarray:
    """f_φ(X): the torch MLP's last hidden layer (eval mode, no gradients)."""
    return learner.hidden_features(X, batch=batch)


class _LabelPropagationMethod(Method):
    roster_stake = "it then gets every labelled point's label of this site's XCLP rows"
    """What the three methods share: clients with data, partial labels seeded per client."""

    client_class: ClassVar[Callable[..., ClientRole]]
    # clients hold their own points, not U; kNN graphs on features: text is refused
    capabilities = Capabilities(uses_public=False, numeric_features=True)

    def client_datasets(self, clients: list[ClientData]) -> list[ClientData]:
        for cid, c in enumerate(clients):
            if len(c) == 0:
                raise FedLabelsError(f"client {cid} has no data; every XCLP participant needs "
                                     "at least one point (use fewer clients or more data).")
        return clients

    def make_client(self, cid: int, data: ClientData, learner: Any, ctx: MethodContext,
                    X_public: np.ndarray | None, X_test: np.ndarray,
                    y_test: np.ndarray) -> ClientRole:
        return self.client_class(cid, data, learner, ctx.settings, None, X_test, y_test,
                                 label_seed=ctx.seeds[cid], **self.client_extra(ctx))

    def client_extra(self, ctx: MethodContext) -> dict[str, Any]:
        """Keyword arguments for ``client_class`` beyond those every client takes."""
        return {}


def check_cross_clients(method: str, n_clients: int) -> None:
    """XCLP propagates labels across clients: with one there is no other client, and the
    run is per-client LP under another name."""
    if n_clients < 2:
        raise FedLabelsError(
            f"{method} needs at least 2 clients, got {n_clients}. It propagates labels across "
            "clients, and with one it is per-client label propagation; use --clients 2 or "
            "more (Python: clients=2), or --method perclient-lp for one client alone.")


def xclp_trusted_setup(options: XCLPProtocolOptions, n_clients: int) -> Any:
    """Secure modes: the sites' identity keys, the roster and the run id
    (:func:`fedlabels.secure.identity.trusted_setup`); secure=none: None."""
    if options.secure == "none":
        return None
    from fedlabels.secure.identity import trusted_setup

    return trusted_setup(range(n_clients))


class _OneShotMethod(_LabelPropagationMethod):
    """``xclp`` and ``perclient-lp``: one exchange, on the input features (option
    ``features``: the clients get the federation's public scaling to undo it)."""

    # one shot: later rounds would only re-evaluate
    capabilities = replace(_LabelPropagationMethod.capabilities, communication_rounds=1,
                           trains_models=False)

    def client_extra(self, ctx: MethodContext) -> dict[str, Any]:
        return {"scaling": ctx.scaling}

    def test_rows(self, settings: Settings, n_test: int, cid: int) -> np.ndarray:
        """Client ``cid``'s share of the test set, as :class:`OneShotClient` labels it."""
        rows = evaluation_slice(n_test, settings.n_clients, cid)
        points = getattr(settings.options, "test_points", None)
        return rows if points is None else rows[:points]

    def no_models_note(self) -> str:
        return (f"{self.name} trains no model: label propagation labels each client's own "
                "points and its share of the test set, and the accuracies are those labels' "
                "(to label new points, run it with them as its test set)")


# ----------------------------------------------------------------------------- one-shot


class OneShotClient(ClientRole):
    """Labels its private points and its test share once (``xclp``, ``perclient-lp``)."""

    state_attrs: ClassVar[tuple[str, ...]] = ("xclp_labels", "xclp_confidence")

    def __init__(self, *args: Any, label_seed: int,
                 scaling: tuple[np.ndarray, np.ndarray] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        opts = self.options
        # features=raw: undo the federation's z-scoring (U's public statistics)
        self.scaling = scaling if opts.features == "raw" else None
        self.slice = evaluation_slice(len(self.y_test), self.settings.n_clients, self.cid)
        if opts.test_points is not None:
            self.slice = self.slice[:opts.test_points]
        self.partial = split_labels(self.data.y, opts.labeled_fraction, label_seed)
        self.xclp_labels: np.ndarray | None = None
        self.xclp_confidence: np.ndarray | None = None

    def xclp_features(self, message: Message | None = None) -> np.ndarray:
        return raw_features(np.concatenate([self.data.X, self.X_test[self.slice]]),
                            self.scaling)

    def xclp_partial_labels(self) -> np.ndarray:
        return np.concatenate([self.partial, np.full(len(self.slice), -1, dtype=np.int64)])

    def local_labels(self) -> np.ndarray:
        """Per-client LP on this client's own points (the fallback of a dropped client)."""
        V, y = self.xclp_features(), self.xclp_partial_labels()
        if not np.any(y >= 0) or len(V) <= self.options.knn:
            return np.zeros(len(V), dtype=np.int64)
        return propagate_alone(V, y, self.settings.n_classes, self.options)[0]

    def evaluate(self, message: Message) -> Message:
        n_priv = len(self.data)
        labels = self.xclp_labels if self.xclp_labels is not None else self.local_labels()
        test_acc = float(np.mean(labels[n_priv:] == self.y_test[self.slice])) \
            if len(self.slice) else float("nan")
        unl = self.partial < 0
        trans = float(np.mean(labels[:n_priv][unl] == self.data.y[unl])) if unl.any() else 1.0
        return Message("evaluate.reply", category="evaluation",
                       config={"accuracy": test_acc, "unlabeled_accuracy": trans,
                               "fallback": self.xclp_labels is None})


class XCLPClient(OneShotClient, XCLPClientCore):
    """One-shot XCLP on raw features: private points (partly labelled) + a test share."""


def check_xclp_reply(cid: int, request: Message, reply: Message,
                     points: dict[int, int]) -> None:
    """What the server reads from a client's XCLP phase replies: its point count (kept in
    ``points`` for what follows), its labelled indices and LSH bits (of those points), its
    SecureRowSums part (a missing one crashed the run; a point count that its bits did not
    match, numpy's dimension error)."""
    from fedlabels.method.replies import MalformedReply, require_arrays

    if request.kind == "xclp.setup":
        n = reply.config.get("n")
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise MalformedReply(f"its xclp.setup reply gives n = {n!r}; expected a number "
                                 "of points >= 1")
        points[cid] = n
    elif request.kind == "xclp.hamming" and int(request.config.get("step", 0)) == 1:
        require_arrays(reply, "labeled_idx")
        n = points.get(cid)
        idx = np.asarray(reply.arrays["labeled_idx"])
        if n is not None and idx.size and (idx.dtype.kind not in "iu" or idx.min() < 0
                                           or idx.max() >= n or len(np.unique(idx)) < idx.size):
            raise MalformedReply(f"its labeled_idx are not distinct indices of its {n} points")
        bits = reply.arrays.get("bits")
        if n is not None and bits is not None and np.asarray(bits).shape[0] != n:
            raise MalformedReply(f"its bits hold {np.asarray(bits).shape[0]} rows for the "
                                 f"{n} points it announced")
        block = reply.arrays.get("H_self")  # secure modes: its own block, n(n-1)/2 values
        if n is not None and block is not None and np.asarray(block).size != n * (n - 1) // 2:
            raise MalformedReply(f"its H_self holds {np.asarray(block).size} values, not "
                                 f"n(n-1)/2 for the {n} points it announced")
    elif request.kind == "xclp.rowsums":
        require_arrays(reply, "part")


class XCLPReplies(ServerRole):
    """What a server running XCLP's phases checks of their replies (:func:`check_xclp_reply`);
    ``announced`` (set in ``__init__``): each client's point count at its last setup."""

    announced: dict[int, int]

    def check_reply(self, cid: int, request: Message, reply: Message) -> None:
        super().check_reply(cid, request, reply)
        check_xclp_reply(cid, request, reply, self.announced)


class XCLPServer(XCLPReplies):
    state_attrs: ClassVar[tuple[str, ...]] = ("outcomes", "rng")

    def __init__(self, core: XCLPServerCore, options: XCLPOptions, seed: int = 0) -> None:
        self.core = core
        self.opts = options
        self.rng = np.random.default_rng(seed)  # the client groups
        self.outcomes: list[XCLPOutcome] = []
        self.announced = {}

    @property
    def outcome(self) -> XCLPOutcome | None:
        """The run's outcome when there is one group (no ``group_size``)."""
        return self.outcomes[0] if len(self.outcomes) == 1 else None

    def run_round(self, rnd: int, grid: Grid) -> dict[str, float]:
        if self.outcomes:  # one-shot: later rounds only re-evaluate
            return {}
        self.outcomes = run_groups(self.core, grid, rnd, grid.client_ids, 0, self.rng)
        # phase timings go to result_extra: round records stay deterministic for a seed
        return {"n_points": float(sum(o.n_points for o in self.outcomes))}

    def result_extra(self) -> dict[str, Any]:
        if not self.outcomes:
            return {}
        return {"xclp": {**_settings_record(self.opts), "test_points": self.opts.test_points,
                         "features": self.opts.features,
                         **outcomes_record(self.outcomes)}}


def _settings_record(opts: XCLPProtocolOptions) -> dict[str, Any]:
    return {"secure": opts.secure, "lsh_bits": opts.lsh_bits, "knn": opts.knn,
            "alpha": opts.alpha, "labeled_fraction": opts.labeled_fraction,
            "balance": opts.balance, "group_size": opts.group_size}


class XCLP(_OneShotMethod):
    name = "xclp"
    description = ("XCLP: cross-client label propagation over a SimHash kNN graph "
                   "(--secure none|ot|paillier), one shot")
    options_class = XCLPOptions
    threat_model = XCLP_THREAT
    client_class = XCLPClient

    def client_extra(self, ctx: MethodContext) -> dict[str, Any]:
        return {**super().client_extra(ctx), "trust": ctx.trust}

    def check_clients(self, n_clients: int, settings: Settings) -> None:
        check_cross_clients("XCLP", n_clients)

    def validate(self, n_clients: int, settings: Settings, learners: list[Any]) -> None:
        self.check_clients(n_clients, settings)

    def trusted_setup(self, settings: Settings, n_clients: int) -> Any:
        return xclp_trusted_setup(settings.options_as(XCLPOptions), n_clients)

    def make_server(self, ctx: MethodContext, n_public: int, learners: list[Any],
                    client_sizes: list[int]) -> ServerRole:
        opts = ctx.settings.options_as(XCLPOptions)
        return XCLPServer(XCLPServerCore(opts, ctx.settings.n_classes), opts, ctx.server_seed)


# ----------------------------------------------------------------------------- per-client LP


class PerClientLPClient(OneShotClient):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.handlers["perclient.run"] = self.run_lp

    def run_lp(self, message: Message) -> Message:
        y = self.xclp_partial_labels()
        check_label_matrix(y, self.settings.n_classes)
        self.xclp_labels, self.xclp_confidence, _ = propagate_alone(
            self.xclp_features(), y, self.settings.n_classes, self.options)
        return Message("perclient.done", category="control")


class PerClientLPServer(ServerRole):
    state_attrs: ClassVar[tuple[str, ...]] = ("done",)

    def __init__(self) -> None:
        self.done = False

    def run_round(self, rnd: int, grid: Grid) -> dict[str, float]:
        if not self.done:
            broadcast(grid, Message("perclient.run", category="control"), rnd)
            self.done = True
        return {}


class PerClientLP(_OneShotMethod):
    name = "perclient-lp"
    description = "per-client label propagation (each client alone; the XCLP baseline)"
    options_class = PerClientLPOptions
    threat_model = PERCLIENT_LP_THREAT
    client_class = PerClientLPClient

    def make_server(self, ctx: MethodContext, n_public: int, learners: list[Any],
                    client_sizes: list[int]) -> ServerRole:
        return PerClientLPServer()


# ----------------------------------------------------------------------------- FedAvg+XCLP


class FedAvgXCLPClient(XCLPClientCore, WeightsClient):
    """Runs XCLP on f_φ of its private data, then trains on labels + weighted pseudo-labels."""

    def __init__(self, *args: Any, label_seed: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.partial = split_labels(self.data.y, self.options.labeled_fraction, label_seed)
        self.handlers["fxclp.train"] = self.train

    def xclp_features(self, message: Message | None) -> np.ndarray:
        if message is not None:  # None: restored, the learner's state holds the weights
            self.load_weights(message)
        return hidden_features(self.model(), self.data.X)

    def xclp_partial_labels(self) -> np.ndarray:
        return self.partial

    def train(self, message: Message) -> Message:
        self.load_weights(message)
        opts, X = self.options, self.data.X
        lab = self.partial >= 0
        unl = ~lab
        propagation = message.config.get("propagation")
        if propagation not in (opts.propagation, "none"):  # its own option, or a warm-up round
            raise ParameterRefusal(
                f"client {self.cid}: the server asked for propagation = {shown(propagation)} "
                f"but this client's options say {opts.propagation!r} ('none' in its warm-up "
                "rounds); refusing.", named="propagation is not the site's own")
        pseudo: np.ndarray | None = None
        conf: np.ndarray | None = None
        counts = class_counts(self.partial, self.settings.n_classes)
        if propagation == "cross" and self.xclp_labels is not None:
            pseudo, conf = self.xclp_labels, self.xclp_confidence
            if self.xclp_class_counts is not None:
                counts = self.xclp_class_counts  # the XCLP members' total counts
        elif propagation == "local" and lab.any() and len(self.partial) > opts.knn:
            pseudo, conf, _ = propagate_alone(hidden_features(self.model(), X), self.partial,
                                              self.settings.n_classes, opts)
        if pseudo is not None and conf is not None and opts.balance == "class":
            conf = conf * class_loss_weights(counts)[pseudo]  # per-class loss weights
        steps = own_count(message.config, "steps", self.cid, self.settings.period)
        if pseudo is not None and conf is not None and unl.any() and lab.any():
            self.learner.train_steps(X[lab], self.partial[lab], steps, X[unl], pseudo[unl],
                                     w_aux=conf[unl])
            self.fitted = True
        elif pseudo is not None and unl.any():  # a client with no labels of its own
            self.train_on(X[unl], pseudo[unl], steps)
        elif lab.any():
            self.train_on(X[lab], self.partial[lab], steps)
        self.xclp_labels = None  # pseudo-labels are recomputed every round
        return self.weights_reply("fxclp.weights")


class FedAvgXCLPServer(XCLPReplies, GlobalModelServer):
    state_attrs: ClassVar[tuple[str, ...]] = ("rng", "group_rng", "history")

    def __init__(self, initial: np.ndarray, period: int, core: XCLPServerCore,
                 options: FedAvgXCLPOptions, seed: int) -> None:
        super().__init__(initial, period)
        self.core = core
        self.opts = options
        self.rng = np.random.default_rng(seed)
        self.group_rng = np.random.default_rng([seed, 1])  # the client groups
        self.history: list[dict[str, Any]] = []
        self.announced = {}

    def run_round(self, rnd: int, grid: Grid) -> dict[str, float]:
        ids = grid.client_ids
        n_pick = max(1, int(np.ceil(self.opts.client_fraction * len(ids))))
        P = sorted(self.rng.choice(ids, size=n_pick, replace=False).tolist())
        propagation = self.opts.propagation if rnd >= self.opts.warmup_rounds else "none"
        metrics: dict[str, float] = {"sampled": float(len(P))}
        arrays = {"weights": self.weights}
        if propagation == "cross":  # θ travels in the XCLP setup message
            outcomes = run_groups(self.core, grid, rnd, P, rnd + 1, self.group_rng, arrays)
            arrays = {}
            record = outcomes_record(outcomes)
            self.history.append({"round": rnd + 1, "members": record["rowsum_members"],
                                 "seconds": record["seconds"],
                                 **({"groups": [o.rowsum_members for o in outcomes]}
                                    if len(outcomes) > 1 else {})})
        alive = [c for c in P if c in grid.client_ids]  # not those lost during XCLP
        msg = Message("fxclp.train", arrays=arrays,
                      config={"steps": self.period, "propagation": propagation})
        self.weights = size_weighted_average(broadcast(grid, msg, rnd, alive))
        return metrics

    def result_extra(self) -> dict[str, Any]:
        o = self.opts
        return {"xclp": {**_settings_record(o), "client_fraction": o.client_fraction,
                         "warmup_rounds": o.warmup_rounds, "propagation": o.propagation,
                         "rounds": self.history}}


class FedAvgXCLP(_LabelPropagationMethod):
    name = "fedavg-xclp"
    description = ("FedAvg+XCLP (Algorithm 2): FedAvg with confidence-weighted XCLP "
                   "pseudo-labels on partly labelled clients")
    options_class = FedAvgXCLPOptions
    threat_model = FEDAVG_XCLP_THREAT
    client_class = FedAvgXCLPClient
    capabilities = replace(_LabelPropagationMethod.capabilities, requires_weights=True,
                           own_client_sampling="client_fraction")

    def check_clients(self, n_clients: int, settings: Settings) -> None:
        check_cross_clients("FedAvg+XCLP", n_clients)

    def validate(self, n_clients: int, settings: Any, learners: list[Any]) -> None:
        self.check_clients(n_clients, settings)
        check_weight_learners("FedAvg+XCLP", learners)

    def client_extra(self, ctx: MethodContext) -> dict[str, Any]:
        return {"trust": ctx.trust}

    def trusted_setup(self, settings: Settings, n_clients: int) -> Any:
        return xclp_trusted_setup(settings.options_as(FedAvgXCLPOptions), n_clients)

    def make_server(self, ctx: MethodContext, n_public: int, learners: list[Any],
                    client_sizes: list[int]) -> ServerRole:
        opts = ctx.settings.options_as(FedAvgXCLPOptions)
        return FedAvgXCLPServer(initial_weights(learners, ctx), ctx.settings.period,
                                XCLPServerCore(opts, ctx.settings.n_classes), opts,
                                ctx.server_seed)
