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
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from fedlabels.comm import Message
from fedlabels.data import ClientData
from fedlabels.errors import FedLabelsError
from fedlabels.learners import build_learner, clone_fresh_learner, is_iterative


class Grid(Protocol):
    """What a server role can do: send one message to each of some clients, get replies."""

    @property
    def client_ids(self) -> list[int]: ...

    def exchange(self, messages: Mapping[int, Message], rnd: int) -> dict[int, Message]: ...


@dataclass(frozen=True)
class Settings:
    """Method settings shared by server and client roles (JSON-friendly scalars only)."""

    n_classes: int
    period: int = 50
    quorum: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class LearnerFitError(FedLabelsError):
    """A client's model failed to fit; the message names the client and the reason."""


class ClientRole:
    """Base client: private data, a learner, the test set for evaluation, and dispatch.

    Subclasses register handlers for their message kinds in ``handlers``.
    """

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
        self.handlers: dict[str, Callable[[Message], Message]] = {"evaluate": self.evaluate}

    def handle(self, message: Message) -> Message:
        try:
            handler = self.handlers[message.kind]
        except KeyError:
            raise FedLabelsError(f"client {self.cid}: unknown message kind "
                                 f"{message.kind!r}") from None
        return handler(message)

    # ---------------------------------------------------------------- training helpers
    def train_on(self, X: np.ndarray, y: np.ndarray, steps: int,
                 X_aux: np.ndarray | None = None, y_aux: np.ndarray | None = None) -> None:
        """Update the learner: warm-started steps if iterative, else a refit from scratch.

        For refit learners the auxiliary (pseudo-labelled) data is appended to the private data;
        for iterative learners each step mixes one minibatch of each.
        """
        try:
            if is_iterative(self.learner):
                self.learner.train_steps(X, y, steps, X_aux, y_aux)
            else:
                if X_aux is not None and len(X_aux):
                    X, y = np.concatenate([X, X_aux]), np.concatenate([y, y_aux])
                self.learner = clone_fresh_learner(self.learner)
                self.learner.fit(X, y)
        except FedLabelsError:
            raise
        except Exception as exc:  # a user's model may fail in any way; say which client
            present = np.unique(y).tolist()
            raise LearnerFitError(
                f"client {self.cid}: model {type(self.learner).__name__} failed to fit on "
                f"{len(y)} examples with classes {present[:10]}: {type(exc).__name__}: {exc}"
            ) from exc
        self.fitted = True

    def predict(self, X: np.ndarray) -> np.ndarray:
        return np.asarray(self.learner.predict(X)).astype(np.int64)

    # ---------------------------------------------------------------- evaluation
    def evaluate(self, message: Message) -> Message:
        """Test accuracy of the model this client holds (an ``evaluation`` message)."""
        accuracy = float(np.mean(self.predict(self.X_test) == self.y_test))
        return Message("evaluate.reply", config={"accuracy": accuracy}, category="evaluation")


class ServerRole:
    """Base server: one ``run_round`` per communication round."""

    def run_round(self, rnd: int, grid: Grid) -> dict[str, float]:
        """Run round ``rnd`` (0-based) and return server-side metrics for the record."""
        raise NotImplementedError

    def evaluation_message(self, cid: int) -> Message:
        """The message asking client ``cid`` to report its test accuracy."""
        return Message("evaluate", category="evaluation")

    def result_extra(self) -> dict[str, Any]:
        """Method-specific top-level entries of the result JSON (e.g. ``privacy``)."""
        return {}


@dataclass
class MethodContext:
    """What a method needs to build its roles for a run."""

    settings: Settings
    seeds: list[int]  # one per client role, derived from the run seed
    server_seed: int
    truth_public: np.ndarray | None = None  # true labels of U: simulator diagnostics only


class Method:
    """A federated method: a name and how to build its server and client roles."""

    name: str = ""
    description: str = ""
    requires_weights: bool = False

    def validate(self, n_clients: int, settings: Settings, learners: list[Any]) -> None:
        """Reject configurations the method cannot run, with a clear message."""

    def client_datasets(self, clients: list[ClientData]) -> list[ClientData]:
        """The private data each client role holds (centralized pools it into one)."""
        return clients

    def uses_public(self) -> bool:
        return True

    def make_server(self, ctx: MethodContext, n_public: int, learners: list[Any],
                    client_sizes: list[int]) -> ServerRole:
        raise NotImplementedError

    def make_client(self, cid: int, data: ClientData, learner: Any, ctx: MethodContext,
                    X_public: np.ndarray | None, X_test: np.ndarray,
                    y_test: np.ndarray) -> ClientRole:
        raise NotImplementedError


def make_learners(specs: list[Any], seeds: list[int], n_classes: int) -> list[Any]:
    """One fresh learner per client from its spec (or estimator) and its seed."""
    return [build_learner(s, n_classes=n_classes, random_state=seed)
            for s, seed in zip(specs, seeds, strict=True)]
