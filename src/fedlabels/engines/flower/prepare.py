"""``fedlabels deploy prepare``: per-site data files and the Flower app of a deployed run.

For a registered dataset (or ``csv:PATH:TARGET``) this splits the data exactly as
``fedlabels run`` does for the same options and seed, and writes

* ``client_<i>.npz`` — site i's private ``X``, ``y`` (give each site only its own file);
* ``shared.npz`` — the public U, the test set, class and feature names (an image's pixel
  names as their (C, H, W) shape, ``pixel_names``: :func:`.site.names_arrays`), the
  standardisation of U and, with ``missing="public-median"``, U's median of each column
  (``fill``, from U's rows only: a site fills the gaps of its own raw rows with it); every
  site gets this one;
* ``client_<i>.identity.key`` — XCLP's secure modes and DP-FedAvg's / DP-PATE's secure
  aggregation: site i's Ed25519 identity key (0600;
  give each site only its own, never in the shared bundle); ``shared.npz`` then holds the
  roster (every site's identity public key) and the run id, so a site checks its peers'
  signed values against what it received out of band, never against a server message.
  The coordinator then holds every site's private key; with ``identity_public`` (the
  folder of the sites' own ``client_<i>.identity.pub``, :mod:`.site_keys`) the roster is
  built from those and no private key is made;
* ``client_<i>.plan.json`` — site i's own privacy plan (method, rounds, period, model, options:
  :mod:`.site_plan`; 0600, as the site's other files); its client obeys this file, not the
  coordinator's run config;
* ``truth.npz`` — the true labels of U, a simulator-style diagnostic that stays with the
  coordinator (a real deployment has no such file);
* ``app/pyproject.toml`` — the Flower app (``flwr run app <connection>``) whose run config
  carries the run settings to the ServerApp and every ClientApp.

This module does not import Flower.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fedlabels.core.errors import FedLabelsError
from fedlabels.core.files import write_atomic
from fedlabels.core.private_files import write_private, write_private_with
from fedlabels.core.threads import torch_threads
from fedlabels.engines.flower.site import names_arrays
from fedlabels.engines.flower.site_plan import plan_of
from fedlabels.engines.flower.spec import (
    RUN_CONFIG_KEY,
    DeploySpec,
    deploy_plan,
    reject_reproducible_noise,
    site_datasets,
)
from fedlabels.methods import get_method
from fedlabels.runs.config import RunConfig


@dataclass(frozen=True)
class PreparedRun:
    """Paths written by :func:`prepare_run`, and the spec its app carries."""

    root: Path
    client_paths: list[Path]
    shared_path: Path
    truth_path: Path
    app_dir: Path
    federation: dict[str, Any]
    spec: DeploySpec
    #: each site's client releases with its own noise and, without ``ledger-epsilon``, its
    #: ledger allows one run of its plan (:func:`~.site_privacy.charges_site_ledger`)
    one_run_budget: bool = False
    #: each site's identity key file, made here (XCLP's secure modes, secure aggregation;
    #: empty: the method needs none, or the sites made their own keys)
    identity_paths: tuple[Path, ...] = ()
    #: the fingerprint of the run id and the roster (None: no roster), for the sites to
    #: compare out of band and pin (node config ``roster-sha256``)
    roster_sha256: str | None = None
    #: each site's identity public key (the roster; empty: none)
    roster: dict[int, bytes] = field(default_factory=dict)

    def node_settings(self, cid: int) -> dict[str, int | str]:
        """Client ``cid``'s SuperNode node config, as Flower's ``context.node_config``."""
        identity = {"identity-key": str(self.identity_paths[cid])} if self.identity_paths else {}
        return {"partition-id": cid, "data-path": str(self.client_paths[cid]),
                "shared-path": str(self.shared_path), **identity,
                # the site makes this key (0600) on first use; it seals the client state
                "state-key": str(self.root / f"client_{cid}.state.key"),
                # snapshots of the client state, to rejoin after a restart or a resume
                "state-dir": str(self.root / f"client_{cid}.state"),
                # the site's lifetime privacy ledger and message record (kept across runs)
                "ledger-dir": str(self.root / f"client_{cid}.ledger"),
                # the site's own privacy plan (site_plan.py): its client obeys this file
                "privacy-plan": str(self.root / f"client_{cid}.plan.json")}

    def node_config(self, cid: int, **extra: Any) -> str:
        """The ``--node-config`` string of client ``cid``'s SuperNode, with ``extra`` keys
        (e.g. ``deploy local --site-config``) after the prepared ones."""
        return node_config_text({**self.node_settings(cid), **extra})


def node_config_text(settings: Mapping[str, Any]) -> str:
    """``settings`` as Flower's ``--node-config`` reads them: strings quoted, booleans
    ``true``/``false``, numbers as they are."""
    return " ".join(f'{k}="{v}"' if isinstance(v, str) else
                    f"{k}={str(v).lower() if isinstance(v, bool) else v}"
                    for k, v in settings.items())


def _save_npz(path: Path, arrays: dict[str, Any], private: bool = False) -> None:
    """Write ``arrays`` atomically; ``private``: mode 0600 in a 0700 folder (a site's data)."""
    if private:
        write_private_with(path, lambda fh: np.savez(fh, **arrays))
        return
    tmp = path.with_name(f".{path.name}.tmp.npz")
    np.savez(tmp, **arrays)
    os.replace(tmp, path)


#: what the coordinator's summary knows of the sites' private rows: each site's size and class
#: counts, U-vs-private distances measured on the pooled private rows (and U's true labels),
#: how many rows of a given U copy a labelled row, which columns have a gap in any row (the
#: sites', the test set's; shared.npz's fill is U's alone) and the SHA-256 of all the rows
#: the federation was built from (``data_sha256``); kept out of the app's
#: run config, which every site receives, in a file only the ServerApp reads ("a.b": key b
#: of a)
SITE_STATISTICS = ("client_sizes", "client_class_counts", "unlabeled_shift",
                   "public.copies_of_labelled_rows", "missing.columns", "data_sha256")


def split_summary(summary: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The federation summary as (what every site may read, the coordinator's record of
    :data:`SITE_STATISTICS`)."""
    shared = {k: dict(v) if isinstance(v, Mapping) else v for k, v in summary.items()}
    record: dict[str, Any] = {}
    for key in SITE_STATISTICS:
        outer, _, inner = key.partition(".")
        if not inner:
            if outer in shared:
                record[outer] = shared.pop(outer)
        elif isinstance(shared.get(outer), dict) and inner in shared[outer]:
            record.setdefault(outer, {})[inner] = shared[outer].pop(inner)
    return shared, record


def _public_pca_arrays(pre: Any) -> dict[str, np.ndarray]:
    """What a site needs to turn its raw CSV rows into U's principal components: the raw
    feature names, U's z-scoring (if any) and the projection (all public: from U alone)."""
    out = {"raw_feature_names": np.array(pre.feature_names, dtype=str),
           "pca_mean": pre.pca.mean, "pca_components": pre.pca.components,
           "pca_scale": pre.pca.scale}
    if pre.mean is not None:
        out["scale_mean"], out["scale_std"] = pre.mean, pre.std
    return out


def _validate(cfg: RunConfig, fed: Any, with_truth: bool) -> None:
    """Reject a configuration the method cannot run now, not after the processes started:
    the server role is built as the ServerApp will build it (with U's labels where the run
    has them) and checked."""
    from fedlabels.runs.session import build_server

    plan = deploy_plan(cfg, fed.n_classes, fed.n_features, fed.info.get("image_shape"))
    _, server = build_server(plan, n_public=len(fed.X_public),  # validates the learners too
                             client_sizes=[len(c) for c in fed.clients],
                             truth_public=fed.y_public if with_truth else None)
    server.preflight()  # e.g. DP-FedCT's noise-only labels: refused before any process


def _charges_site_ledger(cfg: RunConfig, fed: Any, data: Any) -> bool:
    """Whether a site's client role (site 0's, built as its ClientApp builds it under the
    plan ``prepare`` writes) charges the site's ledger, with a one-run plan budget."""
    from fedlabels.engines.flower.site_privacy import charges_site_ledger
    from fedlabels.runs.session import build_client_role

    plan = deploy_plan(cfg, fed.n_classes, fed.n_features, fed.info.get("image_shape"))
    role = build_client_role(plan, 0, data, X_public=fed.X_public, X_test=fed.X_test,
                             y_test=fed.y_test, scaling=fed.public_scaling)
    return charges_site_ledger(role)


def app_pyproject(spec: DeploySpec) -> str:
    """The Flower app's ``pyproject.toml``; the spec travels as one run-config string."""
    return f"""# Written by fedlabels. Start: flwr run <this directory> <connection> --stream
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "fedlabels-deploy"
version = "1.0.0"
description = "fedlabels {spec.config.method} on {spec.config.dataset}"
license = "Apache-2.0"
dependencies = ["fedlabels[flower]"]

[tool.flwr.app]
publisher = "fedlabels"

[tool.flwr.app.components]
serverapp = "fedlabels.engines.flower.server_app:app"
clientapp = "fedlabels.engines.flower.client_app:app"

[tool.flwr.app.config]
{RUN_CONFIG_KEY} = {json.dumps(spec.to_json())}
"""


def write_app(app_dir: Path, spec: DeploySpec) -> Path:
    app_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(app_dir / "pyproject.toml", app_pyproject(spec))
    return app_dir


def _sites_roster(method: Any, options: Any, n_clients: int,
                  identity_public: str | Path) -> dict[int, bytes]:
    """The roster of the sites' own public keys in ``identity_public`` (no private key is
    made), refused where the method has no identity keys."""
    from fedlabels.method.base import Settings

    settings = Settings(n_classes=2, n_clients=n_clients, options=options)
    if method.trusted_setup(settings, 0) is None:  # the setup of no client: makes no key
        raise FedLabelsError(f"--identity-public is for the identity keys of xclp and "
                             f"fedavg-xclp with --opt secure=ot|paillier, and of dp-fedavg "
                             f"and dp-pate with --opt aggregation=secure; {method.name} with "
                             "these options has none: remove --identity-public.")
    from fedlabels.engines.flower.site_keys import read_public_keys

    return read_public_keys(identity_public, n_clients)


def prepare_run(cfg: RunConfig, root: str | Path, *, output: str | Path | None = None,
                reply_timeout: float = 300.0, node_timeout: float = 120.0,
                poll_interval: float = 0.2, with_truth: bool = True,
                identity_public: str | Path | None = None,
                overwrite: bool = False) -> PreparedRun:
    """Split the data as ``fedlabels run`` would and write the site files and the app;
    ``identity_public``: the folder of the sites' own identity public keys (XCLP's secure
    modes), from which the roster is built (no private key is made); ``overwrite``: the
    app's run may replace a result at ``output`` (else its ServerApp refuses to)."""
    from fedlabels.runs.federation import federation_for

    reject_reproducible_noise(cfg)
    method = get_method(cfg.method)
    options = method.parse_options(cfg.options)  # unknown or invalid: before any data loads
    sites_roster = None if identity_public is None else \
        _sites_roster(method, options, cfg.clients, identity_public)  # before any data too
    root = Path(root).resolve()
    fed = federation_for(cfg)
    with_truth = with_truth and fed.y_public is not None  # a U of your own has no labels
    from fedlabels.learners.text_input import refuse_text

    refuse_text(fed.X_public, "fedlabels deploy (sites exchange numeric .npz files)",
                "run text datasets with `fedlabels run` (the simulator)")
    if fed.n_clients != cfg.clients:  # pragma: no cover - make_federation guarantees it
        raise FedLabelsError(f"expected {cfg.clients} partitions, got {fed.n_clients}.")
    datasets = site_datasets(method, fed.clients)  # centralized: refused
    _validate(cfg, fed, with_truth)  # before any file is written
    one_run_budget = _charges_site_ledger(cfg, fed, datasets[0])
    shared = {"X_public": fed.X_public, "X_test": fed.X_test, "y_test": fed.y_test,
              "class_names": np.array(fed.class_names, dtype=str),
              **names_arrays(fed.feature_names)}
    if fed.info.get("class_descriptions"):  # documented meanings: a site's CSV may use them
        shared["class_descriptions"] = np.array(fed.info["class_descriptions"], dtype=str)
    if cfg.public_pca is None:
        # the statistics that z-scored the sites' rows: the federation's own (one split, so
        # its partition column, unlabeled_shift, fill and task are the run's)
        scaling = fed.public_scaling
        if scaling is not None:
            shared["scale_mean"], shared["scale_std"] = scaling
    else:  # a site's raw CSV rows are z-scored by U, then projected onto U's components
        shared.update(_public_pca_arrays(fed.preprocessing))
    if fed.preprocessing is not None and fed.preprocessing.categorical:
        # a site's raw CSV rows one-hot encoded with U's categories, as the simulator's
        shared["raw_columns"] = np.array(fed.preprocessing.columns, dtype=str)
        shared["categorical"] = np.array(fed.preprocessing.categorical, dtype=str)
    if fed.preprocessing is not None and fed.preprocessing.fill is not None:
        shared["fill"] = fed.preprocessing.fill  # U's medians: a site's raw gaps alike
    if "image_shape" in fed.info:  # a site may bring its own image folder
        shared["image_shape"] = np.asarray(fed.info["image_shape"], dtype=np.int64)
        image = None if fed.preprocessing is None else fed.preprocessing.image
        if image is not None and image.get("peak") is not None:  # declared: a site's alike
            shared["image_peak"] = np.asarray(float(image["peak"]))
    root.mkdir(parents=True, exist_ok=True)
    plan = deploy_plan(cfg, fed.n_classes, fed.n_features, fed.info.get("image_shape"))
    if sites_roster is None:  # the out-of-band step, made here: every site's key
        trust = method.trusted_setup(plan.settings, len(datasets))
        roster, run_id = ({}, b"") if trust is None else (trust.roster, trust.run_id)
    else:  # the sites' own public keys and a fresh run id: no private key made here
        from fedlabels.core.randomness import token_bytes

        trust, roster, run_id = None, sites_roster, token_bytes(16)
    identity_paths = []
    fingerprint = None
    if roster:
        from fedlabels.secure.roster import roster_arrays, roster_fingerprint

        shared.update(roster_arrays(roster, run_id))
        fingerprint = roster_fingerprint(roster, run_id)
    client_paths = []
    for cid, data in enumerate(datasets):
        key = root / f"client_{cid}.identity.key"
        if trust is not None:  # the site's own, owner-only; the shared file has the roster
            write_private(key, trust.identities[cid].private_bytes())
            identity_paths.append(key)
        else:  # an earlier prepare's, in this folder: the sites' own keys replace it
            key.unlink(missing_ok=True)
        path = root / f"client_{cid}.npz"
        _save_npz(path, {"X": data.X, "y": data.y}, private=True)
        # given to site i alone, with its data: 0600 as its other files
        write_private(root / f"client_{cid}.plan.json",
                      (json.dumps(plan_of(cfg), indent=1) + "\n").encode())
        client_paths.append(path)
    shared_path = root / "shared.npz"
    _save_npz(shared_path, shared)
    truth_path = root / "truth.npz"
    if with_truth:  # the true labels of U: a diagnostic of deploy local only
        _save_npz(truth_path, {"y_public": fed.y_public}, private=True)
    else:
        truth_path.unlink(missing_ok=True)  # an earlier prepare's, in this folder
    summary = fed.summary()
    public_summary, site_statistics = split_summary(summary)
    record = root / "federation_record.json"
    write_private(record, json.dumps(site_statistics).encode())
    out = Path(output).resolve() if output else root / "result.json"
    spec = DeploySpec(run=cfg.to_dict(), output=str(out),
                      status=str(out.with_name(out.stem + ".status.json")),
                      truth=str(truth_path) if with_truth else "",
                      reply_timeout=reply_timeout, node_timeout=node_timeout,
                      poll_interval=poll_interval, threads=torch_threads(),
                      overwrite=overwrite,
                      extra={"federation": public_summary,
                             "federation_record": str(record)})
    app_dir = write_app(root / "app", spec)
    return PreparedRun(root, client_paths, shared_path, truth_path, app_dir, summary, spec,
                       one_run_budget, tuple(identity_paths), fingerprint, roster)
