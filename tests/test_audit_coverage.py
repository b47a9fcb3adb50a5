"""An audit whose adversary the run's DP guarantee does not cover says so, so that its VUL
is not read as a check of the ε (FREDY against the server, DP-FedCT's released models,
client-level DP-FedAvg against the server)."""

from __future__ import annotations

import pytest

from fedlabels.audit.coverage import uncovered_note

XOR = {"guarantee": "formal", "mechanism": "xor: bitwise randomized response on one-hot rows",
       "neighbouring": "client-level under replacement"}


@pytest.mark.parametrize(("threat", "view", "privacy", "says"), [
    ("released-model", "replies", XOR, "the xor mechanism protects the labels"),
    ("forged-u", "released-labels", {"guarantee": "formal"}, "sees the votes in the clear"),
    ("fixed-u", "released-labels", {"guarantee": "formal"}, "sees the votes in the clear"),
    ("forged-u", "final-model", {"guarantee": "formal", "neighbouring": "client-level"},
     "sees each clipped update"),
])
def test_an_uncovered_adversary_is_named(threat, view, privacy, says):
    note = uncovered_note(threat, view, privacy)
    assert note is not None and says in note
    assert note.startswith(f"the stated ε does not bound this audit's adversary ({threat})")


@pytest.mark.parametrize(("threat", "view", "privacy"), [
    ("forged-u", "replies", XOR),  # the server sees the noisy labels: covered
    ("curious-client", "replies", XOR),  # what the server sends back: post-processing
    ("released-model", "replies", {**XOR, "mechanism": "dpsgd: DP-SGD at each client"}),
    ("released-model", "released-labels", {"guarantee": "formal"}),  # the student
    ("forged-u", "final-model", {"guarantee": "formal", "neighbouring": "record-level: one"}),
    ("released-model", "replies", {**XOR, "guarantee": "none"}),  # nothing stated
])
def test_a_covered_adversary_or_no_guarantee_gets_no_note(threat, view, privacy):
    assert uncovered_note(threat, view, privacy) is None


def test_a_dp_fedct_audit_of_the_released_models_carries_the_note():
    import fedlabels as fl
    from fedlabels.audit import audit_federation
    from fedlabels.learners import parse_model_spec

    fed = fl.load_federation("breast_cancer", clients=3, test=300, unlabeled=120, seed=0)
    options = {"epsilon": 8.0, "mechanism": "xor"}
    notes = {}
    for threat in ("released-model", "forged-u"):
        result, _ = audit_federation("dp-fedct", fed, parse_model_spec("dt"), rounds=1,
                                     seed=0, options=options, n_members=20, n_refs=2,
                                     n_population=30, aug_k=1, threat=threat)
        notes[threat] = " ".join(result.extra["privacy"]["audit"]["notes"])
    assert "does not bound this audit's adversary (released-model)" in notes["released-model"]
    assert "does not bound" not in notes["forged-u"]


def test_audit_federation_takes_model_names_and_suggests_a_threat():
    import fedlabels as fl
    from fedlabels.audit import audit_federation
    from fedlabels.core.errors import FedLabelsError

    fed = fl.load_federation("breast_cancer", clients=3, test=300, unlabeled=120, seed=0)
    result, _ = audit_federation("fedct", fed, "dt", rounds=1, n_members=20, n_refs=2,
                                 n_population=30, aug_k=1)
    assert result.models == ["decision_tree"] * 3  # one name, not its letters
    with pytest.raises(FedLabelsError, match=r"'fixedu' \(did you mean 'fixed-u'\?\)"):
        audit_federation("fedct", fed, "dt", rounds=1, threat="fixedu")
