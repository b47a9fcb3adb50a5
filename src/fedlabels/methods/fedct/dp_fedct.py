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
* ``mechanism="dpsgd"`` — clients train with DP-SGD and share their DP models' plain hard
  labels: a formal record-level (ε, δ) against the server and the other clients, accounted
  over every local step (:mod:`fedlabels.methods.fedct.mechanisms.dpsgd`).

Each mechanism is a strategy of :mod:`fedlabels.methods.fedct.mechanisms`.

The options (:class:`DPFedCTOptions`: the run's total (ε, δ) budget ``epsilon``, from which
the per-round ε is calibrated and against which every release is checked, or a pure
``epsilon_per_round``; ``dpsgd`` a total ``epsilon`` or DP-SGD's ``noise_multiplier``;
the sensitivity s* —
worst case 2|U|, an empirical estimate, Prop. 2 or a given number of bits — and the
mechanism) are FedCT's plus the privacy ones; ``fedlabels methods dp-fedct`` lists them.

Threat model: honest clients and a server that may deviate from the protocol but does not
collude with them (the paper's server is semi-honest; here each client takes its mechanism,
noise and number of releases from its own options and refuses other requests). Each client's
releases are ε-DP under the run's neighbouring relation (one record of that client's private
data, or its whole dataset with the worst-case sensitivity; given the sensitivity
assumption); the consensus and everything downstream is post-processing. The
clients' own final models are not protected (they never leave the client). Each client draws
its noise from OS entropy (:func:`fedlabels.core.randomness.numpy_generator`), never from the run
seed, which the server knows.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from fedlabels.comm import Message
from fedlabels.core.errors import BudgetRefusal, FedLabelsError, ParameterRefusal
from fedlabels.data import ClientData
from fedlabels.method.base import (
    Capabilities,
    ClientRole,
    Grid,
    Method,
    MethodContext,
    ServerRole,
    Settings,
)
from fedlabels.method.blocks import VoteServer, broadcast, check_voters, vote_consensus
from fedlabels.method.dpsgd_client import DPSGDClient
from fedlabels.method.message_config import own_count, own_value, planned_round
from fedlabels.method.state import StateValue, prefixed, unprefixed
from fedlabels.method.threat import (
    DEVIATING_SERVER,
    EVALUATION_PAYLOADS,
    Payload,
    ThreatModel,
)
from fedlabels.methods.fedct.dp_fedct_options import DPFedCTOptions, planned_sensitivity
from fedlabels.methods.fedct.fedct import FedCTClient
from fedlabels.methods.fedct.mechanisms import mechanism_for
from fedlabels.methods.fedct.mechanisms.randomized_response import RR_ASSUMPTIONS
from fedlabels.privacy.events import RECORD_LEVEL
from fedlabels.privacy.ledger import Ledger, LedgerEvents

_SENSITIVITY_NOTE = ("sent only with sensitivity empirical: the sensitivity estimate is "
                     "computed from the client's private data and released without noise")


