"""Where commands write, and the checks made before any work starts.

Every command that writes files checks all of its output paths first — before data is loaded
or a model trained — and refuses, in one line:

- to write over one of its inputs (the table of ``csv:PATH:TARGET``, the ``--config`` file,
  the results a plot is made from);
- to write two of its outputs to one path;
- to replace an existing file, unless ``--overwrite`` is given;
- a path that is a directory, lies under a file, or in a directory that cannot be written.

The files themselves are written atomically (:func:`atomic_path`), so a
failed write leaves the file there before intact; :func:`writing` turns the ``OSError`` of a
failed write (a full disk, a lost mount) into a one-line :class:`FedLabelsError`.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from fedlabels.core.errors import FedLabelsError

RESULT_SUFFIX = ".json"


#: the models files of earlier versions (pickles): recognised only to be refused
PICKLED_MODELS = ".models.pkl"


def given_path(value: object, what: str) -> Path:
    """``value`` as a :class:`~pathlib.Path` (``~`` expanded), or a one-line error naming
    ``what`` if it is not a path (a number gave a TypeError from inside ``os``)."""
    if not isinstance(value, str | os.PathLike):
        raise FedLabelsError(f"{what} must be a path (a str or pathlib.Path), got "
                             f"{type(value).__name__}.")
    return Path(value).expanduser()


def models_path(result_path: str | Path) -> Path:
    """Where the models of a result JSON live: ``x.json`` -> ``x.models.npz`` (and from
    the run's other files, its rounds table and checkpoint: ``x.checkpoint.npz`` ->
    ``x.models.npz``, not ``x.checkpoint.models.npz``)."""
    path = Path(result_path)
    if path.name.endswith((".models.npz", PICKLED_MODELS)):
        return path
    for sibling in RUN_SIBLINGS:
        if path.name.endswith(sibling) and len(path.name) > len(sibling):
            return path.with_name(path.name[:-len(sibling)] + ".models.npz")
    return path.with_suffix(".models.npz")


#: the suffixes of a run's files beside its result ``x.json`` that name the run too
RUN_SIBLINGS = (".rounds.csv", ".checkpoint.npz", ".checkpoint.journal")


def rounds_path(result: str | Path) -> Path:
    """The per-round table beside a result: ``x.json`` -> ``x.rounds.csv``."""
    path = Path(result)
    return path.with_name(f"{path.stem}.rounds.csv")


def result_path(output: str | Path, option: str = "--output") -> Path:
    """``output`` as a result path; it must end in ``.json`` (the rounds table and the models
    go beside it, so a ``.csv`` name would collide with them)."""
    path = Path(output).expanduser()
    if not path.name or path.name in (".", "..") or str(output).endswith(("/", os.sep)) or (
            path.is_dir() and path.suffix.lower() != RESULT_SUFFIX):
        # `-o results/` said "... goes beside it as results.rounds.csv" (a folder X.json:
        # "is a directory", later)
        raise FedLabelsError(f"{option} {output}: give a file name ending in .json (e.g. "
                             f"{path / 'run.json' if path.name else 'run.json'}), not a "
                             "directory.")
    if path.name.lower() == RESULT_SUFFIX:  # a name that is only the suffix
        raise FedLabelsError(f"{option} {output}: give a name before .json (e.g. "
                             f"{path.with_name('run.json')}).")
    if path.suffix.lower() != RESULT_SUFFIX:
        raise FedLabelsError(f"{option} {output}: the result is JSON, give a path ending in "
                             f".json (the rounds table goes beside it as "
                             f"{rounds_path(path.with_suffix(RESULT_SUFFIX)).name}).")
    return path


def run_outputs(result: Path) -> dict[str, Path]:
    """The files a run writes: the result JSON, its rounds table and the clients' models."""
    return {"result": result, "rounds table": rounds_path(result),
            "models file": models_path(result)}


def run_files(result: str | Path) -> dict[str, Path]:
    """A finished run's own files, to keep a command that reads the run from writing over
    them: the result, its rounds table, models file and every other file named ``STEM.*``
    beside it (its checkpoint among them)."""
    path = Path(result).expanduser()
    stem = path.name[:-len(RESULT_SUFFIX)] if path.name.endswith(RESULT_SUFFIX) else path.stem
    files = run_outputs(path)
    if path.parent.is_dir():
        files.update({f"run file {p.name}": p for p in path.parent.glob(f"{stem}.*")})
    return files


