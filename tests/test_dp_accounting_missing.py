"""Without dp-accounting (the ``dp`` extra) every Gaussian accountant refuses in one line
that says what needs it in general and how to install it, whichever asked: the
continuous Gaussian's, the discrete Gaussian's and a secure sum's."""

from __future__ import annotations

import sys
from collections.abc import Callable

import pytest

from fedlabels.core.errors import FedLabelsError
from fedlabels.privacy.discrete_accounting import discrete_gaussian_epsilon
from fedlabels.privacy.distributed_discrete import distributed_discrete_epsilon
from fedlabels.privacy.gaussian_calibration import calibrate_gaussian


@pytest.mark.parametrize("ask", [
    lambda: calibrate_gaussian(1.5, 1e-5, 0.3, 3),
    lambda: discrete_gaussian_epsilon(1.5, 0.3, 3, 1e-5),
    lambda: distributed_discrete_epsilon(1.5, 3, 1.0, 10, 2, 1e-5),
], ids=["continuous", "discrete", "secure sum"])
def test_a_missing_dp_accounting_is_named_for_every_gaussian_accountant(
        ask: Callable[[], object], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "dp_accounting", None)  # import raises ImportError
    with pytest.raises(FedLabelsError) as err:
        ask()
    message = str(err.value)
    assert "\n" not in message and "pip install 'fedlabels[dp]'" in message
    for what in ("Gaussian mechanism", "DP-FedAvg", "DP-SGD", "--noise discrete",
                 "secure aggregation"):
        assert what in message
