"""Partial participation, dropouts and stragglers (runs/participation.py)."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest

import fedlabels as fl
from fedlabels.cli import main
from fedlabels.comm import unpack_labels
from fedlabels.consensus import ABSTAIN
from fedlabels.core.errors import FedLabelsError
from fedlabels.engines.inprocess import InProcessGrid
from fedlabels.learners import as_models
from fedlabels.results import load_result
from fedlabels.runs.config import RunConfig, participation_arg
from fedlabels.runs.loop import CommMeter, run_rounds
from fedlabels.runs.participation import (
    ROUND_TAG,
    SPEED_TAG,
    Participation,
    ParticipationGrid,
    draw_round,
)
from fedlabels.runs.session import build_session


@pytest.fixture(scope="module")
def unequal_fed():
    """breast_cancer over 5 clients of unequal sizes (a Dirichlet split)."""
    fed = fl.load_federation("breast_cancer", clients=5, partition="dirichlet:1,1", seed=3)
    assert len({len(c.y) for c in fed.clients}) > 1
    return fed


class RecordingGrid(InProcessGrid):
    """An InProcessGrid that keeps every protocol reply its clients sent, per round."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.sent: dict[int, dict] = {}

    def exchange(self, messages, rnd):
        replies = super().exchange(messages, rnd)
        self.sent.setdefault(rnd, {}).update(
            {c: r for c, r in replies.items() if r.category != "evaluation"})
        return replies


def build(method, fed, policy, *, model="decision_tree", options=None, seed=0, period=5,
          rounds=9):
    """A server and clients of ``method`` on a ParticipationGrid over a RecordingGrid,
    planned for ``rounds`` (a client refuses a round beyond its plan)."""
    session = build_session(method, fed, as_models(model), rounds=rounds, period=period,
                            seed=seed, options=options)
    inner = RecordingGrid(session.clients, CommMeter())
    sizes = session.client_sizes
    return SimpleNamespace(
        server=session.server, clients=session.clients, inner=inner,
        grid=ParticipationGrid(inner, policy, seed, sizes), sizes=sizes, period=period,
        iterative=session.iterative)


def loop(run, rounds, on_round):
    """The engine's round loop over ``run`` (from :func:`build`), ``on_round`` after each."""
    records, _ = run_rounds(run.server, run.grid, run.inner.meter, rounds=rounds,
                            period=run.period, eval_every=1, iterative=run.iterative,
                            all_cids=run.grid.client_ids, on_round=on_round,
                            draw=run.grid.draw)
    return records


# ------------------------------------------------------------------------- the draw
def test_probability_mode_selects_about_q_of_the_clients_and_is_a_function_of_seed_round():
    sizes = [30, 60, 90, 120, 150, 40, 50, 70]
    policy = Participation(fraction=0.5)
    draws = [draw_round(policy, 7, r, sizes) for r in range(200)]
    total = sum(len(d.selected) for d in draws)
    n = 200 * len(sizes)  # Binomial(n, 0.5): within 5 standard deviations
    assert abs(total - 0.5 * n) <= 5 * math.sqrt(n * 0.25)
    assert len({len(d.selected) for d in draws}) > 2  # not a fixed count
    again = draw_round(policy, 7, 123, sizes)  # cold, out of order: no RNG state
    assert again.selected == draws[123].selected
    other = [draw_round(policy, 8, r, sizes).selected for r in range(20)]
    assert other != [d.selected for d in draws[:20]]


def test_count_mode_selects_exactly_k_uniformly():
    sizes = [10] * 6
    draws = [draw_round(Participation(count=2), 0, r, sizes) for r in range(600)]
    assert all(len(d.selected) == 2 == len(set(d.selected)) for d in draws)
    hits = np.bincount([c for d in draws for c in d.selected], minlength=6)
    expected = 600 * 2 / 6  # each client with probability k/m per round
    assert np.all(np.abs(hits - expected) <= 5 * math.sqrt(expected))


def test_dropout_fraction_is_binomial_and_independent_of_selection():
    sizes = [20] * 10
    draws = [draw_round(Participation(dropout=0.3), 1, r, sizes) for r in range(300)]
    dropped = sum(len(d.dropped) for d in draws)
    assert abs(dropped - 900) <= 5 * math.sqrt(3000 * 0.21)
    # the same dropout stream under another selection rule: common random numbers
    half = [draw_round(Participation(fraction=0.5, dropout=0.3), 1, r, sizes)
            for r in range(300)]
    for full, part in zip(draws, half, strict=True):
        assert set(part.dropped) == set(full.dropped) & set(part.selected)


