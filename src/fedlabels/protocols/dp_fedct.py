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

The options (:class:`DPFedCTOptions`: the run's total (ε, δ) budget ``epsilon``, from which
the per-round ε is calibrated and against which every release is checked, or a pure
``epsilon_per_round``; the sensitivity s* —
worst case 2|U|, an empirical estimate, Prop. 2 or a given number of bits — and the
mechanism) are FedCT's plus the privacy ones; ``fedlabels methods dp-fedct`` lists them.

Threat model: honest clients, a semi-honest server, no collusion (the paper's). Each client's
releases are ε-DP with respect to one record of that client's private data (given the
sensitivity assumption); the consensus and everything downstream is post-processing. The
clients' own final models are not protected (they never leave the client). Each client draws
its noise from OS entropy (:func:`fedlabels.randomness.numpy_generator`), never from the run
seed, which the server knows.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, cast

import numpy as np

from fedlabels.comm import Message, pack_labels
from fedlabels.data import ClientData
from fedlabels.errors import FedLabelsError
from fedlabels.privacy.budget import Budget, label_round_budget
from fedlabels.privacy.events import RECORD_LEVEL, Sensitivity
from fedlabels.privacy.sensitivity import sensitivity_guarantee
from fedlabels.protocols.base import ClientRole, Grid, MethodContext, ServerRole, Settings
from fedlabels.protocols.blocks import broadcast
from fedlabels.protocols.dp_fedct_options import DPFedCTOptions
from fedlabels.protocols.fedct import FedCT, FedCTClient, FedCTServer
from fedlabels.protocols.state import StateValue, generator_from_state, generator_state
from fedlabels.protocols.threat import (
    EVALUATION_PAYLOADS,
    SERVER_CHOOSING_U,
    Payload,
    ThreatModel,
)
from fedlabels.randomness import numpy_generator

_ASSUMPTIONS = (
    "honest clients, semi-honest (honest-but-curious) server, no collusion",
    "each client's label releases are protected w.r.t. one record of its private "
    "data; the consensus, the vote and training on pseudo-labels are post-processing",
    "the clients' final models never leave the clients and are not protected",
)
_SENSITIVITY_NOTE = ("sent only with sensitivity empirical: the sensitivity estimate is "
                     "computed from the client's private data and released without noise")


