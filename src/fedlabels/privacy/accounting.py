"""Privacy accounting: from a list of events to (ε, δ), with the accountant's name.

Accountants
-----------
``basic``
    Pure-DP sequential composition: ε = Σ ε_i, δ = 0 (XOR and k-ary RR releases only).
``exact``
    The exact (ε, δ) curve of composed randomized response of one noise parameter: k-ary
    RR's in :mod:`fedlabels.privacy.kary_exact`, binary's (XOR's bits, 2-class k-ary RR)
    here. For s*
    differing bits released T times with flip probability f the privacy loss is
    (n - 2K)·a with n = T·s*, a = ln((1 - f)/f) and K ~ Binomial(n, f); then
    δ(ε) = E[(1 - e^{ε - loss})_+] is summed in closed form (this is the PLD of the
    dominating pair, without discretisation; summed over a window of the binomial, the mass
    outside added, in O(√n): :func:`rr_delta_for_epsilon`).
``pld``
    dp-accounting's privacy-loss-distribution accountant. Randomized-response PLDs are
    self-composed with ``PrivacyLossDistribution.self_compose`` (dp-accounting 0.6.0's
    ``PLDAccountant`` ignores the count of a ``RandomizedResponseDpEvent``, see
    docs/privacy.md), the subsampled Gaussian goes through ``PLDAccountant``.
``rdp``
    dp-accounting's Rényi-DP accountant.

Neighbouring relations follow docs/privacy.md §2.8: randomized response uses
``REPLACE_ONE`` (required by dp-accounting: a changed bit / label is a replaced bucket); the
subsampled Gaussian of DP-FedAvg uses ``ADD_OR_REMOVE_ONE`` with the noise multiplier
σ = noise std / clip norm, the clip norm being the true L2 sensitivity of the sum of clipped
client updates when one client is added or removed.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import numpy as np

from fedlabels.core.errors import FedLabelsError
from fedlabels.privacy.events import KaryRREvent, SampledGaussianEvent, XorEvent
from fedlabels.privacy.gaussian_pld import gaussian_pld
from fedlabels.privacy.search import bisect_monotone
from fedlabels.privacy.validation import (
    check_delta,
    check_epsilon,
    check_noise_multiplier,
    check_sampling_rate,
)

#: above this many composed randomized-response mechanisms the dp-accounting PLD
#: self-composition gets slow (about 4 s at 2,000); the exact accountant covers XOR there
PLD_MAX_COMPOSITIONS = 2000

XOR_ACCOUNTANTS = ("basic", "exact", "rdp", "pld")

#: the PLD accountant's discretisation of the privacy loss (dp-accounting's default)
PLD_DISCRETIZATION = 1e-4

#: the releases :func:`account_labels` composes: randomized response on labels
LabelEvent: TypeAlias = XorEvent | KaryRREvent


@dataclass(frozen=True)
class PrivacySpent:
    """(ε, δ) of a composition, the accountant that gave it, and the alternatives."""

    epsilon: float
    delta: float
    accountant: str
    by_accountant: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"epsilon": self.epsilon, "delta": self.delta, "accountant": self.accountant,
                "epsilon_by_accountant": dict(self.by_accountant)}


def _quiet_absl() -> None:
    # dp-accounting's RDP logs harmless "failed to converge" warnings for orders 1.1-1.5
    logging.getLogger("absl").setLevel(logging.ERROR)


# ------------------------------------------------------------------ exact binary RR

#: the exact accountant sums the binomial over its mean ± this many standard deviations (plus
#: :data:`RR_WINDOW_SLACK` counts) and adds the whole mass outside as if every term there were
#: 1: an upper bound of δ, equal to the full sum to float precision, whose cost grows as √n, not
#: n (n = T·s* grows with the rounds: a DP-FedCT run checks its budget every round)
RR_WINDOW_SDS = 40.0
RR_WINDOW_SLACK = 64


def rr_delta_for_epsilon(epsilon: float, n_bits: int, flip_prob: float) -> float:
    """δ(ε) of ``n_bits``-fold bitwise randomized response with flip probability f.

    δ(ε) = Σ_k Bin(k; n, f) · max(0, 1 - exp(ε - (n - 2k)·a)), a = ln((1-f)/f), summed over
    the k within :data:`RR_WINDOW_SDS` standard deviations of the mean; each term outside is
    at most its probability, so the binomial's mass outside the window is added (a valid
    upper bound, equal to the full sum to float precision, in O(√n) work). The window's
    probabilities do not depend on ε and are computed once per (n, f)
    (:func:`_rr_window`): a bisection for ε asks for δ at some 40 values of ε.
    """
    a, lo, hi, loss, pmf, mass_below, mass_above = _rr_window(n_bits, flip_prob)
    mask = loss > epsilon
    below = lo > 0 and n_bits * a > epsilon  # k < lo, whose loss exceeds loss[0], may count
    above = hi < n_bits and (n_bits - 2 * (hi + 1)) * a > epsilon
    if not (mask.any() or below or above):
        return 0.0
    outside = (mass_below if below else 0.0) + (mass_above if above else 0.0)
    return float(np.sum(pmf[mask] * -np.expm1(epsilon - loss[mask]))) + outside


def _rr_bounds(n_bits: int, flip_prob: float) -> tuple[float, int, int, np.ndarray,
                                                       np.ndarray]:
    """a, the window [lo, hi] of k :func:`rr_delta_for_epsilon` sums over, its k and each
    k's privacy loss."""
    a = math.log((1.0 - flip_prob) / flip_prob)
    mean = n_bits * flip_prob
    width = RR_WINDOW_SDS * math.sqrt(n_bits * flip_prob * (1.0 - flip_prob)) + RR_WINDOW_SLACK
    lo, hi = max(0, math.floor(mean - width)), min(n_bits, math.ceil(mean + width))
    k = np.arange(lo, hi + 1)
    return a, lo, hi, k, (n_bits - 2 * k) * a


