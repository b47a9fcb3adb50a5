"""CUDA graphs of the batched training and distillation steps (``cuda_graphs=on``).

On the CPU: the replay loop of :func:`fedlabels.learners.step_graphs.replay_steps` with a
stand-in for CUDA whose capture records the step and whose replay runs it (what a graph
does: the captured kernels write the gradients afresh), against the eager loop on the same
indices, alone and through the training and distillation groups' graph branches; where
graphs apply; the option's checks, record and failure message. On a CUDA GPU (marked): the
replayed steps equal the eager ones, a whole run with graphs equals one without.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np
import pytest
import torch
from torch import nn

import fedlabels as fl
from fedlabels.cli import main
from fedlabels.core.errors import FedLabelsError
from fedlabels.learners import build_learner, parse_model_spec
from fedlabels.learners.batched import TrainJob, _Batches, graphable, train_together
from fedlabels.learners.step_graphs import MIN_STEPS, WARMUP_STEPS, replay_steps
from fedlabels.runs.config import RunConfig


class StandIn:
    """CUDA's part of ``replay_steps`` on the CPU: the warm-up is a plain block and a
    capture runs nothing; a replay runs the recorded step with its gradients unset first,
    as a graph whose backward writes them (nothing accumulates)."""

    def __init__(self, opt: torch.optim.Optimizer) -> None:
        self.opt = opt
        self.warmups = self.captures = self.replays = 0

    @contextmanager
    def warmup(self) -> Iterator[None]:
        self.warmups += 1
        yield

    def capture(self, step: Callable[[], None]) -> Callable[[], None]:
        self.captures += 1

        def replay() -> None:
            self.replays += 1
            self.opt.zero_grad(set_to_none=True)
            step()

        return replay


def tiny_problem(n_steps: int, seed: int = 0):
    """A linear classifier, its data and ``n_steps`` minibatch indices (2, clients, slots)."""
    g = torch.Generator().manual_seed(seed)
    X, y = torch.randn(200, 6, generator=g), torch.randint(0, 3, (200,), generator=g)
    indices = [torch.randint(0, 200, (2, 1, 16), generator=g) for _ in range(n_steps)]
    for at in indices:
        at[1] = at[0]  # the label of the row
    torch.manual_seed(seed)
    model = nn.Linear(6, 3)
    return model, torch.optim.Adam(model.parameters(), lr=0.05), X, y, indices


def train_step(model, opt, X, y, seen):
    def step(at: torch.Tensor, sizes: torch.Tensor, lens: list[int]) -> None:
        seen.append(at.clone())
        loss = nn.functional.cross_entropy(model(X[at[0, 0]]), y[at[1, 0]]) / sizes[0, 0]
        loss.backward()
        opt.step()
    return step


@pytest.mark.parametrize("n_steps", [WARMUP_STEPS + 1, MIN_STEPS, 13])
def test_replayed_steps_are_the_eager_steps_on_their_own_indices(n_steps):
    eager_model, eager_opt, X, y, indices = tiny_problem(n_steps)
    model, opt, *_ = tiny_problem(n_steps)
    sizes = torch.ones((1, 1))
    eager_seen: list[torch.Tensor] = []
    step = train_step(eager_model, eager_opt, X, y, eager_seen)
    for at in indices:
        eager_opt.zero_grad(set_to_none=True)
        step(at, sizes, [16])
    seen: list[torch.Tensor] = []
    queue = iter(indices)
    drawn = []

    def next_index():
        drawn.append(1)
        return next(queue), sizes, [16]

    cuda = StandIn(opt)
    replay_steps(train_step(model, opt, X, y, seen), next_index, n_steps, opt,
                 torch.device("cpu"), backend=cuda)
    assert len(drawn) == n_steps  # every planned index drawn once, none past the call
    assert (cuda.warmups, cuda.captures, cuda.replays) == (1, 1, n_steps - WARMUP_STEPS)
    assert len(seen) == len(eager_seen) == n_steps
    for ours, theirs in zip(seen, eager_seen, strict=True):  # each step on its own index
        assert torch.equal(ours, theirs)
    for p, q in zip(model.parameters(), eager_model.parameters(), strict=True):
        assert torch.equal(p, q)
        assert opt.state[p]["step"] == n_steps
        assert torch.equal(opt.state[p]["exp_avg_sq"], eager_opt.state[q]["exp_avg_sq"])


def test_a_graph_needs_more_steps_than_its_warmup():
    model, opt, X, y, indices = tiny_problem(WARMUP_STEPS)
    with pytest.raises(ValueError, match=f"more than {WARMUP_STEPS} steps"):
        replay_steps(train_step(model, opt, X, y, []), lambda: (indices[0], None, [16]),
                     WARMUP_STEPS, opt, torch.device("cpu"), backend=StandIn(opt))


def built(spec: str, n: int = 2):
    (s,) = parse_model_spec(spec)
    rng = np.random.default_rng(0)
    learners = [build_learner(s, n_classes=3, random_state=i) for i in range(n)]
    for ln in learners:
        ln._ensure_initialised(rng.random((20, 64), dtype=np.float32), np.arange(20) % 3)
    return learners


def test_graphs_apply_to_mlp_groups_on_cuda_with_enough_steps():
    cuda, cpu = torch.device("cuda"), torch.device("cpu")  # a device object needs no GPU
    (mlp,) = built("mlp(hidden=16)", 1)
    assert graphable(mlp, cuda, MIN_STEPS)
    assert not graphable(mlp, cuda, MIN_STEPS - 1)  # a capture would not pay
    assert not graphable(mlp, cpu, 50)
    for spec in ("cnn(arch=small)", "cnn(arch=small,augment=true)",
                 "module:user_nets:tiny_cnn"):
        (other,) = built(spec, 1)
        assert not graphable(other, cuda, 50), spec


def test_every_step_planned_in_one_shape_or_no_graph():
    rng = np.random.default_rng(0)
    X, y = rng.random((100, 64), dtype=np.float32), np.arange(100) % 3
    U, yu = rng.random((300, 64), dtype=np.float32), np.arange(300) % 3
    jobs = [TrainJob(ln, X[: 40 + 30 * i], y[: 40 + 30 * i], 9, U, yu)
            for i, ln in enumerate(built("mlp(hidden=16)"))]
    assert _Batches(jobs, torch.device("cpu"), steps=9).one_shape()
    assert not _Batches(jobs, torch.device("cpu")).one_shape()  # drawn step by step
    augmenting = built("cnn(arch=small,augment=true)")
    jobs = [TrainJob(ln, X, y, 9) for ln in augmenting]
    assert not _Batches(jobs, torch.device("cpu"), steps=9).one_shape()


def test_train_together_without_graphs_counts_none():
    rng = np.random.default_rng(0)
    X, y = rng.random((100, 64), dtype=np.float32), np.arange(100) % 3
    jobs = [TrainJob(ln, X, y, MIN_STEPS) for ln in built("mlp(hidden=16)", 3)]
    assert train_together(jobs, graphs=True) == 0  # on the CPU: eager


def group_jobs(models):
    """Three unequal clients' calls of 10 steps with U by index."""
    rng = np.random.default_rng(1)
    X, y = rng.random((300, 64), dtype=np.float32), np.arange(300) % 3
    index = np.sort(rng.choice(300, 120, replace=False))
    return [TrainJob(m, X[: 30 + 50 * i], y[: 30 + 50 * i], 10, X, y[index],
                     aux_index=index) for i, m in enumerate(models)]


