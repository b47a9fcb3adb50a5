"""Crash and resume: a run interrupted after round k and resumed equals the uninterrupted one.

For every registered method: interrupt after round 1 (an ``on_round`` hook raising
KeyboardInterrupt, as Ctrl-C would), resume from the checkpoint, and compare with the
uninterrupted run of the same seed — rounds, accuracies, bytes, privacy accounting and the
final models' predictions — wall-clock fields aside. Secret randomness comes from the same
reproducible source in both (by design a real run draws it afresh after a resume). Also:
extending a finished run, the refusals, the checkpoint's atomic write and its format (no
pickle), a secure-noise resume, and the CLI after a SIGKILL.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fedlabels.api import load_federation, resume, run_config
from fedlabels.core.errors import FedLabelsError
from fedlabels.core.json_list import text_of
from fedlabels.core.randomness import reproducible
from fedlabels.data import Federation
from fedlabels.engines.inprocess import simulate
from fedlabels.learners import as_models
from fedlabels.methods import METHODS
from fedlabels.results import RoundRecord, RunResult
from fedlabels.runs import checkpoint as ckpt_module
from fedlabels.runs.checkpoint import checkpoint_path, load_checkpoint
from fedlabels.runs.config import RunConfig
from fedlabels.runs.journal import journal_path

CLIENTS, ROUNDS, PERIOD, SEED, NOISE_SEED = 3, 3, 4, 1, 7
MLP = "mlp(hidden=8)"
SOFT_LABELS = {"dd", "fedmd", "ds-fl"}
XCLP = {"lsh_bits": 32, "knn": 3, "labeled_fraction": 0.3, "secure": "none"}
OPTIONS: dict[str, dict[str, Any]] = {
    "dp-fedct": {"epsilon": 1.0, "mechanism": "xor"},
    "dp-fedavg": {"epsilon": 8.0},
    "dp-pate": {"epsilon": 2.0},
    "fredy": {"epsilon": 1.0, "queries": 40, "teacher_rounds": 2},
    "xclp": {**XCLP, "test_points": 20},
    "fedavg-xclp": {**XCLP, "warmup_rounds": 1},
}


def model_of(method: str) -> str:
    return MLP if METHODS[method].capabilities.requires_weights or method in SOFT_LABELS else "dt"


@pytest.fixture(scope="module")
def fed() -> Federation:
    # unequal client sizes: a Dirichlet split
    return load_federation("breast_cancer", clients=CLIENTS, seed=SEED,
                           partition="dirichlet:1.0,1.0")


def sim(method: str, fed: Federation, rounds: int = ROUNDS, **kw: Any) -> RunResult:
    """A run of ``method`` with its own reproducible noise source (the same for each)."""
    kw.setdefault("options", OPTIONS.get(method, {}))
    with reproducible(NOISE_SEED):
        return simulate(METHODS[method], fed, as_models(model_of(method)), rounds=rounds,
                        period=PERIOD, seed=SEED, progress=False, **kw)


def interrupt_after(k: int) -> Any:
    def hook(record: RoundRecord) -> None:
        if record.round == k:
            raise KeyboardInterrupt
    return hook


def comparable(result: RunResult) -> Any:
    """The result JSON without wall-clock fields and the run's history."""
    def strip(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: strip(v) for k, v in node.items()
                    if k not in ("seconds", "wall_seconds", "provenance", "interrupted")}
        if isinstance(node, list):
            return [strip(v) for v in node]
        return node
    return strip(result.to_dict())


def assert_same_run(a: RunResult, b: RunResult, X: np.ndarray) -> None:
    assert comparable(a) == comparable(b)
    assert len(a.client_models) == len(b.client_models)
    for m1, m2 in zip(a.client_models, b.client_models, strict=True):
        np.testing.assert_array_equal(m1.predict(X), m2.predict(X))


@pytest.mark.parametrize("method", sorted(METHODS))
def test_interrupted_then_resumed_equals_uninterrupted(method: str, fed: Federation,
                                                       tmp_path: Path) -> None:
    full = sim(method, fed)
    path = tmp_path / "run.checkpoint.npz"
    part = sim(method, fed, checkpoint=path, on_round=interrupt_after(1))
    assert part.extra.get("interrupted") or len(full.rounds) == 1  # one-shot: 1 round
    assert [r.round for r in load_checkpoint(path).records] == [1]
    resumed = sim(method, fed, resume=path)
    assert_same_run(full, resumed, fed.X_test)
    assert resumed.extra["provenance"]["resumed"][0]["from_round"] == 1
    assert "privacy" not in full.extra or full.extra["privacy"] == resumed.extra["privacy"]
    # the checkpoint now holds the whole run
    assert len(load_checkpoint(path).records) == len(full.rounds)


@pytest.mark.parametrize("method", ["fedct", "fedavg", "dp-fedct", "fredy"])
def test_extending_a_finished_run_equals_the_longer_run(method: str, fed: Federation,
                                                        tmp_path: Path) -> None:
    path = tmp_path / "run.checkpoint.npz"
    # a per-round ε (not a total split over the rounds): extending is exact
    kw: dict[str, Any] = {"options": {"epsilon_per_round": 1.0}} if method == "dp-fedct" else {}
    short = sim(method, fed, rounds=2, checkpoint=path, **kw)
    longer = sim(method, fed, rounds=4, **kw)
    extended = sim(method, fed, rounds=4, resume=path, **kw)
    assert len(short.rounds) == 2 and not short.extra.get("interrupted")
    assert_same_run(longer, extended, fed.X_test)
    history = extended.extra["provenance"]["resumed"]
    assert history[0]["from_round"] == 2 and history[0]["rounds_planned"] == 4