def _rr_deltas(epsilons: Sequence[float], n_bits: int, flip_prob: float) -> list[float]:
    """``rr_delta_for_epsilon(e, n_bits, flip_prob)`` for each e, the same floats, with the
    binomial's probabilities computed once and only for the k the smallest e sums (the k
    whose loss exceeds it: the same terms, in the same order, as the whole window's): for
    a budget check's one or two δ(ε) near the budget about half the window's, and no
    window kept."""
    from scipy import stats

    a, lo, hi, k, loss = _rr_bounds(n_bits, flip_prob)
    summed = loss > min(epsilons)
    loss = loss[summed]
    pmf = stats.binom.pmf(k[summed], n_bits, flip_prob)
    out = []
    for epsilon in epsilons:
        mask = loss > epsilon
        below = lo > 0 and n_bits * a > epsilon
        above = hi < n_bits and (n_bits - 2 * (hi + 1)) * a > epsilon
        if not (mask.any() or below or above):
            out.append(0.0)
            continue
        outside = ((float(stats.binom.cdf(lo - 1, n_bits, flip_prob)) if below else 0.0)
                   + (float(stats.binom.sf(hi, n_bits, flip_prob)) if above else 0.0))
        out.append(float(np.sum(pmf[mask] * -np.expm1(epsilon - loss[mask]))) + outside)
    return out


@functools.lru_cache(maxsize=4)  # one (n, f) per bisection; a window is O(√n) floats
def _rr_window(n_bits: int, flip_prob: float) -> tuple[float, int, int, np.ndarray,
                                                       np.ndarray, float, float]:
    """What :func:`rr_delta_for_epsilon` sums over, for any ε: a, the window [lo, hi] of k,
    each k's privacy loss and probability, and the binomial's mass below and above it."""
    from scipy import stats  # lazy: scipy.stats costs ~1 CPU-s per Flower ClientApp start

    a, lo, hi, k, loss = _rr_bounds(n_bits, flip_prob)
    pmf = stats.binom.pmf(k, n_bits, flip_prob)
    loss.setflags(write=False)
    pmf.setflags(write=False)
    return (a, lo, hi, loss, pmf,
            float(stats.binom.cdf(lo - 1, n_bits, flip_prob)) if lo > 0 else 0.0,
            float(stats.binom.sf(hi, n_bits, flip_prob)) if hi < n_bits else 0.0)


