"""Client roles in worker processes (``--workers``) give the one-process result.

* every registered method (the method contract's small cases): the result JSON with two
  workers equals the one with one, apart from timing and provenance, under the same
  reproducible secret source (the clients take turns on it); methods that draw no secret
  randomness also with the OS source, where the workers run side by side;
* unequal clients and partial participation, one worker per client;
* a worker killed mid-run is a one-line error naming its client, and the run resumes from
  its checkpoint, with workers, to the uninterrupted run's result;
* the setting is checked and reaches the simulator from the CLI, TOML and ``fl.run``.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import fedlabels as fl
from fedlabels.api import load_federation, run_config
from fedlabels.cli import main
from fedlabels.comm import Message
from fedlabels.core.errors import FedLabelsError
from fedlabels.core.randomness import reproducible
from fedlabels.data import Federation
from fedlabels.engines.inprocess import simulate
from fedlabels.engines.workers import WorkerGrid, assign, resolve_workers
from fedlabels.learners import as_models
from fedlabels.method.base import ClientRole
from fedlabels.methods import get_method
from fedlabels.results import RoundRecord, RunResult
from fedlabels.runs.checkpoint import load_checkpoint
from fedlabels.runs.config import RunConfig, load_config
from fedlabels.runs.loop import CommMeter
from test_method_contract import CASES, PERIOD, ROUNDS, SEED, Case

pytestmark = pytest.mark.filterwarnings("ignore:.*uses 1 round")

#: entries that say when, where and how fast a run ran, not what it computed
TIMING = {"wall_seconds", "seconds", "provenance", "wall_s"}


def _comparable(result: RunResult) -> Any:
    """The result's JSON without timing and provenance (and the workers setting itself)."""
    def strip(obj: Any) -> Any:
        if isinstance(obj, dict):
            return {k: strip(v) for k, v in obj.items() if k not in TIMING}
        if isinstance(obj, list):
            return [strip(v) for v in obj]
        return obj

    data = strip(json.loads(json.dumps(result.to_dict(), default=str)))
    data["config"].pop("workers", None)
    return data


def _records(result: RunResult) -> list[str]:
    """Each round as JSON (NaN-safe), without its wall-clock seconds."""
    return [json.dumps([r.round, r.local_steps, r.accuracies, r.server, r.bytes_up,
                        r.bytes_down], sort_keys=True) for r in result.rounds]


def _simulate(case: Case, federation: Federation, workers: int) -> RunResult:
    return simulate(case.impl, federation, as_models(case.model), rounds=ROUNDS,
                    period=PERIOD, seed=SEED, progress=False, options=case.options,
                    workers=workers)


@pytest.fixture(scope="module")
def federation() -> Federation:
    return load_federation("breast_cancer", clients=3, seed=SEED)


@pytest.mark.parametrize("case", CASES)
def test_two_workers_give_the_one_process_result(case: Case, federation: Federation) -> None:
    with reproducible(SEED) as source:
        alone = _simulate(case, federation, workers=1)
        drew_secrets = source.getstate() > 0
    with reproducible(SEED):
        pooled = _simulate(case, federation, workers=2)
    roles = len(case.impl.client_datasets(federation.clients))  # centralized: one
    assert pooled.extra["provenance"]["workers"] == min(2, roles)
    assert _comparable(pooled) == _comparable(alone)
    assert [m.__class__ for m in pooled.client_models] == \
        [m.__class__ for m in alone.client_models]
    if not drew_secrets:  # side by side, not taking turns: the same records
        assert _records(_simulate(case, federation, workers=2)) == _records(alone)


@pytest.mark.parametrize("method,model", [("fedct", "dt"), ("fedavg", "mlp(hidden=8)")])
def test_unequal_clients_and_partial_participation(method: str, model: str) -> None:
    fed = load_federation("breast_cancer", clients=4, partition="quantity:0.5,20",
                          seed=SEED)
    sizes = [len(c) for c in fed.clients]
    assert len(set(sizes)) > 1  # the case this test is about
    kw: dict[str, Any] = dict(model=model, rounds=4, period=5, seed=SEED, progress=False,
                              participation=2, dropout=0.2)
    alone = fl.run(method, fed, workers=1, **kw)
    pooled = fl.run(method, fed, workers=4, **kw)
    assert _comparable(pooled) == _comparable(alone)
    assert [r.participants for r in pooled.rounds] == [r.participants for r in alone.rounds]