def csv_parts(dataset: str) -> tuple[str, str]:
    """``csv:PATH:TARGET`` -> (PATH, TARGET), split at the last ``:``, unless that PATH is no
    file and an earlier ``:`` leaves one (a target column named ``death:30d``); ("", "")
    where the spec has no ``:`` to split at."""
    body = dataset[len("csv:"):] if dataset.startswith("csv:") else dataset
    path, colon, target = body.rpartition(":")
    if not colon:
        return "", ""
    if not Path(path).expanduser().is_file():
        for at in (i for i, ch in enumerate(body) if ch == ":"):
            if at and Path(body[:at]).expanduser().is_file():
                return body[:at], body[at + 1:]
    return path, target


def run_inputs(dataset: str, config_file: str | Path | None = None,
               public: str | None = None) -> dict[str, Path]:
    """The user files a run reads: the table of ``csv:PATH:TARGET``, the config file and a
    public set's table (``public``)."""
    inputs: dict[str, Path] = {}
    if public is not None:
        inputs["public file"] = Path(public).expanduser()
    if dataset.startswith("csv:"):
        table, _ = csv_parts(dataset)
        if table:
            inputs["dataset file"] = Path(table).expanduser()
    if config_file is not None:
        inputs["config file"] = Path(config_file).expanduser()
    return inputs


def check_outputs(outputs: Mapping[str, Path], inputs: Mapping[str, Path] | None = None,
                  overwrite: bool = False, overwrite_hint: str = "--overwrite") -> None:
    """Refuse (one-line :class:`FedLabelsError`) outputs that would destroy or collide with
    a file, or that cannot be written; see the module docstring. ``overwrite_hint`` is how
    the caller asks to replace files (a flag, or ``overwrite=True`` in Python)."""
    read = {_real(p): what for what, p in (inputs or {}).items()}
    written: dict[Path, str] = {}
    for what, path in outputs.items():
        real = _real(path)
        if real in read:
            raise FedLabelsError(f"refusing to write the {what} to {path}: that is the "
                                 f"{read[real]}, not an output; choose another output name.")
        if real in written:
            raise FedLabelsError(f"the {written[real]} and the {what} would both be written "
                                 f"to {path}; choose another output name.")
        written[real] = what
        if path.is_dir():
            raise FedLabelsError(f"cannot write the {what} to {path}: it is a directory; "
                                 "give a file name.")
        if (path.exists() or path.is_symlink()) and not overwrite:
            raise FedLabelsError(f"{path} exists; pass {overwrite_hint} to replace it, or "
                                 "choose another output name.")
        _check_directory(path, what)


def check_output_dir(path: Path, what: str, overwrite: bool = False) -> None:
    """A directory a command fills with many files: refused if it is a file, cannot be
    created or written, or already holds files (unless ``overwrite``)."""
    if path.exists() and not path.is_dir():
        raise FedLabelsError(f"cannot write the {what} to {path}: it is a file, not a "
                             "directory.")
    if path.is_dir() and any(path.iterdir()) and not overwrite:
        raise FedLabelsError(f"{path} is not empty; pass --overwrite to write into it (files "
                             "of the same name are replaced), or choose another directory.")
    _check_directory(path / "probe", what)


def not_a_file(path: str | Path) -> str:
    """Why ``path`` cannot be read as a file, e.g. ``"does not exist"``, ``"is a
    directory"``, ``"is a loop of symbolic links"``, ``"is not a regular file ..."``."""
    path = Path(path)
    if path.is_symlink() and not path.exists():
        try:
            path.resolve(strict=True)
        except (RuntimeError, OSError) as exc:
            if isinstance(exc, RuntimeError) or getattr(exc, "errno", None) == 40:
                return "is a loop of symbolic links (it points back to itself)"
        return "is a symbolic link to a file that does not exist"
    if path.is_dir():
        return "is a directory"
    if path.exists():
        return "is not a regular file (a device, pipe or socket); give a file"
    return "does not exist"