@functools.lru_cache(maxsize=1024)  # pure; a ledger accounts the same releases at each check
def rr_epsilon_exact(n_bits: int, flip_prob: float, delta: float) -> float:
    """The smallest ε with δ(ε) <= δ for ``n_bits``-fold bitwise randomized response."""
    a = math.log((1.0 - flip_prob) / flip_prob)
    lo, hi = 0.0, n_bits * a
    if rr_delta_for_epsilon(lo, n_bits, flip_prob) <= delta:
        return 0.0
    _, hi = bisect_monotone(lambda e: rr_delta_for_epsilon(e, n_bits, flip_prob) > delta,
                            lo, hi, rel_tol=1e-10, max_iter=200, tol_floor=1.0)
    return hi


#: the half-width, relative to max(1, ε), of the band around a limit within which
#: :func:`rr_epsilon_exact_within` asks the bisection itself: 10 times its tolerance
RR_WITHIN_BAND = 1e-9


def rr_epsilon_exact_within(limit: float, n_bits: int, flip_prob: float,
                            delta: float) -> bool:
    """Whether ``rr_epsilon_exact(n_bits, flip_prob, delta) <= limit``, the same answer from
    two evaluations of δ(ε) (:func:`_rr_deltas`) instead of a bisection's ~40 (a budget
    check needs only this). δ decreases with ε, the bisection's upper end ``hi`` has
    δ(hi) <= δ and its lower end ``lo`` δ(lo) > δ, and it stops once
    hi - lo <= 1e-10 · max(1, hi); so with
    b = :data:`RR_WITHIN_BAND` · max(1, limit), δ(limit - b) <= δ puts lo below limit - b
    and hi below ``limit``, and δ(limit + b) > δ puts hi above ``limit``. Between the two
    (``limit`` within b of the point where δ(ε) crosses δ) the bisection answers."""
    return _exact_within(limit, delta, lambda es: _rr_deltas(es, n_bits, flip_prob),
                         lambda: rr_epsilon_exact(n_bits, flip_prob, delta))


def kary_epsilon_exact_within(limit: float, n: int, p: float, k: int, delta: float) -> bool:
    """Whether ``kary_epsilon_exact(n, p, k, delta) <= limit``, decided as
    :func:`rr_epsilon_exact_within` decides it for binary randomized response."""
    from fedlabels.privacy.kary_exact import kary_deltas, kary_epsilon_exact

    return _exact_within(limit, delta, lambda es: kary_deltas(es, n, p, k),
                         lambda: kary_epsilon_exact(n, p, k, delta))


def _exact_within(limit: float, delta: float,
                  deltas: Callable[[Sequence[float]], list[float]],
                  epsilon: Callable[[], float]) -> bool:
    band = RR_WITHIN_BAND * max(1.0, limit)
    if limit > band:
        below, above = deltas((limit - band, limit + band))
        if below <= delta:
            return True
        if above > delta:
            return False
    return epsilon() <= limit


# ------------------------------------------------------------------ label mechanisms

def repeat_add(total: Any, term: Any, n: int) -> Any:
    """``total`` with ``term`` added ``n`` times one after the other (a float or an array,
    bit for bit what a loop of ``total += term`` gives), in C: a run of n equal releases
    counted at once."""
    if n == 1:
        return total + term
    chunk = 4096
    while n > 0:
        k = min(n, chunk)
        rows = np.empty((k + 1, *np.shape(total)))
        rows[0], rows[1:] = total, term
        total = np.add.accumulate(rows, axis=0)[-1]
        n -= k
    return float(total) if np.ndim(total) == 0 else total


