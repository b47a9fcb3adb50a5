"""``--engine flower-simulation``: the deployed ServerApp and ClientApp on Flower's simulation
engine (Ray) give the simulator's result, on a local Ray and on a Ray cluster (a head and a
worker node started here with ``ray start``, as docs/engines.md's recipe says).

The Ray tests start real processes (``realprocess``) and share one cluster (module scope, one
xdist group); they skip, saying why, when Ray is not installed."""

from __future__ import annotations

import contextlib
import copy
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import pytest

import fedlabels as fl
from fedlabels.api import run_config
from fedlabels.core.errors import FedLabelsError
from fedlabels.runs.config import RunConfig

HAS_RAY = find_spec("ray") is not None and find_spec("flwr") is not None
RAY = pytest.mark.skipif(not HAS_RAY, reason="Ray is not installed (pip install "
                                             "'fedlabels[simulation]'; make test installs it)")
# make test runs the real-process tests with --dist loadfile: this file on one worker, its
# Ray cluster (a module fixture) started once
REAL = [RAY, pytest.mark.realprocess]
BIN = Path(sys.executable).parent
ENGINE = "flower-simulation"


def comparable(result: dict[str, Any]) -> dict[str, Any]:
    """A result JSON without what names the engine or measures time (docs/engines.md):
    ``provenance``, ``wall_seconds``, each round's ``seconds``, ``config.engine`` and
    ``config.workers``, and the Flower apps' ``deployment``, ``wire_format`` and rounds'
    ``clients_alive``."""
    out = copy.deepcopy(result)
    for key in ("provenance", "wall_seconds", "deployment"):
        out.pop(key, None)
    for key in ("engine", "workers"):
        out["config"].pop(key, None)
    out["communication"].pop("wire_format", None)
    for record in out["rounds"]:
        record.pop("seconds", None)
        record.get("server", {}).pop("clients_alive", None)
    return out


def as_json(result: Any) -> dict[str, Any]:
    return dict(json.loads(json.dumps(result.to_dict(), default=str)))


# ------------------------------------------------------------------ without Ray: the parameter
def test_engine_is_checked_like_every_run_parameter() -> None:
    with pytest.raises(FedLabelsError, match=r"^engine must be one of simulator, "
                                             r"flower-simulation, got 'ray'\.$"):
        RunConfig(engine="ray")
    assert RunConfig().engine == "simulator"
    from fedlabels.cli import build_parser

    args = build_parser().parse_args(["run", "--engine", ENGINE, "--rounds", "2"])
    assert args.engine == ENGINE


@pytest.mark.parametrize("setting", [{"malicious": 1}, {"participation": 0.5},
                                     {"dropout": 0.1}, {"insecure_reproducible_noise": True}])
def test_ray_engine_refuses_what_only_the_simulator_does(setting: dict[str, Any]) -> None:
    name = next(iter(setting))
    with pytest.raises(FedLabelsError, match=rf"engine 'flower-simulation' .* do not take "
                                             rf"{name}; remove it or use engine 'simulator'"):
        RunConfig(method="fedct", clients=5, engine=ENGINE, **setting)


def test_ray_engine_needs_a_dataset_name_and_model_specs() -> None:
    fed = fl.load_federation("breast_cancer", clients=3, seed=0)
    with pytest.raises(FedLabelsError, match="writes its sites from a dataset name"):
        fl.run("fedct", fed, engine=ENGINE, rounds=1)


def test_missing_ray_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "ray" else real(name, *a))
    with pytest.raises(FedLabelsError, match=r"needs the optional dependencies "
                                             r"flwr\[simulation\] \(ray missing\); install them "
                                             r"with `pip install 'fedlabels\[simulation\]'`"):
        fl.run("fedct", "breast_cancer", clients=3, rounds=1, engine=ENGINE)


def test_engine_is_not_part_of_the_result_name() -> None:
    from fedlabels.cli.run_options import default_output

    cfg = RunConfig(method="fedct", clients=3, rounds=2)
    assert default_output(cfg) == default_output(cfg.replace(engine=ENGINE))


