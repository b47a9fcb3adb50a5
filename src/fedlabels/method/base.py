"""Server and client roles, and the :class:`Grid` they talk through.

A method is a pair of roles that only exchange :class:`~fedlabels.comm.Message` objects:

* the **server role** drives a round with ``run_round(rnd, grid)``, sending messages to
  clients through ``grid.exchange`` (like a Flower ``ServerApp`` main loop on its ``Grid``);
* a **client role** answers each message with ``handle(msg)`` (like a Flower ``ClientApp``).

The engine that supplies the grid (in-process simulator, later Flower) is not visible to the
roles, so adding a method touches no engine and adding an engine touches no method.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Protocol, TypeVar

import numpy as np

from fedlabels.comm import Message
from fedlabels.core.errors import FedLabelsError, RefusedError, out_of_memory
from fedlabels.core.json_list import JSONList
from fedlabels.data import ClientData
from fedlabels.learners import build_learner, clone_fresh_learner, is_iterative
from fedlabels.method.options import MethodOptions, NoOptions
from fedlabels.method.state import StateValue, check_state_value, prefixed, unprefixed
from fedlabels.method.threat import ThreatModel

OptionsT = TypeVar("OptionsT", bound=MethodOptions)


class Grid(Protocol):
    """What a server role can do: send one message to each of some clients, get replies."""

    @property
    def client_ids(self) -> list[int]: ...

    def exchange(self, messages: Mapping[int, Message], rnd: int) -> dict[int, Message]: ...


@dataclass(frozen=True)
class Settings:
    """What every role of a run knows: sizes the engine sets and the method's options.

    ``n_classes``, ``n_features``, ``n_clients``, ``rounds`` and ``period`` (local steps per
    round) come from the federation and the run, never from user options; ``options`` is
    the method's validated :class:`~fedlabels.method.options.MethodOptions`; ``task`` is
    ``classification`` or ``regression`` (targets in [0, 1], mapped from the federation's
    public ``target_range``; ``n_classes`` 0).
    """

    n_classes: int
    n_features: int = 0
    n_clients: int = 1
    rounds: int = 1
    period: int = 50
    options: MethodOptions = field(default_factory=NoOptions)
    #: "regression": targets are reals in [0, 1] (the federation's public ``target_range``
    #: mapped to the unit interval), n_classes is 0
    task: str = "classification"
    target_range: tuple[float, float] | None = None

    def options_as(self, cls: type[OptionsT]) -> OptionsT:
        """``options``, typed as the method's options class (checked)."""
        if not isinstance(self.options, cls):
            raise FedLabelsError(f"expected {cls.__name__} options, got "
                                 f"{type(self.options).__name__}.")
        return self.options


@dataclass(frozen=True)
class TrainingData:
    """Private data plus an optional auxiliary set (rows ``aux_index`` of ``X_aux``)."""

    X: np.ndarray
    y: np.ndarray
    X_aux: np.ndarray | None = None
    y_aux: np.ndarray | None = None
    aux_index: np.ndarray | None = None


class LearnerFitError(FedLabelsError):
    """A client's model failed to fit; the message names the client and the reason."""


def one_class_hint(task: str, present: list[Any]) -> str:
    """What to do when a client's data holds one class (a skewed or fine partition: with
    hundreds of clients many hold a few rows of one class), which many models refuse."""
    if task == "regression" or len(present) > 1:
        return ""
    return ("; this client holds one class only: give each client more data (--private, "
            "--private-per-client or fewer --clients; Python: private=, private_per_client=, "
            "clients=), use a less skewed partition (larger "
            "alpha; quantity:A,MIN or powerlaw:A,MIN for a minimum size), or a model that "
            "fits one class (dt)")


