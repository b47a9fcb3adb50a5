"""A checkpoint's journal (:mod:`fedlabels.runs.journal`): what grows with the rounds is
appended once, and a crash anywhere resumes a round whose state and history agree.

The oracle for a file read back is the round it was written at: every growing entry (the
records, a server's and a client's ledger) and a scalar of the state file name the round,
so a mix of two rounds cannot pass. Crashes are made by cutting files at many byte offsets,
by a write that fails between the journal's append and the state file, and by SIGKILL
there in a real process (then a DP run resumed equals the uninterrupted one).
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fedlabels.api import load_federation
from fedlabels.core.errors import FedLabelsError
from fedlabels.core.randomness import reproducible
from fedlabels.engines.inprocess import simulate
from fedlabels.learners import as_models
from fedlabels.methods import METHODS
from fedlabels.results import RoundRecord, RunResult
from fedlabels.runs import checkpoint as ckpt_module
from fedlabels.runs.checkpoint import (
    EncodedJSON,
    Keeper,
    load_checkpoint,
    write_checkpoint,
)
from fedlabels.runs.journal import Journal, journal_path
from fedlabels.runs.loop import CommMeter
from test_resume import comparable

KEY = b"k" * 32
SRC = str(Path(ckpt_module.__file__).parents[2])


def _events(n: int, who: str) -> str:
    return json.dumps([{"who": who, "round": r, "epsilon": 0.5} for r in range(1, n + 1)])


def _round(n: int) -> tuple[dict[str, Any], dict[str, Any], dict[int, dict[str, Any]]]:
    """The meta and states of a checkpoint after round ``n``."""
    records = json.dumps([{"round": r, "accuracy": 0.25 * r} for r in range(1, n + 1)])
    meta = {"rounds_done": n, "records": EncodedJSON(records)}
    server = {"events#json": _events(n, "server"), "w": np.full(4, float(n))}
    clients = {c: {"ledger_events": _events(n, f"client {c}"), "step": n} for c in (0, 1)}
    return meta, server, clients


def _assert_round(path: Path, n: int, key: bytes = KEY) -> Any:
    """The checkpoint at ``path`` is round ``n``'s, state and history alike."""
    saved = load_checkpoint(path, key)
    assert saved.meta["rounds_done"] == n
    assert [r["round"] for r in saved.meta["records"]] == list(range(1, n + 1))
    assert saved.server["events#json"] == _events(n, "server")
    assert np.array_equal(saved.server["w"], np.full(4, float(n)))
    for c in (0, 1):
        assert saved.clients[c]["step"] == n
        assert saved.clients[c]["ledger_events"] == _events(n, f"client {c}")
    return saved


def _written(tmp_path: Path, rounds: int) -> tuple[Path, list[bytes], list[bytes]]:
    """Checkpoints of rounds 1..``rounds``; the state file and journal after each."""
    path = tmp_path / "run.checkpoint.npz"
    journal = Journal(journal_path(path), KEY)
    states, journals = [], []
    for n in range(1, rounds + 1):
        write_checkpoint(path, *_round(n), journal=journal)
        states.append(path.read_bytes())
        journals.append(journal_path(path).read_bytes())
    return path, states, journals


def test_the_journal_holds_the_history_once_and_files_are_owner_only(tmp_path: Path) -> None:
    path, states, journals = _written(tmp_path, 30)
    _assert_round(path, 30)
    for file in (path, journal_path(path)):
        assert stat.S_IMODE(file.stat().st_mode) == 0o600
    with np.load(path, allow_pickle=False) as npz:
        meta = json.loads(npz["meta"].tobytes().decode())
    assert "records" not in meta and "events#json" not in meta["states"]["server"]
    assert all(b.startswith(a) for a, b in itertools.pairwise(journals))
    # the state file stays as large; what the journal adds a round does not grow either
    assert len(states[-1]) - len(states[9]) <= 16
    added = [len(b) - len(a) for a, b in itertools.pairwise(journals)]
    assert added[-1] - added[9] <= 16


