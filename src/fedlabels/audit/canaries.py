"""DP auditing with canaries: an empirical lower bound on ε next to the accountant's ε.

Canaries are held-out records (from the test split, so no party holds them otherwise) given
a **wrong label** (the true class shifted by a seeded non-zero offset): a model that
memorises its training data outputs the canary's label on it only if it was trained on it,
which is the membership a DP-free method reveals. Canaries go into the private data of one
client (``client``); all of them, in or out, are also slipped into U by the server (the
``forged-u`` threat model), so query-based methods answer on them.

What the attacker observes is what each method's DP claim is about, as the method declares
it (``Capabilities.canary_view``); a method with a guarantee and a canary view is audited
with canaries by default (:func:`canaries_for`):

* ``replies`` (``fedct``, ``dp-fedct``): the audited client's label releases on U (hard
  labels, k-ary RR labels or XOR bit rows) every round, as the server decodes them; score =
  how often the canary's label was released (for XOR rows, the mean bit of the canary's
  class);
* ``final-model`` (``fedavg``, ``dp-fedavg``): the final global model (white-box); score =
  its probability of the canary's label (DP-FedAvg's noise is added by the server: the claim
  covers the global models, not the clipped updates the server sees);
* ``released-labels`` (``pate``, ``dp-pate``, ``fredy``): the aggregator's released labels on
  the canaries (queries in U); score = 1 if the canary's label was released, ½ on
  abstention, else 0 (the student trained on them is post-processing).

Estimators (:mod:`fedlabels.privacy.epsilon_lower_bound`): ``one-run`` (every canary included
independently with probability ½ by a seeded draw of the auditor, one training run) and
``clopper-pearson`` (``runs`` runs with the first canary and ``runs`` without, same seed; only
the privacy noise, drawn from the OS CSPRNG, differs between runs).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import numpy as np

from fedlabels.audit.recorder import Recorder, RecordingMethod
from fedlabels.audit.references import predict_proba_full
from fedlabels.audit.threats import ObservationContext, check_readable, extract_observations
from fedlabels.core.errors import FedLabelsError
from fedlabels.core.randomness import is_reproducible
from fedlabels.data import ClientData, Federation
from fedlabels.engines import simulate
from fedlabels.learners import build_learner, expand_per_client
from fedlabels.method.base import MethodContext, ServerRole
from fedlabels.privacy.epsilon_lower_bound import clopper_pearson_audit, one_run_audit
from fedlabels.results import RunResult

ESTIMATORS = ("one-run", "clopper-pearson")
_SEES = {
    "replies": "the audited client's label releases on the canaries (slipped into U by the "
               "server: forged-u), every round, as the server decodes them",
    "final-model": "the final global model (white-box), evaluated on the canaries",
    "released-labels": "the aggregator's released labels on the canaries (queries the server "
                       "slipped into U)",
}
MIN_EVALUATION = 20


def canary_view(method: str) -> str | None:
    """What a canary audit of ``method`` observes (its declared ``canary_view``)."""
    from fedlabels.methods import get_method

    return get_method(method).capabilities.canary_view


def audited_with_canaries(method: str) -> bool:
    """Whether an audit of ``method`` uses canaries by default: it states a guarantee and
    declares what a canary audit observes."""
    from fedlabels.methods import get_method

    impl = get_method(method)
    return impl.capabilities.canary_view is not None and impl.threat_model.guarantee != "none"


def canary_methods() -> list[str]:
    """The registered methods a canary audit can observe."""
    from fedlabels.methods import METHODS

    return sorted(n for n, m in METHODS.items() if m.capabilities.canary_view is not None)


@dataclass(frozen=True)
class Canaries:
    """``X`` with wrong labels ``y`` (true labels ``y_true``), destined for ``client``;
    ``federation`` is the input federation with the canaries removed from its test split."""

    X: np.ndarray
    y: np.ndarray
    y_true: np.ndarray
    client: int
    federation: Federation


def check_canary_count(n: int, federation: Federation) -> None:
    """``n`` canaries fit the held-out split with :data:`MIN_EVALUATION` records to spare."""
    n_test = len(federation.y_test)
    if n < 1 or n > n_test - MIN_EVALUATION:
        raise FedLabelsError(f"{n} canaries: the held-out split has {n_test} records and keeps "
                             f"at least {MIN_EVALUATION} for evaluation; use --canaries between "
                             f"1 and {max(n_test - MIN_EVALUATION, 0)} (or a larger --test).")


def make_canaries(federation: Federation, n: int, *, client: int = 0, seed: int = 0) -> Canaries:
    """Draw ``n`` held-out records (seeded) and relabel each to a random other class."""
    n_test = len(federation.y_test)
    if not 0 <= client < federation.n_clients:
        raise FedLabelsError(f"canary client {client} does not exist; the federation has "
                             f"clients 0..{federation.n_clients - 1}.")
    check_canary_count(n, federation)
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0xCA4A]))
    pick = rng.choice(n_test, size=n, replace=False)
    y_true = federation.y_test[pick]
    shift = rng.integers(1, federation.n_classes, size=n)
    keep = np.setdiff1d(np.arange(n_test), pick)
    rest = replace(federation, X_test=federation.X_test[keep], y_test=federation.y_test[keep])
    return Canaries(federation.X_test[pick], (y_true + shift) % federation.n_classes, y_true,
                    client, rest)


def inclusion_draw(n: int, seed: int) -> np.ndarray:
    """The auditor's seeded draw: each canary is included with probability ½ (not privacy
    noise: the DP claim must hold for every fixed choice of the included set)."""
    return np.random.default_rng(np.random.SeedSequence([seed, 0x1CE])).random(n) < 0.5


def with_canaries(canaries: Canaries, include: np.ndarray) -> tuple[Federation, int]:
    """The federation with the included canaries in the client's data and every canary
    appended to U; returns it and the canaries' offset in U."""
    fed, c = canaries.federation, canaries.client
    data = fed.clients[c]
    clients = list(fed.clients)
    clients[c] = ClientData(np.concatenate([data.X, canaries.X[include]]).astype(data.X.dtype),
                            np.concatenate([data.y, canaries.y[include]]).astype(data.y.dtype))
    # U without labels (a public set of the user's own): none for the diagnostics either
    y_pub = None if fed.y_public is None else np.concatenate([fed.y_public, canaries.y_true])
    out = replace(fed, clients=clients,
                  X_public=np.concatenate([fed.X_public, canaries.X]).astype(fed.X_public.dtype),
                  y_public=y_pub)
    return out, len(fed.X_public)


