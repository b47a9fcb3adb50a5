"""A roster's keys are checked when the roster is read, not each when it is first used: a
shared file whose roster holds a key that is no valid Ed25519 public key (of small order,
under which anyone can sign; not canonical; no point of the curve), a negative or repeated
client id or an empty run id is refused in one line naming the file, the entry and what is
wrong, by a site loading it and by ``deploy roster``. Before, such a file loaded, and the
key was refused only when a message of that peer was verified (``test_ed25519_point``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from conftest import cli_one_line_error
from fedlabels.core.errors import FedLabelsError
from fedlabels.engines.flower.prepare import prepare_run
from fedlabels.engines.flower.site import load_site
from fedlabels.runs.config import RunConfig
from fedlabels.secure.ed25519_point import P, key_problem
from fedlabels.secure.identity import Identity
from fedlabels.secure.roster import read_roster, roster_arrays

#: the identity point (order 1): OpenSSL verifies a forged signature under it
SMALL_ORDER = bytes.fromhex("01" + "00" * 31)
NON_CANONICAL = (P + 1).to_bytes(32, "little")  # y = 1 written as y + p
OFF_CURVE = next(k for k in ((2 + i).to_bytes(32, "little") for i in range(100))
                 if key_problem(k) == "not a point of the curve")
BAD_KEYS = {"small order": SMALL_ORDER, "not canonical": NON_CANONICAL,
            "not a point of the curve": OFF_CURVE}


def _arrays(peer_key: bytes, run_id: bytes = b"r" * 16) -> dict[str, np.ndarray]:
    return roster_arrays({0: Identity().public, 1: peer_key, 2: Identity().public}, run_id)


@pytest.mark.parametrize("problem", list(BAD_KEYS))
def test_each_key_is_checked_when_the_roster_is_read(problem: str) -> None:
    with pytest.raises(FedLabelsError) as err:
        read_roster(_arrays(BAD_KEYS[problem]), "shared.npz")
    line = str(err.value)
    assert "\n" not in line and line.startswith("shared.npz: ")
    assert "client 1 (entry 1" in line and problem in line and "client_1.identity.pub" in line


@pytest.mark.parametrize("change, match", [
    ({"roster_ids": np.array([0, -1, 2])}, "distinct client id"),
    ({"roster_ids": np.array([0, 0, 2])}, "distinct client id"),
    ({"run_id": np.zeros(0, dtype=np.uint8)}, "run id is empty"),
])
def test_ids_and_the_run_id_are_checked_too(change: dict, match: str) -> None:
    arrays = {**_arrays(Identity().public), **change}
    with pytest.raises(FedLabelsError, match=match) as err:
        read_roster(arrays, "shared.npz")
    assert "\n" not in str(err.value)


def test_a_site_and_deploy_roster_refuse_a_peers_bad_key_at_once(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = RunConfig(method="xclp", dataset="breast_cancer", clients=3, model="dt", rounds=1,
                    period=1, seed=0, options={"secure": "ot", "lsh_bits": 16, "knn": 3,
                                               "labeled_fraction": 0.3, "test_points": 4})
    prepared = prepare_run(cfg, tmp_path / "c", with_truth=False)
    shared = dict(np.load(prepared.shared_path))
    roster, run_id = read_roster(shared)
    shared.update(roster_arrays({**roster, 1: SMALL_ORDER}, run_id))
    forged = tmp_path / "forged.npz"
    np.savez(forged, **shared)
    with pytest.raises(FedLabelsError) as err:
        load_site({**prepared.node_settings(0), "shared-path": str(forged)})
    line = str(err.value)
    assert "\n" not in line and f"shared-path {forged}" in line
    assert "client 1 (entry 1" in line and "small order" in line
    err_line = cli_one_line_error(capsys, ["deploy", "roster", "--shared", str(forged)])
    assert str(forged) in err_line and "small order" in err_line
