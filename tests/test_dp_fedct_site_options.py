"""DP-FedCT ``dpsgd`` with ``site_model=private``: the options that shape what the site's own
model learns from the DP consensus (pseudo_weight, pseudo_warmup, pseudo_filter,
own_confidence, finetune_steps). They change the site's model as they say, leave what a
client sends and its ε untouched, and at their defaults reproduce the run without them.
``labeller_lr`` instead sets the learning rate of the DP-SGD model whose labels are sent: it
changes the labels, not the site model's rate, the steps or the ε."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import fedlabels as fl
from conftest import digits_with_sizes
from fedlabels.consensus import ABSTAIN
from fedlabels.core.errors import FedLabelsError
from fedlabels.learners.torch_mlp import TorchMLPClassifier
from fedlabels.methods.fedct.dp_fedct import DPFedCTClient
from fedlabels.methods.fedct.mechanisms.dpsgd import DPSGDMechanism
from fedlabels.methods.fedct.site_model import site_labels
from fedlabels.privacy.dpsgd_accounting import dpsgd_epsilon

MLP = "mlp(hidden=16)"
BASE = {"mechanism": "dpsgd", "epsilon": 8.0, "example_rate": 0.2, "site_model": "private",
        "quorum": 0.6}
DEFAULTS = {"pseudo_weight": 1.0, "pseudo_warmup": 0, "pseudo_filter": "none",
            "own_confidence": None, "finetune_steps": 0, "labeller_lr": None}
#: 3 rounds, 2 of 3 clients per round (partial participation), reproducible noise
RUN: dict[str, Any] = {"model": MLP, "rounds": 3, "period": 25, "seed": 2, "participation": 2,
                       "insecure_reproducible_noise": True}


@pytest.fixture(scope="module")
def fed() -> fl.Federation:
    """Unequal client sizes (60, 150, 100) on digits."""
    return digits_with_sizes((60, 150, 100), n_unlabeled=150, n_test=200)


def _sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, bytes]]:
    """Record every (client, labels payload) a dpsgd client sends."""
    sent: list[tuple[int, bytes]] = []
    release = DPSGDMechanism.release

    def spy(self: DPSGDMechanism, client: Any, message: Any, noise: Any) -> Any:
        reply = release(self, client, message, noise)
        sent.append((client.cid, reply.arrays["labels"].tobytes()))
        return reply

    monkeypatch.setattr(DPSGDMechanism, "release", spy)
    return sent


def _run(fed: fl.Federation, **options: Any) -> fl.RunResult:
    return fl.run("dp-fedct", fed, options={**BASE, **options}, **RUN)


@pytest.fixture(scope="module")
def plain(fed: fl.Federation) -> tuple[fl.RunResult, list[tuple[int, bytes]]]:
    """The run without site options and every labels payload it sent, run once for the
    tests that compare a run with options to it (the noise is reproducible: seeded)."""
    with pytest.MonkeyPatch.context() as mp:
        sent = _sent(mp)
        return _run(fed), list(sent)


def _accuracies(result: fl.RunResult) -> list[Any]:
    return [r.accuracies for r in result.rounds]


def test_defaults_given_reproduce_the_run_without_them(
        fed: fl.Federation, plain: tuple[fl.RunResult, Any]) -> None:
    given = _run(fed, **DEFAULTS)
    assert _accuracies(plain[0]) == _accuracies(given)
    assert plain[0].extra["privacy"]["epsilon"] == given.extra["privacy"]["epsilon"]


@pytest.mark.parametrize("options", [
    {"pseudo_filter": "agree"}, {"own_confidence": 0.2}, {"finetune_steps": 20},
    {"pseudo_weight": 0.3, "pseudo_warmup": 2},
    {"pseudo_filter": "agree", "own_confidence": 0.25, "finetune_steps": 5},
])
def test_options_change_the_site_model_not_what_is_sent(
        fed: fl.Federation, monkeypatch: pytest.MonkeyPatch, options: dict[str, Any],
        plain: tuple[fl.RunResult, list[tuple[int, bytes]]]) -> None:
    """Every labels payload and the ε are those of the default run; the site's accuracy is
    not (the site model trained on something else)."""
    default, sent_plain = plain
    sent = _sent(monkeypatch)
    shaped = _run(fed, **options)
    assert sent == sent_plain and len(sent) == 3 * 2
    p, q = default.extra["privacy"], shaped.extra["privacy"]
    assert (q["epsilon"], q["epsilon_per_client"]) == (p["epsilon"], p["epsilon_per_client"])
    assert _accuracies(default) != _accuracies(shaped)


def test_reported_epsilon_is_the_ledgers_and_the_oracles(fed: fl.Federation,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    """ε of each client: its own ledger's, and dp-accounting's for the steps it took."""
    ledgers: dict[int, float] = {}
    release = DPSGDMechanism.release

    def spy(self: DPSGDMechanism, client: Any, message: Any, noise: Any) -> Any:
        reply = release(self, client, message, noise)
        ledgers[client.cid] = client.ledger.spent().epsilon
        return reply

    monkeypatch.setattr(DPSGDMechanism, "release", spy)
    p = _run(fed, pseudo_filter="agree", own_confidence=0.9, finetune_steps=5).extra["privacy"]
    assert set(ledgers) == {int(c) for c in p["epsilon_per_client"]}
    for cid, eps in p["epsilon_per_client"].items():
        assert eps == pytest.approx(ledgers[int(cid)], rel=1e-9)
        want = dpsgd_epsilon(p["noise_multiplier"], 0.2, p["steps_per_client"][cid], 1e-5)
        assert eps == pytest.approx(want.epsilon, rel=1e-9)
    assert p["epsilon"] == pytest.approx(max(ledgers.values()), rel=1e-9)


def test_labeller_lr_sets_the_dp_labellers_rate_and_nothing_else(
        fed: fl.Federation, monkeypatch: pytest.MonkeyPatch,
        plain: tuple[fl.RunResult, list[tuple[int, bytes]]]) -> None:
    """The labeller's Adam runs at labeller_lr, the site's own model at its spec's rate; the
    labels sent change, the DP-SGD steps and every client's ε do not."""
    default, sent_plain = plain
    rates: set[tuple[float, float]] = set()
    release = DPSGDMechanism.release

    def spy(self: DPSGDMechanism, client: Any, message: Any, noise: Any) -> Any:
        reply = release(self, client, message, noise)
        labeller = client.release_learner()
        rates.add((labeller.optimizer_.param_groups[0]["lr"],
                   client.learner.optimizer_.param_groups[0]["lr"]))
        return reply

    monkeypatch.setattr(DPSGDMechanism, "release", spy)
    sent = _sent(monkeypatch)
    tuned = _run(fed, labeller_lr=0.004)
    assert rates == {(0.004, 0.001)}
    assert [c for c, _ in sent] == [c for c, _ in sent_plain]
    assert sent != sent_plain  # the labeller learnt at another rate
    p, q = default.extra["privacy"], tuned.extra["privacy"]
    assert (q["epsilon"], q["epsilon_per_client"], q["steps_per_client"]) == (
        p["epsilon"], p["epsilon_per_client"], p["steps_per_client"])


