"""A checkpoint's journal is handed only what is new: the records, byte counts and a
server's events come as :class:`~fedlabels.core.json_list.JSONList` (their elements' texts,
not joined) and an append reads the elements added since the version it appended last, so
a checkpoint's cost no longer grows with the rounds (7 ms at 20,000 rounds joined and
compared 27 MB of text).

The oracle is the path before: the same sequence of lists given to a second journal as
their whole texts, which it compares with the texts it holds. Both journals must be byte
for byte the same file, whatever happens to the lists: elements appended, nothing new, an
old round's count changed, the last element's text growing, the list cut, a journal
started afresh, and a journal read back from disk (texts) appended to with views.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from fedlabels.api import load_federation
from fedlabels.core import json_list as json_list_module
from fedlabels.core.json_list import ElementTexts, JSONList, json_list_view
from fedlabels.core.randomness import reproducible
from fedlabels.engines.inprocess import simulate
from fedlabels.learners import as_models
from fedlabels.methods import METHODS
from fedlabels.runs import checkpoint as ckpt_module
from fedlabels.runs.checkpoint import load_checkpoint
from fedlabels.runs.journal import Journal, append, read_journal
from fedlabels.runs.loop import CommMeter

KEY = b"k" * 32


def test_a_view_handed_out_never_changes() -> None:
    texts = ElementTexts()
    texts.extend(["1", "22"])
    first = texts.view()
    texts.extend(["333"])
    second = texts.view()
    texts.put(0, "9", replace=True)  # a copy: the views keep their elements
    texts.put(1, "8", replace=False)
    texts.cut(2)
    assert (first.text, second.text, texts.view().text) == ("[1, 22]", "[1, 22, 333]",
                                                            "[9, 8]")
    assert [len(v) for v in (first, second, texts.view())] == [7, 12, 6]
    assert second.extension(first) == ", 333]" and first.extension(first) == ""
    assert first.extension(second) is None and texts.view().extension(first) is None
    assert len(ElementTexts().view()) == 2 and ElementTexts().view().text == "[]"


def test_a_view_s_text_is_its_elements_while_the_list_grows_meanwhile() -> None:
    """A checkpoint written in a background thread joins a view while the run's thread
    appends the next rounds' texts: the join takes the view's elements only, even where
    an element is appended right after the view looked at the list (simulated here)."""
    class Appended(list):  # type: ignore[type-arg]
        def __len__(self) -> int:
            n = super().__len__()
            self.append('"late"')  # the other thread, just after the look
            return n

    assert JSONList(Appended(["1"]), 1, 3).text == "[1]"


def _pair(tmp_path: Path, name: str) -> tuple[Journal, Journal]:
    return (Journal(tmp_path / f"{name}-views.journal", KEY),
            Journal(tmp_path / f"{name}-texts.journal", KEY))


def _both(views: Journal, texts: Journal, entries: dict[str, Any]) -> None:
    a = append(views, entries)
    b = append(texts, {k: v.text if isinstance(v, JSONList) else v
                       for k, v in entries.items()})
    assert a == b


def _bytes(path: Path) -> bytes | None:
    return path.read_bytes() if path.exists() else None  # (removed, nothing new since)


@pytest.mark.parametrize("seed", range(4))
def test_views_give_the_journal_the_texts_would_give(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    meter, records, done = CommMeter(), [], []  # type: ignore[var-annotated]
    events: list[Any] = []
    events_done: list[Any] = []
    views, texts = _pair(tmp_path, "a")
    for step in range(120):
        action = rng.random()
        rnd = step // 3
        if action < 0.6:  # a new round's counts, a record and an event
            meter.add(rnd, rng.randint(0, 3), rng.choice(["up", "down"]), "protocol",
                      rng.randint(1, 10**6))
            records.append({"round": rnd, "x": "é" * rng.randint(0, 3)})
            events.append((rnd, rng.random()))
        elif action < 0.7:  # a late count in an older round: the meter's text changes inside
            meter.add(rng.randint(0, max(rnd - 1, 0)), 9, "up", "late", 1)
        elif action < 0.78:  # the last round counts a new client: its text grows in place
            meter.add(max(rnd - 1, 0), 99, "up", "protocol", 5)
        elif action < 0.84 and records:  # the list cut (and maybe grown again)
            del records[rng.randint(0, len(records) - 1):]
            del events[rng.randint(0, len(events)):]
        elif action < 0.88:  # the journal file removed: started afresh, every entry whole
            for journal in (views, texts):
                journal.path.unlink(missing_ok=True)
        # (else: nothing new, the same texts again)
        entries = {"meta/meter": meter.entries_view(),
                   "meta/records": json_list_view(records, json.dumps, done),
                   "server/events#json": json_list_view(events, json.dumps, events_done),
                   "client.0/ledger_events": json.dumps([len(events)] * 100)}
        _both(views, texts, entries)
        assert _bytes(views.path) == _bytes(texts.path)
        if step % 40 == 39 and views.path.exists():
            # resumed: the journal read back holds texts, then views come
            saved = {"length": views.length, "tag": views.head.hex()}
            views = read_journal(views.path, KEY, saved)
            texts = read_journal(texts.path, KEY, saved)
            assert views.texts == {k: v.text if isinstance(v, JSONList) else v
                                   for k, v in entries.items()}
            done.clear()
    assert views.length > 0


def test_an_append_joins_no_history_of_what_it_has(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """After its first checkpoint a DP run's checkpoints build none of the records', byte
    counts' or server events' whole texts (the journal took their new elements), and the
    journal the run leaves reads back as the run's records."""
    joined: list[int] = []
    text = JSONList.text

    def counted(self: JSONList) -> str:
        joined.append(len(self))
        return text.fget(self)  # type: ignore[attr-defined,no-any-return]

    monkeypatch.setattr(JSONList, "text", property(counted))
    per_write: list[int] = []
    save = ckpt_module.Keeper.save  # a DP run's: every round, in the run's thread

    def spied(self: ckpt_module.Keeper) -> None:
        joined.clear()
        save(self)  # the snapshot (the encoders) and the write (the journal)
        per_write.append(sum(joined))

    monkeypatch.setattr(ckpt_module.Keeper, "save", spied)
    fed = load_federation("breast_cancer", clients=3, seed=1)
    path = tmp_path / "run.checkpoint.npz"
    with reproducible(3):
        result = simulate(METHODS["dp-fedct"], fed, as_models("dt"), rounds=6, seed=1,
                          progress=False, options={"epsilon_per_round": 1.0},
                          checkpoint=path)
    # the first: every text whole (the server's events once they pass MIN_CHARS, round 2)
    assert len(per_write) == 6 and per_write[0] > 1000
    assert per_write[2:] == [0] * 4
    saved = load_checkpoint(path)
    assert saved.records == result.rounds
    assert len(json.loads(str(saved.server["events#json"]))) == 6


def test_json_list_is_its_view_s_text() -> None:
    done: list[Any] = []
    items = [{"a": i} for i in range(5)]
    assert json_list_module.json_list(items, json.dumps, done) == json.dumps(items)
    items[2] = {"b": 1}
    assert json_list_view(items, json.dumps, done).text == json.dumps(items)
