"""DP-FedCT: FedCT whose clients randomize their hard labels before sending them.

Each round a client trains as in FedCT, predicts its hard labels on U, and releases them
through a label mechanism of :mod:`fedlabels.privacy.mechanisms`:

* ``mechanism="xor"`` (default) — the XOR mechanism with independent bits (bitwise
  randomized response) on the |U| x C one-hot matrix, flip probability
  f = 1 / (1 + e^{ε/s*}); the payload is C bits per row, bit-packed. The server forms the
  consensus from per-class bit counts (debiased, random tie-break), never "first 1 in a row".
* ``mechanism="kary"`` — k-ary randomized response per label with ε₁ = ε / s*_labels; the
  payload stays ceil(log2 C) bits per label and the consensus is the plurality of the noisy
  votes.

Options (``Settings.extra``; CLI ``--epsilon``, ``--delta``, ``--sensitivity`` ... or
``--opt KEY=VALUE``):

``epsilon``            pure ε of one round's release (per client); or
``epsilon_total``      target (ε, δ) over the whole run: the per-round ε is calibrated with
                       the exact accountant (XOR only; needs the number of rounds);
``delta``              δ for the (ε, δ) of the composition (default 1e-5);
``sensitivity``        ``worst`` (default, 2|U|), ``empirical``, ``prop2`` or a number of bits;
``stability_rate``, ``sensitivity_delta``   for ``prop2``;
``sensitivity_neighbours`` (10), ``sensitivity_relation`` (remove | replace),
``sensitivity_model`` (a model spec; default each client's own learner),
``sensitivity_steps`` (torch learners; default ``period``)   for ``empirical``;
``sensitivity_note``   where a numeric s* came from (kept in the result);
``mechanism``          ``xor`` or ``kary``.

Threat model: honest clients, a semi-honest server, no collusion (the paper's). Each client's
releases are ε-DP with respect to one record of that client's private data (given the
sensitivity assumption); the consensus and everything downstream is post-processing. The
clients' own final models are not protected (they never leave the client).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedlabels.comm import Message, pack_labels, unpack_labels
from fedlabels.consensus import majority_vote, qualified_majority
from fedlabels.data import ClientData
from fedlabels.errors import FedLabelsError
from fedlabels.protocols.base import ClientRole, Grid, MethodContext, ServerRole, Settings
from fedlabels.protocols.fedct import FedCT, FedCTClient, FedCTServer

DEFAULT_DELTA = 1e-5
MECHANISMS = ("xor", "kary")
_KNOWN_OPTIONS = {
    "epsilon", "epsilon_total", "delta", "sensitivity", "stability_rate", "sensitivity_delta",
    "sensitivity_neighbours", "sensitivity_relation", "sensitivity_model",
    "sensitivity_steps", "sensitivity_note", "mechanism", "n_features", "total_rounds"}
_INTERNAL = {"n_features", "total_rounds"}  # set by the simulator


def _options(settings: Settings) -> dict[str, Any]:
    return dict(settings.extra)


def check_dp_fedct_options(settings: Settings) -> None:
    """Reject bad privacy options before any training."""
    from fedlabels.privacy.validation import check_delta, check_epsilon, check_stability_rate

    opts = _options(settings)
    unknown = sorted(set(opts) - _KNOWN_OPTIONS)
    if unknown:
        raise FedLabelsError(f"unknown dp-fedct option(s) {', '.join(unknown)}; known: "
                             f"{', '.join(sorted(_KNOWN_OPTIONS - _INTERNAL))}.")
    has_round, has_total = "epsilon" in opts, "epsilon_total" in opts
    if has_round == has_total:
        raise FedLabelsError("dp-fedct needs exactly one of epsilon (pure ε per round, e.g. "
                             "--epsilon 1.0) and epsilon_total (--opt epsilon_total=8).")
    check_epsilon(opts["epsilon"] if has_round else opts["epsilon_total"],
                  "epsilon" if has_round else "epsilon_total")
    check_delta(opts.get("delta", DEFAULT_DELTA))
    mechanism = opts.get("mechanism", "xor")
    if mechanism not in MECHANISMS:
        raise FedLabelsError(f"mechanism must be one of {MECHANISMS}, got {mechanism!r}.")
    if has_total and mechanism != "xor":
        raise FedLabelsError("epsilon_total calibration supports mechanism=xor only; give "
                             "epsilon (per round) for k-ary randomized response.")
    if str(opts.get("sensitivity", "worst")).lower() == "prop2":
        check_stability_rate(opts.get("stability_rate"))
        check_delta(opts.get("sensitivity_delta", opts.get("delta", DEFAULT_DELTA)),
                    "sensitivity_delta")


class DPFedCTClient(FedCTClient):
    """A FedCT client that randomizes its labels on U before sending them."""

    def __init__(self, *args: Any, seed: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.seed = seed
        self.noise_rng = np.random.default_rng([seed, 0xD9F])
        self.handlers["dpfedct.sensitivity"] = self.estimate_sensitivity

    def train(self, message: Message) -> Message:
        from fedlabels.privacy.mechanisms import kary_release, one_hot, pack_rows, xor_release

        n_classes = self.settings.n_classes
        self.receive_and_train(message)
        labels = self.local_labels()
        if message.config["mechanism"] == "xor":
            noisy = xor_release(one_hot(labels, n_classes),
                                float(message.config["flip_probability"]), self.noise_rng)
            return Message("dpfedct.bits", arrays={"bits": pack_rows(noisy)})
        noisy_labels = kary_release(labels, float(message.config["epsilon_per_label"]),
                                    n_classes, self.noise_rng)
        return Message("dpfedct.labels", arrays={"labels": pack_labels(noisy_labels,
                                                                       n_classes)})

    def estimate_sensitivity(self, message: Message) -> Message:
        """Empirical s* of this client's learner on its own data (bits)."""
        from fedlabels.learners import build_learner, parse_model_spec
        from fedlabels.privacy.sensitivity import empirical_sensitivity

        cfg = message.config
        spec = str(cfg.get("model", ""))
        learner = (build_learner(parse_model_spec(spec)[0], n_classes=self.settings.n_classes,
                                 random_state=self.seed) if spec else self.learner)
        est = empirical_sensitivity(
            learner, self.data.X, self.data.y, self.X_public, self.settings.n_classes,
            n_neighbours=min(int(cfg["neighbours"]), len(self.data.y)),
            relation=str(cfg["relation"]), seed=self.seed, steps=int(cfg["steps"]))
        d = est.details
        return Message("dpfedct.sensitivity.reply", category="control", config={
            "bits": est.bits, "max_changed_labels": d["max_changed_labels"],
            "mean_changed_labels": d["mean_changed_labels"]})


