"""Threat models: what an honest-but-curious server receives from each method.

The attacker is the server (App. E.1 of the FedCT paper): it follows the protocol, does not
collude, and tries to infer whether a record was in a client's private data from exactly the
messages that client sends it. It may choose the public set U (query-based threat models:
it slips the audit's query set into U) and it trains reference / shadow models on its own
data from the clients' distribution. :func:`extract_observations` turns recorded messages into
what the attacks consume: probabilities or hard labels of the client on the query set Q.
These are the views of the default threat model, ``forged-u``; :mod:`.adversaries` derives
the views of the others (fixed-u, released-model, curious-client) from them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedlabels.audit.recorder import Exchange
from fedlabels.comm import unpack_labels
from fedlabels.core.errors import FedLabelsError
from fedlabels.learners import build_learner
from fedlabels.method.threat import Payload, ThreatModel


@dataclass(frozen=True)
class AuditView:
    """How the audit attacks one view (``ThreatModel.view``) a method declares.

    The method's own :class:`~fedlabels.method.threat.ThreatModel` says what each payload
    is; this says which attacks apply to it and whether the query set goes into U.
    """

    key: str
    sees: str  # what the server receives from a client
    attacks: str  # the attack family that applies
    queries_in_public: bool = False  # the attacker inserts its query set into U
    student: bool = False  # also attack the released student model (PATE family)
    fixed_vul: float | None = None  # set when there is nothing to attack (or everything)
    fixed_reason: str = ""
    threat: str = "forged-u"  # the --threat this view belongs to (audit.adversaries)
    description: str = ""
    adversary: str = "the server: honest but curious, no collusion"
    copy: bool = False  # outputs on U are attacked through a copy model trained on them
    curious: bool = False  # the messages the server sends back are observed

    def to_dict(self) -> dict[str, Any]:
        out = {"name": self.threat, "description": self.description,
               "adversary": self.adversary, "observes": self.sees, "key": self.key,
               "attacker": self.adversary + "; reference/shadow models on attacker data "
               "disjoint from the target's",
               "sees": self.sees, "attacks": self.attacks,
               "queries_in_public": self.queries_in_public,
               "attacked_through_copy_model": self.copy,
               "released_student_attacked": self.student}
        if self.fixed_vul is not None:
            out["fixed_vul"] = self.fixed_vul
            out["reason"] = self.fixed_reason
        return out


PARAMETERS = AuditView(
    "parameters", "each client's model parameters after its local training, every round "
    "(white-box: the attacker rebuilds the model from the weights it received)",
    "confidence-based on the rebuilt model (LOSS, LiRA, RMIA, Shokri) and label-only")
HARD_LABELS = AuditView(
    "hard-labels-on-queries", "the client's hard labels on U every round; the attacker "
    "inserted its query set (candidates, population points, perturbed copies) into U",
    "label-only (gap, augmentation, Shokri on label features) and LOSS/LiRA/RMIA on the "
    "smoothed frequency of correct labels over rounds", queries_in_public=True)
SOFT_LABELS = AuditView(
    "soft-labels-on-queries", "the client's class probabilities on U (or on the subsets of U "
    "it is asked about); the query set was inserted into U",
    "confidence-based on the returned probabilities (LOSS, LiRA, RMIA, Shokri) and "
    "label-only on their argmax", queries_in_public=True)
TEACHER_VOTES = AuditView(
    "teacher-votes-on-queries", "each teacher's hard-label votes on the queried part of U "
    "(the server sees the votes, more than the released labels), and the released student "
    "(white-box; view 'student'); the query set was inserted into U", HARD_LABELS.attacks,
    queries_in_public=True, student=True)
FREDY_VIEW = AuditView(
    "parameters-and-votes", "the teachers' FedAvg weights during the teacher phase and their "
    "hard-label votes on the queried part of U, and the released student (view 'student'); "
    "query set inserted into U",
    "white-box attacks on the weights and the student, label-only attacks on the votes",
    queries_in_public=True, student=True)
DP_LABELS = AuditView(
    "noisy-labels-on-queries", "the client's randomized hard labels (k-ary randomized "
    "response) or noisy one-hot rows (XOR mechanism) on U every round; the query set was "
    "inserted into U", HARD_LABELS.attacks + "; noisy one-hot rows are scored as 0/1 "
    "class scores", queries_in_public=True)
DP_UPDATES = AuditView(
    "clipped-updates", "each client's clipped model update every round, which with the start "
    "weights the server sent rebuilds the clipped local model (white-box). With level=client "
    "(the default) DP-FedAvg's Gaussian noise is added by the server after it receives the "
    "updates, so it does not protect against this attacker (it protects the released global "
    "model); with level=record each client's DP-SGD steps add it before the update leaves "
    "the client, and the record-level guarantee covers this view",
    PARAMETERS.attacks)
NOTHING = AuditView(
    "nothing-sent", "nothing derived from private data (only step-count control messages)",
    "none", fixed_vul=0.5,
    fixed_reason="no message depends on private data, so any membership score the server "
                 "can compute is independent of membership: AUC = 0.5 by construction "
                 "(TPR = FPR at every threshold). The recorder checks that no protocol "
                 "message was sent.")
RAW_DATA = AuditView(
    "raw-data", "all private records (pooled at one party)", "none needed", fixed_vul=1.0,
    fixed_reason="centralized training gives the central party the records themselves: "
                 "membership is known exactly (VUL = 1 by construction).")

#: audit views by the ``view`` name methods declare in their threat model
VIEWS: dict[str, AuditView] = {v.key: v for v in (
    PARAMETERS, HARD_LABELS, SOFT_LABELS, TEACHER_VOTES, FREDY_VIEW, DP_LABELS, DP_UPDATES,
    NOTHING, RAW_DATA)}


def auditable_methods() -> list[str]:
    """Registered methods whose declared view the audit can attack."""
    from fedlabels.methods import METHODS

    return sorted(name for name, m in METHODS.items() if m.threat_model.view in VIEWS)


def threat_for(method: str) -> AuditView:
    """The audit view of a registered method's declared threat model, or a clear error."""
    from fedlabels.methods import get_method

    declared = get_method(method).threat_model
    try:
        return VIEWS[declared.view]
    except KeyError:
        raise FedLabelsError(
            f"the audit has no attacks for method {method!r} (its threat model's view is "
            f"{declared.view!r}); auditable: {', '.join(auditable_methods())}.") from None


