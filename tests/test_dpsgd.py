"""DP-SGD at the clients: accountant, per-example clipping, secret noise, DP-FedCT's dpsgd
mechanism and record-level DP-FedAvg (issue 19)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

import fedlabels as fl
from conftest import digits_with_sizes
from fedlabels.audit.canaries import epsilon_lower_bound_audit
from fedlabels.core import randomness
from fedlabels.core.errors import FedLabelsError
from fedlabels.learners import dpsgd as dpsgd_module
from fedlabels.learners import parse_model_spec
from fedlabels.learners.dpsgd import DPSGDConfig, clipped_gradient_sum, dpsgd_steps
from fedlabels.learners.torch_mlp import TorchMLPClassifier
from fedlabels.privacy.dpsgd_accounting import calibrate_dpsgd, dpsgd_epsilon

MLP = "mlp(hidden=8)"


@pytest.fixture(scope="module")
def fed() -> fl.Federation:
    """Unequal client sizes (40, 90, 60) on a small digits federation."""
    return digits_with_sizes((40, 90, 60), n_unlabeled=60, n_test=150)


# ------------------------------------------------------------------ accountant


@pytest.mark.parametrize("sigma, q, steps", [(1.0, 0.01, 1000), (0.8, 0.05, 200),
                                             (2.0, 0.1, 50)])
def test_accountant_matches_dp_accounting_and_opacus(sigma: float, q: float,
                                                     steps: int) -> None:
    import dp_accounting as dpa
    from dp_accounting.rdp import rdp_privacy_accountant
    from opacus.accountants import RDPAccountant

    ours = dpsgd_epsilon(sigma, q, steps, 1e-5, ("rdp",)).epsilon
    acc = rdp_privacy_accountant.RdpAccountant(
        neighboring_relation=dpa.NeighboringRelation.ADD_OR_REMOVE_ONE)
    acc.compose(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(sigma)), steps)
    assert ours == pytest.approx(acc.get_epsilon(1e-5), rel=1e-6)
    opacus = RDPAccountant()
    opacus.history = [(sigma, q, steps)]
    # opacus uses other RDP orders and a slightly looser RDP -> (ε, δ) conversion
    assert ours == pytest.approx(opacus.get_epsilon(1e-5), rel=0.1)


def test_reported_epsilon_is_the_tighter_of_pld_and_rdp() -> None:
    both = dpsgd_epsilon(2.0, 0.1, 50, 1e-5)
    assert set(both.by_accountant) == {"pld", "rdp"}
    assert both.epsilon == min(both.by_accountant.values())
    assert both.by_accountant["pld"] <= both.by_accountant["rdp"]  # PLD is tighter


def test_calibrated_sigma_reaches_the_target() -> None:
    """σ is calibrated to the reported (PLD) ε: within the target, 0.1 % less σ beyond it."""
    sigma = calibrate_dpsgd(4.0, 1e-5, 0.05, 300)
    reported = dpsgd_epsilon(sigma, 0.05, 300, 1e-5)
    assert reported.accountant == "pld"
    assert reported.epsilon == pytest.approx(4.0, rel=3e-3) and reported.epsilon <= 4.0
    assert dpsgd_epsilon(0.999 * sigma, 0.05, 300, 1e-5).epsilon > 4.0


# ------------------------------------------------------------------ clipping


def _mlp(seed: int = 0, n_features: int = 5) -> TorchMLPClassifier:
    return TorchMLPClassifier(hidden_layer_sizes=(7, 4), n_classes=3,
                              random_state=seed).initialise(n_features, 3)


def _per_example_grads(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor
                       ) -> list[list[torch.Tensor]]:
    """Oracle: one autograd pass per example."""
    out = []
    for i in range(len(y)):
        model.zero_grad()
        torch.nn.functional.cross_entropy(model(x[i:i + 1]), y[i:i + 1]).backward()
        out.append([p.grad.detach().clone() for p in model.parameters()])
    return out


def test_clipping_is_per_example() -> None:
    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.normal(size=(12, 5)).astype(np.float32))
    x[3] *= 50.0  # one outlier with a huge gradient
    y = torch.from_numpy(rng.integers(0, 3, 12))
    model, clip = _mlp().model_, 0.05
    grads = _per_example_grads(model, x, y)
    norms = [float(torch.sqrt(sum(g.pow(2).sum() for g in gs))) for gs in grads]
    summed, got_norms = clipped_gradient_sum(model, x, y, clip)
    np.testing.assert_allclose(got_norms.numpy(), norms, rtol=1e-4)
    expected = [sum(gs[k] * min(1.0, clip / n) for gs, n in zip(grads, norms, strict=True))
                for k in range(len(grads[0]))]
    for got, want in zip(summed, expected, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)
    # removing any one example moves the sum by at most C (it would not with batch clipping)
    for j in range(len(y)):
        keep = torch.tensor([i != j for i in range(len(y))])
        without, _ = clipped_gradient_sum(model, x[keep], y[keep], clip)
        diff = torch.sqrt(sum((a - b).pow(2).sum() for a, b in zip(summed, without,
                                                                   strict=True)))
        assert float(diff) <= clip * (1 + 1e-4)
    assert min(norms) > clip and max(norms) > 10 * clip  # every example was clipped


@pytest.mark.parametrize("closed_form", [True, False])
def test_a_finite_batch_on_the_cpu_is_summed_without_masks(monkeypatch: Any,
                                                           closed_form: bool) -> None:
    """The masks that keep a non-finite example out copy every layer's inputs (the closed
    form) or every per-example gradient (torch.func's, any network): on the CPU a batch of
    finite examples skips them (test_clipping_is_per_example and test_torch_networks check
    the sums), and one non-finite example brings them back."""
    calls = []

    class Counted:  # torch as the module sees it, its torch.where calls counted
        def __getattr__(self, name: str) -> Any:
            return getattr(torch, name)

        def where(self, *args: Any, **kwargs: Any) -> torch.Tensor:
            calls.append(1)
            return torch.where(*args, **kwargs)

    monkeypatch.setattr(dpsgd_module, "torch", Counted())
    summed_by = clipped_gradient_sum if closed_form else dpsgd_module._clipped_sum_func
    rng = np.random.default_rng(2)
    x = torch.from_numpy(rng.normal(size=(9, 5)).astype(np.float32))
    y = torch.from_numpy(rng.integers(0, 3, 9))
    model = _mlp().model_
    summed_by(model, x, y, 0.05)
    assert len(calls) == 1  # clip_scale's, over the norms alone
    x[4, 0], calls[:] = np.inf, []
    summed, _ = summed_by(model, x, y, 0.05)
    # closed form: b and a of each of the 3 linear layers; torch.func: each of 6 parameters
    assert len(calls) == 1 + 6
    keep = torch.arange(9) != 4
    without, _ = summed_by(model, x[keep], y[keep], 0.05)
    for got, want in zip(summed, without, strict=True):
        torch.testing.assert_close(got, want)


# ------------------------------------------------------------------ noise source


def _train(noise_rng: np.random.Generator) -> np.ndarray:
    rng = np.random.default_rng(1)
    X, y = rng.normal(size=(50, 5)), rng.integers(0, 3, 50)
    mlp = _mlp(seed=3)
    dpsgd_steps(mlp, X, y, 3, DPSGDConfig(1.0, 0.2, 1.0), noise_rng)
    return mlp.get_weights()


def test_noise_comes_from_the_secret_source_not_the_seed() -> None:
    assert not randomness.is_reproducible()
    a, b = _train(randomness.numpy_generator()), _train(randomness.numpy_generator())
    assert not np.array_equal(a, b)  # same seed, same data: only the noise differs
    with randomness.reproducible(5):
        c = _train(randomness.numpy_generator())
    with randomness.reproducible(5):
        d = _train(randomness.numpy_generator())
    np.testing.assert_array_equal(c, d)


def test_a_step_adds_noise_of_std_sigma_c_over_q_n_to_a_poisson_sample(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """What a step hands Adam: the clipped sum of a Poisson sample at rate q plus
    N(0, σ²C²) on every coordinate, over the fixed q·n (never the realised sample's size).
    At σ = 10⁴ the noise is all but the whole gradient, so each step's gradient·q·n/C has
    std σ over its 771 coordinates (within 5 of its s.d. of 2.5 %, however many records
    the step sampled); over 200 steps the mean sample size is q·n within 5 s.d."""
    grads: list[np.ndarray] = []
    sizes: list[int] = []
    adam, clipped_sum = dpsgd_module.adam_step, dpsgd_module.clipped_gradient_sum

    def spy_adam(opt: Any) -> None:
        grads.append(np.concatenate([p.grad.detach().numpy().ravel()
                                     for g in opt.param_groups for p in g["params"]]))
        adam(opt)

    def spy_sum(model: Any, xb: Any, yb: Any, clip: float) -> Any:
        sizes.append(len(yb))
        return clipped_sum(model, xb, yb, clip)

    monkeypatch.setattr(dpsgd_module, "adam_step", spy_adam)
    monkeypatch.setattr(dpsgd_module, "clipped_gradient_sum", spy_sum)
    rng = np.random.default_rng(4)
    n, clip = 100, 0.5
    X, y = rng.normal(size=(n, 5)), rng.integers(0, 3, n)
    mlp = TorchMLPClassifier(hidden_layer_sizes=(32, 16), n_classes=3,
                             random_state=3).initialise(5, 3)
    sigma, q = 1e4, 0.05
    dpsgd_steps(mlp, X, y, 50, DPSGDConfig(sigma, q, clip), rng)
    scaled = np.stack(grads) * q * n / clip  # (steps, coordinates)
    assert scaled.shape == (50, 771) and len(set(sizes)) > 3  # samples of several sizes
    assert np.all(np.abs(scaled.std(axis=1) / sigma - 1) < 5 / np.sqrt(2 * 771))
    sizes.clear()
    dpsgd_steps(mlp, X, y, 200, DPSGDConfig(1.0, 0.3, clip), rng)
    assert abs(np.mean(sizes) - 0.3 * n) < 5 * np.sqrt(n * 0.3 * 0.7 / len(sizes))


# ------------------------------------------------------------------ the methods


class _StepCounter:
    """Counts the DP-SGD steps each learner actually takes."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.steps: dict[int, int] = {}
        original = dpsgd_module.dpsgd_steps

        def spy(mlp: Any, *args: Any, **kwargs: Any) -> int:
            taken = original(mlp, *args, **kwargs)
            self.steps[id(mlp)] = self.steps.get(id(mlp), 0) + taken
            return taken

        monkeypatch.setattr(dpsgd_module, "dpsgd_steps", spy)


@pytest.mark.parametrize("method, options, run_kw", [
    ("dp-fedct", {"mechanism": "dpsgd", "epsilon": 4.0, "example_rate": 0.1},
     {"participation": 2}),
    ("dp-fedavg", {"level": "record", "epsilon": 4.0, "example_rate": 0.1,
                   "sample_rate": 0.6}, {}),
])
def test_reported_epsilon_is_the_accountants_for_the_steps_taken(
        fed: fl.Federation, monkeypatch: pytest.MonkeyPatch, method: str,
        options: dict[str, Any], run_kw: dict[str, Any]) -> None:
    counter = _StepCounter(monkeypatch)
    result = fl.run(method, fed, model=MLP, rounds=3, period=4, seed=2, options=options,
                    **run_kw)
    p = result.extra["privacy"]
    taken = sorted(counter.steps.values())
    assert sorted(p["steps_per_client"].values()) == taken
    participations = (3 * 2 if method == "dp-fedct" else sum(p["sampled_clients_per_round"]))
    assert sum(taken) == 4 * participations  # partial participation: only who took part
    for cid, k in p["steps_per_client"].items():
        want = dpsgd_epsilon(p["noise_multiplier"], 0.1, k, 1e-5).epsilon
        assert p["epsilon_per_client"][cid] == pytest.approx(want, rel=1e-9)
    assert p["epsilon"] == pytest.approx(max(p["epsilon_per_client"].values()))
    assert p["epsilon"] <= 4.0 * (1 + 1e-6)
    assert p["guarantee"] == "formal" and "record" in p["neighbouring"]
    assert "server" in p["guarantee_against"]


def test_clients_do_not_account_each_round_with_pld(fed: fl.Federation,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A client's ledger has no target, yet its charge asked the tight (PLD) accountant
    for the steps so far every round (seconds a round, the bound thrown away); it needs no
    bound then, and the result's ε (PLD, the steps taken) is accounted once, at the end.
    The server's budget check asks PLD only where RDP's bound of the steps so far is over
    the target (σ is calibrated to PLD's ε): its last rounds, never the first's 4 steps."""
    from fedlabels.privacy import dpsgd_accounting

    asked: list[int] = []
    original = dpsgd_accounting.dpsgd_epsilon

    def spy(sigma: float, q: float, steps: int, delta: float,
            accountants: tuple[str, ...] = dpsgd_accounting.DPSGD_ACCOUNTANTS) -> Any:
        if "pld" in accountants:
            asked.append(steps)
        return original(sigma, q, steps, delta, accountants)

    monkeypatch.setattr(dpsgd_accounting, "dpsgd_epsilon", spy)
    result = fl.run("dp-fedct", fed, model=MLP, rounds=3, period=4, seed=2,
                    options={"mechanism": "dpsgd", "epsilon": 4.0, "example_rate": 0.1})
    p = result.extra["privacy"]
    assert set(p["steps_per_client"].values()) == {12} and 12 in asked
    assert set(asked) <= {8, 12}
    assert p["accountant"] == "pld" and p["epsilon"] <= 4.0 * (1 + 1e-6)


@pytest.mark.parametrize("method, options, match", [
    ("dp-fedct", {"mechanism": "dpsgd", "epsilon_per_round": 1.0}, "needs the total"),
    ("dp-fedct", {"mechanism": "dpsgd", "epsilon": 1.0, "sensitivity": 4}, "do not apply"),
    ("dp-fedct", {"epsilon": 1.0, "example_clip": 2.0}, "only with --mechanism dpsgd"),
    ("dp-fedavg", {"level": "record", "epsilon": 1.0, "clip": 2.0}, "apply only with level"),
    ("dp-fedavg", {"epsilon": 1.0, "example_rate": 0.1}, "only with level record"),
])
def test_inapplicable_options_are_errors(fed: fl.Federation, method: str,
                                         options: dict[str, Any], match: str) -> None:
    with pytest.raises(FedLabelsError, match=match):
        fl.run(method, fed, model=MLP, rounds=1, period=1, seed=0, options=options)


def test_tree_learners_are_refused(fed: fl.Federation) -> None:
    with pytest.raises(FedLabelsError, match="torch MLP"):
        fl.run("dp-fedct", fed, model="dt", rounds=1, period=1, seed=0,
               options={"mechanism": "dpsgd", "epsilon": 1.0})


@pytest.mark.parametrize("method, options", [
    ("dp-fedct", {"mechanism": "dpsgd", "epsilon": 1.0, "example_rate": 0.25}),
    ("dp-fedavg", {"level": "record", "epsilon": 1.0, "example_rate": 0.25}),
])
def test_canary_audit_never_exceeds_the_claim(fed: fl.Federation, method: str,
                                              options: dict[str, Any]) -> None:
    out = epsilon_lower_bound_audit(method, fed, parse_model_spec(MLP), rounds=2, period=5,
                                    seed=1, n_canaries=50, options=options)
    assert out["noise"] == "OS CSPRNG"
    assert out["claimed_epsilon"] <= 1.0 * (1 + 1e-6)
    assert out["epsilon_lower_bound"] <= out["claimed_epsilon"]
    assert not out["falsifies_claim"]


@pytest.mark.parametrize("shortfall, refused", [(0.005, False), (0.02, True)])
def test_a_server_sigma_a_search_step_below_the_clients_is_topped_up_by_the_client(
        fed: fl.Federation, monkeypatch: pytest.MonkeyPatch, shortfall: float,
        refused: bool) -> None:
    """The same PLD calibration on another machine may end a search step (0.1 %) below the
    client's: the client then adds its own σ and charges its ledger for it (not the
    server's), so its guarantee holds; a σ further below is a deviating server, refused."""
    from conftest import keep_client_roles
    from fedlabels.methods.fedavg import dp_fedavg_record

    roles = keep_client_roles(monkeypatch, "dp-fedavg")
    original = dp_fedavg_record.dpsgd_round_config
    monkeypatch.setattr(dp_fedavg_record, "dpsgd_round_config",
                        lambda sigma, options: original(sigma * (1 - shortfall), options))
    options = {"level": "record", "epsilon": 4.0, "example_rate": 0.2, "sample_rate": 1.0}
    if refused:
        with pytest.raises(FedLabelsError, match="below the σ"):
            fl.run("dp-fedavg", fed, model=MLP, rounds=2, period=2, seed=0, options=options)
        return
    fl.run("dp-fedavg", fed, model=MLP, rounds=2, period=2, seed=0, options=options)
    for cid, role in roles.items():
        own = role.own_sigma()
        assert role.ledger.events, cid
        assert {ev.noise_multiplier for ev in role.ledger.events} == {own}, cid


@pytest.mark.parametrize("batch_clients", ["off", "on"])
@pytest.mark.parametrize("change, match", [
    ({"example_rate": 0.9}, "example_rate"),
    ({"example_clip": 50.0}, "example_clip"),
    ({"noise_multiplier": 0.01}, "below the σ"),
])
def test_record_level_dp_fedavg_clients_refuse_a_server_that_lowers_their_protection(
        fed: fl.Federation, monkeypatch: pytest.MonkeyPatch, change: dict[str, Any],
        match: str, batch_clients: str) -> None:
    """The DP-SGD parameters a client uses are checked against its own options (the same
    check as DP-FedCT's dpsgd clients: ``DPSGDClient.check_dpsgd_round``), also when the
    clients take their DP-SGD steps together (the check runs before a step is submitted,
    and no step with the server's parameters is taken)."""
    from fedlabels.learners import batched_dpsgd
    from fedlabels.methods.fedavg import dp_fedavg_record

    stacked: list[int] = []
    group = batched_dpsgd._dpsgd_group
    monkeypatch.setattr(batched_dpsgd, "_dpsgd_group",
                        lambda jobs, *rest: (stacked.append(len(jobs)), group(jobs, *rest)))
    original = dp_fedavg_record.dpsgd_round_config
    monkeypatch.setattr(dp_fedavg_record, "dpsgd_round_config",
                        lambda sigma, options: {**original(sigma, options), **change})
    with pytest.raises(FedLabelsError, match=match):
        fl.run("dp-fedavg", fed, model=MLP, rounds=2, period=2, seed=0,
               batch_clients=batch_clients,
               options={"level": "record", "epsilon": 4.0, "example_rate": 0.2,
                        "sample_rate": 1.0})
    assert stacked == []  # no DP-SGD step was taken with the server's parameters


@pytest.mark.parametrize("clip", [0.0, -1.0])
def test_a_clip_that_is_not_positive_is_refused(clip: float) -> None:
    with pytest.raises(FedLabelsError, match="clipping norm must be > 0"):
        DPSGDConfig(noise_multiplier=1.0, sample_rate=0.1, clip=clip)


def test_steps_taken_are_counted_and_a_negative_count_is_refused() -> None:
    """The learner counts every DP-SGD step (``steps_``, what a state carries); -1 steps
    were taken as none and counted as -1."""
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((30, 5)).astype(np.float32), np.arange(30) % 3
    m = TorchMLPClassifier(hidden_layer_sizes=(4,), n_classes=3, random_state=0)
    config = DPSGDConfig(noise_multiplier=1.0, sample_rate=0.3, clip=1.0)
    secret = randomness.numpy_generator()
    assert dpsgd_steps(m, X, y, 3, config, secret) == 3
    assert m.steps_ == 3
    with pytest.raises(FedLabelsError, match="integer >= 0"):
        dpsgd_steps(m, X, y, -1, config, secret)
    assert m.steps_ == 3
