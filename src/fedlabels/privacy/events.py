"""What each privacy mechanism did, as frozen records (in the spirit of dp-accounting's DpEvents).

Algorithms never compute ε inline: a protocol records one event per release (e.g. one
:class:`XorEvent` per communication round and client) and hands the list to
:mod:`fedlabels.privacy.accounting`, which turns it into (ε, δ) with a named accountant.

Every event names its **neighbouring relation** (what one "individual" is) and, where it has
one, its **sensitivity and where that number came from** (:class:`Sensitivity`), so a result
can always say under which assumption its guarantee holds.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import asdict, dataclass, field
from typing import Any

from fedlabels.core.errors import FedLabelsError


def _field_error(event: Any, name: str, rule: str) -> FedLabelsError:
    value = getattr(event, name)
    return FedLabelsError(f"{type(event).__name__}: {name} must be {rule}, got {value!r} "
                          "(a release is recorded only with what it really cost).")


def is_count(value: Any) -> bool:
    """Whether ``value`` is a whole number >= 0 (never negative: a negative count would take
    releases off a ledger)."""
    return not isinstance(value, bool) and isinstance(value, numbers.Integral) \
        and int(value) >= 0


def require_count(event: Any, *names: str) -> None:
    """Each named field of ``event`` is a count (:func:`is_count`)."""
    for name in names:
        if not is_count(getattr(event, name)):
            raise _field_error(event, name, "an integer >= 0")


def require_positive(event: Any, *names: str, at_most: float = math.inf,
                     zero: bool = False) -> None:
    """Each named field of ``event`` is a finite number > 0 (>= 0 with ``zero``), at most
    ``at_most``."""
    for name in names:
        value = getattr(event, name)
        number = float(value) if isinstance(value, numbers.Real) \
            and not isinstance(value, bool) else math.nan
        if not math.isfinite(number) or not (number >= 0 if zero else number > 0) \
                or number > at_most:
            low = ">= 0" if zero else "> 0"
            high = "" if at_most == math.inf else f" and <= {at_most:g}"
            raise _field_error(event, name, f"a finite number {low}{high}")


#: one private training record of one client is removed, or replaced by another record
RECORD_LEVEL = "record-level: one private record of one client removed or replaced"
#: all data of one client is added or removed (McMahan et al. 2018, DP-FedAvg)
CLIENT_LEVEL = "client-level: one client (all its records) added or removed"
#: what s* = 2|U| (every label may change) protects: any two datasets of one client
WHOLE_DATASET = ("client-level under replacement: one client's whole private dataset "
                 "replaced by any other (s* = 2|U| bounds the distance between the label "
                 "releases of any two datasets), so every record of it, not just one")
#: the relation assumed by the GNMax / LNMax vote sensitivities (PATE)
DISJOINT_TEACHERS = ("record-level: one private record of one teacher replaced by another "
                     "(not added or removed: a client's split into teachers depends on its "
                     "size and its records' order); each record trains exactly one teacher "
                     "(disjoint teacher data), so one vote moves")


def covers_add_remove(neighbouring: str) -> bool:
    """Whether a claim under ``neighbouring`` bounds adding or removing one record (what a
    canary audit does). A claim under replacement only does not, nor one of a whole client
    added or removed: a record added to a client replaces that client's contribution (the
    clipped update moves by up to 2S), bounded only by group privacy, up to 2ε."""
    return neighbouring not in (DISJOINT_TEACHERS, CLIENT_LEVEL)


SENSITIVITY_SOURCES = ("empirical", "prop2", "worst", "given")


@dataclass(frozen=True)
class Sensitivity:
    """Hamming sensitivity s* of a client's one-hot label matrix on U, in **bits**.

    One changed hard label changes two bits of its one-hot row (the old class goes 1 -> 0,
    the new one 0 -> 1), so ``bits = 2 * labels``; the worst case is ``2 |U|``.

    Parameters
    ----------
    bits : int
        s* in bits of the one-hot matrix (what the XOR mechanism is calibrated to).
    source : {"empirical", "prop2", "worst", "given"}
        ``empirical``: maximum over sampled neighbouring datasets (an estimate, not a bound);
        ``prop2``: a heuristic after Prop. 2 of Abourayya et al. from a stability rate (not a
        bound); ``worst``: ``2 |U|`` (always valid, for any two datasets of a client);
        ``given``: a number supplied by the user.
    n_unlabeled : int
        |U|.
    formal : bool
        True only when the number is a proven worst-case bound (``worst``).
    details : dict
        How it was obtained (neighbours, relation, stability rate, per-client values, ...).
    """

    bits: int
    source: str
    n_unlabeled: int
    formal: bool
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def labels(self) -> int:
        """The number of hard labels that may change (``ceil(bits / 2)``)."""
        return math.ceil(self.bits / 2)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["labels"] = self.labels
        out["unit"] = "bits of the |U| x C one-hot matrix (1 changed label = 2 bits)"
        return out


@dataclass(frozen=True)
class XorEvent:
    """One release of a one-hot label matrix through bitwise randomized response (XOR).

    Each bit is flipped independently with probability ``flip_probability`` =
    1 / (1 + exp(ε / s*)); for neighbours whose matrices differ in at most s* bits the
    likelihood ratio is at most ((1 - f) / f)^{s*} = exp(ε): pure ε-DP, tight.
    """

    epsilon: float
    sensitivity_bits: int
    flip_probability: float
    n_bits: int
    neighbouring: str = RECORD_LEVEL

    def __post_init__(self) -> None:
        require_positive(self, "epsilon", zero=True)
        require_positive(self, "flip_probability", at_most=0.5)
        require_count(self, "sensitivity_bits", "n_bits")

    @property
    def per_bit_epsilon(self) -> float:
        f = self.flip_probability
        return math.log((1.0 - f) / f)


@dataclass(frozen=True)
class KaryRREvent:
    """One release of |U| hard labels through k-ary randomized response.

    Each label is kept with probability e^{ε₁} / (e^{ε₁} + C - 1), otherwise replaced by one
    of the other C - 1 classes uniformly; ε = ``sensitivity_labels`` · ε₁.
    """

    epsilon: float
    sensitivity_labels: int
    epsilon_per_label: float
    n_classes: int
    n_labels: int
    neighbouring: str = RECORD_LEVEL

    def __post_init__(self) -> None:
        require_positive(self, "epsilon", "epsilon_per_label", zero=True)
        require_count(self, "sensitivity_labels", "n_classes", "n_labels")

    @property
    def keep_probability(self) -> float:
        e = math.exp(self.epsilon_per_label)
        return e / (e + self.n_classes - 1)


@dataclass(frozen=True)
class SampledGaussianEvent:
    """One DP-FedAvg round: Poisson client sampling with rate q, clipped updates (norm S)
    summed, Gaussian noise of standard deviation ``noise_multiplier * S`` added to the sum.

    Under add/remove-one-client the sum has L2 sensitivity S, so this is the
    Poisson-subsampled Gaussian mechanism with noise multiplier σ.
    """

    noise_multiplier: float
    sampling_rate: float
    clip_norm: float
    neighbouring: str = CLIENT_LEVEL

    def __post_init__(self) -> None:
        require_positive(self, "noise_multiplier", "clip_norm")
        require_positive(self, "sampling_rate", at_most=1.0)


@dataclass(frozen=True)
class DiscreteGaussianEvent:
    """One DP-FedAvg round with ``noise="discrete"``: Poisson client sampling with rate q,
    each clipped update (norm S) rounded to the integer grid ``grid`` (γ), the integer
    vectors summed and independent discrete Gaussians N_Z(0, (σΔ)²) added to the sum.

    Under add/remove-one-client the integer sum moves by an integer vector of ℓ2 norm at most
    ``sensitivity`` = Δ = S/γ + √d/2 (in grid units), so one round's RDP is at most α/(2σ²)
    (:mod:`fedlabels.privacy.discrete_accounting`).
    """

    noise_multiplier: float
    sampling_rate: float
    clip_norm: float
    grid: float
    sensitivity: float
    neighbouring: str = CLIENT_LEVEL

    def __post_init__(self) -> None:
        require_positive(self, "noise_multiplier", "clip_norm", "grid", "sensitivity")
        require_positive(self, "sampling_rate", at_most=1.0)


@dataclass(frozen=True)
class DistributedDiscreteGaussianEvent:
    """One answered attempt of DP-FedAvg with ``aggregation="secure"``: each member of a
    group of at least ``shares`` clients rounds its clipped update (norm S) to the integer
    grid γ, adds its own share N_Z(0, (σΔ)²/shares) and masks the vector; the server learns
    only the group's sum, whose noise is a sum of at least ``shares`` discrete Gaussians.

    Under add/remove-one-client the sum moves by an integer vector of ℓ2 norm at most
    ``sensitivity`` = Δ = S/γ + √d/2 in ``dimension`` = d coordinates; the RDP is Kairouz,
    Liu & Steinke's bound on a sum of discrete Gaussians
    (:mod:`fedlabels.privacy.distributed_discrete`). ``clients``: the members it was asked
    of (a server's ledger; none: the one party whose ledger holds it).
    """

    noise_multiplier: float
    shares: int
    clip_norm: float
    grid: float
    sensitivity: float
    dimension: int
    clients: tuple[int, ...] = ()
    neighbouring: str = CLIENT_LEVEL

    def __post_init__(self) -> None:
        require_positive(self, "noise_multiplier", "clip_norm", "grid", "sensitivity")
        require_count(self, "shares", "dimension")
        if self.shares < 1 or self.dimension < 1:
            raise _field_error(self, "shares" if self.shares < 1 else "dimension", ">= 1")

    def client_part(self, cid: int) -> DistributedDiscreteGaussianEvent | None:
        """What client ``cid`` released of this event (None: it was not asked)."""
        if self.clients and cid not in self.clients:
            return None
        return DistributedDiscreteGaussianEvent(
            self.noise_multiplier, self.shares, self.clip_norm, self.grid, self.sensitivity,
            self.dimension, (), self.neighbouring)


@dataclass(frozen=True)
class GNMaxEvent:
    """A batch of ``n_queries`` (confident) GNMax queries on teacher vote counts.

    Each query releases ``argmax_i (n_i + N(0, σ²))`` (L2 sensitivity √2: one vote moves);
    with confident GNMax (``threshold`` not None) it is answered only if
    ``max_i n_i + N(0, σ₁²) >= threshold`` (L2 sensitivity 1), a check every query pays for.
    The data-independent accounting (the guarantee) needs only σ, σ₁ and ``n_queries``: every
    asked query is charged λ/σ², answered or not, since which queries are answered is private.

    ``data_dependent_log_q`` holds log q̃ (Papernot et al. 2018, Prop. 7) of each *answered*
    query. It is computed from the private vote counts, so the data-dependent bound derived
    from it is **not itself differentially private** (no smooth-sensitivity release); it is
    reported beside the guarantee, never as it. ``None`` skips that bound.
    """

    sigma: float
    n_queries: int
    n_answered: int
    threshold: float | None = None
    threshold_sigma: float | None = None
    data_dependent_log_q: tuple[float, ...] | None = None
    neighbouring: str = DISJOINT_TEACHERS

    def __post_init__(self) -> None:
        require_positive(self, "sigma")
        require_count(self, "n_queries", "n_answered")
        if self.n_answered > self.n_queries:
            raise _field_error(self, "n_answered", f"at most n_queries = {self.n_queries}")
        if self.threshold is not None or self.threshold_sigma is not None:
            require_positive(self, "threshold_sigma")

    @property
    def confident(self) -> bool:
        return self.threshold is not None


@dataclass(frozen=True)
class LaplaceNoisyMaxEvent:
    """``n_queries`` Laplace noisy-max (LNMax) releases: ``argmax(counts + Laplace(b))``.

    With L1 sensitivity Δ₁ of the count vector (2 when one vote moves; 2·n when one record can
    move all n teachers' votes) each query is (Δ₁/b)-DP.
    """

    scale: float
    l1_sensitivity: float
    n_queries: int
    neighbouring: str = RECORD_LEVEL

    def __post_init__(self) -> None:
        require_positive(self, "scale", "l1_sensitivity")
        require_count(self, "n_queries")

    @property
    def epsilon_per_query(self) -> float:
        return self.l1_sensitivity / self.scale


Event = (XorEvent | KaryRREvent | SampledGaussianEvent | DiscreteGaussianEvent | GNMaxEvent
         | LaplaceNoisyMaxEvent)
