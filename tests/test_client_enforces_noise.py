"""A DP-FedCT client takes its noise from its own options, never from the server's message.

Replays of the attacks on today's main: a server that sends ``flip_probability = 0``,
``epsilon_per_label = 1000`` or ``vote_sigma = 0`` got the exact labels; a ``dpsgd`` or
``subsample-aggregate`` client answered the noiseless sensitivity estimate as often as
asked. Each message here is an honest run's message with one value changed.
"""

from __future__ import annotations

import math

import pytest

from fedlabels.api import load_federation
from fedlabels.comm import Message
from fedlabels.core.errors import BudgetRefusal, FedLabelsError, ParameterRefusal, RefusedError
from test_deviating_server import _role_factory, honest
from test_method_contract import CLIENTS, DATASET, SEED, Case

XOR = Case("dp-fedct", {"epsilon": 1.0, "sensitivity": 40, "mechanism": "xor"})
KARY = Case("dp-fedct", {"epsilon": 4.0, "sensitivity": 40, "mechanism": "kary"})
SA = Case("dp-fedct", {"epsilon": 8.0, "mechanism": "subsample-aggregate", "teachers": 3,
                       "label_queries": 40})
DPSGD = Case("dp-fedct", {"epsilon": 8.0, "mechanism": "dpsgd", "example_rate": 0.1})
EMPIRICAL = Case("dp-fedct", {"epsilon_per_round": 2.0, "sensitivity": "empirical",
                              "sensitivity_neighbours": 3})


@pytest.fixture(scope="module")
def fed():
    return load_federation(DATASET, clients=CLIENTS, seed=SEED)


def _train(case: Case, fed) -> tuple[Message, object]:
    """Client 1's first honest train message and a fresh client 1."""
    traces, _ = honest(case, fed)
    message = next(m for m in traces[1] if m.category == "protocol"
                   and m.kind != "dpfedct.sensitivity")
    return message, _role_factory(case, fed)(1)


def _with(message: Message, **config) -> Message:
    return Message(message.kind, arrays=dict(message.arrays),
                   config={**message.config, **config})


@pytest.mark.parametrize(("case", "key", "value"), [
    (XOR, "flip_probability", 0.0), (XOR, "flip_probability", 1.0),
    (KARY, "epsilon_per_label", 1000.0), (SA, "vote_sigma", 0.0),
    (SA, "teachers", 1), (SA, "mechanism", "xor")])
def test_less_noise_than_the_clients_options_is_refused(fed, case, key, value):
    message, client = _train(case, fed)
    with pytest.raises(ParameterRefusal):
        client.handle(_with(message, **{key: value}))
    assert client.releases == 0


def test_more_labels_than_planned_are_refused(fed):
    message, client = _train(SA, fed)
    with pytest.raises(BudgetRefusal, match="labels"):
        client.handle(_with(message, subset_size=200))


@pytest.mark.parametrize("case", [XOR, KARY, SA])
def test_the_honest_message_asks_for_exactly_the_clients_own_noise(fed, case):
    message, client = _train(case, fed)
    own = client.own_noise()
    used = client.strategy.client_noise(client, message.config)
    for key in set(own) & {"flip_probability", "epsilon_per_label", "vote_sigma"}:
        assert used[key] == message.config[key] == pytest.approx(own[key], rel=1e-12)


def test_more_noise_than_asked_for_is_accepted(fed):
    message, client = _train(XOR, fed)
    noisier = (client.own_noise()["flip_probability"] + 0.5) / 2  # closer to 1/2
    reply = client.handle(_with(message, flip_probability=noisier))
    assert reply.kind == "dpfedct.bits" and client.releases == 1


def test_a_complement_flip_probability_is_charged_as_the_same_noise(fed):
    """f and 1 - f flip bits alike (the complement is post-processing): a server asking for
    1 - f gets a release charged at the ε of f, bits · ln((1 - f)/f) > 0, never a negative ε
    from ln(f/(1 - f))."""
    message, client = _train(XOR, fed)
    own = client.own_noise()["flip_probability"]
    reply = client.handle(_with(message, flip_probability=1.0 - own))
    assert reply.kind == "dpfedct.bits" and client.releases == 1
    (event,) = client.ledger.events
    bits = client.sensitivity_bits()
    assert event.flip_probability == pytest.approx(own, rel=1e-12)
    assert event.epsilon == pytest.approx(bits * math.log((1 - own) / own), rel=1e-9)


def test_a_kary_client_charges_every_label_an_odd_bit_count_may_change(fed):
    """s* = 41 bits: a changed label flips 2 bits of its one-hot row, so up to ⌈41/2⌉ = 21
    labels may change and a release is charged 21·ε₁ (20 would undercharge)."""
    message, client = _train(Case("dp-fedct", {"epsilon": 4.0, "sensitivity": 41,
                                               "mechanism": "kary"}), fed)
    client.handle(message)
    (event,) = client.ledger.events
    eps_label = client.own_noise()["epsilon_per_label"]
    assert event.sensitivity_labels == 21
    assert event.epsilon == pytest.approx(21 * eps_label, rel=1e-12)


