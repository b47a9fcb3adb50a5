"""Flower adapters without processes: message conversion, and the real ServerApp loop and
ClientApp over an in-process Flower Grid (state through ``context.state`` only)."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import numpy as np
import pytest
from flwr.app import Context, RecordDict
from flwr.common.serde import (
    context_from_proto,
    context_to_proto,
    recorddict_from_proto,
    recorddict_to_proto,
)

from fedlabels.api import load_federation, run_config
from fedlabels.comm import Message, pack_labels
from fedlabels.consensus import majority_vote
from fedlabels.core.errors import FedLabelsError, error_category
from fedlabels.core.randomness import reproducible
from fedlabels.engines.flower.client_app import app as deployed_client_app
from fedlabels.engines.flower.convert import (
    flower_message_type,
    from_record_dict,
    to_record_dict,
)
from fedlabels.engines.flower.loopback import LoopbackGrid, loopback_deployment, server_context
from fedlabels.engines.flower.prepare import PreparedRun, prepare_run
from fedlabels.engines.flower.server_app import ClientsLost, run_server, server_state_path
from fedlabels.engines.flower.site_state import STATE_RECORDS, state_from_records, state_to_records
from fedlabels.engines.flower.spec import RUN_CONFIG_KEY, DeploySpec
from fedlabels.results import load_result
from fedlabels.runs.config import RunConfig


def _wire(content: RecordDict) -> RecordDict:
    return recorddict_from_proto(recorddict_to_proto(content))


def test_message_round_trip_through_flower_records() -> None:
    labels = np.array([0, 2, 1, 2, 0], dtype=np.int64)
    msg = Message("fedct.labels", arrays={
        "labels": pack_labels(labels, 3),
        "weights": np.arange(6, dtype=np.float32).reshape(2, 3)[:, ::2],  # non-contiguous
        "scalar": np.array(7, dtype=np.int16),
        "mask": np.array([True, False, True]),
    }, config={"round": 3, "steps": 50, "eps": 0.5, "tag": "x", "flag": True},
        category="evaluation")
    content = _wire(to_record_dict(msg, cid=2, round=3))
    back, meta = from_record_dict(content)
    assert meta == {"cid": 2, "round": 3}
    assert (back.kind, back.category, back.config) == (msg.kind, msg.category, msg.config)
    assert {k: type(v) for k, v in back.config.items()} == \
        {k: type(v) for k, v in msg.config.items()}
    assert set(back.arrays) == set(msg.arrays)
    for name, value in msg.arrays.items():
        assert back.arrays[name].dtype == value.dtype
        np.testing.assert_array_equal(back.arrays[name], value)
    assert flower_message_type(msg) == "evaluate.fedct_labels"
    assert flower_message_type(Message("fedct.train")) == "train.fedct_train"
    assert flower_message_type(Message("fedlabels.hello", category="control")) == \
        "query.fedlabels_hello"


def test_foreign_flower_message_is_rejected() -> None:
    with pytest.raises(FedLabelsError, match="no fedlabels header"):
        from_record_dict(RecordDict())


def test_client_state_travels_as_plain_records() -> None:
    """Arrays in an ArrayRecord, scalars in a ConfigRecord, None keys named apart; the
    SuperNode's own (protobuf) storage of the context gives back the same values and types."""
    state = {
        "w": np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2],  # non-contiguous
        "key": np.frombuffer(b"\x00\xffsecret", dtype=np.uint8),
        "mask": np.array([True, False]),
        "count": np.array(7, dtype=np.int64),
        "names": np.array(["a", "bc"]),
        "fitted": True, "round": 3, "rate": 0.25, "nan": float("nan"), "rng": '{"s": 1}',
        "pseudo_index": None, "learner.step": 40,
    }
    records = state_to_records(state)
    assert set(records) == set(STATE_RECORDS)
    ctx = Context(run_id=1, node_id=2, node_config={}, state=RecordDict(records),
                  run_config={})
    back = state_from_records(context_from_proto(context_to_proto(ctx)).state)
    assert set(back) == set(state)
    for key, value in state.items():
        if isinstance(value, np.ndarray):
            assert back[key].dtype == value.dtype
            np.testing.assert_array_equal(back[key], value)
        elif isinstance(value, float) and np.isnan(value):
            assert np.isnan(back[key])
        else:
            assert back[key] == value and type(back[key]) is type(value)
    assert state_from_records(RecordDict()) is None
    with pytest.raises(FedLabelsError, match="incomplete"):
        state_from_records(RecordDict({STATE_RECORDS[0]: records[STATE_RECORDS[0]]}))
    with pytest.raises(FedLabelsError, match="'bad' is a dict"):
        state_to_records({"bad": {}})


