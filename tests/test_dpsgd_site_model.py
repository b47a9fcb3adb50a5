"""DP-FedCT ``dpsgd`` with ``site_model=private``: the shared labels come from a DP-SGD model,
while each site keeps (and is evaluated with) its own model trained without DP (issue 19)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import fedlabels as fl
from conftest import digits_with_sizes
from fedlabels.comm import unpack_labels
from fedlabels.core.errors import FedLabelsError
from fedlabels.learners import dpsgd as dpsgd_module
from fedlabels.methods.fedct.mechanisms.dpsgd import DPSGDMechanism
from fedlabels.privacy.dpsgd_accounting import calibrate_dpsgd, dpsgd_epsilon

MLP = "mlp(hidden=16)"


@pytest.fixture(scope="module")
def fed() -> fl.Federation:
    """Unequal client sizes (60, 150, 100) on digits."""
    return digits_with_sizes((60, 150, 100), n_unlabeled=120, n_test=300)


def _options(epsilon: float, site_model: str) -> dict[str, Any]:
    return {"mechanism": "dpsgd", "epsilon": epsilon, "example_rate": 0.2,
            "site_model": site_model}


def test_shared_labels_are_the_dp_models_not_the_sites(fed: fl.Federation,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Every reply equals the DP-SGD model's labels on U; the site model is another model,
    trained on other data (without noise), whose labels differ; DP-SGD never touches it, and
    the DP-SGD model never trains on the consensus."""
    seen: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    dp_trained: set[int] = set()
    aux: list[Any] = []
    original_release = DPSGDMechanism.release
    original_steps = dpsgd_module.dpsgd_steps

    def spy_release(self: DPSGDMechanism, client: Any, message: Any, noise: Any) -> Any:
        reply = original_release(self, client, message, noise)
        n, c = len(client.public), client.settings.n_classes
        sent = unpack_labels(reply.arrays["labels"], n, c)
        assert client.release_learner() is not client.learner
        seen.append((sent, np.asarray(client.release_learner().predict(client.public)),
                     np.asarray(client.learner.predict(client.public))))
        return reply

    def spy_steps(mlp: Any, *args: Any, **kwargs: Any) -> int:
        dp_trained.add(id(mlp))
        aux.append(args[5] if len(args) > 5 else kwargs.get("X_aux"))
        return original_steps(mlp, *args, **kwargs)

    monkeypatch.setattr(DPSGDMechanism, "release", spy_release)
    monkeypatch.setattr(dpsgd_module, "dpsgd_steps", spy_steps)
    result = fl.run("dp-fedct", fed, model=MLP, rounds=3, period=10, seed=3,
                    options=_options(0.3, "private"))
    assert len(seen) == 3 * fed.n_clients
    for sent, dp_labels, _ in seen:
        assert np.array_equal(sent, dp_labels)
    # at ε = 0.3 the DP model is far from the site's own model on U
    assert np.mean([np.mean(s != site) for s, _, site in seen]) > 0.2
    assert len(dp_trained) == fed.n_clients  # one DP-SGD model per client, nothing else
    # the DP-SGD models learn from private data alone, never from the consensus on U
    assert len(aux) == 3 * fed.n_clients and all(a is None for a in aux)
    assert "not protected" in result.extra["privacy"]["site_model"]


def test_sites_are_evaluated_with_their_own_model(fed: fl.Federation) -> None:
    """At a small ε the DP-SGD models are poor; a site's own model (private data without
    noise) is not: the evaluated accuracy must show it (it would not if the DP model were
    evaluated)."""
    kw: dict[str, Any] = {"model": MLP, "rounds": 3, "period": 15, "seed": 4}
    dp = fl.run("dp-fedct", fed, options=_options(0.3, "dp"), **kw)
    own = fl.run("dp-fedct", fed, options=_options(0.3, "private"), **kw)
    assert own.final["mean_accuracy"] > dp.final["mean_accuracy"] + 0.15
    assert "may be released" in dp.extra["privacy"]["site_model"]


