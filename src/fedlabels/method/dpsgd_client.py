"""Client-side pieces of the DP methods: a secret noise generator, and local DP-SGD training.

:class:`SecretNoiseClient` keeps a client's privacy noise generator, seeded from OS entropy
(:func:`fedlabels.core.randomness.numpy_generator`) where it is first needed — never from the run
seed, which the server knows — and saved with the client's state, and its privacy ledger
(:class:`~fedlabels.privacy.ledger.Ledger`): :meth:`SecretNoiseClient.charge` records each
release's event before the release is made, in the role's own ledger and, on a Flower site,
first in the site's persistent ledger (:mod:`fedlabels.privacy.site_ledger`), which refuses
a release beyond the site's lifetime budget. :class:`DPSGDClient` adds
local DP-SGD (:mod:`fedlabels.learners.dpsgd`) with that generator, counts the steps it
takes (``dp_steps``) and refuses steps beyond the plan its noise was calibrated for.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from fedlabels.comm import Message
from fedlabels.core.errors import (
    BudgetRefusal,
    FedLabelsError,
    ParameterRefusal,
    refuse_other_value,
)
from fedlabels.core.randomness import numpy_generator
from fedlabels.method.base import ClientRole
from fedlabels.method.message_config import real
from fedlabels.method.options import POSITIVE, PROBABILITY, option
from fedlabels.method.state import StateValue, generator_from_state, generator_state
from fedlabels.privacy.dpsgd_accounting import DPSGDRoundEvent
from fedlabels.privacy.ledger import Ledger

#: how far below the client's own σ a server's may be before it is refused: the same
#: calibration on another machine may end a search step (0.1 %) apart; the client then adds
#: its own σ (:meth:`DPSGDClient.round_sigma`)
SIGMA_AGREEMENT = 0.01
#: the options only DP-SGD reads (declared once here, by every method that trains with it)
DPSGD_OPTIONS = ("example_clip", "example_rate")


def example_clip_option(context: str) -> Any:
    """C: the per-example L2 gradient clipping norm of DP-SGD."""
    return option(1.0, f"{context}: per-example L2 gradient clipping norm C of DP-SGD",
                  kind=float, interval=POSITIVE)


def example_rate_option(context: str) -> Any:
    """q: DP-SGD's Poisson sampling rate of private records per step."""
    return option(0.25, f"{context}: Poisson sampling rate q of the private records per "
                  "DP-SGD step (expected batch q·n; large batches keep the signal above the "
                  "noise, docs/privacy.md §7c)", kind=float, interval=PROBABILITY)


def one_of_sigma_and_epsilon(who: str, noise_multiplier: float | None,
                             epsilon: float | None) -> None:
    """Refuse options that give both or neither of σ (``noise_multiplier``) and a target ε
    (``epsilon``, from which σ is calibrated); ``who``: the method (and mode) they are of."""
    if (noise_multiplier is None) == (epsilon is None):
        raise FedLabelsError(f"{who} needs exactly one of noise_multiplier (σ, e.g. "
                             "--noise-multiplier 1.0) and epsilon (a target ε over the run, "
                             "e.g. --epsilon 8, σ is then calibrated); in Python: "
                             "fl.run(..., options={'epsilon': 8}).")


