"""The audit's four threat models (``--threat``) and what each adversary observes.

* ``forged-u`` (default): an active server slips the audit's query set (candidates,
  population points, perturbed copies) into the public set U before the run (App. E.1 of
  the FedCT paper) and attacks what each client sends it, outputs on the forged points
  included.
* ``fixed-u``: an honest-but-curious server with the ordinary public U. It sees the same
  messages but U holds no candidate, so outputs on U are attacked through a **copy**: the
  attacker trains a model of the client's spec on U labelled with the client's outputs and
  attacks the copy on the candidates. White-box messages (weights, updates) do not involve U:
  there the two server threat models coincide.
* ``released-model``: each client's final model is published (white-box queries on any
  record; the released student for the PATE family).
* ``curious-client``: a client that sees only what the server sends back (consensus labels,
  averaged soft labels, the global model) attacks the members of another client.

Rule: a threat model under which the adversary receives nothing computed from private data
gives VUL = 0.5 by construction (stated with its reason, and checked on the recorded
messages); a method whose view the audit cannot attack is an error listing the auditable ones.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from fedlabels.audit.plan import AuditPlan
from fedlabels.audit.recorder import Exchange, Recorder, RecordingMethod
from fedlabels.audit.references import predict_proba_full
from fedlabels.audit.threats import (
    PARAMETERS,
    AuditView,
    Observation,
    ObservationContext,
    extract_observations,
    rebuild_model,
    threat_for,
)
from fedlabels.core.errors import FedLabelsError, did_you_mean
from fedlabels.data import Federation
from fedlabels.learners import build_learner, is_iterative


@dataclass(frozen=True)
class Threat:
    """One ``--threat``: who attacks and what reaches it."""

    name: str
    description: str
    adversary: str
    observes: str


THREATS: dict[str, Threat] = {t.name: t for t in (
    Threat("forged-u", "an active server slips the audit's candidate records (with population "
           "points and perturbed copies) into the public set U before the run (App. E.1 of "
           "the FedCT paper)",
           "the server: follows the protocol otherwise, does not collude with clients, trains "
           "reference / shadow models on its own data from the clients' distribution",
           "every message a client sends the server, including its outputs on the forged "
           "points of U"),
    Threat("fixed-u", "an honest-but-curious server with the ordinary public U (no forged "
           "records)",
           "the server: follows the protocol, does not collude, chooses nothing; reference "
           "models on its own data",
           "every message a client sends the server; outputs on U only (the candidates are "
           "not in U): it trains a copy of the client's model on U labelled with those "
           "outputs and attacks the copy on the candidates; weights are attacked directly"),
    Threat("released-model", "the final client models are published and can be queried",
           "anyone who can query a released model; reference models on its own data",
           "each client's final model (white-box: probabilities on any record); for PATE, "
           "DP-PATE and FREDY the released student"),
    Threat("curious-client", "a client that sees only what the server sends back",
           "one honest-but-curious client attacking another client's members; does not "
           "collude with the server; reference models on its own data",
           "the protocol messages the server sends it (consensus labels, averaged soft "
           "labels, the global model) on the ordinary U; outputs on U are attacked through a "
           "copy model trained on them"),
)}

#: down-message arrays that carry nothing computed from private data
PUBLIC_DOWN_ARRAYS = frozenset({"queries", "public_labels", "keep"})


def parse_threat(name: str | None) -> str:
    """A ``--threat`` value (default ``forged-u``), or an error listing the valid ones."""
    name = "forged-u" if name is None else name.strip().lower()
    if name not in THREATS:
        raise FedLabelsError(f"unknown threat model {name!r}{did_you_mean(name, THREATS)}; "
                             f"choose one of {', '.join(THREATS)}.")
    return name


def _named(view: AuditView, t: Threat, **changes: Any) -> AuditView:
    return replace(view, threat=t.name, description=t.description, adversary=t.adversary,
                   **changes)


def audit_view(method: str, threat: str) -> AuditView:
    """The view the audit attacks for ``method`` under ``threat`` (named in its output)."""
    base = threat_for(method)  # an unauditable method fails here, listing auditable ones
    t = THREATS[parse_threat(threat)]
    if t.name == "forged-u":
        return _named(base, t)
    if t.name == "fixed-u":
        if base.fixed_vul is not None or not base.queries_in_public:
            note = ("" if base.fixed_vul is not None else
                    " (white-box: U plays no role, so this equals forged-u)")
            return _named(base, t, sees=base.sees + note)
        student = "; the released student is attacked directly" if base.student else ""
        return _named(base, t, sees=f"the messages of view {base.key} on the ordinary U (no "
                      "forged records; the candidates are not in U): outputs on U are attacked "
                      "through a copy of the client's model trained on U labelled with them, "
                      f"weights directly{student}", queries_in_public=False, copy=True)
    if t.name == "released-model":
        return _named(PARAMETERS, t, key="released-model", sees=t.observes)
    return _named(PARAMETERS, t, key="down-messages", sees=t.observes, copy=True, curious=True,
                  attacks="confidence-based (LOSS, LiRA, RMIA, Shokri) and label-only on the "
                          "global model, or on a copy trained on the consensus")


def curious_of(cid: int, n_clients: int) -> int:
    """The client whose received messages attack client ``cid`` (the next one)."""
    return (cid + 1) % n_clients if n_clients > 1 else cid


def nothing_sent_back(reason_from: list[Exchange]) -> str:
    """The fixed-VUL reason for a curious client that received nothing attackable."""
    kinds = sorted({e.down.kind for e in reason_from})
    return ("the server sends the clients nothing computed from private data (messages "
            f"{', '.join(kinds) or 'none'} carry no such array), so a curious client's score "
            "is independent of membership: AUC = 0.5 by construction (checked on the "
            "recorded messages)")


def observe_down(ex: Exchange, view: str, ctx: ObservationContext) -> Observation | None:
    """What one message the server sent reveals about the candidates (curious client)."""
    arrays = ex.down.arrays
    unknown = sorted(set(arrays) - PUBLIC_DOWN_ARRAYS - {"weights", "consensus", "soft"})
    if unknown:
        raise FedLabelsError(f"curious-client: the server's {ex.down.kind!r} message carries "
                             f"arrays {unknown} the audit cannot read; it reads weights, "
                             "consensus and soft.")
    ordinal = max(ex.ordinal - 1, 1)  # what arrives in round t reflects t - 1 rounds
    if "weights" in arrays:
        model = rebuild_model(ctx.specs[ex.cid], np.asarray(arrays["weights"]), ctx)
        probs = np.asarray(model.predict_proba(ctx.X_query), dtype=np.float64)
        return Observation(view, "probs", probs, ordinal)
    key = "consensus" if "consensus" in arrays else "soft" if "soft" in arrays else None
    if key is None or ctx.copy_model is None:
        return None
    values = np.asarray(arrays[key])
    if np.issubdtype(values.dtype, np.floating):  # averaged probabilities
        if ex.down.kind == "fedmd.train":  # about the previous round's subset d_{t-1}
            from fedlabels.methods.distillation.fedmd import subset_indices

            prev = ex.prev_config
            idx = subset_indices(int(prev["subset_seed"]), ctx.n_public,
                                 int(prev["subset_size"]))
        elif "soft_seed" in ex.down.config:  # DS-FL names the subset its aggregate is about
            from fedlabels.methods.distillation.fedmd import subset_indices

            idx = subset_indices(int(ex.down.config["soft_seed"]), ctx.n_public,
                                 int(ex.down.config["soft_size"]))
        else:
            idx = np.arange(len(values))
        return Observation(view, "probs", ctx.copy_model(ex.cid, idx, values, ordinal),
                           ordinal)
    from fedlabels.methods.fedct.fedct import decode_consensus

    idx = (np.asarray(arrays["queries"], dtype=np.int64) if "queries" in arrays
           else np.arange(ctx.n_public))
    labels = decode_consensus(arrays, len(idx), ctx.n_classes).astype(np.int64)
    return Observation(view, "probs", ctx.copy_model(ex.cid, idx, labels, ordinal), ordinal)


def copy_trainer(X_public: np.ndarray, X_query: np.ndarray, specs: list[Any], n_classes: int,
                 period: int, seed: int) -> Callable[[int, np.ndarray, np.ndarray, int],
                                                     np.ndarray]:
    """``copy(cid, idx, outputs, ordinal)``: train a model of client ``cid``'s spec on the
    rows ``idx`` of U labelled with ``outputs`` (hard labels, -1 = none; or probabilities,
    NaN = none) for ``ordinal * period`` steps (torch) or one fit, and return its (|Q|, C)
    probabilities on the query set."""

    def copy(cid: int, idx: np.ndarray, outputs: np.ndarray, ordinal: int) -> np.ndarray:
        soft = outputs.ndim == 2
        seen = ~np.isnan(outputs).any(axis=1) if soft else outputs >= 0
        X, target = X_public[idx[seen]], outputs[seen]
        if len(X) == 0:
            return np.full((len(X_query), n_classes), 1.0 / n_classes)
        rs = int(np.random.SeedSequence([seed, cid, ordinal, 0xC0B]).generate_state(1)[0]
                 % (2**31 - 1))
        learner = build_learner(specs[cid], n_classes=n_classes, random_state=rs)
        steps = max(1, ordinal) * period
        if soft and callable(getattr(learner, "distill_steps", None)):
            learner.distill_steps(X, target.astype(np.float32), steps)
        else:
            y = target.argmax(axis=1) if soft else target
            if is_iterative(learner):
                learner.train_steps(X, y, steps)
            else:
                learner.fit(X, y)
        return predict_proba_full(learner, X_query, n_classes)

    return copy


def released_model(role: Any) -> Any:
    """The model a client publishes: the released student (PATE family) or its own."""
    student = getattr(role, "student", None)
    return student if student is not None else role.model()


# --------------------------------------------------------------------------- observations

def _round_views(exchanges: list[Exchange]) -> list[tuple[str, Exchange]]:
    """Each exchange with its view name: ``round r``, or ``round r.j`` when a round has
    several exchanges with the same client."""
    counts: dict[int, int] = {}
    for e in exchanges:
        counts[e.round] = counts.get(e.round, 0) + 1
    seen: dict[int, int] = {}
    out = []
    for e in exchanges:
        seen[e.round] = seen.get(e.round, 0) + 1
        suffix = f".{seen[e.round]}" if counts[e.round] > 1 else ""
        out.append((f"round {e.round + 1}{suffix}", e))
    return out


def curious_observations(exchanges: list[Exchange], clients: list[int], n_clients: int,
                         ctx: ObservationContext) -> dict[int, list[Observation]]:
    """Per audited client, what the next client (:func:`curious_of`) received, in order."""
    by_spy: dict[int, list[Observation]] = {}
    out = {}
    for c in clients:
        spy = curious_of(c, n_clients)
        if spy not in by_spy:
            mine = [e for e in exchanges if e.cid == spy]
            obs = (observe_down(e, view, ctx) for view, e in _round_views(mine))
            by_spy[spy] = [o for o in obs if o is not None]
        out[c] = by_spy[spy]
    return out


def released_observations(roles: dict[int, Any], clients: list[int], X_query: np.ndarray,
                          n_classes: int, ordinal: int) -> dict[int, list[Observation]]:
    """Per audited client, its released final model's probabilities on the query set (a
    method that pools the data in one role, e.g. centralized, releases that role's model)."""
    out = {}
    for c in clients:
        role = roles.get(c) if len(roles) > 1 else next(iter(roles.values()), None)
        if role is None:
            raise FedLabelsError(f"released-model: client {c} has no model to release.")
        probs = predict_proba_full(released_model(role), X_query, n_classes)
        out[c] = [Observation("final model", "probs", probs, ordinal)]
    return out