# --------------------------------------------------------------------------- observations

@dataclass(frozen=True)
class Observation:
    """One client's outputs on the query set Q, as one exchange revealed them.

    ``values`` is (|Q|, C) probabilities (NaN rows: not observed) for ``kind="probs"``, or
    (|Q|,) hard labels (-1: not observed) for ``kind="labels"``. ``ordinal`` counts the
    client's protocol replies so far (1-based): its model had about ``ordinal * period``
    local steps.
    """

    view: str
    kind: str
    values: np.ndarray
    ordinal: int

    @property
    def coverage(self) -> float:
        seen = ~np.isnan(self.values).any(axis=1) if self.kind == "probs" else self.values >= 0
        return float(seen.mean())


@dataclass
class ObservationContext:
    """What the extraction needs: sizes, where Q sits in U, the clients' model specs."""

    n_classes: int
    n_features: int
    n_public: int  # |U| including Q when it was inserted
    q_offset: int | None  # start of Q inside U, or None (Q not in U)
    X_query: np.ndarray
    specs: list[Any]
    #: fixed-u / curious-client: (cid, rows of U, outputs, ordinal) -> copy's probs on Q
    copy_model: Callable[[int, np.ndarray, np.ndarray, int], np.ndarray] | None = None


def rebuild_model(spec: Any, weights: np.ndarray, ctx: ObservationContext) -> Any:
    learner = build_learner(spec, n_classes=ctx.n_classes, random_state=0)
    if not callable(getattr(learner, "initialise", None)):
        raise FedLabelsError(f"cannot rebuild model {spec!r} from weights (no initialise()).")
    learner.initialise(ctx.n_features, ctx.n_classes)
    learner.set_weights(weights)
    return learner


def _check_subset_named(ex: Exchange) -> None:
    """A reply declared with rows 'subset' is about the subset its request names."""
    if not {"subset_seed", "subset_size"} <= set(ex.down.config):
        raise FedLabelsError(
            f"client {ex.cid}, round {ex.round + 1}: the audit cannot tell which points "
            f"of U the {ex.up.kind!r} reply is about: a payload declared with rows "
            "'subset' is about the subset the request names in its config "
            "(subset_seed, subset_size: fedmd's subset_indices), and this "
            f"{ex.down.kind!r} request names none; declare the payload with rows "
            "'public' (one row per point of U) or 'queries' (the request's 'queries' "
            "array), or audit another method.")


def _public_indices(ex: Exchange, rows: str, n: int, ctx: ObservationContext) -> np.ndarray:
    """Indices of U that a reply with ``n`` rows is about, from the payload's ``rows``."""
    if rows == "queries":
        idx = np.asarray(ex.down.arrays["queries"], dtype=np.int64)
    elif rows == "subset":
        from fedlabels.methods.distillation.fedmd import subset_indices

        _check_subset_named(ex)
        idx = np.asarray(subset_indices(int(ex.down.config["subset_seed"]), ctx.n_public,
                                        int(ex.down.config["subset_size"])), dtype=np.int64)
    else:
        idx = np.arange(ctx.n_public)
    if len(idx) != n:
        raise FedLabelsError(f"client {ex.cid}, round {ex.round + 1}: a reply of {n} rows does "
                             f"not match the {len(idx)} public indices it answers.")
    return idx


