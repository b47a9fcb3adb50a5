"""A deviating server's config values that are not of a field's kind or range: each
client refuses them (``refused: parameters``, naming the field), never ``error: internal``."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from deviating_server import drive
from fedlabels.api import load_federation
from fedlabels.comm import Message
from fedlabels.core.errors import ParameterRefusal, error_category
from fedlabels.data import Federation
from test_deviating_server import ALL_CASES, _role_factory, honest
from test_method_contract import CLIENTS, DATASET, MLP, ROUNDS, SEED, Case


class _TorchCase(Case):
    """A case on the contract's torch MLP (vote weights need one)."""

    @property
    def model(self) -> str:
        return MLP


@pytest.fixture(scope="module")
def federation() -> Federation:
    return load_federation(DATASET, clients=CLIENTS, seed=SEED)


def _changed(message: Message, **config: object) -> Message:
    return Message(message.kind, arrays=dict(message.arrays),
                   config={**message.config, **config}, category=message.category)


def test_fedct_refuses_zero_voters(federation: Federation) -> None:
    """Until 2026-11-30 ``voters = 0`` beside the top votes divided by zero: infinite loss
    weights on every pseudo-label, no error."""
    case = _TorchCase("fedct", {"vote_power": 1.0})
    traces, _ = honest(case, federation)
    trace = traces[0]
    at = next(i for i, m in enumerate(trace) if "top_votes" in m.arrays)
    for voters in (0, -1, CLIENTS + 1):
        role = _role_factory(case, federation)(0)
        assert not drive(role, trace[:at])
        with pytest.raises(ParameterRefusal, match="voters") as refused:
            role.handle(_changed(trace[at], voters=voters))
        assert error_category(refused.value).startswith("refused: parameters (voters ")
    role = _role_factory(case, federation)(0)
    assert not drive(role, trace[:at + 1])  # the honest count is taken


def test_fedct_refuses_top_votes_that_are_not_its_voters_counts(
        federation: Federation) -> None:
    """Until 2026-11-30 the top-vote counts were unpacked as they came: a truncated array
    read as 0 votes for the missing rows, a count above the voters as a vote share above 1
    (a loss weight above the weighting's)."""
    from fedlabels.core.errors import RefusedError

    case = _TorchCase("fedct", {"vote_power": 1.0})
    traces, _ = honest(case, federation)
    trace = traces[0]
    at = next(i for i, m in enumerate(trace) if "top_votes" in m.arrays)
    honest_votes = trace[at].arrays["top_votes"]
    # every bit set, with 2 voters named: counts of 3 in the 2 bits a count of 0..2 takes
    for votes, voters, match in (
            (honest_votes[:1], CLIENTS, r"the top_votes holds 1 values of uint8"),
            (np.full_like(honest_votes, 0xFF), 2, r"the top_votes holds count 3, outside 0..2")):
        role = _role_factory(case, federation)(0)
        assert not drive(role, trace[:at])
        changed = Message(trace[at].kind, arrays={**trace[at].arrays, "top_votes": votes},
                          config={**trace[at].config, "voters": voters})
        with pytest.raises(RefusedError, match=match):
            role.handle(changed)


#: what a deviating server put in a config field: each made ``error: internal`` somewhere
#: until 2026-11-30 (a bare ``int(...)`` or ``float(...)`` of the value, or numpy's seeds)
GARBAGE = [float("nan"), None, "x", -1, 2**62, True]


#: rounds beyond the client's own plan of ``ROUNDS`` rounds (0-based): until 2026-11-30 a
#: client that reads ``round`` took any of them (2⁶² set a secure round key past every round)
BEYOND_PLAN = [ROUNDS, 2**62]

#: methods whose clients read no number from a server's config
UNCHECKED = {"perclient-lp"}


def _is_number(value: object) -> bool:
    return isinstance(value, int | float | np.number) and not isinstance(value, bool)


