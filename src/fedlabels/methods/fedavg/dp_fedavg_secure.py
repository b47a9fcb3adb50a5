"""DP-FedAvg with distributed noise under secure aggregation (``aggregation="secure"``).

Kairouz, Liu & Steinke (2021), with Bonawitz et al. (2017)'s pairwise masks. Each round:

1. ``dpfedavg.keys``: the server announces the round's group; each member that accepts it
   draws a fresh X25519 key pair and returns its public key signed with its identity key
   (:mod:`fedlabels.secure.identity`, bound to the run, the round, the group and the
   member's σ, S, γ, min_group, k and d, which every peer checks against its own).
2. ``dpfedavg.train`` (attempt a = 0, 1, ...): the global weights, the members of this
   attempt and their signed keys. A member checks everything against its own configuration
   (its options, its roster), charges the release to its own ledger, trains, rounds its
   clipped update to the grid (z = rint(clip(Δ)/γ), ‖z‖₂ ≤ Δ = S/γ + √d/2), adds its own
   share e ~ N_Z(0, (σΔ)²/min_group) drawn from its OS-entropy generator, and returns
   z + e + M mod 2^k, packed to k bits a value (:mod:`fedlabels.secure.masked_sum`).
3. Where every member answered, the masks cancel and the server decodes the sum
   Σ z + Σ e; w <- w + η·γ·sum/M (M: the run's clients). Where one did not, the sum stays
   masked: the server starts attempt a + 1 with the members that answered, under a new view
   (new masks) and with new noise; every attempt a member answered is charged.

Retries are releases: a client answers at most one attempt a planned round plus its own
``retries`` (the allowance its plan declares, spent over the run), so a server that forges
dropouts gets at most rounds + retries releases from it; with ``epsilon`` its σ is
calibrated for that many, so the stated ε covers every retry it allows. The server asks
no member beyond that (the round is then given up).

What each client decides from its own configuration, never from a message: S, γ, σ (given,
or calibrated from its ε over its planned releases), the smallest group it answers
(``min_group``, default every client of the run), its ``retries``, the ring's bits k, its
roster. It refuses a group smaller than ``min_group``, without itself, with a member outside
its roster, a key without its member's signature, an attempt it already answered, an
attempt beyond its allowance, and any release beyond its ε.

Accounting (:mod:`fedlabels.privacy.distributed_discrete`): the server's sum holds at least
``min_group`` shares of std σΔ/√min_group, a release of the distributed discrete Gaussian,
charged once per answered attempt. Ring: k is the smallest with 2^{k−1} above
n·(⌈S/γ⌉ + 1) + 40·σΔ·√(n/min_group) for n = the run's clients (the noise is beyond 40
standard deviations with probability below e^{-800}), so an honest group's sum never
wraps; parameters needing more than 64 bits are refused.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from fedlabels.comm import Message
from fedlabels.comm.id_lists import members_text
from fedlabels.core.errors import BudgetRefusal, FedLabelsError, RefusedError, refuse_other_value
from fedlabels.method.base import Grid, Settings
from fedlabels.method.blocks import GlobalModelServer, WeightsClient
from fedlabels.method.dpsgd_client import SecretNoiseClient
from fedlabels.method.secure_member import (
    SIGMA_REL_TOL,
    SecureSumMember,
    allowance_spent,
    warn_without_retries,
)
from fedlabels.method.threat import outside_entries
from fedlabels.privacy.discrete_gaussian import (
    NOISE_TAIL_SDS,
    coordinate_bound,
    default_grid,
    encode_update,
    integer_sensitivity,
)
from fedlabels.privacy.events import DistributedDiscreteGaussianEvent
from fedlabels.privacy.gaussian_calibration import SIGMA_GIVEN
from fedlabels.privacy.ledger import Ledger, LedgerEvents

#: the attempts a server makes per round before it gives the round up
MAX_ATTEMPTS = 3
#: the signature purpose of a member's round key
KEY_PURPOSE = "dpfedavg-round-key"


class SecureParameters:
    """One party's parameters of the mechanism, all from its own options and plan: S, γ,
    Δ, d, σ, the smallest group, the releases it allows (rounds + retries), each share's std
    and the ring's bits."""

    def __init__(self, options: Any, settings: Settings, dim: int) -> None:
        from fedlabels.privacy.distributed_discrete import (
            MIN_SHARE_SIGMA,
            calibrate_distributed_noise_multiplier,
        )
        from fedlabels.secure.masked_sum import ring_bits

        self.clip, self.dim, self.delta = float(options.clip), int(dim), float(options.delta)
        self.grid = float(options.grid or default_grid(self.clip, self.dim))
        self.sensitivity = integer_sensitivity(self.clip, self.grid, self.dim)
        n = int(settings.n_clients)
        self.min_group = int(options.min_group or n)
        if self.min_group > n:
            raise FedLabelsError(f"dp-fedavg min_group {self.min_group} exceeds the run's "
                                 f"{n} clients; no group could be answered.")
        self.n_clients, self.unit = n, "round"
        self.epsilon, self.rounds = options.epsilon, int(settings.rounds)
        self.retries = int(options.retries)
        self.releases = self.rounds + self.retries  # the most a client answers in the run
        sigma = options.noise_multiplier
        if sigma is None:
            sigma = calibrate_distributed_noise_multiplier(
                options.epsilon, self.delta, self.min_group, self.sensitivity, self.dim,
                self.releases)
        self.sigma = float(sigma)
        self.share_sigma = self.sigma * self.sensitivity / math.sqrt(self.min_group)
        if self.share_sigma < MIN_SHARE_SIGMA:
            raise FedLabelsError(f"dp-fedavg aggregation secure: each client's noise share "
                                 f"σΔ/√min_group = {self.share_sigma:.3g} grid units is below "
                                 f"{MIN_SHARE_SIGMA}, where the sum's bound does not hold; "
                                 "raise the noise multiplier or use a finer --grid.")
        worst = (n * coordinate_bound(self.clip, self.grid)
                 + NOISE_TAIL_SDS * self.share_sigma * math.sqrt(n))
        self.bits = ring_bits(worst)

    def releases_by(self, rnd: int) -> int:
        """The releases a client answers through round ``rnd`` (0-based): one a planned
        round so far, plus its retries."""
        return min(rnd + 1, self.rounds) + self.retries

    def fingerprint(self) -> bytes:
        """What a member's key signature binds of its parameters: a peer checks it against
        its own, so every member of a group adds shares of the same size (a member with a
        smaller share would leave the others with less noise than they account for)."""
        return (np.asarray([self.sigma, self.clip, self.grid], dtype="<f8").tobytes()
                + np.asarray([self.min_group, self.bits, self.dim], dtype="<i8").tobytes())

    def event(self, clients: tuple[int, ...] = ()) -> DistributedDiscreteGaussianEvent:
        """One answered attempt (``clients``: the members asked, on a server's ledger)."""
        return DistributedDiscreteGaussianEvent(self.sigma, self.min_group, self.clip,
                                                self.grid, self.sensitivity, self.dim,
                                                tuple(sorted(clients)))


