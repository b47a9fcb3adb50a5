"""An independent oracle of one DP-SGD step, alone and with clients trained together.

The oracle takes each sampled example through torch autograd on its own, scales its
gradient (all parameters together) to L2 norm at most C, sums, adds σ·C times the noise the
client's generator drew, and divides by q·n. What each path hands its optimiser must equal
it. The generator is wrapped (test only) so that its noise draws are zeros (clipping alone)
or recorded normals (the noise's scale and where it goes); the Poisson sample comes from
the wrapped generator unchanged, and the oracle replays it from the same seed. Adam's step
is wrapped by a recorder of what it is handed. Public auxiliary rows (FedCT's U) add their
own clipped gradients, without noise, and count in the divisor.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedlabels.learners import batched_dpsgd, dpsgd
from fedlabels.learners.batch_jobs import DPSGDJob
from fedlabels.learners.dpsgd import DPSGDConfig
from test_batched_clients import digits_clients, learners

SIZES = (37, 52, 44)


class NoiseOf:
    """A generator whose Poisson draws are ``default_rng(seed)``'s and whose normals are
    zeros (``zero``) or another generator's, each recorded."""

    def __init__(self, seed: int, zero: bool) -> None:
        self.rng, self.other = np.random.default_rng(seed), np.random.default_rng(seed + 99)
        self.zero, self.draws = zero, []

    def random(self, size):
        return self.rng.random(size)

    def standard_normal(self, size=None, dtype=np.float64, out=None):
        shape = out.shape if out is not None else size
        z = np.zeros(shape, dtype) if self.zero else self.other.standard_normal(shape, dtype)
        self.draws.append(z.copy())
        if out is None:
            return z
        out[...] = z
        return out


def oracle(model, inputs, y, idx, clip):
    """Σ over ``idx`` of each example's gradient scaled to norm ≤ ``clip``, one by one."""
    params = list(model.parameters())
    total = [torch.zeros_like(p) for p in params]
    for i in idx:
        out = model(inputs[i : i + 1])
        grads = torch.autograd.grad(
            torch.nn.functional.cross_entropy(out, y[i : i + 1]), params)
        norm = float(torch.sqrt(sum(g.double().pow(2).sum() for g in grads)))
        for t, g in zip(total, grads, strict=True):
            t += g * min(1.0, clip / norm)
    return total


def setup(spec, clip_at):
    """Built learners, their data and a clip C at the ``clip_at`` quantile of the
    per-example norms (some examples clipped, some not)."""
    clients, _, _ = digits_clients(SIZES)
    models = learners(spec, len(SIZES))
    for m, (X, y) in zip(models, clients, strict=True):
        m._ensure_initialised(X, y)
    X, y = clients[0]
    model = models[0].model_
    inputs = models[0]._inputs(torch.from_numpy(X), False)
    params = list(model.parameters())
    norms = []
    for i in range(len(y)):
        grads = torch.autograd.grad(torch.nn.functional.cross_entropy(
            model(inputs[i : i + 1]), torch.from_numpy(y[i : i + 1]).long()), params)
        norms.append(float(torch.sqrt(sum(g.pow(2).sum() for g in grads))))
    return models, clients, float(np.quantile(norms, clip_at))


def clipped_sum(learner, X, y, config, seed):
    """The oracle's clipped sum for one client, over its sample replayed from ``seed``."""
    n, q = len(y), config.sample_rate
    idx = np.flatnonzero(np.random.default_rng(seed).random(n) < q)
    assert 0 < len(idx) < n  # a real Poisson sample
    inputs = learner._inputs(torch.from_numpy(np.asarray(X, np.float32)), False)
    return oracle(learner.model_, inputs, torch.from_numpy(np.asarray(y, np.int64)), idx,
                  config.clip)


def step_of(total, noise, config, n):
    """What the optimiser must get: (clipped sum + σ·C·z) / (q·n)."""
    sigma_c = config.noise_multiplier * config.clip
    return [(t + sigma_c * torch.from_numpy(z).reshape(t.shape)) / (config.sample_rate * n)
            for t, z in zip(total, noise, strict=True)]


def recorder(monkeypatch, module):
    """Record each gradient handed to Adam, then step as the path would."""
    seen, step = [], module.adam_step

    def record(opt):
        seen.append([p.grad.detach().clone() for g in opt.param_groups for p in g["params"]])
        step(opt)

    monkeypatch.setattr(module, "adam_step", record)
    return seen


SPECS = ["mlp(hidden=24-12)", "cnn(arch=small)"]  # closed-form norms; torch.func's


