"""A budget check decides without computing ε (Ledger.admit / Ledger.add): the same
decision as ``check(tight=False)`` / ``record(tight=False)`` (the oracle) on random
sequences of label releases, with targets right at the boundary; the exact accountant's
``rr_epsilon_exact_within`` answers as its bisection does, in one or two evaluations of δ(ε);
a ledger without a target computes nothing while the run goes."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

import pytest

from fedlabels.core.errors import BudgetRefusal
from fedlabels.privacy import accounting
from fedlabels.privacy.accounting import rr_epsilon_exact, rr_epsilon_exact_within
from fedlabels.privacy.events import KaryRREvent, XorEvent
from fedlabels.privacy.ledger import REL_TOL, Ledger
from fedlabels.privacy.mechanisms import flip_probability

DELTA = 1e-5
BITS = 2100  # one release composes more than PLD_MAX_COMPOSITIONS responses: no slow PLD


def _limits(eps: float) -> list[float]:
    """Limits around ``eps``: far, near, within the band and the bisection's tolerance, and
    the neighbouring floats."""
    out = [eps, math.nextafter(eps, 0.0), math.nextafter(eps, math.inf), 0.5 * eps,
           2.0 * eps, eps / (1.0 + REL_TOL), eps * (1.0 + REL_TOL)]
    for rel in (1e-12, 1e-11, 1e-10, 3e-10, 1e-9, 2e-9, 1e-8, 1e-6):
        out += [eps * (1.0 - rel), eps * (1.0 + rel), eps - rel, eps + rel]
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_exact_accountant_within_a_limit_answers_as_its_bisection(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(6):
        n = rng.choice([1, 7, 300, 5_000, 400_000, 3_000_000])
        f = rng.choice([0.05, 0.3, 0.45, 0.4996, 0.49999])
        delta = rng.choice([1e-9, 1e-5, 1e-3, 0.2])
        eps = rr_epsilon_exact(n, f, delta)
        for limit in [*_limits(eps), *(rng.uniform(0, 2 * eps + 1) for _ in range(5))]:
            assert rr_epsilon_exact_within(limit, n, f, delta) == (eps <= limit), \
                (n, f, delta, eps, limit)


def test_a_clear_answer_takes_no_bisection(monkeypatch: pytest.MonkeyPatch) -> None:
    bisections: list[int] = []
    original = accounting.rr_epsilon_exact

    def counted(n_bits: int, flip_prob: float, delta: float) -> float:
        bisections.append(n_bits)
        return original(n_bits, flip_prob, delta)

    monkeypatch.setattr(accounting, "rr_epsilon_exact", counted)
    n, f = 2_000_000, 0.4996
    eps = original(n, f, DELTA)
    for limit in (0.9 * eps, eps * (1 + 1e-7), 1.1 * eps, 0.999999 * eps):
        assert rr_epsilon_exact_within(limit, n, f, DELTA) == (eps <= limit)
    assert not bisections  # before, a check's ε: a bisection of ~40 evaluations of δ(ε)
    assert not rr_epsilon_exact_within(eps * (1 - 1e-12), n, f, DELTA)  # in the band
    assert bisections == [n]


@pytest.mark.parametrize("seed", [0, 1])
def test_the_deltas_of_a_check_are_the_window_s_to_the_last_bit(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(8):
        n = rng.choice([1, 5, 64, 300, 20_000, 1_000_000])
        f = rng.choice([0.01, 0.2, 0.49, 0.4996])
        eps = rr_epsilon_exact(n, f, rng.choice([1e-9, 1e-5, 0.1]))
        epsilons = [*sorted(rng.uniform(-1.0, 3 * eps + 1) for _ in range(3)), eps, 0.0]
        assert accounting._rr_deltas(epsilons, n, f) == \
            [accounting.rr_delta_for_epsilon(e, n, f) for e in epsilons]


@dataclass(frozen=True)
class _NamedXor:
    """An XOR release of some clients (the events of a server's per-client ledger)."""

    release: XorEvent
    clients: tuple[int, ...]

    def client_part(self, cid: int) -> Any:
        return self.release if cid in self.clients else None


def _xor(eps: float, bits: int = BITS) -> XorEvent:
    return XorEvent(eps, bits, flip_probability(eps, bits), 4 * bits)


def _release(rng: random.Random, per_client: bool, mixed: bool) -> Any:
    kind = rng.choice(["xor"] * 6 + (["xor2", "kary"] if mixed else []))
    ev: Any = (_xor(0.02) if kind == "xor" else _xor(0.05) if kind == "xor2"
               else KaryRREvent(0.9, 1, 0.9, 3, 10))
    if per_client:
        ev = _NamedXor(ev, tuple(sorted(rng.sample(range(4), rng.randint(1, 4)))))
    return ev


def _decision(call: Any) -> str:
    try:
        call()
    except BudgetRefusal as exc:
        return str(exc)
    return "within"


@pytest.mark.parametrize("per_client", [False, True])
@pytest.mark.parametrize("mixed", [False, True])
@pytest.mark.parametrize("seed", [0, 1])
def test_admit_and_add_decide_as_check_and_record_at_the_budget_boundary(
        per_client: bool, mixed: bool, seed: int) -> None:
    """Targets at the (old) ε after a random number of releases, and around it: every
    check's decision and refusal message equal the old check's; the ledgers stay equal."""
    rng = random.Random(100 * seed + 10 * per_client + mixed)
    releases = [_release(rng, per_client, mixed) for _ in range(40)]
    stop = rng.randint(5, 30)
    eps = Ledger(DELTA, per_client=per_client).account(releases[:stop]).epsilon
    refused = 0
    for target in [eps / (1.0 + REL_TOL), math.nextafter(eps / (1.0 + REL_TOL), 0.0),
                   math.nextafter(eps / (1.0 + REL_TOL), math.inf), eps,
                   eps * (1.0 - 1e-10), eps * (1.0 + 1e-10), eps * (1 - 2e-6)]:
        old = Ledger(DELTA, target=target, per_client=per_client)
        new = Ledger(DELTA, target=target, per_client=per_client)
        for ev in releases:
            want = _decision(lambda: old.check([ev], tight=False))  # noqa: B023
            assert _decision(lambda: new.admit([ev])) == want  # noqa: B023
            assert _decision(lambda: new.add(ev)) == \
                _decision(lambda: old.record(ev, tight=False))  # noqa: B023
            refused += want != "within"
            assert new.events == old.events
        assert new.spent() == old.spent()
    assert refused  # the boundary was reached


def test_a_ledger_without_a_target_computes_no_epsilon_until_asked(
        monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    original = accounting._label_epsilon

    def counted(*args: Any) -> float:
        calls.append(1)
        return original(*args)

    monkeypatch.setattr(accounting, "_label_epsilon", counted)
    server, client = Ledger(DELTA, per_client=True), Ledger(DELTA)
    for _ in range(30):
        server.admit([_xor(0.5)])
        client.add(_xor(0.5))
        server.add(_xor(0.5))
    assert not calls
    assert client.spent() == Ledger(DELTA).account([_xor(0.5)] * 30)
    assert calls


def test_a_dp_fedct_round_computes_no_epsilon_without_a_budget(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Before, the server's two checks and every client's record accounted ε each round
    (a bisection of the exact accountant: about 21 ms at 8,000 rounds), and threw it away."""
    import fedlabels as fl

    calls: list[int] = []
    original = accounting.rr_epsilon_exact.__wrapped__

    def counted(n_bits: int, flip_prob: float, delta: float) -> float:
        calls.append(n_bits)
        return original(n_bits, flip_prob, delta)

    monkeypatch.setattr(accounting, "rr_epsilon_exact", counted)
    in_rounds: list[int] = []
    result = fl.run("dp-fedct", "breast_cancer", clients=3, model="dt", rounds=4, seed=0,
                    options={"epsilon_per_round": 1.0}, progress=False,
                    on_round=lambda record: in_rounds.append(len(calls)))
    assert in_rounds[-1] == in_rounds[0]  # rounds 2-4 computed no ε
    assert result.privacy["epsilon"] == rr_epsilon_exact.__wrapped__(
        4 * result.privacy["sensitivity"]["bits"], result.privacy["flip_probability"],
        result.privacy["delta"])