def test_a_journal_cut_anywhere_resumes_the_round_of_its_state_file(tmp_path: Path) -> None:
    """A crash mid-append leaves a torn record, one between the append and the state file an
    extra record: the state file of round k reads round k with the journal of round 4 cut
    at any offset from round k's length on, and refuses one cut before it."""
    path, states, journals = _written(tmp_path, 4)
    journal = journal_path(path)
    for k in (1, 2, 3):
        path.write_bytes(states[k - 1])
        start, end = len(journals[k - 1]), len(journals[3])
        step = 1 if k == 3 else 7
        for cut in [*range(start, end, step), end]:
            journal.write_bytes(journals[3][:cut])
            _assert_round(path, k)
        for cut in range(0, start, 11):
            journal.write_bytes(journals[3][:cut])
            with pytest.raises(FedLabelsError, match=r"shorter .* than its checkpoint says"):
                load_checkpoint(path, KEY)
    # resumed with a torn tail: the next write cuts it off and appends the next round
    path.write_bytes(states[1])
    journal.write_bytes(journals[3][:len(journals[1]) + 5])
    saved = _assert_round(path, 2)
    write_checkpoint(path, *_round(3), journal=saved.journal)
    _assert_round(path, 3)
    assert journal.read_bytes() == journals[2]  # as written without the crash