@RAY
def test_ray_resources_local_and_cluster() -> None:
    from fedlabels.engines.flower.simulation import backend_config

    local = backend_config(clients=3, workers=None, address=None)
    assert local["init_args"]["num_cpus"] == max(1, min(os.cpu_count() or 1, 3))
    assert local["client_resources"] == {"num_cpus": 1, "num_gpus": 0.0}
    assert backend_config(3, 2, None)["init_args"]["num_cpus"] == 2
    cluster = backend_config(3, None, "10.0.0.1:6379")
    assert cluster["init_args"]["address"] == "10.0.0.1:6379"
    assert "num_cpus" not in cluster["init_args"]
    with pytest.raises(FedLabelsError, match=r"workers sets the CPUs of the Ray this run "
                                             r"starts; with a cluster"):
        backend_config(3, 2, "10.0.0.1:6379")


# ----------------------------------------------------------------------- a Ray cluster, locally
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ray_start(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    """``ray start --block`` in a session of its own: its process group is the node."""
    with log.open("wb") as out:
        return subprocess.Popen([str(BIN / "ray"), "start", "--block", "--disable-usage-stats",
                                 *args], stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True,
                                env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"})


def _stop(nodes: list[subprocess.Popen[bytes]]) -> None:
    for sig, wait in ((signal.SIGTERM, 20.0), (signal.SIGKILL, 5.0)):
        for node in nodes:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(node.pid, sig)
        deadline = time.monotonic() + wait
        for node in nodes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                node.wait(max(0.1, deadline - time.monotonic()))


def _address(log: Path, node: subprocess.Popen[bytes], timeout: float = 120.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace")
        if "ray start --address='" in text:
            return text.split("ray start --address='", 1)[1].split("'", 1)[0]
        if node.poll() is not None:
            break
        time.sleep(0.5)
    raise RuntimeError(f"the Ray head did not start:\n{log.read_text()[-3000:]}")


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[str]:
    """A Ray head and one worker node, one CPU each, in a temporary directory of their own
    (short: Ray's socket paths have a length limit); stopped by process group."""
    if not HAS_RAY:
        pytest.skip("Ray is not installed")
    temp = Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))
    nodes: list[subprocess.Popen[bytes]] = []
    try:
        port = _free_port()
        nodes.append(_ray_start(
            ["--head", f"--port={port}", "--num-cpus=1", f"--temp-dir={temp}",
             "--include-dashboard=false", f"--dashboard-port={_free_port()}",
             f"--ray-client-server-port={_free_port()}",
             f"--dashboard-agent-listen-port={_free_port()}",
             f"--metrics-export-port={_free_port()}",
             f"--runtime-env-agent-port={_free_port()}"], temp / "head.log"))
        address = _address(temp / "head.log", nodes[0])
        nodes.append(_ray_start([f"--address={address}", "--num-cpus=1", f"--temp-dir={temp}",
                                 f"--dashboard-agent-listen-port={_free_port()}",
                                 f"--metrics-export-port={_free_port()}",
                                 f"--runtime-env-agent-port={_free_port()}"],
                                temp / "worker.log"))
        _wait_for_nodes(address, 2, temp)
        yield address
    finally:
        _stop(nodes)
        shutil.rmtree(temp, ignore_errors=True)


def _wait_for_nodes(address: str, n: int, temp: Path, timeout: float = 120.0) -> None:
    """Until the cluster has ``n`` live nodes (``ray status`` in a subprocess: this process
    keeps no Ray session open)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = subprocess.run([str(BIN / "ray"), "status", f"--address={address}"],
                              capture_output=True, text=True, timeout=60)
        if done.stdout.count("node_") >= n:
            return
        time.sleep(1.0)
    raise RuntimeError(f"the Ray worker did not join:\n{(temp / 'worker.log').read_text()}")


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "fedlabels"), *args], capture_output=True, text=True,
                          timeout=400, env={**os.environ, **env})


@pytest.mark.parametrize("_", [pytest.param(None, marks=REAL)])
def test_cluster_recipe_cli_run_equals_simulator(_: None, ray_cluster: str,
                                                 tmp_path: Path) -> None:
    """docs/engines.md's recipe: `fedlabels run --engine flower-simulation` with RAY_ADDRESS
    runs on the cluster's two nodes and writes the simulator's result (FedCT, unequal
    clients), models file included."""
    args = ["--method", "fedct", "--dataset", "breast_cancer", "--clients", "4", "--model",
            "dt", "--partition", "quantity:1", "--rounds", "3", "--seed", "5"]
    out = tmp_path / "ray.json"
    done = _cli("-v", "run", *args, "--engine", ENGINE, "--output", str(out),
                env={"RAY_ADDRESS": ray_cluster})
    assert done.returncode == 0, done.stderr[-3000:]
    # progress: a line per round on stderr, as the simulator shows with -v
    assert [line.split(":")[1].strip() for line in done.stderr.splitlines()
            if line.startswith("fedct on breast_cancer: round")] == \
        ["round 1/3", "round 2/3", "round 3/3"]
    ray = json.loads(out.read_text())
    cfg = RunConfig(method="fedct", dataset="breast_cancer", clients=4, model="dt",
                    partition="quantity:1", rounds=3, seed=5, output=str(out))
    simulated = run_config(cfg, progress=False, save=False)  # ray.json is the CLI's
    assert len(set(ray["federation"]["client_sizes"])) > 1  # unequal clients
    assert comparable(ray) == comparable(as_json(simulated))
    engine = ray["provenance"]["engine"]
    assert (engine["name"], engine["ray"], engine["nodes"], engine["cpus"]) == \
        (ENGINE, ray_cluster, 2, 2.0)
    assert out.with_suffix(".models.npz").is_file()
    assert out.with_suffix(".rounds.csv").is_file()


@pytest.mark.parametrize("method, model", [
    pytest.param("fedavg", "mlp(hidden=16)", marks=REAL, id="fedavg"),
    pytest.param("ds-fl", "mlp(hidden=8)", marks=REAL, id="ds-fl")])
def test_ray_engine_equals_simulator(method: str, model: str, ray_cluster: str,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """fl.run(..., engine="flower-simulation") on the cluster: the simulator's records, bytes,
    final models and clinical metrics, and on_round sees each round's record."""
    monkeypatch.setenv("RAY_ADDRESS", ray_cluster)
    kw: dict[str, Any] = {"clients": 3, "model": model, "rounds": 2, "period": 5, "seed": 1,
                          "partition": "dirichlet:1", "progress": False}
    seen: list[Any] = []
    ray = fl.run(method, "breast_cancer", engine=ENGINE, on_round=seen.append, **kw)
    simulated = fl.run(method, "breast_cancer", **kw)
    assert comparable(as_json(ray)) == comparable(as_json(simulated))
    assert [r.round for r in seen] == [r.round for r in ray.rounds] == [1, 2]
    X = fl.load_federation("breast_cancer", clients=3, seed=1).X_test
    assert (ray.predict(X) == simulated.predict(X)).all()


@pytest.mark.parametrize("_", [pytest.param(None, marks=REAL)])
def test_client_error_is_one_line(_: None, ray_cluster: str, tmp_path: Path) -> None:
    """A client whose model cannot fit (one class only) stops the run with one line naming
    it and why, no traceback."""
    done = _cli("run", "--method", "fedct", "--dataset", "breast_cancer", "--clients", "3",
                "--model", "logreg", "--partition", "shards:1", "--rounds", "2",
                "--engine", ENGINE, "--output", str(tmp_path / "x.json"),
                env={"RAY_ADDRESS": ray_cluster})
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr[-3000:]
    assert lines[0].startswith("fedlabels: error: round 1: ")
    assert "LogisticRegression failed to fit" in lines[0] and "Traceback" not in done.stderr
    assert not (tmp_path / "x.json").exists()


@pytest.mark.parametrize("_", [pytest.param(None, marks=REAL)])
def test_local_ray_equals_simulator(_: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without RAY_ADDRESS the run starts (and stops) a Ray of its own, ``workers`` CPUs."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    temp = Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))
    monkeypatch.setenv("RAY_TMPDIR", str(temp))
    try:
        kw: dict[str, Any] = {"clients": 3, "model": "dt", "rounds": 2, "seed": 3,
                              "progress": False}
        ray = fl.run("fedct", "breast_cancer", engine=ENGINE, workers=2, **kw)
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    simulated = fl.run("fedct", "breast_cancer", **kw)
    assert comparable(as_json(ray)) == comparable(as_json(simulated))
    engine = ray.extra["provenance"]["engine"]
    assert (engine["ray"], engine["nodes"], engine["cpus"]) == ("local", 1, 2.0)


@pytest.mark.parametrize("_", [pytest.param(None, marks=REAL)])
def test_dp_run_on_ray_spends_what_the_simulator_spends(_: None, ray_cluster: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """DP-FedCT's sites draw their noise from OS entropy (as deployed), so the labels differ
    from any other run; the privacy record (ε, δ, events, accountant) and the bytes do not."""
    monkeypatch.setenv("RAY_ADDRESS", ray_cluster)
    kw: dict[str, Any] = {"clients": 3, "model": "dt", "rounds": 2, "seed": 2,
                          "options": {"epsilon": 1.0, "mechanism": "xor"}, "progress": False}
    ray = fl.run("dp-fedct", "breast_cancer", engine=ENGINE, **kw)
    simulated = fl.run("dp-fedct", "breast_cancer", **kw)
    privacy = as_json(ray)["privacy"]
    sites = privacy.pop("site_ledgers")  # each site's own ledger, as the site reported it
    assert privacy == as_json(simulated)["privacy"]
    assert sites["source"] == "reported by the site, not verified by the coordinator"
    assert sites["disagreements"] == [] and sorted(sites["sites"]) == ["0", "1", "2"]
    for site in sites["sites"].values():  # one run of the plan: the coordinator's ε
        assert site["releases"] == 2 and site["plan"]["method"] == "dp-fedct"
        assert site["epsilon"] == pytest.approx(privacy["epsilon"], rel=1e-9)
        assert "ledger_releases" not in site  # the lifetime stays at the site by default
    assert privacy["guarantee"] == "formal" and privacy["epsilon"] <= 1.0
    assert [(r.bytes_up, r.bytes_down) for r in ray.rounds] == \
        [(r.bytes_up, r.bytes_down) for r in simulated.rounds]
    assert ray.rounds[0].accuracies == simulated.rounds[0].accuracies  # before any noise


@pytest.mark.parametrize("_", [pytest.param(None, marks=REAL)])
def test_a_public_set_of_ones_own_on_ray_is_the_simulators(
        _: None, ray_cluster: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``public`` (a CSV at a relative path with a space) on the Ray engine: the run holds
    the file's rows as U (its size and the SHA-256 of their model inputs, U z-scored by its
    own statistics) and gives the simulator's result."""
    import hashlib

    import numpy as np
    import sklearn.datasets

    monkeypatch.setenv("RAY_ADDRESS", ray_cluster)
    monkeypatch.chdir(tmp_path)
    frame = sklearn.datasets.load_breast_cancer(as_frame=True).frame
    frame.iloc[:300].to_csv(tmp_path / "private.csv", index=False)
    public = frame.iloc[300:].drop(columns=["target"])
    public.to_csv(tmp_path / "public u.csv", index=False)
    dataset = f"csv:{tmp_path / 'private.csv'}:target"
    kw: dict[str, Any] = {"public": "public u.csv", "clients": 3, "model": "dt", "rounds": 2,
                          "seed": 4, "progress": False}
    ray = fl.run("fedct", dataset, engine=ENGINE, **kw)
    simulated = fl.run("fedct", dataset, **kw)
    record = ray.federation["public"]
    assert record["path"] == "public u.csv" and record["n_public"] == len(public) == 269
    fed = fl.load_federation(dataset, clients=3, public="public u.csv", seed=4)
    raw = public.to_numpy(dtype=np.float64)
    np.testing.assert_allclose(fed.X_public, (raw - raw.mean(0)) / raw.std(0), atol=1e-5)
    assert record["sha256"] == hashlib.sha256(fed.X_public.tobytes()).hexdigest()
    assert comparable(as_json(ray)) == comparable(as_json(simulated))
