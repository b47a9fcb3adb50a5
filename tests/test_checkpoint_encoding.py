"""A checkpoint's text is encoded once per round, not O(T) a round: the byte counts keep
each round's JSON (CommMeter.entries_json) and the file's ``meta`` is byte for byte what the
encoding before wrote (the oracle below: ``json.dumps`` of every entry with the sorted
``entries()`` list, the records spliced at the end), over DP and non-DP runs with unequal
clients, partial participation and a resume."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fedlabels.api import load_federation
from fedlabels.core.json_list import text_of
from fedlabels.core.randomness import reproducible
from fedlabels.data import Federation
from fedlabels.engines.inprocess import simulate
from fedlabels.learners import as_models
from fedlabels.methods import METHODS
from fedlabels.results import RoundRecord
from fedlabels.runs import checkpoint as ckpt_module
from fedlabels.runs.checkpoint import EncodedJSON, load_checkpoint
from fedlabels.runs.loop import CommMeter


def _old_meta_text(meta: dict[str, Any], entries: list[list[Any]]) -> str:
    """The oracle: the checkpoint's ``meta`` as write_checkpoint encoded it before (every
    plain entry by ``json.dumps(sort_keys=True)``, the byte counts as ``entries()``, the
    records' EncodedJSON spliced after them)."""
    plain = {k: v for k, v in meta.items() if not isinstance(v, EncodedJSON)}
    if "meter" in meta:  # else in the checkpoint's journal (checked when read back)
        plain["meter"] = entries
    text = json.dumps(plain, sort_keys=True)
    spliced = "".join(f", {json.dumps(k)}: {text_of(v.text)}" for k, v in sorted(meta.items())
                      if isinstance(v, EncodedJSON) and k != "meter")
    return text[:-1] + spliced + "}" if spliced else text


def test_the_byte_counts_json_equals_the_sorted_entries_as_counts_come() -> None:
    rng, meter = random.Random(0), CommMeter()
    for step in range(300):
        rnd = step // 5 if rng.random() < 0.9 else rng.randint(-3, 70)  # late, out of order
        meter.add(rnd, rng.randint(0, 6), rng.choice(["up", "down"]),
                  rng.choice(["protocol", "evaluation", "control"]), rng.randint(0, 10**9))
        if rng.random() < 0.3:
            assert meter.entries_json() == json.dumps(meter.entries())
    assert meter.entries_json() == json.dumps(meter.entries())
    assert CommMeter().entries_json() == json.dumps([])


@pytest.fixture(scope="module")
def fed() -> Federation:
    return load_federation("breast_cancer", clients=4, seed=3, partition="dirichlet:0.5")


@pytest.mark.parametrize("method,options,participation", [
    ("dp-fedct", {"epsilon_per_round": 1.0}, 0.6),
    ("dp-fedct", {"epsilon": 3.0, "mechanism": "kary"}, None),
    ("fedct", {}, 2),
])
def test_a_checkpoint_is_the_bytes_the_encoding_before_wrote(
        fed: Federation, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, method: str,
        options: dict[str, Any], participation: float | None) -> None:
    entries: list[list[list[Any]]] = []  # the meter's, at each checkpoint's snapshot
    texts: list[str] = []
    encode, entries_view = ckpt_module._meta_json, CommMeter.entries_view

    def kept(self: CommMeter) -> Any:
        entries.append(self.entries())
        return entries_view(self)

    def compared(meta: dict[str, Any]) -> str:
        text = encode(meta)
        assert text == _old_meta_text(meta, entries[-1])
        texts.append(text)
        return text

    monkeypatch.setattr(CommMeter, "entries_view", kept)
    monkeypatch.setattr(ckpt_module, "_meta_json", compared)
    path = tmp_path / "run.checkpoint.npz"

    def run(rounds: int, **kw: Any) -> Any:
        with reproducible(5):
            return simulate(METHODS[method], fed, as_models("dt"), rounds=rounds, seed=2,
                            options=options, participation=participation, progress=False,
                            **kw)

    def stop_after_3(record: RoundRecord) -> None:
        if record.round == 3:
            raise KeyboardInterrupt

    run(6, checkpoint=path, on_round=stop_after_3)
    resumed = run(6 if "epsilon" in options else 8, resume=path)
    assert len(texts) >= (2 if method == "fedct" else 6)
    saved = load_checkpoint(path)
    assert len(saved.records) == len(resumed.rounds)
    assert saved.meta["meter"] == entries[-1]  # the journal's text, read back
    with np.load(path) as npz:  # the text checked above is the file's
        assert npz["meta"].tobytes().decode() == texts[-1]


def test_a_checkpoint_encodes_the_new_round_s_byte_counts_only(
        fed: Federation, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before, every checkpoint (a DP run's: every round) sorted and encoded the byte counts
    of every round: 0.1 s at 8,000 rounds of 5 clients."""
    encoded: list[int] = []
    counts = CommMeter._counts

    def counted(self: CommMeter, rnd: int) -> Any:
        encoded.append(rnd)
        return counts(self, rnd)

    monkeypatch.setattr(CommMeter, "_counts", counted)
    per_round: list[list[int]] = []

    def hook(record: RoundRecord) -> None:  # after the round's checkpoint
        per_round.append(list(encoded))
        encoded.clear()

    simulate(METHODS["dp-fedct"], fed, as_models("dt"), rounds=6, seed=2, progress=False,
             options={"epsilon_per_round": 1.0}, checkpoint=tmp_path / "c.checkpoint.npz",
             on_round=hook)
    # (the meter counts rounds from 0)
    assert [sorted(set(r)) for r in per_round[1:]] == [[r] for r in range(1, 6)]
