"""The Docker Compose files keep the deployment's security properties.

Docker Compose is not available where the suite runs (``docker compose config`` needs the
compose plugin), so the files are parsed here and the properties the threat model rests on
are checked: only the fleet proxy's port is published, the SuperLink (with its Control API)
listens on loopback only, sites publish nothing and run the pinned executor, certificates
and data are mounted read-only, and no CA key is ever mounted.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

COMPOSE = Path(__file__).resolve().parents[1] / "deploy" / "compose"


def _load(name: str) -> dict[str, Any]:
    data = yaml.safe_load((COMPOSE / name).read_text())
    assert isinstance(data, dict)
    return data


def _command(service: dict[str, Any]) -> str:
    return " ".join(str(part) for part in service.get("command", []))


def _mounts(service: dict[str, Any]) -> list[tuple[str, str, str]]:
    out = []
    for volume in service.get("volumes", []):
        source, target, mode = [*str(volume).split(":"), "rw"][:3]
        out.append((source, target, mode))
    return out


def test_coordinator_publishes_the_fleet_proxy_only() -> None:
    services = _load("coordinator.yml")["services"]
    link, proxy, cli = services["superlink"], services["fleet-proxy"], services["cli"]
    published = {name: svc.get("ports", []) for name, svc in services.items()}
    assert published == {"superlink": ["9092:9092"], "fleet-proxy": [], "cli": []}
    # the SuperLink (Fleet + Control + Runtime APIs) listens on its namespace's loopback
    assert "--host=127.0.0.1" in link["command"] and "--port=9093" in link["command"]
    assert "--enable-supernode-auth" in link["command"]
    assert "--disable-runtime-dependency-installation" in link["command"]
    # 9092 of that namespace is the proxy's: it shares the SuperLink's network namespace
    assert proxy["network_mode"] == "service:superlink"
    assert "fedlabels.deploy.fleet_proxy" in _command(proxy)
    assert "--listen=0.0.0.0:9092" in proxy["command"]
    assert "--superlink=https://127.0.0.1:9093" in proxy["command"]
    # the researcher's CLI reaches the Control API through that loopback, on demand only
    assert cli["network_mode"] == "service:superlink" and cli["profiles"] == ["cli"]
    config = (COMPOSE / "cli" / "config.toml").read_text()
    assert 'address = "127.0.0.1:9093"' in config


def test_site_publishes_nothing_and_runs_only_fedlabels_clientapp() -> None:
    services = _load("site.yml")["services"]
    node, executor = services["supernode"], services["site-exec"]
    assert all(not svc.get("ports") for svc in services.values())
    assert "--isolation=process" in node["command"]  # no Flower executor of its own
    assert "--host=127.0.0.1" in node["command"]  # its Runtime API stays in the namespace
    assert any(str(p).startswith("--auth-supernode-private-key=") for p in node["command"])
    assert executor["network_mode"] == "service:supernode"
    assert "fedlabels.deploy.site_exec" in _command(executor)
    assert not any(target == "/data" for _, target, _ in _mounts(node))  # data: executor only
    assert 'state-key="/state/state.key"' in _command(node)
    # the site follows its own plan and can rejoin; every key is one a site reads
    import re

    from fedlabels.engines.flower.site import NODE_CONFIG_KEYS

    settings = node["command"][node["command"].index("--node-config") + 1]
    keys = re.findall(r"(?:^|\s)([a-z-]+)=", settings)
    assert {"privacy-plan", "state-dir", "ledger-dir"} <= set(keys)
    assert set(keys) <= set(NODE_CONFIG_KEYS), keys


@pytest.mark.parametrize("name", ["coordinator.yml", "site.yml"])
def test_keys_certificates_and_data_are_mounted_read_only(name: str) -> None:
    for service_name, service in _load(name)["services"].items():
        for source, target, mode in _mounts(service):
            if source.startswith("./certs") or target in ("/data", "/cli/config.toml"):
                assert mode == "ro", f"{name}:{service_name} mounts {source} {mode}"
            assert "ca.key" not in source, f"{name}:{service_name} mounts the CA key"
            if mode == "rw":
                assert target in ("/state", "/run1"), f"{name}:{service_name}: {target} rw"


@pytest.mark.realprocess
@pytest.mark.skipif(shutil.which("docker") is None, reason="docker is not installed")
@pytest.mark.parametrize("name", ["coordinator.yml", "site.yml"])
def test_docker_compose_config_accepts_the_files(name: str) -> None:
    probe = subprocess.run(["docker", "compose", "version"], capture_output=True, text=True,
                           check=False)
    if probe.returncode != 0:
        pytest.skip("the docker compose plugin is not installed")
    env = {"SUPERLINK_ADDRESS": "superlink.example.org:9092", "PARTITION_ID": "0"}
    done = subprocess.run(["docker", "compose", "-f", str(COMPOSE / name), "config", "-q"],
                          capture_output=True, text=True, check=False,
                          env={**os.environ, **env})
    assert done.returncode == 0, done.stderr
