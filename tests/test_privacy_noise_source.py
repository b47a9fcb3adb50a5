"""Issue 12, defects 1, 2 and 6: secret DP noise, enforced budgets, ``--epsilon`` = total.

* **Attack replay (defect 1).** A server that knows the run seed (it is in the result, and a
  Flower server hands it to the clients) and the messages it received tries to reproduce
  each client's DP-FedCT XOR noise as the old code drew it (``default_rng([client_seed,
  0xD9F])``), DP-FedAvg's Poisson sample and Gaussian noise (``default_rng([server_seed,
  0xFEDA])``), and the GNMax / Laplace noise of DP-PATE and FREDY. With the noise drawn from
  OS entropy, reconstructions fail and two runs with the same seed release different noise.
* ``insecure_reproducible_noise`` makes runs repeat bit for bit and stamps the result
  ``privacy.guarantee = "none"``; Flower deployments reject it.
* **Budgets (defect 2).** A server whose plan is altered (more rounds or releases than it was
  calibrated for) refuses the release that would exceed the target.
* **Total ε (defect 6).** ``epsilon`` is the run's total budget for every DP method.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import fedlabels as fl
from fedlabels.comm import Message
from fedlabels.core.errors import FedLabelsError
from fedlabels.engines.inprocess import InProcessGrid
from fedlabels.learners import as_models
from fedlabels.method.base import Settings
from fedlabels.methods.fedavg.dp_fedavg import DPFedAvgServer
from fedlabels.methods.fedct.dp_fedct import DPFedCTOptions, DPFedCTServer
from fedlabels.privacy import mechanisms
from fedlabels.privacy.mechanisms import one_hot, pack_rows
from fedlabels.runs.config import RunConfig
from fedlabels.runs.loop import CommMeter, derive_seeds, plan_run, run_rounds, uses_iterative
from fedlabels.runs.session import build_session

SEED = 3
_XOR_RELEASE = mechanisms.xor_release  # the real mechanism, wrapped by each Recorder


@pytest.fixture(scope="module")
def fed() -> fl.Federation:
    return fl.load_federation("breast_cancer", clients=3, seed=SEED)


class Recorder:
    """Records every XOR release: (client's true one-hot rows, flip probability, sent)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[tuple[np.ndarray, float, np.ndarray]] = []
        original = _XOR_RELEASE

        def spy(bits: np.ndarray, flip_prob: float, rng: np.random.Generator) -> np.ndarray:
            out = original(bits, flip_prob, rng)
            self.calls.append((np.array(bits), flip_prob, out))
            return out

        monkeypatch.setattr(mechanisms, "xor_release", spy)


def _dp_fedct(fed: fl.Federation, monkeypatch: pytest.MonkeyPatch, **kwargs: Any
              ) -> tuple[fl.RunResult, Recorder]:
    recorder = Recorder(monkeypatch)
    result = fl.run("dp-fedct", fed, model="dt", rounds=2, seed=SEED,
                    options={"epsilon_per_round": 4.0, "sensitivity": 4}, **kwargs)
    return result, recorder


# ------------------------------------------------------------------ defect 1: attack replay


def test_server_knowing_the_seed_cannot_reproduce_dp_fedct_noise(
        fed: fl.Federation, monkeypatch: pytest.MonkeyPatch) -> None:
    result, rec = _dp_fedct(fed, monkeypatch)
    m, rounds = fed.n_clients, 2
    assert len(rec.calls) == m * rounds  # clients release in cid order, round by round
    client_seeds, server_seed = derive_seeds(result.seed, m)
    # the old code: each client's noise stream default_rng([client_seed, 0xD9F]); and any
    # other generator a server could derive from the seeds it knows
    guesses = {cid: [np.random.default_rng([s, 0xD9F]), np.random.default_rng(s),
                     np.random.default_rng([s]), np.random.default_rng([server_seed, s])]
               for cid, s in enumerate(client_seeds)}
    for i, (truth, f, sent) in enumerate(rec.calls):
        assert 0.0 < f < 0.5
        for rng in guesses[i % m]:
            noise = (rng.random(sent.shape) < f).astype(np.uint8)
            recovered = np.bitwise_xor(sent, noise)
            # on the old code the first guess recovered every row exactly
            assert np.mean(np.all(recovered == truth, axis=1)) < 0.9


def test_same_seed_gives_different_dp_fedct_releases(
        fed: fl.Federation, monkeypatch: pytest.MonkeyPatch) -> None:
    _, first = _dp_fedct(fed, monkeypatch)
    _, second = _dp_fedct(fed, monkeypatch)
    # the same seed gives the same training (the clients' true labels agree) ...
    np.testing.assert_array_equal(first.calls[0][0], second.calls[0][0])
    # ... but every release carries fresh noise
    for a, b in zip(first.calls, second.calls, strict=True):
        assert not np.array_equal(a[2], b[2])


def _fedavg_server(rounds: int, epsilon: float | None = None, **options: Any
                   ) -> tuple[DPFedAvgServer, int]:
    opts = {"noise_multiplier": 1.0} if epsilon is None else {"epsilon": epsilon}
    plan = plan_run("dp-fedavg", n_roles=4, n_classes=2, n_features=3, rounds=rounds,
                    period=1, seed=SEED, models=as_models("mlp(hidden=2)"),
                    options={**opts, **options})
    initial = np.zeros(8, dtype=np.float32)
    return DPFedAvgServer(initial, plan.settings), plan.server_seed


class ZeroUpdates:
    """Every contacted client returns a zero update; ``contacted`` keeps who was asked."""

    def __init__(self, dim: int, m: int = 4) -> None:
        self.dim, self.m = dim, m
        self.contacted: list[list[int]] = []

    @property
    def client_ids(self) -> list[int]:
        return list(range(self.m))

    def exchange(self, messages: dict[int, Message], rnd: int) -> dict[int, Message]:
        self.contacted.append(sorted(messages))
        return {c: Message("dpfedavg.update", arrays={"update": np.zeros(self.dim, np.float32)},
                           config={"norm": 0.0}) for c in messages}


def test_server_seed_does_not_give_dp_fedavg_noise_or_sample() -> None:
    rounds = 12
    server, server_seed = _fedavg_server(rounds, sample_rate=0.5, clip=1.0)
    grid = ZeroUpdates(8)
    old = np.random.default_rng([server_seed, 0xFEDA])  # the old code's stream
    sample_matches, noise_close = 0, 0
    for rnd in range(rounds):
        before, asked = server.weights.copy(), len(grid.contacted)
        server.run_round(rnd, grid)
        contacted = grid.contacted[-1] if len(grid.contacted) > asked else []
        picked = [c for c, p in enumerate(old.random(4) < 0.5) if p]
        noise = old.normal(0.0, 1.0, size=8)
        sample_matches += contacted == picked
        observed = (server.weights - before) * (0.5 * 4)  # zero updates: the noise / (q·M)
        noise_close += bool(np.allclose(observed, noise, atol=1e-4))
    assert noise_close == 0  # the old code: every round's noise reproduced exactly
    assert sample_matches < rounds  # the old code: every round's sample reproduced


def test_same_seed_gives_different_dp_fedavg_noise() -> None:
    (a, _), (b, _) = _fedavg_server(1), _fedavg_server(1)
    a.run_round(0, ZeroUpdates(8))
    b.run_round(0, ZeroUpdates(8))
    assert not np.allclose(a.weights, b.weights)


def _roles_run(fed: fl.Federation, method: str, options: dict, rounds: int = 1) -> Any:
    """Run the roles in process and return the server (to read its released labels)."""
    session = build_session(method, fed, as_models("mlp(hidden=8)"), rounds=rounds, period=5,
                            seed=SEED, options=options)
    server, clients, learners = session.server, session.clients, session.learners
    meter = CommMeter()
    grid = InProcessGrid(clients, meter)
    run_rounds(server, grid, meter, rounds=rounds, period=5, eval_every=1,
               iterative=uses_iterative(learners), all_cids=grid.client_ids)
    return server


@pytest.mark.parametrize("method, options", [
    ("dp-pate", {"queries": 60, "teacher_steps": 5, "noise_sigma": 2.0}),
    ("fredy", {"queries": 60, "teacher_rounds": 2, "epsilon_per_query": 0.5}),
])
def test_same_seed_gives_different_vote_noise(fed: fl.Federation, method: str,
                                              options: dict) -> None:
    first, second = _roles_run(fed, method, options), _roles_run(fed, method, options)
    np.testing.assert_array_equal(first.queries, second.queries)  # the seeded query choice
    np.testing.assert_array_equal(first.counts, second.counts)  # the same teachers' votes
    assert not np.array_equal(first.labels, second.labels)  # fresh noise on the same votes


# ------------------------------------------------------------------ insecure reproducible


def test_insecure_reproducible_noise_repeats_and_says_no_guarantee(
        fed: fl.Federation, monkeypatch: pytest.MonkeyPatch) -> None:
    first, rec1 = _dp_fedct(fed, monkeypatch, insecure_reproducible_noise=True)
    second, rec2 = _dp_fedct(fed, monkeypatch, insecure_reproducible_noise=True)
    for a, b in zip(rec1.calls, rec2.calls, strict=True):
        np.testing.assert_array_equal(a[2], b[2])
    assert [r.accuracies for r in first.rounds] == [r.accuracies for r in second.rounds]
    for res in (first, second):
        p = res.extra["privacy"]
        assert p["guarantee"] == "none" and "run seed" in p["reason"]
        assert res.config["insecure_reproducible_noise"] is True
    secure = _dp_fedct(fed, monkeypatch)[0]
    assert secure.extra["privacy"]["guarantee"] != "none"
    assert secure.config["insecure_reproducible_noise"] is False


def test_insecure_flag_in_cli_toml_and_rejected_by_flower(tmp_path: Path) -> None:
    from fedlabels.cli.run_options import add_run_options, config_from_args
    from fedlabels.engines.flower.prepare import prepare_run
    from fedlabels.engines.flower.spec import deploy_plan

    parser = argparse.ArgumentParser()
    add_run_options(parser)
    base = ["--method", "dp-fedct", "--epsilon", "4"]
    assert config_from_args(parser.parse_args(base)).insecure_reproducible_noise is False
    cfg = config_from_args(parser.parse_args([*base, "--insecure-reproducible-noise"]))
    assert cfg.insecure_reproducible_noise is True
    toml = tmp_path / "run.toml"
    toml.write_text('method = "dp-fedct"\ninsecure_reproducible_noise = true\n'
                    '[options]\nepsilon = 4.0\n')
    assert config_from_args(parser.parse_args(["--config", str(toml)])) \
        .insecure_reproducible_noise is True
    with pytest.raises(FedLabelsError, match="true or false"):
        RunConfig(insecure_reproducible_noise="yes")  # type: ignore[arg-type]
    with pytest.raises(FedLabelsError, match="simulator only"):
        prepare_run(cfg, tmp_path / "sites")
    with pytest.raises(FedLabelsError, match="simulator only"):
        deploy_plan(cfg, 2, 30)


# ------------------------------------------------------------------ defect 2: budgets


def _bits_grid(n_public: int, m: int = 3) -> Any:
    class Grid:
        def __init__(self) -> None:
            self.client_ids = list(range(m))
            self.sent: list[dict[int, Message]] = []

        def exchange(self, messages: dict[int, Message], rnd: int) -> dict[int, Message]:
            self.sent.append(dict(messages))
            bits = pack_rows(one_hot(np.zeros(n_public, dtype=np.int64), 2))
            return {c: Message("dpfedct.bits", arrays={"bits": bits}) for c in messages}

    return Grid()


def test_dp_fedct_server_refuses_the_release_beyond_its_target() -> None:
    n_public = 20
    settings = Settings(n_classes=2, n_features=3, n_clients=3, rounds=2, period=1,
                        options=DPFedCTOptions(epsilon=2.0, sensitivity=4))
    server = DPFedCTServer(settings, n_public, None)
    grid = _bits_grid(n_public)
    server.run_round(0, grid)
    server.run_round(1, grid)  # the planned rounds fit the target
    with pytest.raises(FedLabelsError, match=r"budget exceeded.*budget ε = 2") as err:
        server.run_round(2, grid)  # a round more than calibrated for: refused
    assert "has spent" in str(err.value) and "2 release(s)" in str(err.value)
    assert len(grid.sent) == 2  # the third training request was never sent
    p = server.result_extra()["privacy"]
    assert p["target"]["epsilon"] == 2.0 and p["target"]["released"] == 2
    assert p["epsilon"] <= 2.0 + 1e-6


def test_dp_fedct_client_refuses_a_release_beyond_its_budget() -> None:
    from fedlabels.data import ClientData
    from fedlabels.learners import build_learner, parse_model_spec
    from fedlabels.methods.fedct.dp_fedct import DPFedCTClient

    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 3))
    settings = Settings(n_classes=2, n_features=3, n_clients=3, rounds=2, period=1,
                        options=DPFedCTOptions(epsilon=2.0, sensitivity=4))

    def client() -> DPFedCTClient:
        learner = build_learner(parse_model_spec("dt")[0], n_classes=2, random_state=0)
        return DPFedCTClient(0, ClientData(X, (X[:, 0] > 0).astype(np.int64)), learner,
                             settings, rng.normal(size=(20, 3)), X[:5], np.zeros(5, np.int64),
                             seed=0)

    message = Message("fedct.train", config={"round": 0, "steps": 1, "mechanism": "xor",
                                             "flip_probability": 0.45})  # >= its own f
    live = client()
    live.handle(message)
    restored = client()
    restored.load_state_dict(live.state_dict())  # the count is state: it survives a restore
    restored.handle(message)
    with pytest.raises(FedLabelsError, match="plan 2 releases"):
        restored.handle(message)  # a server asking for a third release is refused