class _KeepServer(RecordingMethod):
    """A recording method that also keeps its server role (for the final global model)."""

    server: ServerRole | None = None

    def make_server(self, ctx: MethodContext, n_public: int, learners: list[Any],
                    client_sizes: list[int]) -> ServerRole:
        self.server = super().make_server(ctx, n_public, learners, client_sizes)
        return self.server


def _scores(kind: str, method: _KeepServer, canaries: Canaries, offset: int, fed: Federation,
            specs: list[Any]) -> np.ndarray:
    c, y, n = canaries.client, canaries.y, len(canaries.y)
    if kind == "replies":
        ctx = ObservationContext(n_classes=fed.n_classes, n_features=fed.n_features,
                                 n_public=len(fed.X_public), q_offset=offset, X_query=canaries.X,
                                 specs=specs)
        obs = extract_observations(method.recorder.exchanges, c, ctx, method.threat_model)
        if not obs:
            raise FedLabelsError(f"{method.name}: client {c} released nothing to audit.")
        per = [o.values[np.arange(n), y] if o.kind == "probs" else (o.values == y)
               for o in obs]
        return np.mean(per, axis=0).astype(np.float64)
    if kind == "final-model":
        assert method.server is not None
        model = build_learner(specs[c], n_classes=fed.n_classes, random_state=0)
        model.initialise(fed.n_features, fed.n_classes)
        model.set_weights(method.server.final_arrays()["weights"])
        return predict_proba_full(model, canaries.X, fed.n_classes)[np.arange(n), y]
    role = method.clients.get(c)
    index, labels = (getattr(role, "student_index", None), getattr(role, "student_y", None))
    if index is None or labels is None:
        raise FedLabelsError(f"{method.name}: no labels were released.")
    released = np.full(n, 0.5)
    pos = np.asarray(index) - offset
    ok = (pos >= 0) & (pos < n)
    released[pos[ok]] = (np.asarray(labels)[ok] == y[pos[ok]]).astype(float)
    return released


