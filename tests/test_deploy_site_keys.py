"""Identity keys the sites make themselves (``fedlabels deploy identity``), a roster built from
their public halves (``deploy prepare --identity-public``) and a site's pin of the roster
(node config ``roster-sha256``), against a coordinator that deviates.

The coordinator that makes the keys holds every site's private key and can sign as any
site. With site-made keys it holds none, but it still writes the roster: it can give one
site (the victim) a shared file in which another site's entry is a key of its own, and run
that peer itself. The replay below gives the victim exactly what it holds on Flower (its
``load_site`` trust from such a file): without a pin, the coordinator's peer signs its
X25519 key with its own key, the victim accepts it and the server gets every labelled
point's label of the victim; with the pin the sites compared, the victim refuses the file.
"""

from __future__ import annotations

import logging
import shutil
import stat
from pathlib import Path

import numpy as np
import pytest

from fedlabels.cli import main
from fedlabels.core.errors import FedLabelsError
from fedlabels.engines.flower.prepare import prepare_run
from fedlabels.engines.flower.site import load_site
from fedlabels.engines.flower.site_keys import make_site_identity, unpinned_roster_warning
from fedlabels.runs.config import RunConfig
from fedlabels.secure.identity import Identity
from fedlabels.secure.roster import (
    key_fingerprint,
    parse_public_key,
    public_key_text,
    roster_arrays,
    roster_fingerprint,
)

OPTIONS = {"secure": "ot", "lsh_bits": 16, "knn": 3, "labeled_fraction": 0.3,
           "test_points": 4}


def _cfg(secure: str = "ot", method: str = "xclp") -> RunConfig:
    options = {**OPTIONS, "secure": secure} if method == "xclp" else {}
    return RunConfig(method=method, dataset="breast_cancer", clients=3, model="dt", rounds=1,
                     period=1, seed=0, options=options)


def _sites(tmp_path: Path, n: int = 3) -> tuple[list[Path], Path]:
    """Each site's own key (in its own folder) and the coordinator's folder of the .pub
    files the sites sent."""
    keys, pubs = [], tmp_path / "received"
    pubs.mkdir()
    for cid in range(n):
        made = make_site_identity(tmp_path / f"site{cid}", cid)
        shutil.copy(made.public, pubs / made.public.name)
        keys.append(made.key)
    return keys, pubs


def _node(prepared, cid: int, key: Path, **extra) -> dict:
    return {**prepared.node_settings(cid), "identity-key": str(key), **extra}


# ------------------------------------------------------------------ the site's own key


def test_a_site_makes_its_own_key_and_never_replaces_it(tmp_path, capsys):
    out = tmp_path / "site"
    assert main(["deploy", "identity", "--out-dir", str(out), "--client-id", "2"]) == 0
    key, pub = out / "client_2.identity.key", out / "client_2.identity.pub"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert stat.S_IMODE(out.stat().st_mode) == 0o700  # made here, owner-only
    private = key.read_bytes()
    public = Identity(private).public
    text = pub.read_text()
    assert parse_public_key(text, "pub") == (2, public)
    assert private not in pub.read_bytes() and private.hex() not in text
    assert key_fingerprint(public) in capsys.readouterr().out
    # a second run, or one that finds only the .pub, is refused and changes nothing
    for leave in ("both", "pub only"):
        if leave == "pub only":
            key.unlink()
        assert main(["deploy", "identity", "--out-dir", str(out), "--client-id", "2"]) == 2
        assert "refusing to overwrite" in capsys.readouterr().err
        assert pub.read_text() == text and key.exists() == (leave == "both")
    assert main(["deploy", "identity", "--out-dir", str(out), "--client-id", "-1"]) == 2


def test_write_new_refuses_an_existing_file_and_leaves_no_temporary(tmp_path):
    from fedlabels.core.files import write_new

    path = write_new(tmp_path / "k", b"first", "the key", private=True)
    with pytest.raises(FedLabelsError, match=r"the key .* exists; refusing"):
        write_new(path, b"second", "the key", private=True)
    assert path.read_bytes() == b"first" and sorted(p.name for p in tmp_path.iterdir()) == ["k"]


