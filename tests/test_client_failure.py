"""A client whose handler raises stops the run, saying which client, round, message kind and
learner, with the original exception as ``__cause__`` (not a lost client: that would hide a
programming error); the CLI says it in one line (exit 2) where the learner or data is at
fault and keeps the traceback for a fault in fedlabels. One process and worker processes
report it alike."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.tree import DecisionTreeClassifier

import fedlabels as fl
from conftest import cli_one_line_error
from fedlabels.cli import main
from fedlabels.core.errors import ClientError


class Label3(DecisionTreeClassifier):
    """Predicts class 3 of wine's 0..2."""

    def predict(self, X, check_input=True):  # type: ignore[no-untyped-def]
        return np.full(len(X), 3)


class Broken(DecisionTreeClassifier):
    """Fits, then fails to predict."""

    def predict(self, X, check_input=True):  # type: ignore[no-untyped-def]
        raise ZeroDivisionError("no predictions today")


@pytest.fixture(scope="module")
def wine() -> fl.Federation:
    return fl.load_federation("wine", clients=4, seed=0)


def _failure(fed: fl.Federation, first: object, workers: int) -> ClientError:
    with pytest.raises(ClientError) as caught:
        fl.run("fedct", fed, model=[first] + [DecisionTreeClassifier()] * 3, rounds=2,
               seed=0, progress=False, workers=workers)
    return caught.value


def test_a_learner_predicting_a_class_the_data_lacks_is_named_with_client_and_round(wine):
    said = []
    for workers in (1, 2):
        exc = _failure(wine, Label3(), workers)
        assert not exc.internal  # the learner's fault
        assert type(exc.__cause__) is not ClientError and isinstance(exc.__cause__, ValueError)
        assert "labels must lie in [0, 3)" in str(exc.__cause__)
        said.append(str(exc))
    assert said[0] == said[1]  # worker processes report it as one process does
    assert said[0] == ("client 0 failed in round 1 answering the server's 'fedct.train' "
                       "message: its learner Label3 produced what cannot be sent: labels "
                       "must lie in [0, 3); got range [3, 3].")


def test_your_learners_own_exception_names_its_class_and_line(wine):
    said = []
    for workers in (1, 2):
        exc = _failure(wine, Broken(), workers)
        assert not exc.internal and isinstance(exc.__cause__, ZeroDivisionError)
        said.append(str(exc))
    assert said[0] == said[1]
    assert said[0].startswith("client 0 failed in round 1 answering the server's "
                              "'fedct.train' message: (learner Broken) ZeroDivisionError: no "
                              "predictions today (")
    assert "test_client_failure.py, line" in said[0]


def test_the_cli_says_a_learners_failure_in_one_line(tmp_path, capsys, monkeypatch):
    def predict(self, X, check_input=True):  # type: ignore[no-untyped-def]
        raise ZeroDivisionError("no predictions today")

    monkeypatch.setattr(DecisionTreeClassifier, "predict", predict)
    err = cli_one_line_error(capsys, ["run", "--dataset", "wine", "--model", "dt",
                                      "--clients", "3", "--rounds", "1", "--no-progress",
                                      "--output", str(tmp_path / "r.json")])
    assert err.startswith("fedlabels: error: client 0 failed in round 1 answering the "
                          "server's 'fedct.train' message: (learner DecisionTreeClassifier) "
                          "ZeroDivisionError: no predictions today ("), err


def test_a_fault_in_fedlabels_keeps_its_traceback(tmp_path, monkeypatch):
    import math

    import fedlabels.methods.fedct.fedct as fedct

    # a bug in fedlabels' own code: a call that raises without leaving it (a C builtin)
    monkeypatch.setattr(fedct, "pack_labels", math.gcd)
    for workers in ("1", "2"):
        with pytest.raises(ClientError) as caught:  # not exit 2: the traceback is shown
            main(["run", "--dataset", "wine", "--model", "dt", "--clients", "3", "--rounds",
                  "1", "--no-progress", "--workers", workers,
                  "--output", str(tmp_path / f"r{workers}.json")])
        exc = caught.value
        assert exc.internal and isinstance(exc.__cause__, TypeError)
        assert str(exc).startswith("client 0 failed in round 1 answering the server's "
                                   "'fedct.train' message: (learner DecisionTreeClassifier) "
                                   "TypeError: ")
        assert str(exc).endswith("This is a fault in fedlabels itself: please report it "
                                 "with the traceback.")


