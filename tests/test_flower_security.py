"""TLS files and SuperNode keys in the formats Flower's SuperLink and SuperNode load."""

from __future__ import annotations

import ipaddress
import stat
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import (
    load_pem_private_key,
    load_ssh_private_key,
    load_ssh_public_key,
)

from fedlabels.cli import main
from fedlabels.core.errors import FedLabelsError
from fedlabels.deploy.tls import make_node_keys, make_tls_files


def test_server_certificate_is_signed_by_the_ca_for_the_hosts(tmp_path: Path) -> None:
    tls = make_tls_files(tmp_path, ["superlink.example.org", "10.0.0.5"])
    ca = x509.load_pem_x509_certificate(tls.ca_cert.read_bytes())
    cert = x509.load_pem_x509_certificate(tls.server_cert.read_bytes())
    cert.verify_directly_issued_by(ca)
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    # plus the coordinator's own loopback listener (the Control API, the flwr CLI)
    assert san.get_values_for_type(x509.DNSName) == ["superlink.example.org", "localhost"]
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("10.0.0.5"),
                                                       ipaddress.ip_address("127.0.0.1")]
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    key = load_pem_private_key(tls.server_key.read_bytes(), None)
    assert key.public_key() == cert.public_key()
    for private in (tls.server_key, tls.ca_key):
        assert stat.S_IMODE(private.stat().st_mode) == 0o600


def test_node_keys_load_as_flower_does(tmp_path: Path) -> None:
    pairs = make_node_keys(tmp_path, 2)
    assert [p.name for p, _ in pairs] == ["node_0", "node_1"]
    for private, public in pairs:
        # flower-supernode: load_ssh_private_key + EllipticCurvePrivateKey check
        key = load_ssh_private_key(private.read_bytes(), None)
        assert isinstance(key, ec.EllipticCurvePrivateKey)
        assert isinstance(key.curve, ec.SECP384R1)
        assert load_ssh_public_key(public.read_bytes()) == key.public_key()
    assert pairs[0][1].read_bytes() != pairs[1][1].read_bytes()


def test_deploy_certs_command(tmp_path: Path, capsys: object) -> None:
    code = main(["deploy", "certs", "--out-dir", str(tmp_path), "--host", "localhost",
                 "--nodes", "1"])
    assert code == 0
    assert {p.name for p in tmp_path.iterdir()} == {"ca.crt", "ca.key", "server.crt",
                                                   "server.key", "node_0", "node_0.pub"}
    assert "--enable-supernode-auth" in capsys.readouterr().out


def test_deploy_certs_never_replaces_a_ca_without_force(tmp_path: Path, capsys: object) -> None:
    argv = ["deploy", "certs", "--out-dir", str(tmp_path), "--host", "localhost"]
    assert main(argv) == 0
    ca_key, ca_crt = (tmp_path / "ca.key").read_bytes(), (tmp_path / "ca.crt").read_bytes()
    server = (tmp_path / "server.crt").read_bytes()
    assert main(argv) == 2  # a non-empty directory needs --overwrite
    assert "--overwrite" in capsys.readouterr().err
    # --overwrite: a new server certificate, signed by the CA every site trusts
    assert main([*argv, "--overwrite", "--nodes", "1"]) == 0
    assert "--force" in capsys.readouterr().out
    assert (tmp_path / "ca.key").read_bytes() == ca_key
    assert (tmp_path / "ca.crt").read_bytes() == ca_crt
    assert (tmp_path / "server.crt").read_bytes() != server
    ca = x509.load_pem_x509_certificate(ca_crt)
    x509.load_pem_x509_certificate((tmp_path / "server.crt").read_bytes()) \
        .verify_directly_issued_by(ca)
    # --overwrite with more nodes: node_0 (registered, installed at its site) is kept
    node_0 = (tmp_path / "node_0").read_bytes()
    assert main([*argv, "--overwrite", "--nodes", "2"]) == 0
    assert "kept the existing node key pair(s) node_0" in capsys.readouterr().out
    assert (tmp_path / "node_0").read_bytes() == node_0 and (tmp_path / "node_1").is_file()
    assert main([*argv, "--force", "--nodes", "1"]) == 0  # only --force replaces the CA
    assert (tmp_path / "ca.key").read_bytes() != ca_key
    assert (tmp_path / "node_0").read_bytes() != node_0  # and the node keys


