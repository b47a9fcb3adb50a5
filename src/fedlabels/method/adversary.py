"""Malicious clients: a wrapper of a client role that corrupts what it sends.

``--malicious K --poison NAME`` turns K clients, drawn from the run seed, into adversaries.
The honest role still trains and is evaluated as before; only its replies change, on the
way out (:class:`MaliciousRole`, mixed into the role's own class), so no method knows about
attacks. What is corrupted is read from the method's threat model: each declared
:class:`~fedlabels.method.threat.Payload` whose content an attack can change
(:func:`corruption`), so a method is attackable exactly when it declares such a payload:

* **labels** (hard labels or votes on U or on the request's queries, soft labels on any
  rows, noisy one-hot rows on U): ``flip`` maps class y to C-1-y (a fixed
  permutation), ``random`` sends uniformly random labels, ``constant`` always the same class
  (``constant:K``, default 0), ``targeted`` relabels one source class as a target class and
  leaves the rest (``targeted:S:T``, default 0 -> 1). Soft labels and one-hot rows get the
  same map on their class columns (random and constant become one-hot rows).
* **weights** (full weights; clipped updates), with u the
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
from fedlabels.core.errors import FedLabelsError, did_you_mean
from fedlabels.method.base import ClientRole, Method
from fedlabels.method.threat import Payload, ThreatModel

ATTACKS = ("flip", "random", "constant", "targeted")
#: the factor of the ``constant`` (scaled-update) attack on weight methods
SCALE = 10.0
#: payload contents that are model parameters (the rest an attack can change are labels)
WEIGHT_CONTENTS = ("weights", "update")
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
            raise FedLabelsError(f"unknown attack {text!r}{did_you_mean(name, ATTACKS)}; "
                                 f"{usage}.")
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

    def check(self, method: Method, n_classes: int | None = None) -> None:
        """Reject a method the attack cannot corrupt, or classes it does not have."""
        if sends_weights(method.threat_model):
            if self.name not in WEIGHT_ATTACKS:
                listed = "; ".join(f"{k} ({v})" for k, v in WEIGHT_ATTACKS.items())
                raise FedLabelsError(f"attack {self.name!r} does not apply to {method.name} "
                                     f"(it sends model parameters); its attacks: {listed}.")
        elif not corruptions(method.threat_model):
            raise FedLabelsError(
                f"--malicious does not apply to method {method.name!r}: it sends nothing an "
                "attack can change (hard labels or votes on rows 'public' or 'queries', "
                "noisy one-hot rows on 'public', soft labels, weights or updates; its "
                "threat model declares none of these); use a method that shares them, e.g. "
                "fedct or fedavg (`fedlabels methods` shows each method's threat model).")
        if n_classes is not None and max(self.source, self.target) >= n_classes:
            raise FedLabelsError(f"attack {self}: class {max(self.source, self.target)} does "
                                 f"not exist (the dataset has {n_classes} classes).")

    def describe(self, method: Method) -> str:
        """What the malicious clients send instead of their honest message."""
        labels = {"flip": "labels y -> C-1-y", "random": "uniformly random labels",
                  "constant": f"always class {self.target}",
                  "targeted": f"class {self.source} sent as class {self.target}"}[self.name]
        if not sends_weights(method.threat_model):
            return labels
        if sends_labels(method.threat_model):  # e.g. FREDY: weights, then teacher votes
            return f"{WEIGHT_ATTACKS[self.name]}; {labels}"
        return WEIGHT_ATTACKS[self.name]

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
        raise FedLabelsError(f"--malicious must be an integer >= 0, got {k!r}.")
    if 2 * k >= n_clients and k > 0:
        raise FedLabelsError(f"--malicious {k} of {n_clients} clients is not below half; use "
                             f"at most {(n_clients - 1) // 2} (or more clients).")
    rng = np.random.default_rng(np.random.SeedSequence([seed, _SEED_TAG]))
    return sorted(int(c) for c in rng.choice(n_clients, size=k, replace=False))


# -------------------------------------------------------------------- what each reply holds
Corrupt = Callable[["MaliciousRole", Message, np.ndarray, np.random.Generator], np.ndarray]
Rows = Callable[[ClientRole, Message], int]

#: how many labels a hard-label payload holds, by its declared rows
_LABEL_ROWS: dict[str, Rows] = {
    "public": lambda role, request: len(role.public),
    "queries": lambda role, request: len(request.arrays["queries"]),
}


def _packed_labels(rows: Rows) -> Corrupt:
    def corrupt(role: MaliciousRole, request: Message, value: np.ndarray,
                rng: np.random.Generator) -> np.ndarray:
        c = role.settings.n_classes
        y = unpack_labels(value, rows(role, request), c)
        return pack_labels(role.attack.labels(y, c, rng), c)
    return corrupt


def _soft(role: MaliciousRole, request: Message, value: np.ndarray,
          rng: np.random.Generator) -> np.ndarray:
    return role.attack.scores(value, rng)


def _one_hot_bits(role: MaliciousRole, request: Message, value: np.ndarray,
                  rng: np.random.Generator) -> np.ndarray:
    from fedlabels.privacy.mechanisms import pack_rows, unpack_rows

    rows = unpack_rows(value, len(role.public), role.settings.n_classes)
    return pack_rows(role.attack.scores(rows, rng))


def _weights(role: MaliciousRole, request: Message, value: np.ndarray,
             rng: np.random.Generator) -> np.ndarray:
    if role.attack_start is None:
        raise FedLabelsError(f"client {role.cid}: a weights reply before any global weights "
                             "arrived; the attack has no update to corrupt.")
    w = np.asarray(value, dtype=np.float64)
    sent = role.attack_start + role.attack.update(w - role.attack_start, rng)
    return sent.astype(value.dtype)


def _update(role: MaliciousRole, request: Message, value: np.ndarray,
            rng: np.random.Generator) -> np.ndarray:
    return role.attack.update(value, rng).astype(value.dtype)


def corruption(payload: Payload) -> Corrupt | None:
    """How an attack changes a declared payload, or None when it cannot (a metric, a size,
    ciphertexts, or hard labels whose number the payload does not say)."""
    if payload.source != "arrays":
        return None
    if payload.content in ("hard-labels", "votes"):
        rows = _LABEL_ROWS.get(payload.rows)
        return None if rows is None else _packed_labels(rows)
    if payload.content == "noisy-one-hot" and payload.rows == "public":
        return _one_hot_bits
    return {"soft-labels": _soft, "weights": _weights, "update": _update}.get(payload.content)


def corruptions(threat: ThreatModel) -> dict[tuple[str, str], Corrupt]:
    """What a malicious client of a method with ``threat`` corrupts: (message kind, array
    key) -> how."""
    out: dict[tuple[str, str], Corrupt] = {}
    for payload in threat.payloads:
        corrupt = corruption(payload)
        if corrupt is not None:
            out[(payload.message, payload.key)] = corrupt
    return out


def sends_weights(threat: ThreatModel) -> bool:
    """Whether an attack would corrupt model parameters (weights or updates)."""
    return any(p.content in WEIGHT_CONTENTS and corruption(p) is not None
               for p in threat.payloads)


def sends_labels(threat: ThreatModel) -> bool:
    """Whether an attack would corrupt labels (hard, soft, votes or noisy one-hot rows)."""
    return any(p.content not in WEIGHT_CONTENTS and corruption(p) is not None
               for p in threat.payloads)


class MaliciousRole(ClientRole):
    """Mixed in before a client role's class: the values in ``attack_targets`` (from the
    method's threat model, :func:`corruptions`) are corrupted by ``attack``; everything else
    (training, evaluation, state) is the role's."""

    state_attrs: ClassVar[tuple[str, ...]] = ("attack_sent",)
    attack: Attack
    attack_targets: dict[tuple[str, str], Corrupt]
    attack_seed: int
    attack_sent: int
    attack_start: np.ndarray | None  # the global weights last received (weight methods)

    def handle(self, message: Message) -> Message:
        if "weights" in message.arrays:
            self.attack_start = np.asarray(message.arrays["weights"], dtype=np.float64)
        reply = super().handle(message)
        targets = [(key, self.attack_targets[(reply.kind, key)]) for key in reply.arrays
                   if (reply.kind, key) in self.attack_targets]
        if not targets:
            return reply
        rng = np.random.default_rng(np.random.SeedSequence(
            [self.attack_seed, _SEED_TAG, self.cid, self.attack_sent]))
        self.attack_sent += 1
        arrays = dict(reply.arrays)
        for key, corrupt in targets:
            arrays[key] = corrupt(self, message, arrays[key], rng)
        return Message(reply.kind, arrays=arrays, config=reply.config, category=reply.category)