def test_deadline_drops_exactly_the_clients_the_speed_model_makes_late():
    sizes = [20, 40, 80, 160, 320]
    seed, deadline = 5, 1.2
    policy = Participation(deadline=deadline)
    # the documented model, re-derived: (n_i / mean n) * exp(0.5 z_i) * exp(0.25 z_ir)
    z = np.random.default_rng(np.random.SeedSequence([seed, SPEED_TAG])).standard_normal(5)
    late_counts = np.zeros(5)
    for r in range(100):
        jitter_seq = np.random.SeedSequence([seed, r, ROUND_TAG]).spawn(3)[2]
        zr = np.random.default_rng(jitter_seq).standard_normal(5)
        times = np.array(sizes) / np.mean(sizes) * np.exp(0.5 * z) * np.exp(0.25 * zr)
        d = draw_round(policy, seed, r, sizes)
        assert set(d.late) == set(np.flatnonzero(times > deadline).tolist())
        assert d.replying == sorted(set(range(5)) - set(d.late))
        late_counts += times > deadline
    assert 0 < late_counts.sum() < 500  # the deadline bites, but not always


# ------------------------------------------------------------------------- methods
@pytest.mark.parametrize("quorum", [None, 1.0])
def test_fedct_consensus_is_the_vote_of_the_labels_that_arrived(unequal_fed, quorum):
    policy = Participation(fraction=0.7, dropout=0.2, deadline=1.3)
    run = build("fedct", unequal_fed, policy, options={"quorum": quorum})
    state: dict = {"labels": None, "checked": 0, "late": 0}

    def check(record):
        server = run.server
        if not record.replied:
            assert record.server == {"skipped": 1.0}
            assert state["labels"] is None or np.array_equal(server.labels, state["labels"])
            return
        sent = run.inner.sent[record.round - 1]  # what the clients sent, late ones included
        state["late"] += len(set(sent) - set(record.replied))
        arrived = [unpack_labels(sent[c].arrays["labels"], server.n_public,
                                 unequal_fed.n_classes) for c in record.replied]
        expected = []
        for j in range(server.n_public):  # brute force, example by example
            counts: dict[int, int] = {}
            for v in arrived:
                counts[int(v[j])] = counts.get(int(v[j]), 0) + 1
            top = max(counts.values())
            winner = min(k for k, n in counts.items() if n == top)
            ok = quorum is None or top / len(arrived) >= quorum - 1e-12
            expected.append(winner if ok else ABSTAIN)
        assert np.array_equal(server.labels, np.array(expected))
        state["labels"] = server.labels.copy()
        state["checked"] += 1

    records = loop(run, 9, check)
    assert state["checked"] >= 5 and state["late"] > 0
    assert all(len(r.accuracies) == 5 for r in records)  # evaluation stays over all clients


def test_a_client_that_missed_rounds_catches_up_from_the_latest_consensus(breast_cancer_fed):
    policy = Participation(count=2)
    run = build("fedct", breast_cancer_fed, policy)
    seen: dict = {"before": None, "caught_up": 0}

    def check(record):
        latest = seen["before"]  # the consensus this round's train message carried
        rnd = record.round - 1
        if latest is not None:
            previous = draw_round(policy, 0, rnd - 1, run.sizes).selected
            for c in record.participants:
                assert np.array_equal(run.clients[c].pseudo_y, latest)
                seen["caught_up"] += c not in previous
        seen["before"] = run.server.labels.copy()

    loop(run, 9, check)
    assert seen["caught_up"] > 0


def test_fedavg_averages_the_replies_that_arrived_weighted_by_size(unequal_fed):
    policy = Participation(fraction=0.8, dropout=0.2, deadline=1.2)
    run = build("fedavg", unequal_fed, policy, model="mlp(hidden=8)", period=2)
    sizes = np.array(run.sizes, dtype=np.float64)
    checked = {"rounds": 0, "excluded": 0}

    def check(record):
        if not record.replied:
            return
        sent = run.inner.sent[record.round - 1]  # every client's weights, late ones too
        w = np.stack([sent[c].arrays["weights"].astype(np.float64) for c in record.replied])
        n = sizes[record.replied]
        oracle = (n[:, None] * w).sum(axis=0) / n.sum()
        np.testing.assert_allclose(run.server.weights, oracle, rtol=1e-5, atol=1e-6)
        checked["rounds"] += 1
        checked["excluded"] += len(set(sent) - set(record.replied))

    loop(run, 7, check)
    assert checked["rounds"] >= 3 and checked["excluded"] > 0  # late replies were left out