@dataclass
class LabelTally:
    """What label accounting reads of XOR / k-ary RR releases, kept as they are added: Σ ε
    (``basic``, summed left to right), the composed dp-accounting RR mechanisms per (noise
    parameter p, buckets) in the order first seen (``groups``: a group's buckets tell
    k-ary RR from binary, which 2-class k-ary RR is), and how many releases. A ledger keeps
    one running (:mod:`fedlabels.privacy.tally`), so a check need not walk every release
    again."""

    basic: float = 0.0
    groups: dict[tuple[float, int], int] = field(default_factory=dict)
    count: int = 0

    @classmethod
    def of(cls, events: Sequence[LabelEvent]) -> LabelTally:
        tally = cls()
        for ev in events:
            tally.add(ev)
        return tally

    def add(self, ev: LabelEvent, n: int = 1) -> None:
        """Add ``n`` releases equal to ``ev`` (the same totals as adding it ``n`` times: the
        counts are multiplied, Σ ε summed left to right by :func:`repeat_add`)."""
        if isinstance(ev, XorEvent):
            key = (2.0 * ev.flip_probability, 2)
            bits = ev.sensitivity_bits
        elif isinstance(ev, KaryRREvent):
            c = ev.n_classes
            key, bits = (c / (math.exp(ev.epsilon_per_label) + c - 1), c), ev.sensitivity_labels
        else:
            raise FedLabelsError(f"{type(ev).__name__} is not a label mechanism.")
        # a left fold, as a running total adds (not sum(): 3.12's compensates)
        self.basic = repeat_add(self.basic, ev.epsilon, n)
        self.groups[key] = self.groups.get(key, 0) + n * bits
        self.count += n

    def copy(self) -> LabelTally:
        return LabelTally(self.basic, dict(self.groups), self.count)


def _label_epsilon(tally: LabelTally, delta: float, accountant: str) -> float:
    if accountant == "basic":
        return float(tally.basic)
    groups = tally.groups
    if accountant == "exact":
        if len(groups) != 1:
            raise FedLabelsError("the exact accountant needs one noise parameter and one "
                                 "number of classes for all releases; use pld/rdp.")
        ((p, k), n), = groups.items()
        if k == 2:  # binary randomized response (XOR's bits, 2-class k-ary RR)
            return rr_epsilon_exact(n, p / 2.0, delta)
        from fedlabels.privacy.kary_exact import kary_epsilon_exact

        return kary_epsilon_exact(n, p, k, delta)
    if accountant in ("rdp", "pld"):
        return _rr_epsilon(accountant, tuple(groups.items()), delta)
    raise FedLabelsError(f"unknown accountant {accountant!r}; use one of "
                         f"{', '.join(XOR_ACCOUNTANTS)}.")


def label_tally_within(tally: LabelTally, limit: float, delta: float,
                       accountants: tuple[str, ...] = XOR_ACCOUNTANTS) -> bool:
    """Whether ``account_label_tally(tally, delta, accountants).epsilon <= limit`` (the
    same answer: the tightest accountant is within iff one is), asking the accountants from
    the cheapest and the exact one by :func:`rr_epsilon_exact_within`, not its ε."""
    check_delta(delta)
    if not tally.count:
        return limit >= 0.0
    cost = {"basic": 0, "rdp": 1, "exact": 2, "pld": 3}
    for name in sorted(accountants, key=lambda a: cost.get(a, len(cost))):
        try:
            if name == "exact":
                if len(tally.groups) != 1:
                    continue  # not applicable (as _label_epsilon refuses it)
                ((p, k), n), = tally.groups.items()
                if (rr_epsilon_exact_within(limit, n, p / 2.0, delta) if k == 2
                        else kary_epsilon_exact_within(limit, n, p, k, delta)):
                    return True
            elif _label_epsilon(tally, delta, name) <= limit:
                return True
        except (FedLabelsError, ImportError):
            continue  # not applicable, or dp-accounting missing (as account_label_tally)
    return False


