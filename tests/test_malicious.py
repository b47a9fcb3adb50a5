"""Malicious clients (issue 16): attacks, who is malicious, robust consensus / aggregation."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import trim_mean
from sklearn.metrics import cohen_kappa_score

import fedlabels as fl
from fedlabels.comm import Message
from fedlabels.consensus import (
    ABSTAIN,
    agreement_kappa,
    leave_one_out_kappa,
    peer_kappa,
    trimmed_vote,
    weighted_vote,
)
from fedlabels.core.errors import FedLabelsError
from fedlabels.method.adversary import SCALE, Attack, choose_malicious
from fedlabels.method.blocks import robust_average
from fedlabels.methods import get_method
from fedlabels.methods.fedavg import fedavg as fedavg_module
from fedlabels.methods.fedct.fedct import FedCTServer
from fedlabels.runs.config import RunConfig

MLP = "mlp(hidden=8)"


# ----------------------------------------------------------------------------- attacks
def _brute_labels(attack: Attack, y: np.ndarray, c: int) -> list[int]:
    out = []
    for v in y.tolist():
        if attack.name == "flip":
            out.append(c - 1 - v)
        elif attack.name == "constant":
            out.append(attack.target)
        else:  # targeted
            out.append(attack.target if v == attack.source else v)
    return out


@pytest.mark.parametrize("text", ["flip", "constant:2", "targeted:1:3"])
def test_label_maps_match_a_per_example_map(text):
    attack, y = Attack.parse(text), np.random.default_rng(0).integers(0, 4, 300)
    rng = np.random.default_rng(1)
    assert attack.labels(y, 4, rng).tolist() == _brute_labels(attack, y, 4)
    # soft labels get the same map on their columns: the argmax moves like the hard label
    p = np.random.default_rng(2).dirichlet(np.ones(4), 300).astype(np.float32)
    q = attack.scores(p, rng)
    assert np.allclose(q.sum(axis=1), 1.0, atol=1e-6)
    if attack.name != "targeted":
        assert q.argmax(axis=1).tolist() == _brute_labels(attack, p.argmax(axis=1), 4)
    else:
        for row_in, row_out in zip(p, q, strict=True):
            assert row_out[1] == 0 and np.isclose(row_out[3], row_in[3] + row_in[1])


def test_random_labels_are_seeded_and_uniform():
    attack, y = Attack.parse("random"), np.zeros(20000, dtype=np.int64)
    a = attack.labels(y, 5, np.random.default_rng(7))
    assert a.tolist() == attack.labels(y, 5, np.random.default_rng(7)).tolist()
    assert np.allclose(np.bincount(a, minlength=5) / a.size, 0.2, atol=0.02)


def test_weight_attacks():
    u, rng = np.random.default_rng(0).normal(size=50), np.random.default_rng(1)
    assert np.allclose(Attack.parse("flip").update(u, rng), -u)
    assert np.allclose(Attack.parse("constant").update(u, rng), SCALE * u)
    g = Attack.parse("random").update(u, rng)
    assert np.isclose(np.linalg.norm(g), np.linalg.norm(u)) and not np.allclose(g, u)


def test_bad_inputs_are_clear_errors():
    with pytest.raises(FedLabelsError, match="not below half"):
        RunConfig(clients=5, malicious=3)
    with pytest.raises(FedLabelsError, match="not below half"):
        choose_malicious(4, 2, 0)
    with pytest.raises(FedLabelsError, match=r"flip \(sign-flipped"):
        RunConfig(method="fedavg", malicious=1, poison="targeted")
    with pytest.raises(FedLabelsError, match=r"sends nothing an attack can change .*its "
                                             r"threat model declares none of these\)"):
        RunConfig(method="xclp", malicious=1)
    with pytest.raises(FedLabelsError, match="needs --malicious"):
        RunConfig(poison="flip")
    with pytest.raises(FedLabelsError, match="unknown attack"):
        RunConfig(malicious=1, poison="poison")
    with pytest.raises(FedLabelsError, match=r"has no option .robust.*applies to fedct"):
        get_method("dp-fedct").parse_options({"robust": "trimmed", "epsilon": 8.0})
    with pytest.raises(FedLabelsError, match="trim applies"):
        get_method("fedct").parse_options({"trim": 0.4})
    with pytest.raises(FedLabelsError, match="trim applies"):
        get_method("fedavg").parse_options({"aggregate": "median", "trim": 0.4})
    with pytest.raises(FedLabelsError, match="one of mean, median, trimmed_mean"):
        get_method("fedavg").parse_options({"aggregate": "mode"})


def test_the_draw_is_seeded_and_recorded(breast_cancer_fed):
    picked = choose_malicious(5, 2, 3)
    assert picked == choose_malicious(5, 2, 3) and len(set(picked)) == 2
    assert {tuple(choose_malicious(5, 2, s)) for s in range(20)} != {tuple(picked)}
    r = fl.run("fedct", breast_cancer_fed, model="dt", rounds=1, seed=3, malicious=2,
               attack="random", progress=False)
    assert r.extra["malicious"]["clients"] == picked
    assert r.extra["malicious"]["attack"] == "random"
    honest = [a for c, a in enumerate(r.final["client_accuracies"]) if c not in picked]
    assert r.final["honest_mean_accuracy"] == pytest.approx(np.mean(honest))


def _round0_votes(monkeypatch, fed, **kwargs):
    """The hard labels the FedCT server received in round 0, by client."""
    seen: list[np.ndarray] = []
    real = FedCTServer.collect_votes

    def spy(self, replies):
        votes = real(self, replies)
        seen.append(votes)
        return votes

    monkeypatch.setattr(FedCTServer, "collect_votes", spy)
    result = fl.run("fedct", fed, model="dt", rounds=1, seed=0, progress=False, **kwargs)
    return seen[0], result


@pytest.mark.parametrize("text", ["flip", "random", "constant:1", "targeted:1:0"])
def test_only_the_chosen_clients_send_corrupted_labels(monkeypatch, breast_cancer_fed, text):
    honest, _ = _round0_votes(monkeypatch, breast_cancer_fed)
    sent, result = _round0_votes(monkeypatch, breast_cancer_fed, malicious=2, attack=text)
    bad = result.extra["malicious"]["clients"]
    for cid in range(5):
        if cid not in bad:
            assert sent[cid].tolist() == honest[cid].tolist()
        elif text == "random":
            assert 0.3 < np.mean(sent[cid] == honest[cid]) < 0.7
        else:
            assert sent[cid].tolist() == _brute_labels(Attack.parse(text), honest[cid], 2)


@pytest.mark.parametrize("text", ["flip", "constant", "random"])
def test_only_the_chosen_clients_send_corrupted_updates(monkeypatch, breast_cancer_fed, text):
    def replies_of(**kwargs):
        seen: list[dict[int, np.ndarray]] = []

        def spy(replies, aggregate, trim):
            seen.append({c: np.asarray(m.arrays["weights"], np.float64)
                         for c, m in replies.items()})
            return robust_average(replies, aggregate, trim)

        monkeypatch.setattr(fedavg_module, "robust_average", spy)
        result = fl.run("fedavg", breast_cancer_fed, model=MLP, rounds=1, period=2, seed=0,
                        progress=False, **kwargs)
        return seen[0], result

    honest, base = replies_of()
    sent, result = replies_of(malicious=1, attack=text)
    bad = result.extra["malicious"]["clients"]
    assert len(bad) == 1 and base.extra.get("malicious") is None
    for cid in range(5):
        if cid not in bad:
            assert np.array_equal(sent[cid], honest[cid])
    c = bad[0]
    w0 = _initial_weights(breast_cancer_fed)
    u, s = honest[c] - w0, sent[c] - w0
    if text == "flip":
        assert np.allclose(s, -u, atol=1e-5)
    elif text == "constant":
        assert np.allclose(s, SCALE * u, atol=1e-4)
    else:
        assert np.isclose(np.linalg.norm(s), np.linalg.norm(u), rtol=1e-4)
        assert abs(float(s @ u)) < 0.5 * float(u @ u)


def _initial_weights(fed):
    """The global initialisation of a fedavg run with seed 0 (what round 0 sends)."""
    from fedlabels.learners import as_models
    from fedlabels.method.blocks import initial_weights
    from fedlabels.runs.loop import plan_run

    plan = plan_run("fedavg", n_roles=fed.n_clients, n_classes=fed.n_classes,
                    n_features=fed.n_features, rounds=1, period=2, seed=0,
                    models=as_models(MLP))
    return initial_weights(plan.learners(), plan.context()).astype(np.float64)


# ----------------------------------------------------------------------------- oracles
def _brute_weighted(votes, c, w, quorum=None):
    out = []
    for j in range(votes.shape[1]):
        score = [sum(w[i] for i in range(len(w)) if votes[i, j] == k) for k in range(c)]
        best = max(range(c), key=lambda k: (score[k], -k))
        out.append(best if quorum is None or score[best] / sum(w) >= quorum - 1e-12
                   else ABSTAIN)
    return out


def test_weighted_vote_against_brute_force():
    rng = np.random.default_rng(0)
    votes = rng.integers(0, 4, (6, 300))
    w = rng.random(6)
    assert weighted_vote(votes, 4, w).tolist() == _brute_weighted(votes, 4, w)
    assert weighted_vote(votes, 4, w, 0.5).tolist() == _brute_weighted(votes, 4, w, 0.5)
    ones = np.ones(6)  # equal weights: the plain majority, ties to the smallest class
    assert weighted_vote(votes, 4, ones).tolist() == _brute_weighted(votes, 4, ones)


def test_trimmed_vote_against_brute_force():
    rng = np.random.default_rng(1)
    for trial in range(20):
        votes = rng.integers(0, 3, (5, 40))
        votes[trial % 5] = (votes[(trial + 1) % 5] + 1) % 3  # one outlier
        labels, dropped = trimmed_vote(votes, 3, 2)
        prov = _brute_weighted(votes, 3, np.ones(5))
        dis = [np.mean(votes[i] != prov) for i in range(5)]
        order = sorted(range(5), key=lambda i: (-dis[i], i))[:2]
        assert dropped.tolist() == sorted(order)
        kept = np.array([votes[i] for i in range(5) if i not in order])
        assert labels.tolist() == _brute_weighted(kept, 3, np.ones(3))


def test_agreement_kappa_matches_sklearn():
    rng = np.random.default_rng(2)
    truth = rng.integers(0, 3, 400)
    votes = np.stack([np.where(rng.random(400) < p, truth, rng.integers(0, 3, 400))
                      for p in (0.9, 0.5, 0.0)] + [np.full(400, 1), 2 - truth])
    got = agreement_kappa(votes, truth, 3)
    want = [cohen_kappa_score(v, truth) for v in votes]
    assert np.allclose(got, want)
    cons = truth.copy()
    cons[:100] = ABSTAIN  # abstained examples are left out
    assert np.allclose(agreement_kappa(votes, cons, 3),
                       [cohen_kappa_score(v[100:], truth[100:]) for v in votes])


def test_leave_one_out_and_peer_kappa_against_sklearn():
    rng = np.random.default_rng(3)
    truth = rng.integers(0, 3, 300)
    votes = np.stack([np.where(rng.random(300) < p, truth, rng.integers(0, 3, 300))
                      for p in (0.9, 0.8, 0.6, 0.3)] + [2 - truth])
    w = rng.random(5)
    got = leave_one_out_kappa(votes, 3, w)
    for i in range(5):
        rest = [j for j in range(5) if j != i]
        others = _brute_weighted(votes[rest], 3, w[rest])
        assert np.isclose(got[i], cohen_kappa_score(votes[i], others))
    pairs = [[max(0.0, cohen_kappa_score(votes[i], votes[j])) for j in range(5) if j != i]
             for i in range(5)]
    assert np.allclose(peer_kappa(votes, 3), [np.mean(p) for p in pairs])


def _replies(arrays, sizes):
    return {c: Message("fedavg.weights", arrays={"weights": a.astype(np.float32)},
                       config={"n": n}) for c, (a, n) in enumerate(zip(arrays, sizes,
                                                                     strict=True))}


@pytest.mark.parametrize("m", [4, 5, 7])
def test_robust_aggregation_against_numpy_and_scipy(m):
    rng = np.random.default_rng(m)
    arrays = rng.normal(size=(m, 200)) * rng.uniform(0.1, 10, (m, 1))
    sizes = rng.integers(5, 300, m)  # unequal sizes: the robust rules ignore them
    replies = _replies(arrays, sizes)
    a32 = arrays.astype(np.float32).astype(np.float64)
    assert np.allclose(robust_average(replies, "mean", 0.2),
                       np.average(a32, axis=0, weights=sizes), atol=1e-5)
    assert np.allclose(robust_average(replies, "median", 0.2), np.median(a32, axis=0),
                       atol=1e-6)
    for trim in (0.2, 0.3, 0.45):
        assert np.allclose(robust_average(replies, "trimmed_mean", trim),
                           trim_mean(a32, trim, axis=0), atol=1e-5)


def test_median_withstands_a_scaled_outlier():
    arrays = np.ones((5, 10))
    arrays[2] = 1e6
    replies = _replies(arrays, [10, 20, 1000, 30, 40])
    assert np.allclose(robust_average(replies, "median", 0.2), 1.0)
    assert np.allclose(robust_average(replies, "trimmed_mean", 0.2), 1.0)


# ----------------------------------------------------------------------------- acceptance
def _honest_gap(fed, robust, k, rounds=6):
    """Honest clients' mean accuracy: the run with K flippers vs the honest run (same
    clients), and the result of the attacked run."""
    clean = fl.run("fedct", fed, model="dt", rounds=rounds, seed=0, progress=False)
    opts = {"robust": robust}
    bad = fl.run("fedct", fed, model="dt", rounds=rounds, seed=0, options=opts,
                 malicious=k, attack="flip", progress=False)
    honest = [c for c in range(5) if c not in bad.extra["malicious"]["clients"]]
    reference = float(np.mean([clean.final["client_accuracies"][c] for c in honest]))
    return reference - bad.final["honest_mean_accuracy"], bad


def test_one_flipping_client_among_five_fedct_reputation(breast_cancer_fed):
    gap, result = _honest_gap(breast_cancer_fed, "reputation", 1)
    assert gap <= 0.02
    weights = result.extra["robust_consensus"]["weights"]
    (bad,) = result.extra["malicious"]["clients"]
    # the mechanism is not a no-op: the flipping client's votes count for (almost) nothing
    assert weights[bad] < 0.05
    assert min(w for c, w in enumerate(weights) if c != bad) > 0.5


def test_one_flipping_client_among_five_fedct_trimmed(breast_cancer_fed):
    gap, result = _honest_gap(breast_cancer_fed, "trimmed", 1)
    assert gap <= 0.02
    (bad,) = result.extra["malicious"]["clients"]
    assert result.extra["robust_consensus"]["dropped_rounds"][bad] == 6  # left out every round


def test_reputation_keeps_two_flippers_out_where_the_plain_vote_fails(breast_cancer_fed):
    plain, _ = _honest_gap(breast_cancer_fed, "none", 2)
    robust, _ = _honest_gap(breast_cancer_fed, "reputation", 2)
    assert robust <= 0.02 < plain - 0.05


@pytest.mark.parametrize("robust", ["reputation", "trimmed"])
def test_a_resumed_robust_run_equals_the_uninterrupted_one(breast_cancer_fed, tmp_path,
                                                           robust):
    """The robust consensus's history is server state: a resumed run continues it exactly."""
    from fedlabels.engines import simulate
    from fedlabels.learners import as_models
    from fedlabels.methods import METHODS

    def sim(**kw):
        return simulate(METHODS["fedct"], breast_cancer_fed, as_models("dt"), rounds=4,
                        seed=0, progress=False, options={"robust": robust}, malicious=1,
                        attack="flip", **kw)

    def stop_after_2(record):
        if record.round == 2:
            raise KeyboardInterrupt

    full = sim()
    path = tmp_path / "run.checkpoint.npz"
    assert sim(checkpoint=path, on_round=stop_after_2).extra.get("interrupted")
    resumed = sim(resume=path)
    assert resumed.final["client_accuracies"] == full.final["client_accuracies"]
    assert resumed.extra["robust_consensus"] == full.extra["robust_consensus"]
    assert [r.server for r in resumed.rounds] == [r.server for r in full.rounds]


