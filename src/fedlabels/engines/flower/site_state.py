"""A site's client state in Flower's ``context.state``: plain records, sealed with an HMAC.

A SuperNode starts a fresh ClientApp process per message, so the role's ``state_dict()``
(:mod:`fedlabels.method.state`: arrays and int/float/str/bool/None, never pickles) is
stored between messages in ``context.state`` as four records:

* ``fedlabels.state.arrays`` — an ``ArrayRecord`` with the array entries (Flower writes and
  reads them with ``np.save``/``np.load`` without pickle);
* ``fedlabels.state.scalars`` — a ``ConfigRecord`` with the int/float/str/bool entries;
* ``fedlabels.state.none`` — a ``ConfigRecord`` naming the entries that are ``None``;
* ``fedlabels.state.mac`` — HMAC-SHA256 of a canonical encoding of all of the above and the
  site's partition id, under a key only the site holds.

The key is 32 bytes from the OS CSPRNG, made by the site on first use and kept in a file
with mode 0600 (node config ``state-key``; default ``$FLWR_HOME/fedlabels-state.key``, or
``~/.flwr/`` when ``FLWR_HOME`` is unset). State that fails the check (changed outside the
ClientApp, or sealed under another key or partition) is refused with a clear error, and so
is state records without a MAC.

What is stored is the role's state only: the private rows, U and the test set are re-read
from the site's files on every message (:func:`~.site.load_site`). This module does not
import Flower's runtime, only its record types.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from collections.abc import Mapping
from pathlib import Path

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, ConfigRecordValues, RecordDict

from fedlabels.core.errors import FedLabelsError
from fedlabels.core.private_files import make_key_once, read_key
from fedlabels.method.state import State, StateValue, check_state_value

STATE_ARRAYS = "fedlabels.state.arrays"
STATE_SCALARS = "fedlabels.state.scalars"
STATE_NONE = "fedlabels.state.none"
STATE_MAC = "fedlabels.state.mac"
STATE_RECORDS = (STATE_ARRAYS, STATE_SCALARS, STATE_NONE)
_FORMAT = b"fedlabels.site-state/1"


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


def _chunk(data: bytes) -> bytes:
    return struct.pack(">Q", len(data)) + data


def canonical_bytes(state: Mapping[str, StateValue], partition_id: int) -> bytes:
    """An unambiguous encoding of ``state`` (sorted keys, typed, length-prefixed)."""
    parts = [_chunk(_FORMAT), _chunk(str(int(partition_id)).encode())]
    for key in sorted(state):
        value = state[key]
        parts.append(_chunk(key.encode()))
        if value is None:
            parts.append(_chunk(b"none"))
        elif isinstance(value, np.ndarray):
            array = np.ascontiguousarray(value)
            parts += [_chunk(b"array"), _chunk(array.dtype.str.encode()),
                      _chunk(repr(tuple(array.shape)).encode()), _chunk(array.tobytes())]
        elif isinstance(value, bool):
            parts += [_chunk(b"bool"), _chunk(b"1" if value else b"0")]
        elif isinstance(value, int):
            parts += [_chunk(b"int"), _chunk(str(value).encode())]
        elif isinstance(value, float):
            parts += [_chunk(b"float"), _chunk(value.hex().encode())]
        elif isinstance(value, str):
            parts += [_chunk(b"str"), _chunk(value.encode())]
        else:
            raise FedLabelsError(f"client state entry {key!r} is a {type(value).__name__}; "
                                 "state values are arrays, int/float/str/bool or None.")
    return b"".join(parts)


def state_mac(state: Mapping[str, StateValue], partition_id: int, key: bytes) -> str:
    return hmac.new(key, canonical_bytes(state, partition_id), hashlib.sha256).hexdigest()


def site_key(path: Path) -> bytes:
    """The site's state key; made (mode 0600, OS CSPRNG) if the file does not exist yet.

    The key is a long-term secret of the site, not protocol randomness: it comes from
    :mod:`secrets` directly, so even a test's reproducible source (which replays protocol
    secrets) never makes it predictable.
    """
    try:
        # a folder made for the key is the owner's only (it was 0755), as the ledger's
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        make_key_once(path)  # whole or absent to a process reading it meanwhile
    except OSError as exc:
        raise FedLabelsError(f"cannot create the site's state key {path} ({exc}); give a "
                             "writable path with --node-config 'state-key=/path'.") from None
    return read_key(path, "site's state key", "delete it to make a new one (state stored "
                    "under the old key is then refused).")


def save_state(state: Mapping[str, StateValue], records: RecordDict, partition_id: int,
               key: bytes) -> None:
    """Store ``state`` in ``records`` (``context.state``) with its MAC."""
    plain = {name: check_state_value(name, value) for name, value in state.items()}
    for name, record in state_to_records(plain).items():
        records[name] = record
    records[STATE_MAC] = ConfigRecord({"hmac-sha256": state_mac(plain, partition_id, key)})


def load_state(records: RecordDict, partition_id: int, key: bytes) -> State | None:
    """The stored state after checking its MAC; None before the first message."""
    state = state_from_records(records)
    if state is None:
        return None
    mac = records.get(STATE_MAC)
    stored = mac.get("hmac-sha256") if isinstance(mac, ConfigRecord) else None
    if not isinstance(stored, str):
        raise FedLabelsError(f"the client state of partition-id {partition_id} carries no "
                             "integrity tag; it was not written by this version's ClientApp. "
                             "Start the run afresh.")
    if not hmac.compare_digest(stored, state_mac(state, partition_id, key)):
        raise FedLabelsError(
            f"the client state of partition-id {partition_id} failed its integrity check "
            "(HMAC-SHA256 under the site's state key): it was changed outside this site's "
            "ClientApp, or the key file changed. Refusing it; start the run afresh.")
    return state