class SecretNoiseClient(ClientRole):
    """A client role with a secret noise generator kept in its state (``noise_rng``) and
    the ledger of what it released (``ledger``, state ``ledger_events``)."""

    secret_state: ClassVar[tuple[str, ...]] = ("noise_rng",)
    _noise_rng: np.random.Generator | None = None
    _ledger: Ledger | None = None
    #: the site's persistent ledger (a Flower site sets it; charged first)
    site_ledger: Any = None
    #: what the site ledger stores with each charge (the run, the message number)
    charge_context: Mapping[str, Any] = {}
    #: the charges made for the message in hand (a site builds a role for each message)
    _site_charges: int = -1
    #: what the site ledger has spent after this message's last charge (None: no charge)
    site_spent: Any = None

    @property
    def ledger(self) -> Ledger:
        """This client's releases in this run, at its own δ."""
        if self._ledger is None:
            self._ledger = Ledger(float(getattr(self.options, "delta", None) or 1e-5),
                                  what=f"client {self.cid}")
        return self._ledger

    def planned_events(self) -> list[Any] | None:
        """The events one run of this client's own plan charges (its options' noise, its
        planned releases); None where its options plan no total."""
        return None

    def checked_steps(self, config: Mapping[str, Any], own: int | None = None) -> int:
        """The local steps a message asks for: this client's own (``own``, default its steps
        per round, ``settings.period``), whatever else the message says (a negative number
        took DP-SGD steps off its ledger while more were run, a larger one spent the plan
        early, trained the model a DP-FedCT client releases from beyond what its s* was
        estimated for, or, 2⁶², kept a site training for good)."""
        steps = config.get("steps")
        own = int(self.settings.period) if own is None else int(own)
        if isinstance(steps, bool) or not isinstance(steps, int | np.integer) or steps != own:
            raise ParameterRefusal(f"client {self.cid}: the server asked for {steps!r} local "
                                   f"steps but this client's plan takes {own}; refusing to "
                                   "train.", named=f"the site's steps is {own}")
        return own

    def note_noiseless(self, what: str) -> None:
        """Record, on a Flower site, a noiseless answer computed from private data (outside
        the guarantee) before it is given; the site ledger may refuse it."""
        if self.site_ledger is not None:
            self.site_ledger.note_noiseless(what, **self.charge_context)

    def charge(self, *events: Any) -> None:
        """Record ``events`` before the release they describe (the site ledger first, which
        refuses beyond the site's lifetime budget and is on disk before this returns)."""
        if self.site_ledger is not None:
            # which charge of this message (a role is built for each message on a site)
            self._site_charges += 1
            first = not self.ledger.events  # this run's first release: its whole plan
            plan = self.planned_events() if first else None
            # each entry names the accountant that calibrated the noise (DP-SGD's own σ)
            calibrated = self.ledger.calibrated_by
            self.site_spent = self.site_ledger.charge(
                events, run_plan=plan, **self.charge_context, charge=self._site_charges,
                **({} if calibrated is None else {"calibrated_by": calibrated}))
        # a decision is all a check needs (this ledger has no target): a tight PLD bound
        # per round took seconds, and an ε per round (a bisection) was thrown away
        self.ledger.add(*events)

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
                "noise_rng": None if rng is None else generator_state(rng),
                "ledger_events": self.ledger.events_json()}

    def load_state_dict(self, state: Mapping[str, StateValue]) -> None:
        super().load_state_dict(state)
        if "noise_rng" not in state:
            raise FedLabelsError(f"client {self.cid}: the state has no noise generator state "
                                 "(noise_rng).")
        value = state["noise_rng"]
        self._noise_rng = None if value is None else generator_from_state(value)
        self._ledger = None
        self.ledger.restore_json(str(state.get("ledger_events") or "[]"))