# ----------------------------------------------------------- what an attack corrupts, declared
def test_what_an_attack_corrupts_comes_from_the_threat_models():
    """Attackable methods and corrupted values are read from each method's payloads: every
    method that sends labels or parameters is attackable, the others are refused."""
    from fedlabels.method.adversary import corruptions
    from fedlabels.method.threat import Payload, ThreatModel
    from fedlabels.methods import METHODS

    able = {name for name, method in METHODS.items() if corruptions(method.threat_model)}
    assert {"fedct", "dp-fedct", "pate", "dp-pate", "dd", "fedmd", "fedavg", "dp-fedavg",
            "fedavg-xclp", "ds-fl", "feddf", "fredy"} == able
    assert not able & {"local", "centralized", "xclp", "perclient-lp"}
    for name, method in METHODS.items():  # nothing but a declared payload is a target
        for kind, key in corruptions(method.threat_model):
            assert method.threat_model.payload(kind, key) is not None, (name, kind, key)
    dp = corruptions(METHODS["dp-fedct"].threat_model)
    assert ("dpfedct.dpsgd_labels", "labels") in dp and ("dpfedct.bits", "bits") in dp
    assert ("dpfedct.sa_labels", "dd_rdp") not in dp  # a metric: sent as it is
    # hard labels whose number the payload does not say (a subset of U) are left alone
    assert not corruptions(ThreatModel(
        view="v", adversary="a", sees="s",
        payloads=(Payload("x", "labels", "hard-labels", rows="subset"),)))


