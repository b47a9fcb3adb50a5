"""``fedlabels deploy local``: a real Flower deployment on 127.0.0.1.

Starts one ``flower-superlink`` and M ``flower-supernode`` processes, each beside its
site's pinned executor (insecure mode unless ``secure``; distinct free ports, each in its own
process group with its own ``FLWR_HOME``), submits the app with ``flwr run ... --stream``,
and reads back the result the ServerApp wrote. Every
process it started is stopped on success, failure, timeout, Ctrl-C or SIGTERM (SIGTERM to
each process group, SIGKILL after a grace period), including the ``flower-superexec``,
``flwr-serverapp`` and task children those processes spawn:

* on Linux the launcher is a child subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``), so a
  process orphaned by a crashed parent (a ``flwr-serverapp`` whose SuperLink was SIGKILLed)
  is re-parented to the launcher instead of init, and its direct children get
  ``PR_SET_PDEATHSIG`` (SIGKILL if the launcher itself dies);
* a watcher thread records every descendant it sees (pid and start time), so one whose
  parent died is still stopped even where there is no subreaper;
* the status file is finalised by the launcher when the ServerApp could not do it: a run
  that ended without a final status is ``failed``, one stopped by Ctrl-C/SIGTERM or the
  timeout ``interrupted``;
* a launcher killed with SIGKILL can do none of this: a :mod:`.watchdog` it starts in its
  own session stops the processes it recorded (``processes.json`` in the workdir), the
  orphaned ``flwr-serverapp`` included, and finalises the status as ``interrupted``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from contextlib import suppress
from pathlib import Path
from typing import IO, Any

from fedlabels.core.errors import FedLabelsError
from fedlabels.core.parent_death import become_subreaper, die_with_parent
from fedlabels.deploy import watchdog
from fedlabels.deploy.processes import (
    alive,
    cmdline,
    descendants,
    finalise_status,
    finished,
    has_proc,
    parent,
    read_status,
    send,
    start_time,
)
from fedlabels.deploy.watchdog import record_processes
from fedlabels.engines.flower.prepare import PreparedRun, prepare_run
from fedlabels.results import RunResult, load_result
from fedlabels.runs.checkpoint import checkpoint_path
from fedlabels.runs.config import RunConfig
from fedlabels.runs.loop import terminate_as_interrupt
from fedlabels.runs.run_lock import checkpoint_lock

# The SuperLink's SuperExec keeps Flower's default poll (a task every 1 s): it only starts
# a run's ServerApp; asking every 0.1 s kept 7 % of a core busy at rest (docs/deployment.md).
FLOWER_ENV = {"FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_UPDATE_CHECK": "1",
              "PYTHONUNBUFFERED": "1"}


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


_STARTED_RUN = "Successfully started run "  # what `flwr run` prints, then the run id


class LocalDeployment:
    """A SuperLink and M SuperNodes on 127.0.0.1, for one prepared run.

    Use as a context manager; leaving it stops every process it started.
    """

    def __init__(self, prepared: PreparedRun, workdir: str | Path, *,
                 startup_timeout: float = 60.0, secure: bool = False,
                 echo: bool = False, database: str | Path | None = None,
                 site_settings: Mapping[str, Any] | None = None) -> None:
        self.prepared = prepared
        #: node config keys every site adds to its own (``--site-config``)
        self.site_settings = dict(site_settings or {})
        self.echo = echo
        self.secure = secure
        self.tls: Any = None
        self.workdir = Path(workdir)
        self.logs = self.workdir / "logs"
        self.startup_timeout = startup_timeout
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self._files: list[IO[bytes]] = []
        self.port = 0  # what the sites connect to (with secure=True: the Fleet-only proxy)
        self.control_port = 0  # the SuperLink itself: Control API, for the flwr CLI here
        self.node_ports: list[int] = []
        self.database = None if database is None else Path(database).resolve()
        self.subreaper = become_subreaper()
        self._seen: dict[int, str | None] = {}  # every descendant seen: pid -> start time
        self._watching = threading.Event()
        self._watcher: threading.Thread | None = None
        self._argv: dict[str, tuple[list[str], str]] = {}
        self.unfinished_runs: list[int] = []  # runs run_app submitted that did not end
        # what it started, for the watchdog that cleans up after a SIGKILLed launcher
        self.processes_file = self.workdir / "processes.json"

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
                                cwd=self.workdir, start_new_session=True,
                                # PDEATHSIG follows the forking thread: main thread only
                                preexec_fn=die_with_parent if threading.current_thread()
                                is threading.main_thread() else None)
        self.procs[name] = proc
        self._argv[name] = (argv, home)
        self._seen[proc.pid] = start_time(proc.pid)
        record_processes(self.processes_file, self._seen)
        if self._watcher is None:
            self._watching.set()
            self._watcher = threading.Thread(target=self._watch, daemon=True)
            self._watcher.start()
        return proc

    def _watch(self, interval: float = 0.5) -> None:
        """Record every descendant of the started processes while they run."""
        while self._watching.is_set():
            self._record()
            time.sleep(interval)

    def _record(self) -> list[int]:
        roots = [p.pid for p in list(self.procs.values())]
        found = descendants(roots)
        new = [pid for pid in found if pid not in self._seen]
        for pid in new:
            self._seen[pid] = start_time(pid)
        if new:
            self._forget_gone(set(roots))
            record_processes(self.processes_file, self._seen)
        return found

    def _forget_gone(self, started: set[int]) -> None:
        """Drop the processes that are gone (reaped: no ``/proc`` entry, or their pid now
        another process's) from the record; a SuperNode starts a process per message, so
        the record, written again whenever a new one appears, grew with the rounds (17 kB
        after 300 rounds of 3 sites). A zombie stays until it is reaped, and the processes
        started directly are kept (their ``Popen`` reaps them)."""
        if not has_proc():
            return
        for pid, began in list(self._seen.items()):
            if pid in started:
                continue
            now = start_time(pid)
            if now is None or (began is not None and now != began):
                del self._seen[pid]

    def tracked(self) -> list[int]:
        """Live processes this deployment started, directly or not (orphans included)."""
        self._record()
        return [pid for pid, started in list(self._seen.items())
                if alive(pid) and (started is None or start_time(pid) == started)]

    def _cli_config(self) -> str:
        """``FLWR_HOME`` of the Flower CLI, with a connection ``fedlabels-local``."""
        home = self._env("cli")["FLWR_HOME"]
        security = (f'root-certificates = "{self.tls.ca_cert}"\n' if self.tls
                    else "insecure = true\n")
        Path(home, "config.toml").write_text(
            '[superlink]\ndefault = "fedlabels-local"\n\n[superlink.fedlabels-local]\n'
            f'address = "127.0.0.1:{self.control_port}"\n{security}')
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

        Every SuperNode runs in ``--isolation process`` beside a pinned executor
        (:mod:`.site_exec`) that runs fedlabels' ClientApp and no code from the submitted app,
        each message in a fork of a preloaded process. With ``secure=True`` the SuperLink
        also serves TLS with a fresh CA and requires SuperNode authentication; every
        SuperNode's key is registered before it starts, and the sites reach only the Fleet
        API, through :mod:`.fleet_proxy` (the SuperLink's own port, with the Control API, is
        for the coordinator).
        """
        self.port = self.control_port = free_port()
        link_args = ["--insecure"]
        node_keys: list[tuple[Path, Path]] = []
        if self.secure:
            from fedlabels.deploy.tls import make_node_keys, make_tls_files

            self.tls = make_tls_files(self.workdir / "certs", ["localhost", "127.0.0.1"])
            node_keys = make_node_keys(self.workdir / "keys",
                                       len(self.prepared.client_paths))
            link_args = ["--ssl-certfile", str(self.tls.server_cert),
                         "--ssl-keyfile", str(self.tls.server_key),
                         "--ssl-ca-certfile", str(self.tls.ca_cert),
                         "--enable-supernode-auth"]
        if self.database is not None:  # the SuperLink's state survives a restart
            self.database.parent.mkdir(parents=True, exist_ok=True)
            link_args += ["--database", str(self.database)]
        link = self._spawn("superlink", [
            _executable("flower-superlink"), *link_args,
            "--disable-runtime-dependency-installation",
            "--host", "127.0.0.1", "--port", str(self.control_port)], "superlink")
        _wait_for_port(self.control_port, link, "flower-superlink",
                       self.logs / "superlink.log", self.startup_timeout)
        if self.secure:
            self._start_fleet_proxy()
            self._register_nodes([public for _, public in node_keys])
        for cid in range(len(self.prepared.client_paths)):
            port = free_port()
            self.node_ports.append(port)
            security = ["--insecure"] if not self.tls else [
                "--root-certificates", str(self.tls.ca_cert),
                "--auth-supernode-private-key", str(node_keys[cid][0])]
            # with --tls the site's Runtime API serves only its own executor: a shared
            # secret (0600) that the executor signs its task requests with
            exec_auth = [] if not self.tls else [
                "--superexec-auth-secret-file", str(self._exec_secret(cid))]
            self._spawn(f"supernode_{cid}", [
                _executable("flower-supernode"), *security, *exec_auth,
                "--isolation", "process",  # the site's pinned executor runs its ClientApps
                "--superlink", f"127.0.0.1:{self.port}",
                "--host", "127.0.0.1", "--port", str(port),
                "--node-config", self.prepared.node_config(cid, **self.site_settings)],
                f"supernode_{cid}")
            self._spawn(f"site_exec_{cid}", [
                sys.executable, "-m", "fedlabels.deploy.site_exec", *exec_auth,
                "--runtime-api-address", f"127.0.0.1:{port}"], f"supernode_{cid}")

    def _exec_secret(self, cid: int) -> Path:
        """Site ``cid``'s SuperExec secret: 32 random bytes, 0600 in a 0700 folder."""
        import secrets

        from fedlabels.core.private_files import write_private

        return write_private(self.workdir / "exec_secrets" / f"site_{cid}.secret",
                             secrets.token_bytes(32))

    def _start_fleet_proxy(self) -> None:
        """The sites' address: the Fleet API only (:mod:`.fleet_proxy`), TLS."""
        self.port = free_port()
        proxy = self._spawn("fleet_proxy", [
            sys.executable, "-m", "fedlabels.deploy.fleet_proxy",
            "--listen", f"127.0.0.1:{self.port}",
            "--superlink", f"https://127.0.0.1:{self.control_port}",
            "--ssl-certfile", str(self.tls.server_cert),
            "--ssl-keyfile", str(self.tls.server_key),
            "--ssl-ca-certfile", str(self.tls.ca_cert)], "superlink")
        _wait_for_port(self.port, proxy, "the fleet proxy", self.logs / "fleet_proxy.log",
                       self.startup_timeout)

    def _submitted_run_id(self) -> int | None:
        """The run id ``flwr run`` printed in its log, once it has."""
        log = self.logs / "flwr_run.log"
        with suppress(OSError):
            for line in log.read_text(errors="replace").splitlines():
                if line.startswith(_STARTED_RUN):
                    with suppress(ValueError):
                        return int(line[len(_STARTED_RUN):].split()[0])
        return None

    def stop_unfinished_runs(self) -> None:
        """``flwr stop`` the runs submitted before that did not end (e.g. their ServerApp
        was killed), so that none is left ``RUNNING``.

        Such a run stays ``RUNNING`` until the SuperLink misses its ServerApp's heartbeats
        (about a minute), and a SuperNode that was handed its last message waits for that
        message's content until then; stopped, the SuperNodes drop it at once and take the
        next run's messages (the crash-and-resume tests wait ~50 s less per resume).
        """
        while self.unfinished_runs:
            run_id = self.unfinished_runs.pop(0)
            proc = self._spawn("flwr_stop", [_executable("flwr"), "stop", str(run_id),
                                             "fedlabels-local"], "cli")
            try:
                proc.wait(timeout=self.startup_timeout)
            except subprocess.TimeoutExpired:
                self.stop_process("flwr_stop")

    def run_app(self, timeout: float) -> int:
        """Submit the app with ``flwr run --stream`` and wait for the run to end; earlier
        runs of this deployment that did not end are stopped first
        (:meth:`stop_unfinished_runs`)."""
        self._cli_config()
        self.stop_unfinished_runs()
        submitted = time.time()  # a status file older than this is an earlier run's
        proc = self._spawn("flwr_run", [
            _executable("flwr"), "run", str(self.prepared.app_dir), "fedlabels-local",
            "--stream"], "cli")
        deadline = time.monotonic() + timeout
        status_path = self.status_path
        log, offset = self.logs / "flwr_run.log", 0
        try:
            while proc.poll() is None:
                offset = _echo_progress(log, offset, self.echo)
                if time.monotonic() > deadline:
                    raise RunTimeout(f"the deployed run did not finish within {timeout:g} "
                                     f"s; logs are in {self.logs}.")
                if finished(status_path, since=submitted):
                    # the ServerApp is done; `flwr run --stream` may take a few seconds more
                    try:
                        proc.wait(timeout=15)
                    except subprocess.TimeoutExpired:
                        break
                time.sleep(0.2)
        finally:
            # only a completed ServerApp told the SuperLink that its run ended (a killed
            # or interrupted one may not have reached it)
            if read_status(status_path).get("status") != "completed" or \
                    not finished(status_path, since=submitted):
                run_id = self._submitted_run_id()
                if run_id is not None:
                    self.unfinished_runs.append(run_id)
        _echo_progress(log, offset, self.echo)
        return proc.returncode if proc.returncode is not None else 0

    def superlink_death(self) -> str | None:
        """How the SuperLink ended, if it did while the run went on (None: still running)."""
        link = self.procs.get("superlink")
        if link is None or link.poll() is None:
            return None
        code = link.returncode
        how = f"killed by signal {-code}" if code < 0 else f"exited with code {code}"
        return f"the SuperLink (pid {link.pid}) died during the run ({how})"

    @property
    def status_path(self) -> Path:
        return Path(self.prepared.spec.status)

    def _respawn(self, name: str) -> subprocess.Popen[bytes]:
        argv, home = self._argv[name]
        return self._spawn(name, argv, home)

    def restart_supernode(self, cid: int, sig: int = signal.SIGTERM) -> None:
        """Stop client ``cid``'s SuperNode and start it again (same key and node config)."""
        self.kill_supernode(cid, sig)
        self._respawn(f"supernode_{cid}")

    def kill_superlink(self, sig: int = signal.SIGKILL) -> None:
        """Kill the SuperLink process only (a crash): its children are orphaned."""
        proc = self.procs["superlink"]
        send(proc.pid, sig)
        proc.wait(timeout=10)

    def restart_superlink(self) -> None:
        """Start the SuperLink again on the same port (and ``--database``)."""
        link = self._respawn("superlink")
        _wait_for_port(self.control_port, link, "flower-superlink",
                       self.logs / "superlink.log", self.startup_timeout)

    def serverapp_pids(self) -> list[int]:
        """Live ``flwr-serverapp`` processes of this deployment."""
        return [pid for pid in self.tracked() if "flwr-serverapp" in cmdline(pid)]

    def kill_supernode(self, cid: int, sig: int = signal.SIGKILL) -> None:
        """Kill client ``cid``'s SuperNode and everything it spawned (a crashed site)."""
        proc = self.procs[f"supernode_{cid}"]
        for pid in [proc.pid, *descendants([proc.pid])]:
            send(pid, sig)
        proc.wait(timeout=10)

    def stop(self, grace: float = 5.0) -> None:
        """Stop every process this deployment started, and their descendants.

        Flower starts ``flower-superexec`` in a new session (outside our process groups), so
        descendants are found by parent pid before anything is signalled, together with every
        descendant the watcher saw (an orphan whose parent died); each gets SIGTERM, and
        whatever is still alive after ``grace`` seconds gets SIGKILL.
        """
        self._watching.clear()
        self._terminate(self.tracked(), grace)
        for fh in self._files:
            fh.close()
        self._files.clear()

    def _terminate(self, pids: list[int], grace: float = 5.0) -> None:
        """SIGTERM to ``pids``, SIGKILL to those alive after ``grace`` s; wait until gone."""
        for pid in pids:
            send(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(alive(pid) for pid in pids):
            for proc in self.procs.values():
                proc.poll()
            time.sleep(0.1)
        for pid in pids:
            if alive(pid):
                send(pid, signal.SIGKILL)
        for proc in self.procs.values():
            if proc.pid in pids:
                with suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=5)
        deadline = time.monotonic() + grace  # reap adopted orphans (we are their subreaper)
        while time.monotonic() < deadline and any(alive(pid) for pid in pids):
            time.sleep(0.05)

    def stop_process(self, name: str, grace: float = 5.0) -> None:
        """Stop one started process (e.g. ``"flwr_run"``) and its descendants."""
        proc = self.procs[name]
        self._terminate([proc.pid, *descendants([proc.pid])], grace)

    def reap_orphans(self, grace: float = 5.0) -> list[int]:
        """Stop the descendants whose parent died (adopted by us as subreaper, or by init);
        what a crashed SuperLink leaves behind. Returns their pids."""
        started = {p.pid for p in self.procs.values()}
        orphans = [pid for pid in self.tracked()
                   if pid not in started and parent(pid) in (os.getpid(), 1)]
        orphans += descendants(orphans)  # e.g. an orphaned superexec's flwr-serverapp
        self._terminate(orphans, grace)
        return orphans

    def __enter__(self) -> LocalDeployment:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def _echo_progress(log: Path, offset: int, progress: bool = True) -> int:
    """Print the ServerApp's own progress lines (``fedlabels: ...``) that ``flwr run`` logged
    to stderr, as a simulated run's progress (stdout keeps the table and the paths); with
    ``-q``, no round's line; without ``progress`` none. Its warnings (``fedlabels: warning:
    pate uses 1 round(s); ...``) are warned here, progress or not, as a simulated run warns
    them: the CLI prints each as the same one line, Python gets a ``FedLabelsWarning`` (they
    reached logs/flwr_run.log only without progress). Returns the offset read to."""
    import sys
    import warnings

    from fedlabels.core.errors import FedLabelsWarning, user_stacklevel
    from fedlabels.core.verbosity import QUIET, verbosity

    try:
        with open(log, "rb") as fh:
            fh.seek(offset)
            chunk = fh.read()
    except OSError:
        return offset
    end = chunk.rfind(b"\n") + 1
    for line in chunk[:end].decode(errors="replace").splitlines():
        if line.startswith(_WARNING):
            warnings.warn(FedLabelsWarning(line[len(_WARNING):]), stacklevel=user_stacklevel())
            continue
        quiet = line.startswith("fedlabels: round ") and verbosity() == QUIET
        if progress and line.startswith("fedlabels:") and not quiet:
            print(line, file=sys.stderr, flush=True)
    return offset + end


#: how the ServerApp prints a warning (core.errors.show_warnings_in_one_line)
_WARNING = "fedlabels: warning: "


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
        kept = (f" Results up to the last complete round are in {output} (a ServerApp "
                "killed outright may have left out the last rounds, which its checkpoint "
                "holds: resume the run)." if output.is_file() else "")
        reason = str(reason).rstrip(".")
        raise FedLabelsError(f"deployed run did not complete: {reason}.{kept} "
                             f"Logs: {logs}")
    return load_result(output)


#: the node config keys ``deploy local`` lets every site add (``--site-config KEY=VALUE``);
#: the others name the sites' files, which ``prepare`` writes
SITE_SETTINGS = ("ledger-epsilon", "ledger-delta", "report-lifetime", "evaluate", "threads")


def check_site_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """``settings`` with each value checked as the site will read it (one-line errors)."""
    from fedlabels.core.errors import did_you_mean
    from fedlabels.engines.flower.site import node_flag, node_threads
    from fedlabels.engines.flower.site_privacy import (
        REPORT_LIFETIME,
        site_evaluates,
        site_ledger_budget,
    )

    for key in settings:
        if key not in SITE_SETTINGS:
            raise FedLabelsError(f"site setting {key!r}{did_you_mean(key, SITE_SETTINGS)} is "
                                 f"not one deploy local sets; it sets {', '.join(SITE_SETTINGS)}"
                                 " (the others name the sites' files).")
    out = dict(settings)
    if "evaluate" in out:
        out["evaluate"] = site_evaluates(out)
    if REPORT_LIFETIME in out:
        out[REPORT_LIFETIME] = node_flag(out, REPORT_LIFETIME, False)
    site_ledger_budget(out)  # ledger-epsilon, ledger-delta
    if "threads" in out:  # the site's own check (its message), before anything starts
        out["threads"] = node_threads(out)
    return out


def deploy_local(cfg: RunConfig, *, workdir: str | Path, output: str | Path | None = None,
                 reply_timeout: float = 120.0, node_timeout: float = 60.0,
                 timeout: float = 3600.0, secure: bool = False,
                 progress: bool = False, database: str | Path | None = None,
                 resume: bool = False, overwrite: bool = False,
                 site_settings: Mapping[str, Any] | None = None) -> RunResult:
    """Run ``cfg`` over a SuperLink and ``cfg.clients`` SuperNodes on 127.0.0.1.

    ``site_settings``: node config keys every site adds to its own (those of
    :data:`SITE_SETTINGS`: e.g. ``{"evaluate": False, "ledger-epsilon": 8}``).

    Writes the site files, the app and the logs under ``workdir`` and the result JSON to
    ``output`` (default ``workdir/sites/result.json``); returns the result. ``secure=True``
    runs with TLS and SuperNode authentication (fresh CA and node keys under ``workdir``).
    A second deployment of the same ``output`` or ``workdir`` while one runs is refused
    before anything starts (both would write one result, checkpoint and site state);
    ``overwrite``: the run may replace a result at ``output`` (else its ServerApp refuses).
    """
    from fedlabels.engines.flower import require_flwr

    require_flwr()
    settings = check_site_settings(site_settings or {})
    workdir = Path(workdir).resolve()
    out = Path(output).resolve() if output else workdir / "sites" / "result.json"
    # one deployment at a time writes a result (and its checkpoint), or uses a workdir
    with checkpoint_lock(checkpoint_path(out)), checkpoint_lock(workdir / "deployment"):
        return _deploy_local(cfg, workdir, out, reply_timeout=reply_timeout,
                             node_timeout=node_timeout, timeout=timeout, secure=secure,
                             progress=progress, database=database, resume=resume,
                             overwrite=overwrite, site_settings=settings)


def _deploy_local(cfg: RunConfig, workdir: Path, output: Path, *, reply_timeout: float,
                  node_timeout: float, timeout: float, secure: bool, progress: bool,
                  database: str | Path | None, resume: bool, overwrite: bool,
                  site_settings: Mapping[str, Any]) -> RunResult:
    prepared = prepare_run(cfg, workdir / "sites", output=output, reply_timeout=reply_timeout,
                           node_timeout=node_timeout, overwrite=overwrite)
    if resume:  # the same sites (split again identically), their saved state, the checkpoint
        from fedlabels.deploy.resume_app import check_resumable

        # before any process starts or any status is written (the ServerApp would refuse it
        # once every process had started, writing a failed status over the run's own)
        check_resumable(prepared.spec, prepared.federation)
        prepared = resumable(prepared)
    dep = LocalDeployment(prepared, workdir, secure=secure, echo=progress, database=database,
                          site_settings=site_settings)
    status = dep.status_path
    died = None
    guard = watchdog.start(status, dep.processes_file)  # acts only if this process is killed
    try:
        with terminate_as_interrupt(), dep:
            dep.start()
            code = dep.run_app(timeout)
            died = dep.superlink_death()  # before the processes are stopped
    except KeyboardInterrupt:  # every process is stopped by now
        finalise_status(status, "interrupted", "stopped by Ctrl-C or SIGTERM")
        raise
    except BaseException as exc:
        finalise_status(status, "interrupted" if isinstance(exc, RunTimeout) else "failed",
                        str(exc))
        raise
    finally:
        watchdog.end(guard)
    if died is not None:  # the ServerApp, stopped with the rest, may have said "interrupted"
        finalise_status(status, "failed", f"{died}; resume it with --resume (and --database "
                        f"for the SuperLink's state); see {dep.logs}", replace=True)
    finalise_status(status, "failed", f"the ServerApp ended without a final status (killed "
                    f"or crashed; `flwr run` exited with code {code}); see {dep.logs}")
    return read_outcome(prepared, code, dep.logs)


def resumable(prepared: PreparedRun) -> PreparedRun:
    """``prepared`` with its app rewritten to resume from the checkpoint beside its output."""
    from dataclasses import replace

    from fedlabels.engines.flower.prepare import write_app

    spec = replace(prepared.spec, resume=True)
    write_app(prepared.app_dir, spec)
    return replace(prepared, spec=spec)


class RunTimeout(FedLabelsError):
    """The deployed run did not finish within the launcher's timeout."""