class ClientRole:
    """Base client: private data, a learner, the test set for evaluation, and dispatch.

    Client ``cid`` holds its ``data`` and ``learner``; ``settings`` are the run's (the same
    at every party), ``X_public`` the public set U's features (None for a method whose
    clients hold no U: ``Capabilities.uses_public`` False) and ``X_test``, ``y_test`` the
    test set it evaluates its model on.

    Subclasses register handlers for their message kinds in ``handlers`` and name the
    attributes that make up their state in ``state_attrs`` (plain arrays and scalars;
    the names of all classes in the MRO are collected). Roles with other state (key
    material, nested structures) extend :meth:`state_dict` and :meth:`load_state_dict`.
    """

    state_attrs: ClassVar[tuple[str, ...]] = ("fitted",)
    #: entries of :meth:`state_dict` that are secret randomness (a noise Generator): a
    #: simulator checkpoint keeps them only under a reproducible source, else stores None
    #: and the restored role draws afresh from OS entropy (Flower keeps them on the client)
    secret_state: ClassVar[tuple[str, ...]] = ()
    #: message kinds the protocol sends this role several times within one round (a
    #: multi-step exchange); a Flower site answers any other kind once per round
    multi_step_kinds: ClassVar[frozenset[str]] = frozenset()
    #: whether a protocol reply may carry a score on the test set (PATE's teacher accuracy);
    #: a Flower site with ``evaluate=false`` sets it False, so no test score leaves it
    reports_test_scores: bool = True

    def __init__(self, cid: int, data: ClientData, learner: Any, settings: Settings,
                 X_public: np.ndarray | None, X_test: np.ndarray, y_test: np.ndarray) -> None:
        self.cid = cid
        self.data = data
        self.learner = learner
        self.settings = settings
        self.X_public = X_public
        self.X_test = X_test
        self.y_test = y_test
        self.fitted = False
        self._stale = False  # a refit learner whose fit must be replayed from the state
        self._stand_in: Any = None  # see model(): for a client that holds no model yet
        # the last evaluation's test predictions and probabilities, with the fingerprint of
        # the model that made them (test_outputs reuses them while it is unchanged)
        self._tested: tuple[tuple[Any, ...], np.ndarray, np.ndarray] | None = None
        self.handlers: dict[str, Callable[[Message], Message]] = {"evaluate": self.evaluate}

    @property
    def public(self) -> np.ndarray:
        """The public set U (the federation's array, shared by all roles, never copied)."""
        if self.X_public is None:
            raise FedLabelsError(f"client {self.cid}: this method's clients hold no public "
                                 "set U (Capabilities.uses_public is False).")
        return self.X_public

    @property
    def options(self) -> Any:
        """The method's validated options (``settings.options``)."""
        return self.settings.options

    def handle(self, message: Message) -> Message:
        try:
            handler = self.handlers[message.kind]
        except KeyError:
            raise RefusedError(f"client {self.cid}: message kind {message.kind!r} is not "
                               "one this client's method and options answer") from None
        return handler(message)

    # ---------------------------------------------------------------- state
    @classmethod
    def declared_state(cls) -> tuple[str, ...]:
        return collect_declared(cls, "state_attrs")

    def state_dict(self) -> dict[str, StateValue]:
        """Everything that changes between messages, as plain arrays and scalars.

        An iterative learner contributes its own ``state_dict`` under ``learner.``; a refit
        (scikit-learn) learner contributes nothing: it is a function of its training data
        and seed, so a restored role replays its last fit (:meth:`training_data`) when the
        model is next needed.
        """
        out = {name: check_state_value(name, getattr(self, name))
               for name in self.declared_state()}
        if is_iterative(self.learner):
            out.update(prefixed("learner", self.learner.state_dict()))
        return out

    def load_state_dict(self, state: Mapping[str, StateValue]) -> None:
        """Restore what :meth:`state_dict` returned (on a role built with the same setup)."""
        for name in self.declared_state():
            if name not in state:
                raise FedLabelsError(f"client {self.cid}: state has no entry {name!r}.")
            setattr(self, name, state[name])
        if is_iterative(self.learner):
            self.learner.load_state_dict(unprefixed("learner", state))
        else:
            self._stale = bool(self.fitted)

    # ---------------------------------------------------------------- training helpers
    def training_data(self) -> TrainingData:
        """What this role's last fit used; a restored refit learner replays it."""
        return TrainingData(self.data.X, self.data.y)

    def train_on(self, X: np.ndarray, y: np.ndarray, steps: int,
                 X_aux: np.ndarray | None = None, y_aux: np.ndarray | None = None,
                 aux_index: np.ndarray | None = None) -> None:
        """Update the learner: warm-started steps if iterative, else a refit from scratch.

        The auxiliary (pseudo-labelled) set is ``X_aux`` or, with ``aux_index``, its rows
        ``X_aux[aux_index]`` (``y_aux`` aligned with them). Refit learners get it appended to
        the private data (a copy that lives only for the fit); iterative learners mix one
        minibatch of each per step, and gather rows from the shared ``X_aux`` by index when
        they support it (``supports_aux_index``), so no client keeps a copy of U.
        """
        try:
            if is_iterative(self.learner):
                if aux_index is not None and getattr(self.learner, "supports_aux_index", False):
                    self.learner.train_steps(X, y, steps, X_aux, y_aux, aux_index=aux_index)
                else:
                    rows = X_aux if aux_index is None or X_aux is None else X_aux[aux_index]
                    self.learner.train_steps(X, y, steps, rows, y_aux)
            else:
                if X_aux is not None and y_aux is not None and len(y_aux):
                    rows = X_aux if aux_index is None else X_aux[aux_index]
                    X, y = np.concatenate([X, rows]), np.concatenate([y, y_aux])
                self.learner = clone_fresh_learner(self.learner)
                self.learner.fit(X, y)
        except FedLabelsError:
            raise
        except Exception as exc:  # a user's model may fail in any way; say which client
            spec = getattr(self.learner, "spec_text", None)  # your own network by its spec
            name = spec() if callable(spec) else type(self.learner).__name__
            if (what := out_of_memory(exc)) is not None:
                raise LearnerFitError(
                    f"client {self.cid}: model {name} ran out of "
                    f"memory training on {len(y)} examples ({what}); use smaller inputs "
                    "(--image-size), a smaller batch_size or network, or fewer --workers."
                ) from exc
            present = np.unique(y).tolist()
            raise LearnerFitError(
                f"client {self.cid}: model {name} failed to fit on "
                f"{len(y)} examples with classes {present[:10]}: {type(exc).__name__}: {exc}"
                f"{one_class_hint(self.settings.task, present)}") from exc
        self.fitted = True
        self._stale = False

    def model(self) -> Any:
        """The learner, refitted first if it was restored from a state. A client that holds
        no model yet (under partial participation: not selected so far) is represented by
        a stand-in fitted on its private data alone, kept apart from its learner."""
        if self._stale:
            d = self.training_data()
            self.train_on(d.X, d.y, 0, d.X_aux, d.y_aux, d.aux_index)
        if not self.fitted and not holds_model(self.learner):
            if self._stand_in is None:
                stand_in: Any = clone_fresh_learner(self.learner)
                if is_iterative(stand_in):
                    stand_in.train_steps(self.data.X, self.data.y, self.settings.period)
                else:
                    stand_in.fit(self.data.X, self.data.y)
                self._stand_in = stand_in
            return self._stand_in
        return self.learner

    def predict(self, X: np.ndarray) -> np.ndarray:
        out = np.asarray(self.model().predict(X))
        if self.settings.task == "regression":  # unit-scaled real targets
            return out.astype(np.float64).reshape(len(X))
        return out.astype(np.int64)

    def test_outputs(self) -> tuple[np.ndarray, np.ndarray | None]:
        """This client's predictions on the test set and its class probabilities there
        (``None``: its model gives none), for the clinical metrics. Where the predictions
        are the probabilities' argmax (a torch classifier, predicted by this base class),
        the test set is predicted once, and not again after an evaluation of the same
        model (:meth:`_argmax_outputs`)."""
        from fedlabels.core.clinical import class_probabilities

        model = self.model()
        outputs = self._argmax_outputs(model, reuse=True)
        if outputs is not None:
            return outputs
        return self.predict(self.X_test), class_probabilities(model, self.X_test,
                                                              self.settings.n_classes)

    def _test_predictions(self) -> np.ndarray:
        """The predictions on the test set (an evaluation's)."""
        outputs = self._argmax_outputs(self.model(), reuse=False)
        return self.predict(self.X_test) if outputs is None else outputs[0]

    def _argmax_outputs(self, model: Any, reuse: bool) -> tuple[np.ndarray, np.ndarray] | None:
        """The test predictions and probabilities of a torch classifier whose predictions
        are its probabilities' argmax (``None`` for any other model), kept with the model's
        fingerprint; with ``reuse``, the kept ones while the model is unchanged: the final
        clinical metrics take the last round's evaluation instead of predicting the test set
        again (an evaluation always predicts)."""
        from fedlabels.core.clinical import class_probabilities

        n_classes = self.settings.n_classes
        if type(self).predict is not ClientRole.predict or \
                not _predicts_the_argmax(model, n_classes):
            return None
        key = _fingerprint(model)
        if reuse and self._tested is not None and self._tested[0] == key:
            return self._tested[1], self._tested[2]  # of this very model
        proba = class_probabilities(model, self.X_test, n_classes)
        if proba is None:
            return None
        predictions = proba.argmax(axis=1).astype(np.int64)
        self._tested = (key, predictions, proba)
        return predictions, proba

    # ---------------------------------------------------------------- evaluation
    def evaluate(self, message: Message) -> Message:
        """Test accuracy of the model this client holds (an ``evaluation`` message)."""
        if self.settings.task == "regression":  # RMSE (original units) and R²
            from fedlabels.core.metrics import regression_scores

            scores = regression_scores(self.y_test, self.predict(self.X_test),
                                       self.settings.target_range or (0.0, 1.0))
            return Message("evaluate.reply", config={"rmse": scores["rmse"], "r2": scores["r2"]},
                           category="evaluation")
        accuracy = float(np.mean(self._test_predictions() == self.y_test))
        return Message("evaluate.reply", config={"accuracy": accuracy}, category="evaluation")


