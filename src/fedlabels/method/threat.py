"""A method's declared threat model: who is trusted, what leaves a client, what is covered.

Every :class:`~fedlabels.method.base.Method` carries a :class:`ThreatModel` as a class
attribute (subclasses inherit and may replace it). It lists each value a client sends in a
protocol message (:class:`Payload`: the message kind, the array or config key, what the
value *is*, which public points its rows are about, and whether the method's stated
guarantee covers it). The audit reads these declarations to know what an attacker holds;
the contract test checks that every value a client actually sends is declared.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass, field
from typing import Any

#: what a payload can be; the audit attacks the first five
CONTENTS = {
    "hard-labels": "bit-packed hard labels (ceil(log2 C) bits each)",
    "noisy-one-hot": "bit-packed one-hot rows after bitwise randomized response",
    "soft-labels": "class probabilities (float16 or float32)",
    "weights": "the client's model parameters after local training",
    "update": "the client's clipped model update (local weights minus start weights)",
    "votes": "hard-label teacher votes (bit-packed), as 'hard-labels' but on queries",
    "crypto": "ciphertexts, masked shares, public keys or sealed peer messages",
    "lsh-bits": "plaintext SimHash bits of the client's points",
    "indices": "indices of the client's own points (e.g. which are labelled)",
    "size": "the client's number of examples",
    "metric": "a statistic of the client's model or data (accuracy, norm, count)",
    "quantised-predictions": "a regression model's predictions on U, b-bit quantised over the "
                             "public target range",
    "control": "protocol bookkeeping with no data-dependent content",
}

#: which public points the rows of a payload are about
ROWS = ("public", "queries", "subset", "own", "none")

#: what a run's clients sent: (message kind, ``arrays`` or ``config``, key) of every reply
Sent = Set[tuple[str, str, str]]

GUARANTEES = ("formal", "conditional", "none")


@dataclass(frozen=True)
class Payload:
    """One value a client sends: ``message`` kind, ``key`` of an array or config entry.

    ``content`` is what it is (a key of :data:`CONTENTS`), ``rows`` which public rows it is
    about (one of :data:`ROWS`), ``covered`` whether the method's guarantee covers it,
    ``source`` ``arrays`` or ``config`` (where ``key`` is), ``note`` a remark for the result.
    """

    message: str
    key: str
    content: str
    rows: str = "none"
    covered: bool = False
    source: str = "arrays"  # "arrays" or "config"
    note: str = ""

    def __post_init__(self) -> None:
        if self.content not in CONTENTS:
            raise ValueError(f"payload content {self.content!r} not in {sorted(CONTENTS)}")
        if self.rows not in ROWS:
            raise ValueError(f"payload rows {self.rows!r} not in {ROWS}")
        if self.source not in ("arrays", "config"):
            raise ValueError(f"payload source {self.source!r}")

    def sent_in(self, sent: Sent) -> bool:
        """Whether a run's replies (``sent``) held this value."""
        return any(kind == self.message and source == self.source and _key_matches(self.key, key)
                   for kind, source, key in sent)

    def to_dict(self) -> dict[str, Any]:
        out = {"message": self.message, "key": self.key, "source": self.source,
               "content": self.content, "rows": self.rows,
               "covered_by_guarantee": self.covered}
        if self.note:
            out["note"] = self.note
        return out


