"""``fedlabels deploy local | certs | prepare | resume | identity | roster | ledger``: Flower
deployments.

Importing this module does not import Flower; the commands do, when they run.
"""

from __future__ import annotations

import argparse
import math
import shutil
import tempfile
from pathlib import Path
from typing import Any

from fedlabels.cli.deploy_identity import add_identity_parsers
from fedlabels.cli.deploy_ledger import add_ledger_parser
from fedlabels.cli.deploy_resume import add_resume_parser
from fedlabels.cli.run_options import (
    add_metric_flag,
    checked_outputs,
    config_from_args,
    note_progress_metric,
    run_parser,
    show_table,
)
from fedlabels.core.errors import FedLabelsError

#: the longest any deploy timeout may be: one week. A site whose round takes longer, or a
#: ``deploy local`` run (one machine) that needs longer, is no deployment this tool makes
#: (an interrupted run continues with ``--resume``); 1e308 s was accepted, and ran until
#: "timestamp out of range for platform time_t" after the deployment had started
MAX_SECONDS = 7 * 24 * 3600


def seconds(text: str) -> float:
    """An argparse type: a number of seconds in (0, one week]."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0 < value <= MAX_SECONDS):
        raise argparse.ArgumentTypeError(f"give a number of seconds in (0, {MAX_SECONDS}] "
                                         f"(at most one week), got {text!r}")
    return value


def _add_deploy_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--reply-timeout", type=seconds, default=120.0,
                   help="seconds to wait for a client's reply before declaring it lost "
                        "(default 120; at most 604800, a week)")
    p.add_argument("--node-timeout", type=seconds, default=60.0,
                   help="seconds to wait for all SuperNodes to connect (default 60; at most "
                        "604800)")


def _site_settings(pairs: list[str]) -> dict[str, str]:
    """``--site-config KEY=VALUE`` pairs (checked by the launcher before anything starts)."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise FedLabelsError(f"--site-config takes KEY=VALUE (e.g. evaluate=false), got "
                                 f"{pair!r}.")
        if key.strip() in out and out[key.strip()] != value.strip():
            raise FedLabelsError(f"--site-config {key.strip()} given twice with different "
                                 "values; give it once.")
        out[key.strip()] = value.strip()
    return out


def cmd_deploy_local(args: argparse.Namespace) -> int:
    from fedlabels.core.files import writing
    from fedlabels.deploy.launcher import check_site_settings, deploy_local
    from fedlabels.results import privacy_line, site_ledgers_line

    cfg = config_from_args(args)
    settings = check_site_settings(_site_settings(args.site_config))  # before anything
    if args.resume and not args.workdir:
        raise FedLabelsError("--resume continues a run in its --workdir (its sites' saved "
                             "state is there); give the interrupted run's --workdir.")
    if args.workdir and Path(args.workdir).exists() and not Path(args.workdir).is_dir():
        # it failed after start-up, and "files and logs kept in" named the file
        raise FedLabelsError(f"--workdir {args.workdir} is a file, not a directory; give a "
                             "folder for the site files and logs.")
    # before anything is started; a resumed run updates its own files
    files = checked_outputs(cfg, args, models=False) if not args.resume else \
        _resumed_outputs(cfg)
    out = files["result"]
    temporary = args.workdir is None
    note_progress_metric(args)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="fedlabels-deploy-"))
    try:
        result = deploy_local(cfg, workdir=workdir, output=out,
                              site_settings=settings,
                              reply_timeout=args.reply_timeout, node_timeout=args.node_timeout,
                              timeout=args.timeout, secure=args.tls,
                              progress=not args.no_progress, database=args.database,
                              resume=args.resume, overwrite=args.overwrite)
    except BaseException:
        if temporary and not (workdir / "logs").exists():  # nothing was started
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"fedlabels: deployment files and logs kept in {workdir}")
            _say_how_to_resume(args, cfg, out, workdir)
        raise
    with writing(str(files["rounds table"])):
        result.save_csv(files["rounds table"], overwrite=True)
    if temporary:
        shutil.rmtree(workdir, ignore_errors=True)
    show_table(result, args.metric)
    for line in (privacy_line(result.extra.get("privacy") or {}),
                 site_ledgers_line(result.extra.get("privacy") or {})):
        if line:
            print(line)
    per_round = [r.seconds for r in result.rounds]
    print(f"\nresult: {out}  (rounds: {files['rounds table']}); mean wall time per round "
          f"{sum(per_round) / len(per_round):.1f} s over Flower")
    return 0


