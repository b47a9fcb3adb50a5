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

The options (:class:`DPFedCTOptions`: ε per round or a total (ε, δ), the sensitivity s* —
worst case 2|U|, an empirical estimate, Prop. 2 or a given number of bits — and the
mechanism) are FedCT's plus the privacy ones; ``fedlabels methods dp-fedct`` lists them.

Threat model: honest clients, a semi-honest server, no collusion (the paper's). Each client's
releases are ε-DP with respect to one record of that client's private data (given the
sensitivity assumption); the consensus and everything downstream is post-processing. The
clients' own final models are not protected (they never leave the client).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedlabels.comm import Message, pack_labels
from fedlabels.data import ClientData
from fedlabels.errors import FedLabelsError
from fedlabels.privacy.events import RECORD_LEVEL, Sensitivity
from fedlabels.protocols.base import ClientRole, Grid, MethodContext, ServerRole, Settings
from fedlabels.protocols.blocks import broadcast
from fedlabels.protocols.fedct import FedCT, FedCTClient, FedCTOptions, FedCTServer
from fedlabels.protocols.options import Interval, option
from fedlabels.protocols.state import StateValue, generator_from_state, generator_state
from fedlabels.protocols.threat import (
    EVALUATION_PAYLOADS,
    SERVER_CHOOSING_U,
    Payload,
    ThreatModel,
)

MECHANISMS = ("xor", "kary")
SENSITIVITY_SOURCES = ("worst", "empirical", "prop2")  # or a number of bits
POSITIVE = Interval(0.0, math.inf, "neither")  # finite and > 0
PROBABILITY = Interval(0.0, 1.0, "neither")
#: the options that only one way of getting s* reads
_ONLY_WITH = {"prop2": ("stability_rate", "sensitivity_delta"),
              "empirical": ("sensitivity_neighbours", "sensitivity_relation",
                            "sensitivity_model", "sensitivity_steps"),
              "a number of bits": ("sensitivity_note",)}


def _sensitivity_spec(value: Any) -> Any:
    """A keyword in lower case, or a number of bits (numeric text becomes a float)."""
    if not isinstance(value, str):
        return value
    key = value.strip().lower()
    try:
        return float(key)
    except ValueError:
        return key


@dataclass(frozen=True)
class DPFedCTOptions(FedCTOptions):
    epsilon: float | None = option(
        None, "pure ε of one round's label release (per client); give this or epsilon_total",
        kind=float, interval=POSITIVE, nullable=True, flag=True)
    epsilon_total: float | None = option(
        None, "target (ε, δ) over the whole run: the per-round ε is calibrated with the exact "
        "accountant over the run's rounds (mechanism xor only)", kind=float,
        interval=POSITIVE, nullable=True)
    delta: float = option(1e-5, "δ of the (ε, δ) of the composition over rounds", kind=float,
                          interval=PROBABILITY, flag=True)
    mechanism: str = option("xor", "xor: bitwise randomized response on the one-hot rows; "
                            "kary: k-ary randomized response per label", kind=str,
                            choices=MECHANISMS)
    sensitivity: str | float = option(
        "worst", "Hamming sensitivity s* in bits: worst (2|U|), empirical (estimated before "
        "round 1), prop2 (needs stability_rate) or a number of bits in (0, 2|U|]",
        kind=(str, float), interval=POSITIVE, flag=True, convert=_sensitivity_spec)
    stability_rate: float | None = option(
        None, "prop2: the learner's on-average-replace-one stability rate ε(n)", kind=float,
        interval=PROBABILITY, nullable=True)
    sensitivity_delta: float | None = option(
        None, "prop2: probability that the bound fails over the data draw; none: delta",
        kind=float, interval=PROBABILITY, nullable=True)
    sensitivity_neighbours: int = option(
        10, "empirical: neighbouring datasets per client (at most its number of records)",
        kind=int, interval=Interval(1, None))
    sensitivity_relation: str = option(
        "remove", "empirical: a neighbour removes one record, or replaces its label",
        kind=str, choices=("remove", "replace"))
    sensitivity_model: str = option(
        "", "empirical: the model spec to estimate with; empty: each client's own learner",
        kind=str)
    sensitivity_steps: int | None = option(
        None, "empirical: training steps of a torch learner; none: period", kind=int,
        interval=Interval(1, None), nullable=True)
    sensitivity_note: str = option(
        "", "where a given number of bits came from (kept in the result)", kind=str)

    def check(self) -> None:
        super().check()
        if (self.epsilon is None) == (self.epsilon_total is None):
            raise FedLabelsError("dp-fedct needs exactly one of epsilon (pure ε per round, e.g. "
                                 "--epsilon 1.0) and epsilon_total (--opt epsilon_total=8).")
        if self.epsilon_total is not None and self.mechanism != "xor":
            raise FedLabelsError("epsilon_total calibration supports mechanism=xor only; give "
                                 "epsilon (per round) for k-ary randomized response.")
        source = self.sensitivity
        if isinstance(source, str) and source not in SENSITIVITY_SOURCES:
            raise FedLabelsError(f"dp-fedct option sensitivity must be worst, empirical, prop2 "
                                 f"or a number of bits, got {source!r}.")
        if source == "prop2" and self.stability_rate is None:
            raise FedLabelsError("sensitivity prop2 needs the learner's stability rate: "
                                 "--opt stability_rate=0.01 (and --opt sensitivity_delta=1e-3; "
                                 "default: delta).")
        used = source if isinstance(source, str) else "a number of bits"
        given = self.given()
        for needs, names in _ONLY_WITH.items():
            unused = [n for n in names if n in given and needs != used]
            if unused:
                raise FedLabelsError(f"dp-fedct option(s) {', '.join(unused)} apply only with "
                                     f"sensitivity {needs}; got sensitivity {source!r}.")
        if self.sensitivity_model:
            from fedlabels.learners import parse_model_spec

            if len(parse_model_spec(self.sensitivity_model)) != 1:
                raise FedLabelsError(f"dp-fedct option sensitivity_model must be one model "
                                     f"spec, got {self.sensitivity_model!r}.")