def _workers() -> dict[tuple[int, ...], mp.Process]:
    """The live worker processes by the clients they hold (their names list them)."""
    return {tuple(int(c) for c in p.name.split("-")[2:]): p for p in mp.active_children()
            if p.name.startswith("fedlabels-worker-")}


def test_a_killed_worker_is_a_one_line_error_and_the_run_resumes(
        federation: Federation, tmp_path: Path) -> None:
    method, models = get_method("fedct"), as_models("mlp(hidden=8)")
    kw: dict[str, Any] = dict(rounds=4, period=5, seed=SEED, progress=False)
    whole = simulate(method, federation, models, workers=1, **kw)
    ckpt = tmp_path / "run.checkpoint.npz"
    victims: list[tuple[tuple[int, ...], int]] = []

    def kill_after_round_2(record: RoundRecord) -> None:
        if record.round == 2:
            pool = _workers()
            assert sorted(c for share in pool for c in share) == [0, 1, 2]
            share, victim = max(pool.items())  # the worker of the highest client
            victims.append((share, victim.pid or 0))
            os.kill(victim.pid or 0, signal.SIGKILL)

    with pytest.raises(FedLabelsError) as err:
        simulate(method, federation, models, workers=2, checkpoint=ckpt,
                 on_round=kill_after_round_2, **kw)
    message = str(err.value)
    (share, pid), = victims
    assert "\n" not in message
    assert message.startswith(f"client {share[0]}'s worker process (pid {pid}, clients "
                              f"{', '.join(map(str, share))}) died in round 3 (killed by "
                              "signal 9)")
    assert "fedlabels resume RESULT.json" in message
    assert not mp.active_children()  # the other worker was stopped too
    on_disk = len(load_checkpoint(ckpt).records)  # round 2's, or round 1's if paced off
    assert on_disk in (1, 2)
    resumed = simulate(method, federation, models, workers=2, resume=ckpt, **kw)
    assert resumed.extra["provenance"]["resumed"][0]["from_round"] == on_disk
    assert _records(resumed) == _records(whole)
    assert _comparable(resumed)["final"] == _comparable(whole)["final"]


def test_a_failing_client_raises_its_own_error_from_a_worker(
        federation: Federation) -> None:
    bad = [as_models("dt")[0], as_models("dt")[0], _Failing()]
    for workers in (1, 2):
        with pytest.raises(FedLabelsError, match=r"^client 2: model _Failing failed to fit"):
            simulate(get_method("fedct"), federation, bad, rounds=2, seed=SEED,
                     progress=False, workers=workers)
    assert not mp.active_children()


class _Failing:
    """A scikit-learn-style estimator whose fit always fails."""

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        return {}

    def set_params(self, **params: Any) -> _Failing:
        return self

    def fit(self, X: Any, y: Any) -> _Failing:
        raise ValueError("no fit today")

    def predict(self, X: Any) -> Any:
        raise ValueError("not fitted")


def test_workers_setting_is_checked_and_defaults_to_the_cores(
        monkeypatch: pytest.MonkeyPatch) -> None:
    cores = len(os.sched_getaffinity(0))
    monkeypatch.setenv("FEDLABELS_WORKERS", "2")  # conftest's 1 would hide the default
    assert resolve_workers(None, 100) == 2
    monkeypatch.setenv("FEDLABELS_WORKERS", "two")
    with pytest.raises(FedLabelsError, match="FEDLABELS_WORKERS must be an integer"):
        resolve_workers(None, 3)
    monkeypatch.delenv("FEDLABELS_WORKERS")
    assert resolve_workers(None, 100) == cores
    assert resolve_workers(None, 1) == 1
    assert resolve_workers(8, 3) == 3  # never more workers than clients
    for bad in (0, -1, 1.5, True):
        with pytest.raises(FedLabelsError, match="workers must be an integer >= 1"):
            resolve_workers(bad, 3)  # type: ignore[arg-type]
    with pytest.raises(FedLabelsError, match="workers must be an integer >= 1, got 0"):
        RunConfig(workers=0)
    # the larger clients are spread first; every client lands on exactly one worker
    shares = assign({0: 10, 1: 300, 2: 40, 3: 250, 4: 5}, 2)
    assert sorted(c for s in shares for c in s) == [0, 1, 2, 3, 4]
    assert {1, 3} not in [set(s) & {1, 3} for s in shares if len(set(s) & {1, 3}) == 2]


