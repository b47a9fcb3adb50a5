"""The method skeleton in docs/architecture.md runs as written (the docs stay true)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import fedlabels as fl
from fedlabels.cli import main
from fedlabels.core.errors import FedLabelsError
from fedlabels.method.options import OPTION_USERS
from fedlabels.methods import METHODS, register_method

DOC = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"


@pytest.fixture
def echo_method():
    text = DOC.read_text()
    block = re.search(r"## Writing a method.*?```python\n(.*?)```", text, re.DOTALL)
    assert block, "docs/architecture.md lost its method skeleton"
    namespace: dict = {}
    exec(compile(block.group(1), str(DOC), "exec"), namespace)
    register_method(namespace["Echo"]())  # what the entry point does once installed
    yield METHODS["echo"]
    METHODS.pop("echo", None)
    for users in OPTION_USERS.values():
        if "echo" in users:
            users.remove("echo")


def test_skeleton_runs_and_declares_everything(echo_method, breast_cancer_fed):
    result = fl.run("echo", breast_cancer_fed, model="dt", rounds=2, seed=0, eval_every=2,
                    options={"rounds_of_silence": 1})
    assert [r.server for r in result.rounds] == [{}, {"replies": 5.0}]
    assert result.extra["threat_model"]["payloads"][0]["content"] == "hard-labels"
    assert result.bytes_up_per_round()[0][0] == 0 and result.bytes_up_per_round()[0][1] > 0
    with pytest.raises(FedLabelsError, match="did you mean 'rounds_of_silence'"):
        fl.run("echo", breast_cancer_fed, options={"rounds_of_silenc": 1})
    with pytest.raises(FedLabelsError, match=r"rounds_of_silence must lie in \[0, inf\]"):
        fl.run("echo", breast_cancer_fed, options={"rounds_of_silence": -1})


def test_skeleton_state_round_trips(echo_method, breast_cancer_fed):
    from fedlabels.comm import Message
    from fedlabels.learners import as_models
    from fedlabels.runs.session import role_factory

    roles = role_factory("echo", breast_cancer_fed, as_models("dt"), rounds=1, period=1,
                         seed=0)
    first = roles.client(0)
    reply = first.handle(Message("echo.train", config={"steps": 1}))
    second = roles.client(0)  # a fresh learner: the state must be enough
    second.load_state_dict(first.state_dict())
    assert second.state_dict() == {"fitted": True, "answered": 1}
    again = second.handle(Message("evaluate", category="evaluation"))
    assert again.config == first.handle(Message("evaluate", category="evaluation")).config
    assert reply.kind == "echo.labels"


def test_skeleton_is_listed_by_the_cli(echo_method, capsys):
    assert main(["methods", "echo"]) == 0
    assert "rounds_of_silence" in capsys.readouterr().out
