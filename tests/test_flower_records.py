"""A Flower ``RecordDict`` from the other side is untrusted input: ``from_record_dict`` takes
only what ``to_record_dict`` writes (scalar config, one of the three categories, a fedlabels
header), each fault one line."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import ConfigRecord

from fedlabels.comm import Message
from fedlabels.core.errors import FedLabelsError
from fedlabels.engines.flower.convert import CONFIG, META, from_record_dict, to_record_dict


def _records() -> object:
    return to_record_dict(Message("fedct.train", arrays={"x": np.arange(3)},
                                  config={"round": 1}), cid=2, round=0, seq=1)


def test_records_round_trip() -> None:
    message, meta = from_record_dict(_records())  # type: ignore[arg-type]
    assert (message.kind, message.category, message.config) == ("fedct.train", "protocol",
                                                                 {"round": 1})
    assert np.array_equal(message.arrays["x"], np.arange(3))
    assert meta == {"cid": 2, "round": 0, "seq": 1}


def test_a_list_in_the_config_is_refused() -> None:
    records = _records()
    records.config_records[CONFIG] = ConfigRecord({"round": [1, 2]})  # type: ignore[attr-defined]
    with pytest.raises(FedLabelsError, match="'round' is a list; fedlabels messages carry"):
        from_record_dict(records)  # type: ignore[arg-type]


@pytest.mark.parametrize("category", ["train", "", "evaluate"])
def test_a_category_not_of_fedlabels_is_refused(category: str) -> None:
    records = _records()
    header = dict(records.config_records[META])  # type: ignore[attr-defined]
    records.config_records[META] = ConfigRecord(  # type: ignore[attr-defined]
        {**header, "category": category})
    with pytest.raises(FedLabelsError, match="is not one of protocol, evaluation, control"):
        from_record_dict(records)  # type: ignore[arg-type]


def test_records_without_a_fedlabels_header_are_refused() -> None:
    """A message of another ServerApp or ClientApp: one line, not a KeyError."""
    records = _records()
    del records.config_records[META]  # type: ignore[attr-defined]
    with pytest.raises(FedLabelsError, match="carries no fedlabels header"):
        from_record_dict(records)  # type: ignore[arg-type]
