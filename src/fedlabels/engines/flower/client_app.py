"""The Flower ``ClientApp``: a method's client role, answering one message per call.

In deployment a SuperNode starts a new ``flwr-clientapp`` process for every message, so
nothing survives in memory between rounds. Each call therefore

1. loads the site's data from the node config (:func:`~.site.load_site`);
2. builds the client role exactly as the simulator does (same model spec and seed for
   this ``partition-id``);
3. restores the role's mutable state (the learner, pseudo-labels, ...) from
   ``context.state``;
4. handles the message and writes the new state back to ``context.state``.

The state is a pickle of the role's attributes minus the data it reloads (private data, U,
test set, settings), stored as a uint8 ``Array`` (Flower's own pattern for model bytes).
Keeping it in ``context.state`` rather than in a per-node file means the SuperNode owns it:
it is scoped to the run, needs no writable directory or clean-up at the site, and survives
the per-message processes. The pickle never leaves the SuperNode (``context.state`` is not
sent to the SuperLink), and it is only ever read back by the process that wrote it.
"""

from __future__ import annotations

import pickle
from typing import Any

from flwr.app import ArrayRecord, Context, Message
from flwr.clientapp import ClientApp

from fedlabels.comm import Message as FLMessage
from fedlabels.engines.flower.convert import (
    array_to_bytes,
    bytes_to_array,
    from_record_dict,
    to_record_dict,
)
from fedlabels.engines.flower.site import SiteData, load_site, node_label
from fedlabels.engines.flower.spec import HELLO, DeploySpec, role_setup
from fedlabels.errors import FedLabelsError
from fedlabels.learners import build_learner
from fedlabels.protocols import ClientRole, MethodContext

STATE_KEY = "fedlabels.state"
# attributes a role rebuilds on every call; everything else is state
_REBUILT = frozenset({"cid", "data", "settings", "X_public", "X_test", "y_test", "handlers"})


def hello_reply(site: SiteData, spec: DeploySpec) -> FLMessage:
    """What the server checks before round 1: who this site is and what data it holds."""
    return FLMessage("fedlabels.hello.reply", config={
        "partition_id": site.partition_id,
        "n_examples": len(site.private),
        "n_features": site.n_features,
        "n_public": len(site.X_public),
        "n_classes": site.n_classes,
        "public_digest": site.public_digest(),
    }, category="control")


def build_role(spec: DeploySpec, site: SiteData) -> ClientRole:
    """The client role of this site, as ``simulate`` builds it for the same client index."""
    cfg = spec.config
    cid = site.partition_id
    if cid >= cfg.clients:
        raise FedLabelsError(f"partition-id {cid} is out of range for a run with "
                             f"{cfg.clients} clients (0..{cfg.clients - 1}).")
    setup = role_setup(cfg, site.n_classes, site.n_features)
    learner = build_learner(setup.specs[cid], n_classes=site.n_classes,
                            random_state=setup.client_seeds[cid])
    ctx = MethodContext(setup.settings, setup.client_seeds, setup.server_seed)
    X_public = site.X_public if setup.method.uses_public() else None
    return setup.method.make_client(cid, site.private, learner, ctx, X_public, site.X_test,
                                    site.y_test)


def save_state(role: ClientRole, state: Any) -> None:
    payload = {k: v for k, v in vars(role).items() if k not in _REBUILT}
    state[STATE_KEY] = ArrayRecord({"pickle": bytes_to_array(
        pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL))})


def restore_state(role: ClientRole, state: Any) -> None:
    if STATE_KEY in state:
        vars(role).update(pickle.loads(array_to_bytes(state[STATE_KEY]["pickle"])))


def handle(message: Message, context: Context) -> Message:
    """Answer one Flower message with the method's client role."""
    site = load_site(dict(context.node_config), context.node_id)
    spec = DeploySpec.from_run_config(dict(context.run_config))
    ours, meta = from_record_dict(message.content)
    expected = meta.get("cid")
    if ours.kind != HELLO and expected is not None and int(expected) != site.partition_id:
        raise FedLabelsError(f"{node_label(dict(context.node_config), context.node_id)} got a "
                             f"message for client {expected}.")
    if ours.kind == HELLO:
        reply = hello_reply(site, spec)
    else:
        role = build_role(spec, site)
        restore_state(role, context.state)
        reply = role.handle(ours)
        save_state(role, context.state)
    return Message(to_record_dict(reply), reply_to=message)


class FedLabelsClientApp(ClientApp):
    """A ``ClientApp`` that routes every ``train.*``, ``evaluate.*`` and ``query.*`` message
    to :func:`handle`.

    Flower routes by ``"<category>.<action>"`` to functions registered per action; the action
    set of fedlabels grows with every method, and the exact kind travels inside the message,
    so one entry point serves them all.
    """

    def __call__(self, message: Message, context: Context) -> Message:
        category = message.metadata.message_type.split(".", 1)[0]
        if category not in ("train", "evaluate", "query"):
            raise ValueError(f"unsupported Flower message type "
                             f"{message.metadata.message_type!r}")
        return handle(message, context)


app = FedLabelsClientApp()
