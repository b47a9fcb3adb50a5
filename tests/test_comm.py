import numpy as np
import pytest

from fedlabels.comm import (
    Message,
    bits_per_label,
    decode_message,
    encode_message,
    pack_labels,
    pack_mask,
    unpack_labels,
    unpack_mask,
)


@pytest.mark.parametrize("c,bits", [(1, 1), (2, 1), (3, 2), (4, 2), (10, 4), (26, 5), (256, 8)])
def test_bits_per_label(c, bits):
    assert bits_per_label(c) == bits


@pytest.mark.parametrize("c", [2, 3, 10, 26, 300])
def test_label_packing_round_trips_and_is_compact(c):
    rng = np.random.default_rng(c)
    labels = rng.integers(0, c, 1001)
    packed = pack_labels(labels, c)
    assert packed.dtype == np.uint8
    assert len(packed) == -(-1001 * bits_per_label(c) // 8)
    assert np.array_equal(unpack_labels(packed, 1001, c), labels)


def test_pack_rejects_out_of_range_labels():
    with pytest.raises(ValueError):
        pack_labels(np.array([0, 3]), 3)


def test_mask_round_trip():
    mask = np.random.default_rng(0).random(77) > 0.5
    assert np.array_equal(unpack_mask(pack_mask(mask), 77), mask)


def test_codec_round_trip_preserves_everything():
    msg = Message("fedct.train", arrays={"a": np.arange(5, dtype=np.int16),
                                         "w": np.ones((2, 3), dtype=np.float32)},
                  config={"round": 3, "lr": 0.5, "name": "x", "flag": True},
                  category="evaluation")
    back = decode_message(encode_message(msg))
    assert back.kind == msg.kind and back.config == msg.config and back.category == "evaluation"
    for k in msg.arrays:
        assert back.arrays[k].dtype == msg.arrays[k].dtype
        assert np.array_equal(back.arrays[k], msg.arrays[k])


def test_codec_overhead_is_small():
    payload = np.zeros(5000, dtype=np.uint8)
    data = encode_message(Message("fedct.labels", arrays={"labels": payload}))
    assert 5000 < len(data) < 5000 + 80


def test_codec_rejects_garbage_and_truncation():
    with pytest.raises(ValueError):
        decode_message(b"nope" + b"\0" * 10)
    data = encode_message(Message("k", arrays={"a": np.arange(10)}))
    with pytest.raises(ValueError):
        decode_message(data[:-3])


def test_zero_dimensional_arrays_keep_their_shape():
    import numpy as np

    from fedlabels.comm import Message, decode_message, encode_message

    msg = Message("x", arrays={"step": np.array(3.5, dtype=np.float32),
                               "empty": np.zeros((0, 4), dtype=np.int64)})
    out = decode_message(encode_message(msg))
    assert out.arrays["step"].shape == () and out.arrays["step"] == np.float32(3.5)
    assert out.arrays["empty"].shape == (0, 4)


def _wire(kind: str, arrays: dict[str, np.ndarray]) -> bytes:
    """The wire format as codec.py's docstring states it, written here by hand: magic,
    uint32 LE header length, the JSON header, each array's bytes little-endian in C order."""
    import json
    import struct

    specs = [[n, a.dtype.newbyteorder("<").str, list(a.shape)] for n, a in arrays.items()]
    head = json.dumps({"k": kind, "a": specs}, separators=(",", ":")).encode()
    body = b"".join(np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<")).tobytes()
                    for a in arrays.values())
    return b"FLM1" + struct.pack("<I", len(head)) + head + body


def test_the_wire_is_little_endian_whatever_order_the_array_is_held_in():
    """The bytes counted and hashed (a site's message digest) are the same for the same
    values: a big-endian or Fortran-ordered array travels as its little-endian C copy."""
    values = np.arange(12, dtype=np.int32).reshape(3, 4)
    expected = _wire("x", {"w": values})
    for held in (values.astype(">i4"), np.asfortranarray(values), values):
        assert encode_message(Message("x", arrays={"w": held})) == expected
    back = decode_message(expected).arrays["w"]
    assert back.dtype == np.dtype("<i4") and np.array_equal(back, values)


def test_codec_refuses_arrays_it_cannot_carry():
    for bad in (np.array([1 + 2j]), np.array(["a"]), np.array([None], dtype=object)):
        with pytest.raises(TypeError, match="unsupported dtype"):
            encode_message(Message("x", arrays={"a": bad}))


def test_codec_refuses_a_wrong_magic_and_bytes_past_the_arrays():
    data = encode_message(Message("k", arrays={"a": np.arange(10)}))
    with pytest.raises(ValueError, match="magic"):
        decode_message(b"FLM2" + data[4:])
    for extra in (b"\0", data[-8:]):
        with pytest.raises(ValueError, match="does not match its header"):
            decode_message(data + extra)


def test_pack_refuses_negative_labels():
    """-1 as uint32 is all ones: it would travel as class C-1 (or another in range)."""
    for labels in ([-1, 0], [0, -2]):
        with pytest.raises(ValueError, match=r"must lie in \[0, 4\)"):
            pack_labels(np.array(labels), 4)


def test_a_message_category_is_one_of_three_exactly():
    from fedlabels.comm.message import CATEGORIES, as_category

    assert [as_category(c) for c in CATEGORIES] == list(CATEGORIES)
    for bad in ("", "eval", "Protocol", "protocol ", None, 1):
        with pytest.raises(ValueError, match="is not one of protocol, evaluation, control"):
            as_category(bad)