def _say_how_to_resume(args: argparse.Namespace, cfg: Any, out: Path, workdir: Path) -> None:
    """After a run that stopped with its checkpoint beside ``out`` (Ctrl-C, a timeout, lost
    sites), the flags that continue it: an interrupted run said only "interrupted"."""
    import shlex
    import sys

    from fedlabels.runs.checkpoint import checkpoint_path

    if not checkpoint_path(out).is_file():
        return  # no round completed: nothing to resume, a new run starts over
    flags = [] if args.resume else ["--resume"]
    if not args.workdir:
        flags += ["--workdir", str(workdir)]
    if not cfg.output:  # nor in --config's file
        flags += ["--output", str(out)]
    then = f"with {shlex.join(flags)} added" if flags else "again"
    print(f"fedlabels: its completed rounds are checkpointed beside {out}: the same command "
          f"{then} continues the run (docs/deployment.md, Crash and resume)",
          file=sys.stderr)


def _resumed_outputs(cfg: Any) -> dict[str, Path]:
    from fedlabels.core.files import result_path, run_outputs
    from fedlabels.runs.checkpoint import checkpoint_path

    if not cfg.output:
        raise FedLabelsError("--resume needs the interrupted run's --output (its checkpoint "
                             "is beside it).")
    files = run_outputs(result_path(cfg.output))
    if not checkpoint_path(files["result"]).is_file():
        raise FedLabelsError(f"cannot resume {files['result']}: there is no checkpoint "
                             f"{checkpoint_path(files['result'])} beside it (the ServerApp "
                             "writes one after every completed round).")
    del files["models file"]
    return files


def cmd_deploy_prepare(args: argparse.Namespace) -> int:
    from fedlabels.core.files import check_output_dir, check_outputs, result_path, run_inputs
    from fedlabels.engines.flower.prepare import prepare_run

    cfg = config_from_args(args)
    if cfg.output:  # the ServerApp writes it after every round, over whatever is there
        check_outputs({"result": result_path(cfg.output)},
                      run_inputs(cfg.dataset, args.config, cfg.public),
                      overwrite=args.overwrite)
    check_output_dir(Path(args.out_dir), "deployment files", overwrite=args.overwrite)
    prepared = prepare_run(cfg, args.out_dir, output=cfg.output,
                           reply_timeout=args.reply_timeout, node_timeout=args.node_timeout,
                           with_truth=not args.no_truth,
                           identity_public=args.identity_public, overwrite=args.overwrite)
    print(f"wrote {len(prepared.client_paths)} site files, {prepared.shared_path.name} and the "
          f"Flower app to {prepared.root}")
    for cid in range(len(prepared.client_paths)):
        print(f"  site {cid}: flower-supernode ... --node-config '{prepared.node_config(cid)}'")
    print(_paths_note(prepared))
    _show_roster(prepared)
    if prepared.one_run_budget:  # the sites' client roles release with their own noise
        print("  each site's privacy ledger allows one run of its plan; a site adds "
              "ledger-epsilon=E for a lifetime budget over several runs, and evaluate=false "
              "to send no test score (docs/deployment.md)")
    print(f"then: flwr run {prepared.app_dir} <connection> --stream")
    return 0


