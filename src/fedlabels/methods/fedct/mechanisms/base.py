"""The interface of a DP-FedCT label mechanism (see the package docstring for how to add one)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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
    #: whether :meth:`calibrate` takes the options alone (no client, no server seed): the
    #: server then calibrates when it is built, so that its ledger states how σ came
    #: (``calibrated_by``) before round 1, as DP-FedAvg's does
    calibrates_at_build: ClassVar[bool] = False

    # ------------------------------------------------------------------ client side
    def own_noise(self, client: DPFedCTClient) -> dict[str, Any]:
        """The noise parameters the client's own options calibrate (nothing from a message);
        mechanisms that check their message elsewhere (dpsgd) return none."""
        return {}

    def client_noise(self, client: DPFedCTClient, config: Mapping[str, Any]) -> dict[str, Any]:
        """The parameters the client releases with: the message's where they give at least
        the noise of :meth:`own_noise`; raises :class:`~fedlabels.errors.ParameterRefusal`
        where they give less."""
        return {}

    def release(self, client: DPFedCTClient, message: Message,
                noise: dict[str, Any]) -> Message:
        """Train as the message says and return the client's private release, made with
        ``noise`` (:meth:`client_noise`)."""
        raise NotImplementedError

    def release_event(self, client: DPFedCTClient, noise: Mapping[str, Any]) -> Any:
        """The privacy event the client charges for one release made with ``noise`` (what
        :meth:`release` charges; with :meth:`own_noise`, one release of the client's plan).
        None: the mechanism charges elsewhere (dpsgd: every DP-SGD round)."""
        return None

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


#: who keeps a DP-FedCT client's releases within its budget (``privacy.target.enforced``)
CLIENTS_ENFORCE = ("each client: its own options set its noise and number of releases within "
                   "this budget, and it refuses less noise or a release beyond them (a server "
                   "that deviates included); the server also checks spent + next release <= "
                   "target before every release and stops the run otherwise")


def refuse_less_noise(client: DPFedCTClient, key: str, asked: float, own: float,
                      noisier_above: bool) -> float:
    """``asked`` if it is at least as noisy as ``own`` (larger when ``noisier_above``),
    else a :class:`~fedlabels.errors.ParameterRefusal` naming ``key`` to the server but not
    ``own``, which ``sensitivity=empirical`` computes from the client's data (its s*)."""
    from fedlabels.core.errors import ParameterRefusal

    ok = (asked >= own * (1 - 1e-9)) if noisier_above else (0.0 <= asked <= own * (1 + 1e-9))
    if not ok:
        raise ParameterRefusal(f"client {client.cid}: the server asked for {key} = {asked:.6g}, "
                               f"less noise than the {own:.6g} this client's options "
                               "calibrate; refusing.", named=f"less noise than the site's {key}")
    return asked
