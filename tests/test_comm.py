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