def test_spec_with_unknown_keys_is_rejected() -> None:
    spec = DeploySpec(run={**RunConfig().to_dict(), "quorum": 1.0})
    with pytest.raises(FedLabelsError, match=r"unknown key\(s\) \['quorum'\]; valid keys"):
        _ = spec.config
    with pytest.raises(FedLabelsError, match=r"unknown key\(s\) \['nodes'\]"):
        DeploySpec.from_run_config({RUN_CONFIG_KEY: json.dumps({"run": {}, "nodes": 3})})


def _deploy(tmp_path: Path, cfg: RunConfig, **grid_kw: object) -> tuple[DeploySpec,
                                                                          PreparedRun,
                                                                          LoopbackGrid]:
    prepared, grid = loopback_deployment(cfg, tmp_path / "sites", **grid_kw)
    return prepared.spec, prepared, grid


def _same_rounds(deployed: object, simulated: object) -> None:
    assert len(deployed.rounds) == len(simulated.rounds)
    for d, s in zip(deployed.rounds, simulated.rounds, strict=True):
        assert d.accuracies == s.accuracies
        assert {k: v for k, v in d.server.items() if k != "clients_alive"} == s.server
        assert (d.bytes_up, d.bytes_down) == (s.bytes_up, s.bytes_down)


def test_fedct_over_loopback_flower_equals_simulator(tmp_path: Path) -> None:
    cfg = RunConfig(method="fedct", dataset="breast_cancer", clients=3, model="dt", rounds=3,
                    seed=4)
    spec, _, grid = _deploy(tmp_path, cfg)
    deployed = run_server(grid, server_context(spec))
    simulated = run_config(cfg)
    _same_rounds(deployed, simulated)
    assert deployed.final == simulated.final
    fed = load_federation("breast_cancer", clients=3, seed=4)
    votes = np.stack([m.predict(fed.X_public) for m in simulated.client_models])
    with np.load(server_state_path(spec.output)) as state:
        np.testing.assert_array_equal(state["labels"], majority_vote(votes, fed.n_classes))
    # computed from the sites' private data: owner-only, as a run's models file (was 0644)
    assert server_state_path(spec.output).stat().st_mode & 0o777 == 0o600
    assert not list(server_state_path(spec.output).parent.glob(".*tmp*"))
    # the client state lives only in context.state, as plain arrays and scalars
    for ctx in grid.contexts.values():
        assert all(name in ctx.state for name in STATE_RECORDS)
    written = load_result(spec.output)
    assert written.final == simulated.final
    assert json.loads(Path(spec.status).read_text())["status"] == "completed"
    assert written.extra["deployment"]["lost"] == {}
    # config.engine names the engine that ran (it said 'simulator'); the rest is the run's
    assert written.config["engine"] == written.extra["deployment"]["engine"] == "flower"
    assert simulated.config["engine"] == "simulator"
    assert {k: v for k, v in written.config.items() if k != "engine"} == \
        {k: v for k, v in simulated.config.items() if k != "engine"}


def test_fedavg_over_loopback_flower_equals_simulator(tmp_path: Path) -> None:
    cfg = RunConfig(method="fedavg", dataset="breast_cancer", clients=3,
                    model="mlp(hidden=16)", rounds=2, period=5, seed=1)
    spec, _, grid = _deploy(tmp_path, cfg)
    deployed = run_server(grid, server_context(spec))
    simulated = run_config(cfg)
    _same_rounds(deployed, simulated)
    with np.load(server_state_path(spec.output)) as state:
        assert state["weights"].dtype == np.float32


