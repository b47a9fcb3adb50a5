"""Distillation and DP-SGD steps of many clients run together equal the clients' one-by-one
calls: the same cursors and generators give the same weights, Adam moments and cursor
positions up to rounding; through the simulator, DD, FedMD and DS-FL equal their sequential
runs, and DP-FedAvg and DP-FedCT train batched with each client's accounting unchanged."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedlabels.learners.batch_jobs import DistillJob, DPSGDJob
from fedlabels.learners.batched_distill import _Plan, distill_groups, distill_together
from fedlabels.learners.batched_dpsgd import dpsgd_groups, dpsgd_together
from fedlabels.learners.dpsgd import DPSGDConfig, dpsgd_steps
from test_batched_clients import digits_clients, learners

SIZES = (40, 75, 130, 61)  # unequal; one client below the batch size


def assert_same_learners(seq, bat, tol=1e-6):
    for a, b in zip(seq, bat, strict=True):
        assert a.steps_ == b.steps_
        sa, sb = a.state_dict(), b.state_dict()
        assert sa.keys() == sb.keys()
        for key, value in sa.items():
            if key.startswith(("model.", "opt.")) and isinstance(value, np.ndarray) \
                    and value.dtype.kind == "f":
                scale = max(float(np.abs(value).max(initial=0.0)), 1e-3)
                assert np.abs(value - sb[key]).max() <= tol * scale, key
            elif key.startswith(("cursor.", "rng.")):  # the same minibatches were drawn
                np.testing.assert_array_equal(value, sb[key], err_msg=key)


def dp_jobs(models, clients, steps, config, seed, public=None):
    jobs = []
    for i, (m, (X, y)) in enumerate(zip(models, clients, strict=True)):
        X = X.astype(np.float32)
        m._ensure_initialised(X, y)
        rng = np.random.default_rng([seed, i])  # stands for the client's secret generator
        if public is None:
            jobs.append(DPSGDJob(m, X, y, steps, config, rng))
        else:  # FedCT's pseudo-labelled U, by index, a different subset per client
            Xu, yu = public
            index = np.arange(70 * i, 70 * i + 90 + 40 * i)
            jobs.append(DPSGDJob(m, X, y, steps, config, rng, Xu, yu[index], index))
    return jobs


CPU_AND_CUDA = pytest.mark.parametrize(
    "device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])


def placed(spec, n, device):
    models = learners(spec, n)
    for m in models:
        m.place(device)
    return models


@CPU_AND_CUDA
@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("with_public", [False, True])
def test_dpsgd_steps_together_equal_each_clients_own_steps(with_public, threads, device):
    """Batched (on the CPU, or on a GPU; the noise drawn by 1 or 3 host threads) against
    one by one on the CPU."""
    clients, public, _ = digits_clients(SIZES)
    config = DPSGDConfig(noise_multiplier=1.1, sample_rate=0.2, clip=0.5)
    seq, bat = learners("mlp(hidden=32-16)", 4), placed("mlp(hidden=32-16)", 4, device)
    for call in range(2):  # warm-started: the second call continues Adam's moments
        for job in dp_jobs(seq, clients, 5, config, call, public if with_public else None):
            dpsgd_steps(job.learner, job.X, job.y, job.n_steps, job.config, job.rng,
                        job.X_aux, job.y_aux, job.aux_index)
        jobs = dp_jobs(bat, clients, 5, config, call, public if with_public else None)
        assert dpsgd_groups(jobs) == [[0, 1, 2, 3]]  # really batched
        dpsgd_together(jobs, threads=threads)
    assert_same_learners(seq, bat, tol=1e-6 if device == "cpu" else 1e-4)
    assert all(m.steps_ == 10 for m in bat)


@pytest.mark.parametrize("threads", [1, 4])
def test_each_client_draws_its_sample_and_noise_from_its_own_generator(threads):
    """Another generator for client 1 changes client 1 alone: no client's noise or sample
    comes from another's generator (or from a shared one), drawn in parallel or not."""
    clients, _, _ = digits_clients(SIZES)
    config = DPSGDConfig(noise_multiplier=1.0, sample_rate=0.3, clip=1.0)
    runs = []
    for other in (False, True):
        models = learners("mlp(hidden=16)", 4)
        jobs = dp_jobs(models, clients, 3, config, 0)
        if other:
            jobs[1].rng = np.random.default_rng(12345)
        dpsgd_together(jobs, threads=threads)
        runs.append([m.get_weights() for m in models])
    for c in (0, 2, 3):
        np.testing.assert_array_equal(runs[0][c], runs[1][c])
    assert np.abs(runs[0][1] - runs[1][1]).max() > 1e-4


