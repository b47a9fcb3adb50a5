"""Privacy audit: membership-inference attacks on what a method's server receives.

``audit_federation`` runs a method with a recording server (:mod:`.recorder`), turns the
recorded messages into observations under the method's threat model (:mod:`.threats`),
trains the attacker's reference / shadow models (:mod:`.references`) and runs the attacks of
:mod:`fedlabels.privacy.attacks` on members vs non-members (:mod:`.plan`).
"""

from fedlabels.audit.core import (
    AuditReport,
    attack_view,
    audit_federation,
    audit_rounds,
    merge_privacy,
    parse_attacks,
)
from fedlabels.audit.plan import AuditPlan, make_plan
from fedlabels.audit.recorder import Recorder, RecordingMethod
from fedlabels.audit.threats import VIEWS, AuditView, auditable_methods, threat_for

__all__ = [
    "VIEWS",
    "AuditPlan",
    "AuditReport",
    "AuditView",
    "Recorder",
    "RecordingMethod",
    "attack_view",
    "audit_federation",
    "audit_rounds",
    "auditable_methods",
    "make_plan",
    "merge_privacy",
    "parse_attacks",
    "threat_for",
]