def graphs_on_the_cpu(monkeypatch, stand_in=StandIn):
    """``_train_group``'s graph branch made to run here: graphs allowed on the CPU, Adam in
    its eager form (the capturable one runs on a GPU only), ``stand_in`` for CUDA; the
    stand-ins made, in a list."""
    from fedlabels.learners import batched, batched_distill, step_graphs

    opts: list[torch.optim.Optimizer] = []
    stack = batched.stack_for_training

    def eager_adam(learners, capturable=False):
        params, opt, forward = stack(learners)
        opts.append(opt)
        return params, opt, forward

    stand_ins: list[StandIn] = []
    for module in (batched, batched_distill):  # training and distillation groups
        monkeypatch.setattr(module, "graphable", lambda *args: True)
        monkeypatch.setattr(module, "stack_for_training", eager_adam)
    monkeypatch.setattr(step_graphs, "CudaGraphs",
                        lambda device: stand_ins.append(stand_in(opts[-1])) or stand_ins[-1])
    return stand_ins


def test_a_group_call_through_the_graph_branch_equals_the_eager_call(monkeypatch):
    """``_train_group``'s graph branch on the CPU with the stand-in for CUDA: the clients
    end bit for bit as after the eager call."""
    eager, graphed = built("mlp(hidden=16-8)", 3), built("mlp(hidden=16-8)", 3)
    assert train_together(group_jobs(eager), graphs=True) == 0  # on the CPU: eager
    stand_ins = graphs_on_the_cpu(monkeypatch)
    assert train_together(group_jobs(graphed), graphs=True) == 1
    assert_replayed_like_eager(stand_ins, eager, graphed, 10)


