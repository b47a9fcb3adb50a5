"""DP-FedAvg, DD and DP-FedCT server/client pieces against hand-computed values.

* DP-FedAvg divides the noisy sum of clipped updates by the fixed q·M, never by the realised
  number of participants, and its noise has standard deviation σ·S on the sum;
* DD's server average is the row-renormalised mean of the clients' probability matrices;
* a DP-FedCT client restored from its state continues its noise stream exactly;
* the options, flags and threat models of these methods are what they declare.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from fedlabels.comm import Message
from fedlabels.core.errors import FedLabelsError
from fedlabels.data import ClientData
from fedlabels.learners import build_learner, parse_model_spec
from fedlabels.method.base import Settings
from fedlabels.methods import METHODS
from fedlabels.methods.distillation.dd import DDOptions, DDServer
from fedlabels.methods.distillation.fedmd import FedMDOptions
from fedlabels.methods.fedavg.dp_fedavg import DPFedAvgOptions, DPFedAvgServer
from fedlabels.methods.fedct.dp_fedct import DPFedCTClient, DPFedCTOptions
from fedlabels.privacy.mechanisms import unpack_rows


class ScriptedGrid:
    """Clients that answer every message with a fixed reply; ``sent`` keeps the messages."""

    def __init__(self, replies: dict[int, Message]) -> None:
        self.replies = replies
        self.sent: list[dict[int, Message]] = []

    @property
    def client_ids(self) -> list[int]:
        return sorted(self.replies)

    def exchange(self, messages: dict[int, Message], rnd: int) -> dict[int, Message]:
        self.sent.append(dict(messages))
        return {c: self.replies[c] for c in messages}


# ------------------------------------------------------------------ DP-FedAvg

UPDATES = {0: [1.0, 0.0, 0.0], 1: [0.0, 2.0, 0.0], 2: [0.0, 0.0, 3.0], 3: [1.0, 1.0, 1.0]}
START = np.array([0.5, -0.5, 1.0], dtype=np.float32)


def _dp_fedavg_server(dim: int = 3, **options: float) -> DPFedAvgServer:
    settings = Settings(n_classes=2, n_features=2, n_clients=4, rounds=1, period=3,
                        options=DPFedAvgOptions(**options))
    initial = START if dim == 3 else np.zeros(dim, dtype=np.float32)
    return DPFedAvgServer(initial, settings)


def _update_grid(dim: int = 3) -> ScriptedGrid:
    return ScriptedGrid({c: Message("dpfedavg.update",
                                    arrays={"update": np.array(u if dim == 3 else np.zeros(dim),
                                                               dtype=np.float32)},
                                    config={"norm": 0.5}) for c, u in UPDATES.items()})


def test_dp_fedavg_divides_by_q_times_m_not_by_the_participants() -> None:
    # q = 0.9, M = 4: q·M = 3.6; η = 0.5. The Poisson sample is secret (OS entropy), so the
    # expected weights follow from whoever was contacted: e.g. clients 1, 2, 3 give
    # Σ = [1,3,4] and w = [0.5,-0.5,1] + 0.5·[1,3,4]/3.6 (dividing by the 3 participants would
    # give [0.6667, 0, 1.6667]); all four give Σ = [2,3,4] (dividing by 4: [0.75,-0.125,1.5])
    sizes = set()
    for _ in range(60):  # P(all 60 samples take all four clients) = 0.9^240 < 1e-10
        server = _dp_fedavg_server(noise_multiplier=1e-9, sample_rate=0.9, server_lr=0.5,
                                   clip=1.0)  # noise std 1e-9 on the sum: negligible
        grid = _update_grid()
        metrics = server.run_round(0, grid)
        contacted = sorted(grid.sent[0]) if grid.sent else []  # only the sampled clients
        total = sum((np.array(UPDATES[c]) for c in contacted), np.zeros(3))
        np.testing.assert_allclose(server.weights, START + 0.5 * total / 3.6, atol=1e-6)
        assert server.weights.dtype == np.float32
        assert metrics["sampled_clients"] == len(contacted)
        if contacted:
            message = grid.sent[0][contacted[0]]
            np.testing.assert_array_equal(message.arrays["weights"], START)
            assert message.config["clip"] == 1.0
        sizes.add(len(contacted))
    assert 4 in sizes and min(sizes) < 4


def test_dp_fedavg_noise_has_std_sigma_s_on_the_sum() -> None:
    # zero updates, q = 1, M = 4, η = 1: w = N(0, (σS)²) / 4 per coordinate
    dim, sigma, clip = 40_000, 2.0, 0.5
    server = _dp_fedavg_server(dim=dim, noise_multiplier=sigma, clip=clip)
    server.run_round(0, _update_grid(dim))
    assert np.std(server.weights) == pytest.approx(sigma * clip / 4, rel=0.03)
    assert abs(np.mean(server.weights)) < 0.01


# ------------------------------------------------------------------ DD

SOFT = {  # unequal contributions; rows need not sum to 1 (float16 rounding, say)
    0: [[0.5, 0.5, 0.0], [0.0, 1.0, 0.0]],
    1: [[0.2, 0.2, 0.2], [0.25, 0.25, 0.5]],
    2: [[0.8, 0.1, 0.1], [0.1, 0.1, 0.3]],
}
# column sums / 3 = mean; then each row divided by its sum:
# row 0: [1.5, 0.8, 0.3] / 2.6;  row 1: [0.35, 1.35, 0.8] / 2.5
# (the mean of per-client renormalised rows would give [0.5444, 0.3111, 0.1444] in row 0)
AVERAGE = [[15 / 26, 8 / 26, 3 / 26], [0.14, 0.54, 0.32]]


def test_dd_server_average_is_the_row_renormalised_mean() -> None:
    settings = Settings(n_classes=3, n_clients=3, rounds=2, period=4, options=DDOptions())
    server = DDServer(settings, truth_public=np.array([0, 2]))
    grid = ScriptedGrid({c: Message("dd.soft", arrays={"soft": np.array(m, np.float32)})
                         for c, m in SOFT.items()})
    metrics = server.run_round(0, grid)
    assert "soft" not in grid.sent[0][0].arrays  # nothing to distil towards in round 1
    np.testing.assert_allclose(server.average, AVERAGE, atol=1e-6)
    assert metrics["consensus_accuracy"] == 0.5  # argmax [0, 1] against truth [0, 2]
    server.run_round(1, grid)  # round 2 sends the round-1 average, in float16
    sent = grid.sent[1][2].arrays["soft"]
    assert sent.dtype == np.float16
    np.testing.assert_allclose(sent.astype(np.float64), AVERAGE, atol=1e-3)
    assert grid.sent[1][2].config["steps"] == 4


# ------------------------------------------------------------------ DP-FedCT client state


def _dp_fedct_client(seed: int, mechanism: str = "xor", **options: Any) -> DPFedCTClient:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 4))
    y = (X[:, 0] > 0).astype(np.int64)
    settings = Settings(n_classes=2, n_features=4, n_clients=3, rounds=3, period=1,
                        options=DPFedCTOptions(mechanism=mechanism,
                                               **(options or {"epsilon": 1.0})))
    learner = build_learner(parse_model_spec("dt")[0], n_classes=2, random_state=seed)
    return DPFedCTClient(0, ClientData(X, y), learner, settings, rng.normal(size=(50, 4)),
                         X[:10], y[:10], seed=seed)


@pytest.mark.parametrize("config", [{"mechanism": "xor"}, {"mechanism": "kary"}])
def test_dp_fedct_client_restored_from_state_continues_its_noise(config: dict) -> None:
    mechanism = config["mechanism"]
    live = _dp_fedct_client(seed=11, mechanism=mechanism)
    # the noise the client's own options calibrate (a server asking for less is refused)
    noise = live.own_noise()
    message = Message("fedct.train", config={"round": 0, "steps": 1, **config, **noise})
    live.handle(message)
    state = live.state_dict()
    assert isinstance(state["noise_rng"], str)
    restored, fresh = (_dp_fedct_client(seed=11, mechanism=mechanism) for _ in range(2))
    restored.load_state_dict(state)
    expected = live.handle(message)
    key = "bits" if config["mechanism"] == "xor" else "labels"
    np.testing.assert_array_equal(restored.handle(message).arrays[key], expected.arrays[key])
    # a fresh role draws other noise (its generator is seeded from OS entropy)
    assert not np.array_equal(fresh.handle(message).arrays[key], expected.arrays[key])


def test_dp_fedct_client_state_without_noise_generator_is_an_error() -> None:
    state = _dp_fedct_client(seed=1).state_dict()
    del state["noise_rng"]
    with pytest.raises(FedLabelsError, match="generator state"):
        _dp_fedct_client(seed=1).load_state_dict(state)


def test_noise_rows_unpack_to_one_hot_width() -> None:
    client = _dp_fedct_client(seed=2, epsilon_per_round=1000.0)  # f ~ 0 by its own options
    reply = client.handle(Message("fedct.train", config={
        "round": 0, "steps": 1, "mechanism": "xor", **client.own_noise()}))
    rows = unpack_rows(reply.arrays["bits"], 50, 2)
    assert np.all(rows.sum(axis=1) == 1)  # f ~ 0: the one-hot rows themselves


# ------------------------------------------------------------------ declarations


@pytest.mark.parametrize("name, flags", [
    # noise_multiplier: dpsgd's given σ (the flag dp-fedavg's already was)
    ("dp-fedct", {"quorum", "epsilon", "epsilon_per_round", "delta", "sensitivity",
                  "mechanism", "noise_multiplier"}),
    ("dp-fedavg", {"clip", "noise_multiplier", "epsilon", "delta", "sample_rate", "noise",
                   "grid"}),
    ("dd", set()),
    ("fedmd", set()),
])
def test_flags_are_the_ones_the_cli_had(name: str, flags: set[str]) -> None:
    declared = METHODS[name].options_class.declared()
    assert {info.name for info in declared if info.flag} == flags
    assert all(info.help for info in declared)


def test_option_values_are_normalised_and_defaults_stated() -> None:
    opts = DPFedCTOptions.from_mapping({"epsilon": 1, "sensitivity": " Worst "}, "dp-fedct")
    assert opts.sensitivity == "worst" and opts.epsilon == 1.0 and opts.quorum is None
    assert DPFedCTOptions.from_mapping({"epsilon": 1.0, "sensitivity": "40"},
                                       "dp-fedct").sensitivity == 40.0
    fedmd = FedMDOptions.from_mapping({"public_subset": 30}, "fedmd")
    assert fedmd.public_subset == 30 and fedmd.public_labeled is None
    with pytest.raises(FedLabelsError, match="transfer_steps"):
        FedMDOptions.from_mapping({"transfer_steps": 0}, "fedmd")
    with pytest.raises(FedLabelsError, match="soft_dtype"):
        DDOptions.from_mapping({"soft_dtype": "float64"}, "dd")


def test_threat_models_state_what_is_covered() -> None:
    dpct, dpavg = METHODS["dp-fedct"].threat_model, METHODS["dp-fedavg"].threat_model
    assert (dpct.guarantee, dpavg.guarantee) == ("conditional", "formal")
    assert "record" in (dpct.neighbouring or "") and "client" in (dpavg.neighbouring or "")
    assert "not the server" in dpavg.against
    assert dpct.payload("dpfedct.bits", "bits").covered
    assert dpct.payload("dpfedct.labels", "labels").covered
    for key in ("bits", "max_changed_labels", "mean_changed_labels"):
        reply = dpct.payload("dpfedct.sensitivity.reply", key, "config")
        assert reply is not None and not reply.covered and "without noise" in reply.note
    assert not dpavg.payload("dpfedavg.update", "update").covered
    assert not dpavg.payload("dpfedavg.update", "norm", "config").covered
    for name, kind, key, rows in (("dd", "dd.soft", "soft", "public"),
                                  ("fedmd", "fedmd.scores", "scores", "subset")):
        model = METHODS[name].threat_model
        payload = model.payload(kind, key)
        assert model.guarantee == "none" and payload.rows == rows and not payload.covered