_CLASSES: dict[type, type] = {}


def make_malicious(role: ClientRole, attack: Attack, seed: int, threat: ThreatModel
                   ) -> ClientRole:
    """``role``, turned into an adversary in place (its class gains :class:`MaliciousRole`)
    that corrupts the payloads ``threat`` declares (:func:`corruptions`)."""
    cls = type(role)
    if cls not in _CLASSES:
        _CLASSES[cls] = type(f"Malicious{cls.__name__}", (MaliciousRole, cls), {})
    role.__class__ = _CLASSES[cls]
    bad: Any = role
    bad.attack, bad.attack_seed, bad.attack_sent, bad.attack_start = attack, seed, 0, None
    bad.attack_targets = corruptions(threat)
    return role


def plan_attack(method: Method, n_clients: int, n_classes: int | None, k: int,
                attack: str | None, seed: int, task: str = "classification"
                ) -> tuple[list[int], Attack | None]:
    """The malicious clients and the parsed attack (none when K = 0), checked against what
    ``method`` declares it sends."""
    if k and task != "classification":
        raise FedLabelsError(f"--malicious applies to classification; this is a {task} task.")
    if not k:
        if attack is not None:
            raise FedLabelsError("--poison needs --malicious K (the number of malicious "
                                 "clients, K >= 1).")
        return [], None
    parsed = Attack.parse(attack if attack is not None else "flip")
    parsed.check(method, n_classes)
    return choose_malicious(n_clients, k, seed), parsed


def attack_record(method: Method, clients: list[int], attack: Attack) -> dict[str, Any]:
    """The result's ``malicious`` entry."""
    # classes: labels only
    name = attack.name if sends_weights(method.threat_model) else str(attack)
    return {"clients": clients, "k": len(clients), "attack": name,
            "sends": attack.describe(method)}