def refuse_special_file(path: Path, what: str) -> None:
    """A one-line error if ``path`` (the ``what``) is a device, pipe or socket, before it is
    read: ``/dev/zero`` was read until memory ran out, and a named pipe hung the reader. A
    missing path, a file or a directory is the caller's to handle."""
    if path.exists() and not path.is_file() and not path.is_dir():
        raise FedLabelsError(f"{what} {path} {not_a_file(path)}.")


def _real(path: Path) -> Path:
    try:
        return Path(path).expanduser().resolve()
    except (RuntimeError, OSError):  # RuntimeError: a symbolic link loop (Python < 3.13)
        raise FedLabelsError(f"{path} is a loop of symbolic links (it points back to "
                             "itself); remove the link or give another path.") from None


def _check_directory(path: Path, what: str) -> None:
    """The nearest existing ancestor must be a directory we can create files in."""
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise FedLabelsError(f"cannot write the {what} to {path}: {parent} is a file, not a "
                             "directory.")
    try:  # a real probe: permissions, read-only file systems, ACLs
        with tempfile.NamedTemporaryFile(dir=parent, prefix=".fedlabels-probe-"):
            pass
    except OSError as exc:
        raise FedLabelsError(f"cannot write the {what} to {path}: directory {parent} is not "
                             f"writable ({exc.strerror or exc}).") from None


@contextmanager
def writing(what: str = "the output") -> Iterator[None]:
    """Turn an ``OSError`` while writing into a one-line :class:`FedLabelsError`."""
    try:
        yield
    except OSError as exc:
        target = exc.filename or what
        if exc.filename and Path(str(exc.filename)).name.startswith(f".{Path(what).name}."):
            target = what  # its temporary file (atomic_path): name the file the user knows
        raise FedLabelsError(f"could not write {target}: {exc.strerror or exc}; the file "
                             "there before, if any, is unchanged.") from None


def _default_mode() -> int:
    """0666 less the process umask: the mode a plainly created file gets."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


@contextmanager
def atomic_path(path: str | Path, private: bool = False,
                no_wider_than: Path | None = None) -> Iterator[Path]:
    """A temporary path beside ``path`` (same suffix) that replaces ``path`` on success.

    Write the file to the yielded path; if that raises (a full disk, Ctrl-C), the temporary
    file is removed and an existing ``path`` is left as it was. Parent directories are
    created. ``private``: the file is readable by its owner only (0600, whatever the umask),
    for what holds private state; otherwise it gets the mode a plainly created file gets,
    less what ``no_wider_than`` (the file or folder it copies rows of) denies: a copy of
    data its owner keeps to themselves is kept so too.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.",
                                suffix=f".tmp{path.suffix}")
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        # mkstemp makes 0600; a shareable file gets what open() would give
        mode = 0o600 if private else _default_mode()
        if no_wider_than is not None:
            mode &= no_wider_than.stat().st_mode | 0o600
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_atomic(path: str | Path, text: str, no_wider_than: Path | None = None) -> Path:
    """Write ``text`` to ``path`` atomically (see :func:`atomic_path`)."""
    path = Path(path)
    with atomic_path(path, no_wider_than=no_wider_than) as tmp, open(tmp, "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    return path


def write_new(path: str | Path, data: bytes, what: str, private: bool = False) -> Path:
    """Create ``path`` holding ``data``, never replacing a file there: written to a temporary
    file beside it (fsynced), then hard-linked into place, so a reader sees no file or the
    whole of it and an existing file (made meanwhile too) is refused in one line naming the
    ``what``. ``private``: mode 0600, the folder made 0700 where missing (an existing one is
    left as it is); otherwise the mode a plainly created file gets. Where the file system
    has no hard links the file is created exclusively in place."""
    from fedlabels.core.private_files import private_dir

    path = Path(path)
    if private:
        private_dir(path.parent, tighten=False)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
    mode = 0o600 if private else _default_mode()
    exists = FedLabelsError(f"{what} {path} exists; refusing to overwrite it (move it away "
                            "first if you mean to replace it).")
    if path.exists() or path.is_symlink():
        raise exists
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    tmp = Path(name)
    try:
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), mode)
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            raise exists from None
        except OSError:  # no hard links here (FAT, some network file systems)
            try:
                made = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
            except FileExistsError:
                raise exists from None
            with os.fdopen(made, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
    finally:
        tmp.unlink(missing_ok=True)
    return path