def test_participation_half_records_about_half_and_still_converges(breast_cancer_fed):
    rounds = 12
    full = fl.run("fedct", breast_cancer_fed, rounds=rounds, seed=0, progress=False)
    half = fl.run("fedct", breast_cancer_fed, rounds=rounds, seed=0, progress=False,
                  participation=0.5)
    selected = sum(len(r.participants) for r in half.rounds)
    n = rounds * 5
    assert abs(selected - n / 2) <= 4 * math.sqrt(n / 4)
    assert all(r.replied == r.participants for r in half.rounds)
    assert all(len(r.accuracies) == 5 for r in half.rounds)
    # converged: the consensus settles and accuracy is that of full participation
    changed = [r.server["consensus_changed"] for r in half.rounds[-4:]
               if "consensus_changed" in r.server]
    assert changed and max(changed) < 0.05
    assert half.final["mean_accuracy"] >= full.final["mean_accuracy"] - 0.03
    assert half.extra["participation"]["probability"] == 0.5
    assert "no privacy amplification" in half.extra["participation"]["note"]


def test_same_seed_same_participants_and_full_participation_changes_nothing(
        breast_cancer_fed):
    a = fl.run("fedct", breast_cancer_fed, rounds=4, seed=2, progress=False, participation=3,
               dropout=0.2)
    b = fl.run("fedct", breast_cancer_fed, rounds=4, seed=2, progress=False, participation=3,
               dropout=0.2)
    assert [r.participants for r in a.rounds] == [r.participants for r in b.rounds]
    assert all(len(r.participants) == 3 for r in a.rounds)
    sizes = [len(c.y) for c in breast_cancer_fed.clients]
    for r in a.rounds:  # the record is the pure draw of (seed, round)
        d = draw_round(Participation(count=3, dropout=0.2), 2, r.round - 1, sizes)
        assert (r.participants, r.replied) == (list(d.selected), d.replying)
        for c in d.dropped:  # a dropped client never got the round's message
            assert r.bytes_up[c] == r.bytes_down[c] == 0
    plain = fl.run("fedct", breast_cancer_fed, rounds=3, seed=0, progress=False)
    ones = fl.run("fedct", breast_cancer_fed, rounds=3, seed=0, progress=False,
                  participation=1.0)
    assert [r.accuracies for r in ones.rounds] == [r.accuracies for r in plain.rounds]
    assert plain.rounds[0].participants is None


def test_a_round_without_replies_is_skipped_not_a_crash(breast_cancer_fed):
    result = fl.run("fedct", breast_cancer_fed, rounds=6, seed=0, progress=False,
                    participation=1, dropout=0.8)
    skipped = [r for r in result.rounds if r.server.get("skipped")]
    assert skipped and all(r.replied == [] and not any(r.bytes_up) for r in skipped)
    assert all(len(r.accuracies) == 5 for r in result.rounds)


@pytest.mark.parametrize(("method", "kwargs", "message"), [
    ("centralized", {"participation": 0.5}, "needs every client in every round"),
    ("xclp", {"dropout": 0.1}, "one shot"),
    ("pate", {"participation": 2}, "one shot"),
    ("dp-fedavg", {"participation": 0.5, "options": {"noise_multiplier": 1.0}},
     "option sample_rate"),
    ("dp-fedct", {"deadline": 2.0, "options": {"epsilon": 1.0, "sensitivity": "empirical"}},
     "empirical sensitivity"),
])
def test_methods_that_cannot_lose_clients_refuse_before_training(breast_cancer_fed, method,
                                                                  kwargs, message):
    with pytest.raises(FedLabelsError, match=method) as err:
        fl.run(method, breast_cancer_fed, rounds=2, progress=False, **kwargs)
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("kwargs", [
    {"participation": 0.0}, {"participation": 1.5}, {"participation": 0},
    {"participation": True}, {"participation": 6}, {"dropout": 1.0}, {"dropout": -0.1},
    {"deadline": 0.0}, {"deadline": float("nan")},
])
def test_invalid_values_are_one_line_errors(kwargs):
    with pytest.raises(FedLabelsError) as err:
        RunConfig(clients=5, **kwargs)
    assert "\n" not in str(err.value)


def test_cli_flag_types_the_value_and_results_round_trip(tmp_path, capsys):
    assert participation_arg("3") == 3 and isinstance(participation_arg("3"), int)
    assert participation_arg("1.0") == 1.0 and isinstance(participation_arg("1.0"), float)
    out = tmp_path / "r.json"
    assert main(["run", "--dataset", "breast_cancer", "--rounds", "2", "--no-progress",
                 "--participation", "3", "--dropout", "0.1", "--deadline", "3",
                 "--output", str(out)]) == 0
    loaded = load_result(out)
    assert [len(r.participants) for r in loaded.rounds] == [3, 3]
    assert loaded.config["participation"] == 3
    data = json.loads(out.read_text())
    for r in data["rounds"]:  # a result written before these fields existed still loads
        r.pop("participants"), r.pop("replied")
    old = tmp_path / "old.json"
    old.write_text(json.dumps(data))
    assert load_result(old).rounds[0].participants is None
    cfg = tmp_path / "p.toml"
    cfg.write_text("participation = 0.5\n")
    assert main(["audit", "--config", str(cfg)]) == 2
    assert "only `fedlabels run`" in capsys.readouterr().err


