"""The roster as the sites hold it: its arrays in the shared file, its fingerprint, and the
public-key file a site makes for itself.

A site that makes its own identity key (:class:`~fedlabels.secure.identity.Identity`) sends
the coordinator only :func:`public_key_text` (its client id and 32-byte Ed25519 public
key) and reads :func:`key_fingerprint` to it out of band. The sites compare
:func:`roster_fingerprint` (a hash of the run id and the sorted roster, like a safety
number) with one another out of band and pin it, so a coordinator that gives one site a
roster with another key at a peer's id is caught.
"""

from __future__ import annotations

import hashlib
import re
import struct
from collections.abc import Mapping

import numpy as np

from fedlabels.core.errors import FedLabelsError

#: the first word of a site's public-key file (``client_<i>.identity.pub``)
PUBLIC_KEY_HEADER = "fedlabels-identity"
_PUBLIC_KEY_LINE = re.compile(rf"{PUBLIC_KEY_HEADER} client=(\d+) ed25519=([0-9a-f]{{64}})")
_FINGERPRINT = re.compile(r"[0-9a-f]{64}")


def key_fingerprint(public: bytes) -> str:
    """SHA-256 (hex) of an identity public key, for a site to read to the coordinator."""
    return hashlib.sha256(b"fedlabels-identity-key-v1\0" + bytes(public)).hexdigest()


def roster_fingerprint(roster: Mapping[int, bytes], run_id: bytes) -> str:
    """SHA-256 (hex) of the run id and the roster sorted by client id: every site holding
    the same shared file computes the same one, whatever the order of its arrays."""
    h = hashlib.sha256(b"fedlabels-roster-v1\0")
    h.update(struct.pack("<Q", len(run_id)) + bytes(run_id) + struct.pack("<Q", len(roster)))
    for cid in sorted(roster):
        h.update(struct.pack("<q", int(cid)) + bytes(roster[cid]))
    return h.hexdigest()


def roster_arrays(roster: Mapping[int, bytes], run_id: bytes) -> dict[str, np.ndarray]:
    """The roster and run id as the shared file's arrays (what every deployed site gets)."""
    ids = sorted(int(c) for c in roster)
    return {"roster_ids": np.asarray(ids, dtype=np.int64),
            "roster_keys": np.stack([np.frombuffer(bytes(roster[c]), dtype=np.uint8)
                                     for c in ids]),
            "run_id": np.frombuffer(bytes(run_id), dtype=np.uint8).copy()}


def read_roster(arrays: Mapping[str, np.ndarray],
                where: str = "the shared file") -> tuple[dict[int, bytes], bytes]:
    """(roster, run id) of the shared file's arrays (:func:`roster_arrays`), every entry
    checked as it is read: one 32-byte key per distinct client id >= 0, each a valid
    Ed25519 public key (:func:`~fedlabels.secure.ed25519_point.key_problem`: canonical, a
    point of the curve, not of small order), and a run id. Refused in one line naming
    ``where`` (the file), the entry and what is wrong."""
    from fedlabels.secure.ed25519_point import key_problem

    bad = any(k not in arrays for k in ("roster_ids", "roster_keys", "run_id"))
    raw_ids = np.zeros(0) if bad else np.asarray(arrays["roster_ids"]).reshape(-1)
    ids = [int(c) for c in raw_ids] if raw_ids.dtype.kind in "iu" else []
    keys = np.zeros(0) if bad else np.asarray(arrays["roster_keys"])
    if (bad or raw_ids.dtype.kind not in "iu" or keys.dtype != np.uint8
            or keys.shape != (len(ids), 32) or len(set(ids)) != len(ids)
            or any(c < 0 for c in ids)):
        raise FedLabelsError(f"{where}: the roster must hold one 32-byte Ed25519 key per "
                             "distinct client id (0, 1, ...) and a run id; use the shared "
                             "file `deploy prepare` wrote.")
    run_id = np.asarray(arrays["run_id"], dtype=np.uint8).tobytes()
    if not run_id:
        raise FedLabelsError(f"{where}: the roster's run id is empty, so a signature of "
                             "this run would verify in any other; use the shared file "
                             "`deploy prepare` wrote.")
    for i, cid in enumerate(ids):
        why = key_problem(keys[i].tobytes())
        if why is not None:
            raise FedLabelsError(f"{where}: the roster's key for client {cid} (entry {i}, "
                                 f"fingerprint {key_fingerprint(keys[i].tobytes())[:16]}) is "
                                 f"not a valid Ed25519 public key ({why}); refusing the "
                                 f"roster: ask the coordinator for the shared file prepared "
                                 f"from client {cid}'s own client_{cid}.identity.pub.")
    return {c: keys[i].tobytes() for i, c in enumerate(ids)}, run_id


def public_key_text(cid: int, public: bytes) -> str:
    """A site's public-key file: one line, its client id and Ed25519 public key (hex)."""
    return f"{PUBLIC_KEY_HEADER} client={int(cid)} ed25519={bytes(public).hex()}\n"


def parse_public_key(text: str, where: str) -> tuple[int, bytes]:
    """(client id, 32-byte public key) of :func:`public_key_text`; anything else is refused
    in one line naming ``where``."""
    match = _PUBLIC_KEY_LINE.fullmatch(text.strip())
    if match is None:
        raise FedLabelsError(f"{where} is not a site's identity public key (one line "
                             f"'{PUBLIC_KEY_HEADER} client=I ed25519=<64 hex digits>', as "
                             "`fedlabels deploy identity` writes it); ask the site for its "
                             ".pub file again.")
    return int(match.group(1)), bytes.fromhex(match.group(2))


def check_fingerprint(text: str, what: str) -> str:
    """``text`` as a roster fingerprint (64 hex digits, either case), or a one-line error."""
    value = str(text).strip().lower()
    if not _FINGERPRINT.fullmatch(value):
        raise FedLabelsError(f"{what} must be a roster fingerprint: 64 hex digits, as "
                             f"`fedlabels deploy roster` prints it; got {text!r}.")
    return value
