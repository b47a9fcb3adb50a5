"""A given DP-SGD noise multiplier: record-level DP-FedAvg and DP-FedCT's ``dpsgd`` take
``noise_multiplier`` as client-level DP-FedAvg does (exactly one of it and ``epsilon``),
every client adds and enforces its own σ and its ledger says σ was given, and the reported
ε is what the steps spend at that σ (dp-accounting's own accountants as the oracle)."""

from __future__ import annotations

from typing import Any

import pytest

import fedlabels as fl
from conftest import digits_with_sizes, keep_client_roles
from fedlabels.core.errors import FedLabelsError

MLP = "mlp(hidden=8)"
SIGMA, RATE, DELTA = 1.3, 0.25, 1e-5
ROUNDS, PERIOD = 2, 3
CASES = [("dp-fedavg", {"level": "record"}), ("dp-fedct", {"mechanism": "dpsgd"})]


@pytest.fixture(scope="module")
def fed() -> fl.Federation:
    return digits_with_sizes((40, 60, 50), n_unlabeled=40, n_test=60)


def _oracle(sigma: float, q: float, steps: int) -> float:
    """The tighter of dp-accounting's own PLD and RDP accountants, fresh."""
    import dp_accounting as dpa
    from dp_accounting.pld.pld_privacy_accountant import PLDAccountant
    from dp_accounting.rdp.rdp_privacy_accountant import RdpAccountant

    rel = dpa.NeighboringRelation.ADD_OR_REMOVE_ONE
    event = dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(sigma)),
                                    steps)
    out = []
    for acc in (PLDAccountant(rel, value_discretization_interval=1e-4),
                RdpAccountant(neighboring_relation=rel)):
        acc.compose(event)
        out.append(float(acc.get_epsilon(DELTA)))
    return min(out)


