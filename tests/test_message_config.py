"""A deviating server's config values that are not of a field's kind or range: each
client refuses them (``refused: parameters``, naming the field), never ``error: internal``."""

from __future__ import annotations

import pytest

from deviating_server import drive
from fedlabels.api import load_federation
from fedlabels.comm import Message
from fedlabels.core.errors import ParameterRefusal, error_category
from fedlabels.data import Federation
from test_deviating_server import _role_factory, honest
from test_method_contract import CLIENTS, DATASET, MLP, SEED, Case


class _TorchCase(Case):
    """A case on the contract's torch MLP (vote weights need one)."""

    @property
    def model(self) -> str:
        return MLP


@pytest.fixture(scope="module")
def federation() -> Federation:
    return load_federation(DATASET, clients=CLIENTS, seed=SEED)


def _changed(message: Message, **config: object) -> Message:
    return Message(message.kind, arrays=dict(message.arrays),
                   config={**message.config, **config}, category=message.category)


def test_fedct_refuses_zero_voters(federation: Federation) -> None:
    """Until 2026-11-30 ``voters = 0`` beside the top votes divided by zero: infinite loss
    weights on every pseudo-label, no error."""
    case = _TorchCase("fedct", {"vote_power": 1.0})
    traces, _ = honest(case, federation)
    trace = traces[0]
    at = next(i for i, m in enumerate(trace) if "top_votes" in m.arrays)
    for voters in (0, -1, CLIENTS + 1):
        role = _role_factory(case, federation)(0)
        assert not drive(role, trace[:at])
        with pytest.raises(ParameterRefusal, match="voters") as refused:
            role.handle(_changed(trace[at], voters=voters))
        assert error_category(refused.value).startswith("refused: parameters (voters ")
    role = _role_factory(case, federation)(0)
    assert not drive(role, trace[:at + 1])  # the honest count is taken
