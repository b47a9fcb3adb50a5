"""One privacy ledger per party: events recorded once, the budget a view, refused before the
release; the site's persistent ledger (chained HMAC, fsynced before the release, per
dataset, a lifetime budget); and the ε a result reports for a client that spent more than
the server received (``--deadline``)."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import fedlabels as fl
from conftest import digits_with_sizes, keep_client_roles
from fedlabels.core.errors import FedLabelsError
from fedlabels.learners import dpsgd as dpsgd_module
from fedlabels.privacy.accounting import account_labels, rr_epsilon_exact
from fedlabels.privacy.dpsgd_accounting import DPSGDRoundEvent, dpsgd_epsilon
from fedlabels.privacy.events import KaryRREvent, LaplaceNoisyMaxEvent, XorEvent
from fedlabels.privacy.ledger import Ledger, account_events, events_from_json, events_to_json
from fedlabels.privacy.mechanisms import flip_probability
from fedlabels.privacy.site_ledger import SiteLedger, read_ledgers

DELTA = 1e-5


def _xor(eps: float = 0.5, bits: int = 8, n_bits: int = 40) -> XorEvent:
    return XorEvent(eps, bits, flip_probability(eps, bits), n_bits)


def test_the_budget_is_a_view_of_the_events_and_refuses_before_recording() -> None:
    ev = _xor()
    one = rr_epsilon_exact(ev.sensitivity_bits, ev.flip_probability, DELTA)
    three = rr_epsilon_exact(3 * ev.sensitivity_bits, ev.flip_probability, DELTA)
    ledger = Ledger(DELTA, target=(three + rr_epsilon_exact(
        4 * ev.sensitivity_bits, ev.flip_probability, DELTA)) / 2)
    assert ledger.record(ev).epsilon == pytest.approx(min(one, 0.5))
    ledger.record(ev)
    assert ledger.record(ev).epsilon == pytest.approx(
        account_labels([ev] * 3, DELTA).epsilon)
    with pytest.raises(FedLabelsError, match=r"budget exceeded.*Refusing"):
        ledger.record(ev)
    assert len(ledger.events) == 3  # the refused release was never recorded


def test_the_budget_refuses_an_overspend_of_a_hundredth_of_a_percent() -> None:
    """The check allows only float noise (a relative 1e-6) above the target: releases whose
    ε exceeds it by 1e-4 of it are refused, ones 1e-7 of it above it admitted."""
    ev = _xor()
    two = account_labels([ev] * 2, DELTA).epsilon
    over = Ledger(DELTA, target=two * (1 - 1e-4))
    over.record(ev)
    with pytest.raises(FedLabelsError, match="budget exceeded"):
        over.record(ev)
    within = Ledger(DELTA, target=two * (1 - 1e-7))
    within.record(ev)
    assert within.record(ev).epsilon == pytest.approx(two, rel=1e-12)


def test_a_plan_over_the_budget_by_a_hundredth_of_a_percent_is_refused_at_the_start() -> None:
    """check_plan allows the same float noise as a release's check: a plan whose ε exceeds
    the target by 1e-4 of it is refused before anything is released, one 1e-7 above it
    starts."""
    plan = [_xor()] * 3
    three = account_labels(plan, DELTA).epsilon
    with pytest.raises(FedLabelsError, match="the plan of 3 round"):
        Ledger(DELTA, target=three * (1 - 1e-4)).check_plan(plan, "3 round(s)")
    Ledger(DELTA, target=three * (1 - 1e-7)).check_plan(plan, "3 round(s)")


def test_kinds_compose_and_events_round_trip_as_json() -> None:
    xor, kary = _xor(), KaryRREvent(0.6, 2, 0.3, 3, 10)
    sgd = DPSGDRoundEvent(1.1, 0.2, 1.0, ((0, 5),))
    events = [xor, kary, sgd, DPSGDRoundEvent(1.1, 0.2, 1.0, ((0, 7),))]
    spent = account_events(events, DELTA)
    # two kinds that spend a δ each: each at δ / 2, so the ledger's δ holds in all
    labels = account_labels([xor, kary], DELTA / 2).epsilon
    assert spent.epsilon == pytest.approx(labels + dpsgd_epsilon(1.1, 0.2, 12,
                                                                 DELTA / 2).epsilon)
    assert spent.delta == pytest.approx(DELTA)
    assert events_from_json(events_to_json(events)) == events
    assert account_events([], DELTA).epsilon == 0.0


@pytest.mark.parametrize("events", [
    [DPSGDRoundEvent(1.0, 0.01, 1.0, ((0, 100),)), DPSGDRoundEvent(1.0, 0.02, 1.0, ((0, 100),))],
    [DPSGDRoundEvent(1.0, 0.01, 1.0, ((0, 100),)), DPSGDRoundEvent(2.0, 0.01, 1.0, ((0, 50),)),
     LaplaceNoisyMaxEvent(2.0, 2.0, 3)],
])
def test_kinds_that_each_spend_a_delta_stay_within_the_ledgers_delta(events) -> None:
    """Basic composition adds the δ's: k parts at the ledger's δ each would be (Σ ε, k·δ), a
    δ the ledger's budget never allowed (a site's ledger over runs of two DP-SGD settings
    reported δ = 2e-5 at δ = 1e-5). Each part is accounted at δ / k; oracle: the parts'
    own accountants at δ / k, summed."""
    ledger = Ledger(delta=DELTA)
    ledger.events.extend(events)
    spent = ledger.spent()
    sgd = [e for e in events if isinstance(e, DPSGDRoundEvent)]
    rest = [e for e in events if not isinstance(e, DPSGDRoundEvent)]
    k = len(sgd) + (1 if rest else 0)
    expected = sum(dpsgd_epsilon(e.noise_multiplier, e.sample_rate, e.steps[0][1],
                                 DELTA / k).epsilon for e in sgd)
    expected += account_events(rest, DELTA / k).epsilon if rest else 0.0
    assert spent.delta <= DELTA * (1 + 1e-12)
    assert spent.epsilon == pytest.approx(expected, rel=1e-9)
    budget = Ledger(delta=DELTA, target=expected * 0.999)  # the split δ's ε decides
    with pytest.raises(FedLabelsError, match="privacy budget exceeded"):
        budget.record(*events)


def _site(tmp_path: Path, key: bytes = b"k" * 32, epsilon: float | None = None,
          X: np.ndarray | None = None) -> SiteLedger:
    X = np.arange(12, dtype=np.float32).reshape(4, 3) if X is None else X
    return SiteLedger.open(tmp_path / "ledger", key, X, np.array([0, 1, 0, 1]),
                           epsilon=epsilon, delta=DELTA)


def test_the_plan_budget_is_recorded_once_and_never_recomputed(tmp_path: Path) -> None:
    """The first run's one-run budget is kept: a later run's (larger) one is not computed
    and not taken (the run-plan check in tests/test_flower_replay.py refuses such a run
    too, so this tests the ledger's own rule)."""
    site = _site(tmp_path)
    assert site.fix_plan_budget(lambda: None) is None  # no plan: nothing recorded
    assert site.fix_plan_budget(lambda: 1.0) == 1.0
    asked: list[int] = []

    def larger() -> float:
        asked.append(1)
        return 4.0

    assert _site(tmp_path).fix_plan_budget(larger) == 1.0 and asked == []
    assert read_ledgers(tmp_path / "ledger", b"k" * 32, DELTA)[0]["plan_budget"] == 1.0


def test_the_operators_budget_is_recorded_and_deploy_ledger_shows_what_is_left(
        tmp_path: Path) -> None:
    """A site's ledger-epsilon is recorded in its ledger (chained as every entry) before the
    first release under it, again only when the operator changes or removes it, and
    read_ledgers shows it and what is left, the spend accounted independently here."""
    from dataclasses import replace

    ev, key = _xor(), b"k" * 32

    def row() -> dict:
        (only,) = read_ledgers(tmp_path / "ledger", key, DELTA)
        return only

    site = _site(tmp_path, epsilon=2.0)
    site.charge([ev], run="a", seq=1)
    site.charge([ev], run="a", seq=2)
    spent = account_events([ev, ev], DELTA).epsilon
    shown = row()
    assert (shown["budget"], shown["budget_from"], shown["budget_delta"]) == \
        (2.0, "ledger-epsilon", DELTA)
    assert shown["left"] == pytest.approx(2.0 - spent, rel=1e-12)
    notes = lambda: [line for line in site.path.read_text().splitlines()  # noqa: E731
                     if '"ledger_epsilon"' in line]
    assert len(notes()) == 1  # the same budget is not recorded again
    _site(tmp_path, epsilon=3.0).note_noiseless("s*", sequence="b", seq=1)
    assert len(notes()) == 2 and row()["budget"] == 3.0
    _site(tmp_path, epsilon=None).charge([ev], run="c", seq=1)  # ledger-epsilon removed
    assert len(notes()) == 3
    shown = row()
    assert (shown["budget"], shown["budget_from"], shown["left"]) == (None, None, None)
    plan = replace(_site(tmp_path), epsilon=10.0, plan_budget=True)  # one run of a plan
    plan.fix_plan_budget(lambda: 10.0)
    plan.charge([ev], run="d", seq=1)
    shown = row()
    assert (shown["budget"], shown["budget_from"]) == (10.0, "privacy-plan")
    assert shown["left"] == pytest.approx(10.0 - account_events([ev] * 4, DELTA).epsilon)
    assert len(notes()) == 3  # a plan's budget is the plan_budget entry, not a new note
    lines = site.path.read_text().splitlines()  # a larger budget, forged: caught
    i = next(i for i, line in enumerate(lines) if '"ledger_epsilon"' in line)
    forged = json.loads(lines[i])
    forged["entry"]["ledger_epsilon"] = 20.0
    site.path.write_text("\n".join([*lines[:i], json.dumps(forged), *lines[i + 1:]]) + "\n")
    assert f"integrity check at entry {i}" in row()["error"]


def test_deploy_ledger_accounts_each_ledger_once_and_shows_a_full_rescans_figures(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """read_ledgers decoded and accounted a ledger's whole history twice (its summary, and
    _budget again for what is left, at the same δ); it accounts it once per δ, and shows
    what a full rescan of the ledger accounts independently."""
    from fedlabels.privacy import ledger as ledger_module

    key = b"k" * 32
    site = _site(tmp_path, epsilon=9.0)
    events = [_xor(0.5), _xor(0.3, bits=4), _xor(0.7)]
    for seq, ev in enumerate(events, start=1):
        site.charge([ev], run="a", seq=seq)
    counted: list[float] = []
    spent = ledger_module.Ledger.spent

    def counting(self: Any) -> Any:
        counted.append(self.delta)
        return spent(self)

    monkeypatch.setattr(ledger_module.Ledger, "spent", counting)
    (row,) = read_ledgers(tmp_path / "ledger", key, DELTA)
    assert counted == [DELTA]
    rescan = account_events(events, DELTA)
    assert row["epsilon"] == pytest.approx(rescan.epsilon, rel=1e-12)
    assert row["left"] == pytest.approx(9.0 - rescan.epsilon, rel=1e-12)
    assert row["releases"] == 3 and row["budget_delta"] == DELTA


def test_site_ledger_persists_per_dataset_and_holds_a_lifetime_budget(tmp_path: Path) -> None:
    ev = _xor()
    budget = account_labels([ev] * 2, DELTA).epsilon
    site = _site(tmp_path, epsilon=budget)
    site.charge([ev], run="a", seq=1)
    assert stat.S_IMODE(site.path.stat().st_mode) == 0o600
    assert stat.S_IMODE(site.path.parent.stat().st_mode) == 0o700
    again = _site(tmp_path, epsilon=budget)  # another run, the same data: the same ledger
    assert again.path == site.path and again.events() == [ev]
    again.charge([ev], run="b", seq=1)
    with pytest.raises(FedLabelsError, match="budget exceeded"):
        _site(tmp_path, epsilon=budget).charge([ev], run="c", seq=1)
    assert len(_site(tmp_path).events()) == 2
    other = _site(tmp_path, X=np.ones((4, 3), dtype=np.float32))  # other data: its own
    assert other.path != site.path and other.events() == []
    assert _site(tmp_path).summary()["releases"] == 2


@pytest.mark.parametrize("forge", ["edit", "drop_middle", "reorder", "other_key", "mode"])
def test_site_ledger_refuses_what_it_did_not_write(tmp_path: Path, forge: str) -> None:
    site = _site(tmp_path)
    for seq in (1, 2, 3):
        site.charge([_xor(0.5 * seq)], seq=seq)
    lines = site.path.read_text().splitlines()
    if forge == "edit":
        row = json.loads(lines[2])
        row["entry"]["event"]["flip_probability"] = 0.49
        lines[2] = json.dumps(row)
    elif forge == "drop_middle":
        del lines[2]
    elif forge == "reorder":
        lines[2], lines[3] = lines[3], lines[2]
    if forge == "mode":
        site.path.chmod(0o644)
    else:
        site.path.write_text("\n".join(lines) + "\n")
    key = b"x" * 32 if forge == "other_key" else b"k" * 32
    with pytest.raises(FedLabelsError, match=r"integrity check|chmod 600"):
        SiteLedger(site.path, key, site.dataset, None, DELTA).events()


def test_a_forged_head_does_not_give_back_spent_budget(tmp_path: Path) -> None:
    """The sealed head is a cache under the key: one rewritten without it (the runs spent
    emptied, the MAC kept) is ignored and the ledger read whole, so the budget still holds."""
    ev = _xor()
    budget = account_labels([ev] * 2, DELTA).epsilon
    site = _site(tmp_path, epsilon=budget)
    site.charge([ev], run="a", seq=1)
    site.charge([ev], run="b", seq=1)
    head_path = site.path.with_name("ledger.head")
    saved = json.loads(head_path.read_text())
    saved["body"]["runs"] = []
    head_path.write_text(json.dumps(saved))
    with pytest.raises(FedLabelsError, match="budget exceeded"):
        _site(tmp_path, epsilon=budget).charge([ev], run="c", seq=1)


def test_a_charge_is_on_disk_before_the_release(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The release that follows a charge crashes: the charge is already in the file."""
    fed = digits_with_sizes((40, 90, 60), n_unlabeled=30, n_test=60)
    site = _site(tmp_path)
    crashed = []

    def crash(*args: Any, **kwargs: Any) -> None:
        crashed.append(len(site.events()))
        raise KeyboardInterrupt

    import fedlabels.privacy.mechanisms as mechanisms

    monkeypatch.setattr(mechanisms, "xor_release", crash)
    from fedlabels.methods import METHODS

    method = METHODS["dp-fedct"]
    orig = method.make_client

    def with_site_ledger(cid: int, *args: Any, **kwargs: Any) -> Any:
        role = orig(cid, *args, **kwargs)
        if cid == 0:
            role.site_ledger = site
        return role

    monkeypatch.setattr(method, "make_client", with_site_ledger)
    result = fl.run("dp-fedct", fed, model="dt", rounds=2, seed=0,
                    options={"epsilon": 1.0, "mechanism": "xor"})
    assert crashed == [1]  # charged, then the release crashed
    assert result.extra.get("interrupted") and len(site.events()) == 1


def test_a_charge_the_disk_cannot_hold_is_refused_and_leaves_the_ledger_whole(
        tmp_path: Path) -> None:
    """A full disk (here a file-size limit) lets only part of a charge reach the file: the
    short write was ignored, the charge returned as recorded (so the release went ahead) and
    the torn entry then failed the integrity check on every later release. Now the charge
    raises and the ledger is as before it: the site releases nothing it has not recorded."""
    import resource

    site = _site(tmp_path)
    site.charge([_xor()], seq=1)
    before = site.path.read_bytes()
    limits = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (len(before) + 40, limits[1]))
    try:
        with pytest.raises(FedLabelsError, match=r"could not append .*left as it was before"):
            site.charge([_xor()], seq=2)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)
    assert site.path.read_bytes() == before
    assert _site(tmp_path).events() == [_xor()]
    site.charge([_xor()], seq=2)  # the disk has room again
    assert len(_site(tmp_path).events()) == 2


def test_late_clients_dp_sgd_steps_are_accounted_when_taken(
        monkeypatch: pytest.MonkeyPatch) -> None:
    fed = digits_with_sizes((40, 90, 60), n_unlabeled=60, n_test=150)
    taken: dict[int, int] = {}
    original = dpsgd_module.dpsgd_steps

    def spy(mlp: Any, *args: Any, **kwargs: Any) -> int:  # the oracle: steps really taken
        k = original(mlp, *args, **kwargs)
        taken[id(mlp)] = taken.get(id(mlp), 0) + k
        return k

    monkeypatch.setattr(dpsgd_module, "dpsgd_steps", spy)
    result = fl.run("dp-fedct", fed, model="mlp(hidden=8)", rounds=4, period=3, seed=2,
                    deadline=1.0, options={"mechanism": "dpsgd", "epsilon": 4.0,
                                           "example_rate": 0.1})
    p = result.extra["privacy"]
    assert p["clients_with_unreceived_steps"]  # the deadline made someone late
    assert sorted(p["steps_per_client"].values()) == sorted(taken.values())
    assert sum(taken.values()) == 4 * 3 * 3  # every client trained every round
    for cid, k in p["steps_per_client"].items():
        want = dpsgd_epsilon(p["noise_multiplier"], 0.1, k, 1e-5).epsilon
        assert p["epsilon_per_client"][cid] == pytest.approx(want, rel=1e-9)
    assert p["epsilon"] == pytest.approx(max(p["epsilon_per_client"].values()))


@pytest.mark.parametrize("options, model", [
    ({"epsilon": 2.0, "mechanism": "xor"}, "dt"),
    ({"epsilon": 2.0, "mechanism": "kary", "sensitivity": 4}, "dt"),
    ({"epsilon": 4.0, "mechanism": "dpsgd", "example_rate": 0.2}, "mlp(hidden=8)"),
    ({"epsilon": 8.0, "mechanism": "subsample-aggregate", "teachers": 4,
      "label_queries": 20}, "dt"),
])
def test_each_clients_ledger_spends_what_the_server_reports(
        monkeypatch: pytest.MonkeyPatch, options: dict[str, Any], model: str) -> None:
    """Honest runs: the client's own ledger (one event per release, recorded by the client)
    and the server's accounting of what it received give the same ε, client by client."""
    fed = digits_with_sizes((40, 90, 60), n_unlabeled=40, n_test=60)
    roles = keep_client_roles(monkeypatch, "dp-fedct")
    p = fl.run("dp-fedct", fed, model=model, rounds=3, period=3, seed=1,
               options=options).extra["privacy"]
    per_client = p.get("epsilon_per_client") or {}
    for cid, role in roles.items():
        assert len(role.ledger.events) == 3  # one release (or DP-SGD round) per round
        # what a Flower site without ledger-epsilon allows: exactly one honest run
        assert role.planned_events() == role.ledger.events, cid
        mine = role.ledger.spent().epsilon
        theirs = per_client.get(cid, per_client.get(str(cid), p["epsilon"]))
        assert mine == pytest.approx(theirs, rel=1e-9), cid


def test_record_level_dp_fedavg_plans_at_least_what_each_client_spends(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A Flower site's default lifetime budget is its plan's events: under Poisson client
    sampling a client trains in some rounds only, each round one of the planned events."""
    fed = digits_with_sizes((40, 90, 60), n_unlabeled=40, n_test=60)
    roles = keep_client_roles(monkeypatch, "dp-fedavg")
    fl.run("dp-fedavg", fed, model="mlp(hidden=8)", rounds=4, period=2, seed=1,
           options={"level": "record", "epsilon": 4.0, "example_rate": 0.2})
    assert any(role.ledger.events for role in roles.values())
    for cid, role in roles.items():
        planned = role.planned_events()
        assert len(planned) == 4 and len(set(planned)) == 1, cid
        assert all(ev == planned[0] for ev in role.ledger.events), cid
        mine = Ledger(DELTA, None, list(role.ledger.events)).spent().epsilon
        assert mine <= Ledger(DELTA, None, planned).spent().epsilon + 1e-12


def test_a_ledger_line_nested_too_deep_fails_its_integrity_check_in_one_line(tmp_path):
    """json's RecursionError on a damaged line ``[[[[...]]]]`` was a traceback, not the
    ledger's integrity refusal."""
    from fedlabels.privacy.site_ledger import SiteLedger

    X, y = np.zeros((4, 2)), np.array([0, 1, 0, 1])
    ledger = SiteLedger.open(tmp_path, bytes(32), X, y, epsilon=1.0, delta=1e-5)
    with open(ledger.path, "ab") as fh:
        fh.write(b"[" * 100_000 + b"]" * 100_000 + b"\n")
    with pytest.raises(FedLabelsError, match="failed its integrity check at entry 1"):
        ledger.spent()


def test_a_ledger_of_another_dataset_put_in_its_place_is_refused(tmp_path: Path) -> None:
    """Entry 0 names the dataset: a ledger of other data under the same key (whole chain
    valid, fewer releases) copied over this dataset's is refused, not read as its history."""
    site = _site(tmp_path)
    site.charge([_xor()], seq=1)
    site.charge([_xor()], seq=2)
    other = _site(tmp_path, X=np.ones((4, 3), dtype=np.float32))
    assert other.events() == []
    site.path.write_bytes(other.path.read_bytes())
    site.path.with_name("ledger.head").unlink()
    with pytest.raises(FedLabelsError, match="integrity check at entry 0"):
        _site(tmp_path).events()
    with pytest.raises(FedLabelsError, match="integrity check at entry 0"):
        _site(tmp_path).charge([_xor()], seq=3)


def test_a_sealed_head_of_another_dataset_is_not_taken(tmp_path: Path) -> None:
    """The head's MAC is under the site's key, not the dataset's: one of another dataset
    whose size matches this ledger exactly (nothing after it to check) must not stand in
    for this dataset's releases."""
    mine, theirs = _xor(0.5), _xor(2.0)
    x_other = np.ones((4, 3), dtype=np.float32)

    def size(folder: Path, X: np.ndarray | None, ev: XorEvent, run: str) -> int:
        site = _site(folder, X=X)
        site.charge([ev], run=run, seq=1)
        return site.path.stat().st_size

    gap = size(tmp_path / "dry", None, mine, "") - size(tmp_path / "dry", x_other, theirs, "")
    size(tmp_path, None, mine, "m" * max(-gap, 0))  # the two ledgers: the same bytes
    size(tmp_path, x_other, theirs, "t" * max(gap, 0))
    site, other = _site(tmp_path), _site(tmp_path, X=x_other)
    assert site.path.stat().st_size == other.path.stat().st_size
    site.path.with_name("ledger.head").write_bytes(
        other.path.with_name("ledger.head").read_bytes())
    spent = _site(tmp_path).charge([mine], seq=2)
    assert spent.epsilon == pytest.approx(account_events([mine, mine], DELTA).epsilon, rel=1e-12)
    assert account_events([theirs, mine], DELTA).epsilon > spent.epsilon * 1.5
    assert _site(tmp_path).events() == [mine, mine]


def test_a_head_beyond_the_end_of_the_ledger_is_not_trusted(tmp_path: Path) -> None:
    """The ledger restored from an older copy while its head stays (it seals more entries
    than the file holds): the charge reads the file whole and appends after what it holds,
    so the chain checks; taking the head would number the next entry past the file."""
    site = _site(tmp_path)
    site.charge([_xor(0.5)], seq=1)
    older = site.path.read_bytes()
    site.charge([_xor(0.7)], seq=2)
    site.charge([_xor(0.9)], seq=3)
    site.path.write_bytes(older)
    spent = _site(tmp_path).charge([_xor(0.3)], seq=4)
    assert _site(tmp_path).events() == [_xor(0.5), _xor(0.3)]
    assert spent.epsilon == pytest.approx(
        account_events([_xor(0.5), _xor(0.3)], DELTA).epsilon, rel=1e-12)
