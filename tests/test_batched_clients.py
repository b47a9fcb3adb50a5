"""Clients trained together (stacked weights, ``vmap``) equal clients trained one after
another: same initialisation and minibatches give the same weights to rounding, and the
accuracies over seeds are indistinguishable."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from fedlabels.learners import build_learner, parse_model_spec
from fedlabels.learners.batched import (
    PredictJob,
    TrainJob,
    batch_groups,
    predict_groups,
    predict_together,
    train_together,
)
from fedlabels.learners.resident_rows import ResidentRows


def digits_clients(sizes, seed=0):
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    X = (X / 16.0).astype(np.float32)
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(y))
    out, start = [], 0
    for n in sizes:
        idx = order[start : start + n]
        out.append((X[idx], y[idx]))
        start += n
    test = order[start : start + 400]
    return out, (X, y), (X[test], y[test])


def learners(spec, n, seed=0):
    (s,) = parse_model_spec(spec)
    return [build_learner(s, n_classes=10, random_state=seed + i) for i in range(n)]


def jobs_for(models, clients, steps, public=None, rng=None):
    jobs = []
    for m, (X, y) in zip(models, clients, strict=True):
        if public is None:
            jobs.append(TrainJob(m, X, y, steps))
        else:  # FedCT's pseudo-labelled U, gathered by index, one set per client
            Xu, yu = public
            index = np.sort(rng.choice(len(yu), size=rng.integers(50, 300), replace=False))
            jobs.append(TrainJob(m, X, y, steps, Xu, yu[index], aux_index=index))
    return jobs


@pytest.mark.parametrize("spec", ["mlp(hidden=32-16)", "cnn(arch=small)",
                                  "module:user_nets:tiny_cnn"])
def test_same_init_and_batches_give_the_same_weights(spec):
    clients, public, _ = digits_clients((40, 75, 130, 61))  # unequal, one below the batch
    seq, bat = learners(spec, 4), learners(spec, 4)
    for round_ in range(2):  # warm-started: the second call continues Adam's moments
        rng_a, rng_b = np.random.default_rng(round_), np.random.default_rng(round_)
        for job in jobs_for(seq, clients, 6, public, rng_a):
            job.learner.train_steps(job.X, job.y, job.n_steps, job.X_aux, job.y_aux,
                                    aux_index=job.aux_index)
        jobs = jobs_for(bat, clients, 6, public, rng_b)
        assert [len(g) for g in batch_groups(jobs)] == [4]  # one group: really batched
        train_together(jobs)
    for a, b in zip(seq, bat, strict=True):
        wa, wb = a.get_weights(), b.get_weights()
        # batched convolutions sum in another order; Adam divides by sqrt(v), so a weight
        # whose gradient is ~0 may move by up to one step (lr = 1e-3) apart: rare, bounded
        close = np.isclose(wa, wb, rtol=1e-4, atol=1e-5)
        assert close.mean() > 0.99 and np.abs(wa - wb).max() < 1e-3
        assert a.steps_ == b.steps_ == 12
        sa, sb = a.state_dict(), b.state_dict()
        assert sa["cursor.0.pos"] == sb["cursor.0.pos"]  # the same minibatches were drawn
        np.testing.assert_array_equal(sa["cursor.1.order"], sb["cursor.1.order"])


@pytest.mark.parametrize("spec", ["mlp(hidden=32-16)", "cnn(arch=small)",
                                  "module:user_nets:tiny_cnn"])
def test_one_step_computes_each_clients_own_gradient(spec):
    clients, public, _ = digits_clients((40, 75, 130, 61))
    seq, bat = learners(spec, 4), learners(spec, 4)
    for job in jobs_for(seq, clients, 1, public, np.random.default_rng(0)):
        job.learner.train_steps(job.X, job.y, 1, job.X_aux, job.y_aux, aux_index=job.aux_index)
    train_together(jobs_for(bat, clients, 1, public, np.random.default_rng(0)))
    for a, b in zip(seq, bat, strict=True):
        sa, sb = a.state_dict(), b.state_dict()
        moments = [k for k in sa if k.endswith("exp_avg")]  # (1 - beta1) * gradient
        assert moments
        for key in moments:
            scale = np.abs(sa[key]).max()
            assert np.abs(sa[key] - sb[key]).max() <= 1e-4 * scale + 1e-9, key


@pytest.mark.parametrize("spec", ["mlp(hidden=32-16)", "cnn(arch=small)",
                                  "module:user_nets:tiny_cnn"])
def test_clients_predict_together_what_they_predict_one_by_one(spec):
    clients, (X_all, _), _ = digits_clients((40, 75, 130, 61))
    models = learners(spec, 4)
    for i, (m, (X, y)) in enumerate(zip(models, clients, strict=True)):
        m.train_steps(X, y, 3 + 4 * i)  # unequal training: different weights and step counts
        m.predict_batch_size = 100  # several chunks, the last one short
    U = X_all[:733]
    alone_u = [m.predict_proba(U) for m in models]
    alone_own = [m.predict_proba(X) for m, (X, _) in zip(models, clients, strict=True)]
    shared = [PredictJob(m, U) for m in models]  # FedCT's U: one array for every client
    own = [PredictJob(m, X) for m, (X, _) in zip(models, clients, strict=True)]  # unequal
    assert predict_groups(shared) == predict_groups(own) == [[0, 1, 2, 3]]
    predict_together(shared)
    predict_together(own)
    rows = ResidentRows()  # a run's cache: U built once, then read in chunks from the device
    kept = [[PredictJob(m, U) for m in models] for _ in range(2)]
    for jobs in kept:
        predict_together(jobs, rows)
    assert (rows.builds, rows.hits) == (1, 1)
    for jobs, alone in ((shared, alone_u), (own, alone_own), *((j, alone_u) for j in kept)):
        for job, ref in zip(jobs, alone, strict=True):
            assert job.out.shape == ref.shape and job.out.dtype == np.float32
            np.testing.assert_allclose(job.out, ref, rtol=1e-5, atol=1e-6)
            top = np.sort(ref, axis=1)[:, -2:]
            clear = top[:, 1] - top[:, 0] > 1e-4  # rows without a near tie
            np.testing.assert_array_equal(job.out.argmax(1)[clear], ref.argmax(1)[clear])


@pytest.mark.parametrize("spec", ["mlp(hidden=32-16)", "cnn(arch=small)"])
def test_a_group_predicts_predict_batch_size_rows_in_all_a_pass(spec):
    # m clients' chunks of predict_batch_size rows each held m times one client's
    # activations (DS-FL's mlp at 50 clients peaked at 1.5 GB): a pass takes that many in all
    clients, (X_all, _), _ = digits_clients((40, 75, 130, 61))
    models = learners(spec, 4)
    seen: list[int] = []
    for m, (X, y) in zip(models, clients, strict=True):
        m.train_steps(X, y, 2)
        m.predict_batch_size = 100
        alone = m._inputs

        def counted(x, *args, _alone=alone, **kwargs):
            seen.append(len(x))
            return _alone(x, *args, **kwargs)
        m._inputs = counted
    U = X_all[:333]
    for jobs in ([PredictJob(m, U) for m in models],
                 [PredictJob(m, X) for m, (X, _) in zip(models, clients, strict=True)]):
        seen.clear()
        predict_together(jobs)
        shared = jobs[0].X is jobs[1].X
        per_pass = 1 if shared else 4  # a shared U's chunk once, else each client's own
        assert max(seen) * 4 <= 100 and len(seen) % per_pass == 0, seen
        for job in jobs:
            np.testing.assert_allclose(job.out, job.learner._predict_proba_alone(job.X),
                                       rtol=1e-5, atol=1e-6)


def test_different_architectures_predict_in_their_own_groups():
    clients, (X_all, _), _ = digits_clients((40, 50, 60, 70))
    models = learners("mlp(hidden=8)", 2) + learners("mlp(hidden=16)", 1) + \
        learners("cnn(arch=cifar10)", 1)
    for m, (X, y) in zip(models, clients, strict=True):
        m.train_steps(X, y, 2)
    jobs = [PredictJob(m, X_all[:300]) for m in models]
    assert sorted(map(sorted, predict_groups(jobs))) == [[0, 1], [2], [3]]
    predict_together(jobs)
    for job, m in zip(jobs, models, strict=True):
        np.testing.assert_allclose(job.out, m.predict_proba(X_all[:300]), rtol=1e-5,
                                   atol=1e-6)


def test_a_round_predicts_u_and_the_test_set_in_one_batched_call(monkeypatch):
    import fedlabels as fl
    from conftest import digits_with_sizes
    from fedlabels.learners import batched

    calls = []
    real = batched._predict_group

    def spy(jobs, rows=None):  # the real function, counted
        calls.append((len(jobs), len(jobs[0].X)))
        real(jobs, rows)

    monkeypatch.setattr(batched, "_predict_group", spy)
    fed = digits_with_sizes((40, 90, 150, 60), n_unlabeled=300, n_test=250)
    result = fl.run("fedct", fed, model="mlp(hidden=32)", rounds=3, period=4, seed=0,
                    progress=False, participation=3, batch_clients="on", eval_every=1)
    # every round: the 3 participants predict U together, then the clients that hold a
    # model (3 in the first round, all 4 later) predict the test set together
    assert [c for c in calls if c[1] == 300] == [(3, 300)] * 3, calls
    assert [n for n, rows in calls if rows == 250] in ([3, 4, 4], [3, 3, 4]), calls
    assert len(calls) == 6
    assert [len(r.participants) for r in result.rounds] == [3, 3, 3]


def test_learners_that_cannot_be_batched_train_alone():
    clients, _, _ = digits_clients((40, 50, 60))
    models = learners("cnn(arch=cifar10)", 2) + learners("mlp(hidden=8)", 1)
    jobs = jobs_for(models, clients, 2)
    train_together(jobs)
    assert sorted(len(g) for g in batch_groups(jobs)) == [1, 1, 1]  # batch norm, 1 mlp
    assert all(m.steps_ == 2 for m in models)


def test_batched_and_sequential_accuracies_are_indistinguishable_over_seeds():
    accs = {"seq": [], "bat": []}
    for seed in range(4):
        clients, _, (Xt, yt) = digits_clients((60, 90, 120, 150), seed=seed)
        for kind in accs:
            models = learners("mlp(hidden=32,lr=0.01)", 4, seed=100 * seed)
            if kind == "seq":
                for m, (X, y) in zip(models, clients, strict=True):
                    m.train_steps(X, y, 60)
            else:
                train_together(jobs_for(models, clients, 60))
            accs[kind] += [float((m.predict(Xt) == yt).mean()) for m in models]
    seq, bat = np.asarray(accs["seq"]), np.asarray(accs["bat"])
    assert seq.mean() > 0.7
    # paired over the same 16 (seed, client) cells: no detectable difference
    assert stats.wilcoxon(seq, bat, zero_method="zsplit").pvalue > 0.05
    assert np.abs(seq - bat).max() < 0.02


@pytest.mark.parametrize("method", ["fedct", "fedavg"])
def test_a_run_with_clients_together_equals_the_sequential_run(method):
    import fedlabels as fl
    from conftest import digits_with_sizes

    fed = digits_with_sizes((40, 90, 150, 60), n_unlabeled=300, n_test=300)
    runs = {mode: fl.run(method, fed, model="mlp(hidden=32)", rounds=3, period=8, seed=0,
                         progress=False, participation=3, batch_clients=mode)
            for mode in ("off", "on")}
    off, on = runs["off"], runs["on"]
    assert on.extra["device"]["batched_clients"] and not off.extra["device"]["batched_clients"]
    assert [r.participants for r in on.rounds] == [r.participants for r in off.rounds]
    assert [r.bytes_up for r in on.rounds] == [r.bytes_up for r in off.rounds]
    for a, b in zip(off.client_models, on.client_models, strict=True):
        np.testing.assert_allclose(a.get_weights(), b.get_weights(), atol=2e-3)
    assert abs(on.final["mean_accuracy"] - off.final["mean_accuracy"]) < 0.03


def test_batch_clients_on_is_refused_for_learners_that_cannot(capsys):
    from fedlabels.cli import main

    code = main(["run", "--method", "fedct", "--dataset", "digits", "--clients", "3",
                 "--model", "module:user_nets:cumulative_bn", "--rounds", "1",
                 "--batch-clients", "on", "--no-progress", "--no-checkpoint"])
    assert code == 2 and "batch_clients=on needs" in capsys.readouterr().err


def test_written_back_moments_are_each_learners_own_tensors():
    """After a batched call every learner holds its weights and Adam moments in tensors of
    its own (no view into the group's stacked ones, which would keep them alive), and the
    second call continues them in place."""
    clients, _, _ = digits_clients((40, 75, 61))
    models = learners("mlp(hidden=16)", 3)
    for _ in range(2):
        train_together([TrainJob(m, X, y, 3) for m, (X, y) in zip(models, clients,
                                                                     strict=True)])
        storages = set()
        for m in models:
            for p in m.model_.parameters():
                state = m.optimizer_.state[p]
                assert int(state["step"]) == m.steps_
                for t in (p, state["exp_avg"], state["exp_avg_sq"]):
                    assert t._base is None and t.shape == p.shape
                    storages.add(t.untyped_storage().data_ptr())
        assert len(storages) == 3 * sum(1 for m in models for _ in m.model_.parameters())


def test_a_learner_whose_adam_holds_other_tensors_than_its_network_trains_alone():
    """Stacking reads each learner's parameters from its Adam: an Adam over part of the
    network (a user's optimizer factory) must keep the learner out of any group."""
    import torch

    from fedlabels.learners.batched import batch_key
    from fedlabels.learners.torch_net import TorchNetClassifier
    from user_nets import tiny_mlp

    clients, _, _ = digits_clients((40, 75, 60))

    def head_only(params):
        return torch.optim.Adam(list(params)[2:])

    partial, *whole = (TorchNetClassifier(tiny_mlp, n_classes=10, random_state=i,
                                          optimizer=opt)
                       for i, opt in enumerate((head_only, None, None)))
    models = (partial, *whole)
    jobs = [TrainJob(m, X, y, 2) for m, (X, y) in zip(models, clients, strict=True)]
    assert batch_groups(jobs) == [[1, 2], [0]]  # built, then judged: the partial one alone
    assert batch_key(partial) is None
    train_together(jobs)
    assert all(m.steps_ == 2 for m in models)


@pytest.mark.parametrize("spec", ["mlp(hidden=32-16)", "cnn(arch=small)",
                                  "module:user_nets:tiny_cnn", "module:user_nets:with_buffer"])
def test_stacked_state_is_what_torch_func_stacks(spec):
    import torch
    from torch.func import stack_module_state

    from fedlabels.learners.batched import stacked_state

    clients, _, _ = digits_clients((40, 75, 60))
    models = learners(spec, 3)
    train_together([TrainJob(m, X, y, 2) for m, (X, y) in zip(models, clients, strict=True)])
    ours, our_buffers = stacked_state(models)
    theirs, their_buffers = stack_module_state([m.model_ for m in models])
    assert list(ours) == list(theirs) and list(our_buffers) == list(their_buffers)
    assert bool(their_buffers) == ("with_buffer" in spec)  # the fallback's case
    for name in theirs:
        assert torch.equal(ours[name], theirs[name])
        assert ours[name].is_leaf and ours[name].requires_grad
    for name in their_buffers:
        assert torch.equal(our_buffers[name], their_buffers[name])
    first = next(iter(ours.values()))
    with torch.no_grad():
        first.add_(1.0)  # the stack is a copy: the learners' own weights stay
    assert not torch.equal(first[0], next(iter(models[0].model_.parameters())))