@pytest.mark.parametrize("zero", [True, False])
@pytest.mark.parametrize("spec", SPECS)
def test_one_clients_step_is_the_clipped_sum_plus_noise_over_qn(monkeypatch, spec, zero):
    models, clients, clip = setup(spec, 0.5)
    config = DPSGDConfig(noise_multiplier=0.7, sample_rate=0.4, clip=clip)
    seen = recorder(monkeypatch, dpsgd)
    for c, (m, (X, y)) in enumerate(zip(models, clients, strict=True)):
        rng, total = NoiseOf(c, zero), clipped_sum(m, X, y, config, c)
        dpsgd.dpsgd_steps(m, X, y, 1, config, rng)
        want = step_of(total, rng.draws, config, len(y))
        for got, w in zip(seen[c], want, strict=True):
            torch.testing.assert_close(got, w, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("zero", [True, False])
@pytest.mark.parametrize("spec", SPECS)
def test_clients_steps_together_are_each_clipped_sum_plus_its_noise(monkeypatch, spec,
                                                                    zero):
    models, clients, clip = setup(spec, 0.5)
    config = DPSGDConfig(noise_multiplier=0.7, sample_rate=0.4, clip=clip)
    seen = recorder(monkeypatch, batched_dpsgd)
    rngs = [NoiseOf(c, zero) for c in range(len(SIZES))]
    jobs = [DPSGDJob(m, X, y, 1, config, rng)
            for m, (X, y), rng in zip(models, clients, rngs, strict=True)]
    assert batched_dpsgd.dpsgd_groups(jobs) == [[0, 1, 2]]  # really together
    totals = [clipped_sum(m, X, y, config, c)
              for c, (m, (X, y)) in enumerate(zip(models, clients, strict=True))]
    batched_dpsgd.dpsgd_together(jobs, threads=1)
    (stacked,) = seen
    for c, (m, (_, y)) in enumerate(zip(models, clients, strict=True)):
        (flat,) = rngs[c].draws  # one draw of every parameter, in the network's order
        sizes = [p.numel() for p in m.model_.parameters()]
        noise = np.split(flat, np.cumsum(sizes)[:-1])
        want = step_of(totals[c], noise, config, len(y))
        for got, w in zip(stacked, want, strict=True):
            torch.testing.assert_close(got[c], w, rtol=1e-4, atol=1e-6)


def public_rows(c):
    """Client ``c``'s auxiliary set: a public pool and the rows of it, with labels, that
    it trains on (``aux_index``, unsorted, so rows ``0..k-1`` of the pool are not them)."""
    rng = np.random.default_rng(50 + c)
    Xu, yu = digits_clients((60,), seed=7 + c)[0][0]
    index = rng.choice(len(yu), size=20 + 3 * c, replace=False)
    return Xu, yu[index], index


@pytest.mark.parametrize("together", [False, True])
def test_public_rows_add_their_clipped_gradients_without_noise_and_count_in_the_divisor(
        monkeypatch, together):
    models, clients, clip = setup(SPECS[0], 0.5)
    config = DPSGDConfig(noise_multiplier=0.7, sample_rate=0.4, clip=clip)
    for m in models:  # one public minibatch of all its rows: the oracle knows which
        m.batch_size = 1000
    seen = recorder(monkeypatch, batched_dpsgd if together else dpsgd)
    rngs = [NoiseOf(c, False) for c in range(len(SIZES))]
    publics = [public_rows(c) for c in range(len(SIZES))]
    wants = []
    for c, (m, (X, y)) in enumerate(zip(models, clients, strict=True)):
        Xu, yu, index = publics[c]
        inputs = torch.from_numpy(Xu[index])
        public = oracle(m.model_, inputs, torch.from_numpy(yu.astype(np.int64)),
                        range(len(yu)), clip)
        wants.append((clipped_sum(m, X, y, config, c), public, len(yu)))
    jobs = [DPSGDJob(m, X, y, 1, config, rng, Xu, yu, index) for m, (X, y), rng,
            (Xu, yu, index) in zip(models, clients, rngs, publics, strict=True)]
    if together:
        assert batched_dpsgd.dpsgd_groups(jobs) == [[0, 1, 2]]
        batched_dpsgd.dpsgd_together(jobs, threads=1)
    else:
        for job in jobs:
            dpsgd.dpsgd_steps(job.learner, job.X, job.y, 1, config, job.rng, job.X_aux,
                              job.y_aux, job.aux_index)
    for c, (m, (_, y)) in enumerate(zip(models, clients, strict=True)):
        private, public, n_public = wants[c]
        sizes = [p.numel() for p in m.model_.parameters()]
        noise = np.split(np.concatenate([d.ravel() for d in rngs[c].draws]),
                         np.cumsum(sizes)[:-1])
        sigma_c = config.noise_multiplier * clip
        weight = config.sample_rate * len(y) + n_public  # q·n plus the public batch
        got = seen[0] if together else seen[c]
        for k, (t, a, z) in enumerate(zip(private, public, noise, strict=True)):
            want = (t + sigma_c * torch.from_numpy(z).reshape(t.shape) + a) / weight
            torch.testing.assert_close(got[k][c] if together else got[k], want,
                                       rtol=1e-4, atol=1e-6)
