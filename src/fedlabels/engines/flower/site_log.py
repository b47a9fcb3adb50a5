"""What a site's operator reads in its log about each message it answered: which values
left the site, whether the method's declared guarantee covers each, and what the site's own
ledger says after it.

One line per message, at INFO on the ``fedlabels.site`` logger, which the site's pinned
executor prints on its stderr (:func:`log_to_stderr`); refusals and errors are logged there
too, at ERROR (:mod:`.client_app`). Before, a site's log said nothing about a message it
answered: an operator could not tell what the site had sent, nor under which guarantee,
nor how far a run had gone.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable, Mapping
from typing import Any

from fedlabels.comm import Message as FLMessage
from fedlabels.method.threat import CONTENTS, ThreatModel

SITE_LOGGER = "fedlabels.site"

#: how a payload's ``rows`` read in the log
_ROWS = {"public": " on U", "queries": " on the server's queries of U",
         "subset": " on the server's subset of U", "own": " about the site's own points",
         "none": ""}
#: a payload's note (before its first ";") stands for what it is when at most this long
_SHORT = 60
#: where a site's budget came from, as :func:`~.site_privacy.ledger_report` names it
_BUDGET_FROM = {"privacy-plan": "one run of its privacy-plan",
                "ledger-epsilon": "its ledger-epsilon"}


def log_to_stderr() -> None:
    """Print the site's log lines (INFO and above) on stderr, each after its local time,
    once per process: the site's executor calls it in each task process (without a handler,
    Python prints warnings and errors only, without a time)."""
    log = logging.getLogger(SITE_LOGGER)
    if not any(getattr(h, "fedlabels_site", False) for h in log.handlers):
        handler = logging.StreamHandler(sys.stderr)
        # the time: a long run's progress, and when a refusal happened (Flower's own
        # lines in the same log carry none)
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s",
                                               datefmt="%Y-%m-%d %H:%M:%S"))
        handler.fedlabels_site = True  # type: ignore[attr-defined]
        log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False


def sent_values(replies: Iterable[FLMessage | None], threat: ThreatModel) -> str:
    """Each value in ``replies`` in plain words: what it is, about which rows, and whether
    the method's guarantee covers it (by its declared :class:`~fedlabels.method.threat
    .Payload`)."""
    words = []
    for reply in replies:
        if reply is None:
            continue
        keys = [("arrays", k) for k in reply.arrays] + [("config", k) for k in reply.config]
        for source, key in keys:
            declared = threat.payload(reply.kind, key, source)
            if declared is None:
                words.append(f"{key} (not declared by the method's threat model)")
                continue
            said = declared.note.split(";")[0]  # a short note says it best ("test accuracy")
            what = (said if said and len(said) <= _SHORT else
                    CONTENTS[declared.content].split(" (")[0]) + _ROWS[declared.rows]
            cover = ("covered by the method's guarantee" if declared.covered else
                     "not protected: the method states no guarantee"
                     if threat.guarantee == "none" else "outside the method's guarantee")
            words.append(f"{key} ({what}; {cover})")
    return "; ".join(words) or "nothing"


def ledger_words(figures: Mapping[str, Any] | None) -> str:
    """The site's ledger after the message (:func:`~.site_privacy.ledger_report` with its
    lifetime figures), or "" where the message charged nothing."""
    if not figures:
        return ""
    text = (f" Ledger: this run {figures['releases']} release(s), ε = "
            f"{figures['epsilon']:.4g} (δ = {figures['delta']:.3g})")
    if "ledger_epsilon" in figures:
        budget, source = figures.get("budget"), figures.get("budget_from")
        limit = ("no budget set (recorded only)" if budget is None else
                 f"of its budget {budget:.4g} ({_BUDGET_FROM.get(str(source), source)})")
        text += (f"; lifetime on this data {figures['ledger_releases']} release(s), ε = "
                 f"{figures['ledger_epsilon']:.4g} (δ = {figures['ledger_delta']:.3g}) "
                 f"{limit}")
    return text + "."


def answered(who: str, seq: int, rnd: int, kind: str, replies: Iterable[FLMessage | None],
             threat: ThreatModel, figures: Mapping[str, Any] | None) -> str:
    """The line for message ``seq`` (round ``rnd``, a ``kind`` request) answered with
    ``replies`` (the reply and an attached evaluation's); a run's first of a method without
    a guarantee says so."""
    line = (f"{who}: round {rnd}, message {seq} ({kind}): sent "
            f"{sent_values(replies, threat)}.{ledger_words(figures)}")
    if seq == 1 and threat.guarantee == "none":  # a run's first message: say it once
        # (a method with one says against whom per mode, in the run's result: the declared
        # party is the default mode's, e.g. not the server for DP-FedAvg, which its
        # aggregation=secure mode is protected against too)
        line += " The method states no guarantee."
    return line
