"""The interface of a DP-FedCT label mechanism (see the package docstring for how to add one)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from fedlabels.comm import Message
from fedlabels.method.base import Grid, Settings

if TYPE_CHECKING:
    from fedlabels.methods.fedct.dp_fedct import DPFedCTClient, DPFedCTServer


class LabelMechanism:
    """How a DP-FedCT client makes its release private and how the server accounts for it.

    The server keeps the ledger (the events; its budget is a view of them), the client its
    secret noise generator; a
    strategy holds at most what it derives deterministically from the options (e.g. a
    calibrated σ), so a restored server recomputes it in :meth:`calibrate`."""

    name: ClassVar[str]
    #: the result's ``privacy.mechanism``
    summary: ClassVar[str]
    #: whether the Hamming sensitivity s* of the label matrix calibrates the noise
    uses_sensitivity: ClassVar[bool] = True

    # ------------------------------------------------------------------ client side
    def release(self, client: DPFedCTClient, message: Message) -> Message:
        """Train as the message says and return the client's private release."""
        raise NotImplementedError

    # ------------------------------------------------------------------ server side
    def calibrate(self, server: DPFedCTServer, grid: Grid | None) -> None:
        """Before round 1 (and after a restore, with ``grid`` None): set the noise on
        ``server`` (``epsilon_round``, ...) and, with a total ε, check the planned rounds'
        events against its ledger (:meth:`~fedlabels.privacy.ledger.Ledger.check_plan`)."""
        raise NotImplementedError

    def round_config(self, server: DPFedCTServer) -> dict[str, Any]:
        """What the round's train message tells the clients (``mechanism`` included)."""
        raise NotImplementedError

    def collect(self, server: DPFedCTServer, replies: dict[int, Message],
                config: dict[str, Any]) -> np.ndarray:
        """The consensus of this round's releases."""
        raise NotImplementedError

    def round_events(self, server: DPFedCTServer, config: dict[str, Any],
                     cids: Sequence[int], replies: dict[int, Message] | None) -> list[Any]:
        """The privacy events of one round in which clients ``cids`` release as ``config``
        says: checked against the server's ledger before the round's request goes out
        (``replies`` None: every client asked), recorded once from the ``replies``."""
        raise NotImplementedError

    def privacy(self, server: DPFedCTServer) -> dict[str, Any]:
        """The result's ``privacy`` entries that are specific to this mechanism."""
        raise NotImplementedError

    def refusal(self, settings: Settings, learners: list[Any]) -> str | None:
        """Why this mechanism cannot run these learners, or None."""
        return None