#: the node config's paths to files the coordinator sends a site, and to the site's own
#: private files (made there and kept across runs)
SENT_PATHS = ("data-path", "shared-path", "privacy-plan", "identity-key")
SITE_OWN_PATHS = ("state-key", "state-dir", "ledger-dir")


def _paths_note(prepared: Any) -> str:
    """What a site replaces in the printed node configs: every path is this machine's."""
    settings = prepared.node_settings(0)
    sent = ", ".join(k for k in SENT_PATHS if k in settings)
    own = ", ".join(k for k in SITE_OWN_PATHS if k in settings)
    return (f"  every path above is this machine's (under {prepared.root}): right for sites "
            f"on this machine only; a site on its own machine gives {sent} as where it keeps "
            f"the files you send it, and {own} as a private folder of its own, kept across "
            "runs (docs/deployment.md)")


def _show_roster(prepared: Any) -> None:
    """Who holds the identity keys, the sites' key fingerprints and the roster's."""
    if prepared.roster_sha256 is None:
        return
    if prepared.identity_paths:
        print("  this coordinator made every site's identity key (client_<i>.identity.key) "
              "and so holds every site's private key: the signatures do not protect the "
              "sites from it or from a server it runs; to keep the keys at the sites, each "
              "runs `fedlabels deploy identity` and you pass --identity-public DIR")
    else:
        print("  the roster holds the sites' own public keys (no private key was made here); "
              "check each against the fingerprint its site read to you:")
        from fedlabels.secure.roster import key_fingerprint

        for cid, key in sorted(prepared.roster.items()):
            print(f"    client {cid}: {key_fingerprint(key)}")
        print("  each site adds identity-key=<its client_<i>.identity.key> to its node config")
    print(f"  roster fingerprint: {prepared.roster_sha256}; each site prints its own copy's "
          "(`fedlabels deploy roster --shared shared.npz`), compares it with every other "
          "site over a channel this coordinator does not run, and pins it "
          "(roster-sha256=<fingerprint> in its node config)")


def cmd_deploy_certs(args: argparse.Namespace) -> int:
    try:
        from fedlabels.deploy.tls import existing_node_keys, make_node_keys, make_tls_files
    except ImportError:
        raise FedLabelsError("deploy certs needs the cryptography package; install "
                             "`pip install 'fedlabels[flower]'`.") from None

    if not 0 <= args.nodes <= 10_000:  # 10**30 nodes: a hang making keys (--days: tls.py)
        raise FedLabelsError(f"--nodes must lie in [0, 10000]; got {args.nodes}.")
    from fedlabels.core.files import check_output_dir
    from fedlabels.deploy.tls import has_ca

    check_output_dir(Path(args.out_dir), "certificates and keys",
                     overwrite=args.overwrite or args.force)
    # a new CA replacing the one every site trusts would cut the federation off: an existing
    # CA is kept (and signs the new server certificate) unless --force
    keep_ca = has_ca(args.out_dir) and not args.force
    tls = make_tls_files(args.out_dir, args.host, days=args.days, new_ca=not keep_ca)
    if keep_ca:
        print(f"kept the existing CA {tls.ca_cert} (pass --force to replace it: every site "
              "must then get the new ca.crt)")
    kept = [] if args.force else existing_node_keys(args.out_dir, args.nodes)
    keys = make_node_keys(args.out_dir, args.nodes, keep=not args.force)
    if kept:
        print(f"kept the existing node key pair(s) {', '.join(f'node_{i}' for i in kept)} "
              "(registered sites keep working; pass --force to replace them)")
    print(f"SuperLink: --ssl-certfile {tls.server_cert} --ssl-keyfile {tls.server_key} "
          f"--ssl-ca-certfile {tls.ca_cert} --enable-supernode-auth")
    print(f"every SuperNode and the flwr CLI: {tls.ca_cert} (keep {tls.ca_key} offline)")
    for i, (private, public) in enumerate(keys):
        print(f"  site {i}: --auth-supernode-private-key {private}; register "
              f"`flwr supernode register {public} <connection>`")
    return 0