def _mean_observed(stack: np.ndarray) -> np.ndarray:
    """Mean over releases of (r, |Q|, C) probabilities, ignoring unobserved (NaN) rows."""
    seen = ~np.isnan(stack)
    count = seen.sum(axis=0)
    total = np.where(seen, stack, 0.0).sum(axis=0)
    return np.divide(total, count, out=np.full(total.shape, np.nan), where=count > 0)


def attack_jobs(per_client: dict[int, list[Observation]]
                ) -> list[tuple[int, int, Observation]]:
    """(ordinal, client, observation) for every view, plus "all rounds" per kind (labels
    stacked, probabilities averaged), sorted by ordinal (reference snapshots must be taken
    in increasing step order)."""
    jobs = []
    for c, obs_list in per_client.items():
        jobs += [(o.ordinal, c, o) for o in obs_list]
        kinds = {o.kind for o in obs_list}
        for kind in ("probs", "labels"):
            same = [o for o in obs_list if o.kind == kind and o.view.startswith("round")]
            if len(same) > 1:
                values = (_mean_observed(np.stack([o.values for o in same]))
                          if kind == "probs" else np.stack([o.values for o in same]))
                label = "all rounds" + (f" ({kind})" if len(kinds) > 1 else "")
                last = max(o.ordinal for o in same)
                jobs.append((last, c, Observation(label, kind, values, last)))
    return sorted(jobs, key=lambda j: j[0])