def test_workers_from_toml_and_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    toml = tmp_path / "run.toml"
    toml.write_text("method = 'fedct'\nworkers = 2\nrounds = 2\nclients = 3\n")
    assert load_config(toml).workers == 2
    out = tmp_path / "r.json"
    assert main(["run", "--config", str(toml), "--workers", "3", "--no-progress",
                 "--output", str(out)]) == 0
    assert json.loads(out.read_text())["provenance"]["workers"] == 3
    # resume takes --workers (it does not change the run): extend it to 3 rounds
    assert main(["resume", str(out), "--rounds", "3", "--workers", "2",
                 "--no-progress"]) == 0
    extended = json.loads(out.read_text())
    whole = run_config(RunConfig(method="fedct", rounds=3, clients=3, workers=1),
                       progress=False)
    assert extended["provenance"]["workers"] == 2
    assert [r["accuracies"] for r in extended["rounds"]] == \
        [r.accuracies for r in whole.rounds]
    assert main(["run", "--workers", "0", "--output", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err
    assert "workers must be an integer >= 1, got 0" in err and "Traceback" not in err
    assert main(["audit", "--config", str(toml), "--output", str(tmp_path / "a.json")]) == 2
    assert "workers: simulator settings that only `fedlabels run` takes" in \
        capsys.readouterr().err


def test_runs_that_need_one_process_say_why(federation: Federation,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    method, models = get_method("fedavg"), as_models("mlp(hidden=8)")
    kw: dict[str, Any] = dict(rounds=1, period=2, seed=SEED, progress=False)
    with pytest.raises(FedLabelsError, match=r"^workers=2: this run keeps its clients in one "
                                             r"process because its clients train together"):
        simulate(method, federation, models, batch_clients="on", workers=2, **kw)
    monkeypatch.setenv("FEDLABELS_WORKERS", "2")  # a default, not a request: one process
    result = simulate(method, federation, models, batch_clients="on", workers=None, **kw)
    assert result.extra["provenance"]["workers"] == 1
    assert result.extra["device"]["batched_clients"] is True
    # after a GPU run in this process a fork cannot train (autograd's threads): one process
    import torch

    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    with pytest.raises(FedLabelsError, match=r"process because this process has used CUDA"):
        simulate(method, federation, models, workers=2, **kw)
    assert simulate(method, federation, models, workers=None,
                    **kw).extra["provenance"]["workers"] == 1


def test_an_interrupted_run_keeps_its_rounds_and_models(federation: Federation) -> None:
    def stop_after_round_2(record: RoundRecord) -> None:
        if record.round == 2:
            raise KeyboardInterrupt

    runs = [simulate(get_method("fedct"), federation, as_models("rf"), rounds=4, seed=SEED,
                     progress=False, workers=n, on_round=stop_after_round_2) for n in (1, 2)]
    for result in runs:
        assert result.extra["interrupted"] is True and len(result.rounds) == 2
    assert _comparable(runs[1]) == _comparable(runs[0])
    X = federation.X_test[:50]
    for alone, pooled in zip(runs[0].client_models, runs[1].client_models, strict=True):
        assert (alone.predict(X) == pooled.predict(X)).all()
    assert not mp.active_children()


class _Waiting(ClientRole):
    """A client whose reply is 1 MB (more than a pipe holds); client 0 waits until client
    3, its worker's neighbour's second client, has started (or 20 s)."""

    def __init__(self, cid: int, marks: Path) -> None:
        self.cid, self.marks = cid, marks
        self.handlers = {"work": self.work}

    def work(self, message: Message) -> Message:
        (self.marks / str(self.cid)).touch()
        if self.cid == 0:
            waited = 0.0
            while not (self.marks / "3").exists() and waited < 20:
                time.sleep(0.05)
                waited += 0.05
        started = np.array([(self.marks / "3").exists()])
        return Message("work", {"payload": np.zeros(1 << 20, np.uint8), "saw_3": started})


def test_workers_run_side_by_side_when_replies_fill_the_pipe(tmp_path: Path) -> None:
    """A worker keeps handling its clients while the simulator still reads another worker:
    client 3 (second of worker 1) starts while client 0 (worker 0) is still running, even
    though client 1's reply, sent before, is larger than a pipe buffer."""
    clients = {cid: _Waiting(cid, tmp_path) for cid in range(4)}
    grid = WorkerGrid(clients, CommMeter(), 2, {cid: 1 for cid in clients})  # type: ignore[arg-type]
    assert grid.shares == [[0, 2], [1, 3]]
    grid.record_timeline = True
    try:
        replies = grid.exchange({cid: Message("work") for cid in clients}, 0)
    finally:
        grid.close()
    assert bool(replies[0].arrays["saw_3"][0])  # client 3 ran while client 0 waited
    assert sorted(replies) == [0, 1, 2, 3]
    assert all(len(r.arrays["payload"]) == 1 << 20 for r in replies.values())
    # the timeline: one entry per handled message, each with its worker and times
    spans = {e["client"]: e for e in grid.timeline if e["event"] == "handle"}
    assert {c: spans[c]["worker"] for c in spans} == {0: 0, 2: 0, 1: 1, 3: 1}
    assert spans[3]["start"] < spans[0]["end"]
    # each message's CPU seconds in its worker's thread: never more than its wall time
    assert all(0 <= e["cpu"] <= e["end"] - e["start"] + 0.01 for e in spans.values())


def test_big_integer_threads_per_worker_stay_within_twice_the_cores(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from fedlabels.engines import workers as w

    for cores, n_workers, expected in [(2, 1, 2), (2, 2, 2), (2, 5, 1), (16, 2, 16),
                                       (16, 16, 2), (16, 5, 6)]:
        monkeypatch.setattr(w, "available_cores", lambda c=cores: c)
        threads = w.crypto_threads_per_worker(n_workers)
        assert threads == expected and threads * n_workers <= max(2 * cores, n_workers)


def test_paillier_xclp_one_worker_per_client_equals_one_process_with_threads(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # the layout the Paillier benchmark uses on 2 cores (one process per client, one
    # big-integer thread each) against one process with two threads: unequal clients
    fed = load_federation("breast_cancer", clients=4, partition="quantity:0.5,20",
                          seed=SEED)
    assert len({len(c) for c in fed.clients}) > 1
    kw: dict[str, Any] = dict(rounds=1, seed=SEED, progress=False, options={
        "secure": "paillier", "lsh_bits": 32, "knn": 3, "labeled_fraction": 0.3,
        "key_bits": 512, "insecure_small_keys": True, "test_points": 20})
    runs = {}
    for workers, threads in ((1, 2), (4, 1), (2, 2)):
        monkeypatch.setenv("FEDLABELS_CRYPTO_THREADS", str(threads))
        with reproducible(SEED):
            runs[workers] = fl.run("xclp", fed, workers=workers, **kw)
        assert runs[workers].extra["provenance"]["workers"] == workers
    assert _comparable(runs[4]) == _comparable(runs[1]) == _comparable(runs[2])
    assert runs[1].extra["xclp"]["n_points"] == sum(len(c) for c in fed.clients) + 4 * 20


@pytest.mark.parametrize("workers", [1, 2])
def test_wall_seconds_include_the_final_test_predictions(
        federation: Federation, workers: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The final clinical metrics (the clients' test-set predictions, made by the workers
    in ``finish`` or here in one process) count as the run's wall time either way, so 1
    and 2 workers are timed alike."""
    from fedlabels.engines import inprocess

    real = inprocess.final_clinical

    def slow(*args: Any, **kwargs: Any) -> Any:
        time.sleep(0.5)
        return real(*args, **kwargs)

    monkeypatch.setattr(inprocess, "final_clinical", slow)
    result = simulate(get_method("fedct"), federation, as_models("decision_tree"),
                      rounds=1, seed=SEED, progress=False, workers=workers)
    assert result.extra["provenance"]["workers"] == workers
    assert "metrics" in result.extra["clinical"]
    assert result.wall_seconds >= 0.5


def test_states_travel_out_of_band_equal_and_writable() -> None:
    """A worker's report crosses the pipe with its arrays' memory sent as it is (pickle
    protocol 5 buffers) and arrives equal: big, empty, 0-d, non-contiguous, Fortran-ordered
    and boolean arrays, nested in a state; the received arrays are writable and own no
    memory of the sender's."""
    import threading

    from fedlabels.engines.workers import _recv_out_of_band, _send_out_of_band

    rng = np.random.default_rng(0)
    big = rng.random((700, 1000), dtype=np.float32)  # 2.8 MB: more than a pipe holds
    report = {3: {"model.0.weight": big, "empty": np.zeros((0, 4)), "step": np.array(7.0),
                  "strided": np.arange(20.0)[::3], "fortran": np.asfortranarray(big[:5]),
                  "mask": rng.random(9) < 0.5, "name": "x", "n": 4}}
    parent, child = mp.Pipe()
    sender = threading.Thread(target=_send_out_of_band, args=(child, "states", report))
    sender.start()
    command, _, sizes = parent.recv()
    got = _recv_out_of_band(parent, sizes)
    sender.join()
    assert command == "states" and sizes and max(sizes) == big.nbytes
    assert got.keys() == report.keys() and got[3].keys() == report[3].keys()
    for key, value in report[3].items():
        if isinstance(value, np.ndarray):
            np.testing.assert_array_equal(got[3][key], value)
            assert got[3][key].dtype == value.dtype and got[3][key].flags.writeable
        else:
            assert got[3][key] == value
    got[3]["model.0.weight"][0, 0] = -1.0  # its own memory
    assert big[0, 0] != -1.0


def test_checkpoint_states_come_from_the_workers_once_they_run(
        federation: Federation) -> None:
    """Before the pool starts the roles hold the states (``states()`` is None, so a
    checkpoint takes the roles' own, copied); once it runs, the workers' states arrive."""
    from fedlabels.runs.session import build_session

    session = build_session("fedct", federation, as_models("mlp(hidden=8)"), rounds=1,
                            period=2, seed=0)
    grid = WorkerGrid(session.clients, CommMeter(), 2, dict(enumerate(session.client_sizes)))
    assert grid.states() is None
    try:
        grid.start()
        received = grid.states()
    finally:
        grid.close()
    assert received is not None and sorted(received) == sorted(session.clients)
    for cid, role in session.clients.items():
        own = role.state_dict()
        assert received[cid].keys() == own.keys()
        for key, value in own.items():
            if isinstance(value, np.ndarray):
                np.testing.assert_array_equal(received[cid][key], value)


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="prctl: Linux only")
def test_workers_die_with_a_simulator_killed_by_sigkill(tmp_path: Path) -> None:
    """SIGKILL gives the simulator no chance to stop its workers: they die with it (parent
    death signal), and none is left waiting on its pipe."""
    import subprocess
    import sys

    from fedlabels.deploy.processes import alive, descendants

    proc = subprocess.Popen([sys.executable, "-m", "fedlabels", "run", "--method", "fedct",
                             "--model", "dt", "--clients", "4", "--rounds", "400",
                             "--workers", "2", "--no-progress", "--no-checkpoint",
                             "--output", str(tmp_path / "r.json")],
                            cwd=tmp_path, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    workers: list[int] = []
    while len(workers) < 2 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
        workers = descendants([proc.pid])
    assert len(workers) >= 2, "the workers never started"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 20
    while any(alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [pid for pid in workers if alive(pid)], "workers outlived the simulator"


def test_a_signal_to_the_process_group_is_an_interrupt_and_the_run_resumes(
        tmp_path: Path) -> None:
    """SIGTERM to the whole group (`timeout`, a service manager) stops the workers as well
    as the simulator: said as an interrupt with its checkpoint kept, not as a worker crash,
    and `fedlabels resume` finishes the run."""
    import subprocess
    import sys

    from fedlabels.deploy.processes import descendants

    out = tmp_path / "r.json"
    # 150 rounds (of about 10-20 ms of CPU each here): the signal comes once the first
    # checkpoint is on disk, after round 1 or 2, with 100 rounds or more of the run left (it
    # waited 1 s before, and 400 rounds had a margin much like it; resuming them cost the
    # most of this test's 10 CPU-s)
    proc = subprocess.Popen([sys.executable, "-m", "fedlabels", "run", "--method", "fedct",
                             "--model", "dt", "--clients", "4", "--rounds", "150",
                             "--workers", "2", "--no-progress", "--output", str(out)],
                            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    deadline = time.monotonic() + 120
    checkpoint = tmp_path / "r.checkpoint.npz"
    while (len(descendants([proc.pid])) < 2 or not checkpoint.exists()) \
            and time.monotonic() < deadline:
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    said = err.decode()
    assert "interrupted by a signal that stopped its worker processes too" in said, said
    assert "died" not in said
    resumed = subprocess.run([sys.executable, "-m", "fedlabels", "resume", str(out),
                              "--no-progress"], cwd=tmp_path, capture_output=True, text=True,
                             timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert len(json.loads(out.read_text())["rounds"]) == 150


class _Echo(ClientRole):
    """A client replying with the sum of the array it was sent."""

    def __init__(self) -> None:
        self.handlers = {"echo": self.echo}

    def echo(self, message: Message) -> Message:
        return Message("echo", {"sum": np.array([message.arrays["x"].sum()])})


def test_a_broadcast_is_encoded_once_and_pickled_once_per_worker(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """One Message for every client is encoded once (it was once per client) and its bytes
    shared, so a worker's batch pickles one copy for its two clients; the bytes each client
    is counted are still its message's encoded size, and other messages are encoded each."""
    import pickle

    from fedlabels.comm import encode_message
    from fedlabels.engines import workers

    encoded: list[int] = []
    monkeypatch.setattr(workers, "encode_message",
                        lambda m: (encoded.append(id(m)), encode_message(m))[1])
    meter = CommMeter()
    grid = WorkerGrid({cid: _Echo() for cid in range(4)}, meter, 2,  # type: ignore[arg-type]
                      dict.fromkeys(range(4), 1))
    sent: list[int] = []
    real_send = grid._send
    monkeypatch.setattr(grid, "_send", lambda w, request, *a: (
        sent.append(len(pickle.dumps(request))), real_send(w, request, *a))[1])
    broadcast = Message("echo", {"x": np.arange(100_000, dtype=np.float64)})
    try:
        replies = grid.exchange(dict.fromkeys(range(4), broadcast), 0)
        assert encoded == [id(broadcast)]
        assert len(sent) == 2 and max(sent) < 1.2 * len(encode_message(broadcast))
        own = {cid: Message("echo", {"x": np.full(3, float(cid))}) for cid in range(4)}
        again = grid.exchange(own, 1)
    finally:
        grid.close()
    assert {c: float(r.arrays["sum"][0]) for c, r in replies.items()} == \
        dict.fromkeys(range(4), float(broadcast.arrays["x"].sum()))
    assert sorted(encoded[1:]) == sorted(id(m) for m in own.values())
    assert {c: float(r.arrays["sum"][0]) for c, r in again.items()} == {0: 0, 1: 3, 2: 6, 3: 9}
    assert meter.per_client(0, [0, 1, 2, 3], "down") == [len(encode_message(broadcast))] * 4
    assert meter.per_client(1, [0, 1, 2, 3], "down") == \
        [len(encode_message(own[c])) for c in range(4)]