def assert_replayed_like_eager(stand_ins, eager, graphed, n_steps):
    """One capture, the rest of the call's steps replayed, and the clients bit for bit as
    after the eager call: weights, Adam moments, cursors."""
    (cuda,) = stand_ins
    assert (cuda.captures, cuda.replays) == (1, n_steps - WARMUP_STEPS)
    for a, b in zip(eager, graphed, strict=True):
        assert a.steps_ == b.steps_ == n_steps
        np.testing.assert_array_equal(a.get_weights(), b.get_weights())
        sa, sb = a.state_dict(), b.state_dict()
        for key in sa:
            if key.endswith(("exp_avg", "exp_avg_sq")) or key.startswith("cursor."):
                np.testing.assert_array_equal(sa[key], sb[key])


@pytest.mark.parametrize("private", [False, True])
def test_a_distillation_call_through_the_graph_branch_equals_the_eager_call(monkeypatch,
                                                                         private):
    """DD, FedMD and DS-FL's distillation steps take the same graph branch: with the
    stand-in for CUDA the clients end bit for bit as after the eager call."""
    from fedlabels.learners.batched_distill import distill_together
    from test_batched_clients import digits_clients, learners
    from test_batched_distill_dpsgd import distill_jobs

    clients, public, _ = digits_clients((40, 75, 130))
    eager, graphed = learners("mlp(hidden=16-8)", 3), learners("mlp(hidden=16-8)", 3)
    assert distill_together(distill_jobs(eager, clients, public, 10, private, 0.7),
                            graphs=True) == 0  # on the CPU: eager
    stand_ins = graphs_on_the_cpu(monkeypatch)
    assert distill_together(distill_jobs(graphed, clients, public, 10, private, 0.7),
                            graphs=True) == 1
    assert_replayed_like_eager(stand_ins, eager, graphed, 10)


class FailingCapture(StandIn):
    def capture(self, step):
        raise RuntimeError("CUDA error: operation not permitted when stream is capturing\n"
                           "CUDA kernel errors might be asynchronously reported")


def test_a_failed_capture_is_one_line_that_names_the_way_out(monkeypatch):
    graphs_on_the_cpu(monkeypatch, FailingCapture)
    with pytest.raises(FedLabelsError) as info:
        train_together(group_jobs(built("mlp(hidden=16-8)", 3)), graphs=True)
    message = str(info.value)
    assert "\n" not in message and "cuda_graphs=off" in message
    assert "RuntimeError: CUDA error: operation not permitted when stream is capturing)" \
        in message


@pytest.mark.parametrize(("settings", "needle"), [
    ({"device": "cpu"}, "not with device=cpu"),
    ({"device": "cuda", "batch_clients": "off"}, "not with batch_clients=off"),
    ({"device": "auto", "engine": "flower-simulation"}, "do not take cuda_graphs"),
])
def test_cuda_graphs_on_is_refused_where_it_cannot_apply(settings, needle):
    with pytest.raises(FedLabelsError, match=needle):
        RunConfig(method="fedct", dataset="digits", cuda_graphs="on", **settings)
    with pytest.raises(FedLabelsError, match="cuda_graphs must be one of"):
        RunConfig(method="fedct", dataset="digits", cuda_graphs="auto")


