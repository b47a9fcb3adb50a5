"""Our :class:`~fedlabels.comm.Message` to and from a Flower ``RecordDict``.

A message becomes three records:

* ``"arrays"`` — an ``ArrayRecord`` with one numpy ``Array`` per payload array (bit-packed
  labels stay uint8 arrays, so they travel packed);
* ``"config"`` — a ``ConfigRecord`` with the message's scalar config;
* ``"fedlabels"`` — a ``ConfigRecord`` with the kind, the category and routing data (the
  client id and the round).

A second message may ride along in the same ``RecordDict`` under the prefix ``"then."``
(:func:`attached_message`): the evaluation request on a training message, and its answer on
the reply, so a round with evaluation costs one exchange instead of two.

The Flower ``message_type`` is ``"<category>.<action>"`` as Flower's ``ClientApp`` routing
demands: protocol messages are ``train.*``, evaluation messages ``evaluate.*`` and control
messages ``query.*``; the action is the kind made a Python identifier (``fedct.train`` ->
``train.fedct_train``). The exact kind travels in the ``"fedlabels"`` record.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict

from fedlabels.comm import Message
from fedlabels.comm.message import as_category
from fedlabels.core.errors import FedLabelsError

ARRAYS = "arrays"
CONFIG = "config"
META = "fedlabels"

THEN = "then."  # prefix of the records of an attached message

_FLOWER_CATEGORY = {"protocol": "train", "evaluation": "evaluate", "control": "query"}


def flower_message_type(message: Message) -> str:
    """The Flower ``message_type`` for ``message`` (``"<category>.<action>"``)."""
    action = re.sub(r"\W", "_", message.kind)
    if not action or action[0].isdigit():
        action = f"m_{action}"
    return f"{_FLOWER_CATEGORY[message.category]}.{action}"


def _records(message: Message, prefix: str,
             meta: dict[str, int | float | str | bool]) -> dict[str, Any]:
    arrays = ArrayRecord({name: Array(np.array(value, order="C", copy=None))
                          for name, value in message.arrays.items()})
    header = ConfigRecord({"kind": message.kind, "category": message.category, **meta})
    return {prefix + ARRAYS: arrays, prefix + CONFIG: ConfigRecord(dict(message.config)),
            prefix + META: header}


def to_record_dict(message: Message, attached: Message | None = None,
                   **meta: int | float | str | bool) -> RecordDict:
    """Pack ``message`` (plus routing ``meta`` such as the client id, and optionally an
    ``attached`` message that rides along) into a ``RecordDict``."""
    records = _records(message, "", meta)
    if attached is not None:
        records.update(_records(attached, THEN, {}))
    return RecordDict(records)


def attached_message(content: RecordDict) -> Message | None:
    """The message attached by :func:`to_record_dict`, if any."""
    if THEN + META not in content.config_records:
        return None
    return from_record_dict(content, THEN)[0]


def from_record_dict(content: RecordDict,
                     prefix: str = "") -> tuple[Message, dict[str, Any]]:
    """Unpack a ``RecordDict`` made by :func:`to_record_dict`: the message and its meta."""
    if prefix + META not in content.config_records:
        raise FedLabelsError("the Flower message carries no fedlabels header; it was not sent "
                             "by a fedlabels ServerApp/ClientApp of a matching version.")
    header = dict(content.config_records[prefix + META])
    arrays = {name: array.numpy()
              for name, array in content.array_records[prefix + ARRAYS].items()}
    config: dict[str, int | float | str | bool] = {}
    for key, value in content.config_records[prefix + CONFIG].items():
        if not isinstance(value, int | float | str | bool):
            raise FedLabelsError(f"message config entry {key!r} is a {type(value).__name__}; "
                                 "fedlabels messages carry int/float/str/bool config only.")
        config[key] = value
    try:
        category = as_category(header.pop("category"))
    except ValueError as exc:
        raise FedLabelsError(f"{exc}.") from None
    message = Message(kind=str(header.pop("kind")), arrays=arrays, config=config,
                      category=category)
    return message, header


def flower_bytes(message: Any) -> int:
    """Bytes of a Flower ``Message`` as Flower 1.41 sends it: its object tree (the message,
    its ``RecordDict``, the records and arrays), each object deflated (protobuf plus Flower's
    object header), an object that occurs twice counted once, as Flower pushes it once."""
    from flwr.supercore.inflatable.inflatable_object import get_all_nested_objects

    return sum(len(obj.deflate()) for obj in get_all_nested_objects(message).values())
