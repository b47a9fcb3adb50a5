"""Clients' weights moved off their device between turns (``offload``): the placement policy
on a fake memory figure, and runs whose clients move out and in after every turn equal to
resident runs bit for bit (the moves are exact copies; here from the CPU to the CPU)."""

from __future__ import annotations

import numpy as np
import pytest

import fedlabels as fl
from fedlabels.core.errors import FedLabelsError
from fedlabels.learners import build_learner, parse_model_spec
from fedlabels.learners.offload import MARGIN, Placement, check_offload, state_bytes


def trained(n, hidden="16", seed=0):
    """``n`` MLP learners, each built and trained one step (Adam moments exist)."""
    (spec,) = parse_model_spec(f"mlp(hidden={hidden})")
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        ln = build_learner(spec, n_classes=3, random_state=i)
        ln.train_steps(rng.normal(size=(20 + 7 * i, 5)).astype(np.float32),
                       rng.integers(0, 3, size=20 + 7 * i), 1)
        out.append(ln)
    return out


class FakeGPU:
    """A GPU of ``total`` bytes whose free memory is what resident clients leave."""

    def __init__(self, total, learners, used=0):
        self.total, self.learners, self.used = total, learners, used
        self.asked = []

    def __call__(self, device):
        self.asked.append(device)
        resident = sum(state_bytes(ln) for ln in self.learners if ln._home is None)
        return self.total - self.used - resident, self.total


def test_auto_keeps_clients_resident_while_they_fit_then_moves_the_rest_out():
    models = trained(6)
    size = state_bytes(models[0])
    assert size == sum(state_bytes(m) for m in models) / 6  # one architecture
    total = 1000 * size
    # room for exactly three resident clients beyond the margin and one client's turn
    gpu = FakeGPU(total, models, used=total - int(MARGIN * total) - 4 * size)
    placement = Placement("auto", dict.fromkeys(range(6), "cuda:0"), memory=gpu)
    assert placement.active
    for ln in models:
        ln.rest()
    for cid, ln in enumerate(models):  # the first round: each client's turn in order
        ln._resident()
        placement.after_turn(cid, ln)
    assert [m._home for m in models] == [None, None, None, "cpu", "cpu", "cpu"]
    assert placement.record() == {"asked": "auto", "offloaded_clients": [3, 4, 5]}
    asked = len(gpu.asked)
    for cid, ln in enumerate(models):  # later rounds: decisions stay, memory is not asked
        ln._resident()
        placement.after_turn(cid, ln)
    assert len(gpu.asked) == asked == 6 and set(gpu.asked) == {"cuda:0"}
    assert [m._home for m in models] == [None, None, None, "cpu", "cpu", "cpu"]


def test_auto_judges_each_gpu_by_its_own_memory():
    models = trained(4)
    size = state_bytes(models[0])

    def memory(device):  # cuda:0 is full, cuda:1 has room
        return (0, 10 * size) if device == "cuda:0" else (10 * size, 10 * size)

    placement = Placement("auto", {0: "cuda:0", 1: "cuda:1", 2: "cuda:0", 3: "cuda:1"},
                          memory=memory)
    for cid, ln in enumerate(models):
        placement.after_turn(cid, ln)
    assert placement.record()["offloaded_clients"] == [0, 2]


def test_never_always_and_auto_on_the_cpu():
    def no_memory(device):
        raise AssertionError("the policy asked for memory it does not need")

    models = trained(2)
    for asked, devices, homes in [("never", "cuda:0", [None, None]),
                                  ("always", "cpu", ["cpu", "cpu"]),
                                  ("always", "cuda:0", ["cpu", "cpu"]),
                                  ("auto", "cpu", [None, None])]:
        placement = Placement(asked, dict.fromkeys(range(2), devices), memory=no_memory)
        for cid, ln in enumerate(models):
            placement.after_turn(cid, ln)
        assert [m._home for m in models] == homes, (asked, devices)
        for m in models:
            m._resident()
    assert not Placement("auto", {0: "cpu"}).active
    assert not Placement("never", {0: "cuda:0"}).active


def test_an_unbuilt_learner_or_a_scikit_learn_model_is_left_alone():
    from sklearn.tree import DecisionTreeClassifier

    (spec,) = parse_model_spec("mlp(hidden=4)")
    unbuilt = build_learner(spec, n_classes=3, random_state=0)
    placement = Placement("always", {0: "cpu", 1: "cpu"})
    placement.after_turn(0, unbuilt)
    placement.after_turn(1, DecisionTreeClassifier())
    assert placement.record()["offloaded_clients"] == []