def test_dp_fedavg_server_refuses_the_round_beyond_its_target() -> None:
    server, _ = _fedavg_server(2, epsilon=3.0)
    grid = ZeroUpdates(8)
    server.run_round(0, grid)
    server.run_round(1, grid)
    with pytest.raises(FedLabelsError, match="budget exceeded"):
        server.run_round(2, grid)
    assert len(grid.contacted) == 2
    p = server.result_extra()["privacy"]
    assert p["target"] == {**p["target"], "epsilon": 3.0, "released": 2, "planned": 2}
    assert p["epsilon"] <= 3.0 * (1 + 1e-6)


def test_a_plan_over_the_target_refuses_to_start(monkeypatch: pytest.MonkeyPatch) -> None:
    from fedlabels.privacy import gaussian_calibration as calibration

    # a calibration that returned too little noise for the planned rounds
    monkeypatch.setattr(calibration, "calibrate_gaussian",
                        lambda *a, **k: calibration.GaussianCalibration(0.5, "rdp"))
    with pytest.raises(FedLabelsError, match="the plan of 5 round"):
        _fedavg_server(5, epsilon=1.0)


@pytest.mark.parametrize("method, options", [
    ("dp-pate", {"queries": 40, "teacher_steps": 5, "epsilon": 30.0}),
    ("fredy", {"queries": 40, "teacher_rounds": 2, "epsilon": 30.0}),
])
def test_vote_servers_refuse_a_second_release(fed: fl.Federation, method: str,
                                              options: dict) -> None:
    server = _roles_run(fed, method, options)
    assert server.privacy["target"]["epsilon"] == 30.0
    assert server.privacy["target"]["released"] == 40
    assert server.privacy["epsilon"] <= 30.0 * (1 + 1e-6)
    with pytest.raises(FedLabelsError, match="budget exceeded"):
        server.aggregate(server.counts)  # the same queries answered again


# ------------------------------------------------------------------ defect 6: total ε


def test_fredy_epsilon_is_the_total_over_all_queries(fed: fl.Federation) -> None:
    server = _roles_run(fed, "fredy", {"queries": 40, "teacher_rounds": 2, "epsilon": 30.0})
    p = server.privacy
    n = fed.n_clients
    assert p["l1_sensitivity"] == 2 * n  # calibrated with the formal sensitivity
    calibrated = min(p["epsilon_by_accountant"][a] for a in ("basic", "optimal", "rdp"))
    assert calibrated == pytest.approx(30.0, rel=1e-4)
    assert p["epsilon"] <= 30.0 * (1 + 1e-6)
    # the nominal per-query ε of the paper's reading is 2 / scale
    assert p["epsilon_per_query_nominal"] == pytest.approx(2.0 / p["laplace_scale"])


def test_dp_pate_epsilon_is_the_recorded_total_target(fed: fl.Federation) -> None:
    server = _roles_run(fed, "dp-pate", {"queries": 40, "teacher_steps": 5, "epsilon": 20.0})
    assert server.privacy["epsilon"] == pytest.approx(20.0, rel=1e-3)
    assert server.privacy["target"]["unit"] == "query"
