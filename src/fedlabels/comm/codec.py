"""Compact wire format for :class:`~fedlabels.comm.message.Message`.

Layout: ``b"FLM1"`` | uint32 header length | UTF-8 JSON header | raw array bytes. The
header holds the kind, category, config and, per array, its name, dtype and shape; array
bytes follow in header order, little-endian, C order. The engine counts ``len()`` of these
bytes, so reported communication is what actually travels.
"""

from __future__ import annotations

import json
import struct

import numpy as np

from fedlabels.comm.message import Message

_MAGIC = b"FLM1"


def encode_message(message: Message) -> bytes:
    """Serialize a message to bytes."""
    specs = []
    blobs = []
    for name, array in message.arrays.items():
        original = np.asarray(array)
        arr = np.ascontiguousarray(original).reshape(original.shape)  # keeps 0-d arrays 0-d
        if arr.dtype.kind not in "biuf":
            raise TypeError(f"array {name!r} has unsupported dtype {arr.dtype}")
        arr = arr.astype(arr.dtype.newbyteorder("<"), copy=False)
        specs.append([name, arr.dtype.str, list(arr.shape)])
        blobs.append(arr.tobytes())
    header: dict[str, object] = {"k": message.kind, "a": specs}
    if message.config:
        header["c"] = message.config
    if message.category != "protocol":
        header["g"] = message.category
    head = json.dumps(header, separators=(",", ":")).encode()
    return b"".join([_MAGIC, struct.pack("<I", len(head)), head, *blobs])


def decode_message(data: bytes) -> Message:
    """Deserialize bytes produced by :func:`encode_message`."""
    if data[:4] != _MAGIC:
        raise ValueError("not a fedlabels message (bad magic bytes)")
    (head_len,) = struct.unpack("<I", data[4:8])
    header = json.loads(data[8 : 8 + head_len])
    offset = 8 + head_len
    arrays = {}
    for name, dtype_str, shape in header["a"]:
        dtype = np.dtype(dtype_str)
        count = int(np.prod(shape)) if shape else 1
        nbytes = count * dtype.itemsize
        flat = np.frombuffer(data, dtype=dtype, count=count, offset=offset)
        arrays[name] = flat.reshape(tuple(shape))  # () for a 0-d array, not (1,)
        offset += nbytes
    if offset != len(data):
        raise ValueError("message length does not match its header")
    return Message(kind=header["k"], arrays=arrays, config=header.get("c", {}),
                   category=header.get("g", "protocol"))