# ---------------------------------------------------------- prepare from public keys


def test_prepare_from_the_sites_public_keys_makes_no_private_key(tmp_path):
    keys, pubs = _sites(tmp_path)
    root = tmp_path / "coordinator"
    made_here = prepare_run(_cfg(), root, with_truth=False)  # an earlier prepare's keys ...
    assert len(list(root.glob("*.identity.key"))) == 3
    prepared = prepare_run(_cfg(), root, with_truth=False, identity_public=pubs)
    assert not list(root.rglob("*.identity.key"))  # ... are gone, and none was made
    assert prepared.identity_paths == () and "identity-key" not in prepared.node_settings(0)
    secrets = [k.read_bytes() for k in keys] + \
        [p.read_bytes() for p in made_here.identity_paths if p.exists()]
    for path in [p for p in root.rglob("*") if p.is_file()]:  # every file the coordinator has
        data = path.read_bytes()
        for secret in secrets:
            assert secret not in data and secret.hex().encode() not in data, path
    shared = dict(np.load(prepared.shared_path))
    sent = {cid: parse_public_key((pubs / f"client_{cid}.identity.pub").read_text(), "")[1]
            for cid in range(3)}
    assert {int(c): k.tobytes() for c, k in zip(shared["roster_ids"], shared["roster_keys"],
                                                strict=True)} == sent
    assert prepared.roster_sha256 == roster_fingerprint(sent, shared["run_id"].tobytes())
    for cid in range(3):  # every site loads its own key against the roster it pinned
        site = load_site(_node(prepared, cid, keys[cid],
                               **{"roster-sha256": prepared.roster_sha256.upper()}))
        assert site.trust.roster == sent and site.trust.identity.public == sent[cid]


def test_a_deployed_run_with_site_made_keys_signs_what_the_server_relays(tmp_path,
                                                                        monkeypatch, caplog):
    from fedlabels.engines.flower.client_app import app as deployed_client_app
    from fedlabels.engines.flower.loopback import LoopbackGrid, server_context
    from fedlabels.engines.flower.server_app import run_server
    from fedlabels.engines.flower.spec import RUN_CONFIG_KEY
    from fedlabels.secure.identity import Authenticator

    checked: list[tuple[int, int]] = []
    real = Authenticator.verify

    def verify(self, peer, purpose, *args):
        real(self, peer, purpose, *args)  # raises unless the signature holds
        checked.append((self.trust.cid, peer))

    monkeypatch.setattr(Authenticator, "verify", verify)
    keys, pubs = _sites(tmp_path)
    prepared = prepare_run(_cfg(), tmp_path / "coordinator", reply_timeout=5.0,
                           node_timeout=2.0, poll_interval=0.0, with_truth=False,
                           identity_public=pubs)
    nodes = [_node(prepared, c, keys[c], **{"roster-sha256": prepared.roster_sha256})
             for c in range(3)]
    grid = LoopbackGrid(deployed_client_app, nodes, {RUN_CONFIG_KEY: prepared.spec.to_json()})
    with caplog.at_level(logging.WARNING, logger="fedlabels.site"):
        result = run_server(grid, server_context(prepared.spec))
    assert result is not None and result.extra["xclp"]["rowsum_members"] == [0, 1, 2]
    assert sorted(checked) == [(a, b) for a in range(3) for b in range(3) if a != b]
    assert _unpinned_warnings(caplog) == [0, 0, 0]  # pinned: no warning


def _unpinned_warnings(caplog) -> list[int]:
    """How often each site's log said it has no roster pin."""
    said = [r.getMessage() for r in caplog.records if "no roster-sha256" in r.getMessage()]
    return [sum(f"partition-id={c} " in m for m in said) for c in range(3)]


