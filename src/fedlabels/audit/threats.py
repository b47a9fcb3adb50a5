"""Threat models: what an honest-but-curious server receives from each method.

The attacker is the server (App. E.1 of the FedCT paper): it follows the protocol, does not
collude, and tries to infer whether a record was in a client's private data from exactly the
messages that client sends it. It may choose the public set U (query-based threat models:
it slips the audit's query set into U) and it trains reference / shadow models on its own
data from the clients' distribution. :func:`extract_observations` turns recorded messages into
what the attacks consume: probabilities or hard labels of the client on the query set Q.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fedlabels.audit.recorder import Exchange
from fedlabels.comm import unpack_labels
from fedlabels.errors import FedLabelsError
from fedlabels.learners import build_learner


@dataclass(frozen=True)
class ThreatModel:
    """A stated threat model (written into the result JSON and docs/audit.md)."""

    key: str
    sees: str  # what the server receives from a client
    attacks: str  # the attack family that applies
    queries_in_public: bool = False  # the attacker inserts its query set into U
    student: bool = False  # also attack the released student model (PATE family)
    fixed_vul: float | None = None  # set when there is nothing to attack (or everything)
    fixed_reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        out = {"key": self.key, "attacker": "honest-but-curious server, no collusion; "
               "reference/shadow models on attacker data disjoint from the target's",
               "sees": self.sees, "attacks": self.attacks,
               "queries_in_public": self.queries_in_public,
               "released_student_attacked": self.student}
        if self.fixed_vul is not None:
            out["fixed_vul"] = self.fixed_vul
            out["reason"] = self.fixed_reason
        return out


PARAMETERS = ThreatModel(
    "parameters", "each client's model parameters after its local training, every round "
    "(white-box: the attacker rebuilds the model from the weights it received)",
    "confidence-based on the rebuilt model (LOSS, LiRA, RMIA, Shokri) and label-only")
HARD_LABELS = ThreatModel(
    "hard-labels-on-queries", "the client's hard labels on U every round; the attacker "
    "inserted its query set (candidates, population points, perturbed copies) into U",
    "label-only (gap, augmentation, Shokri on label features) and LOSS/LiRA/RMIA on the "
    "smoothed frequency of correct labels over rounds", queries_in_public=True)
SOFT_LABELS = ThreatModel(
    "soft-labels-on-queries", "the client's class probabilities on U (or on the subsets of U "
    "it is asked about); the query set was inserted into U",
    "confidence-based on the returned probabilities (LOSS, LiRA, RMIA, Shokri) and "
    "label-only on their argmax", queries_in_public=True)
TEACHER_VOTES = ThreatModel(
    "teacher-votes-on-queries", "each teacher's hard-label votes on the queried part of U "
    "(the server sees the votes, more than the released labels), and the released student "
    "(white-box; view 'student'); the query set was inserted into U", HARD_LABELS.attacks,
    queries_in_public=True, student=True)
FREDY_VIEW = ThreatModel(
    "parameters-and-votes", "the teachers' FedAvg weights during the teacher phase and their "
    "hard-label votes on the queried part of U, and the released student (view 'student'); "
    "query set inserted into U",
    "white-box attacks on the weights and the student, label-only attacks on the votes",
    queries_in_public=True, student=True)
DP_LABELS = ThreatModel(
    "noisy-labels-on-queries", "the client's randomized hard labels (k-ary randomized "
    "response) or noisy one-hot rows (XOR mechanism) on U every round; the query set was "
    "inserted into U", HARD_LABELS.attacks + "; noisy one-hot rows are scored as 0/1 "
    "class scores", queries_in_public=True)
DP_UPDATES = ThreatModel(
    "clipped-updates", "each client's clipped model update every round, which with the start "
    "weights the server sent rebuilds the clipped local model (white-box). The Gaussian noise "
    "of DP-FedAvg is added by the server after it receives the updates, so it does not "
    "protect against this attacker; it protects the released global model",
    PARAMETERS.attacks)
NOTHING = ThreatModel(
    "nothing-sent", "nothing derived from private data (only step-count control messages)",
    "none", fixed_vul=0.5,
    fixed_reason="no message depends on private data, so any membership score the server "
                 "can compute is independent of membership: AUC = 0.5 by construction "
                 "(TPR = FPR at every threshold). The recorder checks that no protocol "
                 "message was sent.")
RAW_DATA = ThreatModel(
    "raw-data", "all private records (pooled at one party)", "none needed", fixed_vul=1.0,
    fixed_reason="centralized training gives the central party the records themselves: "
                 "membership is known exactly (VUL = 1 by construction).")

METHOD_THREATS: dict[str, ThreatModel] = {
    "fedct": HARD_LABELS, "dp-fedct": DP_LABELS,
    "fedavg": PARAMETERS, "dp-fedavg": DP_UPDATES, "fedavg-xclp": PARAMETERS,
    "dd": SOFT_LABELS, "fedmd": SOFT_LABELS,
    "pate": TEACHER_VOTES, "dp-pate": TEACHER_VOTES, "fredy": FREDY_VIEW,
    "local": NOTHING, "perclient-lp": NOTHING, "centralized": RAW_DATA,
}


def threat_for(method: str) -> ThreatModel:
    """The threat model of a registered method, or a clear error if it has none yet."""
    try:
        return METHOD_THREATS[method]
    except KeyError:
        raise FedLabelsError(
            f"no audit threat model for method {method!r} yet; auditable: "
            f"{', '.join(sorted(METHOD_THREATS))}. Add one to "
            "fedlabels.audit.threats.METHOD_THREATS (what the server receives, and whether "
            "the attacker's queries go into U).") from None


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


def _rebuild(spec: Any, weights: np.ndarray, ctx: ObservationContext) -> Any:
    learner = build_learner(spec, n_classes=ctx.n_classes, random_state=0)
    if not callable(getattr(learner, "initialise", None)):
        raise FedLabelsError(f"cannot rebuild model {spec!r} from weights (no initialise()).")
    learner.initialise(ctx.n_features, ctx.n_classes)
    learner.set_weights(weights)
    return learner


def _public_indices(ex: Exchange, n: int, ctx: ObservationContext) -> np.ndarray:
    """Indices of U that a reply with n rows is about."""
    if "queries" in ex.down.arrays:
        idx = np.asarray(ex.down.arrays["queries"], dtype=np.int64)
    elif "subset_seed" in ex.down.config and "subset_size" in ex.down.config:
        from fedlabels.protocols.fedmd import subset_indices

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


def observe(ex: Exchange, ordinal: int, view: str, ctx: ObservationContext
            ) -> Observation | None:
    """What one recorded reply reveals about Q (None if it carries nothing attackable)."""
    arrays = ex.up.arrays
    if "weights" in arrays or "update" in arrays:  # parameters, or a (clipped) update
        weights = (np.asarray(arrays["weights"]) if "weights" in arrays
                   else np.asarray(ex.down.arrays["weights"]) + np.asarray(arrays["update"]))
        model = _rebuild(ctx.specs[ex.cid], weights, ctx)
        probs = np.asarray(model.predict_proba(ctx.X_query), dtype=np.float64)
        return Observation(view, "probs", probs, ordinal)
    if "labels" in arrays:
        n = len(ex.down.arrays["queries"]) if "queries" in ex.down.arrays else ctx.n_public
        labels = unpack_labels(arrays["labels"], n, ctx.n_classes).astype(np.int64)
        idx = _public_indices(ex, n, ctx)
        return Observation(view, "labels", _scatter(idx, labels, ctx, -1), ordinal)
    n_bits = ctx.n_public * ctx.n_classes
    if ("bits" in arrays and not ex.up.kind.startswith("xclp")
            and arrays["bits"].size == (n_bits + 7) // 8):
        # noisy one-hot rows (DP-FedCT's XOR mechanism), scored as 0/1 class scores
        from fedlabels.privacy.mechanisms import unpack_rows

        rows = unpack_rows(arrays["bits"], ctx.n_public, ctx.n_classes).astype(np.float64)
        rows += 1e-3
        probs = rows / rows.sum(axis=1, keepdims=True)
        return Observation(view, "probs", _scatter(np.arange(ctx.n_public), probs, ctx, np.nan),
                           ordinal)
    for key in ("soft", "scores", "probs"):
        if key in arrays:
            probs = np.asarray(arrays[key], dtype=np.float64)
            idx = _public_indices(ex, len(probs), ctx)
            return Observation(view, "probs", _scatter(idx, probs, ctx, np.nan), ordinal)
    return None


def extract_observations(exchanges: list[Exchange], cid: int, ctx: ObservationContext
                         ) -> list[Observation]:
    """All observations of client ``cid``, in order, one per attackable reply."""
    mine = [e for e in exchanges if e.cid == cid]
    out = []
    per_round: dict[int, int] = {}
    for e in mine:
        j = per_round.get(e.round, 0)
        per_round[e.round] = j + 1
        n_in_round = sum(1 for x in mine if x.round == e.round)
        view = f"round {e.round + 1}" + (f".{j + 1}" if n_in_round > 1 else "")
        obs = observe(e, e.ordinal, view, ctx)
        if obs is not None:
            out.append(obs)
    return out