class DPFedAvgSecureClient(SecureSumMember, SecretNoiseClient, WeightsClient):
    """A member of the secure aggregation: its own noise share, masks, checks and ledger."""

    state_attrs: ClassVar[tuple[str, ...]] = ("key_round", "key_group", "attempt")
    #: a round's attempts after dropouts come within one round
    multi_step_kinds: ClassVar[frozenset[str]] = frozenset({"dpfedavg.train"})
    keys_kind, key_reply_kind, attempt_kind = "dpfedavg.keys", "dpfedavg.key", "dpfedavg.train"
    key_purpose = KEY_PURPOSE

    def __init__(self, *args: Any, trust: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.handlers["dpfedavg.train"] = self.on_train
        self.init_member(trust)
        self._params: SecureParameters | None = None

    def params(self) -> SecureParameters:
        """This client's own parameters (its options, its plan, its own model's size)."""
        if self._params is None:
            self.ensure_built()
            dim = int(np.asarray(self.learner.get_weights()).size)
            self._params = SecureParameters(self.options, self.settings, dim)
        return self._params

    @property
    def ledger(self) -> Ledger:
        """This client's releases, refused beyond its own ε (when it has one)."""
        if self._ledger is None:
            self._ledger = Ledger(float(self.options.delta), self.options.epsilon,
                                  what=f"client {self.cid}",
                                  calibrated_by=_CALIBRATED_BY if options_epsilon(
                                      self.options) else SIGMA_GIVEN)
        return self._ledger

    def on_train(self, message: Message) -> Message:
        """One attempt: checks, the charge, training, the noisy masked integer update."""
        from fedlabels.privacy.discrete_gaussian import sample_discrete_gaussian

        params = self.params()
        config = message.config
        refuse_other_value(self.cid, "aggregation", config.get("aggregation", "plain"),
                           "secure", read=str)
        refuse_other_value(self.cid, "noise", config.get("noise", "continuous"), "discrete",
                           read=str)
        refuse_other_value(self.cid, "clip", config.get("clip"), params.clip)
        refuse_other_value(self.cid, "grid", config.get("grid"), params.grid)
        # the releases it answers are its own plan's: another allowance is refused at the
        # first attempt, before anything is charged (under epsilon also its σ's releases)
        refuse_other_value(self.cid, "retries", config.get("retries"), params.retries,
                           read=int)
        refuse_other_value(self.cid, "noise_multiplier", config.get("noise_multiplier"),
                           params.sigma, rel_tol=SIGMA_REL_TOL)
        refuse_other_value(self.cid, "bits", config.get("bits"), params.bits, read=int)
        self.checked_steps(config)  # its own local steps a round, never the server's
        rnd, attempt, group, peers = self.checked_attempt(message)
        start = np.array(message.arrays["weights"], dtype=np.float32)
        if start.size != params.dim:
            raise RefusedError(f"client {self.cid}: the global weights have {start.size} "
                               f"values, this client's model {params.dim}; refusing.")
        self.attempt = attempt
        # before anything leaves; refused beyond its ε or its plan's releases
        self.charge_attempt(rnd, attempt, params.event())
        z, _ = encode_update(self.finite_update(message, start), params.clip, params.grid)
        noise = sample_discrete_gaussian(params.share_sigma, params.dim, self.noise_rng)
        return Message("dpfedavg.masked", arrays={
            "masked": self.masked(z.astype(np.int64).ravel() + noise, rnd, attempt, group,
                                  peers)})


    def finite_update(self, message: Message, start: np.ndarray) -> np.ndarray:
        """The local steps from the message's weights ``start`` and their update; zeros
        where it is not finite. Finite global weights can overflow on chosen records only
        (an infinite logit for x_k > t), so a refusal, or a NaN, would tell the server
        without noise that this client holds such a record; a zero update, masked with the
        client's noise share, tells it nothing (and the learner is as before the steps)."""
        from fedlabels.learners import is_iterative

        self.ensure_built()
        before = self.learner.state_dict() if is_iterative(self.learner) else None
        self.local_steps_from(message)
        update = self.learner.get_weights() - start
        if np.isfinite(update).all():
            return update
        _LOG.warning("client %d: its update from the server's weights is not finite (weights "
                     "that overflow on some of its records?); it sends a zero update with "
                     "its noise share, which tells the server nothing of them", self.cid)
        if before is not None:  # no NaN kept in its weights or optimiser state
            self.learner.load_state_dict(before)
        self.learner.set_weights(start)
        return np.zeros_like(update)


_LOG = logging.getLogger(__name__)


class DPFedAvgSecureServer(LedgerEvents, GlobalModelServer):
    """Announces each round's group, relays the signed keys, sums the masked vectors."""

    state_attrs: ClassVar[tuple[str, ...]] = ("events", "attempts", "group_sizes")

    def __init__(self, initial: np.ndarray, settings: Settings, options: Any) -> None:
        super().__init__(initial, settings.period)
        self.options = options
        self.params = SecureParameters(options, settings, int(np.asarray(initial).size))
        self.server_lr = float(options.server_lr)
        self.n_clients = int(settings.n_clients)
        self.ledger = Ledger(self.params.delta, options.epsilon, what="each client",
                             per_client=True, calibrated_by=_CALIBRATED_BY
                             if options_epsilon(options) else SIGMA_GIVEN)
        p = self.params
        self.ledger.check_plan([p.event()] * p.releases,
                               f"{p.rounds} round(s) and {p.retries} retried attempt(s)")
        warn_without_retries("dp-fedavg", p, "a round with a dropout is given up")
        self.attempts: list[int] = []  # per round: the attempts made
        self.group_sizes: list[int] = []  # per round: the group whose sum was decoded (0: none)

    def check_reply(self, cid: int, request: Message, reply: Message) -> None:
        from fedlabels.method.replies import MalformedReply
        from fedlabels.secure.masked_sum import packed_size

        super().check_reply(cid, request, reply)
        expect = {"dpfedavg.key": {"pub": (np.dtype(np.uint8), 32),
                                   "sig": (np.dtype(np.uint8), 64)},
                  "dpfedavg.masked": {"masked": (np.dtype(np.uint8), packed_size(
                      int(self.weights.size), self.params.bits))}}.get(reply.kind)
        for key, (dtype, size) in (expect or {}).items():
            arr = reply.arrays.get(key)
            if arr is None or np.asarray(arr).dtype != dtype or np.asarray(arr).size != size:
                raise MalformedReply(f"client {cid}'s {reply.kind} needs {key} as {size} "
                                     f"values of {dtype}.")

    def run_round(self, rnd: int, grid: Grid) -> dict[str, float]:
        group = sorted(grid.client_ids)
        announce = Message("dpfedavg.keys", config={"round": rnd,
                                                    "participants": members_text(group)})
        keys = grid.exchange({c: announce for c in group}, rnd) if group else {}
        group = sorted(keys)
        attempts, decoded = 0, 0
        while attempts < MAX_ATTEMPTS and len(group) >= self.params.min_group:
            if allowance_spent(self.events, group, self.params.releases_by(rnd)):
                break  # a member's plan allows no further release this round: given up
            try:  # every member asked is charged, on the server's ledger as on its own
                self.ledger.add(self.params.event(tuple(group)))
            except BudgetRefusal:
                break  # an honest server stops asking once a member's budget is spent
            replies = grid.exchange(self._train_messages(rnd, attempts, group, keys), rnd)
            attempts += 1
            if set(replies) == set(group):
                self._apply(replies)
                decoded = len(group)
                break
            group = sorted(replies)  # the masks of a missing member never cancel: again
        self.attempts.append(attempts)
        self.group_sizes.append(decoded)
        return {"attempts": float(attempts), "group_size": float(decoded)}

    def _train_messages(self, rnd: int, attempt: int, group: list[int],
                        keys: Mapping[int, Message]) -> dict[int, Message]:
        p = self.params
        arrays: dict[str, np.ndarray] = {"weights": self.weights}
        for c in group:
            arrays[f"pub_{c}"] = keys[c].arrays["pub"]
            arrays[f"sig_{c}"] = keys[c].arrays["sig"]
        message = Message("dpfedavg.train", arrays=arrays, config={
            "round": rnd, "attempt": attempt, "participants": members_text(group),
            "steps": self.period, "clip": p.clip, "grid": p.grid, "noise": "discrete",
            "aggregation": "secure", "bits": p.bits, "retries": p.retries,
            "noise_multiplier": p.sigma})
        return {c: message for c in group}

    def _apply(self, replies: Mapping[int, Message]) -> None:
        """The decoded sum (integers, noise included) applied: post-processing."""
        from fedlabels.secure.masked_sum import ring_sum

        total = ring_sum({c: replies[c].arrays["masked"] for c in replies},
                         self.params.bits, int(self.weights.size))
        step = self.server_lr * self.params.grid * total.reshape(self.weights.shape)
        self.weights = (self.weights + step / self.n_clients).astype(np.float32)

    def result_extra(self) -> dict[str, Any]:
        p = self.params
        spent = self.ledger.spent()
        return {"privacy": {
            "method": "dp-fedavg",
            "aggregation": "secure",
            "mechanism": "distributed discrete Gaussian under secure aggregation: each "
                         "client adds N_Z(0, (σΔ)²/min_group) to its integer update and masks "
                         "it; the server learns only the group's sum",
            **spent.to_dict(),
            "noise_multiplier": p.sigma,
            "noise_multiplier_source": (f"calibrated from target epsilon {p.epsilon}"
                                        if options_epsilon(self.options) else SIGMA_GIVEN),
            "calibrated_by": self.ledger.calibrated_by,  # the server's ledger: given or whom
            "calibration": ({"accountant": _CALIBRATED_BY} if options_epsilon(self.options)
                            else None),
            "noise": "discrete",
            "clip_norm": p.clip,
            "grid": p.grid,
            "min_group": p.min_group,
            "share_std_grid_units": p.share_sigma,
            "retries": p.retries,
            "releases_planned": p.releases,
            "ring_bits": p.bits,
            "sensitivity": {"value": p.sensitivity, "norm": "L2", "unit": "grid units",
                            "source": "clipping to S and nearest rounding to the grid γ, "
                                      "checked exactly on the integers by each client"},
            "attempts_per_round": self.attempts,
            "decoded_group_per_round": self.group_sizes,
            "rounds_accounted": len(self.attempts),
            "releases_accounted": len(self.events),
            "target": self.ledger.target_view("attempt", p.releases, len(self.events),
                                              enforced=CLIENTS_ENFORCE),
            "accounting": "RDP of a sum of min_group discrete Gaussian shares (Kairouz, Liu "
                          "& Steinke 2021, Prop. 14, with its τ term), one release per "
                          "attempt a client answered, converted by dp-accounting's RDP "
                          "conversion; no subsampling",
            "guarantee": "formal",
            "guarantee_against": GUARANTEE_AGAINST,
            "adversary": SECURE_ADVERSARY,
            "sees": SECURE_SEES,
            "neighbouring": p.event().neighbouring,
            "unit": "per client (its whole dataset), over the whole run; the worst client",
            "assumptions": list(SECURE_ASSUMPTIONS),
            "outside_guarantee": outside_entries(SECURE_OUTSIDE),
        }}


#: the accountant σ is calibrated to under secure aggregation (the bound on a sum of shares)
_CALIBRATED_BY = "rdp"


def options_epsilon(options: Any) -> bool:
    return options.noise_multiplier is None and options.epsilon is not None


CLIENTS_ENFORCE = ("each client charges every attempt it answers to its own ledger and "
                   "refuses one beyond its own ε or beyond one a round plus its retries; the "
                   "server stops asking at the same point")
SECURE_ADVERSARY = ("a server that may deviate from the protocol (announce small groups, "
                    "forge dropouts, relay other keys or ask for less noise: each refused or "
                    "charged by the clients) and does not collude with clients (with t "
                    "colluding members of a group of n, n − t noise shares are left)")
SECURE_SEES = ("each member's update plus its noise share, masked mod 2^k with its pairwise "
               "masks (uniform), and the noisy sum of a whole group's updates; never one "
               "client's update")
GUARANTEE_AGAINST = ("the server (honest-but-curious or deviating: it sees only masked "
                     "vectors and the group's noisy sum), other clients and anyone observing "
                     "the global models; against a server colluding with t members of a "
                     "group of n, the noise left is the n − t honest shares, σ scaled by "
                     "√((n − t)/min_group)")
SECURE_ASSUMPTIONS = (
    "each client follows the protocol: it clips, rounds, adds its own share from its OS "
    "entropy and masks; the noise and σ come from its own options, never from a message",
    "at least min_group members of every group whose sum is decoded are honest and do not "
    "collude with the server (colluding members know their shares: with t of them in a "
    "group of n, the honest noise has variance (n − t)(σΔ)²/min_group)",
    "the roster of identity keys is distributed out of band (no Sybil keys); X25519, "
    "HKDF-SHA256, ChaCha20 and Ed25519 are secure",
    "the guarantee covers the server's whole view and the sequence of global models; a "
    "forged dropout makes a client answer another attempt, each charged as a release, at "
    "most rounds + retries in all (its own plan's)",
    "outside it: who is in each group, the group sizes and attempts, the model's size, the "
    "grid, the ring's bits, the round keys, and the clients' local models after their last "
    "local training",
)


#: what aggregation secure publishes outside its guarantee (it sends no update norm, and
#: its groups are the server's choice, not a secret sample)
SECURE_OUTSIDE = (
    ("rounds[].server.attempts", "the attempts a round took (who answered is the server's "
     "view, not private data), published without noise"),
    ("rounds[].server.group_size", "the size of the group whose sum was decoded (0: none), "
     "published without noise"),
    ("privacy.attempts_per_round", "the same attempts, every round"),
    ("privacy.decoded_group_per_round", "the same group sizes, every round"),
)


__all__ = [
    "MAX_ATTEMPTS",
    "DPFedAvgSecureClient",
    "DPFedAvgSecureServer",
    "SecureParameters",
]