class ServerRole:
    """Base server: one ``run_round`` per communication round.

    Like :class:`ClientRole`, subclasses name what changes across rounds in ``state_attrs``
    (arrays, scalars, Generators, lists/dicts/fedlabels dataclasses: see
    :mod:`fedlabels.method.server_state`), so the simulator can checkpoint and resume a
    run. ``secret_generators`` name Generators seeded from :mod:`fedlabels.core.randomness`
    (noise, secret samples): their state is kept only while a reproducible source is
    installed; otherwise a restored role draws them afresh from OS entropy on next use.
    """

    state_attrs: ClassVar[tuple[str, ...]] = ()
    secret_generators: ClassVar[tuple[str, ...]] = ()
    #: whether :meth:`evaluation_message` depends on what the round computed (e.g. the
    #: global model it produced); False: the request is known before the round, so an
    #: engine may send it with the round's last protocol message (Flower does)
    evaluation_after_round: ClassVar[bool] = False
    #: the run's task (the session sets it): which scores an evaluation reply holds
    task: str = "classification"

    def state_dict(self) -> dict[str, StateValue]:
        """Everything that changes across rounds, as plain state values."""
        from fedlabels.core.json_list import text_of

        return {k: text_of(v) for k, v in self.state_views().items()}

    def state_views(self) -> dict[str, StateValue | JSONList]:
        """:meth:`state_dict`, a list of frozen dataclasses (a ledger's events) as its
        :class:`~fedlabels.core.json_list.JSONList` (not joined: a checkpoint's journal
        appends its new elements only)."""
        from fedlabels.core.randomness import is_reproducible
        from fedlabels.method.server_state import encode_attr, encode_attr_cached

        out: dict[str, StateValue | JSONList] = {}
        cache = self.__dict__.setdefault("_encoded_state", {})  # lists' elements, once each
        for name in collect_declared(type(self), "state_attrs"):
            out.update(encode_attr_cached(name, getattr(self, name), cache, view=True))
        for name in collect_declared(type(self), "secret_generators"):
            rng = getattr(self, name) if is_reproducible() else None
            out.update(encode_attr(name, rng))
        return out

    def load_state_dict(self, state: Mapping[str, StateValue]) -> None:
        """Restore what :meth:`state_dict` returned (on a role built with the same setup)."""
        from fedlabels.method.server_state import decode_attr

        for name in (*collect_declared(type(self), "state_attrs"),
                     *collect_declared(type(self), "secret_generators")):
            decode_attr(self, name, state)

    def preflight(self) -> None:
        """Refuse, before any process starts, a run this server would refuse at round 1
        with what it knows without its clients (a deployment's ``prepare`` calls it on a
        role it then discards). Default: nothing to check."""

    def run_round(self, rnd: int, grid: Grid) -> dict[str, float]:
        """Run round ``rnd`` (0-based) and return server-side metrics for the record."""
        raise NotImplementedError

    def evaluation_message(self, cid: int) -> Message:
        """The message asking client ``cid`` to report its test accuracy."""
        return Message("evaluate", category="evaluation")

    def check_reply(self, cid: int, request: Message, reply: Message) -> None:
        """Raise :class:`~fedlabels.method.replies.MalformedReply` where client ``cid``'s
        ``reply`` to ``request`` is not what the protocol uses (the engines call it on every
        reply before the server sees it: :mod:`fedlabels.method.replies`). Here: no NaN or
        inf in any array, and an evaluation's scores finite and in range; a method adds what
        its replies must hold (sizes, label ranges, probabilities), calling this first."""
        from fedlabels.method.replies import check_evaluation, check_finite

        if request.category == "evaluation":
            check_evaluation(reply, self.task)
        check_finite(reply)

    def result_extra(self) -> dict[str, Any]:
        """Method-specific top-level entries of the result JSON (e.g. ``privacy``)."""
        return {}

    def final_arrays(self) -> dict[str, np.ndarray]:
        """Arrays a deployment saves beside the result (e.g. FedCT's consensus labels)."""
        return {}


