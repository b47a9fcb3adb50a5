"""Attack replay: an outsider holding only ``ca.crt`` against a TLS + SuperNode-auth deployment.

The coordinator runs ``deploy local --tls``'s topology on loopback; the outsider knows only
the address the sites are given and ``ca.crt``, makes a fresh key pair and writes a 30-line
Flower app whose ClientApp copies a site's private data file into its reply. It tries

(a) the Control API at the sites' address: list the nodes, register its own SuperNode key,
    ``flwr run`` its app;
(b) to make a site's SuperNode run that foreign ClientApp, submitted through the
    coordinator's own Control API (a leaked tunnel, a careless researcher).

Both must read nothing: no marker file on the site, no byte of the data file in the loot.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fedlabels.deploy.launcher import FLOWER_ENV, LocalDeployment
from fedlabels.deploy.tls import make_node_keys
from fedlabels.engines.flower.prepare import prepare_run
from fedlabels.runs.config import RunConfig

pytestmark = pytest.mark.slow

EVIL_CLIENT = '''
from flwr.app import ConfigRecord, Message, RecordDict
from flwr.clientapp import ClientApp

app = ClientApp()


@app.query()
def steal(msg, context):
    data = open(context.node_config["data-path"], "rb").read()
    open(context.run_config["marker"], "wb").write(data)
    return Message(RecordDict({"loot": ConfigRecord({"data": data})}), reply_to=msg)
'''

EVIL_SERVER = '''
import time
from flwr.app import Message, RecordDict
from flwr.serverapp import ServerApp

app = ServerApp()


@app.main()
def main(grid, context):
    deadline = time.time() + 60
    while not list(grid.get_node_ids()) and time.time() < deadline:
        time.sleep(0.5)
    nodes = list(grid.get_node_ids())
    out = [Message(RecordDict(), dst_node_id=n, message_type="query") for n in nodes]
    replies = grid.send_and_receive(out, timeout=60) if nodes else []
    with open(context.run_config["loot"], "wb") as fh:
        fh.write(b"NODES:%d\\n" % len(nodes))
        for reply in replies:
            if reply.has_error():
                fh.write(b"ERROR:" + reply.error.reason.encode() + b"\\n")
            else:
                fh.write(reply.content["loot"]["data"])
'''


def _evil_app(root: Path, loot: Path, marker: Path) -> Path:
    app = root / "evil_app"
    (app / "evil").mkdir(parents=True)
    (app / "evil" / "__init__.py").write_text("")
    (app / "evil" / "client.py").write_text(EVIL_CLIENT)
    (app / "evil" / "server.py").write_text(EVIL_SERVER)
    (app / "pyproject.toml").write_text(textwrap.dedent(f"""\
        [build-system]
        requires = ["hatchling"]
        build-backend = "hatchling.build"

        [project]
        name = "evil"
        version = "1.0.0"
        license = "Apache-2.0"
        dependencies = []

        [tool.hatch.build.targets.wheel]
        packages = ["."]

        [tool.flwr.app]
        publisher = "outsider"

        [tool.flwr.app.components]
        serverapp = "evil.server:app"
        clientapp = "evil.client:app"

        [tool.flwr.app.config]
        loot = "{loot}"
        marker = "{marker}"
        """))
    return app


def _flwr(home: Path, *args: str, timeout: float = 120,
          prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """The ``flwr`` CLI with its own ``FLWR_HOME`` (``prefix``: e.g. ``ip netns exec NS``)."""
    env = {**os.environ, **FLOWER_ENV, "FLWR_HOME": str(home),
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])}
    try:
        return subprocess.run([*prefix, str(Path(sys.executable).parent / "flwr"), *args],
                              env=env,
                              capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        return subprocess.CompletedProcess(exc.cmd, -1, str(exc.stdout), "timed out")


def _connection(home: Path, address: str, ca_cert: Path) -> Path:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(
        '[superlink]\ndefault = "fed"\n\n[superlink.fed]\n'
        f'address = "{address}"\nroot-certificates = "{ca_cert}"\n')
    return home


def _stole(loot: Path, marker: Path, secret: bytes) -> list[str]:
    found = []
    if marker.exists():
        found.append(f"the foreign ClientApp ran on the site and wrote {marker}")
    if loot.exists() and secret in loot.read_bytes():
        found.append("the site's private data file reached the outsider's ServerApp")
    return found


@pytest.mark.realprocess
def test_outsider_with_only_the_ca_certificate_reads_nothing(tmp_path: Path) -> None:
    cfg = RunConfig(method="local", dataset="breast_cancer", clients=1, model="dt", rounds=1,
                    seed=0)
    prepared = prepare_run(cfg, tmp_path / "sites", output=tmp_path / "result.json")
    secret = prepared.client_paths[0].read_bytes()
    outsider = tmp_path / "outsider"
    outsider.mkdir()
    with LocalDeployment(prepared, tmp_path / "coordinator", secure=True) as dep:
        dep.start()
        assert dep.tls is not None
        ca_cert = outsider / "ca.crt"  # all the outsider was given, plus the sites' address
        ca_cert.write_bytes(dep.tls.ca_cert.read_bytes())
        _, own_public = make_node_keys(outsider / "keys", 1)[0]
        home = _connection(outsider / "home", f"127.0.0.1:{dep.port}", ca_cert)

        # (a) the Control API at the address the sites use
        listed = _flwr(home, "supernode", "list", "fed", timeout=60)
        registered = _flwr(home, "supernode", "register", str(own_public), "fed", timeout=60)
        loot_a, marker_a = outsider / "loot_a.bin", tmp_path / "marker_a.bin"
        run_a = _flwr(home, "run", str(_evil_app(outsider / "a", loot_a, marker_a)), "fed",
                      "--stream", timeout=150)
        assert listed.returncode != 0, f"outsider listed the nodes:\n{listed.stdout}"
        assert registered.returncode != 0, \
            f"outsider registered its own SuperNode key:\n{registered.stdout}"
        assert not loot_a.exists(), f"outsider's ServerApp ran:\n{run_a.stdout[-2000:]}"
        assert _stole(loot_a, marker_a, secret) == []

        # (b) a foreign ClientApp, submitted where only the coordinator can submit
        loot_b, marker_b = outsider / "loot_b.bin", tmp_path / "marker_b.bin"
        run_b = _flwr(Path(dep._cli_config()), "run",
                      str(_evil_app(outsider / "b", loot_b, marker_b)), "fedlabels-local",
                      "--stream", timeout=200)
        assert loot_b.exists(), f"the foreign ServerApp did not run:\n{run_b.stdout[-3000:]}"
        loot = loot_b.read_bytes()
        assert loot.startswith(b"NODES:1"), loot[:200]  # it did reach the site's SuperNode
        assert _stole(loot_b, marker_b, secret) == []
        assert b"fedlabels' ClientApp only" in loot, loot[:500]


# ------------------------------------------------------------------ the proxy alone (fast)

@pytest.mark.parametrize(("method", "path", "ok"), [
    ("POST", b"/v1/fleet/pull-messages", True),
    ("POST", b"/v1/fleet/register-node", True),
    ("POST", b"/v1/control/start-run", False),
    ("POST", b"/v1/control/list-nodes", False),
    ("POST", b"/v1/runtime/acquire-task", False),
    ("GET", b"/v1/fleet/pull-messages", False),
    ("POST", b"/v1/fleet/../control/start-run", False),
    ("POST", b"/v1/fleet/%2e%2e/control/start-run", False),
    ("POST", b"/v1/fleet//control", False),
    ("GET", b"/docs", False),
])
def test_fleet_proxy_lets_through_the_fleet_api_only(method: str, path: bytes,
                                                     ok: bool) -> None:
    import asyncio

    import httpx

    from fedlabels.deploy.fleet_proxy import FleetProxy, allowed

    assert allowed(method, path) is ok
    seen: list[httpx.Request] = []

    def upstream(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, content=b"\x08\x01",
                              headers={"content-type": "application/protobuf"})

    proxy = FleetProxy("https://127.0.0.1:1", None)
    proxy.client = httpx.AsyncClient(transport=httpx.MockTransport(upstream))

    async def call() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=proxy),
                                     base_url="https://fleet") as client:
            return await client.request(method, path.decode(), content=b"body",
                                        headers={"flwr-signature": "sig",
                                                 "content-type": "application/protobuf",
                                                 "cookie": "dropped"})

    response = asyncio.run(call())
    if ok:
        assert response.status_code == 200 and response.content == b"\x08\x01"
        assert [r.url.path for r in seen] == [path.decode()]
        assert seen[0].content == b"body" and seen[0].headers["flwr-signature"] == "sig"
        assert "cookie" not in seen[0].headers
    else:
        assert response.status_code == 403 and seen == []  # never reaches the SuperLink