class DPFedCTClient(DPSGDClient, FedCTClient):
    """A FedCT client that makes its release on U private through the round's mechanism
    (:mod:`fedlabels.methods.fedct.mechanisms`), with its secret noise generator.

    Its own options, never the server's message, decide its protection: it refuses a message
    that asks for another mechanism, less noise than its options calibrate
    (:meth:`~.base.LabelMechanism.client_noise`), other local steps than its own
    ``period`` or a release beyond the planned rounds,
    and answers the (noiseless) sensitivity estimate only where its options choose
    ``sensitivity=empirical``, once."""

    trains_with_u_options: ClassVar[bool] = False

    state_attrs: ClassVar[tuple[str, ...]] = ("releases", "sensitivity_answers",
                                              "own_sensitivity")

    def __init__(self, *args: Any, seed: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.seed = seed  # the sensitivity estimate's learner; never the noise
        self.releases = 0
        self.sensitivity_answers = 0
        # empirical: this client's estimate (bits, max and mean changed labels), made once
        self.own_sensitivity: np.ndarray | None = None
        self.strategy = mechanism_for(self.options.mechanism)
        self._own_noise: dict[str, Any] | None = None  # calibrated from the options once
        if self.strategy.uses_sensitivity and self.options.sensitivity == "empirical":
            self.handlers["dpfedct.sensitivity"] = self.estimate_sensitivity

    def train(self, message: Message) -> Message:
        if self.releases >= self.settings.rounds:
            raise BudgetRefusal(
                f"client {self.cid}: privacy budget exceeded: this client's options plan "
                f"{self.settings.rounds} releases, all made; refusing release "
                f"{self.releases + 1}.")
        mine = self.options.mechanism
        asked = str(message.config.get("mechanism", mine))
        if asked != mine:  # the client's own options decide how its data is protected
            raise ParameterRefusal(f"client {self.cid}: the server asked for mechanism "
                                   f"{asked!r} but this client's options say {mine!r}; "
                                   "refusing.", named=f"the site's mechanism is {mine!r}")
        # the model it releases from trains its own steps a round (what its plan and an
        # empirical s* were made for), never the server's number
        self.checked_steps(message.config)
        noise = self.strategy.client_noise(self, message.config)  # refuses less noise
        self.releases += 1
        return self.strategy.release(self, message, noise)

    def planned_events(self) -> list[Any] | None:
        """One release per planned round, each at this client's own noise (dpsgd: its
        DP-SGD rounds)."""
        event = self.strategy.release_event(self, self.own_noise())
        if event is None:
            return super().planned_events()
        return [event] * int(self.settings.rounds)

    def own_noise(self) -> dict[str, Any]:
        """The noise parameters this client's options calibrate (cached; deterministic)."""
        if self._own_noise is None:
            self._own_noise = self.strategy.own_noise(self)
        return self._own_noise

    def sensitivity_of_options(self) -> Any:
        """s* from this client's options; for ``empirical`` its own estimate (made now if the
        server never asked for it)."""
        from fedlabels.privacy.events import Sensitivity

        n = len(self.public)
        planned = planned_sensitivity(self.options, n)
        if planned is not None:
            return planned
        bits = min(int(self._estimate()[0]), 2 * n)
        return Sensitivity(bits, "empirical", n, formal=False)

    _release: Any = None

    def set_pseudo_labels(self, labels: np.ndarray) -> None:
        """P <- the consensus, shaped for the site's own model as its options say
        (:mod:`fedlabels.methods.fedct.site_model`; nothing changes what is sent)."""
        from fedlabels.methods.fedct.site_model import shapes_consensus, site_labels

        if shapes_consensus(self.options):
            model = self.model()
            labels = site_labels(labels, np.asarray(model.predict_proba(self.public)),
                                 np.asarray(model.classes_), self.options)
        super().set_pseudo_labels(labels)

    def finetune_site_model(self, message: Message) -> None:
        """After the last round's training, ``finetune_steps`` plain steps of the site's own
        model on its private data alone (never sent)."""
        steps = int(getattr(self.options, "finetune_steps", 0))
        last = self.settings.rounds - 1
        if steps and planned_round(message.config, self.cid, self.settings.rounds) == last:
            self.train_on(self.data.X, self.data.y, steps)

    def sensitivity_bits(self) -> int:
        """The s* (bits) this client's ledger accounts its label releases with: from its own
        options; an empirical estimate is the server's, so the ledger takes 2|U| for it."""
        n = len(self.public)
        found = planned_sensitivity(self.options, n)
        return 2 * n if found is None else min(found.bits, 2 * n)

    def release_learner(self) -> Any:
        """``dpsgd`` with ``site_model=private``: the DP-SGD model whose labels the client
        shares, apart from its own (evaluated) model; a fresh copy of its learner at first."""
        if self._release is None:
            from fedlabels.learners import clone_fresh_learner

            release: Any = clone_fresh_learner(self.learner)
            lr = self.options.labeller_lr  # the client's own option, never a message's
            if lr is not None:
                params = release.get_params()
                if "learning_rate" not in params or params.get("optimizer") is not None:
                    has = ("its own optimizer factory (set the rate there)"
                           if "learning_rate" in params else "no learning_rate")
                    raise FedLabelsError(
                        f"client {self.cid}: labeller_lr sets the learning rate of the DP-SGD "
                        f"labeller's Adam, but {type(release).__name__} has {has}; drop "
                        "labeller_lr.")
                release.set_params(learning_rate=lr)
            self._release = release
        return self._release

    def state_dict(self) -> dict[str, StateValue]:
        out = super().state_dict()
        if self._release is not None and hasattr(self._release, "model_"):
            out.update(prefixed("release", self._release.state_dict()))
        return out

    def load_state_dict(self, state: Mapping[str, StateValue]) -> None:
        super().load_state_dict(state)
        release = unprefixed("release", state)
        self._release = None
        if release:
            self.release_learner().load_state_dict(release)

    def _estimate(self) -> np.ndarray:
        """Empirical s* of this client's learner on its own data, as its options say:
        (bits, max and mean changed labels), computed once and kept."""
        from fedlabels.learners import build_learner, parse_model_spec
        from fedlabels.methods.fedct.sensitivity import empirical_sensitivity

        if self.own_sensitivity is not None:
            return self.own_sensitivity
        opts, U = self.options, self.X_public
        if U is None:
            raise FedLabelsError(f"client {self.cid}: DP-FedCT needs the public set U.")
        spec = opts.sensitivity_model
        learner = (build_learner(parse_model_spec(spec)[0], n_classes=self.settings.n_classes,
                                 random_state=self.seed) if spec else self.learner)
        steps = self.sensitivity_steps()
        est = empirical_sensitivity(
            learner, self.data.X, self.data.y, U, self.settings.n_classes,
            n_neighbours=min(opts.sensitivity_neighbours, len(self.data.y)),
            relation=opts.sensitivity_relation, seed=self.seed, steps=steps)
        d = est.details
        self.own_sensitivity = np.array([est.bits, d["max_changed_labels"],
                                         d["mean_changed_labels"]], dtype=np.float64)
        return self.own_sensitivity

    def sensitivity_steps(self) -> int:
        """The steps each of the s* estimate's learners trains: the client's own
        ``sensitivity_steps``, else its plan's period."""
        own = self.options.sensitivity_steps
        return int(self.settings.period if own is None else own)

    def estimate_sensitivity(self, message: Message) -> Message:
        """This client's empirical s* (bits), from its own options, answered once: the
        answer is computed from private data without noise (outside the formal
        guarantee), so a second request is refused, and so is a request whose ``steps``
        are not the client's own (:meth:`sensitivity_steps`), nor its ``neighbours``,
        ``relation`` and ``model`` (its options' ``sensitivity_*``)."""
        own_count(message.config, "steps", self.cid, self.sensitivity_steps())
        opts = self.options
        for key, own in (("neighbours", opts.sensitivity_neighbours),
                         ("relation", opts.sensitivity_relation),
                         ("model", opts.sensitivity_model)):
            own_value(message.config, key, self.cid, own)
        if self.sensitivity_answers:
            raise BudgetRefusal(f"client {self.cid}: the sensitivity estimate is answered "
                                "once per run; refusing another.")
        self.note_noiseless("sensitivity estimate (s*)")
        bits, max_changed, mean_changed = self._estimate()
        self.sensitivity_answers += 1
        return Message("dpfedct.sensitivity.reply", category="control", config={
            "bits": int(bits), "max_changed_labels": int(max_changed),
            "mean_changed_labels": float(mean_changed)})


class DPFedCTServer(LedgerEvents, VoteServer):
    """Collects noisy label releases, forms the consensus (the mechanism's vote), and
    accounts for ε."""

    state_attrs: ClassVar[tuple[str, ...]] = ("events", "sensitivity")
    secret_generators: ClassVar[tuple[str, ...]] = ("_rng",)  # consensus tie-breaks

    def __init__(self, settings: Settings, n_public: int,
                 truth_public: np.ndarray | None) -> None:
        options = settings.options_as(DPFedCTOptions)
        super().__init__(settings, n_public, vote_consensus(settings.n_classes, options.quorum),
                         truth_public)
        self.options = options
        self.mechanism = self.options.mechanism
        self.strategy = mechanism_for(self.mechanism)
        self.delta = self.options.delta
        self._rng: np.random.Generator | None = None  # consensus tie-breaks, made on use
        self.sensitivity = (planned_sensitivity(self.options, n_public)
                            if self.strategy.uses_sensitivity else None)
        # the clients' releases, each recorded once; ε and the run's budget (the total
        # epsilon, per client) are views of it
        self.ledger = Ledger(self.delta, self.options.epsilon, what="each client",
                             per_client=True)
        self.seed = 0  # the run's server seed (make_server): public choices, e.g. queries
        self.text_learners = False  # the clients learn from text (make_server): no dpsgd
        self.dpsgd_model = "mlp"  # what DP-SGD makes of the clients' models (dpsgd_fit)
        self.epsilon_round: float | None = None
        if self.strategy.calibrates_at_build:  # dpsgd: the ledger's calibrated_by from now
            self.strategy.calibrate(self, None)

    def load_state_dict(self, state: Mapping[str, StateValue]) -> None:
        """Labels, events and s* as saved; the per-round ε is recalibrated from s*
        (deterministic)."""
        super().load_state_dict(state)
        self.epsilon_round = None
        if self.events:  # s* (if used) is known: no estimate, no exchange
            self.strategy.calibrate(self, None)

    def preflight(self) -> None:
        """The calibration of round 1 where it needs no client (every s* but an empirical
        estimate): a budget the planned rounds exceed, or noise-only labels, is refused."""
        if getattr(self, "sensitivity", None) is not None or \
                not self.strategy.uses_sensitivity:
            self.strategy.calibrate(self, None)

    def check_votes(self, request: Message, reply: Message) -> None:
        """The mechanism's release: xor's noisy one-hot rows (|U| x C bits), or hard labels
        (on all of U, or on the round's subset for subsample-aggregate)."""
        from fedlabels.method.replies import MalformedReply, checked_labels, require_arrays

        n, c = self.n_public, self.settings.n_classes
        if self.mechanism == "xor":
            require_arrays(reply, "bits")
            bits = np.asarray(reply.arrays["bits"])
            if bits.dtype != np.uint8 or bits.size != -(-n * c // 8):
                raise MalformedReply(f"its bits hold {bits.size} values of {bits.dtype}; "
                                     f"expected {-(-n * c // 8)} bytes ({n} rows of {c} bits)")
            return
        size = request.config.get("subset_size")
        checked_labels(reply, "labels", int(size) if size is not None else n, c)

    # ------------------------------------------------------------------ rounds
    def run_round(self, rnd: int, grid: Grid) -> dict[str, float]:
        self.strategy.calibrate(self, grid)
        mech = self.strategy.round_config(self)
        # stops before a release that would take any client beyond the target (a decision:
        # the run's ε is computed when the result asks for it)
        self.ledger.admit(self.strategy.round_events(self, mech, grid.client_ids, None))
        base = self.train_message(rnd)
        message = Message(base.kind, arrays=base.arrays, config={**base.config, **mech})
        replies = broadcast(grid, message, rnd)
        new = self.strategy.collect(self, replies, mech)
        self.ledger.add(*self.strategy.round_events(self, mech, list(replies), replies))
        metrics = self.consensus_metrics(new)
        self.labels = new
        return metrics

    def result_extra(self) -> dict[str, Any]:
        privacy = {"method": "dp-fedct", **self.strategy.privacy(self)}
        sensitivity = privacy.get("sensitivity")
        if isinstance(sensitivity, dict) and sensitivity.get("source") == "empirical":
            privacy["outside_guarantee"] = [
                *privacy.get("outside_guarantee", []),
                {"name": "privacy.sensitivity.details", "reason": "sensitivity empirical: the "
                 "per-client estimates, computed from private data without noise"}]
        if not (self.options.mechanism == "dpsgd" and self.options.site_model == "dp"):
            privacy["outside_guarantee"] = [*privacy.get("outside_guarantee", []),
                                            CLIENT_MODELS_OUTSIDE]
        return {"privacy": privacy}


#: a client's final model where it is not the DP model whose labels it shares (every
#: mechanism but ``dpsgd`` with ``site_model=dp``)
CLIENT_MODELS_OUTSIDE = {
    "name": "client_models",
    "reason": "each client's final model (the one evaluated; the simulator's X.models.npz and "
              "checkpoints, readable by their owner only): trained on the client's private "
              "records without the mechanism, kept by the client and never sent, so not to be "
              "released as private"}


class DPFedCT(Method):
    """FedCT with the XOR mechanism (or k-ary randomized response) on the shared labels."""

    name = "dp-fedct"
    description = ("DP-FedCT: FedCT with private label releases (--mechanism: xor, kary, "
                   "dpsgd, subsample-aggregate); (ε, δ) accounted over the run")
    options_class = DPFedCTOptions
    # no regression: no sound mechanism for real predictions (docs/robustness.md); a canary
    # audit observes the audited client's label releases on U
    capabilities = Capabilities(canary_view="replies")

    threat_model = ThreatModel(
        view="noisy-labels-on-queries",
        adversary=DEVIATING_SERVER,
        sees="the client's randomized labels on U every round (noisy one-hot rows for xor, "
             "k-ary randomized-response labels for kary) and, with sensitivity empirical, "
             "its sensitivity estimate once before round 1",
        guarantee="conditional",
        against="the server, also one that deviates from the protocol: each client takes "
                "its mechanism, noise and number of releases from its own options (on "
                "Flower: the site's privacy-plan) and refuses less noise, more releases, "
                "unplanned answers and rewound or replayed messages; and anyone who sees "
                "what the server sees",
        neighbouring=RECORD_LEVEL,
        assumptions=(
            *RR_ASSUMPTIONS,
            "every client's true Hamming sensitivity is at most the s* the noise is "
            "calibrated to: proven for sensitivity worst (2|U|, which protects a client's "
            "whole dataset: formal), an assumption for empirical, prop2 (a heuristic) and a "
            "given number (conditional)",
        ),
        payloads=(
            Payload("dpfedct.bits", "bits", "noisy-one-hot", rows="public", covered=True),
            Payload("dpfedct.labels", "labels", "hard-labels", rows="public", covered=True,
                    note="k-ary randomized response of the client's hard labels"),
            Payload("dpfedct.dpsgd_labels", "labels", "hard-labels", rows="public",
                    covered=True, note="dpsgd: hard labels of the client's DP-SGD model "
                    "(formal record-level (ε, δ), set per run in privacy)"),
            Payload("dpfedct.sa_labels", "labels", "hard-labels", rows="subset", covered=True,
                    note="subsample-aggregate: GNMax of the client's k teachers' votes on the "
                    "round's queries of U (formal record-level (ε, δ))"),
            Payload("dpfedct.sa_labels", "dd_rdp", "metric",
                    note="subsample-aggregate with data_dependent: the data-dependent RDP of "
                    "the client's vote counts, from private data without noise"),
            *(Payload("dpfedct.sensitivity.reply", key, "metric", source="config",
                      note=_SENSITIVITY_NOTE)
              for key in ("bits", "max_changed_labels", "mean_changed_labels")),
            *EVALUATION_PAYLOADS))

    def check_clients(self, n_clients: int, settings: Settings) -> None:
        check_voters("DP-FedCT", n_clients, settings.options_as(DPFedCTOptions).quorum)

    def validate(self, n_clients: int, settings: Settings, learners: list[Any]) -> None:
        options = settings.options_as(DPFedCTOptions)
        self.check_clients(n_clients, settings)
        refusal = mechanism_for(options.mechanism).refusal(settings, learners)
        if refusal:
            raise FedLabelsError(refusal)

    def extension_refusal(self, settings: Settings, learners: list[Any]) -> str | None:
        options = settings.options_as(DPFedCTOptions)
        if options.epsilon is not None and options.mechanism == "dpsgd":
            return ("DP-SGD's σ is calibrated from the total ε over the planned rounds' "
                    "steps; rerun with the new --rounds, or give --noise-multiplier")
        if options.epsilon is not None:
            return ("the total ε is split over the planned rounds (the per-round ε depends on "
                    "them); rerun with the new --rounds, or use --epsilon-per-round")
        return super().extension_refusal(settings, learners)

    def make_server(self, ctx: MethodContext, n_public: int, learners: list[Any],
                    client_sizes: list[int]) -> ServerRole:
        from fedlabels.learners.text_input import accepts_text

        server = DPFedCTServer(ctx.settings, n_public, ctx.truth_public)
        server.seed = ctx.server_seed  # subsample-aggregate's query subsets (public choice)
        # text learners cannot take DP-SGD's mlp: what a refusal recommends (no data read)
        server.text_learners = any(accepts_text(ln) for ln in learners)
        # whether the advice keeps the user's model (else "mlp", as initialised); a model
        # DP-SGD can train is a torch network, so with torch not loaded none is one, and a
        # refusal's wording does not import torch (seconds) for a run of trees
        if "torch" in sys.modules:
            from fedlabels.learners.dpsgd import dpsgd_fit

            server.dpsgd_model = dpsgd_fit(learners)
        return server

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