def test_a_dpsgd_client_refuses_one_step_beyond_its_plan(fed):
    """The noise is calibrated for rounds × period steps: a round that would take the
    client one step past them is refused before it trains (and one that ends on them is
    not)."""
    message, client = _train(DPSGD, fed)
    planned, steps = client.planned_dp_steps(), message.config["steps"]
    client.dp_steps = planned - steps + 1
    with pytest.raises(BudgetRefusal, match="planned"):
        client.handle(message)
    client.dp_steps = planned - steps
    client.handle(message)
    assert client.dp_steps == planned


@pytest.mark.parametrize("case", [DPSGD, SA, XOR])
def test_only_empirical_clients_answer_the_noiseless_estimate(fed, case):
    client = _role_factory(case, fed)(0)
    with pytest.raises(RefusedError):
        client.handle(Message("dpfedct.sensitivity", category="control", config={
            "neighbours": 3, "relation": "remove", "steps": 1, "model": ""}))


def test_the_estimate_is_answered_once_from_the_clients_own_options(fed):
    client = _role_factory(EMPIRICAL, fed)(0)
    own = client.settings.period  # its steps must be the client's own (since 2026-11-30)
    asked = Message("dpfedct.sensitivity", category="control",
                    config={"neighbours": 3, "relation": "both", "steps": own, "model": ""})
    reply = client.handle(asked)
    assert reply.config["bits"] >= 0 and client.sensitivity_answers == 1
    with pytest.raises(BudgetRefusal, match="once"):
        client.handle(asked)


@pytest.mark.parametrize(("key", "other"), [
    ("neighbours", 50), ("neighbours", True), ("neighbours", "3"), ("neighbours", None),
    ("relation", "remove"), ("relation", 3), ("model", "rf"), ("model", None)])
def test_an_estimate_request_for_another_question_is_refused(fed, key, other):
    """The s* request's neighbours, relation and model were unread (the client's own
    options decided), so a server that asked for 50 neighbours, remove or a random forest
    got the estimate of 3, both and the client's learner, without knowing it (until
    2026-11-30); another value is refused naming the field only, and nothing is
    estimated."""
    from fedlabels.comm import decode_message, encode_message
    from fedlabels.core.errors import error_category

    client = _role_factory(EMPIRICAL, fed)(0)
    config = {"neighbours": 3, "relation": "both", "steps": client.settings.period,
              "model": "", key: other}
    if other is None:
        del config[key]
    asked = decode_message(encode_message(Message("dpfedct.sensitivity", category="control",
                                                  config=config)))
    with pytest.raises(ParameterRefusal) as refused:
        client.handle(asked)
    assert error_category(refused.value) == f"refused: parameters ({key} is not the site's own)"
    assert client.sensitivity_answers == 0 and client.own_sensitivity is None


@pytest.mark.parametrize("case", [XOR, KARY, SA, EMPIRICAL])
@pytest.mark.parametrize("steps", [50, 0, -1, True, 2**62])
def test_other_local_steps_than_the_clients_plan_are_refused(fed, case, steps):
    """The local steps a round trains the released model with are the client's own
    (``period``, what its plan and an empirical s* were made for), not the server's: a
    server that asked 25 times the steps (or 2**62, or -1) got a release from a model its
    sensitivity was never estimated for (found by a red-team pass). Replayed through the
    codec, as a site receives it."""
    from fedlabels.comm import decode_message, encode_message

    message, client = _train(case, fed)
    assert message.config["steps"] == client.settings.period  # the honest request
    with pytest.raises(ParameterRefusal, match="local steps"):
        client.handle(decode_message(encode_message(_with(message, steps=steps))))
    assert client.releases == 0 and not client.ledger.events
    assert client.handle(message).category == "protocol"  # the honest one is answered


@pytest.mark.parametrize(("case", "key"), [
    (XOR, "flip_probability"), (KARY, "epsilon_per_label"), (SA, "vote_sigma"),
    (DPSGD, "noise_multiplier")])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf"), None, "nan"])
def test_a_noise_parameter_that_is_not_a_finite_number_gets_no_release(fed, case, key, value):
    """NaN compares false with everything, so a check written as ``asked < own`` would let
    it through to the mechanism; through the codec, as a site receives it, every one of these
    is refused or fails before a reply exists (a red-team pass: none was answered)."""
    from fedlabels.comm import decode_message, encode_message

    message, client = _train(case, fed)
    with pytest.raises((FedLabelsError, TypeError, ValueError, OverflowError)):
        client.handle(decode_message(encode_message(_with(message, **{key: value}))))