@dataclass(frozen=True)
class ThreatModel:
    """What a method assumes and protects.

    ``adversary`` is who attacks and ``sees`` what it sees of a client, in words; ``view``
    names the attacker's view for the audit (e.g. ``hard-labels-on-queries``);
    ``guarantee`` is ``formal``, ``conditional`` (on ``assumptions``) or ``none``;
    ``against`` is the party the guarantee is stated against; ``neighbouring`` the
    neighbouring relation (None without a guarantee). ``outside`` names values the server
    computes from unprotected data and publishes (round metrics, result entries), each with
    a one-line reason; with the payloads that are not ``covered`` they form the result's
    ``privacy.outside_guarantee``. A method whose modes publish different values declares
    none here and has each mode's server list its own (:func:`outside_entries`, under
    ``privacy.outside_guarantee`` of its ``result_extra``), so a result never names a value
    it does not publish.
    """

    view: str
    adversary: str
    sees: str
    guarantee: str = "none"
    against: str = ""
    neighbouring: str | None = None
    assumptions: tuple[str, ...] = ()
    payloads: tuple[Payload, ...] = field(default=())
    outside: tuple[tuple[str, str], ...] = field(default=())

    def __post_init__(self) -> None:
        if self.guarantee not in GUARANTEES:
            raise ValueError(f"guarantee {self.guarantee!r} not in {GUARANTEES}")

    def payload(self, message: str, key: str, source: str = "arrays") -> Payload | None:
        """The declaration of ``key`` in a client message of kind ``message``.

        A declared key may contain ``{peer}``, which matches a client id (e.g. ``to_{peer}``
        declares ``to_0``, ``to_1``, ...: a value addressed to, or about, another client).
        """
        for p in self.payloads:
            if p.message == message and p.source == source and _key_matches(p.key, key):
                return p
        return None

    def to_dict(self) -> dict[str, Any]:
        return {"view": self.view, "adversary": self.adversary, "sees": self.sees,
                "guarantee": self.guarantee, "against": self.against,
                "neighbouring": self.neighbouring, "assumptions": list(self.assumptions),
                "payloads": [p.to_dict() for p in self.payloads]}

    def as_run(self, privacy: Mapping[str, Any], sent: Sent | None) -> dict[str, Any]:
        """The declaration as one run instantiated it (a result's ``threat_model``): the
        guarantee, its party, the neighbouring relation, the assumptions, and the adversary and
        what it sees where given, of the run's ``privacy`` (which a server refines per run:
        DP-FedCT's depend on its options; secure aggregation's server sees masked values), and
        each payload marked ``sent`` where the run's ``sent`` values are known."""
        out = self.to_dict()
        # a mode whose server sees other values than the method's default (secure
        # aggregation: masked vectors and a sum) states its own adversary and view
        out["adversary"] = privacy.get("adversary") or self.adversary
        out["sees"] = privacy.get("sees") or self.sees
        out["guarantee"] = privacy.get("guarantee", self.guarantee)
        out["against"] = privacy.get("guarantee_against") or self.against
        out["neighbouring"] = privacy.get("neighbouring", self.neighbouring)
        if privacy.get("assumptions"):
            said = privacy["assumptions"]  # one str in state saved before 2026-11-28
            out["assumptions"] = [said] if isinstance(said, str) else list(said)
        if sent is not None:
            for declared, entry in zip(self.payloads, out["payloads"], strict=True):
                entry["sent"] = declared.sent_in(sent)
        return out

    def outside_guarantee(self, sent: Sent | None = None) -> list[dict[str, str]]:
        """Values a party outside the mechanism sees unprotected: name and reason each;
        of the payloads, those in ``sent`` (a run's replies, see :class:`Sent`) where given,
        else every one declared."""
        uncovered = [{"name": f"{p.message}:{p.key}",
                      "reason": p.note or f"{CONTENTS[p.content]}, sent without the mechanism"}
                     for p in self.payloads
                     if not p.covered and (sent is None or p.sent_in(sent))]
        return [*uncovered, *outside_entries(self.outside)]

    def privacy(self, sent: Sent | None = None) -> dict[str, Any]:
        """The declared part of a result's ``privacy`` entry (a server refines it per run).

        ``guarantee`` is ``formal``, ``conditional`` (on ``conditional_on``) or ``none``
        (with a ``reason``); ``guarantee_against`` the party, ``neighbouring`` the relation;
        ``outside_guarantee`` see :meth:`outside_guarantee`.
        """
        if self.guarantee == "none":
            return {"guarantee": "none", "reason": NO_MECHANISM, "guarantee_against": None,
                    "neighbouring": self.neighbouring}
        out: dict[str, Any] = {"guarantee": self.guarantee, "guarantee_against": self.against,
                               "neighbouring": self.neighbouring}
        if self.guarantee == "conditional":
            out["conditional_on"] = "; ".join(self.assumptions)
        out["outside_guarantee"] = self.outside_guarantee(sent)
        return out


