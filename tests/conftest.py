"""Shared fixtures: small federations from bundled data, an isolated dataset cache."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

# Tests run one per core (pytest-xdist) on tiny arrays: a BLAS or OpenMP pool per process
# only spins against the other workers (about 8 % of the suite's CPU time on 2 cores). Set
# before numpy, scipy and torch load their pools; test subprocesses inherit it.
for _pool in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_pool, "1")

import pytest  # noqa: E402
import torch  # noqa: E402

import fedlabels as fl  # noqa: E402

# Tiny test models gain nothing from intra-op threads, and spinning OpenMP threads slow
# everything down badly when the (2-core) machine is busy; one thread keeps tests fast.
torch.set_num_threads(1)
# Runs keep their clients in this process unless a test asks for workers (tests spy on
# client roles with monkeypatch, which a forked worker would not report back).
os.environ.setdefault("FEDLABELS_WORKERS", "1")


class RunsCode:
    """What a malicious pickle does: call a function of its choice while loading (here it
    makes the directory ``marker``, the proof that the file's code ran)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (os.mkdir, (str(self.marker),))


@pytest.fixture
def no_data(monkeypatch):  # type: ignore[no-untyped-def]
    """Fail the test if a run loads data: its inputs (options, parameters, config values,
    client counts) must be refused before."""
    import fedlabels.runs.federation

    def refuse(dataset, *args, **kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError(f"{dataset} was loaded before the run's inputs were checked")

    monkeypatch.setattr(fedlabels.runs.federation, "load_federation", refuse)


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    """Tests never see (or write) the user's real dataset cache."""
    monkeypatch.setenv("FEDLABELS_CACHE", str(tmp_path_factory.mktemp("cache")))


@pytest.fixture(scope="session")
def breast_cancer_fed():
    """The FedCT paper's breast-cancer split: m = 5, |U| = 370, 85 private, 114 test."""
    return fl.load_federation("breast_cancer", clients=5, seed=0)


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """``fedlabels demo --no-progress`` run once (~5 CPU-s) for the tests that only read
    what it wrote: its folder and what it said on stderr (its dataset cache a fresh one)."""
    import io

    from fedlabels.cli import main

    folder, err = tmp_path_factory.mktemp("demo"), io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stderr(err):
        mp.setenv("FEDLABELS_CACHE", str(tmp_path_factory.mktemp("demo_cache")))
        assert main(["demo", "--output-dir", str(folder), "--no-progress"]) == 0
    return folder, err.getvalue()


def digits_with_sizes(sizes: tuple[int, ...], n_unlabeled: int, n_test: int) -> fl.Federation:
    """A digits federation whose clients hold ``sizes`` records (unequal clients)."""
    from dataclasses import replace

    base = fl.load_federation("digits", clients=len(sizes), unlabeled=n_unlabeled,
                              private_per_client=max(sizes), test=n_test, seed=0)
    return replace(base, clients=[fl.data.ClientData(c.X[:n], c.y[:n])
                                  for c, n in zip(base.clients, sizes, strict=True)])


def load_benchmark(name: str):
    """A script of ``benchmarks/`` (``NAME.py``) imported as module ``NAME`` (registered in
    ``sys.modules``: dataclasses look their module up there), with ``benchmarks/`` on the
    path, as when a script runs (some import a sibling, when loaded or when called)."""
    import importlib.util
    import sys
    from pathlib import Path

    folder = Path(__file__).resolve().parents[1] / "benchmarks"
    spec = importlib.util.spec_from_file_location(name, folder / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    spec.loader.exec_module(module)
    return module


def pytest_collection_modifyitems(config, items):
    """Tests marked ``cuda`` run only where torch sees a CUDA GPU (benchmarks/device_check.py)."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if item.get_closest_marker("cuda") is not None:
            item.add_marker(skip)


def spy_fedct_votes(monkeypatch, record) -> None:  # type: ignore[no-untyped-def]
    """Wrap ``FedCTServer.run_round`` so that ``record(votes, labels)`` gets each round's
    vote matrix (as ``collect_votes`` returned it) and the consensus it gave."""
    from fedlabels.methods.fedct.fedct import FedCTServer

    run_round = FedCTServer.run_round

    def server_round(server, rnd, grid):  # type: ignore[no-untyped-def]
        collect = server.collect_votes
        seen: list = []
        server.collect_votes = lambda replies: seen.append(collect(replies)) or seen[-1]
        out = run_round(server, rnd, grid)
        assert server.labels is not None
        record(seen[0], server.labels.copy())
        return out

    monkeypatch.setattr(FedCTServer, "run_round", server_round)


def keep_client_roles(monkeypatch: pytest.MonkeyPatch, method_name: str) -> dict:
    """The client roles a run of ``method_name`` builds, by client id (a spy on
    ``make_client``), for tests that read a client's own ledger or state."""
    from fedlabels.methods import METHODS

    method, roles = METHODS[method_name], {}
    orig = method.make_client

    def keep(cid, *args, **kwargs):  # type: ignore[no-untyped-def]
        roles[cid] = orig(cid, *args, **kwargs)
        return roles[cid]

    monkeypatch.setattr(method, "make_client", keep)
    return roles


def cli_one_line_error(capsys: pytest.CaptureFixture[str], args: list[str]) -> str:
    """The error of ``fedlabels ARGS``, checked to be one line (no traceback) with exit 2."""
    from fedlabels.cli import main

    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    return err


@contextlib.contextmanager
def fed_fifo(path: Path, data: bytes) -> Iterator[None]:
    """A named pipe at ``path`` that a thread keeps writing ``data`` into while the block
    runs: a reader that opens it gets ``data`` and an end instead of hanging, so a test
    that expects the pipe refused unread fails, not hangs, without the refusal."""
    import threading
    import time

    os.mkfifo(path)
    done = threading.Event()

    def feed() -> None:
        while not done.is_set():
            try:
                fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:  # no reader yet
                time.sleep(0.01)
                continue
            os.write(fd, data)
            os.close(fd)

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    try:
        yield
    finally:
        done.set()
        writer.join()