class DPFedCTClient(FedCTClient):
    """A FedCT client that randomizes its labels on U before sending them.

    With a total budget (``epsilon``) it also counts its own releases and refuses one beyond
    the rounds the per-round ε was calibrated for, whatever the server asks."""

    state_attrs: ClassVar[tuple[str, ...]] = ("releases",)
    secret_state: ClassVar[tuple[str, ...]] = ("noise_rng",)

    def __init__(self, *args: Any, seed: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.seed = seed  # the sensitivity estimate's learner; never the noise
        self.releases = 0
        self._noise_rng: np.random.Generator | None = None
        self.handlers["dpfedct.sensitivity"] = self.estimate_sensitivity

    @property
    def noise_rng(self) -> np.random.Generator:
        """The privacy noise is this client's secret: seeded from OS entropy where it is first
        needed (never from the run seed, which the server knows), then kept as state."""
        if self._noise_rng is None:
            self._noise_rng = numpy_generator()
        return self._noise_rng

    def state_dict(self) -> dict[str, StateValue]:
        rng = self._noise_rng
        return {**super().state_dict(),
                "noise_rng": None if rng is None else generator_state(rng)}

    def load_state_dict(self, state: Mapping[str, StateValue]) -> None:
        super().load_state_dict(state)
        if "noise_rng" not in state:
            raise FedLabelsError("the DP-FedCT client state has no noise generator state "
                                 "(noise_rng).")
        value = state["noise_rng"]
        self._noise_rng = None if value is None else generator_from_state(value)

    def train(self, message: Message) -> Message:
        from fedlabels.privacy.mechanisms import kary_release, one_hot, pack_rows, xor_release

        n_classes = self.settings.n_classes
        if self.options.epsilon is not None and self.releases >= self.settings.rounds:
            raise FedLabelsError(
                f"client {self.cid}: privacy budget exceeded: the total ε = "
                f"{self.options.epsilon} was calibrated for {self.settings.rounds} releases, "
                f"all spent; refusing release {self.releases + 1}.")
        self.releases += 1
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

        cfg, U = message.config, self.X_public
        if U is None:
            raise FedLabelsError(f"client {self.cid}: DP-FedCT needs the public set U.")
        spec = str(cfg.get("model", ""))
        learner = (build_learner(parse_model_spec(spec)[0], n_classes=self.settings.n_classes,
                                 random_state=self.seed) if spec else self.learner)
        est = empirical_sensitivity(
            learner, self.data.X, self.data.y, U, self.settings.n_classes,
            n_neighbours=min(int(cfg["neighbours"]), len(self.data.y)),
            relation=str(cfg["relation"]), seed=self.seed, steps=int(cfg["steps"]))
        d = est.details
        return Message("dpfedct.sensitivity.reply", category="control", config={
            "bits": est.bits, "max_changed_labels": d["max_changed_labels"],
            "mean_changed_labels": d["mean_changed_labels"]})


class DPFedCTServer(FedCTServer):
    """Collects noisy label releases, forms the consensus, and accounts for ε."""

    state_attrs: ClassVar[tuple[str, ...]] = ("events", "sensitivity")
    secret_generators: ClassVar[tuple[str, ...]] = ("_rng",)  # consensus tie-breaks

    def __init__(self, settings: Settings, n_public: int,
                 truth_public: np.ndarray | None) -> None:
        from fedlabels.privacy.sensitivity import resolve_sensitivity

        super().__init__(settings, n_public, truth_public)
        self.options = settings.options_as(DPFedCTOptions)
        self.mechanism = self.options.mechanism
        self.delta = self.options.delta
        self._rng: np.random.Generator | None = None  # consensus tie-breaks, made on use
        sens_delta = self.options.sensitivity_delta
        self.sensitivity = resolve_sensitivity(
            self.options.sensitivity, n_public, stability_rate=self.options.stability_rate,
            delta=self.delta if sens_delta is None else sens_delta,
            note=self.options.sensitivity_note)
        self.events: list[Any] = []
        self.epsilon_round: float | None = None
        self.budget: Budget | None = None

    def load_state_dict(self, state: Mapping[str, StateValue]) -> None:
        """Labels, events and s* as saved; the per-round ε and the budget are recalibrated
        from s* (deterministic) and charged for the rounds already released."""
        super().load_state_dict(state)
        self.epsilon_round, self.budget = None, None
        if self.events:
            assert self.sensitivity is not None
            self._calibrated(cast(Grid, None))  # s* is known: no estimate, no exchange
            if self.budget is not None:
                self.budget.released = len(self.events)

    # ------------------------------------------------------------------ set-up
    def _estimate_sensitivity(self, grid: Grid) -> Sensitivity:
        opts = self.options
        config: dict[str, Any] = {
            "neighbours": opts.sensitivity_neighbours, "relation": opts.sensitivity_relation,
            "steps": (self.settings.period if opts.sensitivity_steps is None
                      else opts.sensitivity_steps),
            "model": opts.sensitivity_model}
        message = Message("dpfedct.sensitivity", config=config, category="control")
        replies = broadcast(grid, message, 0)
        per_client = {cid: int(r.config["bits"]) for cid, r in sorted(replies.items())}
        bits = min(max(per_client.values()), 2 * self.n_public)
        return Sensitivity(bits, "empirical", self.n_public, formal=False, details={
            **config, "per_client_bits": per_client,
            "per_client_mean_changed_labels": {
                cid: float(r.config["mean_changed_labels"]) for cid, r in replies.items()},
            "estimated_at": "before round 1, fresh learners trained on private data only",
            "note": "s* = max over clients of a sample maximum over neighbours: an estimate, "
                    "not a bound; the estimate itself is computed from private data and "
                    "released without noise"})

    def _calibrated(self, grid: Grid) -> tuple[float, Sensitivity]:
        """(ε per round, s*): estimated (if empirical) and calibrated before round 1; with a
        total budget the run refuses to start if its planned rounds would exceed it."""
        from fedlabels.privacy.validation import check_sensitivity_bits

        if self.sensitivity is None:
            self.sensitivity = self._estimate_sensitivity(grid)
        if self.epsilon_round is None:
            check_sensitivity_bits(self.sensitivity.bits, self.n_public)
            if self.options.epsilon_per_round is not None:
                self.epsilon_round = self.options.epsilon_per_round
            else:
                assert self.options.epsilon is not None  # DPFedCTOptions.check: one of two
                self.epsilon_round, self.budget = label_round_budget(
                    self.options.epsilon, self.delta, self.settings.rounds, self.mechanism,
                    self.sensitivity)
                self.budget.check_plan()
        return self.epsilon_round, self.sensitivity

    def mechanism_config(self, epsilon: float, sensitivity: Sensitivity) -> dict[str, Any]:
        from fedlabels.privacy.mechanisms import flip_probability

        if self.mechanism == "xor":
            return {"mechanism": "xor",
                    "flip_probability": flip_probability(epsilon, sensitivity.bits)}
        return {"mechanism": "kary", "epsilon_per_label": epsilon / sensitivity.labels}

    # ------------------------------------------------------------------ rounds
    def run_round(self, rnd: int, grid: Grid) -> dict[str, float]:
        from fedlabels.privacy.events import KaryRREvent, XorEvent
        from fedlabels.privacy.mechanisms import bit_count_consensus, unpack_rows

        epsilon, sens = self._calibrated(grid)
        if self.budget is not None:
            self.budget.charge(1)  # stops before a release that would exceed the target
        mech = self.mechanism_config(epsilon, sens)
        base = self.train_message(rnd)
        message = Message(base.kind, arrays=base.arrays, config={**base.config, **mech})
        replies = broadcast(grid, message, rnd)
        n, c = self.n_public, self.settings.n_classes
        if self.mechanism == "xor":
            f = mech["flip_probability"]
            noisy = np.stack([unpack_rows(replies[cid].arrays["bits"], n, c)
                              for cid in sorted(replies)])
            if self._rng is None:
                self._rng = numpy_generator()
            new = bit_count_consensus(noisy, f, self._rng, self.options.quorum)
            self.events.append(XorEvent(epsilon, sens.bits, f, n * c))
        else:  # the plurality (or qualified majority) of the noisy votes, as in FedCT
            new = self.consensus(self.collect_votes(replies))
            self.events.append(KaryRREvent(epsilon, sens.labels, mech["epsilon_per_label"],
                                           c, n))
        metrics = self.consensus_metrics(new)
        self.labels = new
        return metrics

    def result_extra(self) -> dict[str, Any]:
        from fedlabels.privacy.accounting import account_labels

        spent = account_labels(self.events, self.delta)
        mech = (self.mechanism_config(self.epsilon_round, self.sensitivity)
                if self.epsilon_round is not None and self.sensitivity is not None else {})
        sens = self.sensitivity.to_dict() if self.sensitivity is not None else None
        assumptions = [
            *_ASSUMPTIONS,
            "the guarantee holds only if every client's true Hamming sensitivity is at most "
            f"s* = {sens['bits'] if sens else '?'} bits (source: "
            f"{sens['source'] if sens else '?'}; 1 changed label = 2 bits)",
        ]
        if sens and sens["source"] == "prop2":
            assumptions.append("s* is the Prop. 2 heuristic: Prop. 2 bounds an expected loss "
                               "change, not prediction changes on U, and gives no supremum "
                               "over neighbours")
        if sens and sens["source"] != "worst":
            assumptions.append("s* is not a proven bound; the (ε, δ) below is conditional "
                               "on it")
        else:
            assumptions.append("s* = 2|U| holds for any two datasets of a client: the whole "
                               "dataset of each client is protected, not just one record")
        guarantee = (sensitivity_guarantee(self.sensitivity) if self.sensitivity is not None
                     else {})
        return {"privacy": {
            "method": "dp-fedct",
            "mechanism": ("xor: bitwise randomized response on one-hot rows"
                          if self.mechanism == "xor" else "k-ary randomized response"),
            **spent.to_dict(),
            "epsilon_per_round": self.epsilon_round,
            "target": self.budget.to_dict() if self.budget is not None else None,
            "rounds_accounted": len(self.events),
            **{k: v for k, v in mech.items() if k != "mechanism"},
            "sensitivity": sens,
            "neighbouring": RECORD_LEVEL,
            **guarantee,
            "unit": "per client, over the whole run",
            "assumptions": assumptions,
            "threat_model": "semi-honest server observing every client's noisy labels",
        }}


class DPFedCT(FedCT):
    """FedCT with the XOR mechanism (or k-ary randomized response) on the shared labels."""

    name = "dp-fedct"
    description = ("DP-FedCT: FedCT with the XOR mechanism (bitwise randomized response) or "
                   "k-ary RR on the labels; (ε, δ) accounted over rounds")
    options_class = DPFedCTOptions
    supports_regression = False  # no sound mechanism for real predictions: docs/robustness.md

    threat_model = ThreatModel(
        view="noisy-labels-on-queries",
        adversary=SERVER_CHOOSING_U,
        sees="the client's randomized labels on U every round (noisy one-hot rows for xor, "
             "k-ary randomized-response labels for kary) and, with sensitivity empirical, "
             "its sensitivity estimate once before round 1",
        guarantee="conditional",
        against="the honest-but-curious server (and anyone who sees what it sees)",
        neighbouring=RECORD_LEVEL,
        assumptions=(
            *_ASSUMPTIONS,
            "every client's true Hamming sensitivity is at most the s* the noise is "
            "calibrated to: proven for sensitivity worst (2|U|, which protects a client's "
            "whole dataset: formal), an assumption for empirical, prop2 (a heuristic) and a "
            "given number (conditional)",
        ),
        outside=(("privacy.sensitivity.details", "sensitivity empirical: the per-client "
                  "estimates, computed from private data without noise"),),
        payloads=(
            Payload("dpfedct.bits", "bits", "noisy-one-hot", rows="public", covered=True),
            Payload("dpfedct.labels", "labels", "hard-labels", rows="public", covered=True,
                    note="k-ary randomized response of the client's hard labels"),
            *(Payload("dpfedct.sensitivity.reply", key, "metric", source="config",
                      note=_SENSITIVITY_NOTE)
              for key in ("bits", "max_changed_labels", "mean_changed_labels")),
            *EVALUATION_PAYLOADS))

    def extension_refusal(self, settings: Settings, learners: list[Any]) -> str | None:
        if settings.options_as(DPFedCTOptions).epsilon is not None:
            return ("the total ε is split over the planned rounds (the per-round ε depends on "
                    "them); rerun with the new --rounds, or use --epsilon-per-round")
        return super().extension_refusal(settings, learners)

    def make_server(self, ctx: MethodContext, n_public: int, learners: list[Any],
                    client_sizes: list[int]) -> ServerRole:
        return DPFedCTServer(ctx.settings, n_public, ctx.truth_public)

    def make_client(self, cid: int, data: ClientData, learner: Any, ctx: MethodContext,
                    X_public: np.ndarray | None, X_test: np.ndarray,
                    y_test: np.ndarray) -> ClientRole:
        return DPFedCTClient(cid, data, learner, ctx.settings, X_public, X_test, y_test,
                             seed=ctx.seeds[cid])

    def participation_refusal(self, settings: Settings) -> str | None:
        if settings.options_as(DPFedCTOptions).sensitivity == "empirical":
            return ("the empirical sensitivity is estimated once from every client before "
                    "round 1; give --sensitivity worst (or a number) instead.")
        return None