def test_a_failed_state_write_after_the_append_keeps_the_previous_round(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "run.checkpoint.npz"
    journal = Journal(journal_path(path), KEY)
    for n in (1, 2):
        write_checkpoint(path, *_round(n), journal=journal)
    real = ckpt_module.write_private_with

    def crash(*args: Any, **kw: Any) -> Path:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ckpt_module, "write_private_with", crash)
    before = journal.length
    with pytest.raises(OSError):
        write_checkpoint(path, *_round(3), journal=journal)
    assert journal_path(path).stat().st_size == journal.length > before  # round 3 appended
    _assert_round(path, 2)
    monkeypatch.setattr(ckpt_module, "write_private_with", real)
    write_checkpoint(path, *_round(4), journal=journal)  # the writer goes on
    _assert_round(path, 4)


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_sigkill_between_the_append_and_the_state_file(tmp_path: Path) -> None:
    """A process killed after round 3's journal record, before its state file: round 2 is
    read, and a writer resumed from it drops the record and writes round 3 afresh."""
    path = tmp_path / "run.checkpoint.npz"
    script = textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {SRC!r}); sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_checkpoint_journal import KEY, _round
        from fedlabels.runs import checkpoint as ckpt
        from fedlabels.runs.journal import Journal, journal_path
        from pathlib import Path
        path = Path({str(path)!r})
        journal = Journal(journal_path(path), KEY)
        for n in (1, 2):
            ckpt.write_checkpoint(path, *_round(n), journal=journal)
        ckpt.write_private_with = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)
        ckpt.write_checkpoint(path, *_round(3), journal=journal)
    """)
    proc = subprocess.run([sys.executable, "-c", script], check=False)
    assert proc.returncode == -signal.SIGKILL
    saved = _assert_round(path, 2)
    assert journal_path(path).stat().st_size > saved.journal.length  # round 3's record
    write_checkpoint(path, *_round(3), journal=saved.journal)
    _assert_round(path, 3)
    assert journal_path(path).stat().st_size == saved.journal.length


def test_an_edited_or_swapped_journal_is_refused_in_one_line(tmp_path: Path) -> None:
    path, _, journals = _written(tmp_path, 3)
    journal = journal_path(path)
    for at in (2, 10, len(journals[0]) - 1, len(journals[2]) - 40):
        edited = bytearray(journals[2])
        edited[at] ^= 0x01
        journal.write_bytes(bytes(edited))
        with pytest.raises(FedLabelsError, match="changed after it was written") as refused:
            load_checkpoint(path, KEY)
        assert "\n" not in str(refused.value)
    other = Journal(tmp_path / "other.journal", KEY)  # same key, another run's history
    for n in (2, 1, 3):
        write_checkpoint(tmp_path / "other.npz", *_round(n), journal=other)
    assert other.length >= len(journals[2])
    journal.write_bytes(other.path.read_bytes())
    with pytest.raises(FedLabelsError, match="changed after it was written"):
        load_checkpoint(path, KEY)
    journal.write_bytes(journals[2])
    with pytest.raises(FedLabelsError, match="another key"):
        load_checkpoint(path, b"x" * 32)
    journal.unlink()
    with pytest.raises(FedLabelsError, match="no journal") as refused:
        load_checkpoint(path, KEY)
    # only the state file copied elsewhere: the line names the file to copy beside it
    assert f"{journal} beside its checkpoint {path.name}" in str(refused.value)
    assert "copy, move or restore both" in str(refused.value)


class _Role:
    """A role whose ledger grows a round at a time."""

    secret_state: tuple[str, ...] = ()

    def __init__(self, who: str) -> None:
        self.who, self.rounds = who, 0

    def state_dict(self) -> dict[str, Any]:
        return {"events#json": _events(self.rounds, self.who), "w": np.zeros(8)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rounds = len(json.loads(state["events#json"]))


def _keeper(path: Path, rounds: int) -> tuple[Keeper, _Role, dict[int, _Role], CommMeter]:
    server, clients, meter = _Role("server"), {c: _Role(f"c{c}") for c in range(5)}, CommMeter()
    keeper = Keeper(path, {}, {}, rounds, server, clients, meter)  # type: ignore[arg-type]
    return keeper, server, clients, meter


def _record(rnd: int) -> RoundRecord:
    return RoundRecord(round=rnd, local_steps=rnd, accuracies=[0.5] * 5, server={},
                       bytes_up=[1000] * 5, bytes_down=[2000] * 5, seconds=0.0)


def test_a_resumed_keeper_cuts_the_journal_s_tail_and_goes_on(tmp_path: Path) -> None:
    """A journal longer than its state file says (a torn record) is cut to it on resume,
    and the resumed keeper's next checkpoint follows round 3's."""
    path = tmp_path / "run.checkpoint.npz"
    keeper, server, clients, _ = _keeper(path, 4)
    after_round = keeper.hook(None)
    for rnd in (1, 2, 3):
        for role in (server, *clients.values()):
            role.rounds = rnd
        after_round(_record(rnd))
    with open(journal_path(path), "ab") as fh:
        fh.write(b"\x00\x00\x01\x00 torn")
    saved = load_checkpoint(path)
    keeper, server, clients, _ = _keeper(path, 4)
    assert keeper.restore(saved, 4) == saved.records and server.rounds == 3
    assert journal_path(path).stat().st_size == saved.journal.length  # the tail cut
    for role in (server, *clients.values()):
        role.rounds = 4
    keeper.hook(None)(_record(4))
    again = load_checkpoint(path)
    assert [r.round for r in again.records] == [1, 2, 3, 4]
    assert again.server["events#json"] == _events(4, "server")


def _bytes_per_checkpoint(tmp_path: Path, at: tuple[int, ...]) -> dict[int, int]:
    """Bytes a run's checkpoint writes (its state file and what the journal adds) at the
    rounds ``at``, a checkpoint every round."""
    path = tmp_path / "run.checkpoint.npz"
    keeper, server, clients, meter = _keeper(path, max(at))
    after_round = keeper.hook(None)
    sizes: dict[int, int] = {}
    for rnd in range(1, max(at) + 1):
        for role in (server, *clients.values()):
            role.rounds = rnd
        for cid in clients:
            meter.add(rnd, cid, "up", "labels", 1000 + rnd)
        journal = journal_path(path)
        before = journal.stat().st_size if journal.exists() else 0
        after_round(_record(rnd))
        after = journal.stat().st_size if journal.exists() else 0
        sizes[rnd] = path.stat().st_size + after - before
    saved = load_checkpoint(path)
    assert [r.round for r in saved.records] == list(range(1, max(at) + 1))
    assert saved.server["events#json"] == _events(max(at), "server")
    return sizes


def test_a_checkpoint_writes_as_much_at_round_300_as_at_round_10(tmp_path: Path) -> None:
    """What a checkpoint writes does not grow with the rounds: at round 300 as at round 10
    (a few bytes for longer numbers); in one file it was the whole history (~30 times)."""
    sizes = _bytes_per_checkpoint(tmp_path, (10, 300))
    assert abs(sizes[300] - sizes[10]) <= 64, sizes


def test_a_dp_run_killed_between_its_two_writes_resumes_as_the_uninterrupted(
        tmp_path: Path) -> None:
    """A DP-FedCT run SIGKILLed after round 3's journal record, before its state file,
    resumes from round 2 and ends as the uninterrupted run does (records and models)."""
    path = tmp_path / "run.checkpoint.npz"
    setup = ("fed = load_federation('breast_cancer', clients=3, seed=1)\n"
             "kw = dict(rounds=5, period=4, seed=1, progress=False,\n"
             "          options={'epsilon_per_round': 1.0})\n")
    script = textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {SRC!r})
        from fedlabels.api import load_federation
        from fedlabels.core.randomness import reproducible
        from fedlabels.engines.inprocess import simulate
        from fedlabels.learners import as_models
        from fedlabels.methods import METHODS
        from fedlabels.runs import checkpoint as ckpt
        real, written = ckpt.write_private_with, []
        def write(*a, **k):
            if not str(a[0]).endswith('.checkpoint.npz'):
                return real(*a, **k)
            if len(written) == 2:
                os.kill(os.getpid(), signal.SIGKILL)
            written.append(1)
            return real(*a, **k)
        ckpt.write_private_with = write
    """) + setup + textwrap.dedent(f"""
        with reproducible(7):
            simulate(METHODS['dp-fedct'], fed, as_models('dt'), checkpoint={str(path)!r},
                     **kw)
    """)
    proc = subprocess.run([sys.executable, "-c", script], check=False)
    assert proc.returncode == -signal.SIGKILL
    saved = load_checkpoint(path)
    assert len(saved.records) == 2
    assert journal_path(path).stat().st_size > saved.journal.length  # round 3's record

    def run(**more: Any) -> RunResult:
        scope: dict[str, Any] = {"load_federation": load_federation}
        exec(setup, scope)
        with reproducible(7):
            return simulate(METHODS["dp-fedct"], scope["fed"], as_models("dt"),
                            **scope["kw"], **more)

    resumed, full = run(resume=path), run()
    assert comparable(resumed) == comparable(full)
    fed = load_federation("breast_cancer", clients=3, seed=1)
    for a, b in zip(resumed.client_models, full.client_models, strict=True):
        assert np.array_equal(a.predict(fed.X_test), b.predict(fed.X_test))
    assert len(load_checkpoint(path).records) == 5