def test_dpsgd_labels_of_a_malicious_dp_fedct_client_are_corrupted(breast_cancer_fed):
    """DP-FedCT's dpsgd release is a declared hard-label payload, so it is attacked too
    (a fixed list of message kinds used to leave it honest)."""
    from fedlabels.comm import unpack_labels
    from fedlabels.engines.inprocess import simulate
    from fedlabels.learners import as_models

    def first_round(**kw):
        sent: dict[int, np.ndarray] = {}

        class Observing:
            def __init__(self, inner):
                self.inner, self.client_ids = inner, inner.client_ids

            def exchange(self, messages, rnd):
                replies = self.inner.exchange(messages, rnd)
                for cid, reply in replies.items():
                    if rnd == 0 and reply.kind == "dpfedct.dpsgd_labels":
                        sent[cid] = unpack_labels(reply.arrays["labels"],
                                                  len(breast_cancer_fed.X_public), 2)
                return replies

        result = simulate(get_method("dp-fedct"), breast_cancer_fed, as_models(MLP),
                          rounds=1, period=5, seed=0, progress=False, wrap_grid=Observing,
                          insecure_reproducible_noise=True, **kw,
                          options={"epsilon": 8.0, "mechanism": "dpsgd", "example_rate": 0.1})
        return sent, result

    honest, _ = first_round()
    attacked, result = first_round(malicious=2, attack="flip")
    bad = result.extra["malicious"]["clients"]
    for cid in range(5):
        expected = 1 - honest[cid] if cid in bad else honest[cid]
        assert attacked[cid].tolist() == expected.tolist(), cid


def test_labels_on_rows_an_attack_cannot_size_are_not_called_no_labels():
    """A plug-in declaring hard labels on a subset of U it picks itself (rows 'subset') was
    told it 'sends no labels'; the refusal names what an attack can change instead."""
    from types import SimpleNamespace

    from fedlabels.method.threat import Payload, ThreatModel

    method = SimpleNamespace(name="topk", threat_model=ThreatModel(
        view="hard-labels-on-queries", adversary="server", sees="labels", payloads=(
            Payload("topk.labels", "labels", "hard-labels", rows="subset"),)))
    with pytest.raises(FedLabelsError) as refused:
        Attack.parse("flip").check(method)  # type: ignore[arg-type]
    assert "sends no labels" not in str(refused.value)
    assert "hard labels or votes on rows 'public' or 'queries'" in str(refused.value)