class DPSGDClient(SecretNoiseClient):
    """Trains its torch learner with DP-SGD on its private data, counting every step."""

    state_attrs: ClassVar[tuple[str, ...]] = ("dp_steps",)
    dp_steps: int = 0

    def planned_dp_steps(self) -> int | None:
        """The steps this client's noise is planned for: its rounds × period where its
        options give σ (``noise_multiplier``) or a total ε to calibrate it (None: neither,
        nothing to enforce)."""
        opts = self.settings.options
        if getattr(opts, "epsilon", None) is None and \
                getattr(opts, "noise_multiplier", None) is None:
            return None
        return self.settings.rounds * self.settings.period

    def own_sigma(self) -> float | None:
        """The DP-SGD σ of this client's own options: its ``noise_multiplier``, else what
        its ε calibrates over its planned steps (None: neither); its ledger states which
        (``calibrated_by``: the accountant, or ``given``)."""
        from fedlabels.privacy.dpsgd_accounting import dpsgd_noise, sigma_calibrated_by

        planned, opts = self.planned_dp_steps(), self.options
        if planned is None:
            return None
        sigma, calibration = dpsgd_noise(getattr(opts, "noise_multiplier", None),
                                         opts.epsilon, opts.delta, opts.example_rate, planned)
        self.ledger.calibrated_by = sigma_calibrated_by(calibration)
        return sigma

    def planned_events(self) -> list[Any] | None:
        """Each planned round's ``period`` DP-SGD steps at this client's own σ."""
        sigma, opts = self.own_sigma(), self.options
        if sigma is None:
            return None
        step = DPSGDRoundEvent(sigma, opts.example_rate, opts.example_clip,
                               ((self.cid, int(self.settings.period)),))
        return [step] * int(self.settings.rounds)

    def check_dpsgd_round(self, config: Mapping[str, Any]) -> int:
        """The client's own options, not the server's message, decide its protection: a
        round whose q or C differ from them, whose σ is below the σ they give or calibrate,
        whose step count is not the client's own or whose steps go beyond the planned
        number is refused before anything trains. Returns the round's steps."""
        opts = self.options
        for key in DPSGD_OPTIONS:
            refuse_other_value(self.cid, key, config.get(key), getattr(opts, key),
                               then="refusing to train")
        planned, sigma = self.planned_dp_steps(), self.own_sigma()
        if planned is None or sigma is None:
            return self.checked_steps(config)
        if real(config, "noise_multiplier", self.cid) < sigma * (1 - SIGMA_AGREEMENT):
            needs = (f"this client's ε = {opts.epsilon} needs" if opts.epsilon is not None
                     else "this client's noise_multiplier gives")
            raise ParameterRefusal(f"client {self.cid}: the server asked for DP-SGD noise σ = "
                                 f"{float(config['noise_multiplier']):.6g}, below the σ = "
                                 f"{sigma:.6g} {needs}; refusing.",
                                 named=f"the site's noise_multiplier is {sigma:.6g}")
        steps = self.checked_steps(config)
        if self.dp_steps + steps > planned:
            raise BudgetRefusal(
                f"client {self.cid}: privacy budget exceeded: the DP-SGD noise was planned "
                f"for {planned} local steps, {self.dp_steps} taken; refusing {steps} more.")
        return steps

    def round_sigma(self, config: Mapping[str, Any]) -> float:
        """The σ this client's steps add: the server's, or the client's own where that is
        larger. A σ more than :data:`SIGMA_AGREEMENT` below the client's own is refused by
        :meth:`check_dpsgd_round`; within it (the same calibration computed on another
        machine, whose floating point may end one search step apart) the client adds its
        own σ, so its guarantee holds whatever the server computed, and the server's
        accounting at its smaller σ only overstates ε."""
        asked, own = real(config, "noise_multiplier", self.cid), self.own_sigma()
        return asked if own is None else max(asked, own)

    def dpsgd_train(self, message: Message, X_aux: np.ndarray | None = None,
                    y_aux: np.ndarray | None = None,
                    aux_index: np.ndarray | None = None, learner: Any = None) -> int:
        """``steps`` DP-SGD steps with the message's (σ, q, C) on ``learner`` (default: the
        client's own); returns the steps taken."""
        from fedlabels.learners.dpsgd import DPSGDConfig, check_dpsgd_learner, dpsgd_steps

        own = learner is None
        learner = self.learner if own else learner
        if not hasattr(learner, "model_") and callable(getattr(learner, "initialise", None)):
            # built first: your own network's batch normalisation is seen only once built
            learner.initialise(self.data.X.shape[1], self.settings.n_classes)
        check_dpsgd_learner(learner, f"client {self.cid}")
        cfg = message.config
        steps = self.check_dpsgd_round(cfg)
        config = DPSGDConfig(self.round_sigma(cfg), float(cfg["example_rate"]),
                             float(cfg["example_clip"]))
        self.charge(DPSGDRoundEvent(config.noise_multiplier, config.sample_rate,
                                    config.clip, ((self.cid, steps),)))
        # a separate learner (DP-FedCT's labeller) joins the clients-together rendezvous of
        # the client's own learner, if the simulator set one
        together = None if own else getattr(self.learner, "_rendezvous", None)
        taken = dpsgd_steps(learner, self.data.X, self.data.y, steps, config,
                            self.noise_rng, X_aux, y_aux, aux_index, rendezvous=together)
        self.dp_steps += taken
        if own:
            self.fitted = True
        return taken


def dpsgd_round_config(noise_multiplier: float, options: Any) -> dict[str, Any]:
    """The DP-SGD parameters a server puts into its train message."""
    return {"noise_multiplier": noise_multiplier, "example_rate": options.example_rate,
            "example_clip": options.example_clip}
