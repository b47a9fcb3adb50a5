"""A client's handler that raised, as the run reports it: which client, round, message kind
and learner, and whether the fault is the user's (its learner or data: one line, CLI exit 2)
or fedlabels' own (the CLI keeps the traceback). Every engine of the simulator (one process,
worker processes, clients trained together) reports it alike; the client is not lost (a
programming error must stop the run, not hide in a lost client)."""

from __future__ import annotations

import os
import sysconfig
from typing import Any

from fedlabels.core.errors import ClientError, FedLabelsError, LearnerOutputError, raised_at

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # src/fedlabels
_LIBRARIES = tuple({os.path.abspath(sysconfig.get_paths()[k])
                    for k in ("stdlib", "platstdlib", "purelib", "platlib")})
#: file names of code Python generates (a dataclass's methods, importlib, numpy's dispatch):
#: no sign of the user's code, unlike ``<stdin>`` or a notebook cell's ``<ipython-input-...>``
_GENERATED = ("<string>", "<frozen ", "<__array_function__")


def client_failure(exc: BaseException, cid: int, rnd: int, kind: str,
                   role: Any) -> BaseException:
    """What the run raises for client ``cid``'s handler raising ``exc`` while answering a
    ``kind`` message of round ``rnd`` (0-based; < 0: between rounds): a
    :class:`~fedlabels.core.errors.ClientError` whose ``__cause__`` is ``exc``. An
    interrupt, and fedlabels' own one-line errors (a refusal, a check of the user's input:
    they name their client already), are raised as they are."""
    if not isinstance(exc, Exception) or isinstance(exc, FedLabelsError):
        return exc
    learner = getattr(role, "learner", None)
    internal = not _users_fault(exc, learner)
    where = f"round {rnd + 1}" if rnd >= 0 else "between rounds"
    name = type(learner).__name__
    if isinstance(exc, LearnerOutputError):
        what = f"its learner {name} produced what cannot be sent: {exc}"
    else:
        what = ("" if learner is None else f"(learner {name}) ") + raised_at(exc)
    bug = (" This is a fault in fedlabels itself: please report it with the traceback."
           if internal else "")
    return ClientError(f"client {cid} failed in {where} answering the server's {kind!r} "
                       f"message: {what}.{bug}", internal=internal, original=exc)


def _users_fault(exc: BaseException, learner: Any) -> bool:
    """Whether ``exc`` comes from the user's learner or data: what the learner produced
    cannot be sent, or the traceback runs through a method of a learner that fedlabels did
    not write (a scikit-learn estimator, your own class) or through code outside fedlabels
    and the installed libraries (your module's network)."""
    if isinstance(exc, LearnerOutputError):
        return True
    own = learner is not None and type(learner).__module__.split(".")[0] == "fedlabels"
    tb = exc.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        if learner is not None and not own and frame.f_locals.get("self") is learner:
            return True
        name = frame.f_code.co_filename  # made absolute, "<string>" would be a user's path
        if not name.startswith(_GENERATED) \
                and not os.path.abspath(name).startswith((_PACKAGE, *_LIBRARIES)):
            return True
        tb = tb.tb_next
    return False


__all__ = ["client_failure"]
