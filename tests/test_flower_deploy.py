"""Real Flower deployment on loopback: a SuperLink and SuperNode processes.

Slow by nature (Flower polls every 3 s and starts a process per message), so the runs are
small; each has a hard timeout (generous: on a shared, overloaded 2-core machine one test took
2.5 min) and every process is checked to be gone afterwards.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from fedlabels.api import load_federation, run_config
from fedlabels.consensus import majority_vote
from fedlabels.deploy.launcher import LocalDeployment, deploy_local, read_outcome
from fedlabels.engines.flower.prepare import prepare_run
from fedlabels.engines.flower.server_app import server_state_path
from fedlabels.runs.config import RunConfig

pytestmark = [pytest.mark.slow, pytest.mark.realprocess]


def _processes_in(workdir: Path) -> list[int]:
    """Live processes whose working directory is inside ``workdir`` (Linux /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cwd = os.readlink(entry / "cwd")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and cwd.startswith(str(workdir)):
            found.append(int(entry.name))
    return found


def _wait_gone(workdir: Path, timeout: float = 15.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while (left := _processes_in(workdir)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left


def test_site_settings_reach_every_site(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                        ) -> None:
    """`deploy local --site-config evaluate=false --site-config ledger-epsilon=3`: the real
    SuperNodes get the keys: no site sends a score, and each ledger takes the operator's
    budget (no plan budget recorded)."""
    from fedlabels.cli import main

    out = tmp_path / "r.json"
    assert main(["deploy", "local", "--method", "dp-fedct", "--dataset", "breast_cancer",
                 "--clients", "3", "--model", "dt", "--rounds", "2", "--opt", "epsilon=1",
                 "--opt", "mechanism=xor", "--site-config", "evaluate=false",
                 "--site-config", "ledger-epsilon=3",
                 "--site-config", "report-lifetime=true", "--workdir", str(tmp_path / "w"),
                 "-o", str(out), "--timeout", "400"]) == 0
    written = json.loads(out.read_text())
    assert written["final"] is None
    assert [r["server"]["evaluation_declined"] for r in written["rounds"]] == [3.0, 3.0]
    printed = capsys.readouterr().out
    assert "declined by the sites" in printed
    # what each real site's ledger enforced, as it reported it, beside the coordinator's ε
    assert "sites' own ledgers (reported by the site, not verified by the coordinator): 3 " \
        "of 3 sites reported" in printed
    block = written["privacy"]["site_ledgers"]
    assert block["disagreements"] == []
    for site in block["sites"].values():
        assert (site["releases"], site["budget"], site["budget_from"]) == \
            (2, 3.0, "ledger-epsilon")
        assert site["epsilon"] == pytest.approx(written["privacy"]["epsilon"], rel=1e-9)
    sites = tmp_path / "w" / "sites"
    for cid in range(3):
        assert main(["deploy", "ledger", "--json", "--ledger-dir",
                     str(sites / f"client_{cid}.ledger"), "--state-key",
                     str(sites / f"client_{cid}.state.key")]) == 0
        (row,) = json.loads(capsys.readouterr().out)["datasets"]
        assert row["releases"] == 2 and row["plan_budget"] is None
        assert (row["budget"], row["budget_from"]) == (3.0, "ledger-epsilon")
        assert row["left"] == pytest.approx(3.0 - written["privacy"]["epsilon"], rel=1e-9)
    assert _wait_gone(tmp_path / "w") == []


def test_deployed_fedct_gives_the_simulator_result(tmp_path: Path) -> None:
    cfg = RunConfig(method="fedct", dataset="breast_cancer", clients=3, model="dt", rounds=2,
                    eval_every=2, seed=3)
    out = tmp_path / "deployed.json"
    deployed = deploy_local(cfg, workdir=tmp_path / "work", output=out, reply_timeout=120,
                            node_timeout=60, timeout=400)
    simulated = run_config(cfg)

    assert deployed.final == simulated.final
    for d, s in zip(deployed.rounds, simulated.rounds, strict=True):
        assert d.accuracies == s.accuracies
        assert {k: v for k, v in d.server.items() if k != "clients_alive"} == s.server
        assert (d.bytes_up, d.bytes_down) == (s.bytes_up, s.bytes_down)
    fed = load_federation("breast_cancer", clients=3, seed=3)
    votes = np.stack([m.predict(fed.X_public) for m in simulated.client_models])
    with np.load(server_state_path(out)) as state:
        np.testing.assert_array_equal(state["labels"], majority_vote(votes, fed.n_classes))
    written = json.loads(out.read_text())
    assert written["deployment"]["status"] == "completed"
    # the same settings, the engine named as the one that ran
    assert written["config"] == {**json.loads(json.dumps(simulated.config)), "engine": "flower"}
    assert len(written["deployment"]["client_node_ids"]) == 3
    assert _wait_gone(tmp_path / "work") == []


def test_killed_supernode_is_reported_and_the_rest_continue(tmp_path: Path) -> None:
    # a qualified majority (unanimity) accepts 2 clients, so losing 1 of 3 is survivable;
    # the majority-vote case that must stop is tested in test_flower_adapters (no processes)
    cfg = RunConfig(method="fedct", dataset="breast_cancer", clients=3, model="dt", rounds=2,
                    eval_every=2, seed=0, options={"quorum": 1.0})
    prepared = prepare_run(cfg, tmp_path / "sites", output=tmp_path / "result.json",
                           reply_timeout=120, node_timeout=15)  # wait 15 s for a lost site
    outcome: dict[str, int] = {}
    with LocalDeployment(prepared, tmp_path) as dep:
        dep.start()
        runner = threading.Thread(target=lambda: outcome.update(code=dep.run_app(400)),
                                  daemon=True)
        runner.start()
        status_path = dep.status_path
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            try:
                if json.loads(status_path.read_text()).get("rounds_done", 0) >= 1:
                    break
            except (OSError, ValueError):
                pass
            time.sleep(0.2)
        else:
            pytest.fail("round 1 did not finish in time")
        # the site of client 2 shuts down mid-run (SIGTERM: the SuperNode leaves the link)
        dep.kill_supernode(2, signal.SIGTERM)
        runner.join(timeout=400)
        assert not runner.is_alive(), "the deployed run hung after a SuperNode died"
        result = read_outcome(prepared, outcome["code"], dep.logs)
    lost = result.extra["deployment"]["lost"]
    assert list(lost) == ["2"] and lost["2"]["round"] == 2
    assert "SuperNode" in lost["2"]["reason"]  # left the link, or reported unavailable
    assert result.extra["deployment"]["alive_per_round"] == [[0, 1, 2], [0, 1]]
    assert result.extra["deployment"]["status"] == "completed"
    assert len(result.final["client_accuracies"]) == 2
    assert result.rounds[-1].server["clients_alive"] == 2.0
    assert result.rounds[-1].bytes_up[2] == 0
    assert _wait_gone(tmp_path) == []


def test_deployed_run_on_a_public_set_of_ones_own(tmp_path: Path) -> None:
    """`deploy local` with ``public``: the sites are shipped the file's rows as U (the
    SHA-256 of shared.npz's X_public is the result's, U z-scored by its own statistics),
    no truth file is written, and the result is the simulator's."""
    import hashlib

    import sklearn.datasets

    frame = sklearn.datasets.load_breast_cancer(as_frame=True).frame
    frame.iloc[:300].to_csv(tmp_path / "private.csv", index=False)
    public = frame.iloc[300:].drop(columns=["target"])
    public.to_csv(tmp_path / "public u.csv", index=False)
    cfg = RunConfig(method="fedct", dataset=f"csv:{tmp_path / 'private.csv'}:target",
                    public=str(tmp_path / "public u.csv"), clients=3, model="dt", rounds=2,
                    seed=3)
    out = tmp_path / "deployed.json"
    deployed = deploy_local(cfg, workdir=tmp_path / "work", output=out, reply_timeout=120,
                            node_timeout=60, timeout=400)
    simulated = run_config(cfg)
    record = json.loads(out.read_text())["federation"]["public"]
    assert record["n_public"] == len(public) == 269
    with np.load(tmp_path / "work" / "sites" / "shared.npz") as shared:
        U = shared["X_public"]
    raw = public.to_numpy(dtype=np.float64)
    np.testing.assert_allclose(U, (raw - raw.mean(0)) / raw.std(0), atol=1e-5)
    assert record["sha256"] == hashlib.sha256(U.tobytes()).hexdigest()
    assert record == simulated.federation["public"]
    assert not list((tmp_path / "work").rglob("*truth*"))
    assert deployed.final == simulated.final
    assert [d.accuracies for d in deployed.rounds] == [s.accuracies for s in simulated.rounds]
    assert _wait_gone(tmp_path / "work") == []
