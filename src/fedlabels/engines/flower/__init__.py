"""Flower engine: run any fedlabels method over real SuperLink / SuperNode processes.

The same server and client roles as the in-process simulator run here, unchanged:

* :mod:`.server_app` — a Flower ``ServerApp`` whose main loop calls ``server.run_round``
  through :class:`~.grid.FlowerGrid`, our ``Grid`` protocol on Flower's ``Grid``;
* :mod:`.client_app` — a Flower ``ClientApp`` that answers every message with the method's
  client role, loading the site's private data from its node config and keeping the role's
  state in ``context.state`` between messages;
* :mod:`.convert` — our :class:`~fedlabels.comm.Message` to and from Flower's
  ``RecordDict``;
* :mod:`.loopback` — a process-free Flower ``Grid`` for fast tests of the adapters;
* :mod:`.simulation` — the same apps on Flower's simulation engine (Ray,
  ``--engine flower-simulation``);
* :mod:`.site_state` seals the stored client state with the site's key.

Operating a deployment (``fedlabels deploy local``, certificates, the Fleet proxy, the
site's pinned executor) is :mod:`fedlabels.deploy`, above this package.

Flower is the optional extra ``fedlabels[flower]``; nothing outside this package imports it.
"""

from __future__ import annotations

from fedlabels.core.errors import FedLabelsError


def require_flwr() -> None:
    """Fail with an install hint when Flower is missing."""
    try:
        import flwr  # noqa: F401
    except ImportError:
        raise FedLabelsError(
            "the Flower engine needs the optional dependency flwr; install it with "
            "`pip install 'fedlabels[flower]'` (flwr==1.41.0).") from None


def require_simulation() -> None:
    """Fail with an install hint when Flower's simulation engine (flwr and Ray) is missing."""
    from importlib.util import find_spec

    missing = [name for name in ("flwr", "ray") if find_spec(name) is None]
    if missing:
        raise FedLabelsError(
            f"engine 'flower-simulation' needs the optional dependencies flwr[simulation] "
            f"({' and '.join(missing)} missing); install them with "
            "`pip install 'fedlabels[simulation]'` (flwr==1.41.0, ray==2.55.1).")
