"""Malicious clients: a wrapper of a client role that corrupts what it sends.

``--malicious K --attack NAME`` turns K clients, drawn from the run seed, into adversaries.
The honest role still trains and is evaluated as before; only its replies change, on the
way out (:class:`MaliciousRole`, mixed into the role's own class), so no method knows about
attacks. What is corrupted depends on what a method sends:

* **labels** (fedct, dp-fedct, pate, dp-pate: hard labels; dd, fedmd: soft labels;
  dp-fedct's xor mechanism: noisy one-hot rows): ``flip`` maps class y to C-1-y (a fixed
  permutation), ``random`` sends uniformly random labels, ``constant`` always the same class
  (``constant:K``, default 0), ``targeted`` relabels one source class as a target class and
  leaves the rest (``targeted:S:T``, default 0 -> 1). Soft labels and one-hot rows get the
  same map on their class columns (random and constant become one-hot rows).
* **weights** (fedavg, fedavg-xclp: full weights; dp-fedavg: clipped updates), with u the
  honest update (the trained weights minus the global weights received): ``flip`` sends the
  sign-flipped update -u, ``constant`` the update scaled by the constant
  :data:`SCALE` (a boosted, model-replacement-style update), ``random`` a Gaussian update
  with the norm of u. ``targeted`` does not apply (a class-targeted weight attack is a
  backdoor that needs its own training) and is rejected.

The attacker's randomness (random labels, the Gaussian direction) is seeded from the run
seed, client and message count: it is the attacker's, not privacy noise.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from fedlabels.comm import Message, pack_labels, unpack_labels
from fedlabels.core.errors import FedLabelsError
from fedlabels.method.base import ClientRole

ATTACKS = ("flip", "random", "constant", "targeted")
#: the factor of the ``constant`` (scaled-update) attack on weight methods
SCALE = 10.0
LABEL_METHODS = ("fedct", "dp-fedct", "pate", "dp-pate", "dd", "fedmd")
WEIGHT_METHODS = ("fedavg", "dp-fedavg", "fedavg-xclp")
WEIGHT_ATTACKS = {"flip": "sign-flipped update -u",
                  "constant": f"scaled update {SCALE:g}·u",
                  "random": "Gaussian update with the norm of u"}
_SEED_TAG = 0xBAD


@dataclass(frozen=True)
class Attack:
    """An attack and its classes: ``constant`` sends ``target``; ``targeted`` maps
    ``source`` to ``target``."""

    name: str
    source: int = 0
    target: int = 0

    @classmethod
    def parse(cls, text: str) -> Attack:
        """``flip``, ``random``, ``constant[:K]`` or ``targeted[:S:T]``."""
        name, *args = str(text).strip().lower().split(":")
        usage = ("use flip, random, constant[:K] (always class K, default 0) or "
                 "targeted[:S:T] (class S sent as T, default 0:1)")
        if name not in ATTACKS:
            raise FedLabelsError(f"unknown attack {text!r}; {usage}.")
        want = {"constant": (0, 1), "targeted": (0, 2)}.get(name, (0, 0))
        if len(args) not in want or not all(a.isdigit() for a in args):
            raise FedLabelsError(f"attack {text!r}: {usage}.")
        ints = [int(a) for a in args]
        if name == "constant":
            return cls(name, target=ints[0] if ints else 0)
        if name == "targeted":
            source, target = ints if ints else (0, 1)
            if source == target:
                raise FedLabelsError(f"attack {text!r}: the source and target classes must "
                                     "differ.")
            return cls(name, source, target)
        return cls(name)

    def __str__(self) -> str:
        if self.name == "constant":
            return f"constant:{self.target}"
        if self.name == "targeted":
            return f"targeted:{self.source}:{self.target}"
        return self.name

    def check(self, method: str, n_classes: int | None = None) -> None:
        """Reject a method the attack cannot corrupt, or classes it does not have."""
        if method in WEIGHT_METHODS:
            if self.name not in WEIGHT_ATTACKS:
                listed = "; ".join(f"{k} ({v})" for k, v in WEIGHT_ATTACKS.items())
                raise FedLabelsError(f"attack {self.name!r} does not apply to {method} (it "
                                     f"sends model parameters); its attacks: {listed}.")
        elif method not in LABEL_METHODS:
            raise FedLabelsError(f"--malicious does not apply to method {method!r}; it applies "
                                 f"to {', '.join(LABEL_METHODS + WEIGHT_METHODS)}.")
        if n_classes is not None and max(self.source, self.target) >= n_classes:
            raise FedLabelsError(f"attack {self}: class {max(self.source, self.target)} does "
                                 f"not exist (the dataset has {n_classes} classes).")

    def describe(self, method: str) -> str:
        """What the malicious clients send instead of their honest message."""
        if method in WEIGHT_METHODS:
            return WEIGHT_ATTACKS[self.name]
        return {"flip": "labels y -> C-1-y", "random": "uniformly random labels",
                "constant": f"always class {self.target}",
                "targeted": f"class {self.source} sent as class {self.target}"}[self.name]

    # ------------------------------------------------------------------ corruptions
    def labels(self, y: np.ndarray, n_classes: int, rng: np.random.Generator) -> np.ndarray:
        """Hard labels as the attacker sends them."""
        y = np.asarray(y, dtype=np.int64)
        if self.name == "flip":
            return n_classes - 1 - y
        if self.name == "random":
            return rng.integers(0, n_classes, size=y.shape)
        if self.name == "constant":
            return np.full_like(y, self.target)
        return np.where(y == self.source, self.target, y)

    def scores(self, p: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Rows of class scores (soft labels, one-hot bits), the same map on the columns."""
        p = np.asarray(p)
        n, c = p.shape
        if self.name == "flip":
            return p[:, ::-1].copy()
        if self.name in ("random", "constant"):
            out = np.zeros_like(p)
            out[np.arange(n), self.labels(np.zeros(n, np.int64), c, rng)] = 1
            return out
        out = p.copy()
        out[:, self.target] = np.maximum(out[:, self.target], out[:, self.source]) \
            if p.dtype == np.uint8 else out[:, self.target] + out[:, self.source]
        out[:, self.source] = 0
        return out

    def update(self, u: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """A model update as the attacker sends it."""
        u = np.asarray(u, dtype=np.float64)
        if self.name == "flip":
            return -u
        if self.name == "constant":
            return SCALE * u
        g = rng.standard_normal(u.shape)
        return g * (np.linalg.norm(u) / max(float(np.linalg.norm(g)), 1e-12))


def choose_malicious(n_clients: int, k: int, seed: int) -> list[int]:
    """The K malicious clients, a seeded draw from the run seed; K must be below half."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise FedLabelsError(f"--malicious must be an int >= 0, got {k!r}.")
    if 2 * k >= n_clients and k > 0:
        raise FedLabelsError(f"--malicious {k} of {n_clients} clients is not below half; use "
                             f"at most {(n_clients - 1) // 2} (or more clients).")
    rng = np.random.default_rng(np.random.SeedSequence([seed, _SEED_TAG]))
    return sorted(int(c) for c in rng.choice(n_clients, size=k, replace=False))


# -------------------------------------------------------------------- what each reply holds
Corrupt = Callable[["MaliciousRole", Message, Message, np.random.Generator], Message]


def _replace(reply: Message, key: str, value: np.ndarray) -> Message:
    return Message(reply.kind, arrays={**reply.arrays, key: value}, config=reply.config,
                   category=reply.category)


def _packed_labels(rows: Callable[[ClientRole, Message], int]) -> Corrupt:
    def corrupt(role: MaliciousRole, request: Message, reply: Message,
                rng: np.random.Generator) -> Message:
        c = role.settings.n_classes
        y = unpack_labels(reply.arrays["labels"], rows(role, request), c)
        return _replace(reply, "labels", pack_labels(role.attack.labels(y, c, rng), c))
    return corrupt


def _soft(key: str) -> Corrupt:
    def corrupt(role: MaliciousRole, request: Message, reply: Message,
                rng: np.random.Generator) -> Message:
        return _replace(reply, key, role.attack.scores(reply.arrays[key], rng))
    return corrupt


def _one_hot_bits(role: MaliciousRole, request: Message, reply: Message,
                  rng: np.random.Generator) -> Message:
    from fedlabels.privacy.mechanisms import pack_rows, unpack_rows

    rows = unpack_rows(reply.arrays["bits"], len(role.public), role.settings.n_classes)
    return _replace(reply, "bits", pack_rows(role.attack.scores(rows, rng)))


def _weights(role: MaliciousRole, request: Message, reply: Message,
             rng: np.random.Generator) -> Message:
    if role.attack_start is None:
        raise FedLabelsError(f"client {role.cid}: a weights reply before any global weights "
                             "arrived; the attack has no update to corrupt.")
    w = np.asarray(reply.arrays["weights"], dtype=np.float64)
    sent = role.attack_start + role.attack.update(w - role.attack_start, rng)
    return _replace(reply, "weights", sent.astype(reply.arrays["weights"].dtype))


def _update(role: MaliciousRole, request: Message, reply: Message,
            rng: np.random.Generator) -> Message:
    u = reply.arrays["update"]
    return _replace(reply, "update", role.attack.update(u, rng).astype(u.dtype))


CORRUPTIONS: dict[str, Corrupt] = {
    "fedct.labels": _packed_labels(lambda role, _: len(role.public)),
    "dpfedct.labels": _packed_labels(lambda role, _: len(role.public)),
    "dpfedct.bits": _one_hot_bits,
    "pate.votes": _packed_labels(lambda _, request: len(request.arrays["queries"])),
    "dd.soft": _soft("soft"),
    "fedmd.scores": _soft("scores"),
    "fedavg.weights": _weights,
    "fxclp.weights": _weights,
    "dpfedavg.update": _update,
}


class MaliciousRole(ClientRole):
    """Mixed in before a client role's class: replies listed in :data:`CORRUPTIONS` are
    corrupted by ``attack``; everything else (training, evaluation, state) is the role's."""

    state_attrs: ClassVar[tuple[str, ...]] = ("attack_sent",)
    attack: Attack
    attack_seed: int
    attack_sent: int
    attack_start: np.ndarray | None  # the global weights last received (weight methods)

    def handle(self, message: Message) -> Message:
        if "weights" in message.arrays:
            self.attack_start = np.asarray(message.arrays["weights"], dtype=np.float64)
        reply = super().handle(message)
        corrupt = CORRUPTIONS.get(reply.kind)
        if corrupt is None:
            return reply
        rng = np.random.default_rng(np.random.SeedSequence(
            [self.attack_seed, _SEED_TAG, self.cid, self.attack_sent]))
        self.attack_sent += 1
        return corrupt(self, message, reply, rng)


_CLASSES: dict[type, type] = {}


def make_malicious(role: ClientRole, attack: Attack, seed: int) -> ClientRole:
    """``role``, turned into an adversary in place (its class gains :class:`MaliciousRole`)."""
    cls = type(role)
    if cls not in _CLASSES:
        _CLASSES[cls] = type(f"Malicious{cls.__name__}", (MaliciousRole, cls), {})
    role.__class__ = _CLASSES[cls]
    bad: Any = role
    bad.attack, bad.attack_seed, bad.attack_sent, bad.attack_start = attack, seed, 0, None
    return role


def plan_attack(method: str, n_clients: int, n_classes: int | None, k: int, attack: str | None,
                seed: int, task: str = "classification") -> tuple[list[int], Attack | None]:
    """The malicious clients and the parsed attack (none when K = 0), checked."""
    if k and task != "classification":
        raise FedLabelsError(f"--malicious applies to classification; this is a {task} task.")
    if not k:
        if attack is not None:
            raise FedLabelsError("--attack needs --malicious K (the number of malicious "
                                 "clients, K >= 1).")
        return [], None
    parsed = Attack.parse(attack if attack is not None else "flip")
    parsed.check(method, n_classes)
    return choose_malicious(n_clients, k, seed), parsed


def attack_record(method: str, clients: list[int], attack: Attack) -> dict[str, Any]:
    """The result's ``malicious`` entry."""
    name = attack.name if method in WEIGHT_METHODS else str(attack)  # classes: labels only
    return {"clients": clients, "k": len(clients), "attack": name,
            "sends": attack.describe(method)}
