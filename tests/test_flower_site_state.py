"""The ClientApp's stored state: sealed with the site's key, and free of private rows and U.

Every deployable method runs over the loopback grid (the real ClientApp, Flower's protobuf
storage of ``context.state``); after every message the serialised state is searched for the
bytes of each private row and each row of U (float32 as the site files hold them, and
float64).
"""

from __future__ import annotations

import json
import stat
from pathlib import Path

import numpy as np
import pytest
from flwr.app import Context, Message, RecordDict
from flwr.common.serde import context_from_proto, context_to_proto, recorddict_to_proto

from fedlabels.core.errors import FedLabelsError
from fedlabels.core.private_files import KEY_BYTES
from fedlabels.core.randomness import reproducible
from fedlabels.engines.flower import site_state
from fedlabels.engines.flower.client_app import app as client_app
from fedlabels.engines.flower.loopback import loopback_deployment, server_context
from fedlabels.engines.flower.server_app import run_server
from fedlabels.methods import METHODS
from test_method_contract import CASES, SEED, Case

STATE = {"labels": np.array([0, 2, 1], dtype=np.int8), "rounds": 3, "rate": 0.5,
         "fitted": True, "name": "x", "rng": None, "w": np.zeros((2, 0), dtype=np.float32)}


def _stored(records: RecordDict) -> RecordDict:
    """``records`` after Flower's own (protobuf) storage of a context."""
    ctx = Context(run_id=1, node_id=2, node_config={}, state=records, run_config={})
    return context_from_proto(context_to_proto(ctx)).state


def test_sealed_state_round_trips_and_tampering_is_refused(tmp_path: Path) -> None:
    key = site_state.site_key(tmp_path / "site.key")
    records = RecordDict()
    site_state.save_state(STATE, records, 1, key)
    back = site_state.load_state(_stored(records), 1, key)
    assert back is not None and back.keys() == STATE.keys()
    np.testing.assert_array_equal(back["labels"], STATE["labels"])
    assert back["labels"].dtype == np.int8 and back["w"].shape == (2, 0)
    assert [type(back[k]) for k in ("rounds", "rate", "fitted", "name")] == \
        [int, float, bool, str] and back["rng"] is None

    tampered = _stored(records)
    labels = tampered[site_state.STATE_ARRAYS]["labels"].numpy().copy()
    labels[0] = 1
    tampered[site_state.STATE_ARRAYS] = site_state.state_to_records(
        {**STATE, "labels": labels})[site_state.STATE_ARRAYS]
    with pytest.raises(FedLabelsError, match="integrity check"):
        site_state.load_state(tampered, 1, key)
    renamed = _stored(records)
    renamed[site_state.STATE_SCALARS]["name"] = "y"
    with pytest.raises(FedLabelsError, match="integrity check"):
        site_state.load_state(renamed, 1, key)
    with pytest.raises(FedLabelsError, match="integrity check"):  # another site's state
        site_state.load_state(_stored(records), 2, key)
    other_key = site_state.site_key(tmp_path / "other.key")
    with pytest.raises(FedLabelsError, match="integrity check"):
        site_state.load_state(_stored(records), 1, other_key)
    unsealed = _stored(records)
    del unsealed[site_state.STATE_MAC]
    with pytest.raises(FedLabelsError, match="no integrity tag"):
        site_state.load_state(unsealed, 1, key)


def test_site_key_is_private_and_stable(tmp_path: Path) -> None:
    path = tmp_path / "keys" / "state.key"
    key = site_state.site_key(path)
    assert len(key) == KEY_BYTES
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    # the folder made for it too (0755 before: a site following the docs' state-key path)
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert site_state.site_key(path) == key  # made once, then read
    path.chmod(0o644)
    with pytest.raises(FedLabelsError, match="chmod 600"):
        site_state.site_key(path)
    from fedlabels.engines.flower.site_privacy import key_path

    assert key_path({"state-key": str(path)}) == path