@pytest.mark.parametrize(("method", "needle"), [("dp-fedavg", "noise multiplier"),
                                                ("dp-fedct", "total ε"),
                                                ("pate", "round 1")])
def test_extension_refused_where_rounds_shape_the_run(method: str, needle: str,
                                                      fed: Federation, tmp_path: Path) -> None:
    path = tmp_path / "run.checkpoint.npz"
    sim(method, fed, rounds=2, checkpoint=path)
    with pytest.raises(FedLabelsError, match=f"cannot extend.*{needle}"):
        sim(method, fed, rounds=3, resume=path)


def test_resume_on_changed_data_says_the_data_changed(fed: Federation,
                                                      tmp_path: Path) -> None:
    """The settings come from the checkpoint, so "differs in federation; resume with the
    checkpointed run's settings" pointed at the wrong thing: the table had been edited."""
    from dataclasses import replace

    path = tmp_path / "run.checkpoint.npz"
    sim("fedct", fed, checkpoint=path, on_round=interrupt_after(1))
    edited = replace(fed, X_public=fed.X_public + 1.0)  # the same sizes, other values
    with pytest.raises(FedLabelsError, match=r"the data changed since the checkpointed run"):
        sim("fedct", edited, resume=path)


def test_a_checkpoint_of_an_earlier_version_resumes_on_the_federation_as_now_loaded(
        fed: Federation, tmp_path: Path) -> None:
    """A federation now records the table settings it was loaded with (``loaded_with``),
    which a federation of an earlier version lacked: a record of settings, not of the data,
    so it is no part of a checkpoint's identity and an interrupted run still resumes."""
    from dataclasses import replace

    assert "loaded_with" in fed.info
    earlier = replace(fed, info={k: v for k, v in fed.info.items() if k != "loaded_with"})
    path = tmp_path / "run.checkpoint.npz"
    sim("fedct", earlier, checkpoint=path, on_round=interrupt_after(1))
    assert_same_run(sim("fedct", fed), sim("fedct", fed, resume=path), fed.X_test)


def test_resume_refuses_another_run_and_fewer_rounds(fed: Federation, tmp_path: Path) -> None:
    path = tmp_path / "run.checkpoint.npz"
    sim("fedct", fed, checkpoint=path, on_round=interrupt_after(1))
    with pytest.raises(FedLabelsError, match=r"another run.*seed"):
        simulate(METHODS["fedct"], fed, as_models("dt"), rounds=ROUNDS, period=PERIOD,
                 seed=SEED + 1, progress=False, resume=path)
    with pytest.raises(FedLabelsError, match=r"another run.*options"):
        sim("fedct", fed, resume=path, options={"quorum": 0.9})
    with pytest.raises(FedLabelsError, match="may only extend"):
        sim("fedct", fed, rounds=ROUNDS - 1, resume=path)
    with pytest.raises(FedLabelsError, match="reproducible"):  # secret vs reproducible noise
        simulate(METHODS["fedct"], fed, as_models("dt"), rounds=ROUNDS, period=PERIOD,
                 seed=SEED, progress=False, resume=path)
    with reproducible(NOISE_SEED + 1), pytest.raises(FedLabelsError, match="another seed"):
        simulate(METHODS["fedct"], fed, as_models("dt"), rounds=ROUNDS, period=PERIOD,
                 seed=SEED, progress=False, resume=path)
    with pytest.raises(FedLabelsError, match="no checkpoint"):
        sim("fedct", fed, resume=tmp_path / "missing.json")


@pytest.mark.parametrize(("gone", "missing"), [
    (r"learner\.opt\.", "lacks its optimiser's entries (opt.*)"),
    (r"learner\.opt\.\d+\.", "lacks Adam's moments")])  # the hyper-parameters kept
def test_a_checkpoint_without_its_optimiser_states_is_refused_naming_the_file(
        gone: str, missing: str, fed: Federation, tmp_path: Path) -> None:
    """A checkpoint (signed under the user's key) whose learners' ``opt.`` entries (or
    Adam's moments alone) were gone resumed with fresh Adam moments, unseen; it is refused in
    one line naming the file and what is missing."""
    import re

    path = tmp_path / "run.checkpoint.npz"
    sim("fedavg", fed, checkpoint=path, on_round=interrupt_after(1))
    saved = load_checkpoint(path)
    stripped = {cid: {k: v for k, v in state.items() if not re.match(gone, k)}
                for cid, state in saved.clients.items()}
    assert all(len(stripped[c]) < len(saved.clients[c]) for c in stripped)
    ckpt_module.write_checkpoint(path, saved.meta, saved.server, stripped)
    with pytest.raises(FedLabelsError) as info:
        sim("fedavg", fed, resume=path)
    message = str(info.value)
    assert "\n" not in message and f"cannot resume from {path}: " in message
    assert missing in message


