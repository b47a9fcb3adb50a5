"""DP-FedAvg with ``noise="discrete"``: integer payloads measured from the serialized messages,
every release on the grid, the server's and the client's refusals, the one-line errors of
inapplicable options, reproducible noise and resume (the sampler and the accounting:
tests/test_discrete_gaussian.py)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import fedlabels as fl
from fedlabels.comm import Message
from fedlabels.core.errors import FedLabelsError, ParameterRefusal
from fedlabels.core.randomness import reproducible
from fedlabels.method.base import Settings
from fedlabels.methods.fedavg.dp_fedavg import (
    DPFedAvgClient,
    DPFedAvgOptions,
    DPFedAvgServer,
)
from fedlabels.privacy.discrete_accounting import (
    calibrate_discrete_noise_multiplier,
    discrete_gaussian_epsilon,
)
from fedlabels.privacy.discrete_gaussian import (
    default_grid,
    encode_update,
    integer_sensitivity,
)


class IntegerUpdates:
    """A grid whose clients reply with fixed integer updates."""

    def __init__(self, updates: dict[int, np.ndarray]) -> None:
        self.updates = updates

    @property
    def client_ids(self) -> list[int]:
        return sorted(self.updates)

    def exchange(self, messages: dict[int, Message], rnd: int) -> dict[int, Message]:
        return {cid: Message("dpfedavg.update", arrays={"update": self.updates[cid]},
                             config={"norm": 0.0}) for cid in messages}


def _server(m: int, d: int, **options: Any) -> DPFedAvgServer:
    opts = DPFedAvgOptions(noise="discrete", **options)
    settings = Settings(n_classes=2, n_features=d, n_clients=m, rounds=3, period=1,
                        options=opts)
    return DPFedAvgServer(np.zeros(d, dtype=np.float32), settings)


def test_every_released_update_is_grid_times_an_integer_over_expected() -> None:
    m, d, lr = 4, 3_000, 0.5
    srv = _server(m, d, noise_multiplier=2.0, clip=0.3, sample_rate=0.5, server_lr=lr)
    assert srv.grid is not None and srv.sensitivity is not None
    rng = np.random.default_rng(1)
    updates = {cid: encode_update(rng.standard_normal(d).astype(np.float32), 0.3, srv.grid)[0]
               for cid in range(m)}
    for rnd in range(3):
        before = srv.weights.astype(np.float64)
        srv.run_round(rnd, IntegerUpdates(updates))  # type: ignore[arg-type]
        units = (srv.weights.astype(np.float64) - before) * (0.5 * m) / (lr * srv.grid)
        # integers up to float32 rounding of the weights (|w| ~ 1, ulp ~ 1e-7)
        assert np.max(np.abs(units - np.rint(units))) < 1e-2
        # the noise is σΔ in grid units: the released integers spread accordingly
        assert np.std(np.rint(units)) > 0.5 * 2.0 * srv.sensitivity
    assert [type(ev).__name__ for ev in srv.events] == ["DiscreteGaussianEvent"] * 3


def test_server_drops_an_update_beyond_its_sensitivity_and_refuses_floats() -> None:
    d = 400
    srv = _server(2, d, noise_multiplier=1e-6, clip=1.0)  # noise std 8e-4 grid units: 0
    assert srv.sensitivity is not None and srv.grid is not None
    too_big = np.zeros(d, dtype=np.int64)
    too_big[0] = math.floor(srv.sensitivity) + 1
    fine = np.zeros(d, dtype=np.int16)
    fine[1:4] = (5, -7, 300)
    metrics = srv.run_round(0, IntegerUpdates({0: too_big, 1: fine}))  # type: ignore[arg-type]
    assert metrics["dropped_updates"] == 1.0
    # only the update within Δ reached the model: γ·z/(qM), to float32 rounding
    np.testing.assert_allclose(srv.weights, srv.grid * fine / 2, rtol=1e-6, atol=0)
    floats = np.zeros(d, dtype=np.float32)
    with pytest.raises(FedLabelsError, match="not an integer"):
        srv.run_round(1, IntegerUpdates({0: floats, 1: floats}))  # type: ignore[arg-type]


def _client(**options: Any) -> DPFedAvgClient:
    opts = DPFedAvgOptions(noise_multiplier=1.0, **options)
    settings = Settings(n_classes=2, n_features=4, n_clients=1, rounds=1, period=1,
                        options=opts)
    return DPFedAvgClient(0, None, None, settings, None, np.zeros((1, 4)),  # type: ignore[arg-type]
                          np.zeros(1))


def test_client_refuses_a_grid_or_noise_other_than_its_own() -> None:
    weights = np.zeros(50, dtype=np.float32)
    own = default_grid(1.0, 50)
    client = _client(noise="discrete")
    message = Message("dpfedavg.train", arrays={"weights": weights},
                      config={"round": 0, "steps": 1, "clip": 1.0, "noise": "discrete",
                              "grid": own * 2})
    with pytest.raises(ParameterRefusal, match="grid"):
        client.train_update(message)
    message.config["noise"] = "continuous"
    with pytest.raises(ParameterRefusal, match="noise"):
        client.train_update(message)
    with pytest.raises(ParameterRefusal, match="noise"):
        _client(grid=None).train_update(Message(
            "dpfedavg.train", arrays={"weights": weights},
            config={"round": 0, "steps": 1, "clip": 1.0, "noise": "discrete", "grid": own}))


@pytest.mark.parametrize(("options", "match"), [
    ({"noise_multiplier": 1.0, "grid": 0.01}, "grid applies only with noise discrete"),
    ({"noise_multiplier": 1.0, "noise": "discrete", "accountant": "pld"}, "use accountant rdp"),
    ({"noise_multiplier": 1.0, "noise": "discrete", "accountant": "analytic"},
     "use accountant rdp"),
    ({"epsilon": 4.0, "level": "record", "noise": "discrete"}, "apply only with level client"),
    ({"noise_multiplier": 1.0, "noise": "gaussian"}, "noise"),
])
def test_inapplicable_combinations_are_one_line_errors(options: dict[str, Any],
                                                       match: str) -> None:
    with pytest.raises(FedLabelsError, match=match):
        DPFedAvgOptions.from_mapping(options, "dp-fedavg")


@pytest.fixture(scope="module")
def fed() -> fl.Federation:
    return fl.load_federation("breast_cancer", clients=3, seed=0)


@pytest.mark.filterwarnings("ignore::fedlabels.core.errors.RunCaveatWarning")
def test_a_discrete_run_completes_with_integer_payloads(fed: fl.Federation) -> None:
    common: dict[str, Any] = {"model": "mlp(hidden=8)", "rounds": 2, "seed": 0}
    disc = fl.run("dp-fedavg", fed, options={"noise": "discrete", "noise_multiplier": 1.0,
                                             "sample_rate": 0.5}, **common)
    cont = fl.run("dp-fedavg", fed, options={"noise_multiplier": 1.0, "sample_rate": 0.5},
                  **common)
    p = disc.extra["privacy"]
    d = 30 * 8 + 8 + 8 * 2 + 2
    assert p["noise"] == "discrete" and p["grid"] == default_grid(1.0, d)
    assert p["sensitivity"]["value"] == integer_sensitivity(1.0, p["grid"], d)
    assert p["accountant"] == "rdp" and "discrete Gaussian" in p["mechanism"]
    assert p["epsilon"] == discrete_gaussian_epsilon(1.0, 0.5, 2, 1e-5)
    assert "client" in p["neighbouring"] and "not the server" in p["threat_model"]
    # measured from the serialized payloads: int16 coordinates where float32 were sent
    up = [b for rec in disc.rounds for b in rec.bytes_up if b > 0]
    cont_up = [b for rec in cont.rounds for b in rec.bytes_up if b > 0]
    assert up and cont_up
    assert abs((max(cont_up) - max(up)) - 2 * d) <= 16


@pytest.mark.filterwarnings("ignore::fedlabels.core.errors.RunCaveatWarning")
def test_reproducible_noise_mode_repeats_a_discrete_run(fed: fl.Federation) -> None:
    runs = [fl.run("dp-fedavg", fed, model="mlp(hidden=8)", rounds=2, seed=0,
                   insecure_reproducible_noise=True,
                   options={"noise": "discrete", "epsilon": 8.0}) for _ in range(2)]
    assert runs[0].extra["privacy"]["guarantee"] == "none"
    assert runs[0].extra["privacy"] == runs[1].extra["privacy"]
    for m1, m2 in zip(runs[0].client_models, runs[1].client_models, strict=True):
        np.testing.assert_array_equal(m1.predict_proba(fed.X_test), m2.predict_proba(fed.X_test))
    assert runs[0].extra["privacy"]["noise_multiplier"] == calibrate_discrete_noise_multiplier(
        8.0, 1e-5, 1.0, 2)


def test_a_discrete_run_resumes_as_it_would_have_run(fed: fl.Federation,
                                                     tmp_path: Path) -> None:
    from fedlabels.engines.inprocess import simulate
    from fedlabels.learners import as_models
    from fedlabels.methods import METHODS
    from fedlabels.results import RoundRecord

    def stop_after_1(record: RoundRecord) -> None:
        if record.round == 1:
            raise KeyboardInterrupt

    def sim(**kw: Any) -> Any:
        with reproducible(5):
            return simulate(METHODS["dp-fedavg"], fed, as_models("mlp(hidden=8)"), rounds=3,
                            period=2, seed=1, progress=False,
                            options={"noise": "discrete", "epsilon": 8.0,
                                     "sample_rate": 0.7}, **kw)

    full = sim()
    path = tmp_path / "run.checkpoint.npz"
    sim(checkpoint=path, on_round=stop_after_1)
    resumed = sim(resume=path)
    assert resumed.extra["privacy"] == full.extra["privacy"]
    assert resumed.extra["privacy"]["rounds_accounted"] == 3
    for m1, m2 in zip(full.client_models, resumed.client_models, strict=True):
        np.testing.assert_array_equal(m1.predict(fed.X_test), m2.predict(fed.X_test))


@pytest.mark.filterwarnings("ignore::fedlabels.core.errors.RunCaveatWarning")
def test_a_canary_audit_observes_a_discrete_run(fed: fl.Federation) -> None:
    from fedlabels.audit.canaries import canary_scores, inclusion_draw, make_canaries
    from fedlabels.learners import parse_model_spec

    can = make_canaries(fed, 10, seed=1)
    scores, result = canary_scores("dp-fedavg", can, inclusion_draw(10, 1),
                                   parse_model_spec("mlp(hidden=8)"), rounds=2, period=2,
                                   seed=1, options={"epsilon": 4.0, "noise": "discrete"})
    probs = result.client_models[0].predict_proba(can.X)
    np.testing.assert_allclose(scores, probs[np.arange(10), can.y], rtol=1e-5)
    assert result.extra["privacy"]["epsilon"] <= 4.0
    assert result.extra["privacy"]["noise"] == "discrete"


@pytest.mark.filterwarnings("ignore::fedlabels.core.errors.RunCaveatWarning")
def test_cli_flags_and_toml_reach_the_option(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from fedlabels.cli import main
    from fedlabels.cli.method_flags import method_flags

    flags = method_flags()  # what `fedlabels run --help` lists
    assert flags["noise"].choices() == ["continuous", "discrete"] and "grid" in flags
    out = tmp_path / "dg.json"
    assert main(["--threads", "1", "run", "--method", "dp-fedavg", "--model", "mlp(hidden=8)",
                 "--rounds", "2", "--noise", "discrete", "--grid", "0.002",
                 "--noise-multiplier", "1.5", "--no-progress", "--output", str(out)]) == 0
    p = json.loads(out.read_text())["privacy"]
    assert p["noise"] == "discrete" and p["grid"] == 0.002 and p["grid_source"] == "given"
    toml = tmp_path / "run.toml"
    toml.write_text('method = "dp-fedavg"\nmodel = "mlp(hidden=8)"\nrounds = 1\n'
                    f'output = "{tmp_path / "t.json"}"\n'
                    '[options]\nnoise = "discrete"\nnoise_multiplier = 2.0\n')
    assert main(["--threads", "1", "run", "--config", str(toml), "--no-progress"]) == 0
    assert json.loads((tmp_path / "t.json").read_text())["privacy"]["noise"] == "discrete"
    capsys.readouterr()
    assert main(["run", "--method", "dp-fedavg", "--model", "mlp(hidden=8)", "--grid", "0.01",
                 "--noise-multiplier", "1", "--no-progress",
                 "--output", str(tmp_path / "bad.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "noise discrete" in err[0]


@pytest.mark.filterwarnings("ignore::fedlabels.core.errors.RunCaveatWarning")
def test_a_scaled_poisoned_update_is_dropped_and_the_run_goes_on(fed: fl.Federation) -> None:
    kw: dict[str, Any] = {"model": "mlp(hidden=8)", "rounds": 2, "seed": 0, "malicious": 1,
                          "options": {"noise": "discrete", "noise_multiplier": 1.0}}
    scaled = fl.run("dp-fedavg", fed, poison="constant", **kw)  # 10·z: beyond Δ
    assert [r.server["dropped_updates"] for r in scaled.rounds] == [1.0, 1.0]
    flipped = fl.run("dp-fedavg", fed, poison="flip", **kw)  # −z: within Δ
    assert [r.server["dropped_updates"] for r in flipped.rounds] == [0.0, 0.0]
