"""The Flower ``ClientApp``: a method's client role, answering one message per call.

In deployment a SuperNode starts a new ``flwr-clientapp`` process for every message, so
nothing survives in memory between rounds. Each call therefore

1. loads the site's data from the node config (:func:`~.site.load_site`);
2. builds the client role from the same :class:`~fedlabels.runs.loop.RunPlan` as the
   simulator (``plan.learner(cid)``, ``plan.context()``);
3. restores the role's state (``role.load_state_dict``) from ``context.state``;
4. handles the message and writes ``role.state_dict()`` back to ``context.state``.

Before any of that the site checks the message's number against its own record
(:mod:`.sequence`: a rewound, replayed, out-of-order or negative number is refused; a
re-send of a message already answered gets the stored reply), and a DP client role charges
each release to the site's lifetime ledger on disk before making it
(:mod:`.site_privacy`, :mod:`fedlabels.privacy.site_ledger`); a reply to a message that
charged it carries what the ledger then says (``site_ledger`` in its header:
:func:`~.site_privacy.ledger_report`, shown in the coordinator's result as the site's word:
:mod:`.site_ledgers`).

The state is plain values only (no pickles), sealed with an HMAC under a key only the site
holds, and holds no private rows and no copy of U: see :mod:`.site_state`. ``context.state``
is owned by the SuperNode: it survives the per-message processes and is not sent to the
SuperLink.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp

from fedlabels.comm import Message as FLMessage
from fedlabels.core.errors import FedLabelsError, RefusedError, error_category
from fedlabels.core.threads import set_threads
from fedlabels.engines.flower import site_state, snapshots
from fedlabels.engines.flower.convert import attached_message, from_record_dict, to_record_dict
from fedlabels.engines.flower.sequence import SequenceGuard, message_digest
from fedlabels.engines.flower.site import SiteData, load_site, node_label, node_threads
from fedlabels.engines.flower.site_keys import unpinned_roster_warning
from fedlabels.engines.flower.site_ledgers import SITE_LEDGER
from fedlabels.engines.flower.site_log import answered
from fedlabels.engines.flower.site_plan import (
    TRUST_KEY,
    check_planned_round,
    check_steps,
    own_plan,
    plan_of,
    site_config,
    trusts_coordinator,
)
from fedlabels.engines.flower.site_privacy import (
    REPORT_LIFETIME,
    key_path,
    ledger_report,
    open_site_ledger,
    site_evaluates,
    with_plan_budget,
)
from fedlabels.engines.flower.spec import HELLO, DeploySpec, deploy_plan
from fedlabels.method import ClientRole, Method
from fedlabels.method.dpsgd_client import SecretNoiseClient
from fedlabels.method.replies import declined_evaluation
from fedlabels.method.threat import ThreatModel
from fedlabels.methods import get_method
from fedlabels.runs.session import build_client_role

SEQ = "fedlabels.seq"  # context.state: the number of the last message handled


def hello_reply(site: SiteData, spec: DeploySpec) -> FLMessage:
    """What the server checks before round 1: who this site is and what data it holds."""
    return FLMessage("fedlabels.hello.reply", config={
        "partition_id": site.partition_id,
        "n_examples": len(site.private),
        "n_features": site.n_features,
        "n_public": len(site.X_public),
        "n_classes": site.n_classes,
        "public_digest": site.public_digest(),
        # U's image shape as C-H-W ("" when U is not images): public, from the shared file
        "image_shape": "-".join(map(str, site.image_shape)) if site.image_shape else "",
    }, category="control")


def build_role(spec: DeploySpec, site: SiteData,
               node_config: Mapping[str, Any] | None = None,
               plan: dict[str, Any] | None = None) -> ClientRole:
    """The client role of this site, as the simulator's session builds it for the same
    client index (:func:`~fedlabels.runs.session.build_client_role`), under the site's own
    ``privacy-plan`` (``plan``, where the run pinned it), or the run's where the node config
    says ``trust-coordinator=true`` (:func:`~.site_plan.site_config`; neither: refused)."""
    cfg = site_config(spec.config, dict(node_config or {}), plan)
    cid = site.partition_id
    if cid >= cfg.clients:
        raise FedLabelsError(f"partition-id {cid} is out of range for a run with "
                             f"{cfg.clients} clients (0..{cfg.clients - 1}).")
    run_plan = deploy_plan(cfg, site.n_classes, site.n_features, site.image_shape)
    role = build_client_role(run_plan, cid, site.private, X_public=site.X_public,
                             X_test=site.X_test, y_test=site.y_test, scaling=site.scaling,
                             trust=site.trust)
    # evaluate=false: no test score leaves the site, in an evaluation or a protocol reply
    role.reports_test_scores = site_evaluates(dict(node_config or {}))
    return role


def save_state(role: ClientRole, records: RecordDict, site: SiteData, key: bytes) -> None:
    site_state.save_state(role.state_dict(), records, site.partition_id, key)


def restore_state(role: ClientRole, records: RecordDict, site: SiteData, key: bytes) -> None:
    state = site_state.load_state(records, site.partition_id, key)
    if state is not None:
        role.load_state_dict(state)


def evaluate_after(role: ClientRole, request: FLMessage) -> FLMessage | None:
    """The answer to an evaluation ``request`` attached to a training message, given right
    after it; None (the server then asks in a separate exchange) when answering would change
    the role's state (the simulator evaluates only after the round's last message) or
    fails."""
    before = site_state.canonical_bytes(role.state_dict(), 0)
    try:
        reply = role.handle(request)
    except Exception:  # the separate evaluation exchange reports it
        return None
    return reply if site_state.canonical_bytes(role.state_dict(), 0) == before else None


def handle(message: Message, context: Context) -> Message:
    """Answer one Flower message with the method's client role (and an attached evaluation
    request, see :func:`evaluate_after`).

    An error reaches the server as its category only (``refused: budget``, ``refused:
    parameters``, ``error: data``, ...: :func:`~fedlabels.core.errors.error_category`); its
    text, which may describe the site's data, goes to the site's log. A site that holds a
    roster without a ``roster-sha256`` pin says so in its log at a run's first message
    (:func:`~.site_keys.unpinned_roster_warning`)."""
    try:
        return _handle(message, context)
    except Exception as exc:
        category = error_category(exc)
        _SITE_LOG.error("%s: %s: %s", node_label(dict(context.node_config), context.node_id),
                        category, exc)
        raise FedLabelsError(f"{category} (the site's log has the details)") from None


_SITE_LOG = logging.getLogger("fedlabels.site")


def _handle(message: Message, context: Context) -> Message:
    node_config = dict(context.node_config)
    site = load_site(node_config, context.node_id)
    evaluates = site_evaluates(node_config)  # a bad value is refused at the first message
    trusted = trusts_coordinator(node_config)  # no plan and no opt-in: refused, hello too
    spec = DeploySpec.from_run_config(dict(context.run_config))
    set_threads(site_threads(node_config, spec))
    ours, meta = from_record_dict(message.content)
    expected = meta.get("cid")
    if ours.kind != HELLO and expected is not None and int(expected) != site.partition_id:
        raise FedLabelsError(f"{node_label(node_config, context.node_id)} got a "
                             f"message for client {expected}.")
    after = None
    if ours.kind == HELLO:
        if trusted:
            _SITE_LOG.warning("%s: %s=true and no privacy-plan: this site follows the "
                              "coordinator's run config (%s), and its ledger records "
                              "without a plan's limit", node_label(node_config,
                                                                   context.node_id),
                              TRUST_KEY, plan_of(spec.config))
        reply = hello_reply(site, spec)
        _SITE_LOG.info("%s: answered the coordinator's hello: its number of examples (%d; "
                       "outside any guarantee, kept in the run's result), U's fingerprint, "
                       "sizes and classes (public)", node_label(node_config, context.node_id),
                       len(site.private))
    else:
        key = site_state.site_key(key_path(node_config))
        ledger = open_site_ledger(node_config, key, site.private.X, site.private.y)
        seq, rnd, folder = meta.get("seq"), meta.get("round"), snapshots.run_dir(node_config,
                                                                                 spec)
        request = attached_message(message.content)
        if request is not None and (request.kind, request.category) != ("evaluate",
                                                                         "evaluation"):
            # answered after the message and its reply dropped if the role changed: any
            # other kind would be a second release (charged) the site never planned
            raise RefusedError(f"message refused: its attached request is a "
                               f"{request.kind!r} ({request.category}), not an evaluation.")
        digest = message_digest(ours, request, rnd if isinstance(rnd, int) else -1)
        guard = SequenceGuard.load(ledger.path.parent / "runs" /
                                   f"{snapshots.run_key(spec)}.json", key)
        # the site's plan, read once a run: as pinned at its first message, answered or
        # refused (a new run from scratch reads the file again; a resume keeps the run's)
        plan = own_plan(node_config, guard.pinned(context.run_id, spec.resume))
        if guard.flower_run != context.run_id:  # this run's first message at this site
            unpinned = unpinned_roster_warning(site.trust is not None, node_config,
                                               site_method(spec, node_config,
                                                           plan).roster_stake)
            if unpinned is not None:
                _SITE_LOG.warning("%s: %s", node_label(node_config, context.node_id),
                                  unpinned)
        again = guard.admit(context.run_id, spec.resume, seq, rnd, digest, plan)
        if again is not None:  # a re-send: the reply given then, never a new release
            told = guard.report(seq) if isinstance(seq, int) else None
            _SITE_LOG.info("%s: round %s, message %s (%s): sent again the reply it gave then "
                           "(no new release)", node_label(node_config, context.node_id),
                           rnd + 1 if isinstance(rnd, int) else rnd, seq, ours.kind)
            return Message(to_record_dict(again[0], again[1],
                                          **({SITE_LEDGER: told} if told else {})),
                           reply_to=message)
        assert isinstance(seq, int) and isinstance(rnd, int)  # admitted
        check_planned_round(node_config, rnd, spec.config.rounds, plan, guard.rounds_with(rnd))
        check_steps(ours.config, node_config, "message")  # trust-coordinator: max-steps
        role = build_role(spec, site, node_config, plan)
        if trusted and seq == 1:  # a run under the coordinator's plan: in the ledger first
            ledger.note_coordinator_plan(plan_of(spec.config), run=snapshots.run_key(spec),
                                         flower_run=context.run_id, sequence=guard.nonce)
        guard.check_round(rnd, ours.kind, role.multi_step_kinds)
        stored = context.state.get(SEQ)
        if isinstance(stored, ConfigRecord) and stored.get("seq") == seq - 1:
            restore_state(role, context.state, site, key)
        elif seq > 1:  # a restarted SuperNode, or a resumed run: the site's own snapshot
            role.load_state_dict(snapshots.load_snapshot(folder, seq - 1, site.partition_id,
                                                         key))
        if isinstance(role, SecretNoiseClient):  # charged on disk before any release
            role.site_ledger = with_plan_budget(ledger, node_config, role)
            role.charge_context = {"run": snapshots.run_key(spec), "flower_run":
                                   context.run_id, "seq": seq, "round": rnd,
                                   "sequence": guard.nonce}
        reply = role.handle(ours) if evaluates or ours.category != "evaluation" \
            else declined_evaluation()
        if request is not None:
            after = evaluate_after(role, request) if evaluates else declined_evaluation()
        save_state(role, context.state, site, key)
        context.state[SEQ] = ConfigRecord({"seq": seq})
        if folder is not None:
            snapshots.save_snapshot(folder, seq, rnd, role.state_dict(), site.partition_id,
                                    key)
        found = ledger_report(role, node_config, plan)  # shown in the coordinator's result
        report = None if found is None else json.dumps(found)
        guard.accept(seq, rnd, digest, reply, after, ours.kind, report)
        if _SITE_LOG.isEnabledFor(logging.INFO):  # what left the site, for its operator
            own = ledger_report(role, {**node_config, REPORT_LIFETIME: True}, plan)
            _SITE_LOG.info("%s", answered(node_label(node_config, context.node_id), seq,
                                          rnd + 1, ours.kind, (reply, after),
                                          site_threat(spec, node_config, plan), own))
        if report is not None:
            return Message(to_record_dict(reply, after, **{SITE_LEDGER: report}),
                           reply_to=message)
    return Message(to_record_dict(reply, after), reply_to=message)


def site_method(spec: DeploySpec, node_config: Mapping[str, Any],
                plan: dict[str, Any] | None = None) -> Method:
    """The method this site runs: its plan's (``plan``, where the run pinned it; or the
    run's, where it trusts the coordinator), as :func:`build_role` builds it."""
    return get_method(site_config(spec.config, dict(node_config), plan).method)


