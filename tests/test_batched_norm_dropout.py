"""Batch normalisation and dropout trained together (the papers' CNNs).

Batch normalisation: each client's running statistics are its own stacked buffers, so a
group's steps equal the clients' steps alone up to rounding (weights, Adam moments, running
statistics, the minibatches drawn), and clients whose batches differ in size train in
groups of their own (no padding row in a batch's statistics). Dropout: each client draws
its step's seed from its own generator as alone (its later draws stay the sequential
run's), and its masks are independent Bernoulli draws (checked against the binomial
distribution), not the same draws as alone.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from fedlabels.learners.batch_jobs import DistillJob, PredictJob, TrainJob
from fedlabels.learners.batched import (
    batch_groups,
    predict_groups,
    predict_together,
    stack_for_training,
    train_together,
)
from fedlabels.learners.batched_distill import distill_groups, distill_together
from fedlabels.learners.torch_net import TorchNetClassifier
from test_batched_clients import digits_clients, jobs_for
from user_nets import (
    always_dropout,
    bn_dropout_net,
    bn_net,
    bn_without_running_stats,
    functional_dropout,
)

CPU_AND_CUDA = pytest.mark.parametrize(
    "device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
#: on a GPU (together) against the CPU (alone): other kernels, other rounding
TOLERANCE = {"cpu": {"rtol": 1e-4, "atol": 1e-5}, "cuda": {"rtol": 1e-3, "atol": 1e-4}}


def nets(factory, n, batch_size=32, device="cpu"):
    models = [TorchNetClassifier(factory, n_classes=10, random_state=i, batch_size=batch_size)
              for i in range(n)]
    for m in models:
        m.place(device)
    return models


def train_alone(models, jobs):
    for m, job in zip(models, jobs, strict=True):
        m.train_steps(job.X, job.y, job.n_steps, job.X_aux, job.y_aux,
                      aux_index=job.aux_index)


def assert_same_state(a, b, rtol=1e-4, atol=1e-5):
    sa, sb = a.state_dict(), b.state_dict()
    assert sorted(sa) == sorted(sb)
    for key in sa:
        if isinstance(sa[key], np.ndarray) and sa[key].dtype.kind == "f":
            np.testing.assert_allclose(sa[key], sb[key], rtol=rtol, atol=atol, err_msg=key)
        elif isinstance(sa[key], np.ndarray):
            np.testing.assert_array_equal(sa[key], sb[key], err_msg=key)
        else:
            assert sa[key] == sb[key], key


@CPU_AND_CUDA
def test_batch_norm_trains_together_as_each_client_alone(device):
    """Three clients with full batches of 32 train as one group, the fourth (20 rows, fewer
    than a batch) in a group of its own; after two warm-started calls of 9 steps (several
    epochs, reshuffled) every state entry matches the client trained alone, running
    statistics and their step count included."""
    clients, public, _ = digits_clients((70, 90, 130, 20))
    alone, together = nets(bn_net, 4), nets(bn_net, 4, device=device)
    for round_ in range(2):
        train_alone(alone, jobs_for(alone, clients, 9, public, np.random.default_rng(round_)))
        jobs = jobs_for(together, clients, 9, public, np.random.default_rng(round_))
        assert sorted(map(sorted, batch_groups(jobs))) == [[0, 1, 2], [3]]
        train_together(jobs)
        for m in (*alone, *together):  # evaluation mode between calls, as in a round
            m.predict_proba(clients[0][0][:5])
    for a, b in zip(alone, together, strict=True):
        assert_same_state(a, b, **TOLERANCE[device])
        assert int(b.model_[1].num_batches_tracked) == 18
        assert float(b.model_[1].running_var.sub(1.0).abs().max()) > 1e-3  # it moved


def test_clients_whose_batches_differ_in_size_are_not_padded_into_one_group():
    """Without the size rule the 20-row client would join the group padded to 32 rows, and
    its padding would enter the batch statistics: its state would differ from alone."""
    clients, _, _ = digits_clients((20, 50, 33))
    jobs = [TrainJob(m, X, y, 4) for m, (X, y) in zip(nets(bn_net, 3), clients, strict=True)]
    assert sorted(map(sorted, batch_groups(jobs))) == [[0], [1, 2]]


@CPU_AND_CUDA
def test_dropout_draws_each_clients_seed_as_alone(device):
    """With dropout the group draws each client's seed from the client's generator every
    step, as its forward pass does alone: with p = 0 (masks of ones) the states equal the
    sequential run's, generator and cursors included, over several epochs."""
    clients, public, _ = digits_clients((70, 90, 130))
    alone = nets(lambda n_features, n_classes: bn_dropout_net(n_features, n_classes, 0.0), 3)
    together = nets(lambda n_features, n_classes: bn_dropout_net(n_features, n_classes, 0.0),
                    3, device=device)
    train_alone(alone, jobs_for(alone, clients, 11, public, np.random.default_rng(0)))
    jobs = jobs_for(together, clients, 11, public, np.random.default_rng(0))
    assert [len(g) for g in batch_groups(jobs)] == [3]
    train_together(jobs)
    for a, b in zip(alone, together, strict=True):
        assert_same_state(a, b, **TOLERANCE[device])