def canary_scores(method: str, canaries: Canaries, include: np.ndarray, models: list[Any], *,
                  rounds: int, period: int = 50, seed: int = 0, eval_every: int = 1,
                  options: dict[str, Any] | None = None, progress: bool | None = False
                  ) -> tuple[np.ndarray, RunResult]:
    """Run ``method`` with the included canaries; the attacker's score for every canary."""
    from fedlabels.methods import get_method

    impl = get_method(method)
    view = impl.capabilities.canary_view
    if view is None:
        raise FedLabelsError(f"no canary audit for method {method!r}; choose from "
                             f"{', '.join(canary_methods())}.")
    fed, offset = with_canaries(canaries, np.asarray(include, dtype=bool))
    specs = expand_per_client(list(models), fed.n_clients)
    recording = _KeepServer(impl, Recorder(check=partial(check_readable,
                                                         threat=impl.threat_model)
                                           if view == "replies" else None))
    result = simulate(recording, fed, specs, rounds=rounds, period=period, seed=seed,
                      eval_every=eval_every, progress=progress,
                      options=impl.parse_options(dict(options or {})))
    return _scores(view, recording, canaries, offset, fed, specs), result


def default_canaries(federation: Federation) -> int:
    """100 canaries, or what the held-out split can spare (half of it beyond evaluation)."""
    return max(0, min(100, (len(federation.y_test) - MIN_EVALUATION) // 2))


def epsilon_lower_bound_audit(method: str, federation: Federation, models: list[Any], *,
                              rounds: int, period: int = 50, seed: int = 0,
                              eval_every: int = 1, options: dict[str, Any] | None = None,
                              n_canaries: int | None = None, client: int = 0,
                              estimator: str = "one-run", runs: int = 20, beta: float = 0.05,
                              delta: float | None = None, progress: bool | None = False
                              ) -> dict[str, Any]:
    """The canary audit of ``method``: ``privacy.epsilon_lower_bound`` and how it was found.

    ``delta`` defaults to the method's own δ (10⁻⁵ for a method without a guarantee).
    ``one-run`` uses ``n_canaries`` (default :func:`default_canaries`); ``clopper-pearson``
    one canary and ``2 * runs`` runs.
    """
    if estimator not in ESTIMATORS:
        raise FedLabelsError(f"unknown estimator {estimator!r}; choose from "
                             f"{', '.join(ESTIMATORS)}.")
    n = default_canaries(federation) if n_canaries is None else int(n_canaries)
    kw: dict[str, Any] = {"rounds": rounds, "period": period, "seed": seed,
                          "eval_every": eval_every, "options": options, "progress": progress}
    if estimator == "one-run":
        canaries = make_canaries(federation, n, client=client, seed=seed)
        include = inclusion_draw(n, seed)
        scores, result = canary_scores(method, canaries, include, models, **kw)
    else:
        if runs < 1:
            raise FedLabelsError(f"runs must be >= 1, got {runs}.")
        canaries = make_canaries(federation, 1, client=client, seed=seed)
        with_: list[float] = []
        without: list[float] = []
        for flag, out in ((True, with_), (False, without)):
            for _ in range(runs):
                score, result = canary_scores(method, canaries, np.array([flag]), models, **kw)
                out.append(float(score[0]))
    claim = dict(result.extra.get("privacy") or {})
    claimed = claim.get("epsilon")
    own = claim.get("delta")  # None: no guarantee (pate, fedct, fedavg)
    d = float(delta if delta is not None else 1e-5 if own is None else own)
    if estimator == "one-run":
        found = one_run_audit(scores, include, delta=d, beta=beta)
    else:
        found = clopper_pearson_audit(np.array(with_), np.array(without), delta=d, beta=beta)
    return {**found, "claimed_epsilon": claimed, "method": method, "client": client,
            "canaries": "held-out records with a wrong label (true class + a seeded non-zero "
                        "shift), in the client's private data; all slipped into U",
            "observed": _SEES[str(canary_view(method))], "seed": seed,
            "accuracy": (result.final or {}).get("mean_accuracy"),
            "noise": "reproducible from the seed (INSECURE: not a test of the claim)"
                     if is_reproducible() else "OS CSPRNG",
            "falsifies_claim": _falsifies(claim, found["epsilon_lower_bound"])}


def _falsifies(claim: dict[str, Any], lower_bound: float) -> bool | None:
    """Whether the audit's lower bound exceeds the claimed ε (None: no claim, or a claim
    under another neighbouring relation than the canaries' add/remove)."""
    from fedlabels.privacy.events import covers_add_remove

    if claim.get("epsilon") is None or not covers_add_remove(str(claim.get("neighbouring"))):
        return None
    return bool(lower_bound > float(claim["epsilon"]))


def add_epsilon_lower_bound(result: RunResult, entry: dict[str, Any]) -> None:
    """Put a canary audit into ``result.extra['privacy']``: ``epsilon_lower_bound`` (the
    number, next to the accountant's ``epsilon``) and ``epsilon_lower_bound_audit`` (how)."""
    privacy = dict(result.extra.get("privacy") or {})
    privacy["epsilon_lower_bound"] = entry["epsilon_lower_bound"]
    privacy["epsilon_lower_bound_audit"] = entry
    result.extra["privacy"] = privacy


def format_lower_bound(entry: dict[str, Any]) -> str:
    """One line: the empirical lower bound next to the claim."""
    how = (f"{entry['correct']}/{entry['guesses']} correct guesses on {entry['n_canaries']} "
           "canaries" if entry["estimator"] == "one-run" else
           f"{entry['runs_with']} + {entry['runs_without']} runs, FPR {entry['fpr']:.2f}, "
           f"FNR {entry['fnr']:.2f}")
    claim = entry.get("claimed_epsilon")
    verdict = ("no claim" if claim is None else
               f"claimed ε = {claim:.4g}" + (" — FALSIFIED" if entry["falsifies_claim"] else
                                            ", not comparable: the canaries add or remove one "
                                            "record of a client, which a claim for one record "
                                            "replaced or one whole client bounds only by "
                                            "group privacy (up to 2ε)"
                                            if entry["falsifies_claim"] is None else ""))
    ceiling = entry.get("epsilon_ceiling")
    reach = "" if ceiling is None else (
        f"; it can show at most ε = {ceiling:.3g}"
        + (", so it cannot test the claim (more canaries: a larger held-out split, "
           "--canaries)" if claim is not None and ceiling < float(claim) else ""))
    return (f"canary audit ({entry['estimator']}, β = {entry['beta']}, δ = {entry['delta']:.3g}):"
            f" ε ≥ {entry['epsilon_lower_bound']:.3f} ({how}){reach}; {verdict}")


def canaries_for(method: str, requested: int | None, federation: Federation) -> int:
    """How many canaries an audit of ``method`` uses: ``requested`` (0 = no canary audit),
    or by default :func:`default_canaries` for a DP method and 0 otherwise."""
    if requested is None:
        return default_canaries(federation) if audited_with_canaries(method) else 0
    if requested < 0:
        raise FedLabelsError(f"--canaries must be >= 0 (0: no canary audit), got {requested}.")
    if requested and canary_view(method) is None:
        raise FedLabelsError(f"--canaries: no canary audit for method {method!r}; use it with "
                             f"{', '.join(canary_methods())}, or --canaries 0.")
    if requested:  # checked here, before the membership audit's run, not after it
        check_canary_count(requested, federation)
    return requested