@functools.lru_cache(maxsize=64)
def _rr_rdp_curve(p: float, buckets: int) -> tuple[Any, Any]:
    """The RDP orders and curve of one randomized response (noise parameter ``p``), as
    ``RdpAccountant`` computes it: n of them compose to n times it (``rdp += n * curve``),
    so a ledger's growing count needs the curve (about 60 ms) once, not every check."""
    import dp_accounting as dpa
    from dp_accounting.rdp import rdp_privacy_accountant as rdp

    _quiet_absl()
    acc = rdp.RdpAccountant(neighboring_relation=dpa.NeighboringRelation.REPLACE_ONE)
    acc.compose(dpa.RandomizedResponseDpEvent(noise_parameter=p, num_buckets=buckets), 1)
    return acc.orders, acc.rdp


@functools.lru_cache(maxsize=256)
def _rr_epsilon(accountant: str, groups: tuple[tuple[tuple[float, int], int], ...],
                delta: float) -> float:
    """ε at δ of the composed randomized responses ``groups`` ((p, buckets), count) by the
    ``rdp`` or ``pld`` accountant. A pure function of its arguments, memoised: a ledger
    accounts the same releases again at every check, and PLD self-composition of a few
    hundred near-deterministic responses takes seconds."""
    if accountant == "rdp":  # RdpAccountant's own sum: zeros, then += n * curve
        from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon

        orders, rdp = None, None
        for (p, k), n in groups:
            orders, curve = _rr_rdp_curve(p, k)
            rdp = np.zeros_like(orders, dtype=np.float64) if rdp is None else rdp
            rdp += n * curve
        if rdp is None:
            raise FedLabelsError("RDP accounting needs at least one label release.")
        return float(compute_epsilon(orders, rdp, delta)[0])
    from dp_accounting.pld import privacy_loss_distribution as pld

    total = sum(n for _, n in groups)
    if total > PLD_MAX_COMPOSITIONS:
        raise FedLabelsError(f"PLD over {total} composed randomized responses would be "
                             f"slow (> {PLD_MAX_COMPOSITIONS}); use the exact or rdp "
                             "accountant.")
    composed = None
    for (p, k), n in groups:
        one = pld.from_randomized_response(noise_parameter=p, num_buckets=k)
        part = one.self_compose(n)  # not PLDAccountant: it drops the count (privacy.md)
        composed = part if composed is None else composed.compose(part)
    if composed is None:
        raise FedLabelsError("PLD accounting needs at least one label release.")
    return float(composed.get_epsilon_for_delta(delta))


def account_labels(events: Sequence[LabelEvent], delta: float,
                   accountants: tuple[str, ...] = XOR_ACCOUNTANTS) -> PrivacySpent:
    """(ε, δ) of a run of XOR / k-ary RR releases: the tightest of the applicable accountants.

    Every accountant gives a valid upper bound, so their minimum is one too; ``accountant``
    names the one that attained it (``basic`` means pure ε-DP, reported with δ = 0).
    """
    return account_label_tally(LabelTally.of(events), delta, accountants)


def account_label_tally(tally: LabelTally, delta: float,
                        accountants: tuple[str, ...] = XOR_ACCOUNTANTS) -> PrivacySpent:
    """:func:`account_labels` of the releases ``tally`` counts."""
    check_delta(delta)
    if not tally.count:
        return PrivacySpent(0.0, 0.0, "none")
    results: dict[str, float] = {}
    for name in accountants:
        try:
            results[name] = _label_epsilon(tally, delta, name)
        except FedLabelsError:
            continue  # not applicable to these events (e.g. exact for k-ary RR)
        except ImportError:
            continue  # dp-accounting missing: basic and exact still apply
    best = min(results, key=results.__getitem__)
    return PrivacySpent(results[best], 0.0 if best == "basic" else delta, best, results)