@pytest.mark.parametrize("case", ALL_CASES)
def test_garbage_config_values_are_refused_never_internal(case: Case,
                                                          federation: Federation) -> None:
    """Every config field of the first message of each kind an honest run sends, set to
    each of :data:`GARBAGE`: the client answers (a field it does not read) or refuses,
    never ``error: internal``, and a ``refused: parameters`` names the field; where the
    client reads a number, NaN, None, ``'x'`` or ``True`` in it is such a refusal. Where a
    client reads ``round`` (it refuses ``'x'`` there), a round beyond its own plan
    (:data:`BEYOND_PLAN`) is refused as one: ``round must be an integer from 0 to`` the
    plan's last round."""
    traces, _ = honest(case, federation)
    fresh = _role_factory(case, federation)
    trace, done, problems, refused = traces[0], set(), [], 0
    for i, message in enumerate(trace):
        if (message.kind, tuple(sorted(message.config))) in done:
            continue
        done.add((message.kind, tuple(sorted(message.config))))
        before = fresh(0)
        drive(before, trace[:i])
        for key, honest_value in sorted(message.config.items()):
            seen_as: dict[str, str] = {}
            for value in GARBAGE + (BEYOND_PLAN if key == "round" else []):
                role = copy.deepcopy(before)
                try:
                    role.handle(_changed(message, **{key: value}))
                    seen = "answered"
                except Exception as exc:
                    seen = error_category(exc)
                seen_as[repr(value)] = seen
                if seen in ("error: internal", "refused: parameters"):  # no field named
                    problems.append(f"{message.kind} {key}={value!r}: {seen}")
                elif key.endswith("steps") and value != honest_value and not seen.startswith(
                        f"refused: parameters (the site's {key} is "):
                    problems.append(f"{message.kind} {key}={value!r}: {seen} (the site's "
                                    "own steps expected)")
                elif (_is_number(honest_value) and not _is_number(value)
                      and seen.startswith("refused: parameters (")):
                    refused += 1
            within = f"refused: parameters (round must be an integer from 0 to {ROUNDS - 1})"
            if key == "round" and seen_as["'x'"].startswith("refused: parameters (round "):
                problems += [f"{message.kind} round={value}: {seen_as[repr(value)]} (the "
                             "plan's rounds expected)" for value in BEYOND_PLAN
                             if seen_as[repr(value)] != within]
    assert not problems, "\n".join(problems)
    assert refused or case.method in UNCHECKED, "no field's garbage was refused"


#: malformed ``row_ranges`` (XCLP's SecureRowSums): until 2026-11-30 each was ``error:
#: data``, or ``error: internal`` (a range past the joint graph, a missing field)
def _bad_row_ranges(honest: str, n_rows: int) -> list[object]:
    spans = honest.split(",")
    (a, b), rest = spans[0].split(":"), spans[1:]
    return [None, "x", 7, ",".join(spans[:-1]), ",".join([*spans, "0:1"]),
            ",".join([f"{b}:{a}", *rest]) if a != b else "1:0," + ",".join(rest),
            ",".join([*spans[:-1], f"{spans[-1].split(':')[0]}:{n_rows + 1}"]),
            ",".join([*spans[:-1], f"0:{2**62}"]), ",".join([f"{a}:{int(b) - 1}", *rest]),
            ",".join([spans[0], *(f"{a}:{b}" for _ in rest)])]


#: the plaintext XCLP case: a fresh role replays its honest messages (the secure cases'
#: relayed messages are sealed to the honest run's keys); the ranges are read before the mode
PLAIN_XCLP = [p for p in ALL_CASES if "xclp" in p.values[0].method
              and p.values[0].options.get("secure") == "none"]


@pytest.mark.parametrize("case", PLAIN_XCLP)
def test_malformed_row_ranges_are_refused_naming_the_field(case: Case,
                                                           federation: Federation) -> None:
    """Each of :func:`_bad_row_ranges` in the honest SecureRowSums message: ``refused:
    parameters (row_ranges must ...)``; the honest ranges are answered."""
    traces, _ = honest(case, federation)
    trace = traces[0]
    at = next(i for i, m in enumerate(trace) if m.kind == "xclp.rowsums")
    before = _role_factory(case, federation)(0)
    assert not drive(before, trace[:at])
    n_rows = len(before.S_L)
    honest_ranges = trace[at].config["row_ranges"]
    assert copy.deepcopy(before).handle(trace[at]).kind == "xclp.rowsums.reply"
    for ranges in _bad_row_ranges(honest_ranges, n_rows):
        role = copy.deepcopy(before)
        with pytest.raises(ParameterRefusal) as refused:
            role.handle(_changed(trace[at], row_ranges=ranges))
        assert error_category(refused.value).startswith(
            "refused: parameters (row_ranges must "), (ranges, error_category(refused.value))