def test_labeller_lr_is_refused_where_the_learner_ignores_it(fed: fl.Federation) -> None:
    """A torch learner with its own optimizer factory would train at the factory's rate."""
    import torch

    from fedlabels.learners.torch_net import TorchNetClassifier

    net = TorchNetClassifier(network=lambda: torch.nn.Sequential(torch.nn.Linear(64, 10)),
                             optimizer=lambda params: torch.optim.SGD(params, lr=0.1))
    with pytest.raises(FedLabelsError, match=r"labeller_lr.*own optimizer factory"):
        fl.run("dp-fedct", fed, model=net, rounds=1, period=2, seed=0,
               options={**BASE, "labeller_lr": 0.01})


def test_site_labels_against_a_loop() -> None:
    """Filtering and self-labelling, checked example by example."""
    rng = np.random.default_rng(0)
    classes = np.array([0, 1, 2, 3])
    proba = rng.dirichlet(np.ones(4), size=200)
    consensus = rng.integers(-1, 4, size=200)

    class Opts:
        site_model, pseudo_filter, own_confidence = "private", "agree", 0.5

    out = site_labels(consensus, proba, classes, Opts())
    for i in range(200):
        own = int(np.argmax(proba[i]))
        kept = consensus[i] if consensus[i] == own else ABSTAIN
        if kept == ABSTAIN and proba[i].max() >= 0.5:
            kept = own
        assert out[i] == kept
    Opts.pseudo_filter, Opts.own_confidence = "none", None
    assert np.array_equal(site_labels(consensus, proba, classes, Opts()), consensus)