def test_dropout_masks_are_each_clients_own_bernoulli_draws():
    """A network that sums its inputs after dropout (p = 0.3) on rows of ones counts the
    kept inputs: over 3 clients × 64 rows × 200 inputs the kept share is 0.7 within four
    binomial standard deviations, scaled by 1 / 0.7; the clients' masks differ, and one
    seed repeats its masks."""
    p, d = 0.3, 200

    def summing(n_features, n_classes):
        net = torch.nn.Sequential(torch.nn.Dropout(p),
                                  torch.nn.Linear(n_features, n_classes, bias=False))
        torch.nn.init.ones_(net[1].weight)
        return net

    models = [TorchNetClassifier(summing, n_classes=2, random_state=i) for i in range(3)]
    X = np.ones((10, d), dtype=np.float32)
    for m in models:
        m._ensure_initialised(X, np.array([0, 1] * 5))
    _, _, forward = stack_for_training(models)
    x = torch.ones((3, 64, d))
    with torch.no_grad():
        out = forward(x, 12345)[..., 0]  # kept inputs / 0.7, per client and row
        again = forward(x, 12345)[..., 0]
        other = forward(x, 54321)[..., 0]
    kept = out * (1 - p)
    np.testing.assert_allclose(kept, np.round(kept), atol=1e-3)  # whole counts: scaled
    n = kept.numel() * d
    share = float(kept.sum()) / n
    assert abs(share - (1 - p)) < 4 * np.sqrt(p * (1 - p) / n)
    assert not torch.equal(out[0], out[1]) and not torch.equal(out[1], out[2])
    assert torch.equal(out, again) and not torch.equal(out, other)


def test_dropout_trained_together_keeps_the_sequential_draws_not_the_masks():
    """p = 0.5: the weights differ from alone (other masks), while each client's generator,
    and so its minibatches, end where they end alone."""
    clients, _, _ = digits_clients((70, 90, 130))
    alone, together = nets(bn_dropout_net, 3), nets(bn_dropout_net, 3)
    train_alone(alone, [TrainJob(m, X, y, 7) for m, (X, y) in zip(alone, clients,
                                                                    strict=True)])
    train_together([TrainJob(m, X, y, 7) for m, (X, y) in zip(together, clients,
                                                                strict=True)])
    for a, b in zip(alone, together, strict=True):
        sa, sb = a.state_dict(), b.state_dict()
        rng = [k for k in sa if k.startswith(("rng.", "cursor."))]
        assert rng and all(np.array_equal(sa[k], sb[k]) if isinstance(sa[k], np.ndarray)
                           else sa[k] == sb[k] for k in rng)
        assert not np.allclose(a.get_weights(), b.get_weights(), atol=1e-6)