def test_accounting_does_not_depend_on_the_site_model(fed: fl.Federation) -> None:
    """The same DP-SGD steps are taken and charged whichever model the site keeps."""
    kw: dict[str, Any] = {"model": MLP, "rounds": 2, "period": 5, "seed": 1,
                          "participation": 2}
    a = fl.run("dp-fedct", fed, options=_options(2.0, "dp"), **kw).extra["privacy"]
    b = fl.run("dp-fedct", fed, options=_options(2.0, "private"), **kw).extra["privacy"]
    assert a["steps_per_client"] == b["steps_per_client"]
    assert sum(b["steps_per_client"].values()) == 2 * 2 * 5
    for cid, k in b["steps_per_client"].items():
        want = dpsgd_epsilon(b["noise_multiplier"], 0.2, k, 1e-5).epsilon
        assert b["epsilon_per_client"][cid] == pytest.approx(want, rel=1e-9)
    assert b["epsilon"] <= 2.0 * (1 + 1e-6) and b["guarantee"] == "formal"


@pytest.mark.parametrize("options, match", [
    ({"epsilon": 1.0, "site_model": "private"}, "only with --mechanism dpsgd"),
    ({"epsilon": 1.0, "mechanism": "subsample-aggregate", "site_model": "private"},
     "only with --mechanism dpsgd"),
    ({"epsilon": 1.0, "mechanism": "dpsgd", "site_model": "public"}, "dp.*private"),
])
def test_site_model_is_a_dpsgd_option(fed: fl.Federation, options: dict[str, Any],
                                      match: str) -> None:
    with pytest.raises(FedLabelsError, match=match):
        fl.run("dp-fedct", fed, model=MLP, rounds=1, period=1, seed=0, options=options)


@pytest.mark.parametrize("change, match", [
    ({"site_model": "dp"}, "site_model"),
    ({"example_rate": 0.9}, "example_rate"),
    ({"example_clip": 50.0}, "example_clip"),
    ({"noise_multiplier": 0.01}, "below the σ"),
    ({"mechanism": "xor"}, "mechanism"),
])
def test_clients_refuse_a_round_that_contradicts_their_options(
        fed: fl.Federation, monkeypatch: pytest.MonkeyPatch, change: dict[str, Any],
        match: str) -> None:
    """A server that changes the DP-SGD parameters (or the mechanism, or which model's labels
    are sent) after round 1 is refused: the client's own options decide its protection."""
    round_config = DPSGDMechanism.round_config

    def deviating(self: DPSGDMechanism, server: Any) -> dict[str, Any]:
        cfg = round_config(self, server)
        return {**cfg, **change} if server.events else cfg  # from round 2 on

    round_events = DPSGDMechanism.round_events

    def unaccounted(self: DPSGDMechanism, server: Any, config: dict[str, Any], cids: Any,
                    replies: Any) -> list[Any]:  # its ledger as if it had not deviated
        return round_events(self, server, round_config(self, server), cids, replies)

    monkeypatch.setattr(DPSGDMechanism, "round_config", deviating)
    monkeypatch.setattr(DPSGDMechanism, "round_events", unaccounted)
    with pytest.raises(FedLabelsError, match=match):
        fl.run("dp-fedct", fed, model=MLP, rounds=2, period=2, seed=0,
               options=_options(4.0, "private"))


def test_a_refused_round_leaves_the_site_model_untouched(fed: fl.Federation) -> None:
    """The step budget is checked before the site model trains."""
    from fedlabels.method.base import MethodContext, Settings
    from fedlabels.methods import METHODS

    method = METHODS["dp-fedct"]
    opts = method.parse_options(_options(4.0, "private"))
    settings = Settings(n_classes=fed.n_classes, n_features=fed.n_features,
                        n_clients=fed.n_clients, options=opts, rounds=1, period=3)
    ctx = MethodContext(settings, seeds=[1, 2, 3], server_seed=0)
    learner = fl.learners.build_learner(fl.learners.parse_model_spec(MLP)[0],
                                        n_classes=fed.n_classes, random_state=1)
    client = method.make_client(0, fed.clients[0], learner, ctx, fed.X_public, fed.X_test,
                                fed.y_test)
    client.dp_steps = 1  # as if one step of the plan (3) were spent
    sigma = calibrate_dpsgd(4.0, 1e-5, 0.2, 3)
    message = fl.comm.Message("fedct.train", config={
        "round": 0, "steps": 3, "mechanism": "dpsgd", "site_model": "private",
        "noise_multiplier": sigma, "example_rate": 0.2, "example_clip": 1.0})
    with pytest.raises(FedLabelsError, match="budget exceeded"):
        client.handle(message)
    assert not client.fitted and not hasattr(client.learner, "model_")