def test_cli_refuses_cuda_graphs_on_the_cpu_in_one_line(capsys):
    code = main(["run", "--method", "fedct", "--dataset", "digits", "--cuda-graphs", "on",
                 "--device", "cpu"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and "cuda_graphs=on" in err


@pytest.mark.skipif(torch.cuda.is_available(), reason="auto means CUDA here")
def test_run_refuses_graphs_when_auto_finds_no_gpu():
    fed = fl.load_federation("digits", clients=3, seed=0)
    for together in ("auto", "on"):  # the missing GPU is named, whatever batch_clients
        with pytest.raises(FedLabelsError, match=r"do not train on CUDA \(device=auto found "
                                                 r"no CUDA GPU here\)"):
            fl.run("fedct", fed, model="mlp(hidden=8)", rounds=1, period=2, progress=False,
                   batch_clients=together, cuda_graphs="on", device="auto")


def test_graphs_need_the_clients_trained_together_on_cuda():
    from fedlabels.engines.inprocess import use_graphs

    assert use_graphs("on", True, ["cuda:0", "cuda:0"]) is True
    assert use_graphs("off", False, ["cpu"]) is False
    with pytest.raises(FedLabelsError, match="do not train together"):
        use_graphs("on", False, ["cuda:0", "cuda:0"])
    with pytest.raises(FedLabelsError, match=r"do not train on CUDA; use"):
        use_graphs("on", True, ["cpu", "cpu"], "cpu")


def test_a_run_records_its_cuda_graphs_setting():
    fed = fl.load_federation("digits", clients=3, seed=0)
    result = fl.run("fedct", fed, model="mlp(hidden=8)", rounds=1, period=2, seed=0,
                    progress=False, batch_clients="on")
    assert result.extra["device"]["cuda_graphs"] == {"asked": "off", "graphed_calls": 0}


# --------------------------------------------------------------------------- on a GPU
def digits_jobs(models, steps, seed=0):
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    X = (X / 16.0).astype(np.float32)
    rng = np.random.default_rng(seed)
    jobs = []
    for i, m in enumerate(models):  # unequal clients, U gathered by index
        rows = rng.choice(len(y), 60 + 40 * i, replace=False)
        index = np.sort(rng.choice(len(y), 200, replace=False))
        jobs.append(TrainJob(m, X[rows], y[rows], steps, X, y[index], aux_index=index))
    return jobs


def cuda_learners(n, precision="fp32"):
    (spec,) = parse_model_spec("mlp(hidden=32-16)")
    models = [build_learner(spec, n_classes=10, random_state=i) for i in range(n)]
    for m in models:
        m.place("cuda", precision)
    return models


@pytest.mark.cuda
def test_replayed_graph_steps_equal_eager_steps_on_the_gpu():
    eager, graphed = cuda_learners(4), cuda_learners(4)
    for call in range(2):  # the second call warm-starts Adam (its step on the device)
        assert train_together(digits_jobs(eager, 12, call)) == 0
        assert train_together(digits_jobs(graphed, 12, call), graphs=True) == 1
    for a, b in zip(eager, graphed, strict=True):
        assert a.steps_ == b.steps_ == 24
        # the same kernels on the same minibatches; capturable Adam computes its bias
        # corrections in float32 on the GPU, which Adam may amplify for a near-zero gradient
        # (by at most lr = 1e-3 a step): the bulk equal to rounding, as in
        # test_batched_clients.py
        wa, wb = a.get_weights(), b.get_weights()
        assert np.isclose(wa, wb, rtol=1e-4, atol=1e-5).mean() > 0.99
        assert np.abs(wa - wb).max() < 1e-3
        sa, sb = a.state_dict(), b.state_dict()
        assert sa["cursor.0.pos"] == sb["cursor.0.pos"]  # the same minibatches drawn
        np.testing.assert_array_equal(sa["cursor.1.order"], sb["cursor.1.order"])


@pytest.mark.cuda
def test_no_gradient_accumulator_crosses_streams_on_the_gpu():
    """torch warns when a weight's gradient accumulator was made on another stream and kept
    alive (what broke the capture on an H200: a transpose made when stacking); eager calls
    and graphed ones raise no such warning."""
    import warnings

    for graphs in (False, True):
        models = cuda_learners(3)
        with warnings.catch_warnings():
            warnings.filterwarnings("error", message=".*AccumulateGrad node's stream")
            for call in range(2):
                assert train_together(digits_jobs(models, 12, call), graphs=graphs) == graphs


@pytest.mark.cuda
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_run_with_cuda_graphs_equals_one_without(precision):
    fed = fl.load_federation("digits", clients=3, seed=0)
    runs = {mode: fl.run("fedct", fed, model="mlp(hidden=64)", rounds=3, period=10, seed=0,
                         progress=False, device="cuda", precision=precision,
                         cuda_graphs=mode) for mode in ("off", "on")}
    assert runs["on"].extra["device"]["cuda_graphs"]["graphed_calls"] >= 3
    assert runs["off"].extra["device"]["cuda_graphs"]["graphed_calls"] == 0
    on = [r.mean_accuracy for r in runs["on"].records]
    off = [r.mean_accuracy for r in runs["off"].records]
    assert np.allclose(on, off, atol=0.02)


@pytest.mark.cuda
def test_replayed_distillation_steps_equal_eager_steps_on_the_gpu():
    from fedlabels.learners.batched_distill import distill_together
    from test_batched_clients import digits_clients
    from test_batched_distill_dpsgd import distill_jobs, placed

    clients, public, _ = digits_clients((40, 75, 130))
    eager, graphed = placed("mlp(hidden=32-16)", 3, "cuda"), placed("mlp(hidden=32-16)", 3,
                                                                     "cuda")
    for _ in range(2):  # the second call warm-starts Adam
        assert distill_together(distill_jobs(eager, clients, public, 12, True, 0.7)) == 0
        assert distill_together(distill_jobs(graphed, clients, public, 12, True, 0.7),
                                graphs=True) == 1
    for a, b in zip(eager, graphed, strict=True):
        assert a.steps_ == b.steps_ == 24
        wa, wb = a.get_weights(), b.get_weights()
        assert np.isclose(wa, wb, rtol=1e-4, atol=1e-5).mean() > 0.99
        assert np.abs(wa - wb).max() < 1e-3
        assert a.state_dict()["cursor.2.pos"] == b.state_dict()["cursor.2.pos"]
