"""A site's error reaches the server as a category, never its text (which may describe the
site's data, e.g. the classes present); the site's log has the text."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from fedlabels.core.errors import (
    BudgetRefusal,
    FedLabelsError,
    ParameterRefusal,
    RefusedError,
    error_category,
)
from fedlabels.engines.flower.loopback import loopback_deployment, server_context
from fedlabels.engines.flower.server_app import run_server
from fedlabels.methods.fedct.fedct import FedCTClient
from fedlabels.runs.config import RunConfig

SECRET = "classes present at this site: [0, 3] (12 and 1 records)"


def test_the_server_learns_the_category_not_the_text(tmp_path: Path, monkeypatch,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    real = FedCTClient.train

    def failing(self, message):
        if self.cid == 1:
            raise FedLabelsError(f"client 1 cannot train: {SECRET}")
        return real(self, message)

    monkeypatch.setattr(FedCTClient, "train", failing)
    cfg = RunConfig(method="fedct", dataset="breast_cancer", clients=4, model="dt", rounds=2,
                    seed=0, options={"quorum": 1.0})
    prepared, grid = loopback_deployment(cfg, tmp_path / "sites")
    with caplog.at_level(logging.ERROR, logger="fedlabels.site"):
        result = run_server(grid, server_context(prepared.spec))
    assert result is not None
    lost = result.extra["deployment"]["lost"]
    assert list(lost) == ["1"]
    reason = lost["1"]["reason"]
    assert "error: data" in reason and SECRET not in reason and "[0, 3]" not in reason
    assert SECRET in caplog.text  # the site keeps the full text
    assert SECRET not in Path(prepared.spec.output).read_text()


@pytest.mark.parametrize(("error", "category"), [
    (BudgetRefusal("x"), "refused: budget"), (ParameterRefusal("x"), "refused: parameters"),
    (RefusedError("x"), "refused: message"), (FedLabelsError("x"), "error: data"),
    (KeyError("secret"), "error: internal")])
def test_categories(error: Exception, category: str) -> None:
    assert error_category(error) == category


def test_a_refused_option_is_named_with_the_sites_value_not_the_text() -> None:
    """A refusal of an option the server's message states otherwise names the option and
    the client's own value (a value of its options), not the text, also after a worker
    process sent it back (pickled)."""
    import pickle

    from fedlabels.core.errors import refuse_other_value

    with pytest.raises(ParameterRefusal) as caught:
        refuse_other_value(3, "retries", 1, 0, read=int)
    assert error_category(caught.value) == "refused: parameters (the site's retries is 0)"
    assert error_category(pickle.loads(pickle.dumps(caught.value))) == \
        "refused: parameters (the site's retries is 0)"
    with pytest.raises(ParameterRefusal, match="asked for bits = None"):  # a key left out
        refuse_other_value(3, "bits", None, 20, read=int)