def test_resume_with_partial_participation_and_a_malicious_client(fed: Federation,
                                                                  tmp_path: Path) -> None:
    # reputation-weighted votes: per-client agreement accumulates in the server's state
    kw: dict[str, Any] = {"participation": 0.5, "malicious": 1, "attack": "random",
                          "options": {"robust": "reputation"}}
    full = sim("fedct", fed, **kw)
    path = tmp_path / "run.checkpoint.npz"
    sim("fedct", fed, checkpoint=path, on_round=interrupt_after(1), **kw)
    assert_same_run(full, sim("fedct", fed, resume=path, **kw), fed.X_test)
    with pytest.raises(FedLabelsError, match=r"another run.*participation"):
        sim("fedct", fed, resume=path, **{**kw, "participation": 0.6})


def test_secure_noise_resume_keeps_the_accounting(fed: Federation, tmp_path: Path) -> None:
    """Without a reproducible source the noise generators are not stored (drawn afresh after
    the resume); the budget and events survive, so ε counts every round."""
    opts = {"noise_multiplier": 1.0, "sample_rate": 1.0}
    common: dict[str, Any] = {"rounds": ROUNDS, "period": PERIOD, "seed": SEED,
                              "progress": False, "options": opts}
    model, path = as_models(MLP), tmp_path / "run.checkpoint.npz"
    full = simulate(METHODS["dp-fedavg"], fed, model, **common)
    simulate(METHODS["dp-fedavg"], fed, model, checkpoint=path, on_round=interrupt_after(1),
             **common)
    saved = load_checkpoint(path)
    assert saved.server["rng"] is None and saved.meta["noise_source"] is None
    resumed = simulate(METHODS["dp-fedavg"], fed, model, resume=path, **common)
    assert resumed.extra["privacy"]["rounds_accounted"] == ROUNDS
    assert resumed.extra["privacy"]["epsilon"] == full.extra["privacy"]["epsilon"]
    # DP-FedCT: the clients' noise generators are left out too, and redrawn
    path2 = tmp_path / "ct.checkpoint.npz"
    ct = {**common, "options": {"epsilon": 2.0, "mechanism": "xor"}}
    simulate(METHODS["dp-fedct"], fed, as_models("dt"), checkpoint=path2,
             on_round=interrupt_after(2), **ct)
    assert all(s["noise_rng"] is None for s in load_checkpoint(path2).clients.values())
    done = simulate(METHODS["dp-fedct"], fed, as_models("dt"), resume=path2, **ct)
    assert done.extra["privacy"]["target"]["released"] == ROUNDS


def test_checkpoint_is_atomic_and_holds_no_pickle(fed: Federation, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "run.checkpoint.npz"
    sim("fedavg", fed, checkpoint=path, on_round=interrupt_after(1))
    before = path.read_bytes()
    with np.load(path, allow_pickle=False) as npz:  # raises on any object array
        assert all(npz[k].dtype != object for k in npz.files)
        assert json.loads(npz["meta"].tobytes().decode())["format"] == ckpt_module.JOURNALED

    def failing_savez(fh: Any, **arrays: Any) -> None:
        fh.write(b"PK\x03\x04 partial")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ckpt_module.np, "savez", failing_savez)
    with pytest.raises(FedLabelsError, match="No space left"):
        sim("fedavg", fed, resume=path)
    assert path.read_bytes() == before  # the previous checkpoint, untouched
    # no temporary left; the journal's record of the round failed is beyond its checkpoint
    assert sorted(p.name for p in tmp_path.iterdir()) == [journal_path(path).name, path.name]
    assert [r.round for r in load_checkpoint(path).records] == [1]