def test_private_keys_become_0600_over_existing_files(tmp_path: Path) -> None:
    for name in ("ca.key", "server.key", "node_0", "ca.crt"):
        (tmp_path / name).write_bytes(b"old")
        (tmp_path / name).chmod(0o644)
    argv = ["deploy", "certs", "--out-dir", str(tmp_path), "--host", "localhost",
            "--nodes", "1", "--force"]
    assert main(argv) == 0
    for name in ("ca.key", "server.key", "node_0"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o600, name
        assert (tmp_path / name).read_bytes() != b"old"
    assert stat.S_IMODE((tmp_path / "ca.crt").stat().st_mode) == 0o644
    (tmp_path / "server.key").chmod(0o666)
    assert main([*argv[:-1], "--overwrite"]) == 0  # the CA is kept, the rest rewritten
    assert stat.S_IMODE((tmp_path / "server.key").stat().st_mode) == 0o600
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_a_broken_ca_is_not_reused(tmp_path: Path) -> None:
    make_tls_files(tmp_path, ["localhost"])
    other = make_tls_files(tmp_path / "other", ["localhost"])
    (tmp_path / "ca.key").write_bytes(other.ca_key.read_bytes())
    with pytest.raises(FedLabelsError, match="does not belong"):
        make_tls_files(tmp_path, ["localhost"], new_ca=False)


def test_the_fleet_proxy_names_a_missing_file_and_a_plain_http_superlink(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from fedlabels.deploy.fleet_proxy import main as proxy

    base = ["--listen", "0.0.0.0:9092", "--superlink", "https://127.0.0.1:9093"]
    tls = ["--ssl-certfile", str(tmp_path / "server.crt"), "--ssl-keyfile",
           str(tmp_path / "server.key"), "--ssl-ca-certfile", str(tmp_path / "ca.crt")]
    with pytest.raises(SystemExit) as exc:
        proxy([*base, *tls])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"--ssl-certfile '{tmp_path / 'server.crt'}' does not exist" in err
    for name in ("server.crt", "server.key", "ca.crt"):
        (tmp_path / name).write_text("x")
    with pytest.raises(SystemExit):
        proxy(["--listen", "0.0.0.0:9092", "--superlink", "http://127.0.0.1:9093", *tls])
    err = capsys.readouterr().err
    assert "over TLS; give --superlink as https://" in err and "Traceback" not in err


def test_the_site_executor_says_why_it_gets_no_task(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from fedlabels.deploy.site_exec import _why_not
    from fedlabels.deploy.site_exec import main as site_exec

    refused = _why_not("127.0.0.1:9094", RuntimeError("[ApiError:1008] SuperExec "
                                                       "authentication failed"))
    assert "refused this executor's authentication" in refused
    assert "--superexec-auth-secret-file" in refused
    assert "is not answering (ConnectError" in _why_not("127.0.0.1:9094",
                                                       type("ConnectError", (OSError,), {})())
    empty = tmp_path / "secret"
    empty.write_bytes(b"")
    with pytest.raises(SystemExit) as exc:  # an empty secret: refused before serving
        site_exec(["--superexec-auth-secret-file", str(empty)])
    assert exc.value.code == 2 and "must not be empty" in capsys.readouterr().err


def test_the_site_executor_stops_on_ctrl_c_in_one_line(monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    # Ctrl-C of a site's executor printed a KeyboardInterrupt traceback (found by starting
    # one by hand and pressing it); now one line and the shell's exit status for SIGINT
    from fedlabels.deploy import site_exec

    def interrupted(*_: Any, **__: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(site_exec, "serve", interrupted)
    stopped: BaseException | None = None
    try:  # without the fix a KeyboardInterrupt, which would end pytest itself
        site_exec.main(["--runtime-api-address", "127.0.0.1:9094"])
    except BaseException as exc:  # the test looks at what came out
        stopped = exc
    err = capsys.readouterr().err
    assert isinstance(stopped, SystemExit) and stopped.code == 130
    assert err.splitlines()[-1].startswith("fedlabels site executor: stopped (Ctrl-C)")


def test_the_fleet_proxy_says_what_it_serves(monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    # started by hand (docs/deployment.md, step 3) it printed nothing at all: uvicorn runs
    # at log level warning; now one line on stderr says where it listens and what it passes
    import uvicorn

    from fedlabels.deploy import fleet_proxy

    ran: list[dict[str, Any]] = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: ran.append(kw))
    monkeypatch.setattr(fleet_proxy, "FleetProxy", lambda *_: None)  # no CA file read
    fleet_proxy.serve("0.0.0.0", 9092, "https://127.0.0.1:9093", certfile="s.crt", keyfile="s.key",
          ca_cert="ca.crt")
    assert ran and ran[0]["port"] == 9092
    assert capsys.readouterr().err == (
        "fedlabels fleet proxy: starting on 0.0.0.0:9092; forwarding only the Fleet API "
        "(POST /v1/fleet/...) to https://127.0.0.1:9093, 403 for everything else\n")