def _fill_local(p: argparse.ArgumentParser) -> None:
    """``deploy local``'s flags after the run options."""
    _add_deploy_options(p)
    add_metric_flag(p)
    p.add_argument("--workdir", help="where site files, the app and process logs go (default: "
                                     "a temporary directory, removed after a successful run)")
    p.add_argument("--timeout", type=seconds, default=3600.0,
                   help="give up after this many seconds (default 3600; at most 604800)")
    p.add_argument("--tls", action="store_true",
                   help="TLS (fresh CA) and SuperNode authentication instead of --insecure")
    p.add_argument("--database", metavar="PATH",
                   help="the SuperLink keeps its state in this SQLite file (default: in memory)")
    p.add_argument("--site-config", metavar="KEY=VALUE", action="append", default=[],
                   help="a node config key every site adds (repeatable): ledger-epsilon=E "
                        "(a lifetime budget), ledger-delta=D, report-lifetime=true (the "
                        "result shows each ledger's lifetime), evaluate=false (send no test "
                        "score), threads=N; see docs/deployment.md")
    p.add_argument("--resume", action="store_true",
                   help="continue the run whose --output and --workdir are given from its last "
                        "completed round (after a ServerApp or SuperLink crash), with the same "
                        "options")
    p.set_defaults(func=cmd_deploy_local)


def _fill_prepare(p: argparse.ArgumentParser) -> None:
    """``deploy prepare``'s flags after the run options."""
    _add_deploy_options(p)
    p.add_argument("--out-dir", required=True, help="directory to write the files to")
    p.add_argument("--no-truth", action="store_true",
                   help="do not let the ServerApp read the true labels of U (diagnostic)")
    p.add_argument("--identity-public", metavar="DIR",
                   help="xclp/fedavg-xclp with --opt secure=ot|paillier: the folder of the "
                        "sites' own client_<i>.identity.pub (`fedlabels deploy identity`); "
                        "the roster is built from them and no private key is made (default: "
                        "make every site's key here, so this coordinator holds them all)")
    p.set_defaults(func=cmd_deploy_prepare)


def add_deploy_parser(sub: Any) -> None:
    """Register ``deploy local``, ``certs``, ``prepare``, ``resume``, ``identity``,
    ``roster`` and ``ledger``."""
    deploy = sub.add_parser("deploy", help="run on Flower SuperLink/SuperNodes (see "
                                           "docs/deployment.md)")
    dsub = deploy.add_subparsers(dest="deploy_command", required=True)

    run_parser(dsub, "local", _fill_local,
               help="a real Flower deployment on 127.0.0.1: one SuperLink, one SuperNode per "
                    "client; same options as `run`")

    p = dsub.add_parser("certs", help="make a CA, a SuperLink TLS certificate and SuperNode "
                                      "authentication keys")
    p.add_argument("--out-dir", required=True, help="directory to write the files to")
    p.add_argument("--host", action="append", required=True,
                   help="SuperLink host name or IP address the certificate is valid for "
                        "(repeatable)")
    p.add_argument("--nodes", type=int, default=0,
                   help="number of SuperNode key pairs to make (default 0)")
    p.add_argument("--days", type=int, default=365, help="certificate validity (default 365)")
    p.add_argument("--overwrite", action="store_true",
                   help="write into a non-empty --out-dir: a new server certificate and node "
                        "keys, signed by the CA already there (kept)")
    p.add_argument("--force", action="store_true",
                   help="also replace an existing CA (ca.crt, ca.key); every site must then "
                        "get the new ca.crt")
    p.set_defaults(func=cmd_deploy_certs)

    run_parser(dsub, "prepare", _fill_prepare, progress=False,  # it writes files, runs nothing
               help="write per-site data files, the shared public file and the Flower app "
                    "for a multi-machine run")

    add_resume_parser(dsub)
    add_identity_parsers(dsub)
    add_ledger_parser(dsub)
