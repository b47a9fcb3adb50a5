"""The Flower ``ClientApp``: a method's client role, answering one message per call.

In deployment a SuperNode starts a new ``flwr-clientapp`` process for every message, so
nothing survives in memory between rounds. Each call therefore

1. loads the site's data from the node config (:func:`~.site.load_site`);
2. builds the client role from the same :class:`~fedlabels.engines.runner.RunPlan` as the
   simulator (``plan.learner(cid)``, ``plan.context()``);
3. restores the role's state (``role.load_state_dict``) from ``context.state``;
4. handles the message and writes ``role.state_dict()`` back to ``context.state``.

The state is plain values only, in three records of ``context.state``:

* ``fedlabels.state.arrays`` — an ``ArrayRecord`` with the array entries (Flower writes and
  reads them with ``np.save``/``np.load`` without pickle);
* ``fedlabels.state.scalars`` — a ``ConfigRecord`` with the int/float/str/bool entries;
* ``fedlabels.state.none`` — a ``ConfigRecord`` naming the entries that are ``None``
  (``key: True``; a ``ConfigRecord`` holds no ``None``).

Nothing is pickled. ``context.state`` is owned by the SuperNode: it is scoped to the run,
needs no writable directory at the site, survives the per-message processes and is not sent
to the SuperLink.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    ConfigRecordValues,
    Context,
    Message,
    RecordDict,
)
from flwr.clientapp import ClientApp

from fedlabels.comm import Message as FLMessage
from fedlabels.engines.flower.convert import from_record_dict, to_record_dict
from fedlabels.engines.flower.site import SiteData, load_site, node_label
from fedlabels.engines.flower.spec import HELLO, DeploySpec, deploy_plan
from fedlabels.errors import FedLabelsError
from fedlabels.protocols import ClientRole
from fedlabels.protocols.state import State, StateValue, check_state_value

STATE_ARRAYS = "fedlabels.state.arrays"
STATE_SCALARS = "fedlabels.state.scalars"
STATE_NONE = "fedlabels.state.none"
STATE_RECORDS = (STATE_ARRAYS, STATE_SCALARS, STATE_NONE)


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
    plan = deploy_plan(cfg, site.n_classes, site.n_features)
    X_public = site.X_public if plan.method.uses_public else None
    ctx = plan.context()
    ctx.scaling = site.scaling
    return plan.method.make_client(cid, site.private, plan.learner(cid), ctx,
                                   X_public, site.X_test, site.y_test)


def state_to_records(state: Mapping[str, StateValue]) -> dict[str, ArrayRecord | ConfigRecord]:
    """A role's ``state_dict()`` as Flower records (see the module docstring)."""
    arrays: dict[str, Array] = {}
    scalars: dict[str, ConfigRecordValues] = {}
    nones: dict[str, ConfigRecordValues] = {}
    for key, raw in state.items():
        value = check_state_value(key, raw)
        if value is None:
            nones[key] = True
        elif isinstance(value, np.ndarray):
            arrays[key] = Array(np.array(value, order="C", copy=None))
        else:
            scalars[key] = value
    return {STATE_ARRAYS: ArrayRecord(arrays), STATE_SCALARS: ConfigRecord(scalars),
            STATE_NONE: ConfigRecord(nones)}


def state_from_records(records: RecordDict) -> State | None:
    """The state :func:`state_to_records` stored, or None before the first message."""
    present = [name for name in STATE_RECORDS if name in records]
    if not present:
        return None
    if len(present) != len(STATE_RECORDS):
        raise FedLabelsError(f"the client state in context.state is incomplete (has "
                             f"{present}, needs {list(STATE_RECORDS)}).")
    arrays, scalars = records[STATE_ARRAYS], records[STATE_SCALARS]
    if not isinstance(arrays, ArrayRecord) or not isinstance(scalars, ConfigRecord):
        raise FedLabelsError("the client state in context.state has records of the wrong "
                             "kind.")
    state: State = {key: array.numpy() for key, array in arrays.items()}
    for key, value in scalars.items():
        if not isinstance(value, int | float | str | bool):
            raise FedLabelsError(f"client state entry {key!r} is a {type(value).__name__}; "
                                 "state scalars are int/float/str/bool.")
        state[key] = value
    state.update(dict.fromkeys(records[STATE_NONE], None))
    return state


def save_state(role: ClientRole, records: RecordDict) -> None:
    for name, record in state_to_records(role.state_dict()).items():
        records[name] = record


def restore_state(role: ClientRole, records: RecordDict) -> None:
    state = state_from_records(records)
    if state is not None:
        role.load_state_dict(state)


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