def test_noise_threads_follow_the_device(monkeypatch):
    from fedlabels.learners.batched_dpsgd import noise_threads

    monkeypatch.setattr("fedlabels.core.threads.available_cores", lambda: 16)
    monkeypatch.delenv("FEDLABELS_THREADS", raising=False)
    assert noise_threads("cpu", 100) == 1  # the training threads (default 1) on the CPU
    monkeypatch.setenv("FEDLABELS_THREADS", "2")
    assert noise_threads("cpu", 100) == 2
    assert noise_threads("cuda:0", 100) == 16  # on a GPU the host cores are free
    assert noise_threads("cuda", 5) == 5  # at most one per client


def test_dpsgd_groups_split_by_protection_and_network():
    clients, _, _ = digits_clients((40, 50, 60, 70))
    models = learners("mlp(hidden=16)", 3) + learners("cnn(arch=small)", 1)
    a, b = DPSGDConfig(1.0, 0.2, 1.0), DPSGDConfig(2.0, 0.2, 1.0)
    jobs = dp_jobs(models[:2], clients[:2], 2, a, 0) + dp_jobs(models[2:], clients[2:], 2, b, 0)
    # a different sigma, another network: groups of their own
    assert sorted(map(len, dpsgd_groups(jobs))) == [1, 1, 2]
    dpsgd_together(jobs)
    assert all(m.steps_ == 2 for m in models)


@pytest.mark.parametrize("spec", ["cnn(arch=small)", "module:user_nets:tiny_cnn"])
@pytest.mark.parametrize("with_public", [False, True])
def test_dpsgd_steps_of_other_networks_together_equal_their_own(spec, with_public):
    """A CNN and your own module (per-example gradients by torch.func, vmapped over the
    clients too) against each client's own steps, warm-started."""
    clients, public, _ = digits_clients(SIZES)
    config = DPSGDConfig(noise_multiplier=1.1, sample_rate=0.2, clip=0.5)
    seq, bat = learners(spec, 4), learners(spec, 4)
    # 2 steps a call: per-example gradients of a CNN are the suite's costliest steps, and
    # a second step already continues Adam's moments and the sample's cursor in a call
    for call in range(2):
        for job in dp_jobs(seq, clients, 2, config, call, public if with_public else None):
            dpsgd_steps(job.learner, job.X, job.y, job.n_steps, job.config, job.rng,
                        job.X_aux, job.y_aux, job.aux_index)
        jobs = dp_jobs(bat, clients, 2, config, call, public if with_public else None)
        assert dpsgd_groups(jobs) == [[0, 1, 2, 3]]  # really batched
        dpsgd_together(jobs)
    assert_same_learners(seq, bat, tol=1e-4)  # convolutions sum in another order


def stacked_rows(spec, n, rows):
    """``n`` built clients of ``spec``, their stacked parameters, and ``rows`` of each
    client's own data as (clients, rows, features) inputs and labels."""
    from fedlabels.learners.batched import stacked_state

    clients, _, _ = digits_clients((30,) * n)
    models = learners(spec, n)
    for m, (X, y) in zip(models, clients, strict=True):
        m._ensure_initialised(X, y)
    params, _ = stacked_state(models)
    return (models, params, torch.from_numpy(np.stack([X[:rows] for X, _ in clients])),
            torch.from_numpy(np.stack([y[:rows] for _, y in clients])))


@pytest.mark.parametrize(("max_bytes", "calls"), [(1 << 30, 1), ("two clients", 2),
                                                  (1, 3)])
