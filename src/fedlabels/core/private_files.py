"""Files only their owner can read: 0600 files in 0700 directories, keys, and HMAC tags.

Checkpoints, privacy ledgers and a site's state hold secrets (noise generator states, keys,
what a site released) and decide privacy (what was spent). They are written through these
functions: a directory made here is 0700, a file 0600 (whatever the umask), written to a
temporary file, fsynced and renamed, so a crash leaves the previous version. A key is 32
bytes from the OS CSPRNG, made once and refused if others can read it.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from fedlabels.core.errors import FedLabelsError

KEY_BYTES = 32


def private_dir(path: str | Path, tighten: bool = True) -> Path:
    """``path`` as a directory only its owner can use: made 0700 where missing; an existing
    one owned by this user is set to 0700 with ``tighten`` (a user's own results directory
    is left as it is: ``tighten=False``)."""
    path = Path(path)
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        if tighten and path.stat().st_uid == os.getuid() and path.stat().st_mode & 0o077:
            path.chmod(0o700)
    except OSError as exc:
        raise FedLabelsError(f"cannot make the private directory {path} ({exc}); give a "
                             "writable path.") from None
    return path


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_private(path: str | Path, data: bytes, tighten: bool = True) -> Path:
    """Write ``data`` to ``path`` with mode 0600, atomically and durably (``tighten``: see
    :func:`private_dir`)."""
    return write_private_with(path, lambda fh: fh.write(data), tighten)


def write_private_with(path: str | Path, write: Callable[[BinaryIO], object],
                       tighten: bool = True) -> Path:
    """As :func:`write_private`, with the content that ``write(file)`` writes into the
    temporary file (streamed: a large file is never held in memory whole)."""
    path = Path(path)
    folder = private_dir(path.parent, tighten)
    tmp = folder / f".{path.name}.{secrets.token_hex(4)}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), 0o600)
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        _fsync_dir(folder)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def append_private(path: str | Path, data: bytes) -> None:
    """Append ``data`` to ``path`` (made 0600) and fsync it before returning: all of it or,
    with an error raised, none (a short write, e.g. a full disk or a file-size limit, is
    cut off again). Before, a short write was ignored: a site's ledger entry was left torn
    while the charge returned as recorded and the release went ahead."""
    path = Path(path)
    private_dir(path.parent)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.fchmod(fd, 0o600)
        size = os.fstat(fd).st_size
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                if written <= 0:
                    raise OSError(f"wrote {len(data) - len(view)} of {len(data)} bytes")
                view = view[written:]
            os.fsync(fd)
        except OSError as exc:
            os.ftruncate(fd, size)
            raise FedLabelsError(f"could not append to {path}: {exc.strerror or exc}; it "
                                 "was left as it was before.") from None
    finally:
        os.close(fd)


def check_private(path: Path, what: str) -> None:
    """Refuse a file that others can read or write."""
    mode = path.stat().st_mode & 0o777
    if mode & 0o077:
        raise FedLabelsError(f"{what} {path} is accessible by others (mode {mode:o}); run "
                             f"`chmod 600 {shlex.quote(str(path))}`.")


def make_key_once(path: Path) -> None:
    """Make the key file ``path`` (0600, :data:`KEY_BYTES` from the OS CSPRNG) unless it
    exists. Another process that reads it meanwhile sees no file or the whole key, never an
    empty one (runs started together on a new machine each make it): the key is written to
    a temporary file and linked into place, and a link never replaces a file another process
    made first (theirs is then the key). Where the file system has no hard links it is made
    in place, as before."""
    if path.exists():
        return
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(secrets.token_bytes(KEY_BYTES))
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            return
        except OSError:  # no hard links here (FAT, some network file systems)
            try:
                made = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                return
            with os.fdopen(made, "wb") as fh:
                fh.write(tmp.read_bytes())
                fh.flush()
                os.fsync(fh.fileno())
    finally:
        tmp.unlink(missing_ok=True)


def private_key(path: str | Path, what: str = "key") -> bytes:
    """The 32-byte key in ``path``, made (0600, OS CSPRNG) if it does not exist yet."""
    path = Path(path)
    private_dir(path.parent)
    try:
        make_key_once(path)
    except OSError as exc:
        raise FedLabelsError(f"cannot create the {what} {path} ({exc}).") from None
    return read_key(path, what, "it is not one this program made.")


def read_key(path: Path, what: str, fix: str) -> bytes:
    """The :data:`KEY_BYTES`-byte key in ``path`` (the ``what``), which only its owner may
    read; ``fix`` says what to do when its length is wrong."""
    check_private(path, f"the {what}")
    key = path.read_bytes()
    if len(key) != KEY_BYTES:
        raise FedLabelsError(f"the {what} {path} has {len(key)} bytes, not {KEY_BYTES}; {fix}")
    return key


def tag(key: bytes, *parts: bytes | memoryview) -> str:
    """HMAC-SHA256 of the length-prefixed ``parts`` under ``key`` (hex)."""
    mac = hmac.new(key, digestmod=hashlib.sha256)
    for part in parts:
        mac.update(len(part).to_bytes(8, "big"))
        mac.update(part)
    return mac.hexdigest()


def same_tag(given: object, expected: str) -> bool:
    return isinstance(given, str) and hmac.compare_digest(given, expected)
