"""The deployed ServerApp's end on a run that stops (every site lost or refusing, a site's
data error): one line through Flower's exit, not a Python traceback."""
from __future__ import annotations

from typing import Any

import pytest

from fedlabels.core.errors import FedLabelsError
from fedlabels.runs.lost import ClientsLost

pytest.importorskip("flwr")
from flwr.supercore.exit import ExitCode

from fedlabels.engines.flower import server_app


def _exits(monkeypatch: pytest.MonkeyPatch, error: BaseException) -> list[tuple[int, Any]]:
    """Run ``main`` with a run_server that raises ``error``; Flower's exit recorded."""
    def stop(grid: Any, context: Any) -> None:
        raise error

    calls: list[tuple[int, Any]] = []

    def flwr_exit(code: int, message: str | None = None, **_: Any) -> None:
        calls.append((code, message))
        raise SystemExit(1)  # as Flower's does, after its exit handlers

    monkeypatch.setattr(server_app, "run_server", stop)
    monkeypatch.setattr(server_app, "flwr_exit", flwr_exit, raising=False)
    with pytest.raises(SystemExit):
        server_app.main(None, None)  # type: ignore[arg-type]
    return calls


def test_a_run_every_site_refused_ends_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """`flwr run --stream` of a DP-FedCT run whose sites' plans refused its noise showed
    Flower's 'ServerApp raised an exception' and a 20-line traceback through the round
    loop, ending in `fedlabels.runs.lost.ClientsLost: round 1: every client was lost ...`."""
    line = ("round 1: every client was lost (client 0 (SuperNode 7): the ClientApp raised: "
            "refused: parameters (the site's log has the details)).")
    calls = _exits(monkeypatch, ClientsLost(line))
    assert calls == [(ExitCode.SERVERAPP_EXCEPTION, f"fedlabels: error: {line}")]
    assert "\n" not in calls[0][1]


def test_a_site_data_error_at_the_hello_ends_in_one_line(
        monkeypatch: pytest.MonkeyPatch) -> None:
    line = ("SuperNode setup failed: node 7: the ClientApp raised: error: data (the site's "
            "log has the details)")
    assert _exits(monkeypatch, FedLabelsError(line)) == [
        (ExitCode.SERVERAPP_EXCEPTION, f"fedlabels: error: {line}")]


def test_a_bug_keeps_its_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only fedlabels' own errors, which say what is wrong, end in one line: anything
    else propagates to Flower, which logs it with its traceback."""
    def stop(grid: Any, context: Any) -> None:
        raise KeyError("bug")

    monkeypatch.setattr(server_app, "run_server", stop)
    with pytest.raises(KeyError):
        server_app.main(None, None)  # type: ignore[arg-type]
