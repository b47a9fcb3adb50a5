"""Explicit, cached fetch of datasets that come from registry packages.

Fashion-MNIST comes from Debian's ``dataset-fashion-mnist`` package (see
``docs/datasets.md``): ``apt-get download`` fetches the .deb (no root needed), ``dpkg-deb
-x`` unpacks it, and the four IDX files are copied into the cache with a ``source.json``
recording package, version and checksums. The whole step is atomic: a failed fetch leaves
no half-written cache entry.
"""

from __future__ import annotations

import glob
import hashlib
import json
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from fedlabels.core.errors import FedLabelsError
from fedlabels.core.files import not_a_file
from fedlabels.downloads.cache import dataset_dir


@dataclass(frozen=True)
class DebSource:
    """A Debian package that carries a dataset."""

    package: str
    version: str
    deb_size: int
    files: tuple[str, ...]  # paths inside the package
    marker: str  # a file whose presence in the cache means "fetched"


FASHION_MNIST = DebSource(
    package="dataset-fashion-mnist",
    version="0.0~git20200523.55506a9-1",
    deb_size=30_900_652,
    files=tuple(f"usr/share/datasets/fashion-mnist/{f}" for f in (
        "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
        "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")),
    marker="source.json",
)


def file_sha256(path: Path) -> str:
    """The SHA-256 of the file at ``path``, hex, read 1 MiB at a time."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def check_fetched(root: Path, marker: str, name: str) -> Path:
    """``root/name``, a file ``fedlabels fetch`` recorded in ``root/marker`` with its sha256,
    if it still has that sha256; else a one-line error saying to fetch again (a damaged or
    changed cache file was a decompression traceback, or data other than what was
    fetched). A marker without the file's hash (an older fetch) is trusted as before."""
    import json

    path = root / name
    try:
        expected = json.loads((root / marker).read_text()).get("files", {}).get(name)
    except (OSError, ValueError, AttributeError):
        expected = None
    if isinstance(expected, str) and path.is_file() and file_sha256(path) != expected:
        raise FedLabelsError(f"{path} is not the file `fedlabels fetch` stored (its sha256 "
                             f"differs): the cache is damaged or was changed; delete {root} "
                             "and fetch again.")
    return path


@contextmanager
def staging_dir(parent: Path, prefix: str) -> Iterator[str]:
    """A temporary directory ``parent/PREFIX*`` to stage a fetch in, removed at the end.

    One fetch of a cache entry at a time (an ``flock`` on ``parent/PREFIXfetch.lock``); the
    one holding the lock first removes the staging directories a killed fetch left (a
    SIGKILL or a power cut runs no cleanup: each kept the download, up to ~100 MB)."""
    import fcntl

    with open(parent / f"{prefix}fetch.lock", "a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        made = re.compile(re.escape(prefix) + r"[a-z0-9_]{8}")  # what mkdtemp names
        for stale in parent.glob(f"{glob.escape(prefix)}*"):
            if made.fullmatch(stale.name) and stale.is_dir() and not stale.is_symlink():
                shutil.rmtree(stale, ignore_errors=True)
        with tempfile.TemporaryDirectory(dir=parent, prefix=prefix) as tmp:
            yield tmp


def commit_staged(staged: Path, target: Path, meta: Mapping[str, object],
                  marker: str) -> None:
    """Write ``meta`` as ``staged/marker`` and move ``staged`` to ``target`` in one rename
    (atomic on one filesystem; ``staged`` must lie beside ``target``)."""
    (staged / marker).write_text(json.dumps(meta, indent=2))
    if target.exists():
        shutil.rmtree(target)
    staged.rename(target)


def pip_download(requirement: str, into: Path, *flags: str) -> None:
    """``pip download --no-deps FLAGS requirement`` into ``into``, one line on failure."""
    import sys

    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
           "--disable-pip-version-check", *flags, "-d", str(into), requirement]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise FedLabelsError(f"pip download {requirement} failed (exit {proc.returncode}): "
                             f"{proc.stderr.strip()[-300:]}; download it elsewhere and pass "
                             "it with --from-deb PATH.")


def _run(cmd: list[str], cwd: Path, then: str = "") -> None:
    """Run ``cmd`` in ``cwd``; its failure is one line ending in ``then`` (what to do)."""
    if shutil.which(cmd[0]) is None:
        raise FedLabelsError(f"'{cmd[0]}' is not available on this machine; fetch the .deb "
                             "elsewhere and pass it with --from-deb PATH.")
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise FedLabelsError(f"'{' '.join(cmd)}' failed (exit {proc.returncode}): "
                             f"{' '.join(proc.stderr.split())[-500:]}{then}")


def fetch_deb_dataset(name: str, source: DebSource, from_deb: str | Path | None = None,
                      log: Callable[[str], None] = print) -> Path:
    """Fetch a Debian-packaged dataset into the cache and return its directory."""
    target = dataset_dir(name)
    if (target / source.marker).exists():
        log(f"{name}: already fetched in {target}")
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with staging_dir(target.parent, f".{name}-") as tmp_str:
        tmp = Path(tmp_str)
        if from_deb is None:
            log(f"{name}: apt-get download {source.package} ...")
            # offline, the reason was apt's alone: say how to fetch without a network
            _run(["apt-get", "download", source.package], cwd=tmp,
                 then=f"; without a network here, download {source.package}'s .deb on "
                      f"another machine (`apt-get download {source.package}`) and pass it "
                      "with --from-deb FILE.")
            debs = sorted(tmp.glob(f"{source.package}_*.deb"))
            if not debs:
                raise FedLabelsError(f"apt-get produced no {source.package} .deb")
            deb = debs[0]
        else:
            deb = Path(from_deb)
            if not deb.is_file():
                raise FedLabelsError(f"--from-deb {deb} {not_a_file(deb)}; give the "
                                     f"downloaded {source.package} .deb file.")
        size = deb.stat().st_size
        if source.deb_size and size != source.deb_size:
            log(f"{name}: warning: {deb.name} is {size} bytes, expected {source.deb_size} "
                f"for version {source.version}; using it anyway")
        unpacked = tmp / "unpacked"
        _run(["dpkg-deb", "-x", str(deb.resolve()), str(unpacked)], cwd=tmp,
             then="" if from_deb is None else
             f"; is --from-deb {deb} the {source.package} .deb?")
        staged = tmp / "staged"
        staged.mkdir()
        files = {}
        for rel in source.files:
            src = unpacked / rel
            if not src.is_file():
                raise FedLabelsError(f"{deb.name} has no {rel}; is it the right package?")
            shutil.copy2(src, staged / src.name)
            files[src.name] = file_sha256(staged / src.name)
        meta = {"package": source.package, "deb": deb.name, "deb_size": size,
                "deb_sha256": file_sha256(deb), "files": files}
        commit_staged(staged, target, meta, source.marker)
    log(f"{name}: fetched into {target}")
    return target