def test_lost_client_is_reported_and_run_continues(tmp_path: Path) -> None:
    cfg = RunConfig(method="fedct", dataset="breast_cancer", clients=4, model="dt", rounds=3,
                    seed=0)
    # node 3 answers hello and round-1 train (its evaluation rides along), then vanishes
    spec, _, grid = _deploy(tmp_path, cfg, die_after={3: 2})
    result = run_server(grid, server_context(spec))
    dep = result.extra["deployment"]
    assert dep["status"] == "completed"
    assert dep["lost"]["3"]["round"] == 2
    assert "no longer connected" in dep["lost"]["3"]["reason"]
    assert dep["alive_per_round"] == [[0, 1, 2, 3], [0, 1, 2], [0, 1, 2]]
    assert [len(r.accuracies) for r in result.rounds] == [4, 3, 3]
    from fedlabels.results.caveats import run_warnings  # said under the table, not only mid-run

    assert any(w.startswith("lost client 3 in round 2: the final figures are those of the 3 "
                            "of 4 clients left") for w in run_warnings(result))
    assert result.rounds[1].bytes_up[3] == 0 and result.rounds[0].bytes_up[3] > 0


def test_too_few_clients_left_stops_and_keeps_partial_results(tmp_path: Path) -> None:
    cfg = RunConfig(method="fedct", dataset="breast_cancer", clients=3, model="dt", rounds=4,
                    seed=0)
    # node 1 stays "connected" but stops answering in round 2: only the timeout catches it
    spec, _, grid = _deploy(tmp_path, cfg, hang_after={1: 2}, reply_timeout=0.3)
    with pytest.raises(ClientsLost, match=r"client 1 .*no reply within 0.3 s.*at least 3"):
        run_server(grid, server_context(spec))
    status = json.loads(Path(spec.status).read_text())
    assert status["status"] == "stopped" and status["rounds_done"] == 1
    partial = load_result(spec.output)
    assert len(partial.rounds) == 1
    assert partial.extra["deployment"]["status"] == "stopped"
    assert "too few" in partial.extra["deployment"]["error"]


def test_site_without_data_file_is_named(tmp_path: Path,
                                         caplog: pytest.LogCaptureFixture) -> None:
    """The server names the site and the error's category; the site's log has the text."""
    cfg = RunConfig(method="fedct", dataset="breast_cancer", clients=3, model="dt", rounds=1)
    spec, _, grid = _deploy(tmp_path, cfg)
    grid.contexts[1002].node_config["data-path"] = str(tmp_path / "missing.npz")
    with caplog.at_level("ERROR", logger="fedlabels.site"), \
            pytest.raises(FedLabelsError, match=r"node 1002: .*error: data") as err:
        run_server(grid, server_context(spec))
    assert "missing.npz" not in str(err.value)
    assert re.search(r"partition-id=1 .*missing.npz.* does not exist", caplog.text)
    assert json.loads(Path(spec.status).read_text())["status"] == "failed"