def reads_replies(view: AuditView) -> bool:
    """Whether :func:`observations_for` reads the clients' replies for ``view``
    (:func:`extract_observations`), so that the recorder must check each reply is readable
    as it arrives: not for a fixed VUL (nothing is attacked), a curious server (the
    messages sent back) or a released model (the models after the run)."""
    return (view.fixed_vul is None and not view.curious
            and view.threat != "released-model")


def observations_for(view: AuditView, recorder: Recorder, recording: RecordingMethod,
                  plan: AuditPlan, run_fed: Federation, offset: int | None, specs: list[Any],
                  n_classes: int, period: int, seed: int, rounds: int, impl: Any
                  ) -> dict[int, list[Observation]]:
    """What the adversary of ``view`` observed of each audited client."""
    if view.threat == "released-model":
        return released_observations(recording.clients, plan.clients, plan.X_query, n_classes,
                                     rounds)
    X_public = run_fed.X_public if run_fed.X_public is not None else np.zeros((0, 1))
    copy = (copy_trainer(X_public, plan.X_query, specs, n_classes, period, seed)
            if view.copy else None)
    ctx = ObservationContext(n_classes=n_classes, n_features=run_fed.n_features,
                             n_public=len(X_public), q_offset=offset, X_query=plan.X_query,
                             specs=specs, copy_model=copy)
    if view.curious:
        return curious_observations(recorder.exchanges, plan.clients, run_fed.n_clients, ctx)
    per_client = {c: extract_observations(recorder.exchanges, c, ctx, impl.threat_model)
                  for c in plan.clients}
    if view.student:  # the released student (identical at every client): white-box
        student = getattr(recording.clients.get(plan.clients[0]), "student", None)
        if student is not None:
            probs = predict_proba_full(student, plan.X_query, n_classes)
            for obs_list in per_client.values():
                last = max((o.ordinal for o in obs_list), default=1)
                obs_list.append(Observation("student", "probs", probs, last))
    if not any(per_client.values()):
        raise FedLabelsError(f"{impl.name}: no attackable message was recorded in rounds "
                             f"{sorted(recorder.rounds())}; record more rounds "
                             "(--audit-views 0).")
    return per_client
