"""``deploy prepare`` for XCLP's secure modes: each site gets its own identity key (0600,
never in the shared bundle), every site the roster and run id (in the shared file), and a
site reads its own key and checks it against the roster; a deployed run signs and checks
what the server relays, as the simulator does."""

from __future__ import annotations

import stat
from pathlib import Path

import numpy as np
import pytest

from fedlabels.core.errors import FedLabelsError
from fedlabels.engines.flower.prepare import prepare_run
from fedlabels.engines.flower.site import load_site
from fedlabels.runs.config import RunConfig

OPTIONS = {"secure": "ot", "lsh_bits": 16, "knn": 3, "labeled_fraction": 0.3,
           "test_points": 4}


def _cfg(secure: str = "ot") -> RunConfig:
    return RunConfig(method="xclp", dataset="breast_cancer", clients=3, model="dt", rounds=1,
                     period=1, seed=0, options={**OPTIONS, "secure": secure})


def test_prepare_gives_each_site_its_own_identity_key_and_everyone_the_roster(tmp_path):
    from fedlabels.secure.identity import Identity

    prepared = prepare_run(_cfg(), tmp_path / "run", with_truth=False)
    shared = dict(np.load(prepared.shared_path))
    assert list(shared["roster_ids"]) == [0, 1, 2] and shared["roster_keys"].shape == (3, 32)
    for cid, path in enumerate(prepared.identity_paths):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        private = path.read_bytes()
        assert Identity(private).public == shared["roster_keys"][cid].tobytes()
        assert all(private not in np.asarray(v).tobytes() for v in shared.values())
        node = prepared.node_settings(cid)
        assert node["identity-key"] == str(path)
        site = load_site(node)
        assert site.trust.cid == cid and site.trust.roster[cid] == Identity(private).public
    # secure=none needs no keys: none written, and the earlier prepare's are removed
    plain = prepare_run(_cfg("none"), tmp_path / "run", with_truth=False)
    assert plain.identity_paths == () and not list((tmp_path / "run").glob("*.identity.key"))
    assert "identity-key" not in plain.node_settings(0)
    assert "roster_ids" not in np.load(plain.shared_path)


def test_a_site_without_its_own_key_is_refused(tmp_path):
    prepared = prepare_run(_cfg(), tmp_path / "run", with_truth=False)
    node = prepared.node_settings(0)
    with pytest.raises(FedLabelsError, match="add identity-key="):
        load_site({k: v for k, v in node.items() if k != "identity-key"})
    with pytest.raises(FedLabelsError, match="not the roster's key for client 0"):
        load_site({**node, "identity-key": str(prepared.identity_paths[1])})
    prepared.identity_paths[0].chmod(0o644)
    with pytest.raises(FedLabelsError, match="accessible by others"):
        load_site(node)
    plain = prepare_run(_cfg("none"), tmp_path / "plain", with_truth=False)
    with pytest.raises(FedLabelsError, match="no roster"):
        load_site({**plain.node_settings(0), "identity-key": str(Path(node["identity-key"]))})


def test_a_deployed_xclp_run_signs_what_the_server_relays(tmp_path, monkeypatch):
    from fedlabels.engines.flower.loopback import loopback_deployment, server_context
    from fedlabels.engines.flower.server_app import run_server
    from fedlabels.secure.identity import Authenticator

    checked: list[tuple[int, int, str]] = []
    real = Authenticator.verify

    def verify(self, peer, purpose, *args):
        real(self, peer, purpose, *args)  # raises unless the signature holds
        checked.append((self.trust.cid, peer, purpose))

    monkeypatch.setattr(Authenticator, "verify", verify)
    prepared, grid = loopback_deployment(_cfg(), tmp_path / "sites")
    result = run_server(grid, server_context(prepared.spec))
    assert result is not None and result.extra["xclp"]["rowsum_members"] == [0, 1, 2]
    assert sorted(checked) == [(a, b, "x25519-key") for a in range(3) for b in range(3)
                               if a != b]