def _options(mode: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {**mode, "example_rate": RATE, "delta": DELTA, **more}


@pytest.mark.filterwarnings("ignore::fedlabels.RunCaveatWarning")  # tiny, noisy models
@pytest.mark.parametrize("method, mode", CASES)
def test_a_given_sigma_is_what_every_party_uses_and_its_epsilon_is_reported(
        fed: fl.Federation, monkeypatch: pytest.MonkeyPatch, method: str,
        mode: dict[str, Any]) -> None:
    roles = keep_client_roles(monkeypatch, method)
    result = fl.run(method, fed, model=MLP, rounds=ROUNDS, period=PERIOD, seed=0,
                    progress=False, options=_options(mode, noise_multiplier=SIGMA))
    p = result.extra["privacy"]
    assert p["noise_multiplier"] == SIGMA
    assert p["noise_multiplier_source"] == "given" and p["calibration"] is None
    assert p["target"] is None  # no total ε: nothing to calibrate to, no budget
    assert set(p["steps_per_client"].values()) == {ROUNDS * PERIOD}
    assert p["epsilon"] == pytest.approx(_oracle(SIGMA, RATE, ROUNDS * PERIOD), rel=1e-3)
    for cid, role in roles.items():
        assert role.own_sigma() == SIGMA, cid
        assert role.ledger.calibrated_by == "given", cid
        assert {ev.noise_multiplier for ev in role.ledger.events} == {SIGMA}, cid
        assert role.planned_events() == [role.ledger.events[0]] * ROUNDS, cid


@pytest.mark.parametrize("method, mode", CASES)
def test_clients_refuse_a_server_sigma_below_their_given_one(
        fed: fl.Federation, monkeypatch: pytest.MonkeyPatch, method: str,
        mode: dict[str, Any]) -> None:
    """The σ a client adds is its own option's: a server that asks for less is refused
    before any step (the server's message never sets a client's protection)."""
    from fedlabels.methods.fedavg import dp_fedavg_record
    from fedlabels.methods.fedct.mechanisms import dpsgd

    module: Any = dp_fedavg_record if method == "dp-fedavg" else dpsgd
    original = module.dpsgd_round_config
    monkeypatch.setattr(module, "dpsgd_round_config",
                        lambda sigma, options: original(sigma / 2, options))
    with pytest.raises(FedLabelsError, match=r"below the σ = 1\.3 this client's "
                                             "noise_multiplier gives"):
        fl.run(method, fed, model=MLP, rounds=ROUNDS, period=PERIOD, seed=0, progress=False,
               options=_options(mode, noise_multiplier=SIGMA))


@pytest.mark.parametrize("method, options, match", [
    ("dp-fedavg", {"level": "record", "noise_multiplier": 1.0, "epsilon": 1.0},
     "level record needs exactly one of noise_multiplier"),
    ("dp-fedavg", {"level": "record"}, "level record needs exactly one of noise_multiplier"),
    ("dp-fedct", {"mechanism": "dpsgd", "noise_multiplier": 1.0, "epsilon": 1.0},
     "dpsgd needs exactly one of noise_multiplier"),
    ("dp-fedct", {"mechanism": "dpsgd"}, "dpsgd needs exactly one of noise_multiplier"),
    ("dp-fedct", {"mechanism": "dpsgd", "noise_multiplier": 1.0, "epsilon_per_round": 1.0},
     "not --epsilon-per-round"),
    ("dp-fedct", {"mechanism": "kary", "noise_multiplier": 1.0, "epsilon": 1.0},
     "noise_multiplier apply only with --mechanism dpsgd"),
])
def test_sigma_and_a_target_are_exclusive(method: str, options: dict[str, Any],
                                          match: str) -> None:
    from fedlabels.methods import METHODS

    with pytest.raises(FedLabelsError, match=match) as info:
        METHODS[method].options_class.from_mapping(options, method)
    assert "\n" not in str(info.value)


def test_a_secure_dp_fedavg_client_given_sigma_says_so_in_its_ledger() -> None:
    """Every client that adds its own noise states how its σ came: secure DP-FedAvg's
    share with a given σ too (``rdp`` where it calibrated it from its ε)."""
    from fedlabels.learners import as_models
    from fedlabels.runs.session import build_session

    fed = fl.load_federation("breast_cancer", clients=3, seed=0)
    for options, how in (({"noise_multiplier": 1.0}, "given"), ({"epsilon": 8.0}, "rdp")):
        session = build_session("dp-fedavg", fed, as_models("mlp(hidden=2)"), rounds=2,
                                period=1, seed=0, options={"noise": "discrete",
                                                           "aggregation": "secure", **options})
        assert {c.ledger.calibrated_by  # type: ignore[attr-defined]
                for c in session.clients.values()} == {how}


@pytest.mark.filterwarnings("ignore::fedlabels.RunCaveatWarning")  # tiny, noisy models
@pytest.mark.parametrize("method, mode", [
    *CASES, ("dp-fedavg", {}),
    ("dp-fedavg", {"noise": "discrete", "aggregation": "secure"})])
def test_a_servers_ledger_and_the_result_say_a_given_sigma_was_given(
        fed: fl.Federation, monkeypatch: pytest.MonkeyPatch, method: str,
        mode: dict[str, Any]) -> None:
    """With --noise-multiplier the clients' ledgers said calibrated_by: given while client-
    and secure DP-FedAvg's server ledger left it empty; every server's ledger says it, the
    result's privacy.calibrated_by too (the ledger's, as a target's says it when σ is
    calibrated) and the report's privacy line ('σ given')."""
    from fedlabels.engines.inprocess import CommMeter, InProcessGrid
    from fedlabels.learners import as_models
    from fedlabels.reporting.report_page import guarantee_text
    from fedlabels.runs.session import build_session

    options = {**mode, "delta": DELTA, "noise_multiplier": SIGMA,
               **({"example_rate": RATE} if mode in [m for _, m in CASES] else {})}
    session = build_session(method, fed, as_models(MLP), rounds=ROUNDS, period=PERIOD,
                            seed=0, options=options)
    # as built, before round 1 (DP-FedCT's dpsgd set it in round 1 until 2026-11-30)
    assert session.server.ledger.calibrated_by == "given"
    assert session.server.result_extra()["privacy"]["calibrated_by"] == "given"
    session.server.run_round(0, InProcessGrid(session.clients, CommMeter()))
    assert session.server.ledger.calibrated_by == "given"
    result = fl.run(method, fed, model=MLP, rounds=ROUNDS, period=PERIOD, seed=0,
                    progress=False, options=options)
    assert result.extra["privacy"]["calibrated_by"] == "given"
    assert "σ given" in guarantee_text(result)
    calibrated = fl.run(method, fed, model=MLP, rounds=ROUNDS, period=PERIOD, seed=0,
                        progress=False, options={**options, "noise_multiplier": None,
                                                 "epsilon": 8.0})
    p = calibrated.extra["privacy"]
    assert p["calibrated_by"] == p["target"]["calibrated_by"] != "given"
    assert f"σ calibrated by {p['calibrated_by']}" in guarantee_text(calibrated)
    built = build_session(method, fed, as_models(MLP), rounds=ROUNDS, period=PERIOD, seed=0,
                          options={**options, "noise_multiplier": None, "epsilon": 8.0})
    assert built.server.ledger.calibrated_by == p["calibrated_by"]  # before round 1 too