def test_batch_norm_clients_predict_together_with_their_running_statistics():
    clients, (X_all, _), _ = digits_clients((70, 90, 130))
    models = nets(bn_dropout_net, 3)
    for i, (m, (X, y)) in enumerate(zip(models, clients, strict=True)):
        m.train_steps(X, y, 5 + 3 * i)
        m.predict_batch_size = 100
    U = X_all[:333]
    alone = [m.predict_proba(U) for m in models]
    jobs = [PredictJob(m, U) for m in models]
    predict_together(jobs)
    for a, job in zip(alone, jobs, strict=True):
        np.testing.assert_allclose(job.out, a, rtol=1e-4, atol=1e-6)


def distill_jobs(models, clients, X_soft, steps, private=True):
    rng = np.random.default_rng(7)
    P = rng.dirichlet(np.ones(10), size=len(X_soft)).astype(np.float32)
    return [DistillJob(m, X_soft, P, steps, *((X, y) if private else (None, None)), 0.7)
            for m, (X, y) in zip(models, clients, strict=True)]


def distil_alone(jobs):
    for job in jobs:
        job.learner.distill_steps(job.X_soft, job.P_soft, job.n_steps, X=job.X, y=job.y,
                                  weight=job.weight)


@pytest.mark.parametrize("private", [True, False])
def test_batch_norm_distils_together_as_each_client_alone(private):
    """DD's step (soft rows, then private rows: two passes, two sets of batch statistics)
    and FedMD's digest (soft rows only), two warm-started calls of 7 steps: every state entry
    equals the client distilling alone; a client with fewer private rows than a batch
    distils in a group of its own."""
    clients, (X_all, _), _ = digits_clients((70, 90, 130, 20))
    alone, together = nets(bn_net, 4), nets(bn_net, 4)
    for m, (X, y) in zip((*alone, *together), clients * 2, strict=True):
        m.train_steps(X, y, 1)
    for _ in range(2):
        distil_alone(distill_jobs(alone, clients, X_all[:100], 7, private))
        jobs = distill_jobs(together, clients, X_all[:100], 7, private)
        groups = sorted(map(sorted, distill_groups(jobs)))
        assert groups == ([[0, 1, 2], [3]] if private else [[0, 1, 2, 3]])
        distill_together(jobs)
    for a, b in zip(alone, together, strict=True):
        assert_same_state(a, b)


def test_dropout_distils_together_with_each_clients_draws():
    """With dropout each client draws its soft pass's seed after its soft minibatch and its
    private pass's after its private one, as alone: at p = 0 every state entry equals the
    client alone over several epochs of both cursors; at p = 0.5 the generators and cursors
    do, the weights do not (other masks)."""
    clients, (X_all, _), _ = digits_clients((70, 90, 130))
    for p, exact in ((0.0, True), (0.5, False)):
        def net(n_features, n_classes, p=p):
            return bn_dropout_net(n_features, n_classes, p)

        alone, together = nets(net, 3), nets(net, 3)
        for m, (X, y) in zip((*alone, *together), clients * 2, strict=True):
            m.train_steps(X, y, 1)
        distil_alone(distill_jobs(alone, clients, X_all[:100], 9))
        jobs = distill_jobs(together, clients, X_all[:100], 9)
        assert [len(g) for g in distill_groups(jobs)] == [3]
        distill_together(jobs)
        for a, b in zip(alone, together, strict=True):
            if exact:
                assert_same_state(a, b)
                continue
            sa, sb = a.state_dict(), b.state_dict()
            drawn = [k for k in sa if k.startswith(("rng.", "cursor."))]
            assert all(np.array_equal(sa[k], sb[k]) if isinstance(sa[k], np.ndarray)
                       else sa[k] == sb[k] for k in drawn)
            assert not np.allclose(a.get_weights(), b.get_weights(), atol=1e-6)