@dataclass
class MethodContext:
    """What a method needs to build its roles for a run.

    ``settings`` are the run's :class:`Settings`; ``seeds`` one seed per client role and
    ``server_seed`` the server's, derived from the run seed; ``truth_public`` U's true
    labels (simulator diagnostics only); ``scaling`` U's (mean, std) that z-scored the
    features; ``X_public`` U for a server role that holds it; ``trust`` a client role's own
    share of the run's trusted setup (each as commented below).
    """

    settings: Settings
    seeds: list[int]  # one per client role, derived from the run seed
    server_seed: int
    truth_public: np.ndarray | None = None  # true labels of U: simulator diagnostics only
    # U's public (mean, std) with which the federation z-scored every feature (clients hold
    # it: U is public); None: features as loaded. Lets a method undo the scaling.
    scaling: tuple[np.ndarray, np.ndarray] | None = None
    # the public set U for a server role that holds it (FedDF distils on it); the simulator
    # sets it, the Flower ServerApp holds no copy of U (None)
    X_public: np.ndarray | None = None
    # a client role's own share of the run's trusted setup (Method.trusted_setup: its
    # identity key, the roster, the run id); set on each client's context only, never the
    # server's; None: the method needs none, or the engine provides none
    trust: Any = None


#: how a canary audit observes a method (``fedlabels.audit.canaries``): the audited client's
#: label releases on U, the final global model, or the aggregator's released labels
CANARY_VIEWS = ("replies", "final-model", "released-labels")


