"""Identity keys the sites make themselves: a site's key files, the coordinator's roster from
their public halves, and a site's pin of the roster it compared with the other sites.

A site runs ``fedlabels deploy identity`` (:func:`make_site_identity`): its Ed25519 key from
the OS CSPRNG goes to ``client_<i>.identity.key`` (0600, never replaced), its public half to
``client_<i>.identity.pub``, which it sends to the coordinator, reading the key's
fingerprint to it out of band. ``deploy prepare --identity-public DIR`` builds the roster
from those files (:func:`read_public_keys`) and makes no private key. A site's node config
``roster-sha256`` pins the roster's fingerprint (:func:`check_roster_pin`); a site without
the pin says so in its log once per run (:func:`unpinned_roster_warning`).

This module does not import Flower.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedlabels.core.errors import FedLabelsError
from fedlabels.core.files import refuse_special_file, write_new
from fedlabels.secure.roster import (
    check_fingerprint,
    key_fingerprint,
    parse_public_key,
    public_key_text,
    read_roster,
    roster_fingerprint,
)

_PUBLIC_FILE = re.compile(r"client_(\d+)\.identity\.pub")
_MAX_PUBLIC_FILE = 1024  # bytes: a public-key file is one short line


@dataclass(frozen=True)
class SiteIdentityFiles:
    """What :func:`make_site_identity` wrote."""

    key: Path
    public: Path
    fingerprint: str


def make_site_identity(folder: str | Path, cid: int) -> SiteIdentityFiles:
    """Make site ``cid``'s identity key (OS CSPRNG) in ``folder``: the private key (0600)
    and the public-key file; an existing file of either name is refused, nothing written."""
    from fedlabels.secure.identity import Identity

    if isinstance(cid, bool) or not isinstance(cid, int) or cid < 0:
        raise FedLabelsError(f"--client-id must be this site's client index (0, 1, ...), got "
                             f"{cid!r}.")
    folder = Path(folder).expanduser()
    key, public = (folder / f"client_{cid}.identity.{x}" for x in ("key", "pub"))
    for path in (key, public):
        if path.exists() or path.is_symlink():
            raise FedLabelsError(f"{path} exists; refusing to overwrite it (a site keeps one "
                                 "identity key; move it away first to make a new one).")
    identity = Identity()
    write_new(key, identity.private_bytes(), "the identity key", private=True)
    write_new(public, public_key_text(cid, identity.public).encode(), "the public key")
    return SiteIdentityFiles(key, public, key_fingerprint(identity.public))


def read_public_file(path: Path, cid: int | None = None, where: str | None = None
                     ) -> tuple[int, bytes]:
    """The client id and the key of a site's ``client_<i>.identity.pub`` at ``path``
    (named ``where`` in errors, default the path), refused in one line: a device, pipe or
    socket, a file over 1024 bytes, an unreadable file, text that is not one key line,
    a key that is not a valid Ed25519 key (not canonical, no point of the curve, or of small
    order: :func:`~fedlabels.secure.ed25519_point.key_problem`), and, given ``cid``, the key
    of another client."""
    where = str(path) if where is None else where
    site = "the site" if cid is None else f"site {cid}"
    refuse_special_file(path, "the public key")
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise FedLabelsError(f"cannot read {where} ({exc.strerror or exc}).") from None
    if size > _MAX_PUBLIC_FILE:
        raise FedLabelsError(f"{where} is not a site's identity public key (over "
                             f"{_MAX_PUBLIC_FILE} bytes); ask {site} for its .pub file "
                             "again.")
    try:
        text = path.read_text(encoding="ascii")
    except UnicodeDecodeError:
        text = ""
    except OSError as exc:
        raise FedLabelsError(f"cannot read {where} ({exc.strerror or exc}).") from None
    listed, public = parse_public_key(text, where)
    if cid is not None and listed != cid:
        raise FedLabelsError(f"{where} holds the key of client {listed}, not of client {cid}; "
                             "name each site's file client_<its id>.identity.pub.")
    from fedlabels.secure.ed25519_point import key_problem

    why = key_problem(public)  # cryptography's from_public_bytes takes any 32 bytes
    if why is not None:
        raise FedLabelsError(f"{where} is not a valid Ed25519 public key ({why}); ask {site} "
                             "for its .pub file again.")
    return listed, public


def read_public_keys(folder: str | Path, n_clients: int) -> dict[int, bytes]:
    """The roster (client id → identity public key) of the sites' ``client_<i>.identity.pub``
    files in ``folder``, one per client 0..``n_clients``-1. Refused in one line: a missing
    site, a file for a client the run does not have, a file that is not a public key or is
    another client's, one key sent by two sites, and a private key file in ``folder``."""
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise FedLabelsError(f"--identity-public {folder} is not a directory; give the folder "
                             "holding the sites' client_<i>.identity.pub files.")
    names = sorted(p.name for p in folder.iterdir())
    private = [n for n in names if n.endswith(".identity.key")]
    if private:
        raise FedLabelsError(f"{folder} holds {private[0]}, a site's private identity key; a "
                             "site keeps that file and sends only its .pub: delete the copy "
                             "here, and let that site make a new key.")
    given = {int(m.group(1)): folder / n for n in names if (m := _PUBLIC_FILE.fullmatch(n))}
    extra = sorted(c for c in given if c >= n_clients)
    if extra:
        raise FedLabelsError(f"{folder} holds client_{extra[0]}.identity.pub but the run has "
                             f"{n_clients} clients (ids 0..{n_clients - 1}); remove it or "
                             "give --clients to match.")
    missing = [c for c in range(n_clients) if c not in given]
    if missing:
        raise FedLabelsError(f"no public key for client(s) {missing} in {folder}: each site "
                             "makes its own with `fedlabels deploy identity --client-id I "
                             "--out-dir DIR` and sends client_I.identity.pub.")
    roster: dict[int, bytes] = {}
    for cid in range(n_clients):
        _, public = read_public_file(given[cid], cid)
        twin = next((c for c, k in roster.items() if k == public), None)
        if twin is not None:
            raise FedLabelsError(f"clients {twin} and {cid} sent the same public key; each "
                                 "site makes its own (`fedlabels deploy identity`).")
        roster[cid] = public
    return roster