def test_a_site_without_a_pin_says_so_once_per_run(tmp_path, caplog):
    """A site that loads a roster without roster-sha256 warns in its log at the first
    message of each run (not at every message: load_site runs for each), saying how to pin
    (a pinned site says nothing: the deployed run above)."""
    from fedlabels.engines.flower.client_app import app as deployed_client_app
    from fedlabels.engines.flower.loopback import LoopbackGrid, server_context
    from fedlabels.engines.flower.server_app import run_server
    from fedlabels.engines.flower.spec import RUN_CONFIG_KEY

    keys, pubs = _sites(tmp_path)
    prepared = prepare_run(_cfg(), tmp_path / "coordinator", reply_timeout=5.0,
                           node_timeout=2.0, poll_interval=0.0, with_truth=False,
                           identity_public=pubs, overwrite=True)  # run twice on purpose
    nodes = [_node(prepared, c, keys[c]) for c in range(3)]
    for _ in range(2):  # two runs of the same sites, each a new Flower run
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="fedlabels.site"):
            grid = LoopbackGrid(deployed_client_app, nodes,
                                {RUN_CONFIG_KEY: prepared.spec.to_json()})
            assert run_server(grid, server_context(prepared.spec)) is not None
        assert _unpinned_warnings(caplog) == [1, 1, 1]
    assert "fedlabels deploy roster --shared FILE" in caplog.text
    assert "every labelled point's label of this site's XCLP rows" in caplog.text
    assert unpinned_roster_warning(True, {"roster-sha256": "0" * 64}, "stake") is None
    assert unpinned_roster_warning(False, {}, "stake") is None


def _pub(tmp_path: Path, cid: int, text: str | bytes) -> None:
    path = tmp_path / "received" / f"client_{cid}.identity.pub"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())


@pytest.mark.parametrize("change, error", [
    (lambda t: (t / "received" / "client_1.identity.pub").unlink(),
     r"no public key for client\(s\) \[1\]"),
    (lambda t: shutil.copy(t / "received" / "client_0.identity.pub",
                           t / "received" / "client_2.identity.pub"),
     "holds the key of client 0, not of client 2"),
    (lambda t: _pub(t, 2, (t / "received" / "client_0.identity.pub").read_text()
                    .replace("client=0", "client=2")),
     "clients 0 and 2 sent the same public key"),
    (lambda t: _pub(t, 1, "fedlabels-identity client=1 ed25519=abcd\n"),
     "is not a site's identity public key"),
    (lambda t: _pub(t, 1, b"\xff" * 40), "is not a site's identity public key"),
    (lambda t: _pub(t, 1, "x" * 2000), "over 1024 bytes"),
    (lambda t: _pub(t, 1, public_key_text(1, bytes(range(32))) + "extra\n"),
     "is not a site's identity public key"),
    (lambda t: _pub(t, 5, (t / "received" / "client_0.identity.pub").read_text()),
     "holds client_5.identity.pub but the run has 3 clients"),
    # 32 bytes that cryptography's from_public_bytes takes: the identity (small order: any
    # signature R = identity, S = 0 verifies), y = p (not canonical), y = 2 (no point)
    (lambda t: _pub(t, 1, public_key_text(1, b"\x01" + bytes(31))),
     r"is not a valid Ed25519 public key \(of small order"),
    (lambda t: _pub(t, 1, public_key_text(1, (2**255 - 19).to_bytes(32, "little"))),
     r"is not a valid Ed25519 public key \(not canonical"),
    (lambda t: _pub(t, 1, public_key_text(1, b"\x02" + bytes(31))),
     r"is not a valid Ed25519 public key \(not a point"),
    (lambda t: shutil.copy(t / "site1" / "client_1.identity.key", t / "received"),
     "holds client_1.identity.key, a site's private identity key"),
    (lambda t: shutil.rmtree(t / "received"), "is not a directory"),
])
def test_bad_public_keys_are_refused_before_anything_is_written(tmp_path, change, error):
    _, pubs = _sites(tmp_path)
    change(tmp_path)
    with pytest.raises(FedLabelsError, match=error) as info:
        prepare_run(_cfg(), tmp_path / "coordinator", with_truth=False, identity_public=pubs)
    assert "\n" not in str(info.value) and not (tmp_path / "coordinator").exists()