def site_threat(spec: DeploySpec, node_config: Mapping[str, Any],
                plan: dict[str, Any] | None = None) -> ThreatModel:
    """The threat model of the method this site runs (:func:`site_method`)."""
    return site_method(spec, node_config, plan).threat_model


def site_threads(node_config: Mapping[str, Any], spec: DeploySpec) -> int:
    """Torch threads of this site's ClientApps: the node config's ``threads`` (the site's
    choice), else the run's (``spec.threads``, from ``--threads``; default 1):
    :func:`~.site.node_threads`."""
    return node_threads(node_config, spec.threads)


class FedLabelsClientApp(ClientApp):
    """A ``ClientApp`` that routes every ``train.*``, ``evaluate.*`` and ``query.*`` message
    to :func:`handle`.

    Flower routes by ``"<category>.<action>"`` to functions registered per action; the action
    set of fedlabels grows with every method, and the exact kind travels inside the message,
    so one entry point serves them all.
    """

    def __call__(self, message: Message, context: Context) -> Message:
        category = message.metadata.message_type.split(".", 1)[0]
        if category not in ("train", "evaluate", "query"):
            raise ValueError(f"unsupported Flower message type "
                             f"{message.metadata.message_type!r}")
        return handle(message, context)


app = FedLabelsClientApp()