@functools.lru_cache(maxsize=64)  # pure; the server and every client calibrate alike
def calibrate_xor_round_epsilon(total_epsilon: float, delta: float, rounds: int,
                                sensitivity_bits: int) -> float:
    """The largest per-round ε whose R-fold composition stays within ``total_epsilon`` at δ.

    Uses the exact accountant (never looser than basic composition, whose answer
    ``total_epsilon / rounds`` is the lower end of the search). The returned per-round ε is
    the *pure* ε of one release; the guarantee for the run is (``total_epsilon``, δ).
    """
    check_epsilon(total_epsilon, "total epsilon")
    check_delta(delta)
    from fedlabels.privacy.mechanisms import flip_probability

    def total(eps_round: float) -> float:
        f = flip_probability(eps_round, sensitivity_bits)
        return rr_epsilon_exact(rounds * sensitivity_bits, f, delta)

    return _largest_round_epsilon(total, total_epsilon, rounds)


def _largest_round_epsilon(total: Callable[[float], float], target: float,
                           rounds: int) -> float:
    """The largest per-round ε whose run total ``total(ε)`` (increasing) stays within
    ``target``, searched upwards from basic composition's ``target / rounds``: for a large
    s* the (ε, δ) of many weak responses is far below their pure ε, so the per-round pure ε
    may exceed the total target."""
    return _largest_within(lambda e: total(e) <= target, target, rounds)


def _largest_within(within: Callable[[float], bool], target: float, rounds: int) -> float:
    """:func:`_largest_round_epsilon` of the decision ``within(ε)`` (whether the run's
    total at per-round ε stays within ``target``), all the search asks of the total."""
    lo = hi = target / rounds
    for _ in range(80):
        if not within(hi):
            break
        lo, hi = hi, 2.0 * hi
    else:
        return hi
    lo, _ = bisect_monotone(within, lo, hi, rel_tol=1e-6, max_iter=60)
    return lo


@functools.lru_cache(maxsize=256)  # pure; the client and the server both calibrate
def calibrate_kary_round_epsilon(total_epsilon: float, delta: float, rounds: int,
                                 sensitivity_labels: int, n_classes: int) -> float:
    """The largest per-round ε (= ε per label × s*_labels) whose R-fold composition of k-ary
    randomized response stays within ``total_epsilon`` at δ by the tightest of the exact
    accountant (:mod:`fedlabels.privacy.kary_exact`; binary RR's for 2 classes) and RDP over
    the R · s*_labels composed responses, at least basic composition's
    ``total_epsilon / rounds`` (the lower end of the search). The run's ε is computed from
    the same noise parameter p a ledger keys the releases by, so the server's ledger and
    each client's state the ε calibrated here (``exact``: it is never above RDP's)."""
    check_epsilon(total_epsilon, "total epsilon")
    check_delta(delta)
    from fedlabels.privacy.mechanisms import kary_replace_probability

    def within(eps_round: float) -> bool:
        """Whether min(exact, RDP) <= the target: the exact accountant decides first
        (:func:`label_tally_within`: one or two δ(ε), the same answer as its ε), and RDP's
        ε (a fresh curve for each p) is computed only where the exact one is above it."""
        eps_label = eps_round / sensitivity_labels
        kary_replace_probability(eps_label, n_classes)  # refuses an ε₁ beyond float64
        p = n_classes / (math.exp(eps_label) + n_classes - 1)  # as LabelTally.add keys it
        tally = LabelTally(groups={(p, n_classes): rounds * sensitivity_labels}, count=rounds)
        if label_tally_within(tally, total_epsilon, delta, ("exact",)):
            return True
        try:
            return _label_epsilon(tally, delta, "rdp") <= total_epsilon
        except ImportError:  # dp-accounting missing: the exact accountant alone
            return False

    return _largest_within(within, total_epsilon, rounds)