def test_site_with_features_not_matching_u_is_named(tmp_path: Path,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    cfg = RunConfig(method="fedct", dataset="breast_cancer", clients=3, model="dt", rounds=1)
    spec, prepared, grid = _deploy(tmp_path, cfg)
    bad = tmp_path / "bad.npz"
    with np.load(prepared.client_paths[2]) as data:
        np.savez(bad, X=data["X"][:, :5], y=data["y"])
    grid.contexts[1003].node_config["data-path"] = str(bad)
    with caplog.at_level("ERROR", logger="fedlabels.site"), \
            pytest.raises(FedLabelsError, match=r"node 1003: .*error: data"):
        run_server(grid, server_context(spec))
    assert re.search(r"partition-id=2 .*\(5,\).* U has 30 features", caplog.text)


def test_duplicate_partition_ids_are_rejected(tmp_path: Path) -> None:
    cfg = RunConfig(method="fedct", dataset="breast_cancer", clients=3, model="dt", rounds=1)
    spec, _, grid = _deploy(tmp_path, cfg)
    grid.contexts[1003].node_config["partition-id"] = 0
    with pytest.raises(FedLabelsError, match="both have partition-id=0"):
        run_server(grid, server_context(spec))


def test_csv_site_matches_npz_site(tmp_path: Path) -> None:
    """A site that brings raw CSV rows gets the same standardised data as its .npz file."""
    import pandas as pd
    from sklearn.datasets import load_breast_cancer

    from fedlabels.engines.flower.site import load_site

    cfg = RunConfig(method="fedct", dataset="breast_cancer", clients=3, model="dt", rounds=1)
    prepared = prepare_run(cfg, tmp_path / "sites")
    with np.load(prepared.shared_path) as shared:
        mean, std, names = shared["scale_mean"], shared["scale_std"], shared["feature_names"]
        classes = shared["class_names"]
    npz_site = load_site(prepared.node_settings(0))
    raw = npz_site.private.X.astype(np.float64) * std + mean
    frame = pd.DataFrame(raw, columns=[str(n) for n in names])
    frame["label"] = classes[npz_site.private.y]
    frame.to_csv(tmp_path / "site0.csv", index=False)
    csv_site = load_site({"partition-id": 0, "data-path": str(tmp_path / "site0.csv"),
                          "target": "label", "shared-path": str(prepared.shared_path)})
    np.testing.assert_array_equal(csv_site.private.y, npz_site.private.y)
    np.testing.assert_allclose(csv_site.private.X, npz_site.private.X, atol=1e-5)
    assert load_breast_cancer().data.shape[1] == len(names)
    # a header naming a column twice: pandas would read the second as 'mean radius.1'
    pd.concat([frame, frame.iloc[:, :1] + 1.0], axis=1).to_csv(tmp_path / "site0.csv",
                                                                index=False)
    with pytest.raises(FedLabelsError, match=r"partition-id=0.*'mean radius' more than once"):
        load_site({"partition-id": 0, "data-path": str(tmp_path / "site0.csv"),
                   "target": "label", "shared-path": str(prepared.shared_path)})
    # a cell that is not a number (a decimal comma): a bare ValueError before, which the
    # coordinator saw as error: internal; now one line naming the column, row and value
    texts = frame.astype(object)
    texts.loc[2, "mean texture"] = "12,5"
    texts.to_csv(tmp_path / "site0.csv", index=False)
    with pytest.raises(FedLabelsError, match=r"partition-id=0: CSV .*site0\.csv column "
                                             r"'mean texture' holds '12,5' in data row 3, "
                                             r"not a number") as refused:
        load_site({"partition-id": 0, "data-path": str(tmp_path / "site0.csv"),
                   "target": "label", "shared-path": str(prepared.shared_path)})
    assert error_category(refused.value) == "error: data"


def test_centralized_cannot_be_deployed(tmp_path: Path) -> None:
    cfg = RunConfig(method="centralized", dataset="breast_cancer", clients=3, rounds=1)
    with pytest.raises(FedLabelsError, match="into 1 client role"):
        prepare_run(cfg, tmp_path)


def test_missing_run_config_is_explained() -> None:
    ctx = Context(run_id=1, node_id=1, node_config={}, state=RecordDict(), run_config={})
    with pytest.raises(FedLabelsError, match="no 'fedlabels' entry"):
        DeploySpec.from_run_config(dict(ctx.run_config))


def test_dp_fedct_over_loopback_flower_equals_simulator(tmp_path: Path) -> None:
    """DP-FedCT (a FedCT subclass with a noisy label step) runs through the same adapter."""
    cfg = RunConfig(method="dp-fedct", dataset="breast_cancer", clients=3, model="dt",
                    rounds=2, seed=2, options={"epsilon": 1.0, "mechanism": "xor"})
    spec, _, grid = _deploy(tmp_path, cfg)
    with reproducible(2):  # the DP noise is secret (OS entropy): compare on one test stream
        deployed = run_server(grid, server_context(spec))
    with reproducible(2):
        simulated = run_config(cfg)
    _same_rounds(deployed, simulated)
    privacy = dict(deployed.extra["privacy"])
    sites = privacy.pop("site_ledgers")  # the sites' own word, beside the coordinator's
    assert privacy == json.loads(json.dumps(simulated.extra["privacy"]))
    assert sites["disagreements"] == [] and len(sites["sites"]) == 3


@pytest.mark.parametrize("method", ["fedavg", "fedct"])
def test_non_square_images_deploy_as_they_simulate(tmp_path: Path, method: str) -> None:
    """Images 12 x 10 (not square): every party builds its CNN for the federation's image
    shape, which the sites read from shared.npz and the server from their hello."""
    from test_image_data import make_folder

    make_folder(tmp_path / "imgs", sizes=(12, 15, 18))  # RGB, 12 high, 10 wide
    cfg = RunConfig(method=method, dataset=f"imagefolder:{tmp_path / 'imgs'}", clients=3,
                    model="cnn(arch=small)", rounds=2, period=4, seed=2)
    spec, _, grid = _deploy(tmp_path, cfg)
    deployed = run_server(grid, server_context(spec))
    simulated = run_config(cfg)
    assert simulated.federation["image_shape"] == [3, 12, 10]
    _same_rounds(deployed, simulated)
    assert deployed.final == simulated.final


def test_a_hung_pull_loses_only_its_own_reply(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The SuperLink deletes every reply a ``PullMessages`` returns before Flower fetches
    their objects: when the fetch of one reply never ended (its site left mid-reply), one
    pull of the whole round lost the healthy sites' replies with it, and the run stopped
    with every client lost. Each reply is pulled on its own now: only that site is lost."""
    import threading

    cfg = RunConfig(method="fedct", dataset="breast_cancer", clients=4, model="dt", rounds=3,
                    seed=0)
    spec, _, grid = _deploy(tmp_path, cfg, reply_timeout=0.5)
    release = threading.Event()
    pull = LoopbackGrid.pull_messages

    def taken_then_hung(self, message_ids):  # type: ignore[no-untyped-def]
        replies = list(pull(self, message_ids))  # off the SuperLink, as PullMessages does
        status = Path(spec.status)
        done = json.loads(status.read_text()).get("rounds_done", 0) if status.exists() else 0
        if done >= 1 and any(r.metadata.src_node_id == 1003 for r in replies):
            release.wait(60)  # node 1003's objects never come: Flower retries
        return replies

    monkeypatch.setattr(LoopbackGrid, "pull_messages", taken_then_hung)
    try:
        result = run_server(grid, server_context(spec))
    finally:
        release.set()
    dep = result.extra["deployment"]
    assert dep["status"] == "completed"
    assert list(dep["lost"]) == ["2"] and dep["lost"]["2"]["round"] == 2
    assert "pull of its reply did not return" in dep["lost"]["2"]["reason"]
    assert dep["alive_per_round"] == [[0, 1, 2, 3], [0, 1, 3], [0, 1, 3]]


def test_the_server_checks_the_image_shape_the_sites_hello_names() -> None:
    from fedlabels.engines.flower.server_app import hello_image_shape

    assert hello_image_shape("", 784) is None and hello_image_shape(None, 784) is None
    assert hello_image_shape("3-12-10", 360) == (3, 12, 10)
    for bad in ("3-12", "3-12-10-1", "3-x-10", "0-12-30", "3--10", "-3-12-10"):
        with pytest.raises(FedLabelsError, match="expected C-H-W") as info:
            hello_image_shape(bad, 360)
        assert "\n" not in str(info.value)
    with pytest.raises(FedLabelsError, match="rows of 784 features"):
        hello_image_shape("3-12-10", 784)


def test_a_pull_that_flower_never_ends_stops_the_run_at_the_deadline(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Flower retries the pull of a reply's objects without a time limit (a site stopped
    while it pushed its reply): the run once hung until the launcher's timeout (an hour).
    Now the replies of that pull are lost at the reply deadline: here every client's, so the
    run stops at once, saying why, with its completed rounds kept for a resume."""
    import threading
    import time

    from fedlabels.engines.flower.server_app import ClientsLost

    cfg = RunConfig(method="fedct", dataset="breast_cancer", clients=3, model="dt", rounds=3,
                    seed=0)
    spec, _, grid = _deploy(tmp_path, cfg, reply_timeout=0.5)
    release = threading.Event()
    pull = LoopbackGrid.pull_messages

    def hanging(self, message_ids):  # type: ignore[no-untyped-def]
        replies = list(pull(self, message_ids))
        status = Path(spec.status)
        done = json.loads(status.read_text()).get("rounds_done", 0) if status.exists() else 0
        if done >= 1 and replies:
            release.wait(60)  # as Flower's pull_objects retrying forever
        return replies

    monkeypatch.setattr(LoopbackGrid, "pull_messages", hanging)
    started = time.monotonic()
    try:
        with pytest.raises(ClientsLost, match="Flower's pull of its reply did not return"):
            run_server(grid, server_context(spec))
    finally:
        release.set()
    assert time.monotonic() - started < 30  # not the 60 s the pull would have taken
    status = json.loads(Path(spec.status).read_text())
    assert status["status"] == "stopped" and status["rounds_done"] == 1


def test_a_new_run_of_an_app_keeps_the_result_an_earlier_run_wrote(tmp_path: Path) -> None:
    # found by submitting one prepared app twice (`flwr run` again): the second ServerApp
    # replaced the first run's result, status and checkpoint; now it refuses to start,
    # leaving every byte of them, unless the app was written with --overwrite
    cfg = RunConfig(method="fedct", dataset="breast_cancer", clients=3, model="dt",
                    rounds=1, seed=0)
    prepared, grid = loopback_deployment(cfg, tmp_path / "sites")
    spec = dataclasses.replace(prepared.spec, overwrite=False)  # as deploy prepare writes it
    assert run_server(grid, server_context(spec)) is not None
    kept = {p: p.read_bytes() for p in Path(spec.output).parent.glob("result*")}
    assert Path(spec.output) in kept and Path(spec.status) in kept
    with pytest.raises(FedLabelsError, match=r"result\.json exists: an earlier run of this "
                                             r"app wrote it.*--overwrite"):
        run_server(grid, server_context(spec, run_id=43))
    assert {p: p.read_bytes() for p in Path(spec.output).parent.glob("result*")} == kept
    again = dataclasses.replace(spec, overwrite=True)  # --overwrite: the user asked
    nodes = [prepared.node_settings(c) for c in range(cfg.clients)]
    rerun = LoopbackGrid(deployed_client_app, nodes, {RUN_CONFIG_KEY: again.to_json()})
    assert run_server(rerun, server_context(again)) is not None


def test_a_csv_site_may_name_a_class_by_its_documented_meaning(tmp_path: Path) -> None:
    """breast_cancer's classes are 0/1; scikit-learn documents them as malignant/benign, and
    a site's CSV with those names maps them to the same indices. An unknown label is refused
    naming every accepted label; a shared file without the meanings accepts the codes only."""
    import pandas as pd
    from sklearn.datasets import load_breast_cancer

    from fedlabels.engines.flower.site import label_lookup, load_site

    cfg = RunConfig(method="fedct", dataset="breast_cancer", clients=3, model="dt", rounds=1)
    prepared = prepare_run(cfg, tmp_path / "sites")
    with np.load(prepared.shared_path) as npz:
        shared = {k: npz[k] for k in npz.files}
    npz_site = load_site(prepared.node_settings(0))
    raw = npz_site.private.X.astype(np.float64) * shared["scale_std"] + shared["scale_mean"]
    frame = pd.DataFrame(raw, columns=[str(n) for n in shared["feature_names"]])
    meanings = load_breast_cancer().target_names  # the oracle: scikit-learn's own names
    frame["label"] = meanings[npz_site.private.y]
    assert set(frame["label"]) == {"malignant", "benign"}
    csv = tmp_path / "site0.csv"
    frame.to_csv(csv, index=False)
    node = {"partition-id": 0, "data-path": str(csv), "target": "label",
            "shared-path": str(prepared.shared_path)}
    np.testing.assert_array_equal(load_site(node).private.y, npz_site.private.y)
    frame.loc[0, "label"] = "Benign"
    frame.to_csv(csv, index=False)
    with pytest.raises(FedLabelsError, match=r"\['Benign'\] .* one of '0' or 'malignant', "
                                             r"'1' or 'benign'\.$"):
        load_site(node)
    del shared["class_descriptions"]  # a shared file that does not carry them
    np.savez(tmp_path / "old_shared.npz", **shared)
    frame["label"] = meanings[npz_site.private.y]
    frame.to_csv(csv, index=False)
    with pytest.raises(FedLabelsError, match=r"write each label as one of '0', '1'\.$"):
        load_site({**node, "shared-path": str(tmp_path / "old_shared.npz")})
    # a meaning that is another class's name, or describes two classes, names none
    lookup, _ = label_lookup({"class_names": np.array(["0", "1", "2"]),
                              "class_descriptions": np.array(["1", "x", "x"])})
    assert lookup == {"0": 0, "1": 1, "2": 2}
