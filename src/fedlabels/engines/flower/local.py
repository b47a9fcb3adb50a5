"""``fedlabels deploy local``: a real Flower deployment on 127.0.0.1.

Starts one ``flower-superlink`` and M ``flower-supernode`` processes (insecure mode,
distinct free ports, each in its own process group with its own ``FLWR_HOME``), submits the
app with ``flwr run ... --stream``, and reads back the result the ServerApp wrote. Every
process it started is stopped on success, failure, timeout, Ctrl-C or SIGTERM (SIGTERM to
each process group, SIGKILL after a grace period), including the ``flower-superexec``,
``flwr-serverapp`` and ``flwr-clientapp`` children those processes spawn.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from contextlib import suppress
from pathlib import Path
from typing import IO, Any

from fedlabels.config import RunConfig
from fedlabels.engines.flower.prepare import PreparedRun, prepare_run
from fedlabels.engines.runner import terminate_as_interrupt
from fedlabels.errors import FedLabelsError
from fedlabels.results import RunResult, load_result

FLOWER_ENV = {"FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_UPDATE_CHECK": "1",
              "PYTHONUNBUFFERED": "1",
              # SuperExec looks for new tasks every 1 s by default; a message waits less
              "FLWR_SUPEREXEC_TASK_POLL_INTERVAL": "0.1"}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _executable(name: str) -> str:
    here = Path(sys.executable).parent / name
    if here.is_file():
        return str(here)
    found = shutil.which(name)
    if not found:
        raise FedLabelsError(f"{name} not found; install Flower with "
                             "`pip install 'fedlabels[flower]'`.")
    return found


def _wait_for_port(port: int, proc: subprocess.Popen[bytes], what: str, log: Path,
                   timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise FedLabelsError(f"{what} exited with code {proc.returncode} while starting; "
                                 f"see {log}:\n{_tail(log)}")
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.settimeout(0.2)
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise FedLabelsError(f"{what} did not open port {port} within {timeout:g} s; see {log}.")


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


class LocalDeployment:
    """A SuperLink and M SuperNodes on 127.0.0.1, for one prepared run.

    Use as a context manager; leaving it stops every process it started.
    """

    def __init__(self, prepared: PreparedRun, workdir: str | Path, *,
                 startup_timeout: float = 60.0, secure: bool = False,
                 echo: bool = False) -> None:
        self.prepared = prepared
        self.echo = echo
        self.secure = secure
        self.tls: Any = None
        self.workdir = Path(workdir)
        self.logs = self.workdir / "logs"
        self.startup_timeout = startup_timeout
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self._files: list[IO[bytes]] = []
        self.port = 0
        self.node_ports: list[int] = []

    def _env(self, home: str) -> dict[str, str]:
        flwr_home = self.workdir / "flwr_home" / home
        flwr_home.mkdir(parents=True, exist_ok=True)
        # the SuperLink and SuperNodes find flower-superexec / flwr-*app on PATH
        path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
        return {**os.environ, **FLOWER_ENV, "FLWR_HOME": str(flwr_home), "PATH": path}

    def _spawn(self, name: str, argv: list[str], home: str) -> subprocess.Popen[bytes]:
        self.logs.mkdir(parents=True, exist_ok=True)
        log = open(self.logs / f"{name}.log", "wb")  # noqa: SIM115 - closed in stop()
        self._files.append(log)
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=self._env(home),
                                cwd=self.workdir, start_new_session=True)
        self.procs[name] = proc
        return proc

    def _cli_config(self) -> str:
        """``FLWR_HOME`` of the Flower CLI, with a connection ``fedlabels-local``."""
        home = self._env("cli")["FLWR_HOME"]
        security = (f'root-certificates = "{self.tls.ca_cert}"\n' if self.tls
                    else "insecure = true\n")
        Path(home, "config.toml").write_text(
            '[superlink]\ndefault = "fedlabels-local"\n\n[superlink.fedlabels-local]\n'
            f'address = "127.0.0.1:{self.port}"\n{security}')
        return home

    def _register_nodes(self, public_keys: list[Path]) -> None:
        """``flwr supernode register`` every SuperNode's public key (authentication on)."""
        self._cli_config()
        for cid, key in enumerate(public_keys):
            proc = self._spawn(f"register_{cid}", [
                _executable("flwr"), "supernode", "register", str(key), "fedlabels-local"],
                "cli")
            try:
                code = proc.wait(timeout=self.startup_timeout)
            except subprocess.TimeoutExpired:
                code = -1
            if code != 0:
                raise FedLabelsError(f"registering SuperNode {cid}'s key failed; see "
                                     f"{self.logs / f'register_{cid}.log'}:\n"
                                     f"{_tail(self.logs / f'register_{cid}.log')}")

    def start(self) -> None:
        """Start the SuperLink, then the SuperNodes, each with its site's node config.

        With ``secure=True`` the SuperLink serves TLS with a fresh CA and requires SuperNode
        authentication; every SuperNode's key is registered before it starts.
        """
        self.port = free_port()
        link_args = ["--insecure"]
        node_keys: list[tuple[Path, Path]] = []
        if self.secure:
            from fedlabels.engines.flower.security import make_node_keys, make_tls_files

            self.tls = make_tls_files(self.workdir / "certs", ["localhost", "127.0.0.1"])
            node_keys = make_node_keys(self.workdir / "keys",
                                       len(self.prepared.client_paths))
            link_args = ["--ssl-certfile", str(self.tls.server_cert),
                         "--ssl-keyfile", str(self.tls.server_key),
                         "--ssl-ca-certfile", str(self.tls.ca_cert),
                         "--enable-supernode-auth"]
        link = self._spawn("superlink", [
            _executable("flower-superlink"), *link_args,
            "--disable-runtime-dependency-installation",
            "--host", "127.0.0.1", "--port", str(self.port)], "superlink")
        _wait_for_port(self.port, link, "flower-superlink", self.logs / "superlink.log",
                       self.startup_timeout)
        if self.secure:
            self._register_nodes([public for _, public in node_keys])
        for cid in range(len(self.prepared.client_paths)):
            port = free_port()
            self.node_ports.append(port)
            security = ["--insecure"] if not self.tls else [
                "--root-certificates", str(self.tls.ca_cert),
                "--auth-supernode-private-key", str(node_keys[cid][0])]
            self._spawn(f"supernode_{cid}", [
                _executable("flower-supernode"), *security,
                "--superlink", f"127.0.0.1:{self.port}",
                "--host", "127.0.0.1", "--port", str(port),
                "--node-config", self.prepared.node_config(cid)], f"supernode_{cid}")

    def run_app(self, timeout: float) -> int:
        """Submit the app with ``flwr run --stream`` and wait for the run to end."""
        self._cli_config()
        proc = self._spawn("flwr_run", [
            _executable("flwr"), "run", str(self.prepared.app_dir), "fedlabels-local",
            "--stream"], "cli")
        deadline = time.monotonic() + timeout
        status_path = self.status_path
        log, offset = self.logs / "flwr_run.log", 0
        while proc.poll() is None:
            if self.echo:
                offset = _echo_progress(log, offset)
            if time.monotonic() > deadline:
                raise FedLabelsError(f"the deployed run did not finish within {timeout:g} s; "
                                     f"logs are in {self.logs}.")
            if _finished(status_path):
                # the ServerApp is done; `flwr run --stream` may take a few seconds more
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    break
            time.sleep(0.2)
        if self.echo:
            _echo_progress(log, offset)
        return proc.returncode if proc.returncode is not None else 0

    @property
    def status_path(self) -> Path:
        return Path(self.prepared.spec.status)

    def kill_supernode(self, cid: int, sig: int = signal.SIGKILL) -> None:
        """Kill client ``cid``'s SuperNode and everything it spawned (a crashed site)."""
        proc = self.procs[f"supernode_{cid}"]
        for pid in [proc.pid, *_descendants([proc.pid])]:
            _signal(pid, sig)
        proc.wait(timeout=10)

    def stop(self, grace: float = 5.0) -> None:
        """Stop every process this deployment started, and their descendants.

        Flower starts ``flower-superexec`` in a new session (outside our process groups), so
        descendants are found by parent pid before anything is signalled; each gets SIGTERM,
        and whatever is still alive after ``grace`` seconds gets SIGKILL.
        """
        roots = [p.pid for p in self.procs.values() if p.poll() is None]
        pids = [*roots, *_descendants(roots)]
        for pid in pids:
            _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
            for proc in self.procs.values():
                proc.poll()
            time.sleep(0.1)
        for pid in pids:
            if _alive(pid):
                _signal(pid, signal.SIGKILL)
        for proc in self.procs.values():
            with suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        for fh in self._files:
            fh.close()
        self._files.clear()

    def __enter__(self) -> LocalDeployment:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def _echo_progress(log: Path, offset: int) -> int:
    """Print the ServerApp's own progress lines (``fedlabels: ...``) that ``flwr run`` logged."""
    try:
        with open(log, "rb") as fh:
            fh.seek(offset)
            chunk = fh.read()
    except OSError:
        return offset
    end = chunk.rfind(b"\n") + 1
    for line in chunk[:end].decode(errors="replace").splitlines():
        if line.startswith("fedlabels:"):
            print(line, flush=True)
    return offset + end