def test_a_checkpoint_in_one_file_still_resumes(tmp_path: Path) -> None:
    """A checkpoint as written before the journal (one file, format 2) resumes; the run
    extended from it equals the longer run, and its checkpoint now has a journal."""
    fed = load_federation("breast_cancer", clients=3, seed=1)
    kw: dict[str, Any] = {"period": 4, "seed": 1, "progress": False,
                          "options": {"epsilon_per_round": 1.0}}
    path = tmp_path / "run.checkpoint.npz"
    with reproducible(7):
        simulate(METHODS["dp-fedct"], fed, as_models("dt"), rounds=2, checkpoint=path, **kw)
    saved = load_checkpoint(path)
    meta = {k: v for k, v in saved.meta.items() if k != "format"}
    write_checkpoint(path, meta, saved.server, saved.clients)  # no journal: one file
    journal_path(path).unlink()
    with np.load(path, allow_pickle=False) as npz:
        assert json.loads(npz["meta"].tobytes().decode())["format"] == ckpt_module.FORMAT
    assert len(load_checkpoint(path).records) == 2
    with reproducible(7):
        extended = simulate(METHODS["dp-fedct"], fed, as_models("dt"), rounds=4, resume=path,
                            **kw)
    with reproducible(7):
        longer = simulate(METHODS["dp-fedct"], fed, as_models("dt"), rounds=4, **kw)
    assert comparable(extended) == comparable(longer)
    assert load_checkpoint(path).journal is not None
    assert len(load_checkpoint(path).records) == 4


def test_journal_file_mode_is_kept_private_when_it_existed_wider(tmp_path: Path) -> None:
    path = tmp_path / "run.checkpoint.npz"
    journal_path(path).write_bytes(b"")
    os.chmod(journal_path(path), 0o644)
    write_checkpoint(path, *_round(1), journal=Journal(journal_path(path), KEY))
    assert stat.S_IMODE(journal_path(path).stat().st_mode) == 0o600
    _assert_round(path, 1)


@pytest.mark.parametrize("flag", [[], ["--no-checkpoint"]])
def test_a_file_where_the_journal_goes_is_not_replaced_without_overwrite(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: list[str]) -> None:
    # a leftover X.checkpoint.journal (no X.checkpoint.npz) was replaced by a fresh run's
    # journal, or deleted by --no-checkpoint, where a leftover .npz is refused
    from fedlabels.cli import main

    out = tmp_path / "b.json"
    kept = journal_path(tmp_path / "b.checkpoint.npz")
    kept.write_text("precious\n")
    args = ["run", "--method", "fedct", "--clients", "3", "--model", "dt", "--rounds", "1",
            "--seed", "1", "--no-progress", "-q", "--output", str(out), *flag]
    assert main(args) == 2
    assert f"{kept} exists; pass --overwrite" in capsys.readouterr().err
    assert kept.read_text() == "precious\n" and not out.exists()
    assert main([*args, "--overwrite"]) == 0
    assert kept.exists() != bool(flag)  # replaced by the run's journal, or removed