class DPFedCTServer(FedCTServer):
    """Collects noisy label releases, forms the consensus, and accounts for ε."""

    def __init__(self, settings: Settings, n_public: int, truth_public: np.ndarray | None,
                 seed: int) -> None:
        from fedlabels.privacy.sensitivity import resolve_sensitivity
        from fedlabels.privacy.validation import check_delta

        super().__init__(settings, n_public, truth_public)
        opts = _options(settings)
        self.mechanism = opts.get("mechanism", "xor")
        self.delta = check_delta(opts.get("delta", DEFAULT_DELTA))
        self.rng = np.random.default_rng([seed, 0xC0175])
        spec = opts.get("sensitivity", "worst")
        self.sensitivity = resolve_sensitivity(
            spec, n_public, stability_rate=opts.get("stability_rate"),
            delta=opts.get("sensitivity_delta", self.delta),
            note=str(opts.get("sensitivity_note", "")))
        self.events: list[Any] = []
        self.epsilon_round: float | None = None
        self.sensitivity_round: list[dict[str, Any]] = []

    # ------------------------------------------------------------------ set-up
    def _estimate_sensitivity(self, grid: Grid) -> None:
        from fedlabels.privacy.events import Sensitivity

        opts = _options(self.settings)
        config = {"neighbours": int(opts.get("sensitivity_neighbours", 10)),
                  "relation": str(opts.get("sensitivity_relation", "remove")),
                  "steps": int(opts.get("sensitivity_steps", self.settings.period)),
                  "model": str(opts.get("sensitivity_model", ""))}
        message = Message("dpfedct.sensitivity", config=config, category="control")
        replies = grid.exchange({cid: message for cid in grid.client_ids}, 0)
        per_client = {cid: int(r.config["bits"]) for cid, r in sorted(replies.items())}
        bits = min(max(per_client.values()), 2 * self.n_public)
        self.sensitivity = Sensitivity(bits, "empirical", self.n_public, formal=False, details={
            **config, "per_client_bits": per_client,
            "per_client_mean_changed_labels": {
                cid: float(r.config["mean_changed_labels"]) for cid, r in replies.items()},
            "estimated_at": "before round 1, fresh learners trained on private data only",
            "note": "s* = max over clients of a sample maximum over neighbours: an estimate, "
                    "not a bound; the estimate itself is computed from private data and "
                    "released without noise"})

    def _calibrate(self) -> None:
        from fedlabels.privacy.accounting import calibrate_xor_round_epsilon
        from fedlabels.privacy.validation import check_sensitivity_bits

        check_sensitivity_bits(self.sensitivity.bits, self.n_public)
        opts = _options(self.settings)
        if "epsilon" in opts:
            self.epsilon_round = float(opts["epsilon"])
            return
        rounds = opts.get("total_rounds")
        if not rounds:
            raise FedLabelsError("epsilon_total needs the number of rounds (the simulator "
                                 "passes it; elsewhere set --opt total_rounds=R).")
        self.epsilon_round = calibrate_xor_round_epsilon(
            float(opts["epsilon_total"]), self.delta, int(rounds), self.sensitivity.bits)

    def mechanism_config(self) -> dict[str, Any]:
        from fedlabels.privacy.mechanisms import flip_probability

        if self.mechanism == "xor":
            return {"mechanism": "xor",
                    "flip_probability": flip_probability(self.epsilon_round,
                                                         self.sensitivity.bits)}
        return {"mechanism": "kary",
                "epsilon_per_label": self.epsilon_round / self.sensitivity.labels}

    # ------------------------------------------------------------------ rounds
    def run_round(self, rnd: int, grid: Grid) -> dict[str, float]:
        from fedlabels.privacy.events import KaryRREvent, XorEvent
        from fedlabels.privacy.mechanisms import bit_count_consensus, unpack_rows

        if self.epsilon_round is None:
            if self.sensitivity is None:
                self._estimate_sensitivity(grid)
            self._calibrate()
        mech = self.mechanism_config()
        base = self.train_message(rnd)
        message = Message(base.kind, arrays=base.arrays, config={**base.config, **mech})
        replies = grid.exchange({cid: message for cid in grid.client_ids}, rnd)
        n, c = self.n_public, self.settings.n_classes
        if self.mechanism == "xor":
            f = mech["flip_probability"]
            noisy = np.stack([unpack_rows(replies[cid].arrays["bits"], n, c)
                              for cid in sorted(replies)])
            new = bit_count_consensus(noisy, f, self.rng, self.settings.quorum)
            self.events.append(XorEvent(self.epsilon_round, self.sensitivity.bits, f, n * c))
        else:
            votes = np.stack([unpack_labels(replies[cid].arrays["labels"], n, c)
                              for cid in sorted(replies)])
            new = (majority_vote(votes, c) if self.settings.quorum is None
                   else qualified_majority(votes, c, self.settings.quorum))
            self.events.append(KaryRREvent(self.epsilon_round, self.sensitivity.labels,
                                           mech["epsilon_per_label"], c, n))
        metrics = self.consensus_metrics(new)
        self.labels = new
        return metrics

    def result_extra(self) -> dict[str, Any]:
        from fedlabels.privacy.accounting import account_labels
        from fedlabels.privacy.events import RECORD_LEVEL

        spent = account_labels(self.events, self.delta)
        mech = self.mechanism_config() if self.epsilon_round is not None else {}
        sens = self.sensitivity.to_dict() if self.sensitivity is not None else None
        assumptions = [
            "honest clients, semi-honest (honest-but-curious) server, no collusion",
            "each client's label releases are protected w.r.t. one record of its private "
            "data; the consensus, the vote and training on pseudo-labels are post-processing",
            "the clients' final models never leave the clients and are not protected",
            "the guarantee holds only if every client's true Hamming sensitivity is at most "
            f"s* = {sens['bits'] if sens else '?'} bits (source: "
            f"{sens['source'] if sens else '?'}; 1 changed label = 2 bits)",
        ]
        if sens and sens["source"] == "prop2":
            assumptions.append("Prop. 2 holds with probability 1 - sensitivity_delta over "
                               "the data draw (random DP), for a learner with the given "
                               "on-average-replace-one stability rate")
        if sens and sens["source"] in ("empirical", "given"):
            assumptions.append("s* is not a proven bound; the (ε, δ) below is conditional "
                               "on it")
        return {"privacy": {
            "method": "dp-fedct",
            "mechanism": ("xor: bitwise randomized response on one-hot rows"
                          if self.mechanism == "xor" else "k-ary randomized response"),
            **spent.to_dict(),
            "epsilon_per_round": self.epsilon_round,
            "rounds_accounted": len(self.events),
            **{k: v for k, v in mech.items() if k != "mechanism"},
            "sensitivity": sens,
            "neighbouring": RECORD_LEVEL,
            "unit": "per client, over the whole run",
            "assumptions": assumptions,
            "threat_model": "semi-honest server observing every client's noisy labels",
        }}


class DPFedCT(FedCT):
    """FedCT with the XOR mechanism (or k-ary randomized response) on the shared labels."""

    name = "dp-fedct"
    description = ("DP-FedCT: FedCT with the XOR mechanism (bitwise randomized response) or "
                   "k-ary RR on the labels; (ε, δ) accounted over rounds")

    def validate(self, n_clients: int, settings: Settings, learners: list[Any]) -> None:
        super().validate(n_clients, settings, learners)
        check_dp_fedct_options(settings)

    def make_server(self, ctx: MethodContext, n_public: int, learners: list[Any],
                    client_sizes: list[int]) -> ServerRole:
        return DPFedCTServer(ctx.settings, n_public, ctx.truth_public, ctx.server_seed)

    def make_client(self, cid: int, data: ClientData, learner: Any, ctx: MethodContext,
                    X_public: np.ndarray | None, X_test: np.ndarray,
                    y_test: np.ndarray) -> ClientRole:
        return DPFedCTClient(cid, data, learner, ctx.settings, X_public, X_test, y_test,
                             seed=ctx.seeds[cid])