# ------------------------------------------------------------------ DP-FedAvg

def _gaussian_event(noise_multiplier: float, sampling_rate: float, rounds: int) -> Any:
    import dp_accounting as dpa

    step = dpa.GaussianDpEvent(noise_multiplier)
    if sampling_rate < 1.0:
        step = dpa.PoissonSampledDpEvent(sampling_rate, step)
    return dpa.SelfComposedDpEvent(step, rounds)


def require_dp_accounting() -> None:
    """Refuse, in one line naming the install, where dp-accounting (the ``dp`` extra) is
    missing: every accountant and calibration of a Gaussian mechanism (continuous, discrete,
    a secure sum's discrete shares) needs it."""
    try:
        import dp_accounting  # noqa: F401
    except ImportError:
        raise FedLabelsError("accounting or calibrating a Gaussian mechanism (DP-FedAvg, "
                             "DP-SGD, the discrete Gaussian of --noise discrete and of secure "
                             "aggregation) needs dp-accounting: pip install 'fedlabels[dp]' "
                             "(dp-accounting==0.6.0).") from None


def _gaussian_accountant(name: str) -> Any:
    require_dp_accounting()
    import dp_accounting as dpa
    from dp_accounting.pld import pld_privacy_accountant
    from dp_accounting.rdp import rdp_privacy_accountant

    rel = dpa.NeighboringRelation.ADD_OR_REMOVE_ONE  # pitfall 1 of privacy.md §2.8
    if name == "rdp":
        _quiet_absl()
        return rdp_privacy_accountant.RdpAccountant(neighboring_relation=rel)
    if name == "pld":
        return pld_privacy_accountant.PLDAccountant(
            neighboring_relation=rel, value_discretization_interval=PLD_DISCRETIZATION)
    raise FedLabelsError(f"unknown accountant {name!r} for DP-FedAvg; use rdp, pld or "
                         "analytic (sampling rate 1 only).")


def default_gaussian_accountants(sampling_rate: float) -> tuple[str, ...]:
    """Accountants for reporting: ``analytic`` + ``rdp`` at q = 1, ``pld`` + ``rdp`` else."""
    return ("analytic", "rdp") if sampling_rate >= 1.0 else ("pld", "rdp")


def default_calibration_accountant(sampling_rate: float) -> str:
    """``analytic`` at q = 1 (exact); ``pld`` else, the tighter of the two reported
    (:mod:`fedlabels.privacy.gaussian_calibration`, which falls back to ``rdp`` where PLD
    cannot be afforded)."""
    return "analytic" if sampling_rate >= 1.0 else "pld"


@functools.lru_cache(maxsize=256)  # pure in its arguments; a ledger asks again at every check
def gaussian_epsilon(noise_multiplier: float, sampling_rate: float, rounds: int,
                     delta: float, accountant: str = "rdp") -> float:
    """ε of ``rounds`` Poisson-subsampled Gaussian mechanisms (add/remove one client).

    ``analytic`` (q = 1 only) is exact: T Gaussian mechanisms with multiplier σ compose to
    one with σ/√T, whose ε comes from the analytic Gaussian mechanism (Balle & Wang 2018,
    ``dp_accounting.get_epsilon_gaussian``).
    """
    check_noise_multiplier(noise_multiplier)
    check_sampling_rate(sampling_rate)
    check_delta(delta)
    if rounds < 1:
        raise FedLabelsError(f"rounds must be >= 1, got {rounds}.")
    if accountant == "analytic":
        if sampling_rate < 1.0:
            raise FedLabelsError("the analytic Gaussian accountant needs sampling rate 1; use "
                                 "pld or rdp with client sampling.")
        require_dp_accounting()
        import dp_accounting as dpa

        return float(dpa.get_epsilon_gaussian(noise_multiplier / math.sqrt(rounds), delta))
    if accountant == "rdp":  # RDP composes by multiplication: one step's curve, times T
        from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon

        orders, one_step = _rdp_of_one_step(noise_multiplier, sampling_rate)
        return float(compute_epsilon(orders, rounds * one_step, delta)[0])
    if accountant == "pld" and sampling_rate < 1.0:  # as PLDAccountant composes T steps
        from dp_accounting.pld.privacy_loss_distribution import identity

        steps = pld_of_one_step(noise_multiplier, sampling_rate).self_compose(rounds)
        return float(identity(value_discretization_interval=PLD_DISCRETIZATION)
                     .compose(steps).get_epsilon_for_delta(delta))
    acc = _gaussian_accountant(accountant)
    acc.compose(_gaussian_event(noise_multiplier, sampling_rate, rounds))
    return float(acc.get_epsilon(delta))