def test_python_api_resume_continues_a_run_config(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    cfg = RunConfig(method="fedct", clients=CLIENTS, model="dt", rounds=ROUNDS, seed=SEED,
                    output=str(out))
    full = run_config(cfg, progress=False)
    run_config(cfg.replace(rounds=1), progress=False, checkpoint=checkpoint_path(out),
               overwrite=True)  # r.json: the full run's
    assert len(json.loads(out.read_text())["rounds"]) == 1
    extended = resume(out, rounds=ROUNDS, progress=False)
    assert comparable(extended) == comparable(full)
    assert len(json.loads(out.read_text())["rounds"]) == ROUNDS  # its files, in place


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_cli_resumes_after_sigkill(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Kill ``fedlabels run`` with SIGKILL once a checkpoint exists (no RESULT.json yet),
    then ``fedlabels resume``: the result equals the uninterrupted run's."""
    from fedlabels.cli import main

    rounds = 40
    args = ["--method", "fedct", "--clients", str(CLIENTS), "--model", "dt", "--rounds",
            str(rounds), "--seed", str(SEED), "--no-progress"]
    out = tmp_path / "r.json"
    proc = subprocess.Popen([sys.executable, "-m", "fedlabels", "run", *args, "--output",
                             str(out)], cwd=tmp_path, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    ckpt = checkpoint_path(out)
    deadline = time.monotonic() + 120
    while not ckpt.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    completed = len(load_checkpoint(ckpt).records)
    assert 1 <= completed < rounds and not out.exists()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as refused:  # resume takes nothing that changes the run
        main(["resume", str(out), "--seed", "3", "--no-progress"])
    assert refused.value.code == 2
    assert "unrecognized arguments: --seed 3" in capsys.readouterr().err
    assert main(["resume", str(out), "--no-progress"]) == 0
    resumed = json.loads(out.read_text())
    assert resumed["provenance"]["resumed"][0]["from_round"] == completed
    cfg = RunConfig(method="fedct", clients=CLIENTS, model="dt", rounds=rounds, seed=SEED)
    expected = run_config(cfg, progress=False).to_dict()
    for key in ("rounds", "final", "communication"):
        assert strip_seconds(resumed[key]) == strip_seconds(json.loads(json.dumps(expected[key])))


def strip_seconds(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: strip_seconds(v) for k, v in node.items() if k != "seconds"}
    if isinstance(node, list):
        return [strip_seconds(v) for v in node]
    return node


def gated_writer(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, gate: threading.Event,
                 events: list[tuple[str, int, float]]) -> None:
    """Checkpoints written through a writer that holds round 1's file until ``gate`` opens,
    keeps a copy of each file (``after_N.checkpoint.npz``), and logs writes and replies."""
    from fedlabels.runs.loop import CommMeter

    real_write, real_add = ckpt_module.write_checkpoint, CommMeter.add

    def slow_write(path: Path, meta: dict[str, Any], *args: Any, **kw: Any) -> Path:
        n = len(json.loads(text_of(meta["records"].text)))  # encoded once per record (EncodedJSON)
        if n == 1:
            assert gate.wait(60), "the gate never opened"
        out = real_write(path, meta, *args, **kw)
        (tmp_path / f"after_{n}.checkpoint.npz").write_bytes(Path(path).read_bytes())
        (tmp_path / f"after_{n}.checkpoint.journal").write_bytes(  # its history, as far
            journal_path(Path(path)).read_bytes())  # as it goes (appended to only)
        events.append(("written", n, time.perf_counter()))
        return out

    def add(self: CommMeter, rnd: int, cid: int, direction: str, *rest: Any) -> None:
        real_add(self, rnd, cid, direction, *rest)
        if direction == "up":
            events.append(("reply", rnd, time.perf_counter()))

    monkeypatch.setattr(ckpt_module, "write_checkpoint", slow_write)
    monkeypatch.setattr(CommMeter, "add", add)


def test_paced_checkpoints_let_rounds_run_on_and_keep_the_last_round(
        fed: Federation, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A checkpoint is written while the next rounds train and does not hold them up: round
    1's file is still being written after round 2's replies, round 2 (the writer busy) is not
    checkpointed, the last round always is; each file holds its own round's state (copied,
    though training changes the weights in place meanwhile) and resumes to the same run."""
    gate, events = threading.Event(), []
    gated_writer(monkeypatch, tmp_path, gate, events)

    def open_gate(record: RoundRecord) -> None:
        if record.round == 2:
            gate.set()

    path = tmp_path / "run.checkpoint.npz"
    full = sim("fedavg", fed, checkpoint=path, on_round=open_gate)
    written = {n: t for kind, n, t in events if kind == "written"}
    assert sorted(written) == [1, 3]
    assert max(t for kind, rnd, t in events if kind == "reply" and rnd == 1) < written[1]
    assert full.extra["provenance"]["checkpoints"]["written"] == 2
    assert full.extra["provenance"]["checkpoints"]["rounds_not_checkpointed"] == 1
    assert len(load_checkpoint(path).records) == ROUNDS
    monkeypatch.undo()
    for n in (1, 3):
        resumed = sim("fedavg", fed, resume=tmp_path / f"after_{n}.checkpoint.npz",
                      checkpoint=tmp_path / f"again_{n}.checkpoint.npz")
        assert_same_run(full, resumed, fed.X_test)


class InterruptedAfterTraining:
    """A grid that raises KeyboardInterrupt (a Ctrl-C) in round ``rnd`` after the clients
    trained and replied, before the server has used the replies: the roles are mid-round."""

    def __init__(self, inner: Any, rnd: int, before: threading.Event) -> None:
        self.inner, self.rnd, self.before = inner, rnd, before

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def exchange(self, messages: Any, rnd: int) -> Any:
        if rnd == self.rnd:
            self.before.set()
        replies = self.inner.exchange(messages, rnd)
        if rnd == self.rnd:
            raise KeyboardInterrupt
        return replies


def test_a_ctrl_c_mid_round_keeps_the_last_file_not_the_half_done_round(
        fed: Federation, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Round 2's checkpoint was put off (round 1's still being written); a Ctrl-C in round
    3, after its clients trained: the file stays round 1's, not the roles as they are then
    (which would resume to another run), and resumes to the uninterrupted run."""
    full = sim("fedavg", fed)
    gate, events = threading.Event(), []
    gated_writer(monkeypatch, tmp_path, gate, events)
    path = tmp_path / "run.checkpoint.npz"
    part = sim("fedavg", fed, checkpoint=path,
               wrap_grid=lambda grid: InterruptedAfterTraining(grid, 2, gate))
    assert part.extra["interrupted"] and len(part.rounds) == 2
    assert [n for kind, n, _ in events if kind == "written"] == [1]
    assert len(load_checkpoint(path).records) == 1
    assert part.extra["provenance"]["checkpoints"]["last_round"] == 1
    from fedlabels.cli.run_options import interrupted_message

    assert interrupted_message(part).endswith(
        "interrupted after round 2; the rounds completed so far were saved; its checkpoint "
        "holds round 1, where `fedlabels resume` continues")
    monkeypatch.undo()
    resumed = sim("fedavg", fed, resume=path)
    assert_same_run(full, resumed, fed.X_test)
    # the counts go on from the file's session: every round of the result is in one of them
    counts = resumed.extra["provenance"]["checkpoints"]
    assert counts["written"] >= 2 and counts["last_round"] == ROUNDS
    assert counts["written"] + counts["rounds_not_checkpointed"] == ROUNDS


def test_a_dp_run_checkpoints_each_round_before_anything_of_it_is_shown(
        fed: Federation, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A DP run's checkpoints were paced like any run's: interrupted in round 21 it resumed
    from round 1's and released rounds 2 to 21 again with fresh noise, though their results
    had been shown and written, and the result counted one release of each. A DP run now
    writes each round's checkpoint before the round's hook (its progress line) runs: a
    Ctrl-C leaves the checkpoint and the interrupted result at the same round."""
    real = ckpt_module.write_checkpoint

    def slow(*args: Any, **kw: Any) -> Path:
        time.sleep(0.2)  # a large file on a slow disk: a paced write lags the rounds
        return real(*args, **kw)

    monkeypatch.setattr(ckpt_module, "write_checkpoint", slow)
    path, on_disk = tmp_path / "dp.checkpoint.npz", []

    def shown(record: RoundRecord) -> None:
        on_disk.append(len(load_checkpoint(path).records) if path.exists() else 0)

    part = simulate(METHODS["dp-fedct"], fed, as_models("dt"), rounds=ROUNDS, period=PERIOD,
                    seed=SEED, progress=False, options={"epsilon": 2.0, "mechanism": "xor"},
                    checkpoint=path, on_round=shown,
                    wrap_grid=lambda grid: InterruptedAfterTraining(grid, 2,
                                                                    threading.Event()))
    assert part.extra["interrupted"] and len(part.rounds) == 2
    assert on_disk == [1, 2]
    assert len(load_checkpoint(path).records) == 2


def test_a_checkpoint_write_a_sigkill_cut_short_is_cleared_by_the_next_run(
        fed: Federation, tmp_path: Path) -> None:
    """A SIGKILL during a checkpoint write left its temporary file (every client's model, as
    large as the checkpoint) beside it for good; the next run or resume of that checkpoint
    removes it, and nothing else."""
    path = tmp_path / "run.checkpoint.npz"
    sim("fedct", fed, rounds=1, checkpoint=path)
    left = tmp_path / ".run.checkpoint.npz.7648cf70.tmp"  # as write_private_with names it
    left.write_bytes(path.read_bytes()[:1000])
    kept = [tmp_path / ".run.checkpoint.npz.lock.tmp", tmp_path / ".other.npz.7648cf70.tmp"]
    for other in kept:
        other.write_bytes(b"x")
    sim("fedct", fed, resume=path)
    assert not left.exists() and all(other.exists() for other in kept)
    assert len(load_checkpoint(path).records) == ROUNDS


def test_a_hook_that_stops_the_run_has_its_round_checkpointed(
        fed: Federation, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An ``on_round`` hook stops the run after round 2, whose checkpoint was put off (round
    1's still being written): it is written before the run stops, and resumes to the
    uninterrupted run."""
    full = sim("fedavg", fed)
    gate, events = threading.Event(), []
    gated_writer(monkeypatch, tmp_path, gate, events)

    def stop_after_2(record: RoundRecord) -> None:
        if record.round == 2:
            gate.set()
            raise KeyboardInterrupt

    path = tmp_path / "run.checkpoint.npz"
    part = sim("fedavg", fed, checkpoint=path, on_round=stop_after_2)
    assert part.extra["interrupted"]
    assert [n for kind, n, _ in events if kind == "written"] == [1, 2]
    monkeypatch.undo()
    assert_same_run(full, sim("fedavg", fed, resume=path), fed.X_test)


def test_the_pacing_spaces_checkpoints_by_their_cost() -> None:
    """With a clock of its own: a checkpoint whose write takes 1 s, at a share of 0.5, is
    followed by the next no sooner than 2 s after it was taken; a round ending before that
    is not checkpointed, unless it is the last (``finish``)."""
    from fedlabels.runs.checkpoint import Keeper
    from fedlabels.runs.loop import CommMeter

    class Role:
        secret_state: tuple[str, ...] = ()

        def state_dict(self) -> dict[str, Any]:
            return {"w": np.zeros(3)}

    now = [0.0]
    holds: list[int] = []

    def write(path: Path, meta: dict[str, Any], *args: Any, **kw: Any) -> Path:
        holds.append(len(json.loads(text_of(meta["records"].text))))
        now[0] += 1.0  # a write of one second
        return Path(path)

    keeper = Keeper(Path("unused.checkpoint.npz"), {}, {}, 4, Role(),  # type: ignore[arg-type]
                    {0: Role()}, CommMeter(), background=True, share=0.5,  # type: ignore[dict-item]
                    clock=lambda: now[0])
    after_round = keeper.hook(None)
    original, ckpt_module.write_checkpoint = ckpt_module.write_checkpoint, write
    try:
        for rnd, at in ((1, 0.0), (2, 1.5), (3, 2.5), (4, 3.6)):
            now[0] = max(now[0], at)
            after_round(RoundRecord(round=rnd, local_steps=rnd, accuracies=None, server={},
                                    bytes_up=[0], bytes_down=[0], seconds=0.0))
            keeper.barrier()
        assert holds == [1, 3]  # round 2 at 1.5 s < 0 + 2 × 1 s; round 3 at 2.5 s ≥ 2 s
        keeper.finish()  # round 4 at 3.6 s < 2.5 + 2 s: put off, written now
        assert holds == [1, 3, 4]
        keeper.finish()  # nothing new
        assert holds == [1, 3, 4]
    finally:
        ckpt_module.write_checkpoint = original
    assert keeper._pace.record()["written"] == 3
    assert keeper._pace.record()["rounds_not_checkpointed"] == 1  # round 2


def test_a_background_checkpoint_copies_live_arrays(tmp_path: Path) -> None:
    """A role may hand out its live arrays; the file holds them as they were at the round's
    end, not as the next round changes them while the file is written."""
    from fedlabels.runs.checkpoint import Keeper
    from fedlabels.runs.loop import CommMeter

    class Role:
        secret_state: tuple[str, ...] = ()

        def __init__(self) -> None:
            self.live = np.zeros(1000)

        def state_dict(self) -> dict[str, Any]:
            return {"live": self.live}  # not a copy

    server, client = Role(), Role()
    path = tmp_path / "run.checkpoint.npz"
    keeper = Keeper(path, {}, {}, 2, server, {0: client}, CommMeter(),  # type: ignore[arg-type]
                    background=True)
    after_round = keeper.hook(None)
    after_round(RoundRecord(round=1, local_steps=1, accuracies=None, server={}, bytes_up=[0],
                            bytes_down=[0], seconds=0.0))
    client.live += 1.0  # the next round, in place, at once
    server.live += 1.0
    keeper.barrier()
    saved = load_checkpoint(path)
    assert not saved.clients[0]["live"].any() and not saved.server["live"].any()


def test_the_checkpoint_mac_hashes_arrays_as_their_bytes() -> None:
    """The MAC of formats 2 and 3 reads the arrays' memory without copying it; the digest is
    the one of their bytes (checkpoints written before stay valid)."""
    from fedlabels.core.private_files import tag

    arrays = {"a": np.arange(12, dtype=">i4").reshape(3, 4), "b": np.array(2.5),
              "c": np.zeros(0), "d": np.ones((2, 3), bool)[:, ::2],
              "e": np.array(["2026-11-27"], dtype="datetime64[D]")}
    for fmt in ckpt_module.BYTES_MAC:
        parts: list[bytes] = [fmt.encode(), b"meta"]
        for name in sorted(arrays):
            a = np.ascontiguousarray(arrays[name])
            parts += [name.encode(), a.dtype.str.encode(), repr(a.shape).encode(),
                      a.tobytes()]
        assert ckpt_module._bytes_mac(b"k" * 32, "meta", arrays, fmt) == tag(b"k" * 32, *parts)


def test_cli_run_without_checkpoint_writes_none_and_cannot_be_resumed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``fedlabels run --no-checkpoint`` writes no checkpoint, the same result as a run that
    does; a stale checkpoint of that name is refused without --overwrite and removed with it
    (else resume would continue the earlier run as this one); resume then says why not."""
    from fedlabels.cli import main
    from fedlabels.cli.run import size_text as _size

    monkeypatch.chdir(tmp_path)
    args = ["run", "--method", "fedct", "--clients", str(CLIENTS), "--model", "dt",
            "--rounds", "3", "--seed", str(SEED), "--no-progress"]
    with_ckpt, without = tmp_path / "a.json", tmp_path / "b.json"
    capsys.readouterr()
    assert main([*args, "--output", str(with_ckpt)]) == 0
    assert checkpoint_path(with_ckpt).exists()
    size = checkpoint_path(with_ckpt).stat().st_size
    said = capsys.readouterr().out  # where the kept checkpoint is, how large, what it is for
    journal = journal_path(checkpoint_path(with_ckpt))
    assert 10e3 <= size + journal.stat().st_size < 1e6  # trees, states, history: tens of kB
    assert f"checkpoint: {checkpoint_path(with_ckpt)} ({_size(size)}; its journal " \
           f"{journal}, {_size(journal.stat().st_size)}), kept so that " \
           f"`fedlabels resume {with_ckpt} --rounds N` can extend the run; delete both " \
           "if not" in said, said
    assert main([*args, "--output", str(without), "--no-checkpoint"]) == 0
    assert not checkpoint_path(without).exists()
    assert not journal_path(checkpoint_path(without)).exists()
    assert "checkpoint:" not in capsys.readouterr().out
    a, b = json.loads(with_ckpt.read_text()), json.loads(without.read_text())
    for key in ("rounds", "final", "communication"):
        assert strip_seconds(a[key]) == strip_seconds(b[key])

    stale = checkpoint_path(without)
    stale.write_bytes(checkpoint_path(with_ckpt).read_bytes())
    without.unlink()
    for name in ("b.rounds.csv", "b.models.npz"):
        (tmp_path / name).unlink(missing_ok=True)
    capsys.readouterr()
    assert main([*args, "--output", str(without), "--no-checkpoint"]) == 2
    assert "b.checkpoint.npz exists; pass --overwrite" in capsys.readouterr().err
    assert main([*args, "--output", str(without), "--no-checkpoint", "--overwrite"]) == 0
    assert not stale.exists()
    capsys.readouterr()
    assert main(["resume", str(without), "--no-progress"]) == 2
    assert "or ran with --no-checkpoint, has none" in capsys.readouterr().err


def test_a_run_still_going_elsewhere_is_not_resumed_beside_it(tmp_path: Path) -> None:
    """Two processes must not write one checkpoint: while a run holds it, a resume (or a
    second run of that name) is a one-line error naming the holder; a lock left by a killed
    process (the file, unlocked) does not block."""
    from fedlabels.runs.run_lock import checkpoint_lock, lock_path

    cfg = RunConfig(method="fedct", clients=CLIENTS, model="dt", rounds=2, seed=SEED)
    ckpt = tmp_path / "run.checkpoint.npz"
    run_config(cfg, progress=False, checkpoint=ckpt)
    with checkpoint_lock(ckpt):  # as the other process would hold it
        with pytest.raises(FedLabelsError, match=rf"belongs to a run still going in another "
                                                 rf"process \(pid {os.getpid()}\)"):
            resume(ckpt, rounds=3, progress=False)
        with pytest.raises(FedLabelsError, match="still going"):
            run_config(cfg, progress=False, checkpoint=ckpt)
    assert not lock_path(ckpt).exists()  # removed by its holder
    lock_path(ckpt).write_text("99999")  # a SIGKILLed holder's file: no lock on it
    assert len(resume(ckpt, rounds=3, progress=False).rounds) == 3
    assert not lock_path(ckpt).exists()


def test_equal_arrays_are_stored_once_and_read_back_as_their_own(tmp_path: Path) -> None:
    """FedAvg's clients end a round on the same weights: the checkpoint stores an array
    equal in dtype, shape and bytes once, every entry reads back its own copy, and arrays
    that differ in any of the three stay apart."""
    w = np.arange(1000, dtype=np.float64)
    clients = {c: {"w": w.copy(), "step": np.array(3), "i": np.arange(1000, dtype=np.int64),
                   "r": w.reshape(10, 100).copy(), "mine": w + c} for c in range(4)}
    path = ckpt_module.write_checkpoint(tmp_path / "x.checkpoint.npz", {"rounds": 1},
                                        {"w": w.copy()}, clients, key=b"k" * 32)
    with np.load(path, allow_pickle=False) as npz:
        stored = [n for n in npz.files if n not in ("meta", "mac", "key_id")]
    assert len(stored) == 7  # w (mine of client 0 too), step, i, r, mine of clients 1-3
    saved = load_checkpoint(path, key=b"k" * 32)
    for c, state in clients.items():
        for k, v in state.items():
            got = saved.clients[c][k]
            assert got.dtype == v.dtype and got.shape == v.shape and np.array_equal(got, v)
    saved.clients[0]["w"][0] = -1.0  # a fresh array per reference
    assert saved.clients[1]["w"][0] == 0.0 and saved.server["w"][0] == 0.0


def test_the_byte_meter_keeps_little_per_round_and_checkpoints_its_sorted_counts() -> None:
    """A long run keeps every round's byte counts: a flat dict of (round, client, direction,
    category) tuples held a new 4-tuple per count, about 2.1 kB a round of 5 clients (the
    largest part of what a run keeps per round, measured at rounds 200 and 2,000); the
    counts are kept per round under keys every round shares. The checkpoint's list and the
    totals are those of the flat counts."""
    import tracemalloc

    from fedlabels.runs.loop import CommMeter

    def fill(meter: CommMeter, rounds: range) -> None:
        for rnd in rounds:
            for cid in range(5):
                for direction in ("down", "up"):
                    meter.add(rnd, cid, direction, "protocol", 1000 + rnd)
                    meter.add(rnd, cid, direction, "evaluation", 300 + cid)

    meter = CommMeter()
    fill(meter, range(0, 100))
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    fill(meter, range(100, 1100))
    per_round = (tracemalloc.get_traced_memory()[0] - before) / 1000
    tracemalloc.stop()
    assert per_round < 800  # before: about 2,760 B (now about 350)
    meter.add(7, 3, "up", "control", 5)
    flat: dict[tuple[int, int, str, str], int] = {}
    for rnd in range(1100):
        for cid in range(5):
            for direction in ("down", "up"):
                flat[(rnd, cid, direction, "protocol")] = 1000 + rnd
                flat[(rnd, cid, direction, "evaluation")] = 300 + cid
    flat[(7, 3, "up", "control")] = 5
    assert meter.bytes == flat
    assert meter.entries() == [[*k, n] for k, n in sorted(flat.items())]
    assert meter.total("up") == sum(n for (_, _, d, g), n in flat.items()
                                    if d == "up" and g == "protocol")
    assert meter.per_client(7, [3, 4, 9], "up", "control") == [5, 0, 0]


def test_clients_predicting_together_in_short_chunks_resume_as_uninterrupted(
        fed: Federation, tmp_path: Path) -> None:
    # batch_clients on: a chunk of predict_batch_size rows in all, 2 of each of 3 clients
    # (U and the test set in many chunks); the resumed run predicts as the uninterrupted one
    model = as_models("mlp(hidden=8,predict_batch_size=7)")

    def run(**kw: Any) -> RunResult:  # DS-FL draws no noise (threads refuse a stream)
        return simulate(METHODS["ds-fl"], fed, model, rounds=ROUNDS, period=PERIOD,
                        seed=SEED, progress=False, batch_clients="on", **kw)

    full = run()
    path = tmp_path / "run.checkpoint.npz"
    run(checkpoint=path, on_round=interrupt_after(1))
    assert_same_run(full, run(resume=path), fed.X_test)


def test_a_background_checkpoint_copies_a_learners_state_once(tmp_path: Path) -> None:
    """A torch learner's ``state_dict`` copies its tensors already: the snapshot keeps those
    arrays (not copied a second time), copies the role's live ones, and the file holds the
    round's end while the learner trains on."""
    from fedlabels.learners.torch_mlp import TorchMLPClassifier
    from fedlabels.method.state import prefixed
    from fedlabels.runs.checkpoint import Keeper
    from fedlabels.runs.loop import CommMeter

    rng = np.random.default_rng(0)
    X = rng.normal(size=(64, 4)).astype(np.float32)
    y = (X[:, 0] > 0).astype(int)
    mlp = TorchMLPClassifier(hidden_layer_sizes=(8,), n_classes=2, batch_size=16,
                             random_state=0).train_steps(X, y, 3)
    given: list[dict[str, Any]] = []

    class Role:
        secret_state: tuple[str, ...] = ()

        def __init__(self, learner: bool) -> None:
            self.live, self.learner = np.zeros(10), learner

        def state_dict(self) -> dict[str, Any]:
            if not self.learner:  # the server
                return {"live": self.live}
            given.append(mlp.state_dict())
            return {"live": self.live, **prefixed("learner", given[-1])}

    client = Role(learner=True)
    path = tmp_path / "run.checkpoint.npz"
    keeper = Keeper(path, {}, {}, 2, Role(learner=False), {0: client}, CommMeter(),  # type: ignore[arg-type]
                    background=True)
    _, _, clients = keeper._snapshot(copied=True)
    made = {f"learner.{k}": v for k, v in given[-1].items() if isinstance(v, np.ndarray)}
    weights = [p.detach().numpy() for p in mlp.model_.parameters()]
    assert any(k.startswith("learner.opt.") for k in made)
    for key, array in made.items():
        if key.startswith(("learner.model.", "learner.opt.")):
            assert clients[0][key] is array, key  # not copied again
            assert not any(np.shares_memory(array, w) for w in weights), key
    assert clients[0]["live"] is not client.live and not np.shares_memory(
        clients[0]["live"], client.live)
    after_round = keeper.hook(None)
    after_round(RoundRecord(round=1, local_steps=1, accuracies=None, server={}, bytes_up=[0],
                            bytes_down=[0], seconds=0.0))
    end = {k: v.copy() for k, v in given[-1].items() if isinstance(v, np.ndarray)}
    mlp.train_steps(X, y, 3)  # the next round changes the learner in place, at once
    client.live += 1.0
    keeper.barrier()
    saved = load_checkpoint(path).clients[0]
    assert not saved["live"].any()
    assert not np.array_equal(mlp.state_dict()["model.0.weight"], end["model.0.weight"])
    for key, array in end.items():
        assert np.array_equal(saved[f"learner.{key}"], array), key


@pytest.mark.parametrize(("differ", "says"), [
    ({"data"}, "the data changed"), ({"federation"}, "the data changed"),
    ({"federation", "data"}, "the data changed"),
    ({"seed", "data"}, "another run: it differs in data, seed;"),
])
def test_a_checkpoint_differing_only_in_its_data_says_so(differ: set[str], says: str) -> None:
    """The data, the federation it builds, or both differ with the settings the same: the
    one-line error says the data changed; any setting beside them: another run."""
    from fedlabels.runs.checkpoint import Checkpoint, refuse_another_run

    saved = {"seed": 0, "federation": {"n": 3}, "data": "abc", "method": "fedct"}
    now = {**saved, **{k: f"other {k}" for k in differ}}
    with pytest.raises(FedLabelsError, match=says):
        refuse_another_run(Checkpoint({"identity": saved}, {}, {}), now)
    refuse_another_run(Checkpoint({"identity": saved}, {}, {}), dict(saved))  # the same run


def test_a_checkpoint_of_an_unknown_format_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "r.checkpoint.npz"
    meta = json.dumps({"format": "fedlabels checkpoint 99"}).encode()
    np.savez(path, meta=np.frombuffer(meta, dtype=np.uint8), key_id=np.array("x"),
             mac=np.array("y"))
    with pytest.raises(FedLabelsError, match=r"is not a .*\(format 'fedlabels checkpoint 99'\)"):
        load_checkpoint(path, key=b"k" * 32)
