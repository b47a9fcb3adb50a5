"""``fedlabels deploy identity`` and ``deploy roster``: a site's own identity key, and the
fingerprint of the roster a shared file holds (XCLP's secure modes on Flower).

Importing this module does not import Flower.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from fedlabels.core.errors import FedLabelsError


def cmd_deploy_identity(args: argparse.Namespace) -> int:
    from fedlabels.engines.flower.site_keys import make_site_identity

    made = make_site_identity(Path(args.out_dir), args.client_id)
    print(f"wrote this site's identity key {made.key} (0600: keep it here; the node config's "
          f"identity-key) and its public key {made.public}")
    print(f"send {made.public.name} to the coordinator and read it this fingerprint over "
          f"another channel (phone, in person):\n  {made.fingerprint}")
    return 0


def cmd_deploy_roster(args: argparse.Namespace) -> int:
    from fedlabels.core.npz_size import check_inflated_size
    from fedlabels.secure.roster import key_fingerprint, read_roster, roster_fingerprint

    path = Path(args.shared).expanduser()
    if not path.is_file():
        raise FedLabelsError(f"--shared {path} is not a file; give the site's shared.npz.")
    check_inflated_size(path, "the shared file")
    import numpy as np

    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in ("roster_ids", "roster_keys", "run_id")
                      if k in data.files}
    except (OSError, ValueError) as exc:
        raise FedLabelsError(f"cannot read {path} as an .npz file ({exc}).") from None
    if "roster_ids" not in arrays or "roster_keys" not in arrays:
        raise FedLabelsError(f"{path} holds no roster (only xclp and fedavg-xclp with "
                             "--opt secure=ot|paillier have one).")
    roster, run_id = read_roster(arrays, str(path))
    mine = _own_entry(Path(args.public).expanduser(), roster) if args.public else None
    print(f"roster fingerprint of {path} (run id {run_id.hex()}, {len(roster)} sites):")
    print(f"  {roster_fingerprint(roster, run_id)}")
    for cid in sorted(roster):
        print(f"  client {cid}: key {key_fingerprint(roster[cid])}"
              + ("  (this site's own key)" if cid == mine else ""))
    print("compare the fingerprint with every other site over a channel the coordinator does "
          "not run" + ("" if mine is not None else ", check your own key's line (or give "
                       "--public)") + ", then pin it: roster-sha256=<fingerprint> in the node "
          "config.")
    return 0


def _own_entry(public: Path, roster: dict[int, bytes]) -> int:
    """The site's client id, refused unless the roster holds its public key at that id (the
    file read as the coordinator reads the sites' files: :func:`~.site_keys.read_public_file`)."""
    from fedlabels.engines.flower.site_keys import read_public_file

    cid, key = read_public_file(public, where=f"--public {public}")
    if roster.get(cid) != key:
        raise FedLabelsError(f"the roster does not hold this site's key ({public}) at client "
                             f"{cid}; refusing: do not pin it, and ask the coordinator why.")
    return cid


def add_identity_parsers(dsub: Any) -> None:
    """Register ``deploy identity`` and ``deploy roster``."""
    p = dsub.add_parser("identity", help="make this site's own XCLP identity key (the private "
                                         "key stays here; send the .pub to the coordinator)")
    p.add_argument("--out-dir", required=True,
                   help="where to write client_<I>.identity.key (0600) and .identity.pub; an "
                        "existing file is never replaced")
    p.add_argument("--client-id", type=int, required=True, metavar="I",
                   help="this site's client index (its node config's partition-id)")
    p.set_defaults(func=cmd_deploy_identity)
    p = dsub.add_parser("roster", help="print the fingerprint of the roster in a shared file, "
                                       "to compare with the other sites and pin")
    p.add_argument("--shared", required=True, metavar="FILE",
                   help="the shared.npz the coordinator sent this site")
    p.add_argument("--public", metavar="FILE",
                   help="this site's own client_<I>.identity.pub: refused unless the roster "
                        "holds that key at client I")
    p.set_defaults(func=cmd_deploy_roster)