def test_tampered_state_stops_the_clientapp(tmp_path: Path,
                                            caplog: pytest.LogCaptureFixture) -> None:
    from fedlabels.runs.config import RunConfig

    cfg = RunConfig(method="fedct", dataset="breast_cancer", clients=3, model="dt",
                    rounds=1, seed=0)
    prepared, grid = loopback_deployment(cfg, tmp_path / "sites")
    assert run_server(grid, server_context(prepared.spec)) is not None
    ctx = grid.contexts[1001]
    scalars = ctx.state[site_state.STATE_SCALARS]
    scalars["fitted"] = not scalars["fitted"]
    from fedlabels.comm import Message as FLMessage
    from fedlabels.engines.flower.convert import to_record_dict

    record = next(Path(ctx.node_config["ledger-dir"]).glob("*/runs/*.json"))
    last = json.loads(record.read_text())["body"]["last"]  # the site's own count
    # round 0: within the site's plan of 1 round (a later round is refused first)
    msg = Message(to_record_dict(FLMessage("evaluate", category="evaluation"), cid=0, round=0,
                                 seq=last + 1),
                  dst_node_id=1001, message_type="evaluate.evaluate")
    msg.metadata.__dict__["_message_id"] = "tampered"
    with caplog.at_level("ERROR", logger="fedlabels.site"), \
            pytest.raises(FedLabelsError, match="error: data"):  # the server's view
        client_app(msg, ctx)
    assert "integrity check" in caplog.text  # the site's log


class _RecordingApp:
    """The ClientApp, plus the serialised ``context.state`` after every message."""

    def __init__(self) -> None:
        self.blobs: list[tuple[str, bytes]] = []

    def __call__(self, message: Message, context: Context) -> Message:
        reply = client_app(message, context)
        self.blobs.append((message.metadata.message_type,
                           recorddict_to_proto(context.state).SerializeToString()))
        return reply


def _row_bytes(X: np.ndarray, shared: dict[str, np.ndarray]) -> set[bytes]:
    """Each row's bytes as the site file holds it and with U's z-scoring undone (XCLP's
    ``features=raw``), in float32 and float64."""
    forms = [np.asarray(X, dtype=np.float64)]
    if "scale_mean" in shared:
        forms.append(forms[0] * shared["scale_std"] + shared["scale_mean"])
    return {row.tobytes() for form in forms for dtype in (np.float32, np.float64)
            for row in form.astype(dtype)}


@pytest.mark.parametrize("case", CASES)
def test_stored_state_holds_no_private_rows_and_no_u(case: Case, tmp_path: Path) -> None:
    impl = METHODS[case.method]
    cfg = case.config()
    try:
        prepared, grid = loopback_deployment(cfg, tmp_path / "sites", reply_timeout=60.0)
    except FedLabelsError as exc:
        if "no deployment can do" in str(exc) or "in the simulator" in str(exc):
            pytest.skip(f"{case.method} cannot be deployed: {exc}")
        raise
    recorder = _RecordingApp()
    grid.client_app = recorder
    with reproducible(SEED):
        try:
            assert run_server(grid, server_context(prepared.spec)) is not None
        except FedLabelsError as exc:
            if "in the simulator" in str(exc):  # a method that refuses deployment
                pytest.skip(str(exc))
            raise
    assert recorder.blobs
    with np.load(prepared.shared_path) as npz:
        shared = dict(npz)
    secrets: dict[str, set[bytes]] = {}
    for cid, path in enumerate(prepared.client_paths):
        with np.load(path) as data:
            secrets[f"private row of client {cid}"] = _row_bytes(data["X"], shared)
    if impl.capabilities.uses_public:
        secrets["row of U"] = _row_bytes(shared["X_public"], shared)
    leaks: list[str] = []
    for kind, blob in recorder.blobs:
        for what, rows in secrets.items():
            found = sum(row in blob for row in rows)
            if found:
                leaks.append(f"after {kind}: {found} {what}(s)")
    assert not leaks, f"{case.method}: stored state holds " + "; ".join(leaks[:5])
