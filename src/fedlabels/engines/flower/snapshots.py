"""A site's client state on its own disk, so a run can go on in a new Flower run or node.

``context.state`` lives in the SuperNode's memory and is scoped to one Flower run: it is gone
when the SuperNode restarts, and a run resumed after a ServerApp or SuperLink crash is a new
Flower run. So, when the node config names a ``state-dir`` (a directory only the site can
write), the ClientApp also keeps the role's state after each message there, and restores from
it when ``context.state`` has none:

* the server numbers the messages to each client (``seq`` 1, 2, ...; the count is in the
  ServerApp's checkpoint), and a message with ``seq = s`` needs the state after message
  ``s - 1``;
* a snapshot is ``<state-dir>/<run key>/seq_<s>_r<round>.checkpoint.npz`` in the engine's
  checkpoint format (:mod:`fedlabels.runs.checkpoint`: an ``.npz`` read without pickle),
  sealed with the site's HMAC key (:mod:`.site_state`), written atomically, 0600 in 0700
  directories;
* the run key is a fingerprint of the run's settings, so another run never reads it;
* kept: every snapshot of the current round, and the newest of earlier rounds (what a resume
  from the last checkpointed round needs); older ones are deleted.

Like ``context.state`` it holds the role's state only: no private rows, no copy of U.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from fedlabels.core.errors import FedLabelsError
from fedlabels.engines.flower.site_state import state_mac
from fedlabels.engines.flower.spec import DeploySpec
from fedlabels.method.state import State, StateValue
from fedlabels.runs.checkpoint import load_checkpoint, write_checkpoint

_NAME = re.compile(r"seq_(\d+)_r(\d+)\.checkpoint\.npz")


def run_key(spec: DeploySpec) -> str:
    """A fingerprint of the run (its settings, not the ``resume`` flag, nor whether the
    output path was given as a run setting: ``deploy local`` without ``--output`` writes to
    a default name, and its resume, which needs ``--output``, found no site's state)."""
    data = {**asdict(spec), "resume": False, "run": {**spec.run, "output": None}}
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def run_dir(node_config: Mapping[str, Any], spec: DeploySpec) -> Path | None:
    """This run's snapshot directory at this site; None without a ``state-dir``."""
    given = node_config.get("state-dir")
    return Path(str(given)).expanduser() / run_key(spec) if given else None


def _saved(folder: Path) -> dict[int, tuple[int, Path]]:
    """seq -> (round, path) of the snapshots in ``folder``."""
    found = {}
    for path in folder.iterdir() if folder.is_dir() else []:
        match = _NAME.fullmatch(path.name)
        if match is not None:
            found[int(match.group(1))] = (int(match.group(2)), path)
    return found


def last_seq(folder: Path | None) -> int | None:
    """The number of the last message whose state ``folder`` keeps (None: none)."""
    saved = _saved(folder) if folder is not None else {}
    return max(saved) if saved else None


def save_snapshot(folder: Path, seq: int, rnd: int, state: Mapping[str, StateValue],
                  partition_id: int, key: bytes) -> None:
    """Keep the state after message ``seq`` (of round ``rnd``); prune old snapshots."""
    folder.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # the site's only
    folder.mkdir(mode=0o700, exist_ok=True)
    plain = dict(state)
    meta = {"seq": seq, "round": rnd, "partition_id": partition_id,
            "hmac": state_mac(plain, partition_id, key)}
    write_checkpoint(folder / f"seq_{seq}_r{rnd}.checkpoint.npz", meta, plain, {}, key)
    older = sorted((s, path) for s, (r, path) in _saved(folder).items() if r < rnd and s < seq)
    for _, path in older[:-1]:  # the newest of earlier rounds stays
        path.unlink(missing_ok=True)


def load_snapshot(folder: Path | None, seq: int, partition_id: int, key: bytes) -> State:
    """The state after message ``seq``, checked against the site's key."""
    if folder is None:
        raise FedLabelsError(
            f"partition-id {partition_id} has no state for this run (its SuperNode restarted "
            "or the run was resumed) and keeps none on disk; start the SuperNode with "
            "--node-config '... state-dir=/a/private/dir' to let it rejoin.")
    saved_as = _saved(folder).get(seq)
    if saved_as is None:
        raise FedLabelsError(f"partition-id {partition_id} has no saved state after message "
                             f"{seq} of this run in {folder}; it cannot rejoin this run.")
    path = saved_as[1]
    saved = load_checkpoint(path, key)
    state = saved.server
    if int(saved.meta.get("partition_id", -1)) != partition_id or not hmac.compare_digest(
            str(saved.meta.get("hmac", "")), state_mac(state, partition_id, key)):
        raise FedLabelsError(f"the saved state {path} failed its integrity check (HMAC under "
                             "the site's state key); refusing it.")
    return state
