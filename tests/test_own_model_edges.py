"""Your own network where a user's first tries go wrong: a text learning rate, batch
normalisation under DP-SGD or ``batch_clients=on`` (seen only once the network is built),
a module missing when resuming, true/false for on/off settings, ``shape`` in Python, and a
test size a dataset with its own test split does not use."""

from __future__ import annotations

import sys
import textwrap

import numpy as np
import pytest
from torch import nn

import fedlabels as fl
from fedlabels.cli import main
from fedlabels.core.errors import FedLabelsError, FedLabelsWarning
from fedlabels.data.registry import DatasetInfo, LoadedDataset


def linear(n_features, n_classes):
    return nn.Sequential(nn.Linear(n_features, n_classes))


def with_batch_norm(n_features, n_classes):
    return nn.Sequential(nn.Linear(n_features, 16), nn.BatchNorm1d(16), nn.ReLU(),
                         nn.Linear(16, n_classes))


@pytest.fixture(scope="module")
def fed():
    return fl.load_federation("digits", clients=3, unlabeled=60, private=240, test=60, seed=0)


@pytest.mark.parametrize("spec", ["mlp(lr=abc)", "cnn(weight_decay=abc)", "mlp(lr=-1)"])
def test_a_learning_rate_that_is_no_number_is_one_line_exit_2(tmp_path, capsys, spec):
    code = main(["run", "--dataset", "digits", "--model", spec, "--output",
                 str(tmp_path / "r.json"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "must be a finite number" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_torch_model_checks_its_parameters_when_made():
    with pytest.raises(FedLabelsError, match=r"learning_rate \(lr\) must be a finite number > 0, "
                                             r"got 'abc'"):
        fl.TorchModel(linear, lr="abc")
    with pytest.raises(FedLabelsError, match="weight_decay must be a finite number >= 0"):
        fl.TorchModel(linear, weight_decay=-0.1)
    with pytest.raises(FedLabelsError, match=r"^TorchModel got an unexpected keyword "
                                             r"argument 'foo'; see help\(fl.TorchModel\)"):
        fl.TorchModel(linear, foo=1)
    assert fl.TorchModel(linear, shape=(1, 8, 8)).input_shape == (1, 8, 8)  # the spec's name

    def make_net(n_features: int, n_classes: int, hidden: int = 8) -> nn.Module:
        return nn.Sequential(nn.Linear(n_features, hidden), nn.ReLU(),
                             nn.Linear(hidden, n_classes))

    with pytest.raises(FedLabelsError, match=r"^hidden is an argument of make_net, not of "
                                             r"TorchModel: pass functools.partial\(make_net, "
                                             r"hidden=32\) as the factory"):
        fl.TorchModel(make_net, hidden=32, lr=1e-3)
    from functools import partial
    assert fl.TorchModel(partial(make_net, hidden=32)).network.keywords == {"hidden": 32}
    with pytest.raises(FedLabelsError, match="got a built Linear: pass its class or a "
                                             "function returning a new one"):
        fl.TorchModel(nn.Linear(4, 2))


def test_dp_sgd_refuses_your_batch_norm_network_once_built(fed):
    with pytest.raises(FedLabelsError, match=r"DP-SGD, which needs per-example gradients.*"
                                             r"batch normalisation"):
        fl.run("dp-fedct", fed, model=fl.TorchModel(with_batch_norm), rounds=1,
               options={"epsilon": 8, "mechanism": "dpsgd"}, progress=False)


def with_cumulative_batch_norm(n_features, n_classes):
    return nn.Sequential(nn.Linear(n_features, 16), nn.BatchNorm1d(16, momentum=None),
                         nn.ReLU(), nn.Linear(16, n_classes))


def test_batch_clients_on_trains_your_batch_norm_network_together(fed):
    result = fl.run("fedct", fed, model=fl.TorchModel(with_batch_norm), rounds=1,
                    batch_clients="on", progress=False)
    assert result.extra["device"]["batched_clients"] is True


def test_batch_clients_on_refuses_a_cumulative_batch_norm_once_built(fed):
    with pytest.raises(FedLabelsError, match="batch_clients=on needs every client's learner"):
        fl.run("fedct", fed, model=fl.TorchModel(with_cumulative_batch_norm), rounds=1,
               batch_clients="on", progress=False)
    # auto trains it alone, and says so
    result = fl.run("fedct", fed, model=fl.TorchModel(with_cumulative_batch_norm), rounds=1,
                    batch_clients="auto", progress=False)
    assert result.extra["device"]["batched_clients"] is False


def test_on_off_settings_take_true_and_false(fed):
    result = fl.run("fedct", fed, model="mlp(hidden=8)", rounds=1, batch_clients=False,
                    cuda_graphs=False, progress=False)
    assert result.config["batch_clients"] == "off" and result.config["cuda_graphs"] == "off"
    with pytest.raises(FedLabelsError, match="batch_clients must be one of auto, on, off"):
        fl.run("fedct", fed, model="mlp(hidden=8)", batch_clients=2, progress=False)


def test_resuming_without_the_runs_module_says_to_make_it_importable(tmp_path, monkeypatch):
    (tmp_path / "mynets_resume.py").write_text(textwrap.dedent("""
        from torch import nn

        def make(n_features, n_classes):
            return nn.Sequential(nn.Linear(n_features, n_classes))
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "r.json"
    assert main(["run", "--method", "fedct", "--dataset", "digits", "--model",
                 "module:mynets_resume:make", "--clients", "3", "--rounds", "2",
                 "--output", str(out), "--no-progress"]) == 0
    sys.path.remove(str(tmp_path))
    sys.modules.pop("mynets_resume", None)
    with pytest.raises(FedLabelsError, match=r"cannot resume .*r.checkpoint.npz: .*"
                                             r"mynets_resume.*make its module importable as "
                                             r"when the run started \(e.g. PYTHONPATH=.\)"):
        fl.resume(out, rounds=3, progress=False)


def test_a_test_size_is_named_as_unused_where_the_dataset_has_its_own_split(monkeypatch):
    import fedlabels.data.loading as loading

    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(200, 4)), np.arange(200) % 2

    def load():
        return LoadedDataset(X, y, X_test=X[:30], y_test=y[:30])

    info = DatasetInfo("toy_split", "toy", "generated", load,
                       defaults={"n_unlabeled": 60, "n_private": None, "n_test": None})
    monkeypatch.setattr(loading, "get_dataset", lambda *a, **k: info)
    with pytest.warns(FedLabelsWarning, match=r"toy_split has its own test split \(30 rows\)"
                                              r".*test=50 is not used"):
        fed = loading.load_federation("toy_split", clients=2, test=50, seed=0)
    assert len(fed.y_test) == 30
    # it pointed at fedlabels/core/renamed.py (stacklevel=2), not at the user's call
    with pytest.warns(FedLabelsWarning, match="own test split") as caught:
        fl.load_federation("toy_split", clients=2, test=50, seed=0)
    assert [w.filename for w in caught if "own test split" in str(w.message)] == [__file__]


def test_a_factorys_own_arguments_come_from_the_spec(tmp_path, monkeypatch, fed):
    (tmp_path / "mynets_kw.py").write_text(textwrap.dedent("""
        from torch import nn

        def kw_net(n_features, n_classes, hidden=64, depth=1):
            layers, width = [], n_features
            for _ in range(depth):
                layers += [nn.Linear(width, hidden), nn.ReLU()]
                width = hidden
            return nn.Sequential(*layers, nn.Linear(width, n_classes))

        def any_net(n_features, n_classes, **extra):
            return nn.Sequential(nn.Linear(n_features, int(extra.get("hidden", 4))), nn.ReLU(),
                                 nn.Linear(int(extra.get("hidden", 4)), n_classes))
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    result = fl.run("fedct", fed, model="module:mynets_kw:kw_net(hidden=8,depth=2,lr=0.01)",
                    rounds=1, progress=False)
    net = result.client_models[0].model_
    assert [m.out_features for m in net if isinstance(m, nn.Linear)] == [8, 8, 10]
    assert result.client_models[0].learning_rate == 0.01  # the learner's own parameter
    assert result.client_models[0].architecture_state()["network"] == \
        "mynets_kw:kw_net(hidden=8,depth=2)"
    wide = fl.run("fedct", fed, model="module:mynets_kw:any_net(hidden=5)", rounds=1,
                  progress=False)
    assert wide.client_models[0].model_[0].out_features == 5  # **kwargs takes any
    # no suggestion: 'depth' was suggested for width (difflib's ratio 0.6, 3 letters of 5)
    with pytest.raises(FedLabelsError, match=r"unknown parameter\(s\) width for "
                                             r"module:mynets_kw:kw_net; the learner takes lr, "
                                             r".*the factory hidden, depth\."):
        fl.run("fedct", fed, model="module:mynets_kw:kw_net(width=3)", progress=False)
    with pytest.raises(FedLabelsError, match=r"unknown parameter\(s\) hiden \(did you mean "
                                             r"'hidden'\?\) for module:mynets_kw:kw_net;"):
        fl.run("fedct", fed, model="module:mynets_kw:kw_net(hiden=3)", progress=False)
    with pytest.raises(FedLabelsError, match=r"unknown parameter\(s\) n_classes .*the learner "
                                             r"passes them"):
        fl.run("fedct", fed, model="module:mynets_kw:any_net(n_classes=3)", progress=False)


def test_a_factorys_width_is_not_taken_as_resnet18s_and_ignored():
    """fl.TorchModel(make_net, width=4) passed width to the learner, where it is ResNet-18's
    first-stage width, so the factory built its default width while the result recorded
    module:...:make_net(width=4), a spec that builds another network."""
    import functools

    from fedlabels.learners.torch_net import TorchNetClassifier

    def make_net(n_features, n_classes, width=8):
        return nn.Sequential(nn.Linear(n_features, width), nn.ReLU(),
                             nn.Linear(width, n_classes))

    with pytest.raises(FedLabelsError, match=r"^width is an argument of make_net, not of "
                                             r"TorchModel: pass functools.partial\(make_net, "
                                             r"width=4\) as the factory\.$"):
        fl.TorchModel(make_net, width=4)
    with pytest.raises(FedLabelsError, match=r"^width=4 is the width of network='resnet18', "
                                             r"which network .*linear does not use; leave it "
                                             r"out\.$"):
        fl.TorchModel(linear, width=4)
    X, y = np.random.default_rng(0).random((12, 6), dtype=np.float32), np.arange(12) % 3
    with pytest.raises(FedLabelsError, match=r"functools.partial\(make_net, width=4\)\)\.$"):
        TorchNetClassifier(network=make_net, width=4, max_steps=1).fit(X, y)
    with pytest.raises(FedLabelsError, match="which network small does not use"):
        TorchNetClassifier(network="small", width=4, max_steps=1).fit(np.zeros((3, 784)), y[:3])
    net = fl.TorchModel(functools.partial(make_net, width=4), max_steps=1).fit(X, y).model_
    assert net[0].out_features == 4  # the way that is taken


def test_fedavg_takes_a_factory_with_its_own_arguments(tmp_path, monkeypatch, fed):
    # each client's learner holds its own bound factory: FedAvg's same-architecture check
    # compared their default reprs (object addresses) and refused every such spec
    (tmp_path / "mynets_avg.py").write_text(textwrap.dedent("""
        from torch import nn

        def net(n_features, n_classes, hidden=4):
            return nn.Sequential(nn.Linear(n_features, hidden), nn.ReLU(),
                                 nn.Linear(hidden, n_classes))
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    result = fl.run("fedavg", fed, model="module:mynets_avg:net(hidden=6)", rounds=1,
                    period=2, progress=False)
    firsts = [m.model_[0] for m in result.client_models]
    assert [f.out_features for f in firsts] == [6, 6, 6]
    assert all(np.array_equal(f.weight.detach().numpy(), firsts[0].weight.detach().numpy())
               for f in firsts)  # the averaged weights reached every client
    with pytest.raises(FedLabelsError, match="same architecture at every client"):
        fl.run("fedavg", fed, model="module:mynets_avg:net(hidden=6),"
               "module:mynets_avg:net(hidden=7),module:mynets_avg:net(hidden=6)",
               rounds=1, progress=False)


def test_a_precision_for_models_that_are_not_torchs_is_refused(fed):
    with pytest.raises(FedLabelsError, match="precision bf16 applies to torch models"):
        fl.run("fedct", fed, model="dt", rounds=1, precision="bf16", progress=False)
    torch_run = fl.run("fedct", fed, model="mlp(hidden=8)", rounds=1, precision="bf16",
                       progress=False)
    assert torch_run.extra["device"]["precision"] == "bf16"
    assert "precision_asked" not in torch_run.extra["device"]
    # one torch client is enough: the precision applies to it
    mixed = fl.run("fedct", fed, model="dt,mlp(hidden=8),dt", rounds=1, precision="bf16",
                   progress=False)
    assert mixed.extra["device"]["precision"] == "bf16"


def test_the_cli_refuses_a_precision_no_model_uses(capsys, tmp_path):
    out = tmp_path / "r.json"
    assert main(["run", "--model", "logreg", "--precision", "bf16", "--rounds", "1",
                 "--no-progress", "--output", str(out)]) == 2
    assert not out.exists()
    err = capsys.readouterr().err.strip()
    assert "applies to torch models" in err and "\n" not in err


def test_a_deployment_refuses_a_precision_no_model_uses_as_run_does(capsys, tmp_path):
    """deploy prepare (and so deploy local) refuses before writing a file, the ServerApp of
    an app that asks for it anyway before any round, each with run's line; a site whose own
    model is not torch, in a run with a torch client, warns and computes in fp32."""
    import json
    import warnings
    from dataclasses import replace
    from pathlib import Path

    from fedlabels.engines.flower.loopback import loopback_deployment, server_context
    from fedlabels.engines.flower.server_app import run_server
    from fedlabels.engines.flower.spec import deploy_plan
    from fedlabels.runs.config import RunConfig

    args = ["--dataset", "wine", "--clients", "3", "--model", "logreg", "--precision", "bf16",
            "--rounds", "1"]
    assert main(["run", *args, "--no-progress", "--output", str(tmp_path / "r.json")]) == 2
    line = capsys.readouterr().err.strip()
    assert main(["deploy", "prepare", *args, "--out-dir", str(tmp_path / "sites")]) == 2
    assert capsys.readouterr().err.strip() == line and "\n" not in line
    assert not (tmp_path / "sites").exists()
    cfg = RunConfig(method="fedct", dataset="wine", clients=3, model="logreg", rounds=1,
                    period=1, seed=0)
    prepared, grid = loopback_deployment(cfg, tmp_path / "app")
    spec = replace(prepared.spec, run={**prepared.spec.run, "precision": "bf16"})
    with pytest.raises(FedLabelsError) as refused:
        run_server(grid, server_context(spec))
    status = json.loads(Path(spec.status).read_text())
    assert status["status"] == "failed" and status["rounds_done"] == 0
    assert line.endswith(status["error"]) and line.endswith(str(refused.value))
    mixed = deploy_plan(replace(cfg, model="logreg,mlp(hidden=4),logreg", precision="bf16"),
                        3, 13)
    with pytest.warns(FedLabelsWarning, match="client 0's model is not one"):
        mixed.learner(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FedLabelsWarning)
        mixed.learner(1)  # the torch site: bf16, no warning


def test_an_hf_spec_names_itself_in_its_unknown_parameter_error(tmp_path):
    with pytest.raises(FedLabelsError, match=r"unknown parameter\(s\) foo; hf takes"):
        fl.run("fedct", "digits", model=f"hf(model_dir={tmp_path},foo=1)", progress=False)


def test_make_federation_defaults_its_sizes_as_a_table_run_does():
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(100, 3)), np.arange(100) % 2
    fed = fl.make_federation(X, y)
    # five clients; 20 test rows, then half of the 80 left is U and the rest private
    assert fed.n_clients == 5 and len(fed.y_test) == 20 and len(fed.X_public) == 40
    assert sum(len(c.y) for c in fed.clients) == 40
    given = fl.make_federation(X, y, X_test=X[:10], y_test=y[:10], clients=2)
    assert len(given.X_public) == 50 and given.n_clients == 2  # nothing of X held out


def test_batch_clients_on_names_the_one_reason_it_cannot(fed):
    with pytest.raises(FedLabelsError, match="batch_clients=on needs every client's learner") \
            as caught:
        fl.run("fedct", fed, model="dt", rounds=1, batch_clients="on", progress=False)
    assert "reproducible" not in str(caught.value)
    with pytest.raises(FedLabelsError, match="one reproducible noise stream"):
        fl.run("dp-fedct", fed, model="mlp(hidden=8)", rounds=1, batch_clients="on",
               insecure_reproducible_noise=True, options={"epsilon": 8}, progress=False)


def test_averaging_a_model_without_weights_suggests_one_for_the_data(capsys, tmp_path):
    words = ["good film", "bad film", "great plot", "awful plot"]
    (tmp_path / "t.csv").write_text("text,y\n" + "".join(
        f"{words[i % 4]} {i},{i % 2}\n" for i in range(60)))
    text = ["--text-column", "text"]
    for dataset, extra, model, hint in [
            ("digits", [], "dt", "'mlp', 'cnn'"),
            (f"csv:{tmp_path / 't.csv'}:y", text, "tfidf", "'minilm' or 'hf(model_dir=...)'")]:
        code = main(["run", "--method", "fedavg", "--dataset", dataset, *extra, "--model",
                     model, "--output", str(tmp_path / "r.json"), "--no-progress"])
        err = capsys.readouterr().err
        assert code == 2 and f"for this data: {hint}" in err, err


def test_the_console_says_where_a_run_trained_when_it_asked_for_more_than_the_cpu(
        tmp_path, capsys):
    from fedlabels.results import device_line

    base = ["run", "--dataset", "digits", "--model", "mlp(hidden=8)", "--rounds", "1",
            "--no-progress"]
    assert main([*base, "--output", str(tmp_path / "a.json")]) == 0
    out = capsys.readouterr().out
    assert "device:" not in out  # the default: nothing more to say
    # the model's whole spec beside the method (not only its family: `fedct/mlp`)
    assert out.splitlines()[2].startswith("fedct/mlp(hidden=8) digits")
    assert main([*base, "--device", "auto", "--batch-clients", "on", "--precision", "bf16",
                 "--output", str(tmp_path / "b.json")]) == 0
    out = capsys.readouterr().out
    assert "device: cpu (device=auto found no CUDA GPU), bf16, clients trained together" \
        in out
    line = device_line({"asked": "cuda", "devices": ["cuda:0"], "precision": "fp32",
                        "device_names": {"cuda:0": "NVIDIA H100"}, "batched_clients": True,
                        "cuda_graphs": {"asked": "on", "graphed_calls": 12}})
    assert line == ("device: cuda:0 (NVIDIA H100), fp32, clients trained together, 12 calls "
                    "replayed as CUDA graphs")


@pytest.mark.parametrize("method, options", [
    ("dp-fedavg", {"level": "record", "epsilon": 5}),
    ("dp-fedct", {"mechanism": "dpsgd", "epsilon": 8}),
])
def test_dp_sgd_batch_norm_refusal_reads_the_same_for_a_spec_and_your_module(
        fed, method, options):
    """The papers' CNN (refused before the run, from its spec) and your own module
    (refused by the client once built) got two wordings ('dp-fedavg level record
    (client 0) trains ...' and 'client 0 trains ...'): one now."""
    said = []
    for model in ("cnn(arch=cifar10)", fl.TorchModel(with_batch_norm)):
        with pytest.raises(FedLabelsError, match="batch normalisation") as caught:
            fl.run(method, fed, model=model, rounds=1, options=options, progress=False)
        said.append(str(caught.value))
    assert said[0] == said[1]
    assert said[0].startswith("client 0 trains with DP-SGD, which needs per-example")