def test_per_example_sums_equal_each_clients_own_in_chunks_that_fit(max_bytes, calls):
    """The stacked clipped sums against dpsgd's one-client form (the oracle) on each
    client's real rows, padding rows masked out; clients taken as many at a time as their
    per-example gradients fit (3 clients: all, two then one, one at a time)."""
    from fedlabels.learners.batched_dpsgd import PerExampleSums
    from fedlabels.learners.dpsgd import clipped_gradient_sum

    models, params, x, y = stacked_rows("cnn(arch=small)", 3, 9)
    mask = torch.ones(3, 9)
    mask[1, 6:] = 0.0  # client 1 has 6 real rows
    per_client = 9 * sum(p[0].numel() for p in params.values()) * 4
    sums = PerExampleSums(models[0], 2 * per_client if max_bytes == "two clients"
                          else max_bytes)
    seen = []
    inner = sums.per_client
    sums.per_client = lambda p, xs, ys: seen.append(len(xs)) or inner(p, xs, ys)
    got = sums(params, x, y, mask, 0.5)
    assert len(seen) == calls and sum(seen) == 3
    for c, m in enumerate(models):
        n = int(mask[c].sum())
        want, _ = clipped_gradient_sum(m.model_, m._inputs(x[c, :n], False), y[c, :n], 0.5)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g[c].numpy(), w.detach().numpy(), rtol=1e-4,
                                       atol=1e-6)


def test_networks_with_buffers_take_their_dpsgd_steps_alone():
    """functional_call over the stacked parameters alone would read a buffer from the
    stacked network's meta copy: such networks step alone."""
    clients, _, _ = digits_clients((40, 50))
    models = learners("module:user_nets:with_buffer", 2)
    jobs = dp_jobs(models, clients, 1, DPSGDConfig(1.0, 0.2, 1.0), 0)
    assert dpsgd_groups(jobs) == [[0], [1]]
    dpsgd_together(jobs)
    assert all(m.steps_ == 1 for m in models)


@pytest.mark.parametrize("spec", ["module:user_nets:functional_dropout",
                                  "module:user_nets:dropout_net"])
def test_networks_with_dropout_take_dpsgd_steps_alone_and_together(spec):
    """Each example's gradient is that of its own masked pass: torch refused the random
    draws under vmap ("randomness error mode") and DP-SGD with such a network stopped;
    alone and together each example now draws its own masks."""
    clients, _, _ = digits_clients((60, 70, 80))
    config = DPSGDConfig(1.0, 0.3, 1.0)
    alone, together = learners(spec, 3), learners(spec, 3)
    for job in dp_jobs(alone, clients, 3, config, 0):
        dpsgd_steps(job.learner, job.X, job.y, job.n_steps, job.config, job.rng)
    jobs = dp_jobs(together, clients, 3, config, 0)
    assert dpsgd_groups(jobs) == [[0, 1, 2]]
    dpsgd_together(jobs)
    start = learners(spec, 3)
    for m, s in zip([*alone, *together], [*start, *start], strict=True):
        s._ensure_initialised(clients[0][0], clients[0][1])
        assert m.steps_ == 3 and np.isfinite(m.get_weights()).all()
        assert np.abs(m.get_weights() - s.get_weights()).max() > 1e-4  # they trained


def distill_jobs(models, clients, public, steps, private, weight, least=40):
    """Each client's soft rows (every other client the same shared 300, the others their own,
    at least ``least``: 64 fills every soft batch) and, with ``private``, its own rows."""
    Xu, _ = public
    targets = np.random.default_rng(7).dirichlet(np.ones(10), size=len(Xu)).astype(np.float32)
    jobs = []
    for i, (m, (X, y)) in enumerate(zip(models, clients, strict=True)):
        if not hasattr(m, "model_"):
            m._initialise(X.shape[1], 10)
        rows = slice(0, 300) if i % 2 else slice(50 * i, 50 * i + least + 60 * i)
        jobs.append(DistillJob(m, Xu[rows], targets[rows], steps, X if private else None,
                               y if private else None, weight))
    return jobs


@pytest.mark.parametrize(("spec", "device"), [
    ("mlp(hidden=32-16)", "cpu"), ("cnn(arch=small)", "cpu"),
    pytest.param("mlp(hidden=32-16)", "cuda", marks=pytest.mark.cuda)])