def check_roster_pin(pin: object, shared: dict[str, np.ndarray],
                     where: str = "the shared file") -> None:
    """Refuse a shared file (``where``, for errors) whose roster fingerprint is not the
    pinned ``pin``."""
    expected = check_fingerprint(str(pin), "node config roster-sha256")
    actual = roster_fingerprint(*read_roster(shared, where))
    if actual != expected:
        raise FedLabelsError(f"the shared file's roster has fingerprint {actual}, not the "
                             f"pinned roster-sha256 {expected}; refusing: its roster or run "
                             "id differs from the one the sites compared (compare `fedlabels "
                             "deploy roster --shared FILE` with the other sites again).")


def unpinned_roster_warning(has_trust: bool, node_config: Mapping[str, Any],
                            stake: str) -> str | None:
    """What a site's log says, once per run, when it holds a roster (``has_trust``: its
    identity key and the shared file's roster) without ``roster-sha256``; None: pinned, or
    no roster. ``stake``: what the coordinator then gets from the method this site runs
    (:attr:`~fedlabels.method.base.Method.roster_stake`)."""
    if not has_trust or node_config.get("roster-sha256") is not None:
        return None
    return ("the shared file holds a roster of identity keys but the node config has no "
            "roster-sha256: a coordinator that deviates can give this site a roster with a "
            f"key of its own at a peer's id and run that peer ({stake}); pin it: compare "
            "the roster fingerprint of `fedlabels deploy roster --shared FILE --public "
            "client_I.identity.pub` with the other sites and add roster-sha256=<fingerprint> "
            "to the node config")