def _scatter(idx: np.ndarray, rows: np.ndarray, ctx: ObservationContext, fill: float
             ) -> np.ndarray:
    """Rows about public indices ``idx`` placed onto Q (``fill`` where Q was not asked)."""
    n_q = len(ctx.X_query)
    out = np.full((n_q, *rows.shape[1:]), fill, dtype=np.float64 if fill != -1 else np.int64)
    if ctx.q_offset is None:
        return out
    pos = idx - ctx.q_offset
    ok = (pos >= 0) & (pos < n_q)
    out[pos[ok]] = rows[ok]
    return out


def _on_queries(cid: int, view: str, idx: np.ndarray, rows: np.ndarray, ordinal: int,
                ctx: ObservationContext) -> Observation:
    """Outputs on rows ``idx`` of U as an observation on Q: read off where Q was inserted
    into U, or (``ctx.copy_model``: Q not in U) through a copy model trained on them."""
    if ctx.copy_model is not None:
        return Observation(view, "probs", ctx.copy_model(cid, idx, rows, ordinal), ordinal)
    if rows.ndim == 1:
        return Observation(view, "labels", _scatter(idx, rows, ctx, -1), ordinal)
    return Observation(view, "probs", _scatter(idx, rows, ctx, np.nan), ordinal)


#: payload contents the attacks consume, in order of preference within one reply
ATTACKABLE = ("weights", "update", "hard-labels", "votes", "noisy-one-hot", "soft-labels")


def _attacked_payload(ex: Exchange, threat: ThreatModel) -> Payload | None:
    """The declared payload of a reply that the audit attacks (None: nothing attackable);
    an array the threat model does not declare is an error."""
    declared = {}
    for key in ex.up.arrays:
        payload = threat.payload(ex.up.kind, key)
        if payload is None:
            raise FedLabelsError(f"client {ex.cid} sent {ex.up.kind!r} array {key!r}, which "
                                 "the method's threat model does not declare.")
        declared[payload.content] = payload
    content = next((c for c in ATTACKABLE if c in declared), None)
    return None if content is None else declared[content]


def check_readable(ex: Exchange, threat: ThreatModel) -> None:
    """Refuse, as the reply is recorded, what :func:`observe` would refuse after the run:
    an undeclared array, or a 'subset' payload whose request names no subset."""
    payload = _attacked_payload(ex, threat)
    if payload is not None and payload.rows == "subset":
        _check_subset_named(ex)


def observe(ex: Exchange, ordinal: int, view: str, ctx: ObservationContext,
            threat: ThreatModel) -> Observation | None:
    """What one recorded reply reveals about Q, read from the method's declared payloads."""
    arrays = ex.up.arrays
    payload = _attacked_payload(ex, threat)
    if payload is None:
        return None
    content = payload.content
    values = np.asarray(arrays[payload.key])
    if content in ("weights", "update"):  # parameters, or a (clipped) update
        weights = (values if content == "weights"
                   else np.asarray(ex.down.arrays["weights"]) + values)
        model = rebuild_model(ctx.specs[ex.cid], weights, ctx)
        probs = np.asarray(model.predict_proba(ctx.X_query), dtype=np.float64)
        return Observation(view, "probs", probs, ordinal)
    if content in ("hard-labels", "votes"):
        if payload.rows == "queries" and "queries" not in ex.down.arrays:
            return None  # votes on clusters of U (a seed, no rows): about no row of Q alone
        n = (len(ex.down.arrays["queries"]) if payload.rows == "queries" else ctx.n_public)
        labels = unpack_labels(values, n, ctx.n_classes).astype(np.int64)
        idx = _public_indices(ex, payload.rows, n, ctx)
        return _on_queries(ex.cid, view, idx, labels, ordinal, ctx)
    if content == "noisy-one-hot":  # DP-FedCT's XOR mechanism, scored as 0/1 class scores
        from fedlabels.privacy.mechanisms import unpack_rows

        rows = unpack_rows(values, ctx.n_public, ctx.n_classes).astype(np.float64)
        rows += 1e-3
        probs = rows / rows.sum(axis=1, keepdims=True)
        return _on_queries(ex.cid, view, np.arange(ctx.n_public), probs, ordinal, ctx)
    probs = values.astype(np.float64)
    idx = _public_indices(ex, payload.rows, len(probs), ctx)
    return _on_queries(ex.cid, view, idx, probs, ordinal, ctx)


def extract_observations(exchanges: list[Exchange], cid: int, ctx: ObservationContext,
                         threat: ThreatModel) -> list[Observation]:
    """All observations of client ``cid``, in order, one per attackable reply."""
    mine = [e for e in exchanges if e.cid == cid]
    out = []
    per_round: dict[int, int] = {}
    for e in mine:
        j = per_round.get(e.round, 0)
        per_round[e.round] = j + 1
        n_in_round = sum(1 for x in mine if x.round == e.round)
        view = f"round {e.round + 1}" + (f".{j + 1}" if n_in_round > 1 else "")
        obs = observe(e, e.ordinal, view, ctx, threat)
        if obs is not None:
            out.append(obs)
    return out