def _descendants(roots: list[int]) -> list[int]:
    """Pids of all live descendants of ``roots`` (from ``ps``; works on Linux and macOS)."""
    try:
        table = subprocess.run(["ps", "-A", "-o", "pid=,ppid="], capture_output=True,
                               text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):  # pragma: no cover
        return []
    children: dict[int, list[int]] = {}
    for line in table.splitlines():
        parts = line.split()
        if len(parts) == 2:
            children.setdefault(int(parts[1]), []).append(int(parts[0]))
    found: list[int] = []
    stack = list(roots)
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found:
                found.append(child)
                stack.append(child)
    return found


def _signal(pid: int, sig: int) -> None:
    with suppress(ProcessLookupError):
        os.kill(pid, sig)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover
        return True
    # a zombie child of ours counts as gone
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        return done == 0
    except ChildProcessError:
        return True


def _finished(status_path: Path) -> bool:
    try:
        return json.loads(status_path.read_text()).get("status") in ("completed", "stopped",
                                                                    "failed")
    except (OSError, ValueError):
        return False


def read_outcome(prepared: PreparedRun, returncode: int, logs: Path) -> RunResult:
    """The result the ServerApp wrote, or a clear error from its status file."""
    status_path, output = Path(prepared.spec.status), Path(prepared.spec.output)
    try:
        status = json.loads(status_path.read_text())
    except (OSError, ValueError):
        status = {"status": "unknown"}
    if status.get("status") != "completed":
        reason = status.get("error") or (
            f"`flwr run` exited with code {returncode} and the ServerApp left no status "
            f"(status: {status.get('status')})")
        kept = f" Results up to the last complete round are in {output}." \
            if output.is_file() else ""
        raise FedLabelsError(f"deployed run did not complete: {reason}.{kept} "
                             f"Logs: {logs}")
    return load_result(output)


def deploy_local(cfg: RunConfig, *, workdir: str | Path, output: str | Path | None = None,
                 reply_timeout: float = 120.0, node_timeout: float = 60.0,
                 timeout: float = 3600.0, secure: bool = False,
                 progress: bool = False) -> RunResult:
    """Run ``cfg`` over a SuperLink and ``cfg.clients`` SuperNodes on 127.0.0.1.

    Writes the site files, the app and the logs under ``workdir`` and the result JSON to
    ``output`` (default ``workdir/result.json``); returns the result. ``secure=True`` runs
    with TLS and SuperNode authentication (fresh CA and node keys under ``workdir``).
    """
    from fedlabels.engines.flower import require_flwr

    require_flwr()
    workdir = Path(workdir).resolve()
    prepared = prepare_run(cfg, workdir / "sites", output=output, reply_timeout=reply_timeout,
                           node_timeout=node_timeout)
    with terminate_as_interrupt(), LocalDeployment(prepared, workdir, secure=secure,
                                                      echo=progress) as dep:
        dep.start()
        code = dep.run_app(timeout)
        return read_outcome(prepared, code, dep.logs)