@pytest.mark.parametrize("private", [False, True])
@pytest.mark.parametrize("batches_of", ["unequal", "equal"])
def test_distill_steps_together_equal_each_clients_own(spec, private, device, batches_of):
    # unequal: a client below the batch size of 64 (each client's index written in a loop);
    # equal: every client's soft and private batches full (one stacked index for all)
    sizes, least = (SIZES, 40) if batches_of == "unequal" else ((70, 75, 130, 99), 64)
    clients, public, _ = digits_clients(sizes)
    seq, bat = learners(spec, 4), placed(spec, 4, device)
    # the CNN: 2 steps a call. Its batched convolutions sum in another order, and Adam, which
    # divides each coordinate's step by that coordinate's own gradient scale, turns their
    # rounding in a near-zero gradient coordinate into a step of about lr the other way,
    # which later steps spread: at 6 steps a call the weights parted by up to 5 % of their
    # scale on an AVX-512 Xeon (0.03 % at 2 steps), where another CPU's kernels kept them
    # within 0.2 %
    steps = 2 if spec.startswith("cnn") else 6
    for _ in range(2):
        for job in distill_jobs(seq, clients, public, steps, private, 0.7, least):
            job.learner.distill_steps(job.X_soft, job.P_soft, job.n_steps, X=job.X, y=job.y,
                                      weight=job.weight)
        jobs = distill_jobs(bat, clients, public, steps, private, 0.7, least)
        assert distill_groups(jobs) == [[0, 1, 2, 3]]
        assert _Plan(jobs, torch.device("cpu"), 1)._equal == (batches_of == "equal")
        distill_together(jobs)
    # batched convolutions sum in another order: a looser tolerance for the CNN
    assert_same_learners(seq, bat, tol=1e-6 if spec.startswith("mlp") and device == "cpu"
                         else 2e-3)


def test_augmenting_learners_distil_alone():
    clients, public, _ = digits_clients((40, 50))
    models = learners("cnn(arch=small,augment=true)", 2)
    jobs = distill_jobs(models, clients, public, 2, True, 1.0)
    assert sorted(map(len, distill_groups(jobs))) == [1, 1]
    distill_together(jobs)
    assert all(m.steps_ == 2 for m in models)


def spy(monkeypatch, module, name):
    calls: list[int] = []
    original = getattr(module, name)

    def counted(jobs, *args):
        calls.append(len(jobs))
        return original(jobs, *args)

    monkeypatch.setattr(module, name, counted)
    return calls


@pytest.mark.parametrize("method", ["dd", "fedmd", "ds-fl"])
def test_a_distillation_run_with_clients_together_equals_the_sequential_run(method,
                                                                             monkeypatch):
    import fedlabels as fl
    import fedlabels.learners.batched_distill as distill
    from conftest import digits_with_sizes

    fed = digits_with_sizes((40, 90, 150, 60), n_unlabeled=300, n_test=300)
    calls = spy(monkeypatch, distill, "_distill_group")
    runs = {mode: fl.run(method, fed, model="mlp(hidden=32)", rounds=3, period=8, seed=0,
                         progress=False, batch_clients=mode)
            for mode in ("off", "on")}
    assert calls and set(calls) == {4}, calls  # every client's distillation, together
    off, on = runs["off"], runs["on"]
    assert on.extra["device"]["batched_clients"]
    assert [r.bytes_up for r in on.rounds] == [r.bytes_up for r in off.rounds]
    for a, b in zip(off.client_models, on.client_models, strict=True):
        np.testing.assert_allclose(a.get_weights(), b.get_weights(), atol=1e-5)
    assert on.final["mean_accuracy"] == pytest.approx(off.final["mean_accuracy"], abs=0.01)


@pytest.mark.parametrize(("method", "options", "groups", "model"), [
    ("dp-fedavg", {"level": "record", "epsilon": 8}, 3, "mlp(hidden=32)"),
    ("dp-fedavg", {"level": "record", "epsilon": 8}, 2, "cnn(arch=small)"),
    ("dp-fedct", {"mechanism": "dpsgd", "epsilon": 8}, 3, "mlp(hidden=32)"),
    ("dp-fedct", {"mechanism": "dpsgd", "epsilon": 8, "site_model": "private"}, 3,
     "mlp(hidden=32)")])
