"""Messages between server and client roles, their wire format, and label bit-packing."""

from fedlabels.comm.codec import decode_message, encode_message
from fedlabels.comm.labels import bits_per_label, pack_labels, pack_mask, unpack_labels, unpack_mask
from fedlabels.comm.message import Message

__all__ = [
    "Message",
    "bits_per_label",
    "decode_message",
    "encode_message",
    "pack_labels",
    "pack_mask",
    "unpack_labels",
    "unpack_mask",
]