@dataclass(frozen=True)
class Capabilities:
    """What a method can do and needs, declared once per method (like scikit-learn's
    ``Tags``); engines, the CLI and the audit read it instead of asking concrete classes.

    ``requires_weights``: clients exchange model parameters (a torch model is needed);
    ``uses_public``: client roles hold the public set U; ``tolerates_lost_clients``: the run
    may go on when clients are lost (``validate`` decides how many);
    ``supports_regression``: it runs on a regression task (real targets);
    ``numeric_features``: it computes on the features themselves (label propagation's kNN
    graph), so text is refused; ``own_client_sampling``: the option with which it samples
    clients itself (then ``--participation`` is refused); ``default_model``: the model spec
    a run uses when the user names none (None: ``mlp`` with ``requires_weights``, else
    ``decision_tree``); ``communication_rounds``: the rounds in which it exchanges messages
    (None: every round; a one-shot method: 1); ``canary_view``: what a canary audit of its
    DP claim observes (one of :data:`CANARY_VIEWS`; None: no canary audit);
    ``trains_models``: False where the clients train no model (label propagation labels
    their points directly): a run keeps no models and refuses a ``--model``.
    """

    requires_weights: bool = False
    uses_public: bool = True
    tolerates_lost_clients: bool = True
    supports_regression: bool = False
    numeric_features: bool = False
    own_client_sampling: str | None = None
    default_model: str | None = None
    communication_rounds: int | None = None
    canary_view: str | None = None
    trains_models: bool = True

    def __post_init__(self) -> None:
        if self.canary_view is not None and self.canary_view not in CANARY_VIEWS:
            raise ValueError(f"canary_view {self.canary_view!r} not in {CANARY_VIEWS}")
        if self.communication_rounds is not None and self.communication_rounds < 1:
            raise ValueError(f"communication_rounds must be >= 1 or None, got "
                             f"{self.communication_rounds}")

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