def outside_entries(pairs: Iterable[tuple[str, str]]) -> list[dict[str, str]]:
    """(name, reason) pairs as ``privacy.outside_guarantee`` entries."""
    return [{"name": name, "reason": why} for name, why in pairs]


NO_MECHANISM = "no differential-privacy mechanism"

#: what a result records from the clients' raw data beside the run (the federation summary)
RECORDED_OUTSIDE = {
    "client_sizes": "each client's number of records, from its raw data, kept in the result",
    "client_class_counts": "each client's label counts, from its raw data, kept in the result",
    "unlabeled_shift": "U-vs-private shift measures: label_tv from the clients' pooled label "
                       "counts, feature_smd from their pooled feature means and spreads, "
                       "kept in the result",
    "test_texts_seen": "how many test texts also occur in the clients' private texts or U, "
                       "from their raw data, kept in the result",
}


def recorded_outside(federation: Mapping[str, Any]) -> list[dict[str, str]]:
    """The ``outside_guarantee`` entries of the raw-data statistics ``federation`` holds."""
    return [{"name": f"federation.{key}", "reason": why}
            for key, why in RECORDED_OUTSIDE.items() if key in federation]


def merge_privacy(declared: dict[str, Any],
                  *refinements: dict[str, Any] | None) -> dict[str, Any]:
    """``declared`` (:meth:`ThreatModel.privacy`) refined by a run's own entries.

    Later entries replace earlier ones, except ``outside_guarantee``, whose lists are joined
    (one entry per name); ``conditional_on`` is dropped unless the guarantee is conditional.
    """
    out = dict(declared)
    for refinement in refinements:
        if not refinement:
            continue
        outside = list(out.get("outside_guarantee") or [])
        out.update(refinement)
        names = {o["name"] for o in outside}
        outside += [o for o in refinement.get("outside_guarantee") or [] if o["name"] not in names]
        if outside:
            out["outside_guarantee"] = outside
    if out.get("guarantee") != "conditional":
        out.pop("conditional_on", None)
    return out


def _key_matches(declared: str, key: str) -> bool:
    if "{peer}" not in declared:
        return declared == key
    pattern = re.escape(declared).replace(re.escape("{peer}"), r"\d+")
    return re.fullmatch(pattern, key) is not None


HONEST_BUT_CURIOUS_SERVER = ("honest-but-curious server that follows the protocol and does "
                             "not collude with clients")

#: a server that may also choose the public set U (query-based attacks insert points into U)
SERVER_CHOOSING_U = HONEST_BUT_CURIOUS_SERVER + "; it may choose the public set U"

#: a server that does not follow the protocol; a method names it only where the
#: deviating-server harness (tests/test_deviating_server.py) shows its clients hold
DEVIATING_SERVER = ("a server that may deviate from the protocol: it may choose the public "
                    "set U, ask for less noise or more releases than a client's own options "
                    "plan, send unplanned or repeated messages in any order, and give "
                    "clients inconsistent views; it does not collude with clients")

#: the evaluation reply every client role sends (simulator/deployment bookkeeping)
EVALUATION_PAYLOADS = (
    Payload("evaluate.reply", "accuracy", "metric", source="config",
            note="test accuracy for the run record; outside any guarantee"),
    Payload("evaluate.reply", "rmse", "metric", source="config",
            note="regression: test RMSE for the run record; outside any guarantee"),
    Payload("evaluate.reply", "r2", "metric", source="config",
            note="regression: test R² for the run record; outside any guarantee"),
    Payload("evaluate.declined", "declined", "control", source="config", covered=True,
            note="a Flower site whose node config says evaluate=false: no score, only that "
                 "setting"),
)