#: what every DP-FedCT guarantee assumes, besides the sensitivity (stated per run)
_ASSUMPTIONS = (
    "honest clients, semi-honest (honest-but-curious) server, no collusion",
    "each client's label releases are protected w.r.t. one record of its private "
    "data; the consensus, the vote and training on pseudo-labels are post-processing",
    "the clients' final models never leave the clients and are not protected",
)
_SENSITIVITY_NOTE = ("the empirical sensitivity estimate is computed from the client's private "
                     "data and released to the server without noise")


class DPFedCTClient(FedCTClient):
    """A FedCT client that randomizes its labels on U before sending them."""

    def __init__(self, *args: Any, seed: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.seed = seed
        self.noise_rng = np.random.default_rng([seed, 0xD9F])
        self.handlers["dpfedct.sensitivity"] = self.estimate_sensitivity

    def state_dict(self) -> dict[str, StateValue]:
        return {**super().state_dict(), "noise_rng": generator_state(self.noise_rng)}

    def load_state_dict(self, state: Mapping[str, StateValue]) -> None:
        super().load_state_dict(state)
        self.noise_rng = generator_from_state(state.get("noise_rng"))

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

    def __init__(self, settings: Settings, n_public: int, truth_public: np.ndarray | None,
                 seed: int) -> None:
        from fedlabels.privacy.sensitivity import resolve_sensitivity

        super().__init__(settings, n_public, truth_public)
        self.options = settings.options_as(DPFedCTOptions)
        self.mechanism = self.options.mechanism
        self.delta = self.options.delta
        self.rng = np.random.default_rng([seed, 0xC0175])
        sens_delta = self.options.sensitivity_delta
        self.sensitivity = resolve_sensitivity(
            self.options.sensitivity, n_public, stability_rate=self.options.stability_rate,
            delta=self.delta if sens_delta is None else sens_delta,
            note=self.options.sensitivity_note)
        self.events: list[Any] = []
        self.epsilon_round: float | None = None

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
        """(ε per round, s*): estimated (if empirical) and calibrated before round 1."""
        from fedlabels.privacy.accounting import calibrate_xor_round_epsilon
        from fedlabels.privacy.validation import check_sensitivity_bits

        if self.sensitivity is None:
            self.sensitivity = self._estimate_sensitivity(grid)
        if self.epsilon_round is None:
            check_sensitivity_bits(self.sensitivity.bits, self.n_public)
            if self.options.epsilon is not None:
                self.epsilon_round = self.options.epsilon
            elif self.options.epsilon_total is not None:
                self.epsilon_round = calibrate_xor_round_epsilon(
                    self.options.epsilon_total, self.delta, self.settings.rounds,
                    self.sensitivity.bits)
            else:
                raise FedLabelsError("dp-fedct needs epsilon or epsilon_total.")
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
        mech = self.mechanism_config(epsilon, sens)
        base = self.train_message(rnd)
        message = Message(base.kind, arrays=base.arrays, config={**base.config, **mech})
        replies = broadcast(grid, message, rnd)
        n, c = self.n_public, self.settings.n_classes
        if self.mechanism == "xor":
            f = mech["flip_probability"]
            noisy = np.stack([unpack_rows(replies[cid].arrays["bits"], n, c)
                              for cid in sorted(replies)])
            new = bit_count_consensus(noisy, f, self.rng, self.options.quorum)
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
    options_class = DPFedCTOptions
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
            "calibrated to: proven for sensitivity worst (2|U|), an assumption for empirical, "
            "prop2 (holds with probability 1 - sensitivity_delta) and a given number",
        ),
        payloads=(
            Payload("dpfedct.bits", "bits", "noisy-one-hot", rows="public", covered=True),
            Payload("dpfedct.labels", "labels", "hard-labels", rows="public", covered=True,
                    note="k-ary randomized response of the client's hard labels"),
            *(Payload("dpfedct.sensitivity.reply", key, "metric", source="config",
                      note=_SENSITIVITY_NOTE)
              for key in ("bits", "max_changed_labels", "mean_changed_labels")),
            *EVALUATION_PAYLOADS))

    def make_server(self, ctx: MethodContext, n_public: int, learners: list[Any],
                    client_sizes: list[int]) -> ServerRole:
        return DPFedCTServer(ctx.settings, n_public, ctx.truth_public, ctx.server_seed)

    def make_client(self, cid: int, data: ClientData, learner: Any, ctx: MethodContext,
                    X_public: np.ndarray | None, X_test: np.ndarray,
                    y_test: np.ndarray) -> ClientRole:
        return DPFedCTClient(cid, data, learner, ctx.settings, X_public, X_test, y_test,
                             seed=ctx.seeds[cid])