def _raised_by(code: str, filename: str, **names: object) -> BaseException:
    """The exception ``code`` (compiled as if from ``filename``) raises, its traceback
    starting in that code (this test's own frame, outside fedlabels, left out)."""
    scope = dict(names)
    try:
        exec(compile(code, filename, "exec"), scope)
    except BaseException as exc:  # the exception under test
        assert exc.__traceback__ is not None
        return exc.with_traceback(exc.__traceback__.tb_next)
    raise AssertionError("the code raised nothing")


class _Role:
    def __init__(self, learner: object) -> None:
        self.learner = learner


def test_fedlabels_own_errors_and_interrupts_pass_through_unwrapped():
    from fedlabels.core.errors import FedLabelsError
    from fedlabels.engines.client_failure import client_failure

    for exc in (FedLabelsError("client 2: its data is empty."), KeyboardInterrupt()):
        assert client_failure(exc, 2, 0, "fedct.train", _Role(None)) is exc


def test_a_fedlabels_learners_own_method_failing_is_fedlabels_fault():
    """A learner class of fedlabels' own whose method raises inside fedlabels' files is a
    fault of fedlabels (traceback kept), though ``self`` is the role's learner."""
    import os

    from fedlabels.engines.client_failure import _PACKAGE, client_failure

    inside = os.path.join(_PACKAGE, "learners", "imagined.py")
    exc = _raised_by("class Own:\n"
                     "    __module__ = 'fedlabels.learners.imagined'\n"
                     "    def predict(self):\n"
                     "        return 1 / 0\n"
                     "learner = Own()\n"
                     "learner.predict()\n", inside)
    learner = exc.__traceback__.tb_next.tb_frame.f_locals["self"]  # type: ignore[union-attr]
    failure = client_failure(exc, 0, 1, "fedct.train", _Role(learner))
    assert isinstance(failure, ClientError) and failure.internal
    assert failure.__cause__ is exc and "round 2" in str(failure)


def test_a_fault_in_generated_code_is_fedlabels_own():
    """Frames of generated code (``<string>``: a dataclass's ``__setattr__``, ...) are no
    evidence of the user's code. ``os.path.abspath`` made ``<string>`` a path under the
    working directory, so the check for ``<`` never matched and a frozen message written to
    by fedlabels itself was reported as the user's fault, without its traceback."""
    from dataclasses import FrozenInstanceError

    from fedlabels.comm import Message
    from fedlabels.engines.client_failure import client_failure

    message = Message("fedct.train")
    try:
        message.kind = "other"  # type: ignore[misc]
    except FrozenInstanceError as exc:
        assert exc.__traceback__ is not None
        raised = exc.with_traceback(exc.__traceback__.tb_next)  # from the generated frame on
    assert raised.__traceback__ is not None
    assert raised.__traceback__.tb_frame.f_code.co_filename.startswith("<")
    failure = client_failure(raised, 0, -1, "hello", _Role(None))
    assert isinstance(failure, ClientError) and failure.internal
    assert "between rounds" in str(failure)


def test_code_typed_at_a_prompt_is_the_users():
    """A learner's code typed at the Python prompt (``<stdin>``) is the user's, as a file of
    theirs is: one line, no request to report a fedlabels bug."""
    from fedlabels.engines.client_failure import client_failure

    exc = _raised_by("def forward():\n    raise ValueError('shapes')\nforward()\n", "<stdin>")
    failure = client_failure(exc, 1, 0, "fedct.train", _Role(None))
    assert isinstance(failure, ClientError) and not failure.internal
    assert "This is a fault in fedlabels" not in str(failure)