@pytest.mark.parametrize("arch", ["pneumonia", "cifar10"])
def test_a_fedct_run_trains_the_papers_cnns_together(arch):
    """The papers' CNNs (batch normalisation and dropout) run FedCT with the clients
    trained together: the device record says so, and the run repeats under one seed."""
    import fedlabels as fl
    from conftest import digits_with_sizes

    fed = digits_with_sizes((60, 90, 150), n_unlabeled=200, n_test=200)
    runs = [fl.run("fedct", fed, model=f"cnn(arch={arch})", rounds=2, period=3, seed=0,
                   progress=False, batch_clients="on") for _ in range(2)]
    assert all(r.extra["device"]["batched_clients"] for r in runs)
    assert runs[0].final == runs[1].final


def test_dropout_trained_together_learns_as_alone_over_seeds():
    """Equal in distribution, by what the networks learn: 5 data seeds × 4 clients of the
    batch-normalised dropout network (p = 0.5), 60 steps alone and together; the paired
    test accuracies show no detectable difference (Wilcoxon) and their means agree."""
    accs: dict[str, list[float]] = {"alone": [], "together": []}
    for seed in range(5):
        clients, _, (Xt, yt) = digits_clients((60, 90, 120, 150), seed=seed)
        for kind in accs:
            models = [TorchNetClassifier(bn_dropout_net, n_classes=10, batch_size=32,
                                         learning_rate=0.01, random_state=100 * seed + i)
                      for i in range(4)]
            jobs = [TrainJob(m, X, y, 60) for m, (X, y) in zip(models, clients, strict=True)]
            if kind == "alone":
                train_alone(models, jobs)
            else:
                assert [len(g) for g in batch_groups(jobs)] == [4]
                train_together(jobs)
            accs[kind] += [float((m.predict(Xt) == yt).mean()) for m in models]
    alone, together = np.asarray(accs["alone"]), np.asarray(accs["together"])
    assert alone.mean() > 0.7
    assert stats.wilcoxon(alone, together, zero_method="zsplit").pvalue > 0.05
    assert abs(alone.mean() - together.mean()) < 0.02


def test_batch_norm_without_running_statistics_predicts_alone():
    """Such a network normalises by the batch's statistics in evaluation too, so in a group
    the padding of a client with fewer rows would enter them: it predicts alone, and so
    its probabilities are its own."""
    clients, _, _ = digits_clients((70, 90, 130))
    models = nets(bn_without_running_stats, 3)
    for m, (X, y) in zip(models, clients, strict=True):
        m.train_steps(X, y, 3)
    jobs = [PredictJob(m, X[:n]) for m, (X, _), n in zip(models, clients, (50, 70, 90),
                                                           strict=True)]
    assert sorted(map(sorted, predict_groups(jobs))) == [[0], [1], [2]]
    predict_together(jobs)
    for m, job in zip(models, jobs, strict=True):
        np.testing.assert_allclose(job.out, m.predict_proba(job.X), rtol=1e-5, atol=1e-7)


def test_a_network_drawing_in_evaluation_predicts_together():
    """Monte Carlo dropout (``F.dropout(training=True)`` in its forward) draws random
    numbers when predicting: together each client draws its own, and the probabilities are
    probabilities."""
    clients, (X_all, _), _ = digits_clients((70, 90, 130))
    models = nets(always_dropout, 3)
    for m, (X, y) in zip(models, clients, strict=True):
        m.train_steps(X, y, 3)
    jobs = [PredictJob(m, X_all[:50]) for m in models]
    assert [len(g) for g in predict_groups(jobs)] == [3]
    predict_together(jobs)
    for job in jobs:
        assert job.out.shape == (50, 10) and np.allclose(job.out.sum(1), 1, atol=1e-5)


def test_a_network_drawing_its_own_dropout_trains_together():
    """``F.dropout`` in a user's forward (no ``nn.Dropout`` layer to see): each client draws
    its own masks inside the group, as it draws from torch's generator alone."""
    clients, _, _ = digits_clients((70, 90, 130))
    models = nets(functional_dropout, 3)
    jobs = [TrainJob(m, X, y, 4) for m, (X, y) in zip(models, clients, strict=True)]
    assert [len(g) for g in batch_groups(jobs)] == [3]
    train_together(jobs)
    assert all(m.steps_ == 4 for m in models)
