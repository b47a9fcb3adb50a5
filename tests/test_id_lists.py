"""Client ids in a message's config (``comm/id_lists.py``): the group reading the secure
sums use and the as-written reading XCLP's client pairs with its row ranges."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from fedlabels.comm.id_lists import listed, members, members_text


def test_a_group_is_read_once_each_in_order_a_list_as_written():
    assert listed("2,0,2") == [2, 0, 2] and members("2,0,2") == [0, 2]
    assert listed("") == members("") == [] and members_text([]) == ""
    rng = np.random.default_rng(0)
    for _ in range(50):
        group = {int(c) for c in rng.integers(0, 40, size=rng.integers(1, 10))}
        text = members_text(group)
        assert text == ",".join(map(str, sorted(group)))
        # what an honest server writes reads alike either way
        assert members(text) == listed(text) == sorted(group)


def test_the_secure_sums_view_digest_is_that_of_its_text():
    """The digest a secure member binds its masks to, byte for byte (the group text moved
    from secure/masked_sum.py to comm/id_lists.py)."""
    pytest.importorskip("cryptography")
    from fedlabels.secure.masked_sum import group_view

    expected = hashlib.sha256(b"fedlabels-secagg-view|3|1|0,2,7").digest()
    assert group_view(3, 1, [7, 2, 0]) == group_view(3, 1, {0, 2, 7}) == expected
