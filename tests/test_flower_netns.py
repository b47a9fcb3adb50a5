"""Real multi-host on one machine: the SuperLink and each SuperNode in its own network namespace.

Namespaces ``<tag>-link`` (the coordinator: SuperLink on its own loopback, the Fleet-only
proxy on 10.77.0.1), ``<tag>-s<i>`` (site i: its SuperNode in ``--isolation process`` and
its pinned executor, address 10.77.0.1<i>), ``<tag>-out`` (an outsider holding only
``ca.crt``, 10.77.0.99), joined by veth pairs to a bridge in ``<tag>-br``. TLS and SuperNode
authentication throughout. A FedCT run must equal the simulator, and the outsider's attack
replay must fail. Every namespace and every process in it is removed at the end, also when
the test fails (``Netns.close``, tested on its own below).

Skipped where ``ip netns`` cannot be used (not root, no iproute2, no CAP_SYS_ADMIN).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest

from fedlabels.api import run_config
from fedlabels.deploy.launcher import FLOWER_ENV, read_outcome
from fedlabels.deploy.tls import make_node_keys, make_tls_files
from fedlabels.engines.flower.prepare import prepare_run
from fedlabels.runs.config import RunConfig
from test_flower_attack import _connection, _evil_app, _flwr, _stole

# one subnet for both tests: never two at once (make test runs the real-process tests with
# --dist loadfile: a file's tests on one worker, one after another)
pytestmark = [pytest.mark.slow, pytest.mark.realprocess]

SUBNET = "10.77.0"
LINK_IP, FLEET_PORT, CONTROL_PORT, RUNTIME_PORT = f"{SUBNET}.1", 9092, 9093, 9094


def _ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=False)


def _netns_unavailable() -> str | None:
    if shutil.which("ip") is None:
        return "iproute2 (`ip`) is not installed"
    if os.geteuid() != 0:
        return "`ip netns` needs root"
    probe = f"flprobe{secrets.token_hex(3)}"
    made = _ip("netns", "add", probe)
    if made.returncode != 0:
        return f"`ip netns add` failed: {made.stderr.strip()}"
    _ip("netns", "del", probe)
    return None


class Netns:
    """Namespaces on a private bridge, processes started in them; ``close`` removes all."""

    def __init__(self, tag: str) -> None:
        self.tag = tag
        self.names: list[str] = []
        self.procs: list[subprocess.Popen[bytes]] = []
        self.files: list[object] = []
        self.bridge = self.add("br", None)
        self._run("ip", "-n", self.bridge, "link", "add", "br0", "type", "bridge")
        self._run("ip", "-n", self.bridge, "link", "set", "br0", "up")

    def _run(self, *argv: str) -> None:
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip()}")

    def add(self, role: str, address: str | None) -> str:
        """A namespace ``<tag>-<role>``, on the bridge at ``address`` (None: the bridge)."""
        name = f"{self.tag}-{role}"
        self._run("ip", "netns", "add", name)
        self.names.append(name)
        self._run("ip", "-n", name, "link", "set", "lo", "up")
        if address is not None:
            ours, theirs = f"{self.tag}{role}", f"{self.tag}{role}b"  # <= 15 characters
            self._run("ip", "link", "add", ours, "type", "veth", "peer", "name", theirs)
            self._run("ip", "link", "set", ours, "netns", name)
            self._run("ip", "link", "set", theirs, "netns", self.bridge)
            self._run("ip", "-n", self.bridge, "link", "set", theirs, "master", "br0", "up")
            self._run("ip", "-n", name, "addr", "add", f"{address}/24", "dev", ours)
            self._run("ip", "-n", name, "link", "set", ours, "up")
        return name

    def start(self, ns: str, name: str, argv: list[str], home: Path,
              logs: Path) -> subprocess.Popen[bytes]:
        home.mkdir(parents=True, exist_ok=True)
        logs.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **FLOWER_ENV, "FLWR_HOME": str(home),
               "PATH": os.pathsep.join([str(Path(sys.executable).parent),
                                        os.environ["PATH"]])}
        log = open(logs / f"{name}.log", "wb")  # noqa: SIM115 - closed in close()
        self.files.append(log)
        proc = subprocess.Popen(["ip", "netns", "exec", ns, *argv], env=env, stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        self.procs.append(proc)
        return proc

    def pids(self) -> list[int]:
        found = []
        for ns in self.names:
            listed = _ip("netns", "pids", ns).stdout.split()
            found += [int(p) for p in listed if p.isdigit()]
        return found

    def close(self) -> None:
        """Kill every process in the namespaces, then delete the namespaces."""
        for _ in range(3):
            pids = self.pids() + [p.pid for p in self.procs if p.poll() is None]
            if not pids:
                break
            for pid in pids:
                with suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.5)
        for proc in self.procs:
            with suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        for fh in self.files:
            fh.close()  # type: ignore[attr-defined]
        for ns in reversed(self.names):
            _ip("netns", "del", ns)


@contextmanager
def netns(tag: str) -> Iterator[Netns]:
    nets = Netns(tag)
    try:
        yield nets
    finally:
        nets.close()


def _listed() -> set[str]:
    return {line.split()[0] for line in _ip("netns", "list").stdout.splitlines() if line}


@pytest.fixture
def tag() -> str:
    reason = _netns_unavailable()
    if reason:
        pytest.skip(f"network namespaces unavailable: {reason}")
    return f"fl{secrets.token_hex(2)}"


def test_namespaces_and_their_processes_are_removed_on_failure(tag: str,
                                                               tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="boom"), netns(tag) as nets:
        ns = nets.add("s0", f"{SUBNET}.10")
        sleeper = nets.start(ns, "sleep", ["sleep", "300"], tmp_path / "h", tmp_path / "l")
        assert ns in _listed()
        # `ip netns exec` enters the namespace after Popen returns: a moment may pass before
        # the sleeper is listed there (a clean-clone `make test` once saw none yet)
        _wait_for(nets.pids, 10, "the sleeper listed in its namespace")
        raise RuntimeError("boom")
    assert not {n for n in _listed() if n.startswith(tag)}
    assert sleeper.poll() is not None


def _wait_for(check: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return
        time.sleep(0.5)
    raise AssertionError(f"{what} within {timeout:g} s")


def test_fedct_across_namespaces_equals_the_simulator(tag: str, tmp_path: Path) -> None:
    cfg = RunConfig(method="fedct", dataset="breast_cancer", clients=3, model="dt", rounds=2,
                    eval_every=2, seed=3)
    prepared = prepare_run(cfg, tmp_path / "sites", output=tmp_path / "result.json",
                           reply_timeout=120, node_timeout=120)
    tls = make_tls_files(tmp_path / "certs", [LINK_IP])
    keys = make_node_keys(tmp_path / "keys", cfg.clients)
    logs, homes = tmp_path / "logs", tmp_path / "homes"
    exe = Path(sys.executable).parent
    with netns(tag) as nets:
        link = nets.add("link", LINK_IP)
        nets.start(link, "superlink", [
            str(exe / "flower-superlink"), "--ssl-certfile", str(tls.server_cert),
            "--ssl-keyfile", str(tls.server_key), "--ssl-ca-certfile", str(tls.ca_cert),
            "--enable-supernode-auth", "--disable-runtime-dependency-installation",
            "--host", "127.0.0.1", "--port", str(CONTROL_PORT)], homes / "link", logs)
        nets.start(link, "fleet_proxy", [
            sys.executable, "-m", "fedlabels.deploy.fleet_proxy",
            "--listen", f"{LINK_IP}:{FLEET_PORT}",
            "--superlink", f"https://127.0.0.1:{CONTROL_PORT}",
            "--ssl-certfile", str(tls.server_cert), "--ssl-keyfile", str(tls.server_key),
            "--ssl-ca-certfile", str(tls.ca_cert)], homes / "proxy", logs)
        coordinator = _connection(homes / "cli", f"127.0.0.1:{CONTROL_PORT}", tls.ca_cert)
        in_link = ("ip", "netns", "exec", link)
        _wait_for(lambda: _flwr(coordinator, "supernode", "list", "fed", prefix=in_link,
                                timeout=30).returncode == 0, 60, "the SuperLink did not start")
        for _, public in keys:
            done = _flwr(coordinator, "supernode", "register", str(public), "fed",
                         prefix=in_link)
            assert done.returncode == 0, done.stdout + done.stderr
        for cid, (private, _) in enumerate(keys):
            site = nets.add(f"s{cid}", f"{SUBNET}.1{cid}")
            nets.start(site, f"supernode_{cid}", [
                str(exe / "flower-supernode"), "--superlink", f"{LINK_IP}:{FLEET_PORT}",
                "--root-certificates", str(tls.ca_cert),
                "--auth-supernode-private-key", str(private), "--isolation", "process",
                "--host", "127.0.0.1", "--port", str(RUNTIME_PORT),
                "--node-config", prepared.node_config(cid)], homes / f"s{cid}", logs)
            nets.start(site, f"site_exec_{cid}", [
                sys.executable, "-m", "fedlabels.deploy.site_exec",
                "--runtime-api-address", f"127.0.0.1:{RUNTIME_PORT}"], homes / f"s{cid}",
                logs)

        # the outsider: its own namespace, ca.crt, a fresh key, its own app
        out = nets.add("out", f"{SUBNET}.99")
        in_out = ("ip", "netns", "exec", out)
        outsider = tmp_path / "outsider"
        _, own_public = make_node_keys(outsider / "keys", 1)[0]
        loot, marker = outsider / "loot.bin", tmp_path / "marker.bin"
        evil = _evil_app(outsider, loot, marker)
        for port in (FLEET_PORT, CONTROL_PORT):  # the sites' port, and the SuperLink's
            home = _connection(outsider / f"home{port}", f"{LINK_IP}:{port}", tls.ca_cert)
            attempts = {"list": _flwr(home, "supernode", "list", "fed", prefix=in_out,
                                      timeout=60),
                        "register": _flwr(home, "supernode", "register", str(own_public),
                                          "fed", prefix=in_out, timeout=60),
                        "run": _flwr(home, "run", str(evil), "fed", prefix=in_out,
                                     timeout=90)}
            for what, done in attempts.items():
                assert done.returncode != 0, f"outsider {what} via :{port}:\n{done.stdout}"
        assert _stole(loot, marker, prepared.client_paths[0].read_bytes()) == []

        # the coordinator's run
        run = nets.start(link, "flwr_run", [str(exe / "flwr"), "run",
                                            str(prepared.app_dir), "fed", "--stream"],
                         coordinator, logs)
        status = Path(prepared.spec.status)

        def done() -> bool:
            with suppress(OSError, ValueError):
                return json.loads(status.read_text()).get("status") in (
                    "completed", "stopped", "failed")
            return False

        _wait_for(done, 500, "the run did not finish")
        with suppress(subprocess.TimeoutExpired):
            run.wait(timeout=20)
        deployed = read_outcome(prepared, run.returncode or 0, logs)
    assert not {n for n in _listed() if n.startswith(tag)}
    simulated = run_config(cfg)
    assert deployed.final == simulated.final
    for d, s in zip(deployed.rounds, simulated.rounds, strict=True):
        assert d.accuracies == s.accuracies
        assert (d.bytes_up, d.bytes_down) == (s.bytes_up, s.bytes_down)
    assert deployed.extra["deployment"]["lost"] == {}
