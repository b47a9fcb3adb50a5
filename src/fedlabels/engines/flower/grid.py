"""Our :class:`~fedlabels.methods.Grid` on a Flower ``Grid``: the ServerApp's exchanges.

:class:`FlowerGrid` sends one message per client to its SuperNode, pulls the replies, and
handles what can go wrong on the way: error replies, SuperNodes that leave (and may come
back: a restarted SuperNode rejoins), replies that never come. It also folds a round's
evaluation into its last protocol exchange (one exchange per round).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from flwr.app import Message as FlowerMessage
from flwr.serverapp import Grid as FlowerGridABC

from fedlabels.comm import Message, encode_message
from fedlabels.core.errors import FedLabelsError
from fedlabels.engines.flower.convert import (
    attached_message,
    flower_bytes,
    flower_message_type,
    from_record_dict,
    to_record_dict,
)
from fedlabels.engines.flower.site_ledgers import SITE_LEDGER, read_report
from fedlabels.engines.flower.spec import HELLO
from fedlabels.runs.loop import CommMeter


class FlowerGrid:
    """Our :class:`~fedlabels.methods.Grid` on a Flower ``Grid``.

    ``exchange`` converts each message to a Flower ``Message`` for its client's SuperNode,
    pushes them all, then pulls replies every ``poll_interval`` seconds (Flower's own
    ``send_and_receive`` sleeps a fixed 3 s between pulls). Clients whose reply is an error,
    whose SuperNode is no longer connected, or who do not answer within ``reply_timeout`` are
    moved to :attr:`lost` and left out of :attr:`client_ids` and of the returned replies;
    ``on_lost`` is called with the newly lost clients before ``exchange`` returns.

    Bytes are counted as the simulator counts them (our wire format, per round, client,
    direction and category), so both engines report the same communication.

    One exchange per round: in a round that ends with an evaluation (``eval_due``), every
    protocol message carries the ``evaluation`` request (the server's evaluation message,
    when it does not depend on the round's outcome), and the ClientApp answers it in the same
    reply right after the message. The evaluation exchange is then served from those answers
    (counted as if sent); clients without one are asked in a real exchange.
    """

    def __init__(self, grid: FlowerGridABC, node_of: Mapping[int, int], meter: CommMeter, *,
                 reply_timeout: float = 300.0, poll_interval: float = 0.2,
                 on_lost: Callable[[dict[int, str], int], None] | None = None,
                 liveness_interval: float = 1.0) -> None:
        self.grid = grid
        self.node_of = dict(node_of)
        self.meter = meter
        self.reply_timeout = reply_timeout
        self.poll_interval = poll_interval
        self.liveness_interval = liveness_interval
        self.on_lost = on_lost
        self.lost: dict[int, dict[str, Any]] = {}
        self.evaluation: Callable[[int], Message] | None = None
        self.eval_due: Callable[[int], bool] | None = None
        # cid -> (round, evaluation request, its answer) from the client's last reply
        self._evaluated: dict[int, tuple[int, Message, Message]] = {}
        self.seq = dict.fromkeys(self.node_of, 0)  # messages sent to each client so far
        self.rejoin_timeout = 0.0  # how long a client whose SuperNode left may take to return
        # seconds a pull under way at the reply deadline may still take (a large reply)
        self.pull_grace = min(30.0, reply_timeout)
        self.public_digest: str | None = None  # U's fingerprint, checked on a new node
        self.rejoined: list[dict[str, Any]] = []
        self._probed: set[int] = set()
        # the server's check of a reply (ServerRole.check_reply): a malformed one loses its
        # client, with the reason, as a missing one does
        self.check_reply: Callable[[int, Message, Message], None] | None = None
        # bytes of the Flower messages themselves (convert.flower_bytes): rnd -> [down, up]
        self.flower_bytes: dict[int, list[int]] = {}
        # cid -> the latest report of the site's own ledger (site_ledgers.read_report)
        self.site_ledgers: dict[int, dict[str, Any]] = {}

    def _rejoined(self, waiting: Mapping[int, float], online: set[int], rnd: int) -> list[int]:
        """Waiting clients whose SuperNode is back: the same node id (a restarted SuperNode
        with the same key), or a new node that says it is that partition (and holds the same
        U); the new node then takes the client's place."""
        if self.rejoin_timeout <= 0:
            return []
        back = [c for c in waiting if self.node_of[c] in online]
        missing = [c for c in waiting if c not in back]
        new = sorted(online - set(self.node_of.values()) - self._probed)
        if missing and new:
            self._probed.update(new)
            probe = FlowerGrid(self.grid, dict(enumerate(new)), CommMeter(),
                               reply_timeout=min(self.reply_timeout, 60.0))
            for i, hello in probe.exchange({i: Message(HELLO, category="control")
                                            for i in range(len(new))}, -1).items():
                cid = hello.config.get("partition_id")  # its own word: checked, never int()
                if isinstance(cid, int) and not isinstance(cid, bool) and cid in missing \
                        and hello.config.get("public_digest") == self.public_digest:
                    self.node_of[cid] = new[i]
                    back.append(cid)
        for cid in back:
            self.rejoined.append({"round": rnd + 1, "client": cid, "node_id": self.node_of[cid]})
        return back

    @property
    def client_ids(self) -> list[int]:
        return sorted(c for c in self.node_of if c not in self.lost)

    def _requests(self, messages: Mapping[int, Message], rnd: int) -> dict[int, Message]:
        """The evaluation requests to attach to this exchange's protocol messages."""
        if self.evaluation is None or self.eval_due is None or rnd < 0 \
                or not self.eval_due(rnd):
            return {}
        return {cid: self.evaluation(cid) for cid, msg in messages.items()
                if msg.category == "protocol"}

    def _answered(self, messages: Mapping[int, Message], rnd: int) -> dict[int, Message]:
        """Evaluation replies already given with this round's last protocol reply."""
        served: dict[int, Message] = {}
        for cid, msg in messages.items():
            done = self._evaluated.pop(cid, None)
            if done is None or done[0] != rnd or msg.category != "evaluation":
                continue
            sent = encode_message(msg)  # compared and counted: encoded once
            if encode_message(done[1]) != sent:
                continue
            self.meter.add(rnd, cid, "down", msg.category, len(sent))
            self.meter.replied(rnd, cid, done[2], len(encode_message(done[2])))
            served[cid] = done[2]
        return served

    def _push(self, messages: Mapping[int, Message], rnd: int,
              requests: Mapping[int, Message],
              resend: bool = False) -> tuple[dict[str, int], dict[int, str]]:
        out: list[FlowerMessage] = []
        cids = sorted(messages)
        for cid in cids:
            msg = messages[cid]
            if not resend:  # a resent message keeps its number: the site restores seq - 1
                self._evaluated.pop(cid, None)  # its state changes with this message
                self.seq[cid] += 1
                self.meter.add(rnd, cid, "down", msg.category, len(encode_message(msg)))
            out.append(FlowerMessage(to_record_dict(msg, requests.get(cid), cid=cid,
                                                    round=rnd, seq=self.seq[cid]),
                                     dst_node_id=self.node_of[cid],
                                     message_type=flower_message_type(msg),
                                     group_id=str(rnd)))
        counted = self.flower_bytes.setdefault(rnd, [0, 0])
        counted[0] += sum(flower_bytes(m) for m in out)
        ids = list(self.grid.push_messages(out)) if out else []
        pending = {mid: cid for mid, cid in zip(ids, cids, strict=True) if mid}
        failed = {cid: "the SuperLink refused the message" for mid, cid
                  in zip(ids, cids, strict=True) if not mid}
        return pending, failed

    def _pull(self, ids: list[str], deadline: float) -> tuple[list[FlowerMessage], list[str]]:
        """Flower's ``pull_messages``, one message id per call: the replies that came, and the
        ids whose pull had not returned by ``deadline`` (plus ``pull_grace``).

        Flower retries the pull of a reply's objects without a time limit; a site that
        pushed part of its reply and then left (SIGTERM while replying) once hung the run
        until the launcher's timeout. The pulls run in a daemon thread, abandoned at the
        deadline (its retries end with the process). One id per call because the SuperLink
        deletes every reply a ``PullMessages`` returns before their objects are fetched: a
        pull of the whole round that hung on one reply lost every other reply of the batch
        (healthy sites were dropped with the one that left). Now only the hung id is lost;
        the ids after it are pulled by a fresh thread."""
        replies: list[FlowerMessage] = []
        hung: list[str] = []
        todo = list(ids)
        while todo:
            box: dict[str, Any] = {"replies": [], "done": 0, "abandoned": False}
            lock = threading.Lock()

            def pull(todo: list[str] = todo, box: dict[str, Any] = box,
                     lock: threading.Lock = lock) -> None:
                try:
                    for mid in todo:
                        got = list(self.grid.pull_messages([mid]))
                        with lock:
                            if box["abandoned"]:  # counted as hung; the rest pulled anew
                                return
                            box["replies"] += got
                            box["done"] += 1
                except BaseException as exc:  # raised again in the run's thread
                    box["error"] = exc

            worker = threading.Thread(target=pull, daemon=True, name="fedlabels-pull")
            worker.start()
            worker.join(max(deadline - time.monotonic(), 0.0) + self.pull_grace)
            with lock:
                box["abandoned"] = worker.is_alive()
                done, got = box["done"], list(box["replies"])
            if "error" in box:
                raise box["error"]
            replies += got
            if not box["abandoned"] or done >= len(todo):
                break
            hung.append(todo[done])
            todo = todo[done + 1:]
        return replies, hung

    def exchange(self, messages: Mapping[int, Message], rnd: int) -> dict[int, Message]:
        """Send one message per client and return the replies of the clients that answered."""
        unknown = sorted(set(messages) - set(self.client_ids))
        if unknown:
            raise FedLabelsError(f"round {rnd + 1}: messages for unknown or lost clients "
                                 f"{unknown}.")
        replies = self._answered(messages, rnd)
        requests = self._requests(messages, rnd)
        pending, failed = self._push({c: m for c, m in messages.items() if c not in replies},
                                     rnd, requests)
        deadline = time.monotonic() + self.reply_timeout
        next_liveness = time.monotonic() + self.liveness_interval
        waiting: dict[int, float] = {}  # clients whose SuperNode left: cid -> give up at
        if self.rejoin_timeout > 0:  # refused: its node may be restarting
            waiting = dict.fromkeys(failed, time.monotonic() + self.rejoin_timeout)
            failed = {}
        while pending or waiting:
            pulled, hung = self._pull(list(pending), deadline) if pending else ([], [])
            for mid in hung:  # Flower's pull of this reply hung past the deadline
                failed[pending.pop(mid)] = (
                    f"no reply within {self.reply_timeout:g} s: Flower's pull of its reply "
                    "did not return (its site may have left while it sent its reply)")
            for reply in pulled:
                key = reply.metadata.reply_to_message_id
                if key not in pending:
                    continue
                cid = pending.pop(key)
                if reply.has_error():
                    if reply.error.code == _NODE_UNAVAILABLE and self.rejoin_timeout > 0:
                        waiting[cid] = time.monotonic() + self.rejoin_timeout
                    else:
                        failed[cid] = error_reason(reply.error.code, reply.error.reason or "")
                    continue
                try:
                    ours, meta = from_record_dict(reply.content)
                except Exception as exc:  # a site's reply is untrusted input
                    failed[cid] = f"malformed reply: {' '.join(str(exc).split())[:300]}"
                    continue
                self.meter.replied(rnd, cid, ours, len(encode_message(ours)))
                self.flower_bytes.setdefault(rnd, [0, 0])[1] += flower_bytes(reply)
                replies[cid] = ours
                if SITE_LEDGER in meta:  # what the site's own ledger says (not verified)
                    self.site_ledgers[cid] = read_report(meta[SITE_LEDGER], rnd)
                answer = attached_message(reply.content)
                if answer is not None and cid in requests:
                    self._evaluated[cid] = (rnd, requests[cid], answer)
            if not pending and not waiting:
                break
            now = time.monotonic()
            if now >= deadline:
                for cid in pending.values():
                    failed[cid] = f"no reply within {self.reply_timeout:g} s"
                for cid in waiting:
                    failed[cid] = (f"its SuperNode left and was not back within "
                                   f"{self.reply_timeout:g} s")
                break
            if now >= next_liveness:
                online = set(self.grid.get_node_ids())
                for mid, cid in list(pending.items()):
                    if self.node_of[cid] not in online:
                        del pending[mid]
                        waiting[cid] = now + self.rejoin_timeout
                back = self._rejoined(waiting, online, rnd)
                more, refused = self._push({c: messages[c] for c in back}, rnd, requests,
                                           resend=True)
                pending.update(more)
                failed.update(refused)
                for cid, until in list(waiting.items()):
                    if cid in back or now >= until:
                        del waiting[cid]
                    if cid not in back and now >= until:
                        failed[cid] = ("its SuperNode is no longer connected to the SuperLink"
                                       + (f" (not back within {self.rejoin_timeout:g} s)"
                                          if self.rejoin_timeout > 0 else ""))
                next_liveness = now + self.liveness_interval
            time.sleep(self.poll_interval)
        failed.update(self._malformed(messages, replies))
        if failed:
            for cid, reason in failed.items():
                self.lost[cid] = {"round": rnd + 1, "node_id": self.node_of[cid],
                                  "reason": reason}
            if self.on_lost is not None:
                self.on_lost(failed, rnd)
        return replies

    def _malformed(self, messages: Mapping[int, Message],
                   replies: dict[int, Message]) -> dict[int, str]:
        """Take the replies the server's check refuses out of ``replies``: client id ->
        ``malformed reply to KIND: ...`` (as the simulator's CheckedGrid)."""
        from fedlabels.method.replies import MalformedReply, lost_reason

        bad: dict[int, str] = {}
        if self.check_reply is None:
            return bad
        for cid in sorted(replies):
            try:
                self.check_reply(cid, messages[cid], replies[cid])
            except MalformedReply as exc:
                bad[cid] = lost_reason(messages[cid], exc)
                del replies[cid]
                self._evaluated.pop(cid, None)
        return bad


_NODE_UNAVAILABLE = 5  # flwr.common.constant.ErrorCode.NODE_UNAVAILABLE
_ERROR_NAMES = {1: "the ClientApp could not be loaded", 2: "the ClientApp raised",
                3: "message unavailable", 4: "reply unavailable",
                5: "its SuperNode is unavailable", 8: "the ClientApp crashed"}


def error_reason(code: int, reason: str) -> str:
    """A Flower error reply as one readable line (the exception text, without its class)."""
    match = re.fullmatch(r"<class '([\w.]+)'>:<'(.*)'>", reason, flags=re.DOTALL)
    if match:
        kind = match.group(1).rsplit(".", 1)[-1]
        text = match.group(2) if kind == "FedLabelsError" else f"{kind}: {match.group(2)}"
    else:
        text = reason
    return f"{_ERROR_NAMES.get(code, f'Flower error {code}')}: {text}"