class Method:
    """A federated method: a name, declared options, threat model and capabilities, and
    its two roles.

    Subclasses set ``name``, ``description``, ``options_class`` (a
    :class:`~fedlabels.method.options.MethodOptions` dataclass), ``threat_model``,
    ``capabilities`` (a :class:`Capabilities`, default: none of the optional ones) and
    implement :meth:`make_server` and :meth:`make_client`.
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    options_class: ClassVar[type[MethodOptions]] = NoOptions
    threat_model: ClassVar[ThreatModel]
    capabilities: ClassVar[Capabilities] = Capabilities()
    #: why the method needs the true labels of part of U (FedMD's labelled D0), which a
    #: public set of the user's own (``public``) lacks; None: it needs none
    public_labels_note: ClassVar[str | None] = None
    #: what a deviating coordinator gets from a site whose roster of identity keys
    #: (:meth:`trusted_setup`) it changed unseen, putting a key of its own at a peer's id
    #: and running that peer (a deployed site without ``roster-sha256`` says so in its log)
    roster_stake: ClassVar[str] = ("it then takes part in this site's secure protocols as "
                                   "that peer")

    def trusted_setup(self, settings: Settings, n_clients: int) -> Any:
        """What an in-process federation's out-of-band setup gives the clients (the
        session builder calls it once a run and hands each client role ``.site(cid)``, its
        own share); None (the default): the method needs no such setup."""
        return None

    def test_rows(self, settings: Settings, n_test: int, cid: int) -> np.ndarray | None:
        """The rows of the test set client ``cid`` is scored on, where not all of them
        (``None``, the default)."""
        return None

    def no_models_note(self) -> str | None:
        """Why a run of this method keeps no models (None: it keeps its clients')."""
        if self.capabilities.trains_models:
            return None
        return (f"{self.name} trains no model: its clients label points directly, and its "
                "accuracies are those labels'")

    def model_default(self) -> str:
        """The model spec a run uses when the user gives none."""
        caps = self.capabilities
        if caps.default_model is not None:
            return caps.default_model
        return "mlp" if caps.requires_weights else "decision_tree"

    def rounds_used(self, settings: Settings, learners: list[Any]) -> int | None:
        """Rounds after which further rounds would change nothing (None: every round
        counts); the engine stops the run there. By default the communication rounds."""
        return self.capabilities.communication_rounds

    def extension_refusal(self, settings: Settings, learners: list[Any]) -> str | None:
        """Why a finished run of ``settings.rounds`` rounds cannot be extended to more
        (``fedlabels resume RESULT.json --rounds N``), or None when rounds beyond the planned
        ones continue it exactly. By default: a method that stops early (:meth:`rounds_used`)."""
        used = self.rounds_used(settings, learners)
        if used is None:
            return None
        return (f"{self.name} exchanges all its messages in round {used}; more rounds would "
                "change nothing")

    def parse_options(self, raw: Mapping[str, Any] | MethodOptions | None) -> MethodOptions:
        """Validated options from user input (already-parsed options pass through)."""
        if isinstance(raw, MethodOptions):
            if not isinstance(raw, self.options_class):
                raise FedLabelsError(f"{self.name} takes {self.options_class.__name__}, got "
                                     f"{type(raw).__name__}.")
            return raw
        return self.options_class.from_mapping(raw, self.name)

    def validate(self, n_clients: int, settings: Settings, learners: list[Any]) -> None:
        """Reject what the options alone cannot decide (clients, learners), clearly."""

    def check_clients(self, n_clients: int, settings: Settings) -> None:
        """Reject a client count that the options and the task refuse alone (a majority vote
        of 2): run before any data loads, with ``settings``' sizes from the data unknown (its
        ``n_classes`` and ``n_features`` 0); :meth:`validate` calls it too."""

    def check_models(self, learners: list[Any]) -> None:
        """Reject learners of a kind the method cannot train (a tree where soft targets need
        gradient steps): run on one learner of each distinct model before the others are
        built (:meth:`checks_models`); :meth:`validate` calls it too."""

    def checks_models(self) -> bool:
        """Whether this method overrides :meth:`check_models` (else nothing is probed)."""
        return type(self).check_models is not Method.check_models

    def sized_for(self, options: MethodOptions, n_public: int) -> MethodOptions:
        """``options`` with every size that depends on |U| fixed for a public set of
        ``n_public`` points. The audit calls it with the ordinary |U| before it appends its
        query points to U, so an audited run sizes itself as a plain run. By default the
        options unchanged."""
        return options

    def text_refusal(self, settings: Settings) -> tuple[str, str] | None:
        """What of this run computes on the features themselves, so that text is refused,
        and what to do instead (None: it takes text); by default from
        ``capabilities.numeric_features``."""
        if self.capabilities.numeric_features:
            return (f"method {self.name!r} (it computes on the features themselves)",
                    "use fedct, dd, fedmd, pate or local")
        return None

    def participation_refusal(self, settings: Settings) -> str | None:
        """Why this run cannot take partial participation, dropouts or a deadline (None:
        it can); see :mod:`fedlabels.runs.participation`."""
        return None

    def client_datasets(self, clients: list[ClientData]) -> list[ClientData]:
        """The private data each client role holds (centralized pools it into one)."""
        return clients

    def make_server(self, ctx: MethodContext, n_public: int, learners: list[Any],
                    client_sizes: list[int]) -> ServerRole:
        raise NotImplementedError

    def make_client(self, cid: int, data: ClientData, learner: Any, ctx: MethodContext,
                    X_public: np.ndarray | None, X_test: np.ndarray,
                    y_test: np.ndarray) -> ClientRole:
        raise NotImplementedError


def fit_or_train(learner: Any, X: np.ndarray, y: np.ndarray, steps: int,
                 failure: Callable[[Exception], str]) -> None:
    """``steps`` warm-started steps if the learner is iterative, else one fit; any error
    that is not already a :class:`FedLabelsError` becomes a :class:`LearnerFitError` with
    the message ``failure(exc)`` (a user's model may fail in any way: say where)."""
    try:
        if is_iterative(learner):
            learner.train_steps(X, y, steps)
        else:
            learner.fit(X, y)
    except FedLabelsError:
        raise
    except Exception as exc:
        raise LearnerFitError(failure(exc)) from exc


def holds_model(learner: Any) -> bool:
    """Whether ``learner`` can predict: built (iterative) or fitted (scikit-learn)."""
    if is_iterative(learner):
        return hasattr(learner, "model_")
    from sklearn.exceptions import NotFittedError
    from sklearn.utils.validation import check_is_fitted

    try:
        check_is_fitted(learner)
    except NotFittedError:
        return False
    return True


def collect_declared(cls: type, attr: str) -> tuple[str, ...]:
    """The names that ``cls`` and its bases declare in class attribute ``attr``."""
    names: list[str] = []
    for klass in reversed(cls.__mro__):
        for name in vars(klass).get(attr, ()):
            if name not in names:
                names.append(name)
    return tuple(names)


def make_learners(specs: list[Any], seeds: list[int], n_classes: int,
                  task: str = "classification") -> list[Any]:
    """One fresh learner per client from its spec (or estimator) and its seed."""
    return [build_learner(s, n_classes=n_classes, random_state=seed, task=task)
            for s, seed in zip(specs, seeds, strict=True)]


def _fingerprint(model: Any) -> tuple[Any, ...]:
    """What identifies a torch classifier's current function: the object, its step count
    and a digest of its weights (FedAvg replaces weights without a step): SHA-256 of
    ``get_weights()``'s bytes (every evaluation pays for it, :func:`_weights_digest`)."""
    return (id(model), int(getattr(model, "steps_", -1)), _weights_digest(model))


def _weights_digest(model: Any) -> bytes:
    """SHA-256 of ``model.get_weights()``'s bytes; the MLP's float32 parameters on the CPU are
    hashed where they lie, one after another: the same digest, without building the flat
    vector of ``get_weights`` (a new allocation per call, most of the former cost)."""
    import hashlib

    import torch

    from fedlabels.core.array_table import raw_bytes
    from fedlabels.learners.torch_mlp import TorchMLPClassifier

    own = type(model).get_weights is TorchMLPClassifier.get_weights
    params = list(model.model_.parameters()) if own else []
    if not params or any(p.device.type != "cpu" or p.dtype != torch.float32
                         for p in params):  # get_weights converts or gathers: hash its vector
        return hashlib.sha256(raw_bytes(np.ascontiguousarray(model.get_weights()))).digest()
    digest = hashlib.sha256()
    for p in params:
        digest.update(raw_bytes(np.ascontiguousarray(p.detach().numpy())))
    return digest.digest()


def _predicts_the_argmax(model: Any, n_classes: int) -> bool:
    """Whether ``model.predict`` is the argmax of its ``predict_proba`` over the classes
    0..n-1 (the torch classifiers; a model of a torch learner exists only once torch is
    loaded, so a run of trees does not load it to find out)."""
    import sys

    torch_mlp = sys.modules.get("fedlabels.learners.torch_mlp")
    if torch_mlp is None:
        return False
    base = torch_mlp.TorchMLPClassifier
    return (isinstance(model, base) and type(model).predict is base.predict
            and np.array_equal(np.asarray(getattr(model, "classes_", [])), np.arange(n_classes)))