# ------------------------------------------------------------- every method, missing clients
#: options a method needs to run at all (its privacy parameters)
NEEDED_OPTIONS = {"dp-fedavg": {"epsilon": 8}, "dp-fedct": {"epsilon": 8, "mechanism": "dpsgd"},
                  "dp-pate": {"epsilon": 8}, "fredy": {"epsilon_per_query": 2.0}}
REFUSALS = ("cannot run with", "samples its clients itself")


def _methods():
    from fedlabels.methods.registry import available_methods

    return sorted(available_methods())


@pytest.mark.parametrize("kwargs", [{"participation": 2}, {"dropout": 0.5}])
@pytest.mark.parametrize("method", _methods())
def test_every_method_runs_with_missing_clients_or_refuses_before_training(method, kwargs):
    """A method either refuses --participation/--dropout up front with its one-line
    reason, or runs with clients missing from rounds (it must not fail when a client that
    missed an earlier round takes part: fedmd did, 'consensus before any subset')."""
    from conftest import digits_with_sizes
    from fedlabels.methods import get_method

    fed = digits_with_sizes((40, 90, 150, 60, 70), n_unlabeled=300, n_test=300)
    model = "mlp(hidden=16)" if get_method(method).capabilities.trains_models else None
    try:
        result = fl.run(method, fed, model=model, rounds=4, period=3, seed=1,
                        progress=False, options=NEEDED_OPTIONS.get(method), **kwargs)
    except FedLabelsError as exc:
        assert any(r in str(exc) for r in REFUSALS), str(exc)
        return
    assert len(result.rounds) == 4
    # evaluated (DP methods' noise comes from the OS: their accuracy is not fixed here)
    assert 0.0 <= result.final["mean_accuracy"] <= 1.0


def test_fedmd_a_client_that_missed_round_one_transfers_when_it_first_takes_part():
    from conftest import digits_with_sizes

    fed = digits_with_sizes((40, 90, 150, 60, 70), n_unlabeled=300, n_test=300)
    policy = Participation(count=2)
    run = build("fedmd", fed, policy, model="mlp(hidden=16)", period=3)
    first = draw_round(policy, 0, 0, run.sizes).selected
    joined: dict[int, int] = {}
    labels_to: list[tuple[int, int]] = []  # (round, client) of every message with D0's labels
    exchange = run.inner.exchange

    def recording(messages, rnd):
        labels_to.extend((rnd, c) for c, m in messages.items() if "public_labels" in m.arrays)
        return exchange(messages, rnd)

    run.inner.exchange = recording

    def check(record):
        for c in record.participants:
            joined.setdefault(c, record.round)
            assert run.clients[c].transferred
        assert sorted(run.server.transferred.tolist()) == sorted(joined)

    loop(run, 8, check)
    later = [c for c, rnd in joined.items() if rnd > 1]
    assert later and not set(later) & set(first)  # some joined after round 1, and worked
    # D0's labels went to each client once: in the first round it took part in
    assert sorted(labels_to) == sorted((rnd - 1, c) for c, rnd in joined.items())


def test_the_rounds_table_counts_who_took_part_and_replied(unequal_fed, tmp_path):
    """The rounds table (to_frame, X.rounds.csv) of a run with partial participation had no
    sign of it: bytes_up_mean is over all clients, and a round no client was drawn for
    read as a round of small uploads."""
    res = fl.run("fedct", unequal_fed, model="dt", rounds=4, participation=3, dropout=0.4,
                 seed=1, progress=False)
    frame = res.to_frame()
    assert frame["participants"].tolist() == [len(r.participants) for r in res.rounds] \
        == [3] * 4  # K = 3 per round, as drawn
    assert frame["replied"].tolist() == [len(r.replied) for r in res.rounds]
    assert (frame["replied"] <= frame["participants"]).all()
    assert frame.columns[-3:].tolist() == ["bytes_up_mean", "bytes_down_mean", "seconds"]
    saved = res.save(tmp_path / "run.json")
    import pandas as pd

    table = pd.read_csv(saved.with_name("run.rounds.csv"))
    assert table["participants"].tolist() == frame["participants"].tolist()
    everyone = fl.run("fedct", unequal_fed, model="dt", rounds=1, progress=False)
    assert "participants" not in everyone.to_frame()  # every client, every round