@functools.lru_cache(maxsize=64)
def pld_of_one_step(noise_multiplier: float, sampling_rate: float,
                     discretization: float = PLD_DISCRETIZATION) -> Any:
    """The PLD of one Poisson-subsampled Gaussian step, as ``PLDAccountant`` builds it
    (:func:`~fedlabels.privacy.gaussian_pld.gaussian_pld`; memoised, T steps self-compose
    it); ``discretization``: the value discretisation interval (a coarser one for the
    calibration's search)."""
    return gaussian_pld(noise_multiplier, sampling_rate, discretization)


@functools.lru_cache(maxsize=256)
def _rdp_of_one_step(noise_multiplier: float, sampling_rate: float) -> tuple[Any, Any]:
    """The RDP orders and curve of one (subsampled) Gaussian step, memoised: the curve
    costs seconds at fractional orders, and T steps are T times it, exactly as
    ``RdpAccountant`` composes them (``rdp += T * curve``) for any T."""
    acc = _gaussian_accountant("rdp")
    acc.compose(_gaussian_event(noise_multiplier, sampling_rate, 1))
    return acc.orders, acc.rdp


def account_gaussian(events: list[SampledGaussianEvent], delta: float,
                     accountants: tuple[str, ...] | None = None) -> PrivacySpent:
    """(ε, δ) of a DP-FedAvg run (one event per round); the tightest accountant wins."""
    check_delta(delta)
    if not events:
        return PrivacySpent(0.0, 0.0, "none")
    settings = {(ev.noise_multiplier, ev.sampling_rate) for ev in events}
    if len(settings) != 1:
        raise FedLabelsError("DP-FedAvg accounting expects one (σ, q) for all rounds.")
    ((sigma, q),) = settings
    return tightest_gaussian(sigma, q, len(events), delta,
                             accountants or default_gaussian_accountants(q))


#: PLD's grid spans the privacy loss, so at a small σ (a huge ε) it takes gigabytes and
#: minutes (DP-SGD calibrated to ε = 10,000: 6 GB; 100,000: killed for memory). Where RDP
#: already gives an ε above this, PLD is not computed: RDP's ε is a valid upper bound, and a
#: tighter figure that large means nothing
PLD_ABOVE_RDP_EPSILON = 100.0


def tightest_gaussian(noise_multiplier: float, sampling_rate: float, steps: int,
                      delta: float, accountants: tuple[str, ...]) -> PrivacySpent:
    """(ε, δ) of ``steps`` (subsampled) Gaussian mechanisms: the smallest of ``accountants``,
    PLD last and skipped where RDP's ε exceeds :data:`PLD_ABOVE_RDP_EPSILON`."""
    results: dict[str, float] = {}
    for name in sorted(accountants, key=lambda a: a == "pld"):
        if name == "pld" and results.get("rdp", 0.0) > PLD_ABOVE_RDP_EPSILON:
            continue
        results[name] = gaussian_epsilon(noise_multiplier, sampling_rate, steps, delta, name)
    best = min(results, key=results.__getitem__)
    return PrivacySpent(results[best], delta, best, results)