def test_dp_runs_take_their_dpsgd_steps_together_with_the_same_accounting(
        method, options, groups, model, monkeypatch):
    import fedlabels as fl
    import fedlabels.learners.batched_dpsgd as batched_dpsgd
    from conftest import digits_with_sizes

    fed = digits_with_sizes((40, 90, 150, 60), n_unlabeled=300, n_test=300)
    calls = spy(monkeypatch, batched_dpsgd, "_dpsgd_group")
    # as many rounds as groups (the CNN's per-example gradients: 2 rounds, not 3, and 4
    # steps a call, not 8: still several a call, and what is asserted, one call a round and
    # the same accounting, holds at any count; 11.3 -> 7.0 CPU-s for the two CNN runs)
    period = 4 if model.startswith("cnn") else 8
    runs = {mode: fl.run(method, fed, model=model, rounds=groups, period=period, seed=0,
                         progress=False, batch_clients=mode, options=options)
            for mode in ("off", "on")}
    # one group of the four clients a round (DP-FedCT's separate labellers included)
    assert calls == [4] * groups
    off, on = (runs[m].extra["privacy"] for m in ("off", "on"))
    for key in ("epsilon", "steps_per_client", "epsilon_per_client", "noise_multiplier"):
        assert on[key] == off[key], key
    assert runs["on"].extra["device"]["batched_clients"]


def test_calls_run_in_client_order_whatever_the_learner_and_the_arrival(monkeypatch):
    """A client's calls take its place in the group (so the stacking, and the device rows
    cache, are the same every round), also for a learner the simulator did not hand the
    rendezvous (DP-FedCT's labeller), whatever order the threads arrive in."""
    import threading

    import fedlabels.engines.together as together

    seen: list[list[str]] = []
    monkeypatch.setattr(together, "dpsgd_together",
                        lambda jobs, rows=None: seen.append([j.learner for j in jobs]))
    rendezvous = together.Rendezvous(3)
    turn = [threading.Event() for _ in range(3)]

    def client(position: int, name: str, after: int | None) -> None:
        rendezvous.enter(position)
        if after is not None:
            turn[after].wait()
        job = DPSGDJob(name, np.zeros((1, 1)), np.zeros(1), 1, None, None)
        threading.Timer(0.05, turn[position].set).start()  # the next may arrive now
        rendezvous.submit(job)
        rendezvous.finished()

    # arrival: position 2 first, then 0, then 1
    threads = [threading.Thread(target=client, args=args) for args in
               ((2, "third", None), (0, "first", 2), (1, "second", 0))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert seen == [["first", "second", "third"]]


def test_a_noise_buffer_is_drawn_into_again_only_after_its_copy(monkeypatch):
    """The two host buffers of DP-SGD's noise alternate by step; on CUDA a buffer's copy to
    the device is not awaited when made, so drawing into it again (two steps later) first
    waits for that copy's event, and drawing into the other one does not. A stand-in for
    CUDA's events and streams records the order (the copy itself goes to the meta device)."""
    import torch

    from fedlabels.learners.batched_dpsgd import NoiseBuffers

    log = []

    class Event:
        def __init__(self):
            self.name = f"copy{len(log)}"

        def record(self, stream):
            log.append(f"record {self.name}")

        def synchronize(self):
            log.append(f"wait {self.name}")

    empty = torch.empty
    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: None)
    monkeypatch.setattr(torch, "empty", lambda *a, pin_memory=False, **k: empty(*a, **k))
    buffers = NoiseBuffers(3, 5, torch.device("cuda"))  # no page-locked memory here
    buffers.device = torch.device("meta")  # the copies go there
    first = buffers.host(0)
    assert first.shape == (3, 5) and not np.shares_memory(first, buffers.host(1))
    assert buffers.to_device(0).device.type == "meta"
    assert log == ["record copy0"]
    buffers.host(1)  # the other buffer: nothing to wait for
    assert log == ["record copy0"]
    buffers.to_device(1)
    assert np.shares_memory(buffers.host(2), first)  # buffer 0 again, after its copy
    assert log == ["record copy0", "record copy1", "wait copy0"]
    buffers.host(2)  # awaited once
    assert log.count("wait copy0") == 1
    cpu = NoiseBuffers(3, 5, torch.device("cpu"))  # the CPU's step uses its noise at once
    assert len(cpu.tensors) == 1 and np.shares_memory(cpu.host(0), cpu.host(1))
    assert np.shares_memory(cpu.to_device(1).numpy(), cpu.host(0))


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_the_per_example_budget_follows_the_device(device):
    """1 GiB on the CPU; on a GPU a quarter of its free memory."""
    from fedlabels.learners.batched_dpsgd import PER_EXAMPLE_BYTES, per_example_budget

    budget = per_example_budget(torch.device(device))
    if device == "cpu":
        assert budget == PER_EXAMPLE_BYTES == 1 << 30
    else:
        free, _ = torch.cuda.mem_get_info()
        assert 0 < budget <= free // 4 + (64 << 20)  # another process may allocate