def test_a_rested_learner_computes_what_a_resident_one_does():
    rest, stay = trained(2, seed=3)[0], trained(2, seed=3)[0]
    rng = np.random.default_rng(1)
    X, y = rng.normal(size=(50, 5)).astype(np.float32), rng.integers(0, 3, size=50)
    moment = next(iter(rest.optimizer_.state.values()))["exp_avg"]
    for _ in range(3):
        rest.rest()
        assert rest._home == "cpu"
        assert next(iter(rest.optimizer_.state.values()))["exp_avg"] is not moment
        for ln in (rest, stay):
            ln.train_steps(X, y, 2)
        assert rest._home is None  # brought back to compute
        rest.rest()
        np.testing.assert_array_equal(rest.predict_proba(X), stay.predict_proba(X))
        np.testing.assert_array_equal(rest.get_weights(), stay.get_weights())
    sa, sb = rest.state_dict(), stay.state_dict()
    for key in sa:
        np.testing.assert_array_equal(sa[key], sb[key], err_msg=key)


@pytest.mark.parametrize("method, spec, together", [
    ("fedct", "mlp(hidden=32)", "off"), ("fedavg", "mlp(hidden=32)", "off"),
    ("fedct", "cnn(arch=small)", "on")])
def test_a_run_whose_clients_move_out_equals_the_resident_run(method, spec, together):
    from conftest import digits_with_sizes

    fed = digits_with_sizes((40, 90, 150, 60), n_unlabeled=200, n_test=200)
    runs = {mode: fl.run(method, fed, model=spec, rounds=3, period=4, seed=0,
                         progress=False, participation=3, offload=mode,
                         batch_clients=together) for mode in ("never", "always")}
    never, always = runs["never"], runs["always"]
    assert never.extra["device"]["offload"] == {"asked": "never", "offloaded_clients": []}
    assert always.extra["device"]["offload"] == {"asked": "always",
                                                 "offloaded_clients": [0, 1, 2, 3]}
    assert all(m._home == "cpu" for m in always.client_models)  # really moved out
    assert all(m._home is None for m in never.client_models)
    assert [r.accuracies for r in never.rounds] == [r.accuracies for r in always.rounds]
    assert [r.bytes_up for r in never.rounds] == [r.bytes_up for r in always.rounds]
    for a, b in zip(never.client_models, always.client_models, strict=True):
        np.testing.assert_array_equal(a.get_weights(), b.get_weights())
    assert never.extra["clinical"] == always.extra["clinical"]


def test_auto_on_the_cpu_moves_nothing_and_keeps_the_workers():
    from conftest import digits_with_sizes

    fed = digits_with_sizes((40, 60, 50), n_unlabeled=100, n_test=100)
    result = fl.run("fedct", fed, model="mlp(hidden=8)", rounds=1, period=2, seed=0,
                    progress=False, workers=2)
    assert result.extra["device"]["offload"] == {"asked": "auto", "offloaded_clients": []}
    assert result.extra["provenance"]["workers"] == 2
    with pytest.raises(FedLabelsError, match=r"workers=2: .* \(offload\)"):
        fl.run("fedct", fed, model="mlp(hidden=8)", rounds=1, period=2, seed=0,
               progress=False, workers=2, offload="always")


def test_bad_offload_settings_are_one_line_errors(capsys):
    from fedlabels.cli import main

    with pytest.raises(FedLabelsError, match=r"offload must be one of auto, never, always, "
                                             r"got 'sometimes'"):
        check_offload("sometimes")
    code = main(["run", "--method", "fedct", "--dataset", "breast_cancer", "--clients", "3",
                 "--model", "dt", "--rounds", "1", "--offload", "always", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "offload=always needs every client's learner to be a torch" in err
    assert len(err.strip().splitlines()) == 1
    code = main(["run", "--method", "fedct", "--dataset", "breast_cancer", "--offload",
                 "sometimes", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "auto" in err and "always" in err and "never" in err


def test_the_offload_benchmark_runs_on_the_cpu(capsys):
    from conftest import load_benchmark

    script = load_benchmark("gpu_offload")
    figures = script.offload_comparison(3, "cpu", model="mlp(hidden=8)", per_client=30,
                                        unlabeled=100, period=2)
    assert figures["never_offloaded_clients"] == 0 and figures["always_offloaded_clients"] == 3
    assert figures["never_seconds"] > 0 and figures["always_seconds"] > 0
    assert figures["never_peak_gpu_bytes"] is None
    assert script.main(["--dry-run", "--batch-clients", "on"]) == 0
    out = capsys.readouterr().out
    assert "always_over_never" in out and "DRY RUN" in out