def test_filter_keeps_only_labels_the_site_model_agrees_with(
        fed: fl.Federation, monkeypatch: pytest.MonkeyPatch) -> None:
    """With agree, P holds exactly the consensus labels the site's model predicted when the
    consensus arrived; with own_confidence the rest of U is labelled by the site's model
    where it is at least that sure."""
    checked: list[int] = []
    original = DPFedCTClient.set_pseudo_labels

    def spy(self: DPFedCTClient, labels: np.ndarray) -> None:
        proba = np.asarray(self.model().predict_proba(self.public))
        own = proba.argmax(axis=1)
        original(self, labels)
        index = (np.arange(len(self.public)) if self.pseudo_index is None
                 else self.pseudo_index)
        assert np.array_equal(self.pseudo_y, own[index])
        agreed = np.flatnonzero(labels == own)
        sure = np.flatnonzero((labels != own) & (proba.max(axis=1) >= 0.2))
        assert np.array_equal(index, np.union1d(agreed, sure))
        checked.append(len(index))

    monkeypatch.setattr(DPFedCTClient, "set_pseudo_labels", spy)
    _run(fed, pseudo_filter="agree", own_confidence=0.2)
    assert checked and max(checked) > 0


def test_finetune_and_weights_take_the_steps_they_say(
        fed: fl.Federation, monkeypatch: pytest.MonkeyPatch) -> None:
    """finetune_steps: that many plain steps on private data alone, in the last round only;
    pseudo_weight and pseudo_warmup: P's loss weight w·min(1, t/K) in round t (0-based)."""
    calls: list[tuple[int, int, bool, float | None]] = []
    original = TorchMLPClassifier.train_steps
    rnd = {"now": -1}
    release = DPSGDMechanism.release

    def spy_release(self: DPSGDMechanism, client: Any, message: Any, noise: Any) -> Any:
        rnd["now"] = int(message.config["round"])
        return release(self, client, message, noise)

    def spy(self: TorchMLPClassifier, X: Any, y: Any, n_steps: int, X_aux: Any = None,
            y_aux: Any = None, w_aux: Any = None, aux_index: Any = None) -> Any:
        weights = None if w_aux is None else set(np.round(np.asarray(w_aux), 6).tolist())
        assert weights is None or len(weights) == 1
        calls.append((rnd["now"], int(n_steps), X_aux is not None,
                      None if weights is None else weights.pop()))
        return original(self, X, y, n_steps, X_aux, y_aux, w_aux, aux_index)

    monkeypatch.setattr(DPSGDMechanism, "release", spy_release)
    monkeypatch.setattr(TorchMLPClassifier, "train_steps", spy)
    _run(fed, finetune_steps=13, pseudo_weight=0.6, pseudo_warmup=2)
    finetunes = [c for c in calls if c[1] == 13]
    assert len(finetunes) == 2  # the two clients of the last round
    assert all(r == 2 and not aux for r, _, aux, _ in finetunes)
    weighted = [(r, w) for r, n, aux, w in calls if aux and n == 25]
    assert weighted and all(w == pytest.approx(0.6 * min(1.0, r / 2), abs=1e-6)
                            for r, w in weighted)


@pytest.mark.parametrize("options, match", [
    ({"mechanism": "dpsgd", "pseudo_filter": "agree"}, "only with --opt site_model=private"),
    ({"mechanism": "dpsgd", "site_model": "dp", "finetune_steps": 5}, "site_model=private"),
    ({"mechanism": "xor", "own_confidence": 0.9}, "only with --mechanism dpsgd"),
    ({"mechanism": "dpsgd", "site_model": "private", "pseudo_filter": "vote"},
     "none.*agree"),
    ({"mechanism": "dpsgd", "site_model": "private", "own_confidence": 1.5}, "own_confidence"),
    ({"mechanism": "dpsgd", "labeller_lr": 0.01}, "only with --opt site_model=private"),
    ({"mechanism": "dpsgd", "site_model": "private", "labeller_lr": 0.0}, "labeller_lr"),
])
def test_site_options_are_refused_where_they_do_not_apply(
        fed: fl.Federation, options: dict[str, Any], match: str) -> None:
    with pytest.raises(FedLabelsError, match=match):
        fl.run("dp-fedct", fed, model=MLP, rounds=1, period=1, seed=0,
               options={"epsilon": 8.0, **options})


def test_the_contract_holds_with_the_labeller_and_site_options() -> None:
    """Determinism (reproducible noise), only declared payloads in the real traffic, and a
    state round trip (the labeller, with its own rate, resumes) with every option set."""
    from fedlabels.testing import check_method

    options = {"mechanism": "dpsgd", "epsilon": 8.0, "site_model": "private", "quorum": 0.6,
               "labeller_lr": 0.01, "pseudo_filter": "agree", "own_confidence": 0.5,
               "finetune_steps": 3}
    assert check_method("dp-fedct", options=options, model="mlp(hidden=8)",
                        checks=("determinism", "payloads", "state")) == [
        "determinism", "payloads", "state"]