def test_per_example_sums_train_a_network_left_in_evaluation_mode():
    """A prediction leaves the network in evaluation mode; its stacked copy drops out as
    dpsgd_steps does alone (which puts it in training mode)."""
    from fedlabels.learners.batched_dpsgd import PerExampleSums

    clients, _, _ = digits_clients((40,))
    (model,) = learners("module:user_nets:dropout_net", 1)
    model._ensure_initialised(*clients[0])
    model.predict_proba(clients[0][0][:5])
    assert not model.model_.training
    assert PerExampleSums(model).base.training


def test_padding_rows_add_nothing_even_where_a_networks_gradient_is_nan_at_zero():
    """Padding is a row of zeros: a network normalising each row has a NaN gradient there,
    which multiplying by a mask of 0 spread into the client's sum."""
    from fedlabels.learners.batched_dpsgd import PerExampleSums

    models, params, x, y = stacked_rows("module:user_nets:row_normalised", 2, 6)
    x[1, 4:] = 0.0  # client 1's two padding rows
    mask = torch.ones(2, 6)
    mask[1, 4:] = 0.0
    sums = PerExampleSums(models[0])(params, x, y, mask, 1.0)
    assert all(torch.isfinite(g).all() for g in sums)


def _flipped(X):
    """Rows of 1x8x8 digits images flipped left to right."""
    return np.ascontiguousarray(X.reshape(len(X), 1, 8, 8)[..., ::-1].reshape(len(X), -1))


@pytest.mark.parametrize("with_public", [False, True])
def test_dpsgd_steps_augment_the_images_of_a_network_that_augments(with_public):
    """augment=true was ignored by DP-SGD (its inputs were built as for prediction). Oracle:
    with the augmentation replaced by a flip of every image, the steps equal a plain
    network's on flipped rows (same seed, same secret generator)."""
    clients, public, _ = digits_clients((60, 75))
    config = DPSGDConfig(noise_multiplier=1.1, sample_rate=0.2, clip=0.5)
    aug, plain = learners("cnn(arch=small,augment=true)", 2), learners("cnn(arch=small)", 2)
    for m in aug:
        m._augment = lambda images: images.flip(-1)
    Xu, yu = public
    for i, (X, y) in enumerate(clients):
        extra = (Xu, yu[:90], np.arange(90)) if with_public else (None, None, None)
        flipped = (_flipped(Xu), yu[:90], np.arange(90)) if with_public else extra
        dpsgd_steps(aug[i], X, y, 3, config, np.random.default_rng(i), *extra)
        dpsgd_steps(plain[i], _flipped(X), y, 3, config, np.random.default_rng(i), *flipped)
    assert_same_learners(aug, plain, tol=1e-5)


def test_augmenting_learners_take_dpsgd_steps_alone():
    clients, _, _ = digits_clients((40, 50))
    config = DPSGDConfig(1.0, 0.2, 1.0)
    models = learners("cnn(arch=small,augment=true)", 2)
    jobs = dp_jobs(models, clients, 2, config, 0)
    assert sorted(map(len, dpsgd_groups(jobs))) == [1, 1]
    alone = learners("cnn(arch=small,augment=true)", 2)
    for job in dp_jobs(alone, clients, 2, config, 0):
        dpsgd_steps(job.learner, job.X, job.y, job.n_steps, job.config, job.rng)
    dpsgd_together(jobs)
    assert_same_learners(alone, models, tol=1e-6)
