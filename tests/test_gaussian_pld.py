"""One Poisson-subsampled Gaussian step's PLD built with the privacy-loss grid inverted at
once (:mod:`fedlabels.privacy.gaussian_pld`) is dp-accounting's own to the bit, the
inversion is no longer done point by point, and the calibrated σ is the former search's
to the bit over a grid of (ε, q, T)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from fedlabels.privacy import accounting
from fedlabels.privacy.gaussian_calibration import calibrate_gaussian
from fedlabels.privacy.gaussian_pld import gaussian_pld, inverse_privacy_losses

DELTA = 1e-5

#: σ of calibrate_gaussian(ε, 1e-5, q, T) before the PLD's grid was inverted at once, made
#: at /work/main 8cba2a3 (2026-11-30) by: for ε in (0.5, 1, 2, 4, 8, 16), q in (0.01, 0.1,
#: 0.25, 1), T in (1, 2, 20, 200): print(calibrate_gaussian(ε, 1e-5, q, T)); q = 1 is the
#: analytic Gaussian's, untouched, and left out
FORMER_SIGMA = {
    (0.5, 0.01, 1): 0.7937056147171484,
    (0.5, 0.01, 2): 0.834707557884458,
    (0.5, 0.01, 20): 0.9741682097273545,
    (0.5, 0.01, 200): 1.3232790178657892,
    (0.5, 0.1, 1): 1.724517415396395,
    (0.5, 0.1, 2): 1.8898192448943287,
    (0.5, 0.1, 20): 3.535554097918866,
    (0.5, 0.1, 200): 10.081934234646067,
    (0.5, 0.25, 1): 2.735242693604288,
    (0.5, 0.25, 2): 3.2800795738228428,
    (0.5, 0.25, 20): 8.162085169356324,
    (0.5, 0.25, 200): 24.982342348742986,
    (1.0, 0.01, 1): 0.6739160711880412,
    (1.0, 0.01, 2): 0.7063376059899583,
    (1.0, 0.01, 20): 0.8114615986652338,
    (1.0, 0.01, 200): 0.9674353287651589,
    (1.0, 0.1, 1): 1.2590016436913873,
    (1.0, 0.1, 2): 1.3468754466142967,
    (1.0, 0.1, 20): 2.102267019404243,
    (1.0, 0.1, 200): 5.428773599107015,
    (1.0, 0.25, 1): 1.7910057358049076,
    (1.0, 0.25, 2): 2.0606901492620784,
    (1.0, 0.25, 20): 4.490348934450904,
    (1.0, 0.25, 200): 13.29968115448212,
    (2.0, 0.01, 1): 0.5651826304629963,
    (2.0, 0.01, 2): 0.5904062800429337,
    (2.0, 0.01, 20): 0.671702119080223,
    (2.0, 0.01, 200): 0.7748666195324263,
    (2.0, 0.1, 1): 0.9254412260335265,
    (2.0, 0.1, 2): 0.9808312361389679,
    (2.0, 0.1, 20): 1.362346361655169,
    (2.0, 0.1, 200): 3.0051162131651328,
    (2.0, 0.25, 1): 1.1962172360662624,
    (2.0, 0.25, 2): 1.3498203842077952,
    (2.0, 0.25, 20): 2.5676246400640945,
    (2.0, 0.25, 200): 7.167522499346274,
    (4.0, 0.01, 1): 0.4550539902036168,
    (4.0, 0.01, 2): 0.4736709264399545,
    (4.0, 0.01, 20): 0.5359018778135985,
    (4.0, 0.01, 200): 0.6219249144951318,
    (4.0, 0.1, 1): 0.659644673383764,
    (4.0, 0.1, 2): 0.7024643550773173,
    (4.0, 0.1, 20): 0.9479668763251048,
    (4.0, 0.1, 200): 1.7620216345459023,
    (4.0, 0.25, 1): 0.7863571471564237,
    (4.0, 0.25, 2): 0.8989779267406772,
    (4.0, 0.25, 20): 1.5577480135695683,
    (4.0, 0.25, 200): 3.958715529437432,
    (8.0, 0.01, 1): 0.3426190002629717,
    (8.0, 0.01, 2): 0.35550592854353413,
    (8.0, 0.01, 20): 0.40904878280126133,
    (8.0, 0.01, 200): 0.49423898716474174,
    (8.0, 0.1, 1): 0.44480944314525633,
    (8.0, 0.1, 2): 0.4918352410864642,
    (8.0, 0.1, 20): 0.680795091799784,
    (8.0, 0.1, 200): 1.1297476045218668,
    (8.0, 0.25, 1): 0.498098324936789,
    (8.0, 0.25, 2): 0.5983274445677327,
    (8.0, 0.25, 20): 1.0059114165981007,
    (8.0, 0.25, 200): 2.281698978779283,
    (16.0, 0.01, 1): 0.24168063706188642,
    (16.0, 0.01, 2): 0.2522632258064758,
    (16.0, 0.01, 20): 0.3097909853004911,
    (16.0, 0.01, 200): 0.39122522626817424,
    (16.0, 0.1, 1): 0.2875853250195416,
    (16.0, 0.1, 2): 0.3419694675422564,
    (16.0, 0.1, 20): 0.4942404549598687,
    (16.0, 0.1, 200): 0.7884140718680155,
    (16.0, 0.25, 1): 0.3085816091935689,
    (16.0, 0.25, 2): 0.39247465537545473,
    (16.0, 0.25, 20): 0.6798138646778895,
    (16.0, 0.25, 200): 1.4020155094421856,
}


def _same(x: Any, y: Any) -> bool:
    """Equal to the bit: arrays by their bytes, objects attribute by attribute."""
    if type(x) is not type(y):
        return False
    if isinstance(x, np.ndarray):
        return x.shape == y.shape and x.dtype == y.dtype and x.tobytes() == y.tobytes()
    if isinstance(x, dict):
        return x.keys() == y.keys() and all(_same(x[k], y[k]) for k in x)
    if isinstance(x, float):
        return math.copysign(1.0, x) == math.copysign(1.0, y) and (
            x == y or (math.isnan(x) and math.isnan(y)))
    if hasattr(x, "__dict__"):
        return _same(vars(x), vars(y))
    return bool(x == y)


def _dp_accountings(sigma: float, q: float, discretization: float) -> Any:
    import dp_accounting as dpa
    from dp_accounting.pld.privacy_loss_distribution import from_gaussian_mechanism

    return from_gaussian_mechanism(
        standard_deviation=sigma, value_discretization_interval=discretization,
        sampling_prob=q, neighboring_relation=dpa.NeighboringRelation.ADD_OR_REMOVE_ONE)


@pytest.mark.parametrize("sigma, q, discretization", [
    (0.6, 0.25, 1e-3),  # a small σ: a long grid
    (0.35, 0.01, 1e-3),
    (2.0, 0.25, 1e-4),  # the reported discretisation
    (1.3, 0.99, 1e-3),
    (5.0, 0.5, 1e-4),
    (1.0, 1.0, 1e-3),  # q = 1: dp-accounting's own
])
def test_the_pld_is_dp_accountings_to_the_bit(sigma: float, q: float,
                                              discretization: float) -> None:
    assert _same(gaussian_pld(sigma, q, discretization),
                 _dp_accountings(sigma, q, discretization))


@pytest.mark.parametrize("adjacency", ["ADD", "REMOVE"])
@pytest.mark.parametrize("q", [0.001, 0.25, 0.9])
def test_the_losses_are_inverted_as_dp_accounting_inverts_each(adjacency: str,
                                                               q: float) -> None:
    """Element by element against ``GaussianPrivacyLoss.inverse_privacy_loss``, at 0, at
    the edge log(1 - q) (an infinite loss's inverse), just inside it and elsewhere."""
    from dp_accounting.pld import privacy_loss_mechanism as plm

    kind = plm.AdjacencyType[adjacency]
    loss = plm.GaussianPrivacyLoss(0.8, sampling_prob=q, adjacency_type=kind)
    edge = -math.log(1 - q) if adjacency == "ADD" else math.log(1 - q)
    inside = np.nextafter(edge, -math.inf if adjacency == "ADD" else math.inf)
    far = 30.0 * (-1 if adjacency == "ADD" else 1)
    rng = np.random.default_rng(0)
    points = np.concatenate([[0.0, edge, inside, edge * (1 - 1e-10)],
                             rng.uniform(min(edge, far), max(edge, far), 2000)])
    points = points[(points <= edge) if adjacency == "ADD" else (points >= edge)]
    ours = inverse_privacy_losses(points, q, 1.0, 0.8 ** 2, adjacency == "ADD")
    theirs = np.array([loss.inverse_privacy_loss(p) for p in points])
    assert ours.tobytes() == theirs.tobytes()


def test_the_grid_is_inverted_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before, dp-accounting inverted the privacy loss once per point of the grid (a Python
    call each: 33,000 here, both adjacencies, ten times that at the reported
    discretisation); now none is."""
    from dp_accounting.pld import privacy_loss_mechanism as plm

    calls = []
    inverse = plm.GaussianPrivacyLoss.inverse_privacy_loss

    def counted(self: Any, privacy_loss: float) -> float:
        calls.append(privacy_loss)
        return inverse(self, privacy_loss)

    monkeypatch.setattr(plm.GaussianPrivacyLoss, "inverse_privacy_loss", counted)
    accounting.pld_of_one_step.cache_clear()
    try:
        accounting.pld_of_one_step(0.6, 0.25, 1e-3)
    finally:
        accounting.pld_of_one_step.cache_clear()
    assert len(calls) < 10


def _fresh_sigma(epsilon: float, q: float, steps: int) -> float:
    for memo in (calibrate_gaussian, accounting.gaussian_epsilon, accounting.pld_of_one_step):
        memo.cache_clear()
    return calibrate_gaussian(epsilon, DELTA, q, steps).sigma


@pytest.mark.parametrize("case", [(8.0, 0.25, 2), (1.0, 0.1, 20)], ids=str)
def test_the_calibrated_sigma_is_the_former_one(case: tuple[float, float, int]) -> None:
    assert _fresh_sigma(*case) == FORMER_SIGMA[case]


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(FORMER_SIGMA), ids=str)
def test_the_calibrated_sigma_is_the_former_one_over_the_grid(
        case: tuple[float, float, int]) -> None:
    assert _fresh_sigma(*case) == FORMER_SIGMA[case]