@pytest.mark.parametrize("method, secure", [("xclp", "none"), ("fedct", None)])
def test_public_keys_for_a_run_without_identity_keys_are_refused(tmp_path, method, secure):
    _, pubs = _sites(tmp_path)
    with pytest.raises(FedLabelsError, match=f"{method} with these options has none: remove "
                                             "--identity-public") as info:
        prepare_run(_cfg(secure or "ot", method), tmp_path / "c", identity_public=pubs)
    # the secure aggregation of dp-fedavg and dp-pate takes identity keys too: named
    assert "dp-fedavg and dp-pate with --opt aggregation=secure" in str(info.value)


def test_the_command_line_says_who_holds_the_keys(tmp_path, capsys):
    _, pubs = _sites(tmp_path)
    run = ["deploy", "prepare", "--method", "xclp", "--dataset", "breast_cancer", "--clients",
           "3", "--model", "dt", "--rounds", "1", "--seed", "0", "--no-truth", "--opt",
           "secure=ot", "--opt", "lsh_bits=16", "--opt", "knn=3"]
    assert main([*run, "--out-dir", str(tmp_path / "made")]) == 0
    out = capsys.readouterr().out
    assert "this coordinator made every site's identity key" in out
    assert "holds every site's private key" in out
    assert main([*run, "--out-dir", str(tmp_path / "theirs"), "--identity-public",
                 str(pubs)]) == 0
    out = capsys.readouterr().out
    assert "no private key was made here" in out and "holds every" not in out
    fingerprint = roster_fingerprint(*_roster_of(tmp_path / "theirs" / "shared.npz"))
    assert f"roster fingerprint: {fingerprint}" in out
    assert main(["deploy", "roster", "--shared", str(tmp_path / "theirs" / "shared.npz"),
                 "--public", str(pubs / "client_2.identity.pub")]) == 0
    out = capsys.readouterr().out
    assert f"\n  {fingerprint}\n" in out and "2: key " in out and "(this site's own key)" in out
    assert main(["deploy", "prepare", *run[2:], "--out-dir", str(tmp_path / "x"),
                 "--identity-public", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert "is not a directory" in err and err.count("\n") == 1


def _roster_of(path: Path) -> tuple[dict[int, bytes], bytes]:
    from fedlabels.secure.roster import read_roster

    return read_roster(dict(np.load(path)))


# ----------------------------------------------------------- the site pins the roster


def test_the_roster_fingerprint_binds_the_run_id_and_every_entry_not_their_order():
    roster = {c: Identity().public for c in range(3)}
    run_id = bytes(16)
    fp = roster_fingerprint(roster, run_id)
    assert fp == roster_fingerprint(dict(reversed(list(roster.items()))), run_id)
    assert fp != roster_fingerprint(roster, bytes(15) + b"\1")
    assert fp != roster_fingerprint({**roster, 1: Identity().public}, run_id)
    assert fp != roster_fingerprint({0: roster[0], 1: roster[1]}, run_id)
    assert fp != roster_fingerprint({0: roster[0], 1: roster[2], 2: roster[1]}, run_id)


def test_a_sites_own_public_file_is_read_within_the_coordinators_limits(tmp_path, capsys):
    """deploy roster --public read the site's .pub on its own terms: a named pipe was read
    (and /dev/zero until memory ran out), and a key line padded past 1024 bytes, which the
    coordinator refuses, was taken. It now reads it as the coordinator reads the sites'."""
    import os
    import threading

    _, pubs = _sites(tmp_path)
    prepared = prepare_run(_cfg(), tmp_path / "c", with_truth=False, identity_public=pubs)
    roster = ["deploy", "roster", "--shared", str(prepared.shared_path), "--public"]
    line = (pubs / "client_1.identity.pub").read_text()
    padded = tmp_path / "padded.pub"
    padded.write_text(line + " " * 2000)
    assert main([*roster, str(padded)]) == 2
    err = capsys.readouterr().err.strip()
    assert f"--public {padded} is not a site's identity public key (over 1024 bytes)" in err
    pipe = tmp_path / "pipe.pub"
    os.mkfifo(pipe)
    writer = threading.Thread(target=lambda: pipe.write_text(line), daemon=True)
    writer.start()  # it writes the key once a reader opens the pipe
    try:
        assert main([*roster, str(pipe)]) == 2
    finally:
        os.close(os.open(pipe, os.O_RDONLY | os.O_NONBLOCK))  # lets the writer end
        writer.join(5)
    err = capsys.readouterr().err.strip()
    assert "the public key" in err and str(pipe) in err and "\n" not in err
    assert main([*roster, str(pubs / "client_1.identity.pub")]) == 0  # the file itself


def _equivocated(prepared, tmp_path: Path, entry: int) -> tuple[Path, Identity]:
    """The coordinator's shared file for one site: client ``entry``'s roster key replaced
    by a key of the coordinator's own (the run id and everything else as prepared)."""
    shared = dict(np.load(prepared.shared_path))
    roster, run_id = _roster_of(prepared.shared_path)
    own = Identity()
    shared.update(roster_arrays({**roster, entry: own.public}, run_id))
    path = tmp_path / "victims_shared.npz"
    np.savez(path, **shared)
    return path, own


def test_a_site_refuses_a_roster_that_swapped_its_own_key(tmp_path, capsys):
    """Given to every site alike, such a roster has one fingerprint for all, so the pin does
    not catch it: the site whose entry it replaced does, when it checks the roster before
    agreeing (``deploy roster --public``) and again when its SuperNode loads it."""
    keys, pubs = _sites(tmp_path)
    prepared = prepare_run(_cfg(), tmp_path / "c", with_truth=False, identity_public=pubs)
    forged, _ = _equivocated(prepared, tmp_path, entry=0)
    roster = ["deploy", "roster", "--shared", str(forged), "--public"]
    assert main([*roster, str(pubs / "client_0.identity.pub")]) == 2
    assert "does not hold this site's key" in capsys.readouterr().err
    assert main([*roster, str(pubs / "client_1.identity.pub")]) == 0  # another site's is there
    assert "client 1: key" in capsys.readouterr().out
    with pytest.raises(FedLabelsError, match="site 0's identity key is not the roster's key "
                                             "for client 0"):
        load_site(_node(prepared, 0, keys[0], **{"shared-path": str(forged)}))


@pytest.mark.parametrize("secure", ["ot", "paillier"])
def test_a_peer_entry_swapped_by_the_coordinator_is_caught_by_the_pin(tmp_path, secure):
    """The coordinator hands the victim (site 0) a shared file in which client 1's key is
    its own, and runs client 1 itself. Site 1 holds the genuine file, so the fingerprint the
    sites compared (site 1's, and the coordinator's own printout) is the genuine roster's:
    the victim's pin refuses the forged file. Without the pin the victim loads it, accepts
    the coordinator's peer's signed X25519 key, and the server gets every labelled point's
    label of the victim."""
    from fedlabels.propagation.core import one_hot
    from test_xclp_dropout_leak import SpyServer, _columns
    from test_xclp_sybil import _clients

    keys, pubs = _sites(tmp_path, n=2)
    cfg = RunConfig(method="xclp", dataset="breast_cancer", clients=2, model="dt", rounds=1,
                    period=1, seed=0, options={**OPTIONS, "secure": secure})
    prepared = prepare_run(cfg, tmp_path / "c", with_truth=False, identity_public=pubs)
    genuine = load_site(_node(prepared, 1, keys[1]))  # site 1's copy ...
    compared = roster_fingerprint(genuine.trust.roster, genuine.trust.run_id)
    assert compared == prepared.roster_sha256  # ... and the coordinator's printout agree
    forged, own = _equivocated(prepared, tmp_path, entry=1)
    victim_node = _node(prepared, 0, keys[0], **{"shared-path": str(forged)})
    with pytest.raises(FedLabelsError, match=f"fingerprint [0-9a-f]{{64}}, not the pinned "
                                             f"roster-sha256 {compared}"):
        load_site({**victim_node, "roster-sha256": compared})
    # without a pin: what the victim holds, and the coordinator's own peer as client 1
    victim = load_site(victim_node).trust
    assert victim.roster[1] == own.public and victim.roster[0] == genuine.trust.roster[0]
    from fedlabels.secure.identity import SiteTrust

    sybil_trust = SiteTrust(1, own, victim.roster, victim.run_id)
    clients, opts = _clients(secure, (60, 90), {0: victim, 1: sybil_trust})
    from fedlabels.engines.inprocess import CommMeter, InProcessGrid

    server = SpyServer(opts, 10)
    out = server.run(InProcessGrid(clients, CommMeter()), 0, list(clients), session=0)
    assert out.rowsum_members == [0, 1]  # the victim accepted the coordinator's peer
    held, sybil = server.held, clients[1]
    cols, rows = _columns(held), held.rows[1]
    Z = sybil.xclp_scores * sybil.xclp_class_counts
    mine = held.S_L[np.ix_(rows, cols[1])] @ one_hot(
        sybil.xclp_partial_labels()[held.labeled_idx[1]], 10)
    A = held.S_L[np.ix_(rows, cols[0])]
    recovered = np.linalg.lstsq(A, Z - mine, rcond=None)[0].argmax(axis=1)
    true = clients[0].xclp_partial_labels()[held.labeled_idx[0]]
    assert len(true) >= 10 and np.array_equal(recovered, true)


def test_a_bad_pin_or_a_pin_without_a_roster_is_refused(tmp_path):
    keys, pubs = _sites(tmp_path)
    prepared = prepare_run(_cfg(), tmp_path / "c", with_truth=False, identity_public=pubs)
    node = _node(prepared, 0, keys[0])
    for bad in ("", "abc", prepared.roster_sha256 + "0", "g" * 64):
        with pytest.raises(FedLabelsError, match="roster-sha256 must be a roster fingerprint"):
            load_site({**node, "roster-sha256": bad})
    plain = prepare_run(_cfg("none"), tmp_path / "plain", with_truth=False)
    with pytest.raises(FedLabelsError, match="names roster-sha256 but the shared file has no "
                                             "roster"):
        load_site({**plain.node_settings(0), "roster-sha256": prepared.roster_sha256})
    with pytest.raises(FedLabelsError, match="did you mean 'roster-sha256'"):
        load_site({**node, "roster_sha256": prepared.roster_sha256})


@pytest.mark.parametrize("method, options", [
    ("dp-pate", {"aggregation": "secure", "noise_sigma": 4.0, "queries": 10,
                 "query_selection": "random", "min_group": 3}),
    ("dp-fedavg", {"noise": "discrete", "aggregation": "secure", "noise_multiplier": 1.0,
                   "min_group": 3})])
def test_an_unpinned_secure_aggregation_site_names_what_its_method_stakes(
        tmp_path, caplog, method, options):
    """The warning of a site without a pin names what the coordinator gets from the method
    the site runs: under secure aggregation its own noisy share, not XCLP rows."""
    from fedlabels.engines.flower.loopback import loopback_deployment, server_context
    from fedlabels.engines.flower.server_app import run_server
    from fedlabels.methods import get_method

    cfg = RunConfig(method=method, dataset="breast_cancer", clients=3, rounds=1, period=1,
                    seed=0, model="mlp(hidden=4)" if method == "dp-fedavg" else "dt",
                    options=options)
    prepared, grid = loopback_deployment(cfg, tmp_path / "sites")
    with caplog.at_level(logging.WARNING, logger="fedlabels.site"):
        assert run_server(grid, server_context(prepared.spec)) is not None
    said = [r.getMessage() for r in caplog.records if "no roster-sha256" in r.getMessage()]
    assert len(said) == 3
    stake = get_method(method).roster_stake
    assert all(stake in m and "XCLP" not in m for m in said), said
    assert "noise share" in stake and stake != get_method("xclp").roster_stake
