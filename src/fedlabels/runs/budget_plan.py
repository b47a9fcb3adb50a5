"""A run's privacy statement before it runs (``fedlabels run --dry-run``,
:func:`fedlabels.api.privacy_plan`): the session built as the simulator builds it, the
server's round-1 checks made (:meth:`~fedlabels.method.base.ServerRole.preflight`), and the
``privacy`` entry a finished run would record, its ε that of every planned release; nothing
is trained, released or written."""

from __future__ import annotations

import time
from contextlib import nullcontext
from typing import Any

from fedlabels.core.randomness import reproducible
from fedlabels.data import Federation
from fedlabels.runs.loop import CommMeter, build_result
from fedlabels.runs.participation import Participation
from fedlabels.runs.session import build_session


def privacy_plan(method: str, federation: Federation, models: list[Any], *, rounds: int,
                 period: int, seed: int, options: Any = None, device: str = "cpu",
                 precision: str = "fp32", participation: float | int | None = None,
                 dropout: float | None = None, deadline: float | None = None,
                 malicious: int = 0, attack: str | None = None,
                 insecure_reproducible_noise: bool = False) -> dict[str, Any]:
    """What a run of ``method`` on ``federation`` (arguments as
    :func:`~fedlabels.engines.inprocess.simulate` takes them) will promise: ``method``,
    ``dataset``, ``clients``, ``rounds`` (as the run takes them), ``n_public`` (|U|) and
    ``privacy``, the result's ``privacy`` entry as it is before round 1 (guarantee, against
    whom, neighbouring relation, the calibrated noise and ``calibrated_by``, what is outside
    the guarantee), its ``epsilon``/``delta`` those of every planned release
    (``planned``: what they are); a refusal the run would make before round 1 is raised."""
    started = time.perf_counter()
    with reproducible(seed) if insecure_reproducible_noise else nullcontext():
        policy = Participation.parse(participation, dropout, deadline)
        session = build_session(method, federation, models, rounds=rounds, period=period,
                                seed=seed, options=options, device=device,
                                precision=precision, participation=policy,
                                malicious=malicious, attack=attack)
        session.server.preflight()  # e.g. DP-FedCT's calibration: a plan beyond ε refused
        meter = CommMeter()
        meter.sent = None  # nothing sent yet: every declared value outside the guarantee
        result = build_result(session.plan, session.server, [], meter,
                              dataset=federation.name, seed=seed, config={},
                              federation=federation.summary(), started=started,
                              noise_from_flag=insecure_reproducible_noise)
    privacy = dict(result.extra["privacy"])
    ledger = getattr(session.server, "ledger", None)
    planned = getattr(ledger, "planned", None)
    if ledger is not None and planned is not None and privacy.get("guarantee") != "none":
        events, what = planned
        privacy.update(ledger.account(events).to_dict())
        privacy["planned"] = what
        if ledger.calibrated_by is not None:
            privacy.setdefault("calibrated_by", ledger.calibrated_by)
        if "epsilon_per_round" in privacy:  # the line on composition counts the plan's
            privacy["rounds_accounted"] = session.rounds
    elif ledger is not None and privacy.get("guarantee") != "none":
        # no plan before round 1 (DP-FedCT with the clients' own s* estimates): its ε is not
        # 0, which the empty ledger says, but unknown until round 1 calibrates the noise
        target = getattr(ledger, "target", None)
        privacy.update(epsilon=None, planned=None, not_planned=(
            "the noise is calibrated in round 1 (to what the clients send then, e.g. their "
            "own sensitivity estimates), so ε is known only once the run starts"
            + (f"; the run keeps it within its target ε = {target:g}"
               if target is not None else "")))
    return {"method": session.method.name, "dataset": federation.name,
            "clients": len(session.clients), "rounds": session.rounds,
            "n_public": len(federation.X_public), "privacy": privacy}
