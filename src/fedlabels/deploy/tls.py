"""TLS certificates and SuperNode authentication keys for a Flower deployment.

``fedlabels deploy certs`` (and ``deploy local --tls``) use this to make

* a private certificate authority (``ca.crt`` / ``ca.key``) and a SuperLink server
  certificate (``server.crt`` / ``server.key``) for the given host names and IP addresses,
  all on NIST P-384 keys;
* one OpenSSH ECDSA P-384 key pair per SuperNode (``node_<i>`` / ``node_<i>.pub``), which
  Flower's SuperNode authentication expects (``--auth-supernode-private-key``; the public
  key is registered with ``flwr supernode register``).

A self-made CA is fine for a consortium that distributes ``ca.crt`` itself; an
organisation with its own PKI should issue the server certificate there instead. Private
keys are written with mode 0600 (atomically: also where a file of that name existed with a
looser mode); an existing CA is kept unless a new one is asked for. This module does not
import Flower.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import re
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from fedlabels.core.errors import FedLabelsError


@dataclass(frozen=True)
class TlsFiles:
    ca_cert: Path
    ca_key: Path
    server_cert: Path
    server_key: Path


def _write(path: Path, data: bytes, private: bool = False) -> Path:
    """Write ``data`` atomically (temporary file, then rename): a private key gets mode 0600
    even where a file of that name existed with a looser mode."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600 if private else 0o644)
    try:
        os.fchmod(fd, 0o600 if private else 0o644)  # whatever the umask
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM,
                             serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _san(hosts: list[str]) -> x509.SubjectAlternativeName:
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(names)


LOOPBACK_HOSTS = ("localhost", "127.0.0.1")
#: one label of a host name: letters, digits and inner hyphens, 1 to 63 characters
_LABEL = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")
#: the longest validity a certificate gets: 100 years (datetime ends at year 9999)
MAX_DAYS = 36_500


def check_host(host: str) -> None:
    """``host`` is an IP address or a host name (dot-separated labels, 253 characters at
    most), as a certificate's subject alternative names hold them."""
    try:
        ipaddress.ip_address(host)
        return
    except ValueError:
        pass
    labels = host[:-1].split(".") if host.endswith(".") else host.split(".")
    if len(host) > 253 or not all(_LABEL.match(label) for label in labels):
        raise FedLabelsError(f"--host {host!r} is neither an IP address nor a host name "
                             "(letters, digits and hyphens, dot-separated); give the name "
                             "or address the SuperNodes connect to.")


def _load_ca(out: Path) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    try:
        cert = x509.load_pem_x509_certificate((out / "ca.crt").read_bytes())
        key = serialization.load_pem_private_key((out / "ca.key").read_bytes(), None)
    except (OSError, ValueError) as exc:
        raise FedLabelsError(f"cannot reuse the CA in {out} ({exc}); restore ca.crt and "
                             "ca.key, or pass --force to make a new CA.") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey) or \
            key.public_key() != cert.public_key():
        raise FedLabelsError(f"{out}/ca.key does not belong to {out}/ca.crt; restore the "
                             "pair, or pass --force to make a new CA.")
    return cert, key


def has_ca(out_dir: str | Path) -> bool:
    out = Path(out_dir)
    return (out / "ca.crt").exists() or (out / "ca.key").exists()


def make_tls_files(out_dir: str | Path, hosts: list[str], days: int = 365,
                   new_ca: bool = True) -> TlsFiles:
    """A CA and a SuperLink certificate valid for ``hosts`` (names or IP addresses) and for
    ``localhost``/``127.0.0.1`` (the coordinator's own loopback listener).

    ``new_ca=False`` keeps the CA already in ``out_dir`` (every site trusts it) and signs
    the new server certificate with it.
    """
    for host in hosts:
        check_host(host)
    if not 1 <= days <= MAX_DAYS:
        raise FedLabelsError(f"--days {days}: a certificate is valid for 1 to {MAX_DAYS} days.")
    out = Path(out_dir)
    hosts = [*hosts, *(h for h in LOOPBACK_HOSTS if h not in hosts)]
    now = dt.datetime.now(dt.UTC)
    if not new_ca:
        ca_cert, ca_key = _load_ca(out)
        return _server_files(out, hosts, days, ca_cert, ca_key, now)
    ca_key = ec.generate_private_key(ec.SECP384R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fedlabels federation CA")])
    ca_cert = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
               .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - dt.timedelta(minutes=5))
               .not_valid_after(now + dt.timedelta(days=days))
               .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
               .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True,
                                            crl_sign=True, content_commitment=False,
                                            key_encipherment=False, data_encipherment=False,
                                            key_agreement=False, encipher_only=False,
                                            decipher_only=False), critical=True)
               .sign(ca_key, hashes.SHA384()))
    pem = serialization.Encoding.PEM
    _write(out / "ca.key", _pem_key(ca_key), private=True)
    _write(out / "ca.crt", ca_cert.public_bytes(pem))
    return _server_files(out, hosts, days, ca_cert, ca_key, now)


def _server_files(out: Path, hosts: list[str], days: int, ca_cert: x509.Certificate,
                  ca_key: ec.EllipticCurvePrivateKey, now: dt.datetime) -> TlsFiles:
    """A SuperLink key and certificate for ``hosts``, signed by the CA (a common name holds
    64 characters; clients check the alternative names, which hold every host)."""
    key = ec.generate_private_key(ec.SECP384R1())
    common_name = hosts[0] if len(hosts[0]) <= 64 else "fedlabels SuperLink"
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(ca_cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=days))
            .add_extension(_san(hosts), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([x509.ExtendedKeyUsageOID.SERVER_AUTH]),
                           critical=False)
            .sign(ca_key, hashes.SHA384()))
    pem = serialization.Encoding.PEM
    return TlsFiles(ca_cert=out / "ca.crt", ca_key=out / "ca.key",
                    server_key=_write(out / "server.key", _pem_key(key), private=True),
                    server_cert=_write(out / "server.crt", cert.public_bytes(pem)))


def existing_node_keys(out_dir: str | Path, n: int) -> list[int]:
    """Which of the ``n`` node key pairs are already in ``out_dir`` (both files)."""
    out = Path(out_dir)
    return [i for i in range(n)
            if (out / f"node_{i}").is_file() and (out / f"node_{i}.pub").is_file()]


def make_node_keys(out_dir: str | Path, n: int,
                   keep: bool = True) -> list[tuple[Path, Path]]:
    """``n`` OpenSSH ECDSA P-384 key pairs (private, public) for SuperNode authentication;
    ``keep``: a pair already there (both files) is kept, since its public key may be
    registered at the SuperLink and its private key installed at a site."""
    out = Path(out_dir)
    kept = set(existing_node_keys(out, n)) if keep else set()
    pairs = []
    for i in range(n):
        if i in kept:
            pairs.append((out / f"node_{i}", out / f"node_{i}.pub"))
            continue
        key = ec.generate_private_key(ec.SECP384R1())
        private = key.private_bytes(serialization.Encoding.PEM,
                                    serialization.PrivateFormat.OpenSSH,
                                    serialization.NoEncryption())
        public = key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                               serialization.PublicFormat.OpenSSH)
        pairs.append((_write(out / f"node_{i}", private, private=True),
                      _write(out / f"node_{i}.pub", public + f" node_{i}\n".encode())))
    return pairs
